# Empty dependencies file for fa_step02.
# This may be replaced when dependencies are built.
