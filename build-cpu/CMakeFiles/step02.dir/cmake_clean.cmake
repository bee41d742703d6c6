file(REMOVE_RECURSE
  "CMakeFiles/step02.dir/gen/step02_main.cpp.o"
  "CMakeFiles/step02.dir/gen/step02_main.cpp.o.d"
  "step02"
  "step02.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/step02.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
