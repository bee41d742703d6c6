# Empty dependencies file for test_cpu.
# This may be replaced when dependencies are built.
