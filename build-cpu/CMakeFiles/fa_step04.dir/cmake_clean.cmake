file(REMOVE_RECURSE
  "CMakeFiles/fa_step04.dir/steps/04_fa2_q_outer/blueprint.cpp.o"
  "CMakeFiles/fa_step04.dir/steps/04_fa2_q_outer/blueprint.cpp.o.d"
  "libfa_step04.a"
  "libfa_step04.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/fa_step04.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
