# Empty dependencies file for plot_traffic.
# This may be replaced when dependencies are built.
