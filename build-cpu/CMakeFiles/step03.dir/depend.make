# Empty dependencies file for step03.
# This may be replaced when dependencies are built.
