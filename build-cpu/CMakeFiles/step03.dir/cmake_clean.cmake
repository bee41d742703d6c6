file(REMOVE_RECURSE
  "CMakeFiles/step03.dir/gen/step03_main.cpp.o"
  "CMakeFiles/step03.dir/gen/step03_main.cpp.o.d"
  "step03"
  "step03.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/step03.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
