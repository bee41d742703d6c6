# Empty dependencies file for step04.
# This may be replaced when dependencies are built.
