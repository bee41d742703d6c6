# For every folder NN_name in FA_STEPS:
#   fa_stepNN   a library: blueprint.cpp (+ kernel.cu when CUDA is on)
#   stepNN      the step program at the build root (main generated from cmake/step_main.cpp.in)
# and one generated registry (fa_registry) that lists every step for the tests and tools.
# For every lab/NN_name/ (scripts/lab.sh start NN) present when CMake configures:
#   fa_labNN    the lab's blueprint.cpp (+ kernel.cu when CUDA is on), lab/NN_name/ first on its
#               include path (the lab's schedule.hpp), linked as fa_stepNN is
#   labNN       the step program on it, at the build root (./labNN --grade); it links the previous
#               step's library too, for --grade --min-speedup
# Without lab/ nothing of this exists.
include(${CMAKE_CURRENT_LIST_DIR}/lab_regions.cmake)
set(FA_LAB_DIR ${PROJECT_SOURCE_DIR}/lab CACHE PATH "Where scripts/lab.sh writes the labs (NN_name/ folders)")
if(IS_DIRECTORY ${FA_LAB_DIR})  # a new lab folder there configures the build again
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${FA_LAB_DIR})
endif()
# A blanked region leaves names unused that the student's code will use: no -Wunused noise in a lab's
# build (nor in a student tree's blanked steps). Every other warning stays.
set(FA_LAB_CXX_QUIET -Wno-unused-parameter -Wno-unused-variable -Wno-unused-but-set-variable -Wno-unused-function)
set(FA_LAB_CUDA_QUIET -diag-suppress=177,550 -Xcompiler=-Wno-unused-parameter,-Wno-unused-variable,-Wno-unused-function)
set(_fa_prev "")
set(FA_STEP_LIBS "")
set(FA_REGISTRY_DECLS "")
set(FA_REGISTRY_ITEMS "")
foreach(step_dir IN LISTS FA_STEPS)
  string(SUBSTRING ${step_dir} 0 2 nn)
  set(dir ${PROJECT_SOURCE_DIR}/steps/${step_dir})
  set(lib fa_step${nn})
  set(srcs ${dir}/blueprint.cpp)
  if(FA_HAVE_CUDA AND EXISTS ${dir}/kernel.cu)
    list(APPEND srcs ${dir}/kernel.cu)
  endif()
  add_library(${lib} STATIC ${srcs})
  target_include_directories(${lib} PRIVATE ${dir})  # every step has a schedule.hpp: keep them apart
  target_link_libraries(${lib} PUBLIC fa_common)
  if(DEFINED FA_STEP${nn}_USES)  # a step that runs an earlier step's kernels (step 08: step 07's forward)
    target_link_libraries(${lib} PUBLIC ${FA_STEP${nn}_USES})
  endif()
  target_compile_options(${lib} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${FA_CXX_WARNINGS}>
                                        $<$<COMPILE_LANGUAGE:CUDA>:${FA_CUDA_FLAGS}>)
  if(FA_STUDENT_TREE)
    target_compile_options(${lib} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${FA_LAB_CXX_QUIET}>
                                          $<$<COMPILE_LANGUAGE:CUDA>:${FA_LAB_CUDA_QUIET}>)
  endif()
  if(FA_HAVE_CUDA)
    target_link_libraries(${lib} PUBLIC CUDA::cublas)
  endif()

  set(FA_STEP_NS step${nn})
  fa_lab_regions(${dir} FA_LAB_REGIONS)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/step_main.cpp.in
                 ${PROJECT_BINARY_DIR}/gen/step${nn}_main.cpp @ONLY)
  add_executable(step${nn} ${PROJECT_BINARY_DIR}/gen/step${nn}_main.cpp)
  target_link_libraries(step${nn} PRIVATE ${lib})
  set_target_properties(step${nn} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})

  set(lab ${FA_LAB_DIR}/${step_dir})
  if(FA_HAVE_CUDA AND EXISTS ${lab}/blueprint.cpp AND NOT EXISTS ${lab}/kernel.cu AND EXISTS ${dir}/kernel.cu)
    # A CPU-track lab (scripts/lab.sh start NN --cpu) has no kernel: it builds where CUDA is off.
    message(STATUS "lab: ${lab} is a CPU-track lab (no kernel.cu): build lab${nn} in build-cpu/ (CUDA off)")
  elseif(EXISTS ${lab}/blueprint.cpp AND EXISTS ${lab}/schedule.hpp)
    set(lab_srcs ${lab}/blueprint.cpp)
    if(FA_HAVE_CUDA AND EXISTS ${lab}/kernel.cu)
      list(APPEND lab_srcs ${lab}/kernel.cu)
    endif()
    add_library(fa_lab${nn} STATIC ${lab_srcs})
    target_include_directories(fa_lab${nn} BEFORE PRIVATE ${lab})
    target_link_libraries(fa_lab${nn} PUBLIC fa_common)
    set(lab_prev ${_fa_prev})
    if(DEFINED FA_STEP${nn}_USES)
      set(uses ${FA_STEP${nn}_USES})
      if(FA_STUDENT_TREE)  # there the borrowed step is blanked: the student's own lab of it, once started
        set(uses "")
        foreach(u IN LISTS FA_STEP${nn}_USES)
          string(REPLACE "fa_step" "fa_lab" ul "${u}")
          if(TARGET ${ul})
            list(APPEND uses ${ul})
            message(STATUS "lab: lab${nn} runs your ${ul} (lab/), not the blanked ${u}")
            if(u STREQUAL "fa_step${_fa_prev}")
              set(lab_prev "")  # the same step twice, lab and blanked: no --min-speedup against it
            endif()
          else()
            list(APPEND uses ${u})
          endif()
        endforeach()
      endif()
      target_link_libraries(fa_lab${nn} PUBLIC ${uses})
    endif()
    target_compile_options(fa_lab${nn} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${FA_CXX_WARNINGS} ${FA_LAB_CXX_QUIET}>
                                               $<$<COMPILE_LANGUAGE:CUDA>:${FA_CUDA_FLAGS} ${FA_LAB_CUDA_QUIET}>)
    if(FA_HAVE_CUDA)
      target_link_libraries(fa_lab${nn} PUBLIC CUDA::cublas)
    endif()
    set(FA_PROGRAM lab${nn})
    if(lab_prev)
      set(FA_PREV_DECL "namespace fa::step${lab_prev} { const StepInfo& info(); }")
      set(FA_PREV_PTR "&fa::step${lab_prev}::info()")
    else()
      set(FA_PREV_DECL "")
      set(FA_PREV_PTR "nullptr")
    endif()
    configure_file(${PROJECT_SOURCE_DIR}/cmake/lab_main.cpp.in ${PROJECT_BINARY_DIR}/gen/lab${nn}_main.cpp @ONLY)
    add_executable(lab${nn} ${PROJECT_BINARY_DIR}/gen/lab${nn}_main.cpp)
    target_link_libraries(lab${nn} PRIVATE fa_lab${nn})
    if(lab_prev)
      target_link_libraries(lab${nn} PRIVATE fa_step${lab_prev})
    endif()
    set_target_properties(lab${nn} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
    message(STATUS "lab: lab${nn} from ${lab}")
  elseif(IS_DIRECTORY ${lab})
    message(WARNING "${lab} has no blueprint.cpp or schedule.hpp: no lab${nn} (scripts/lab.sh reset ${nn})")
  endif()
  set(_fa_prev ${nn})

  list(APPEND FA_STEP_LIBS ${lib})
  string(APPEND FA_REGISTRY_DECLS "namespace fa::step${nn} { const StepInfo& info(); }\n")
  string(APPEND FA_REGISTRY_ITEMS "    &fa::step${nn}::info(),\n")
endforeach()

configure_file(${PROJECT_SOURCE_DIR}/cmake/registry.cpp.in ${PROJECT_BINARY_DIR}/gen/registry.cpp @ONLY)
add_library(fa_registry STATIC ${PROJECT_BINARY_DIR}/gen/registry.cpp)
target_link_libraries(fa_registry PUBLIC ${FA_STEP_LIBS})

# The tour: every registered step on one shape (what scripts/run.sh runs by default).
add_executable(tour ${PROJECT_SOURCE_DIR}/common/tools/tour.cpp)
target_link_libraries(tour PRIVATE fa_registry)
target_compile_options(tour PRIVATE ${FA_CXX_WARNINGS})
set_target_properties(tour PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})

# model: the per-resource model re-applied to measured rows, on any machine (docs/anatomy.md).
add_executable(model ${PROJECT_SOURCE_DIR}/common/tools/model_tool.cpp)
target_link_libraries(model PRIVATE fa_registry)
target_compile_options(model PRIVATE ${FA_CXX_WARNINGS})
set_target_properties(model PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})

# bench: chosen steps over a sweep of shapes, one CSV row per run, resumable (docs/profiling.md).
add_executable(bench ${PROJECT_SOURCE_DIR}/common/tools/bench.cpp)
target_link_libraries(bench PRIVATE fa_registry)
target_compile_options(bench PRIVATE ${FA_CXX_WARNINGS})
set_target_properties(bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
