file(REMOVE_RECURSE
  "CMakeFiles/tour.dir/common/tour.cpp.o"
  "CMakeFiles/tour.dir/common/tour.cpp.o.d"
  "tour"
  "tour.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/tour.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
