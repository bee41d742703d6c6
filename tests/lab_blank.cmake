# Blank one step file for the lab CI (tests/lab_ci.cmake): OUT = `bash SCRIPT blank IN`, written
# only when the script succeeds (an unbalanced lab:begin/lab:end fails the build and names the line).
execute_process(COMMAND bash ${SCRIPT} blank ${IN} OUTPUT_FILE ${OUT}.tmp RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  file(REMOVE ${OUT}.tmp)
  message(FATAL_ERROR "scripts/lab.sh blank ${IN} failed (${rc}): ${err}")
endif()
file(RENAME ${OUT}.tmp ${OUT})
