"""python/examples/host_cost.py on the CPU, tiny: a row per backend and pass, each with a host time per call and
a wall time at least as long (the wall time runs to the end of the drained queue, the host time to the last
call queued)."""

import csv
import pathlib
import sys

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples"
sys.path.insert(0, str(EXAMPLE))

import host_cost  # noqa: E402


def test_a_row_per_backend_and_pass_with_host_below_wall(tmp_path):
    out = tmp_path / "host.csv"
    backends = list(host_cost.BACKENDS)
    assert host_cost.main(["--out", str(out), "--calls", "4", "--repeats", "2", "--shape", "1,16,2,32",
                           "--device", "cpu", "--backends", ",".join(backends)]) == 0
    rows = list(csv.DictReader(open(out)))
    assert sorted((r["backend"], r["pass"]) for r in rows) == sorted((b, p) for b in backends for p in ("fwd", "fwd+bwd"))
    for r in rows:
        host, wall = float(r["host_us_per_call"]), float(r["wall_us_per_call"])
        assert 0 < host <= wall, r
        assert (r["B"], r["N"], r["H"], r["d"], r["calls"], r["repeats"]) == ("1", "16", "2", "32", "4", "2")


def test_refuses_zero_calls(tmp_path):
    import pytest
    with pytest.raises(SystemExit) as e:
        host_cost.main(["--out", str(tmp_path / "x.csv"), "--calls", "0", "--device", "cpu"])
    assert e.value.code == 2


def test_refuses_an_unknown_backend(tmp_path):
    import pytest
    with pytest.raises(SystemExit) as e:
        host_cost.main(["--out", str(tmp_path / "x.csv"), "--backends", "steps,nope", "--device", "cpu"])
    assert e.value.code == 2
