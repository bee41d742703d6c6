# One lab CI check (tests/lab_ci.cmake): run CMD with ARGS (a ;-list); fail unless it exits with CODE
# and its output matches REGEX. With BLANKED and SOLUTION: first fail when the blanked file is the
# step's own (no lab:begin regions: the lab would be the solution). On failure, print the grade's
# FAIL lines and its last lines, not its whole report.
if(DEFINED BLANKED AND DEFINED SOLUTION)
  file(READ ${BLANKED} blanked)
  file(READ ${SOLUTION} solution)
  if(blanked STREQUAL solution)
    message(FATAL_ERROR "${SOLUTION} has no '// lab:begin NAME: hint' ... '// lab:end' regions: "
                        "its blanked lab is the solution itself")
  endif()
endif()
execute_process(COMMAND ${CMD} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX REPLACE "\n +" " " joined "${out}${err}")  # the report's wrapped lines joined back
if(NOT rc STREQUAL CODE OR (NOT "${out}${err}" MATCHES "${REGEX}" AND NOT "${joined}" MATCHES "${REGEX}"))
  string(REGEX MATCHALL "[^\n]*(FAIL|NOT RUN|crash|timeout)[^\n]*\n" bad "${out}")
  list(LENGTH bad nbad)
  if(nbad GREATER 12)
    list(SUBLIST bad 0 12 bad)
  endif()
  string(REPLACE ";" "" bad "${bad}")
  string(LENGTH "${out}" len)
  set(tail "${out}")
  if(len GREATER 3000)
    math(EXPR from "${len} - 3000")
    string(SUBSTRING "${out}" ${from} -1 tail)
  endif()
  message(FATAL_ERROR "expected exit ${CODE} and output matching '${REGEX}'; got exit ${rc}\n"
                      "failing lines (first 12):\n${bad}\nlast of stdout:\n${tail}\nstderr:\n${err}")
endif()
message(STATUS "exit ${rc} as expected; output matches '${REGEX}'")
