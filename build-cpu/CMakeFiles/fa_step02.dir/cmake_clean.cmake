file(REMOVE_RECURSE
  "CMakeFiles/fa_step02.dir/steps/02_online_softmax/blueprint.cpp.o"
  "CMakeFiles/fa_step02.dir/steps/02_online_softmax/blueprint.cpp.o.d"
  "libfa_step02.a"
  "libfa_step02.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang CXX)
  include(CMakeFiles/fa_step02.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
