
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/common/cli.cpp" "common/CMakeFiles/fa_common.dir/cli.cpp.o" "gcc" "common/CMakeFiles/fa_common.dir/cli.cpp.o.d"
  "/work/main/common/device.cpp" "common/CMakeFiles/fa_common.dir/device.cpp.o" "gcc" "common/CMakeFiles/fa_common.dir/device.cpp.o.d"
  "/work/main/common/gpu_stub.cpp" "common/CMakeFiles/fa_common.dir/gpu_stub.cpp.o" "gcc" "common/CMakeFiles/fa_common.dir/gpu_stub.cpp.o.d"
  "/work/main/common/ledger.cpp" "common/CMakeFiles/fa_common.dir/ledger.cpp.o" "gcc" "common/CMakeFiles/fa_common.dir/ledger.cpp.o.d"
  "/work/main/common/metrics.cpp" "common/CMakeFiles/fa_common.dir/metrics.cpp.o" "gcc" "common/CMakeFiles/fa_common.dir/metrics.cpp.o.d"
  "/work/main/common/npy.cpp" "common/CMakeFiles/fa_common.dir/npy.cpp.o" "gcc" "common/CMakeFiles/fa_common.dir/npy.cpp.o.d"
  "/work/main/common/problem.cpp" "common/CMakeFiles/fa_common.dir/problem.cpp.o" "gcc" "common/CMakeFiles/fa_common.dir/problem.cpp.o.d"
  "/work/main/common/reference.cpp" "common/CMakeFiles/fa_common.dir/reference.cpp.o" "gcc" "common/CMakeFiles/fa_common.dir/reference.cpp.o.d"
  "/work/main/common/runner.cpp" "common/CMakeFiles/fa_common.dir/runner.cpp.o" "gcc" "common/CMakeFiles/fa_common.dir/runner.cpp.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
