# Run CMD with ARGS (a ;-list); fail unless it exits with CODE and its output matches REGEX.
execute_process(COMMAND ${CMD} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL CODE)
  message(FATAL_ERROR "expected exit ${CODE}, got ${rc}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(NOT "${out}${err}" MATCHES "${REGEX}")
  message(FATAL_ERROR "output does not match '${REGEX}'\nstdout:\n${out}\nstderr:\n${err}")
endif()
message(STATUS "exit ${rc} as expected; output matches '${REGEX}'")
