# CMake generated Testfile for 
# Source directory: /work/main/tests
# Build directory: /work/main/build-cpu/tests
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
include("/work/main/build-cpu/tests/test_cpu_include-b858cb2.cmake")
include("/work/main/build-cpu/tests/test_gpu_include-b858cb2.cmake")
add_test([=[cli: step01 rejects a negative --n]=] "/usr/bin/cmake" "-DCMD=/work/main/build-cpu/step01" "-DARGS=--n;-3" "-DCODE=2" "-DREGEX=--n" "-P" "/work/main/tests/expect_exit.cmake")
set_tests_properties([=[cli: step01 rejects a negative --n]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;21;add_test;/work/main/tests/CMakeLists.txt;25;fa_expect_exit;/work/main/tests/CMakeLists.txt;0;")
add_test([=[cli: step01 rejects --d 48]=] "/usr/bin/cmake" "-DCMD=/work/main/build-cpu/step01" "-DARGS=--d;48" "-DCODE=2" "-DREGEX=--d must be one of" "-P" "/work/main/tests/expect_exit.cmake")
set_tests_properties([=[cli: step01 rejects --d 48]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;21;add_test;/work/main/tests/CMakeLists.txt;26;fa_expect_exit;/work/main/tests/CMakeLists.txt;0;")
add_test([=[cli: step01 rejects --dtype fp8]=] "/usr/bin/cmake" "-DCMD=/work/main/build-cpu/step01" "-DARGS=--dtype;fp8" "-DCODE=2" "-DREGEX=--dtype" "-P" "/work/main/tests/expect_exit.cmake")
set_tests_properties([=[cli: step01 rejects --dtype fp8]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;21;add_test;/work/main/tests/CMakeLists.txt;27;fa_expect_exit;/work/main/tests/CMakeLists.txt;0;")
add_test([=[cli: step01 rejects an unknown flag]=] "/usr/bin/cmake" "-DCMD=/work/main/build-cpu/step01" "-DARGS=--frobnicate" "-DCODE=2" "-DREGEX=unknown flag --frobnicate" "-P" "/work/main/tests/expect_exit.cmake")
set_tests_properties([=[cli: step01 rejects an unknown flag]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;21;add_test;/work/main/tests/CMakeLists.txt;28;fa_expect_exit;/work/main/tests/CMakeLists.txt;0;")
add_test([=[cli: step01 rejects --gemm foo]=] "/usr/bin/cmake" "-DCMD=/work/main/build-cpu/step01" "-DARGS=--gemm;foo" "-DCODE=2" "-DREGEX=--gemm must be one of" "-P" "/work/main/tests/expect_exit.cmake")
set_tests_properties([=[cli: step01 rejects --gemm foo]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;21;add_test;/work/main/tests/CMakeLists.txt;29;fa_expect_exit;/work/main/tests/CMakeLists.txt;0;")
add_test([=[cli: step01 rejects a missing value]=] "/usr/bin/cmake" "-DCMD=/work/main/build-cpu/step01" "-DARGS=--b" "-DCODE=2" "-DREGEX=--b needs a value" "-P" "/work/main/tests/expect_exit.cmake")
set_tests_properties([=[cli: step01 rejects a missing value]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;21;add_test;/work/main/tests/CMakeLists.txt;30;fa_expect_exit;/work/main/tests/CMakeLists.txt;0;")
add_test([=[cli: step01 --help]=] "/usr/bin/cmake" "-DCMD=/work/main/build-cpu/step01" "-DARGS=--help" "-DCODE=0" "-DREGEX=--causal" "-P" "/work/main/tests/expect_exit.cmake")
set_tests_properties([=[cli: step01 --help]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;21;add_test;/work/main/tests/CMakeLists.txt;31;fa_expect_exit;/work/main/tests/CMakeLists.txt;0;")
add_test([=[cli: step01 blueprint passes and reports its ledger]=] "/usr/bin/cmake" "-DCMD=/work/main/build-cpu/step01" "-DARGS=--backend;cpu;--n;70;--nk;50;--causal;--d;32" "-DCODE=0" "-DREGEX=PASS.*equals the closed form|equals the closed form" "-P" "/work/main/tests/expect_exit.cmake")
set_tests_properties([=[cli: step01 blueprint passes and reports its ledger]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;21;add_test;/work/main/tests/CMakeLists.txt;32;fa_expect_exit;/work/main/tests/CMakeLists.txt;0;")
add_test([=[cli: step01 --csv prints a header and a row]=] "/usr/bin/cmake" "-DCMD=/work/main/build-cpu/step01" "-DARGS=--backend;cpu;--n;33;--csv" "-DCODE=0" "-DREGEX=step,variant,backend,device,dtype,B,H,N,Nk,d,causal" "-P" "/work/main/tests/expect_exit.cmake")
set_tests_properties([=[cli: step01 --csv prints a header and a row]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;21;add_test;/work/main/tests/CMakeLists.txt;34;fa_expect_exit;/work/main/tests/CMakeLists.txt;0;")
add_test([=[docs: measured tables match plots/data]=] "/root/.pyenv/shims/python3" "/work/main/scripts/doc_tables.py" "--check")
set_tests_properties([=[docs: measured tables match plots/data]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;40;add_test;/work/main/tests/CMakeLists.txt;0;")
add_test([=[plots: plot_traffic draws traffic.png and memory.png]=] "/usr/bin/cmake" "-DCMD=/work/main/build-cpu/plot_traffic" "-DOUT=/work/main/build-cpu/tests/plot_test" "-P" "/work/main/tests/expect_png.cmake")
set_tests_properties([=[plots: plot_traffic draws traffic.png and memory.png]=] PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;48;add_test;/work/main/tests/CMakeLists.txt;0;")
