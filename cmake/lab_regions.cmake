# [lab-region] fa_lab_regions(STEP_DIR OUT): the lab regions of STEP_DIR's blueprint.cpp and kernel.cu
# as a C++ initializer list for the generated main (cmake/step_main.cpp.in, cmake/lab_main.cpp.in):
#     // lab:begin NAME {TAGS}: hint      ->   {"blueprint.cpp", "NAME", "TAGS"},
# TAGS (optional) say where a mistake in the region shows and which cases it is about; --grade's
# "look at" names the region they fit (common/harness/grade_report.cpp). Read from the step's own
# files, so a lab or a mutant of the step names the same regions.
function(fa_lab_regions step_dir out)
  set(items "")
  foreach(f blueprint.cpp kernel.cu)
    if(NOT EXISTS ${step_dir}/${f})
      continue()
    endif()
    set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${step_dir}/${f})
    # A student tree's steps are blanked: their regions are the TODO(lab) lines.
    file(STRINGS ${step_dir}/${f} begins REGEX "^[ \t]*// (lab:begin|TODO[(]lab[)]) ")
    foreach(b IN LISTS begins)
      string(REGEX MATCH "(lab:begin|TODO[(]lab[)]) ([A-Za-z0-9_.-]+)( {([^}]*)})?:" m "${b}")
      if(NOT m)
        continue()
      endif()
      string(APPEND items "    {\"${f}\", \"${CMAKE_MATCH_2}\", \"${CMAKE_MATCH_4}\"},\n")
    endforeach()
  endforeach()
  set(${out} "${items}" PARENT_SCOPE)
endfunction()
