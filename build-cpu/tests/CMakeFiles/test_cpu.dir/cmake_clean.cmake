file(REMOVE_RECURSE
  "CMakeFiles/test_cpu.dir/test_blueprints.cpp.o"
  "CMakeFiles/test_cpu.dir/test_blueprints.cpp.o.d"
  "CMakeFiles/test_cpu.dir/test_cli.cpp.o"
  "CMakeFiles/test_cpu.dir/test_cli.cpp.o.d"
  "CMakeFiles/test_cpu.dir/test_docs.cpp.o"
  "CMakeFiles/test_cpu.dir/test_docs.cpp.o.d"
  "CMakeFiles/test_cpu.dir/test_dtype.cpp.o"
  "CMakeFiles/test_cpu.dir/test_dtype.cpp.o.d"
  "CMakeFiles/test_cpu.dir/test_ledger.cpp.o"
  "CMakeFiles/test_cpu.dir/test_ledger.cpp.o.d"
  "CMakeFiles/test_cpu.dir/test_main.cpp.o"
  "CMakeFiles/test_cpu.dir/test_main.cpp.o.d"
  "CMakeFiles/test_cpu.dir/test_metrics.cpp.o"
  "CMakeFiles/test_cpu.dir/test_metrics.cpp.o.d"
  "CMakeFiles/test_cpu.dir/test_npy.cpp.o"
  "CMakeFiles/test_cpu.dir/test_npy.cpp.o.d"
  "CMakeFiles/test_cpu.dir/test_reference.cpp.o"
  "CMakeFiles/test_cpu.dir/test_reference.cpp.o.d"
  "CMakeFiles/test_cpu.dir/test_step01.cpp.o"
  "CMakeFiles/test_cpu.dir/test_step01.cpp.o.d"
  "CMakeFiles/test_cpu.dir/test_tiling.cpp.o"
  "CMakeFiles/test_cpu.dir/test_tiling.cpp.o.d"
  "test_cpu"
  "test_cpu.pdb"
  "test_cpu_tests-b858cb2.cmake"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/test_cpu.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
