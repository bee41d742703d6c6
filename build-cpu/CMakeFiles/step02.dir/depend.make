# Empty dependencies file for step02.
# This may be replaced when dependencies are built.
