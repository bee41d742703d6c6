"""One call of a step, forward or backward, on tensors in FlashAttention's layout [B, N, H, d].

Which step runs (`steps_for`):
- on a GPU: step 16's forward and step 19's backward on sm_90 (the Hopper steps), steps 12 and 13
  elsewhere and wherever their features are needed (dropout: steps 12 and 13, since step 16's forward
  has none);
- on the CPU: the blueprints of steps 12 and 13, exact and slow ([capi-cpu]).
FLASH_ATTN_STEPS_FORWARD and FLASH_ATTN_STEPS_BACKWARD (a step id such as "16") override the choice.
FLASH_ATTN_STEPS_DQ=centered gives step 19's backward --dq centered (_ops._opts builds the options).

Nothing here checks the user's arguments: interface.py has done that, and the C library checks what
only it can know (what the step and this GPU take) before any launch.
"""

import ctypes
import os

import torch

from . import _lib

# The head dimensions the course compiles (common/core/problem.hpp: kHeadDims, and d = 256 for the
# Hopper forward). A d in between runs zero-padded to the next one (interface.py, [pad-d]).
HEAD_DIMS = (16, 32, 64, 128, 256)

CPU_STEPS = ("12", "13")      # forward, backward of the CPU path (blueprints)
HOPPER_STEPS = ("16", "19")   # sm_90: wgmma, TMA, warp specialization
AMPERE_STEPS = ("12", "13")   # sm_80 and later: mma.sync, ldmatrix, cp.async; dropout


def padded_head_dim(d):
    """The compiled head dimension a call of head dimension d runs at (d itself when compiled)."""
    for x in HEAD_DIMS:
        if d <= x:
            return x
    raise ValueError(f"head dimension {d} is above the largest the course compiles ({HEAD_DIMS[-1]})")


_CC = {}  # [cc-once] device index (None: the current device) -> compute capability
_DIMS = {}  # [dims-once] step name -> the head dimensions its GPU kernels are compiled for


def _compute_capability(device):
    """The compute capability of `device`, asked of the C library once per device and process: every
    call of the package needs it to pick its step, and the GPU does not change under a running process."""
    if device.index not in _CC:
        _CC[device.index] = _lib.gpu_info()[0]
    return _CC[device.index]


def _head_dims(step):
    """The head dimensions `step`'s GPU kernels are compiled for, asked of the C library once per step and
    process ([dims-once]): the build does not change under a running process, and steps_for runs on
    every call of the package on sm_90."""
    if step not in _DIMS:
        _DIMS[step] = _lib.step_head_dims(step)
    return _DIMS[step]


def steps_for(device, dropout_p=0.0, head_dim=64):
    """(forward step, backward step) for a call on `device` at the (padded) head dimension, as the
    package runs it. On a GPU: the Hopper steps on sm_90 where they take the call (no dropout, a
    head dimension they are compiled for), else steps 12 and 13. At d = 256 the forward is step 16's
    everywhere (the CPU runs its blueprint); no backward takes d = 256."""
    if device.type == "cpu":
        fwd, bwd = CPU_STEPS
        if head_dim > 128:  # d = 256: step 16's tiles alone take it (forward only, no backward has it)
            fwd = HOPPER_STEPS[0]
    else:
        cc = _compute_capability(device)
        fwd, bwd = AMPERE_STEPS
        if cc == 90 and dropout_p == 0.0:
            if head_dim in _head_dims(HOPPER_STEPS[0]):
                fwd = HOPPER_STEPS[0]
            if head_dim in _head_dims(HOPPER_STEPS[1]):
                bwd = HOPPER_STEPS[1]
    return (os.environ.get("FLASH_ATTN_STEPS_FORWARD", fwd), os.environ.get("FLASH_ATTN_STEPS_BACKWARD", bwd))


def make_shape(q, k, causal, window, scale, dropout_p, seed, offset, cache_lens=None):
    B, N, H, d = q.shape
    s = _lib.FaShape()
    s.B, s.N, s.H, s.d = B, N, H, d
    s.Nk, s.Hkv = k.shape[1], k.shape[2]
    s.causal, s.window = int(bool(causal)), int(window)
    s.bf16 = int(q.dtype == torch.bfloat16)
    s.scale = float(scale)
    s.dropout = float(dropout_p)
    s.dropout_seed, s.dropout_offset = int(seed), int(offset)
    if cache_lens is not None:
        arr = (ctypes.c_int64 * B)(*[int(x) for x in cache_lens])
        s.cache_lens = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64))
        s._keep = arr  # the array must outlive the call
    return s


def options_text(options):
    return ";".join(f"{k}={v}" for k, v in sorted(options.items())).encode()


def _fptr(t):
    return ctypes.cast(t.data_ptr(), ctypes.POINTER(ctypes.c_float))


def _heads_first(t):
    """[B, N, H, d] -> float32 contiguous [B, H, N, d] (what a blueprint reads)."""
    return t.permute(0, 2, 1, 3).to(torch.float32).contiguous()


