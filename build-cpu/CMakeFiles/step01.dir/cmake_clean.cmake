file(REMOVE_RECURSE
  "CMakeFiles/step01.dir/gen/step01_main.cpp.o"
  "CMakeFiles/step01.dir/gen/step01_main.cpp.o.d"
  "step01"
  "step01.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/step01.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
