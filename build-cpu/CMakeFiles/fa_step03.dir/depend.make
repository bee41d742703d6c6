# Empty dependencies file for fa_step03.
# This may be replaced when dependencies are built.
