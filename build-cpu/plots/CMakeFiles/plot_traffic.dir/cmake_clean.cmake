file(REMOVE_RECURSE
  "../plot_traffic"
  "../plot_traffic.pdb"
  "CMakeFiles/plot_traffic.dir/plot_traffic.cpp.o"
  "CMakeFiles/plot_traffic.dir/plot_traffic.cpp.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/plot_traffic.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
