file(REMOVE_RECURSE
  "CMakeFiles/step04.dir/gen/step04_main.cpp.o"
  "CMakeFiles/step04.dir/gen/step04_main.cpp.o.d"
  "step04"
  "step04.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/step04.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
