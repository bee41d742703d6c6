
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/tests/test_blueprints.cpp" "tests/CMakeFiles/test_cpu.dir/test_blueprints.cpp.o" "gcc" "tests/CMakeFiles/test_cpu.dir/test_blueprints.cpp.o.d"
  "/work/main/tests/test_cli.cpp" "tests/CMakeFiles/test_cpu.dir/test_cli.cpp.o" "gcc" "tests/CMakeFiles/test_cpu.dir/test_cli.cpp.o.d"
  "/work/main/tests/test_docs.cpp" "tests/CMakeFiles/test_cpu.dir/test_docs.cpp.o" "gcc" "tests/CMakeFiles/test_cpu.dir/test_docs.cpp.o.d"
  "/work/main/tests/test_dtype.cpp" "tests/CMakeFiles/test_cpu.dir/test_dtype.cpp.o" "gcc" "tests/CMakeFiles/test_cpu.dir/test_dtype.cpp.o.d"
  "/work/main/tests/test_ledger.cpp" "tests/CMakeFiles/test_cpu.dir/test_ledger.cpp.o" "gcc" "tests/CMakeFiles/test_cpu.dir/test_ledger.cpp.o.d"
  "/work/main/tests/test_main.cpp" "tests/CMakeFiles/test_cpu.dir/test_main.cpp.o" "gcc" "tests/CMakeFiles/test_cpu.dir/test_main.cpp.o.d"
  "/work/main/tests/test_metrics.cpp" "tests/CMakeFiles/test_cpu.dir/test_metrics.cpp.o" "gcc" "tests/CMakeFiles/test_cpu.dir/test_metrics.cpp.o.d"
  "/work/main/tests/test_npy.cpp" "tests/CMakeFiles/test_cpu.dir/test_npy.cpp.o" "gcc" "tests/CMakeFiles/test_cpu.dir/test_npy.cpp.o.d"
  "/work/main/tests/test_reference.cpp" "tests/CMakeFiles/test_cpu.dir/test_reference.cpp.o" "gcc" "tests/CMakeFiles/test_cpu.dir/test_reference.cpp.o.d"
  "/work/main/tests/test_step01.cpp" "tests/CMakeFiles/test_cpu.dir/test_step01.cpp.o" "gcc" "tests/CMakeFiles/test_cpu.dir/test_step01.cpp.o.d"
  "/work/main/tests/test_tiling.cpp" "tests/CMakeFiles/test_cpu.dir/test_tiling.cpp.o" "gcc" "tests/CMakeFiles/test_cpu.dir/test_tiling.cpp.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build-cpu/CMakeFiles/fa_registry.dir/DependInfo.cmake"
  "/work/main/build-cpu/CMakeFiles/fa_step01.dir/DependInfo.cmake"
  "/work/main/build-cpu/CMakeFiles/fa_step02.dir/DependInfo.cmake"
  "/work/main/build-cpu/CMakeFiles/fa_step03.dir/DependInfo.cmake"
  "/work/main/build-cpu/CMakeFiles/fa_step04.dir/DependInfo.cmake"
  "/work/main/build-cpu/common/CMakeFiles/fa_common.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
