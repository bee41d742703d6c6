file(REMOVE_RECURSE
  "CMakeFiles/test_gpu.dir/test_gpu.cpp.o"
  "CMakeFiles/test_gpu.dir/test_gpu.cpp.o.d"
  "test_gpu"
  "test_gpu.pdb"
  "test_gpu_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_gpu.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
