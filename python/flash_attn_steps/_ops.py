"""The package's operators and their autograd: dense and packed (varlen) attention.

On a PyTorch with `torch.library.custom_op` (2.4 and later: the GPU machine's 2.11) the forward and
the backward are registered as operators `flash_attn_steps::fwd`, `::bwd`, `::varlen_fwd` and
`::varlen_bwd`, each with a fake (shapes only), and the backward through
`torch.library.register_autograd`, so that `torch.compile(fullgraph=True)` traces a model through
them. On older PyTorch (Debian's 1.13, CI's) the same functions sit behind a plain
`torch.autograd.Function`. Both call the same implementations below.

[dispatch] Where the operators exist, FLASH_ATTN_STEPS_DISPATCH picks the eager path (read at import;
`DISPATCH` here may be set at run time): `op` (the default) calls the operators always; `auto` calls them
only while torch.compile traces, and the `torch.autograd.Function` otherwise, which skips the operators'
dispatch and their Python autograd per call (python/examples/host_cost.py prices the two).

Every tensor here is already checked and padded to a compiled head dimension (interface.py).
"""

import os
from typing import List, Tuple

import torch

from . import _core

HAVE_CUSTOM_OP = hasattr(torch, "library") and hasattr(torch.library, "custom_op")
# [dispatch] Which eager path a call takes where the operators exist (the module's docstring says why).
DISPATCHES = ("op", "auto")
DISPATCH = os.environ.get("FLASH_ATTN_STEPS_DISPATCH", "op")
if DISPATCH not in DISPATCHES:
    raise ValueError(f"FLASH_ATTN_STEPS_DISPATCH={DISPATCH!r}: expected one of {', '.join(DISPATCHES)}")


def _compiling():
    """Inside torch.compile's tracing (the operators' path; interface.py's checks use it too)."""
    c = getattr(torch, "compiler", None)
    return bool(c is not None and hasattr(c, "is_compiling") and c.is_compiling())


# ---- the implementations ------------------------------------------------------------------------

def _shape(q, k, causal, window, scale, dropout_p, seed, offset=0):
    return _core.make_shape(q, k, causal, window, scale, dropout_p, seed, offset)


def _opts(step, deterministic=False):
    """The step's options for a backward: --deterministic where asked, and step 19's --dq from
    FLASH_ATTN_STEPS_DQ ("centered": the keys' mean taken out of dQ's sum; docs/19_hopper_backward.md)."""
    o = {"deterministic": "on"} if deterministic and step in ("13", "19") else {}
    dq = os.environ.get("FLASH_ATTN_STEPS_DQ", "")
    if dq and step == "19":
        o["dq"] = dq
    return o


def fwd_impl(q, k, v, scale, causal, window, dropout_p, seed):
    """out [B, N, H, d], lse [B, H, N] of one dense call."""
    B, N, H, d = q.shape
    if N == 0 or k.shape[1] == 0:  # no query rows, or no keys: O = 0 and L = +inf (docs/python.md)
        return torch.zeros_like(q), torch.full((B, H, N), float("inf"), dtype=torch.float32, device=q.device)
    step, _ = _core.steps_for(q.device, dropout_p, d)
    s = _shape(q, k, causal, window, scale, dropout_p, seed)
    _core.check(step, s, {}, False, q.is_cuda)
    return _core.forward(step, q, k, v, s, {})


def bwd_impl(dout, q, k, v, out, lse, scale, causal, window, dropout_p, seed, deterministic):
    B, N, H, d = q.shape
    if N == 0 or k.shape[1] == 0:
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    _, step = _core.steps_for(q.device, dropout_p, d)
    s = _shape(q, k, causal, window, scale, dropout_p, seed)
    o = _opts(step, deterministic)
    _core.check(step, s, o, True, q.is_cuda)
    if q.is_cuda:  # the launcher wants dO with O's strides and writes dQ, dK, dV with Q's, K's, V's
        dout, q, k, v, out = (x.contiguous() for x in (dout, q, k, v, out))
    return _core.backward(step, dout, q, k, v, out, lse, s, o)


