# Empty dependencies file for fa_common.
# This may be replaced when dependencies are built.
