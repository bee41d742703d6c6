# Empty compiler generated dependencies file for step01.
# This may be replaced when dependencies are built.
