# Empty dependencies file for fa_step01.
# This may be replaced when dependencies are built.
