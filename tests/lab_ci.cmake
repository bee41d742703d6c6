# Every lab is real (docs/labs/, scripts/lab.sh). For each registered step:
#   lab_ci/NN_name/       the step's schedule.hpp and its kernel.cu blanked by `scripts/lab.sh blank`
#                         (regenerated when the step's file or the script changes)
#   fa_labciNN_kernel     the blanked kernel.cu compiled for sm_80 alone (CUDA builds): it must compile
#   student/              the student tree, `scripts/lab.sh export` (a test fixture: it exports,
#                         configures without CUDA and builds every step program there)
#   mutants/NN_name/...   each known-wrong mutant of tests/mutants/NN_name/ (below)
# and the tests
#   lab: step NN blanked fails its grade        the student tree's stepNN --grade --track cpu exits 1
#   lab: step NN solution passes its grade      stepNN --grade --track cpu exits 0
#   lab: step NN mutant R--S fails its grade    ... and its summary names the region R
#   lab: step NN has lab regions and a handout  markers in blueprint.cpp and kernel.cu, docs/labs/NN_name.md
# -DFA_LAB_CI=OFF leaves all of it out.
option(FA_LAB_CI "Build and test every step's blanked lab (tests/lab_ci.cmake)" ON)
if(NOT FA_LAB_CI)
  return()
endif()

# GPU mutants: on by default where nvidia-smi sees a GPU now, for that GPU's architecture alone.
set(_gpu_seen OFF)
set(_gpu_arch "")
if(FA_HAVE_CUDA)
  execute_process(COMMAND nvidia-smi --query-gpu=compute_cap --format=csv,noheader RESULT_VARIABLE _rc
                  OUTPUT_VARIABLE _cc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_rc EQUAL 0 AND _cc MATCHES "^([0-9]+)[.]([0-9])")
    set(_gpu_seen ON)
    set(_gpu_arch "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
  endif()
endif()
option(FA_GPU_MUTANTS "Build and grade the GPU track's mutants (tests/mutants/*/*.gpu.patch)" ${_gpu_seen})
set(FA_GPU_MUTANTS_ARCH "${_gpu_arch}" CACHE STRING "The architecture the GPU mutants are built for (e.g. 90)")
if(FA_GPU_MUTANTS AND NOT FA_GPU_MUTANTS_ARCH)
  message(FATAL_ERROR "FA_GPU_MUTANTS needs FA_GPU_MUTANTS_ARCH (no GPU seen to take it from)")
endif()

# [mutants] One mutant's parts: its source (apply_mutant.py, which holds every change inside the
# region), and its program on a library built from it, graded by a test that wants a failed grade
# whose summary names the region.
function(fa_mutant_source src file patch mdir what)
  file(MAKE_DIRECTORY ${mdir})
  add_custom_command(OUTPUT ${mdir}/${file}
                     COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/apply_mutant.py ${src}/${file}
                             ${patch} ${mdir}/${file}
                     DEPENDS ${src}/${file} ${patch} ${CMAKE_CURRENT_SOURCE_DIR}/apply_mutant.py
                     COMMENT "${what}" VERBATIM)
endfunction()
function(fa_mutant_program prog lib nn track region tname)
  set(FA_STEP_NS step${nn})
  set(FA_PREV_DECL "")
  set(FA_PREV_PTR "nullptr")
  set(FA_PROGRAM ${prog})
  fa_lab_regions(${PROJECT_SOURCE_DIR}/steps/${step_dir} FA_LAB_REGIONS)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/lab_main.cpp.in ${PROJECT_BINARY_DIR}/gen/${prog}_main.cpp @ONLY)
  add_executable(${prog} ${PROJECT_BINARY_DIR}/gen/${prog}_main.cpp)
  target_link_libraries(${prog} PRIVATE ${lib} fa_common)
  set_target_properties(${prog} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/mutants)
  add_test(NAME "${tname}"
           COMMAND ${CMAKE_COMMAND} -DCMD=$<TARGET_FILE:${prog}> "-DARGS=--grade;--track;${track};--timeout;60" -DCODE=1
                   "-DREGEX=grade +FAIL: [0-9]+ of [0-9]+ checks failed.*(the region this points at|one of the regions this points at [(]they fail alike[)]): ([a-z0-9-]+, )*${region}[ ,]"
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/lab_grade.cmake)
endfunction()

set(_ci ${PROJECT_BINARY_DIR}/lab_ci)
set(_lab_sh ${PROJECT_SOURCE_DIR}/scripts/lab.sh)
set(_student ${PROJECT_BINARY_DIR}/student)
set(_student_targets "")
foreach(step_dir IN LISTS FA_STEPS)
  string(SUBSTRING ${step_dir} 0 2 nn)
  list(APPEND _student_targets step${nn})