def _tokens_first(t, dtype):
    """float32 [B, H, N, d] -> dtype [B, N, H, d]; the values are already rounded to dtype."""
    return t.permute(0, 2, 1, 3).to(dtype).contiguous()


def check(step, shape, options, backward, on_gpu):
    _lib.check(_lib.lib().fa_check(step.encode(), ctypes.byref(shape), options_text(options), int(backward), int(on_gpu)))


def forward(step, q, k, v, shape, options, out=None, lse=None):
    """out [B, N, H, d] (q's dtype) and lse [B, H, N] (float32). On a GPU `out` and `lse` may be
    views to write into (varlen: one sequence of a packed batch)."""
    if q.device.type == "cpu":
        qf, kf, vf = _heads_first(q), _heads_first(k), _heads_first(v)
        o = torch.empty_like(qf)
        L = torch.empty(qf.shape[:3], dtype=torch.float32)
        _lib.check(_lib.lib().fa_cpu_forward(step.encode(), ctypes.byref(shape), options_text(options),
                                             _fptr(qf), _fptr(kf), _fptr(vf), _fptr(o), _fptr(L)))
        o = _tokens_first(o, q.dtype)
        if out is None:
            return o, L
        out.copy_(o)
        lse.copy_(L)
        return out, lse
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
    p = _ptrs(q, k, v, out, lse)
    _launch(_lib.lib().fa_cuda_forward, step, shape, options, p, q.device, backward=False)
    return out, lse


def backward(step, dout, q, k, v, out, lse, shape, options, dq=None, dk=None, dv=None):
    """dq, dk, dv like q, k, v. On a GPU: dout must have out's strides, and dq, dk, dv (when given)
    q's, k's and v's."""
    if q.device.type == "cpu":
        t = [_heads_first(x) for x in (q, k, v, out)]
        L = lse.to(torch.float32).contiguous()
        g = _heads_first(dout)
        grads = [torch.empty_like(t[0]), torch.empty_like(t[1]), torch.empty_like(t[2])]
        _lib.check(_lib.lib().fa_cpu_backward(step.encode(), ctypes.byref(shape), options_text(options),
                                              *[_fptr(x) for x in t], _fptr(L), _fptr(g), *[_fptr(x) for x in grads]))
        res = [_tokens_first(x, q.dtype) for x in grads]
        if dq is None:
            return tuple(res)
        for dst, src in zip((dq, dk, dv), res):
            dst.copy_(src)
        return dq, dk, dv
    if dq is None:
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    for name, a, b in (("dout", dout, out), ("dq", dq, q), ("dk", dk, k), ("dv", dv, v)):
        if a.stride() != b.stride():
            raise RuntimeError(f"internal: {name} must have the strides of what it differentiates")
    p = _ptrs(q, k, v, out, lse)
    p.dout, p.dq, p.dk, p.dv = dout.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
    _launch(_lib.lib().fa_cuda_backward, step, shape, options, p, q.device, backward=True)
    return dq, dk, dv


def _ptrs(q, k, v, out, lse):
    """[B, N, H, d] tensors: batch, head and row strides in elements; lse [B, H, N] rows contiguous."""
    p = _lib.FaPtrs()
    p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr()
    for name, t in (("q", q), ("k", k), ("v", v), ("o", out)):
        sb, sn, sh, _ = t.stride()
        setattr(p, name + "_sb", sb)
        setattr(p, name + "_sh", sh)
        setattr(p, name + "_sn", sn)
    if lse.stride(2) != 1:
        raise RuntimeError("internal: softmax_lse's rows must be contiguous")
    p.lse_sb, p.lse_sh = lse.stride(0), lse.stride(1)
    return p


def _launch(fn, step, shape, options, p, device, backward):
    L = _lib.lib()
    opts = options_text(options)
    with torch.cuda.device(device):
        nbytes = ctypes.c_uint64(0)
        _lib.check(L.fa_cuda_workspace_bytes(step.encode(), ctypes.byref(shape), opts, int(backward), ctypes.byref(nbytes)))
        ws = torch.empty(max(int(nbytes.value), 1), dtype=torch.uint8, device=device)
        stream = torch.cuda.current_stream(device).cuda_stream
        _lib.check(fn(step.encode(), ctypes.byref(shape), opts, ctypes.byref(p), ctypes.c_void_p(ws.data_ptr()),
                      ctypes.c_void_p(stream)))


def dropout_keep(shape, b, h):
    """The dropout mask of query head h of sequence b: bool [N, Nk] (True = kept)."""
    keep = torch.empty((shape.N, shape.Nk), dtype=torch.uint8)
    _lib.check(_lib.lib().fa_dropout_keep(ctypes.byref(shape), int(b), int(h),
                                          ctypes.cast(keep.data_ptr(), ctypes.POINTER(ctypes.c_uint8))))
    return keep.bool()
