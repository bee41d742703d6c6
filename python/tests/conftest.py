"""pytest set-up for the package's tests (python/tests/).

The package is imported from python/ (no install needed); its C library from build/ (or
FLASH_ATTN_STEPS_LIB). Which devices run: FLASH_ATTN_STEPS_TEST_DEVICES, a comma-separated list of
"cpu" and "cuda" (default: "cpu", and "cuda" too when PyTorch sees a GPU and the library was built
with CUDA). A device that is asked for and cannot run is reported as skipped, with the reason, never
as passed.
"""

import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import flash_attn_steps as fas  # noqa: E402


def cuda_reason():
    """'' when the package can run on a GPU here, else why not."""
    if not torch.cuda.is_available():
        return "PyTorch sees no CUDA device"
    if not fas.built_with_cuda():
        return "the C library was built without CUDA"
    cc, _, why = fas.gpu_info()
    return "" if cc else why


def devices():
    asked = os.environ.get("FLASH_ATTN_STEPS_TEST_DEVICES")
    if asked:
        return [d.strip() for d in asked.split(",") if d.strip()]
    return ["cpu", "cuda"] if not cuda_reason() else ["cpu"]


def matrix():
    """'full' (flash_attn's sequence-length pairs and every combination: the GPU run) or 'ci' (a
    covering subset small enough for the blueprints in CI)."""
    return os.environ.get("FLASH_ATTN_STEPS_TEST_MATRIX", "ci")


@pytest.fixture(params=devices())
def device(request):
    if request.param == "cuda":
        why = cuda_reason()
        if why:
            pytest.skip("cuda: " + why)
    return torch.device(request.param)


# torch.compile is tried on the GPU (the GPU machine's PyTorch has torch.library.custom_op); the CPU
# run does not collect it, so that it is not counted at all rather than counted as skipped.
collect_ignore = [] if "cuda" in devices() else ["test_compile.py"]
