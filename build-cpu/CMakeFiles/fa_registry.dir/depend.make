# Empty dependencies file for fa_registry.
# This may be replaced when dependencies are built.
