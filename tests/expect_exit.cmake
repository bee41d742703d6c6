# Run CMD with ARGS (a ;-list); fail unless it exits with CODE and its output matches REGEX.
# With SKIP_REGEX: output that matches it (e.g. "no CUDA device") prints "SKIPPED: ..." and succeeds,
# for a test whose SKIP_REGULAR_EXPRESSION then reports it as skipped, not passed.
execute_process(COMMAND ${CMD} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(DEFINED SKIP_REGEX AND "${out}${err}" MATCHES "${SKIP_REGEX}")
  message(STATUS "SKIPPED: ${err}")
  return()
endif()
if(NOT rc STREQUAL CODE)
  message(FATAL_ERROR "expected exit ${CODE}, got ${rc}\nstdout:\n${out}\nstderr:\n${err}")
endif()
# A report wraps long lines under its columns (--grade's, within 100 columns): the regex may match
# the output as printed or with each wrapped line joined back to the one before it.
string(REGEX REPLACE "\n +" " " joined "${out}${err}")
if(NOT "${out}${err}" MATCHES "${REGEX}" AND NOT "${joined}" MATCHES "${REGEX}")
  message(FATAL_ERROR "output does not match '${REGEX}'\nstdout:\n${out}\nstderr:\n${err}")
endif()
message(STATUS "exit ${rc} as expected; output matches '${REGEX}'")
