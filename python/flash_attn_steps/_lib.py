"""The C library (python/csrc/fa_capi.cpp, built by CMake as libfa_python.so), loaded with ctypes.

ctypes rather than a PyTorch extension: the library is compiled against no PyTorch, so the same
file serves Debian's CPU-only torch 1.13 and the GPU machine's torch 2.11 (docs/python.md,
"Binding"). Tensors cross as raw pointers with their strides; on a GPU the call runs on PyTorch's
current stream.
"""

import ctypes
import os
import pathlib

FA_OK, FA_INVALID, FA_UNSUPPORTED, FA_RUNTIME = 0, 1, 2, 3
ABI_VERSION = 1
LIBRARY_NAME = "libfa_python.so"
ENV_LIBRARY = "FLASH_ATTN_STEPS_LIB"


class UnsupportedError(RuntimeError):
    """What the course's kernels do not offer (a head dimension, an option, this GPU): the message
    names the step that refused and why. Raised before anything is launched."""


class FaShape(ctypes.Structure):
    _fields_ = [
        ("B", ctypes.c_int64), ("H", ctypes.c_int64), ("Hkv", ctypes.c_int64),
        ("N", ctypes.c_int64), ("Nk", ctypes.c_int64), ("d", ctypes.c_int64),
        ("causal", ctypes.c_int32), ("bf16", ctypes.c_int32),
        ("window", ctypes.c_int64),
        ("scale", ctypes.c_double), ("dropout", ctypes.c_double),
        ("dropout_seed", ctypes.c_uint64), ("dropout_offset", ctypes.c_uint64),
        ("cache_lens", ctypes.POINTER(ctypes.c_int64)),
    ]


class FaPtrs(ctypes.Structure):
    _fields_ = [
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
        ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p),
    ] + [(n, ctypes.c_int64) for n in (
        "q_sb", "q_sh", "q_sn", "k_sb", "k_sh", "k_sn", "v_sb", "v_sh", "v_sn",
        "o_sb", "o_sh", "o_sn", "lse_sb", "lse_sh")] + [
        ("dout", ctypes.c_void_p), ("dq", ctypes.c_void_p), ("dk", ctypes.c_void_p), ("dv", ctypes.c_void_p),
    ]


def _candidates():
    env = os.environ.get(ENV_LIBRARY)
    if env:
        return [pathlib.Path(env)]
    here = pathlib.Path(__file__).resolve().parent
    root = here.parent.parent
    return [here / LIBRARY_NAME, root / "build" / LIBRARY_NAME, root / "build-cpu" / LIBRARY_NAME]


_lib = None
_path = None


def library_path():
    """Where the C library was found (or None before the first call)."""
    return _path


def lib():
    """The loaded library; ImportError with the command that builds it when there is none."""
    global _lib, _path
    if _lib is not None:
        return _lib
    tried = _candidates()
    found = next((p for p in tried if p.is_file()), None)
    if found is None:
        raise ImportError(
            "flash_attn_steps: its C library is not built (looked for " + ", ".join(str(p) for p in tried)
            + "). Build it from the repository's root: `scripts/run.sh python` (build/ with a GPU, "
            "build-cpu/ without), or `make -C build fa_python` in a configured build; or point " + ENV_LIBRARY +
            " at a libfa_python.so")
    L = ctypes.CDLL(str(found))
    c = ctypes
    P, S = c.POINTER(FaPtrs), c.POINTER(FaShape)
    fp, u8 = c.POINTER(c.c_float), c.POINTER(c.c_uint8)
    sig = {
        "fa_abi_version": ([], c.c_int),
        "fa_last_error": ([], c.c_char_p),
        "fa_built_with_cuda": ([], c.c_int),
        "fa_gpu_info": ([c.POINTER(c.c_int), c.POINTER(c.c_int)], c.c_int),
        "fa_step_head_dims": ([c.c_char_p, c.POINTER(c.c_int), c.c_int, c.POINTER(c.c_int)], c.c_int),
        "fa_check": ([c.c_char_p, S, c.c_char_p, c.c_int, c.c_int], c.c_int),
        "fa_cpu_forward": ([c.c_char_p, S, c.c_char_p, fp, fp, fp, fp, fp], c.c_int),
        "fa_cpu_backward": ([c.c_char_p, S, c.c_char_p] + [fp] * 9, c.c_int),
        "fa_dropout_keep": ([S, c.c_int64, c.c_int64, u8], c.c_int),
        "fa_cuda_workspace_bytes": ([c.c_char_p, S, c.c_char_p, c.c_int, c.POINTER(c.c_uint64)], c.c_int),
        "fa_cuda_forward": ([c.c_char_p, S, c.c_char_p, P, c.c_void_p, c.c_void_p], c.c_int),
        "fa_cuda_backward": ([c.c_char_p, S, c.c_char_p, P, c.c_void_p, c.c_void_p], c.c_int),
    }
    for name, (args, res) in sig.items():
        f = getattr(L, name)
        f.argtypes, f.restype = args, res
    if L.fa_abi_version() != ABI_VERSION:
        raise ImportError(f"flash_attn_steps: {found} has ABI {L.fa_abi_version()}, this package wants "
                          f"{ABI_VERSION}: rebuild it (make -C build fa_python)")
    _lib, _path = L, found
    return L


def check(rc):
    """Turn a return code into the exception its message belongs to."""
    if rc == FA_OK:
        return
    msg = lib().fa_last_error().decode(errors="replace")
    if rc == FA_INVALID:
        raise ValueError(msg)
    if rc == FA_UNSUPPORTED:
        raise UnsupportedError(msg)
    raise RuntimeError(msg)


def built_with_cuda():
    return bool(lib().fa_built_with_cuda())


def step_head_dims(step):
    """The head dimensions a step's GPU kernels are compiled for."""
    dims, n = (ctypes.c_int * 16)(), ctypes.c_int(0)
    check(lib().fa_step_head_dims(step.encode(), dims, 16, ctypes.byref(n)))
    return tuple(dims[i] for i in range(min(n.value, 16)))


def gpu_info():
    """(compute capability as major*10 + minor, SM count) of the current device, or (0, 0) and the
    reason when the library cannot use one."""
    cc, sms = ctypes.c_int(0), ctypes.c_int(0)
    rc = lib().fa_gpu_info(ctypes.byref(cc), ctypes.byref(sms))
    if rc != FA_OK:
        return 0, 0, lib().fa_last_error().decode(errors="replace")
    return cc.value, sms.value, ""
