# Every lab is real (docs/labs/, scripts/lab.sh). For each registered step:
#   lab_ci/NN_name/       the step's schedule.hpp and its blueprint.cpp and kernel.cu blanked by
#                         `scripts/lab.sh blank` (regenerated when the step's file or the script changes)
#   fa_labciNN, labciNN   the blanked blueprint as a CPU-only library (no FA_HAVE_CUDA: info() names no
#                         launcher) and the lab program on it
#   fa_labciNN_kernel     the blanked kernel.cu compiled for sm_80 alone (CUDA builds): it must compile
# and the tests
#   lab: step NN blanked fails its grade        labciNN --grade --track cpu exits 1 with the report
#   lab: step NN solution passes its grade      stepNN --grade --track cpu exits 0
#   lab: step NN has lab regions and a handout  markers in blueprint.cpp and kernel.cu, docs/labs/NN_name.md
# -DFA_LAB_CI=OFF leaves all of it out.
option(FA_LAB_CI "Build and test every step's blanked lab (tests/lab_ci.cmake)" ON)
if(NOT FA_LAB_CI)
  return()
endif()

set(_ci ${PROJECT_BINARY_DIR}/lab_ci)
set(_lab_sh ${PROJECT_SOURCE_DIR}/scripts/lab.sh)
foreach(step_dir IN LISTS FA_STEPS)
  string(SUBSTRING ${step_dir} 0 2 nn)
  set(src ${PROJECT_SOURCE_DIR}/steps/${step_dir})
  set(dst ${_ci}/${step_dir})
  file(MAKE_DIRECTORY ${dst})
  add_custom_command(OUTPUT ${dst}/schedule.hpp
                     COMMAND ${CMAKE_COMMAND} -E copy ${src}/schedule.hpp ${dst}/schedule.hpp
                     DEPENDS ${src}/schedule.hpp VERBATIM)
  foreach(f blueprint.cpp kernel.cu)
    add_custom_command(OUTPUT ${dst}/${f}
                       COMMAND ${CMAKE_COMMAND} -DSCRIPT=${_lab_sh} -DIN=${src}/${f} -DOUT=${dst}/${f}
                               -P ${CMAKE_CURRENT_SOURCE_DIR}/lab_blank.cmake
                       DEPENDS ${src}/${f} ${_lab_sh} ${CMAKE_CURRENT_SOURCE_DIR}/lab_blank.cmake
                       COMMENT "lab CI: blanking steps/${step_dir}/${f}" VERBATIM)
  endforeach()

  # CPU only: fa_common's usage requirements would define FA_HAVE_CUDA, and info() would then name
  # launchers (kernel.cu) this library does not have. So its objects link, its headers are named.
  set(lib fa_labci${nn})
  add_library(${lib} STATIC ${dst}/blueprint.cpp ${dst}/schedule.hpp)
  target_include_directories(${lib} BEFORE PRIVATE ${dst} ${PROJECT_SOURCE_DIR}/common)
  target_include_directories(${lib} SYSTEM PRIVATE ${FA_RANDOM123_INCLUDE})  # common/kernel/dropout.hpp
  target_link_libraries(${lib} PRIVATE Eigen3::Eigen $<LINK_ONLY:fa_common>)
  if(DEFINED FA_STEP${nn}_USES)
    foreach(u IN LISTS FA_STEP${nn}_USES)
      target_link_libraries(${lib} PRIVATE $<LINK_ONLY:${u}>)
    endforeach()
  endif()
  # A blanked file leaves names unused (the student's code will use them): not worth a CI warning.
  target_compile_options(${lib} PRIVATE ${FA_CXX_WARNINGS} -Wno-unused-parameter -Wno-unused-variable
                                        -Wno-unused-but-set-variable -Wno-unused-function)
  set(FA_STEP_NS step${nn})
  set(FA_PROGRAM labci${nn})
  set(FA_PREV_DECL "")
  set(FA_PREV_PTR "nullptr")
  configure_file(${PROJECT_SOURCE_DIR}/cmake/lab_main.cpp.in ${PROJECT_BINARY_DIR}/gen/labci${nn}_main.cpp @ONLY)
  add_executable(labci${nn} ${PROJECT_BINARY_DIR}/gen/labci${nn}_main.cpp)
  target_link_libraries(labci${nn} PRIVATE ${lib} fa_common)
  set_target_properties(labci${nn} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${_ci})

  if(FA_HAVE_CUDA AND EXISTS ${src}/kernel.cu)
    add_library(${lib}_kernel OBJECT ${dst}/kernel.cu ${dst}/schedule.hpp)
    target_include_directories(${lib}_kernel BEFORE PRIVATE ${dst})
    target_link_libraries(${lib}_kernel PRIVATE fa_common CUDA::cublas)
    target_compile_options(${lib}_kernel PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${FA_CUDA_FLAGS} -diag-suppress=177,550
                                                 -Xcompiler=-Wno-unused-parameter,-Wno-unused-variable,-Wno-unused-function>)
    set_target_properties(${lib}_kernel PROPERTIES CUDA_ARCHITECTURES 80)
  endif()

  add_test(NAME "lab: step ${nn} blanked fails its grade"
           COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:labci${nn}> "-DARGS=--grade;--track;cpu;--timeout;20" -DCODE=1
                   "-DREGEX=grade +FAIL: [0-9]+ of [0-9]+ checks failed.*look at " -DBLANKED=${dst}/blueprint.cpp
                   -DSOLUTION=${src}/blueprint.cpp -P ${CMAKE_CURRENT_SOURCE_DIR}/lab_grade.cmake)
  add_test(NAME "lab: step ${nn} solution passes its grade"
           COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:step${nn}> "-DARGS=--grade;--track;cpu" -DCODE=0
                   "-DREGEX=grade +PASS: all [0-9]+ checks passed" -P ${CMAKE_CURRENT_SOURCE_DIR}/lab_grade.cmake)
  if(FA_HAVE_CUDA)  # the GPU track of the step's own kernels: skipped (not passed) without a GPU
    add_test(NAME "lab: step ${nn} solution passes its GPU grade (GPU)"
             COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:step${nn}> "-DARGS=--grade;--track;gpu" -DCODE=0
                     "-DREGEX=grade +PASS: all [0-9]+ checks passed" "-DSKIP_REGEX=--track gpu, but no CUDA device"
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/expect_exit.cmake)
    set_tests_properties("lab: step ${nn} solution passes its GPU grade (GPU)"
                         PROPERTIES LABELS gpu SKIP_REGULAR_EXPRESSION "SKIPPED:")
  endif()
  add_test(NAME "lab: step ${nn} has lab regions and a handout"
           COMMAND ${CMAKE_COMMAND} -DSTEP=${src} -DDOC=${PROJECT_SOURCE_DIR}/docs/labs/${step_dir}.md -DSCRIPT=${_lab_sh}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/lab_markers.cmake)
endforeach()

if(FA_HAVE_CUDA)
  # [arch] On a GPU made to look like a T4 — or on no GPU at all, FA_FAKE_CC standing for one — step
  # 09's GPU track is refused case by case: every case of the matrix reported as refused, never as
  # passed, and a track that checked nothing fails the grade (tests/grade_refused.cmake).
  add_test(NAME "lab: a GPU track refused at FA_FAKE_CC=75 fails its grade, every case refused"
           COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:step09> "-DNEEDS=needs mma\\.sync"
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/grade_refused.cmake)
  set_tests_properties("lab: a GPU track refused at FA_FAKE_CC=75 fails its grade, every case refused"
                       PROPERTIES ENVIRONMENT "FA_FAKE_CC=75")
endif()
