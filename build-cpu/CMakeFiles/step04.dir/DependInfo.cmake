
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/build-cpu/gen/step04_main.cpp" "CMakeFiles/step04.dir/gen/step04_main.cpp.o" "gcc" "CMakeFiles/step04.dir/gen/step04_main.cpp.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build-cpu/CMakeFiles/fa_step04.dir/DependInfo.cmake"
  "/work/main/build-cpu/common/CMakeFiles/fa_common.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