# [precheck] the steps' own refusals asked before the forward runs
def precheck(q, k, causal, window, scale, dropout_p, needs_grad, deterministic):
    """Before anything runs: whether the forward's step takes the call, and with
    `needs_grad` the backward's too, so that a refusal comes before any launch (q, k [B, N, H, d],
    padded; for packed sequences one sequence's shape stands for all: what a step refuses does not
    depend on the lengths)."""
    fwd, bwd = _core.steps_for(q.device, dropout_p, q.shape[-1])
    s = _shape(q, k, causal, window, scale, dropout_p, 0)
    _core.check(fwd, s, {}, False, q.is_cuda)
    if needs_grad:
        _core.check(bwd, s, _opts(bwd, deterministic), True, q.is_cuda)


def _bounds(cu):
    c = cu.tolist()
    return list(zip(c[:-1], c[1:]))


# [varlen-loop] packed sequences, one step call per sequence on views (dropout's offset: the sequence)
def varlen_fwd_impl(q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed):
    """Packed sequences [total, H, d]: out [total_q, H, d], lse [H, total_q]. One step call per
    sequence on views of the packed tensors (the kernels do not take cu_seqlens yet)."""
    out = torch.zeros_like(q)
    lse = torch.full((q.shape[1], q.shape[0]), float("inf"), dtype=torch.float32, device=q.device)
    for b, ((q0, q1), (k0, k1)) in enumerate(zip(_bounds(cu_q), _bounds(cu_k))):
        if q1 == q0 or k1 == k0:
            continue
        qb, kb, vb = q[q0:q1].unsqueeze(0), k[k0:k1].unsqueeze(0), v[k0:k1].unsqueeze(0)
        step, _ = _core.steps_for(q.device, dropout_p, q.shape[-1])
        s = _shape(qb, kb, causal, window, scale, dropout_p, seed, offset=b)
        _core.check(step, s, {}, False, q.is_cuda)
        _core.forward(step, qb, kb, vb, s, {}, out=out[q0:q1].unsqueeze(0), lse=lse[:, q0:q1].unsqueeze(0))
    return out, lse


def varlen_bwd_impl(dout, q, k, v, out, lse, cu_q, cu_k, scale, causal, window, dropout_p, seed, deterministic):
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    if q.is_cuda:
        dout, q, k, v, out = (x.contiguous() for x in (dout, q, k, v, out))
        dq, dk, dv = dq.contiguous(), dk.contiguous(), dv.contiguous()
    for b, ((q0, q1), (k0, k1)) in enumerate(zip(_bounds(cu_q), _bounds(cu_k))):
        if q1 == q0 or k1 == k0:
            continue
        sl = lambda t, a, z: t[a:z].unsqueeze(0)
        qb, kb, vb = sl(q, q0, q1), sl(k, k0, k1), sl(v, k0, k1)
        _, step = _core.steps_for(q.device, dropout_p, q.shape[-1])
        s = _shape(qb, kb, causal, window, scale, dropout_p, seed, offset=b)
        o = _opts(step, deterministic)
        _core.check(step, s, o, True, q.is_cuda)
        _core.backward(step, sl(dout, q0, q1), qb, kb, vb, sl(out, q0, q1), lse[:, q0:q1].unsqueeze(0), s, o,
                       dq=sl(dq, q0, q1), dk=sl(dk, k0, k1), dv=sl(dv, k0, k1))
    return dq, dk, dv


# ---- autograd -----------------------------------------------------------------------------------

# The plain torch.autograd.Function: every PyTorch (the only path before custom_op).

