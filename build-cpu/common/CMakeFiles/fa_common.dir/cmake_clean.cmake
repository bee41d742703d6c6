file(REMOVE_RECURSE
  "CMakeFiles/fa_common.dir/cli.cpp.o"
  "CMakeFiles/fa_common.dir/cli.cpp.o.d"
  "CMakeFiles/fa_common.dir/device.cpp.o"
  "CMakeFiles/fa_common.dir/device.cpp.o.d"
  "CMakeFiles/fa_common.dir/gpu_stub.cpp.o"
  "CMakeFiles/fa_common.dir/gpu_stub.cpp.o.d"
  "CMakeFiles/fa_common.dir/ledger.cpp.o"
  "CMakeFiles/fa_common.dir/ledger.cpp.o.d"
  "CMakeFiles/fa_common.dir/metrics.cpp.o"
  "CMakeFiles/fa_common.dir/metrics.cpp.o.d"
  "CMakeFiles/fa_common.dir/npy.cpp.o"
  "CMakeFiles/fa_common.dir/npy.cpp.o.d"
  "CMakeFiles/fa_common.dir/problem.cpp.o"
  "CMakeFiles/fa_common.dir/problem.cpp.o.d"
  "CMakeFiles/fa_common.dir/reference.cpp.o"
  "CMakeFiles/fa_common.dir/reference.cpp.o.d"
  "CMakeFiles/fa_common.dir/runner.cpp.o"
  "CMakeFiles/fa_common.dir/runner.cpp.o.d"
  "libfa_common.a"
  "libfa_common.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/fa_common.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
