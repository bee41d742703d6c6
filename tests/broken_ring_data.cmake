# Broken copies of plot_ring's made-up fixtures (SRC: tests/data) for its error tests, one folder each
# under OUT: no_timeline lacks ring_timeline_fixture.csv; no_column has a ring CSV without its
# proj_eff column; bad_number one whose last row has 't1_ms' = 1.0x; bad_timeline a timeline whose
# header lacks t0_ms.
file(REMOVE_RECURSE ${OUT})
foreach(case no_timeline no_column bad_number bad_timeline)
  file(MAKE_DIRECTORY ${OUT}/${case})
  file(COPY ${SRC}/ring_fixture.csv ${SRC}/ring_timeline_fixture.csv DESTINATION ${OUT}/${case})
endforeach()
file(REMOVE ${OUT}/no_timeline/ring_timeline_fixture.csv)
file(READ ${OUT}/no_column/ring_fixture.csv text)
string(REPLACE ",proj_eff," ",proj_eff_renamed," text "${text}")
file(WRITE ${OUT}/no_column/ring_fixture.csv "${text}")
file(APPEND ${OUT}/bad_number/ring_fixture.csv
     "2000-01-01T00:00:00Z,fixture,\"made-up fixture\",32768,8,zigzag,0,1,8,8,128,bf16,1.0x,1,1,1,1,1,1,0.01,0.02,1,0.5,0.001,0.05,PASS,projected from one GPU\n")
file(READ ${OUT}/bad_timeline/ring_timeline_fixture.csv text)
string(REPLACE ",t0_ms," ",t0_renamed," text "${text}")
file(WRITE ${OUT}/bad_timeline/ring_timeline_fixture.csv "${text}")