class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale, causal, window, dropout_p, seed, deterministic):
        out, lse = fwd_impl(q, k, v, scale, causal, window, dropout_p, seed)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (scale, causal, window, dropout_p, seed, deterministic)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = bwd_impl(dout, q, k, v, out, lse, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None

class _VarlenAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed, deterministic):
        out, lse = varlen_fwd_impl(q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed)
        ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k)
        ctx.args = (scale, causal, window, dropout_p, seed, deterministic)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = varlen_bwd_impl(dout, q, k, v, out, lse, cu_q, cu_k, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None, None, None

def function_attention(q, k, v, scale, causal, window, dropout_p, seed, deterministic):
    return _Attention.apply(q, k, v, scale, causal, window, dropout_p, seed, deterministic)

def function_varlen_attention(q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed, deterministic):
    return _VarlenAttention.apply(q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed, deterministic)


if HAVE_CUSTOM_OP:
    @torch.library.custom_op("flash_attn_steps::fwd", mutates_args=())
    def _fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool, window: int,
                dropout_p: float, seed: int, deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        return fwd_impl(q, k, v, scale, causal, window, dropout_p, seed)

    @_fwd_op.register_fake
    def _(q, k, v, scale, causal, window, dropout_p, seed, deterministic):
        B, N, H, _ = q.shape
        return torch.empty_like(q), q.new_empty((B, H, N), dtype=torch.float32)

    @torch.library.custom_op("flash_attn_steps::bwd", mutates_args=())
    def _bwd_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                lse: torch.Tensor, scale: float, causal: bool, window: int, dropout_p: float, seed: int,
                deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return bwd_impl(dout, q, k, v, out, lse, scale, causal, window, dropout_p, seed, deterministic)

    @_bwd_op.register_fake
    def _(dout, q, k, v, out, lse, scale, causal, window, dropout_p, seed, deterministic):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def _fwd_setup(ctx, inputs, output):
        q, k, v, scale, causal, window, dropout_p, seed, deterministic = inputs
        ctx.save_for_backward(q, k, v, output[0], output[1])
        ctx.args = (scale, causal, window, dropout_p, seed, deterministic)

    def _fwd_backward(ctx, dout, dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.flash_attn_steps.bwd(dout, q, k, v, out, lse, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None

    torch.library.register_autograd("flash_attn_steps::fwd", _fwd_backward, setup_context=_fwd_setup)

    @torch.library.custom_op("flash_attn_steps::varlen_fwd", mutates_args=())
    def _varlen_fwd_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor,
                       scale: float, causal: bool, window: int, dropout_p: float, seed: int,
                       deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        return varlen_fwd_impl(q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed)

    @_varlen_fwd_op.register_fake
    def _(q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed, deterministic):
        return torch.empty_like(q), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)

    @torch.library.custom_op("flash_attn_steps::varlen_bwd", mutates_args=())
    def _varlen_bwd_op(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                       lse: torch.Tensor, cu_q: torch.Tensor, cu_k: torch.Tensor, scale: float, causal: bool,
                       window: int, dropout_p: float, seed: int,
                       deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return varlen_bwd_impl(dout, q, k, v, out, lse, cu_q, cu_k, scale, causal, window, dropout_p, seed,
                               deterministic)

    @_varlen_bwd_op.register_fake
    def _(dout, q, k, v, out, lse, cu_q, cu_k, scale, causal, window, dropout_p, seed, deterministic):
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def _varlen_setup(ctx, inputs, output):
        q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed, deterministic = inputs
        ctx.save_for_backward(q, k, v, output[0], output[1], cu_q, cu_k)
        ctx.args = (scale, causal, window, dropout_p, seed, deterministic)

    def _varlen_backward(ctx, dout, dlse):
        q, k, v, out, lse, cu_q, cu_k = ctx.saved_tensors
        dq, dk, dv = torch.ops.flash_attn_steps.varlen_bwd(dout, q, k, v, out, lse, cu_q, cu_k, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None, None, None

    torch.library.register_autograd("flash_attn_steps::varlen_fwd", _varlen_backward, setup_context=_varlen_setup)

    def op_attention(q, k, v, scale, causal, window, dropout_p, seed, deterministic):
        return torch.ops.flash_attn_steps.fwd(q, k, v, scale, causal, window, dropout_p, seed, deterministic)

    def op_varlen_attention(q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed, deterministic):
        return torch.ops.flash_attn_steps.varlen_fwd(q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed,
                                                     deterministic)



def attention(q, k, v, scale, causal, window, dropout_p, seed, deterministic):
    """[dispatch] The operator where it exists and DISPATCH asks for it (always, or while torch.compile traces),
    else the autograd.Function."""
    if HAVE_CUSTOM_OP and (DISPATCH == "op" or _compiling()):
        return op_attention(q, k, v, scale, causal, window, dropout_p, seed, deterministic)
    return function_attention(q, k, v, scale, causal, window, dropout_p, seed, deterministic)


def varlen_attention(q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed, deterministic):
    if HAVE_CUSTOM_OP and (DISPATCH == "op" or _compiling()):
        return op_varlen_attention(q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed, deterministic)
    return function_varlen_attention(q, k, v, cu_q, cu_k, scale, causal, window, dropout_p, seed, deterministic)

__all__: List[str] = ["attention", "varlen_attention", "DISPATCH", "DISPATCHES", "fwd_impl", "bwd_impl", "varlen_fwd_impl", "varlen_bwd_impl",
                      "HAVE_CUSTOM_OP"]
