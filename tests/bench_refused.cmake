# bench counts a variant the step does not build for the shape as refused — named on its line, in the
# summary, never as a row and never as passed — and does not fail the sweep for it: step 13's ablations
# at d = 128, where --tiles 128x128 exceeds the shared-memory budget, on the CPU blueprint. Every
# other ablation is measured (their number derived: tests/bench_count.cmake).
file(REMOVE ${OUT})
set(args --out ${OUT} --steps 13 --variants ablations --ns 32 --ds 128 --causal 0 --dtypes fp16 --tokens 32 --width 128 --backend cpu)
include(${CMAKE_CURRENT_LIST_DIR}/bench_count.cmake)
math(EXPR measured "${EXPECTED} - 1")
execute_process(COMMAND ${CMD} ${args} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT rc EQUAL 0 OR NOT err MATCHES "${measured} runs measured, 0 already there, 1 refused [^,]*, 0 failed"
   OR NOT err MATCHES "refused: step13: --tiles 128x128")
  message(FATAL_ERROR "expected ${measured} of ${EXPECTED} runs measured and one refused; exit ${rc}\n${err}")
endif()
file(STRINGS ${OUT} lines)
list(LENGTH lines n)
math(EXPR want "${measured} + 1")
if(NOT n EQUAL want)
  message(FATAL_ERROR "expected a header and ${measured} rows in ${OUT}, found ${n} lines")
endif()
message(STATUS "bench ran ${measured} of ${EXPECTED} variants and named the refused one")