endforeach()
include(ProcessorCount)
ProcessorCount(_jobs)
if(_jobs LESS 1)
  set(_jobs 2)
endif()
add_test(NAME "lab: the student tree (scripts/lab.sh export) has every region blanked, no answers, and builds"
         COMMAND ${CMAKE_COMMAND} -DSCRIPT=${_lab_sh} -DOUT=${_student} "-DTARGETS=${_student_targets}" -DJOBS=${_jobs}
                 "-DPREFIX=-DCMAKE_PREFIX_PATH=${CMAKE_PREFIX_PATH}" -P ${CMAKE_CURRENT_SOURCE_DIR}/student_tree.cmake)
set_tests_properties("lab: the student tree (scripts/lab.sh export) has every region blanked, no answers, and builds"
                     PROPERTIES FIXTURES_SETUP student_tree TIMEOUT 1500 COST 200)  # the longest: first (tests/CMakeLists.txt, COST)
foreach(step_dir IN LISTS FA_STEPS)
  string(SUBSTRING ${step_dir} 0 2 nn)
  set(src ${PROJECT_SOURCE_DIR}/steps/${step_dir})
  set(dst ${_ci}/${step_dir})
  file(MAKE_DIRECTORY ${dst})
  add_custom_command(OUTPUT ${dst}/schedule.hpp
                     COMMAND ${CMAKE_COMMAND} -E copy ${src}/schedule.hpp ${dst}/schedule.hpp
                     DEPENDS ${src}/schedule.hpp VERBATIM)
  if(EXISTS ${src}/kernel.cu)
    add_custom_command(OUTPUT ${dst}/kernel.cu
                       COMMAND ${CMAKE_COMMAND} -DSCRIPT=${_lab_sh} -DIN=${src}/kernel.cu -DOUT=${dst}/kernel.cu
                               -P ${CMAKE_CURRENT_SOURCE_DIR}/lab_blank.cmake
                       DEPENDS ${src}/kernel.cu ${_lab_sh} ${CMAKE_CURRENT_SOURCE_DIR}/lab_blank.cmake
                       COMMENT "lab CI: blanking steps/${step_dir}/kernel.cu" VERBATIM)
  endif()
  set(lib fa_labci${nn})
  fa_lab_regions(${src} FA_LAB_REGIONS)  # the step's regions, for the grade's "look at"
  if(FA_HAVE_CUDA AND EXISTS ${src}/kernel.cu)
    add_library(${lib}_kernel OBJECT ${dst}/kernel.cu ${dst}/schedule.hpp)
    target_include_directories(${lib}_kernel BEFORE PRIVATE ${dst})
    target_link_libraries(${lib}_kernel PRIVATE fa_common CUDA::cublas)
    target_compile_options(${lib}_kernel PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${FA_CUDA_FLAGS} ${FA_LAB_CUDA_QUIET}>)
    set_target_properties(${lib}_kernel PROPERTIES CUDA_ARCHITECTURES 80)
  endif()

  add_test(NAME "lab: step ${nn} blanked fails its grade"
           COMMAND ${CMAKE_COMMAND} -DCMD=${_student}/build/step${nn} "-DARGS=--grade;--track;cpu;--timeout;20" -DCODE=1
                   "-DREGEX=grade +FAIL: [0-9]+ of [0-9]+ checks failed.*look at " -DBLANKED=${_student}/steps/${step_dir}/blueprint.cpp
                   -DSOLUTION=${src}/blueprint.cpp -P ${CMAKE_CURRENT_SOURCE_DIR}/lab_grade.cmake)
  set_tests_properties("lab: step ${nn} blanked fails its grade" PROPERTIES FIXTURES_REQUIRED student_tree)
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
  # [mutants] Each known-wrong mutant of the step's regions (tests/mutants/NN_name/REGION--SLUG.patch,
  # applied by apply_mutant.py, which holds every change inside REGION): built as the blanked lab is,
  # it must fail its grade, and the summary must name REGION.
  file(GLOB mutants ${CMAKE_CURRENT_SOURCE_DIR}/mutants/${step_dir}/*.patch)
  file(GLOB gpu_mutants ${CMAKE_CURRENT_SOURCE_DIR}/mutants/${step_dir}/*.gpu.patch)
  if(gpu_mutants)
    list(REMOVE_ITEM mutants ${gpu_mutants})
  endif()
  if(mutants AND NOT Python3_Interpreter_FOUND)
    add_test(NAME "lab: step ${nn}'s mutants need Python 3 (apply_mutant.py)" COMMAND ${CMAKE_COMMAND} -E false)
    set(mutants "")
  endif()
  foreach(patch IN LISTS mutants)
    get_filename_component(mname ${patch} NAME_WE)
    string(REGEX REPLACE "--.*" "" region "${mname}")
    string(MAKE_C_IDENTIFIER "${mname}" mid)
    set(mdir ${PROJECT_BINARY_DIR}/mutants/${step_dir}/${mname})
    fa_mutant_source(${src} blueprint.cpp ${patch} ${mdir} "mutant: ${step_dir}/${mname}")
    set(mlib fa_mut${nn}_${mid})
    add_library(${mlib} STATIC ${mdir}/blueprint.cpp)
    target_include_directories(${mlib} BEFORE PRIVATE ${src} ${PROJECT_SOURCE_DIR}/common)
    target_include_directories(${mlib} SYSTEM PRIVATE ${FA_RANDOM123_INCLUDE})
    target_link_libraries(${mlib} PRIVATE Eigen3::Eigen $<LINK_ONLY:fa_common>)
    if(DEFINED FA_STEP${nn}_USES)
      foreach(u IN LISTS FA_STEP${nn}_USES)
        target_link_libraries(${mlib} PRIVATE $<LINK_ONLY:${u}>)
      endforeach()
    endif()
    target_compile_options(${mlib} PRIVATE ${FA_CXX_WARNINGS} ${FA_LAB_CXX_QUIET})
    fa_mutant_program(mut${nn}_${mid} ${mlib} ${nn} cpu ${region}
                      "lab: step ${nn} mutant ${mname} fails its grade, and the summary names ${region}")
  endforeach()

  # [mutants] The GPU track's mutants (REGION--SLUG.gpu.patch, of kernel.cu): built for this machine's
  # GPU only where one is seen at configure time (FA_GPU_MUTANTS); else each is a skipped gpu test.
  foreach(patch IN LISTS gpu_mutants)
    get_filename_component(mname ${patch} NAME)
    string(REGEX REPLACE "[.]gpu[.]patch$" "" mname "${mname}")
    string(REGEX REPLACE "--.*" "" region "${mname}")
    string(MAKE_C_IDENTIFIER "${mname}" mid)
    set(tname "lab: step ${nn} GPU mutant ${mname} fails its GPU grade, and the summary names ${region} (GPU)")
    # Everywhere, GPU or not: the patch still applies to kernel.cu (a change that moves its lines is
    # caught where it is made, not on the next GPU machine).
    add_test(NAME "lab: step ${nn} GPU mutant ${mname} applies to kernel.cu"
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/apply_mutant.py ${src}/kernel.cu ${patch}
                     ${PROJECT_BINARY_DIR}/mutants/applies_${nn}_${mid}.cu)
    if(NOT FA_GPU_MUTANTS)
      add_test(NAME "${tname}" COMMAND ${CMAKE_COMMAND} -E echo
               "SKIPPED: GPU mutants are built where a GPU is seen at configure time (-DFA_GPU_MUTANTS=ON)")
      set_tests_properties("${tname}" PROPERTIES LABELS gpu SKIP_REGULAR_EXPRESSION "SKIPPED:")
      continue()
    endif()
    set(mdir ${PROJECT_BINARY_DIR}/mutants/${step_dir}/${mname}.gpu)
    fa_mutant_source(${src} kernel.cu ${patch} ${mdir} "GPU mutant: ${step_dir}/${mname}")
    set(mlib fa_gmut${nn}_${mid})
    add_library(${mlib} STATIC ${src}/blueprint.cpp ${mdir}/kernel.cu)
    target_include_directories(${mlib} BEFORE PRIVATE ${src})
    target_link_libraries(${mlib} PUBLIC fa_common CUDA::cublas)
    if(DEFINED FA_STEP${nn}_USES)
      target_link_libraries(${mlib} PUBLIC ${FA_STEP${nn}_USES})
    endif()
    target_compile_options(${mlib} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${FA_CXX_WARNINGS}>
                                           $<$<COMPILE_LANGUAGE:CUDA>:${FA_CUDA_FLAGS} ${FA_LAB_CUDA_QUIET}>)
    # [sm90a] A Hopper step's mutant is compiled as its step is: 90 as 90a (wgmma, TMA and setmaxnreg
    # exist only there; compiled for plain sm_90 they trap, and the grade sees crashes, not the region).
    fa_hopper_archs(_mut_arch ${nn} ${FA_GPU_MUTANTS_ARCH})
    set_target_properties(${mlib} PROPERTIES CUDA_ARCHITECTURES "${_mut_arch}")
    fa_mutant_program(gmut${nn}_${mid} ${mlib} ${nn} gpu ${region} "${tname}")
    set_tests_properties("${tname}" PROPERTIES LABELS gpu)
  endforeach()

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
