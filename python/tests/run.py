"""Runs the package's pytest suite for ctest (tests/CMakeLists.txt), or by hand:

    python3 python/tests/run.py cpu          # the blueprints, the CI subset of the matrix
    python3 python/tests/run.py cuda --full  # the GPU, flash_attn's whole matrix

Exit 77 (ctest's "skipped") with a line saying why, when this Python has no torch or pytest, or the
device asked for is not there: a suite that cannot run is reported as not run, never as passed.
Extra arguments go to pytest.
"""

import os
import pathlib
import sys

SKIP = 77


def main(argv):
    if not argv or argv[0] not in ("cpu", "cuda"):
        print("usage: run.py cpu|cuda [--full] [pytest args]", file=sys.stderr)
        return 2
    device, rest = argv[0], argv[1:]
    full = "--full" in rest
    rest = [a for a in rest if a != "--full"]
    try:
        import pytest
        import torch
    except ImportError as e:
        print(f"SKIPPED: {sys.executable} cannot import {e.name} (Debian: python3-torch, python3-pytest)")
        return SKIP
    if device == "cuda" and not torch.cuda.is_available():
        print("SKIPPED: PyTorch sees no CUDA device")
        return SKIP
    os.environ["FLASH_ATTN_STEPS_TEST_DEVICES"] = device
    os.environ["FLASH_ATTN_STEPS_TEST_MATRIX"] = "full" if full else "ci"
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    here = pathlib.Path(__file__).resolve().parent
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, device {device}, "
          f"matrix {'full' if full else 'ci'}", flush=True)
    workers = []
    if device == "cuda" and full:  # the whole matrix: several processes share the GPU where xdist is there
        try:
            import xdist  # noqa: F401
            workers = ["-n", os.environ.get("FLASH_ATTN_STEPS_TEST_WORKERS", "4")]
        except ImportError:
            pass
    return pytest.main(["-q", "-rs", "-p", "no:cacheprovider", str(here)] + workers + rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
