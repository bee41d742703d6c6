# Empty dependencies file for test_gpu.
# This may be replaced when dependencies are built.
