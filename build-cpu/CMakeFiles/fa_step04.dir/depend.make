# Empty dependencies file for fa_step04.
# This may be replaced when dependencies are built.
