"""FlashAttention-2's Python interface over the course's kernels.

The names, the order of the arguments, their defaults, the layouts ([batch, seqlen, nheads, headdim];
varlen [total, nheads, headdim] with cu_seqlens) and the return values are flash_attn's
(flash_attn/flash_attn_interface.py, version 2), so that a model written for flash_attn runs with its
import line changed. What the course's kernels do not offer (softcap, ALiBi, rotary embedding, a
window that reaches right of the diagonal) raises UnsupportedError naming the argument.

Every argument is checked before anything runs; a bad one raises ValueError (TypeError for a
non-tensor) naming it, and nothing is left changed ([checks]).
"""

import math

import torch
import torch.nn.functional as F

from . import _core, _ops
from ._lib import UnsupportedError

_DTYPES = (torch.float16, torch.bfloat16)


# ---- argument checks ----------------------------------------------------------------------------
# [checks] each raises naming the argument, before anything runs

def _tensor(name, t, ndim, like=None):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _DTYPES:
        raise ValueError(f"{name}: dtype {t.dtype} is not supported: the kernels take torch.float16 and torch.bfloat16")
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{name}: device {t.device} is neither the CPU nor a CUDA GPU")
    if like is not None:
        lname, lt = like
        if t.dtype != lt.dtype:
            raise ValueError(f"{name}: dtype {t.dtype} differs from {lname}'s {lt.dtype}")
        if t.device != lt.device:
            raise ValueError(f"{name}: on {t.device}, {lname} on {lt.device}")
    if t.numel() > 0 and t.stride(-1) != 1:
        raise ValueError(f"{name}: its last dimension (headdim) must be contiguous (stride 1, got {t.stride(-1)})")
    return t


def _heads(q, k, v, qname="q", kname="k", vname="v"):
    """The head dimension and the heads: one d for all, H a multiple of HKV."""
    if k.shape != v.shape:
        raise ValueError(f"{vname}: shape {tuple(v.shape)} differs from {kname}'s {tuple(k.shape)}")
    d = q.shape[-1]
    if k.shape[-1] != d:
        raise ValueError(f"{kname}: head dimension {k.shape[-1]} differs from {qname}'s {d}")
    H, Hkv = q.shape[-2], k.shape[-2]
    if H < 1 or Hkv < 1 or H % Hkv != 0:
        raise ValueError(f"{kname}: {Hkv} key/value heads do not divide the {H} query heads of {qname}")
    if d < 1 or d > _core.HEAD_DIMS[-1]:
        raise ValueError(f"{qname}: head dimension {d} is outside 1 .. {_core.HEAD_DIMS[-1]}")
    return d


def _scale(softmax_scale, d):
    if softmax_scale is None:
        return 1.0 / math.sqrt(d)
    s = float(softmax_scale)
    if not math.isfinite(s) or s <= 0:
        raise ValueError(f"softmax_scale: must be a finite number above 0 (got {softmax_scale})")
    return s


def _dropout(dropout_p):
    p = float(dropout_p)
    if not (0.0 <= p < 1.0):
        raise ValueError(f"dropout_p: must be in [0, 1) (got {dropout_p})")
    return p


def _unsupported(**given):
    for name, (value, default) in given.items():
        if value is not None and value != default:
            raise UnsupportedError(f"{name}: not offered by the course's kernels (only its default, {default!r})")


def _window(causal, window_size):
    """FlashAttention's (left, right) -> the course's (causal, window): query i sees keys
    i + Nk − N − window < j <= i + Nk − N. The course's kernels have the causal band only, so right
    must be 0 (or causal=True, which sets it to 0) whenever a window is asked for."""
    try:
        left, right = (int(x) for x in window_size)
    except (TypeError, ValueError):
        raise ValueError(f"window_size: expected a pair (left, right) of integers, got {window_size!r}") from None
    if left < -1 or right < -1:
        raise ValueError(f"window_size: entries are -1 (no limit) or a number of keys >= 0, got {window_size!r}")
    if causal:
        right = 0
    if left == -1 and right == -1:
        return bool(causal), 0
    if right != 0:
        raise UnsupportedError(
            f"window_size={tuple(window_size)} with causal={causal}: the course's kernels take a window on the causal "
            "diagonal only (right = 0, or causal=True), or none")
    return True, 0 if left == -1 else left + 1


def _flag(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"{name}: expected True or False, got {value!r}")
    return value


# Inside torch.compile's tracing (_ops._compiling): the checks that read tensor values (cu_seqlens) or call
# the C library are left to the operators themselves, which run them when the graph runs.
_compiling = _ops._compiling


def _needs_grad(*ts):
    return torch.is_grad_enabled() and any(t.requires_grad for t in ts)


def _seed(dropout_p):
    """Dropout's Philox key for one call, drawn from PyTorch's default generator (so that
    torch.manual_seed makes a run repeatable, as flash_attn's CUDA generator does)."""
    if dropout_p == 0.0:
        return 0
    return int(torch.randint(0, 2**62, (1,), dtype=torch.int64).item())


def _scalars(d, dropout_p, softmax_scale, causal, window_size, deterministic, return_attn_probs, **unsupported):
    """The scalar arguments every attention call shares, checked: (dropout P, scale, causal, window)."""
    _unsupported(**unsupported)
    p = _dropout(dropout_p)
    scale = _scale(softmax_scale, d)
    causal, window = _window(_flag("causal", causal), window_size)
    _flag("deterministic", deterministic)
    _flag("return_attn_probs", return_attn_probs)
    return p, scale, causal, window


# ---- a head dimension the kernels are not compiled for ---------------------------------------------
# [pad-d] zeros appended to q, k and v: QKᵀ is unchanged, O's extra columns are 0 (sliced off), and
# autograd takes the pad and the slice back out of the gradients

def _pad(t, dp):
    d = t.shape[-1]
    return t if d == dp else F.pad(t, (0, dp - d))


# ---- the probabilities, for return_attn_probs ---------------------------------------------------

def _probs(q, k, lse, scale, causal, window, dropout_p, seed, offset=0):
    """softmax(scale·QKᵀ) recomputed from the kernel's L, [B, H, N, Nk] float32; with dropout the
    dropped entries negative (flash_attn's S_dmask encoding: `S_dmask >= 0` is the kept mask). The
    mask is the one the kernels draw ([capi-dropout]) for this call's seed and offset."""
    B, N, H, d = q.shape
    Nk, Hkv = k.shape[1], k.shape[2]
    kk = k.float().repeat_interleave(H // Hkv, dim=2)
    s = torch.einsum("bnhd,bmhd->bhnm", q.float(), kk) * scale
    i = torch.arange(N, device=q.device).view(N, 1)
    j = torch.arange(Nk, device=q.device).view(1, Nk)
    visible = torch.ones(N, Nk, dtype=torch.bool, device=q.device)
    if causal:
        visible &= j <= i + Nk - N
    if window:
        visible &= j > i + Nk - N - window
    p = torch.exp(s - lse.float().unsqueeze(-1)).masked_fill(~visible, 0.0)
    if dropout_p > 0.0:
        shape = _core.make_shape(q, k, causal, window, scale, dropout_p, seed, offset)
        tiny = torch.finfo(torch.float32).tiny
        for b in range(B):
            for h in range(H):
                keep = _core.dropout_keep(shape, b, h).to(q.device)
                p[b, h] = torch.where(keep, p[b, h], -p[b, h].clamp(min=tiny))
    return p


# ---- the calls ----------------------------------------------------------------------------------

def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q [B, N, H, d], k and v [B, Nk, HKV, d] (HKV divides H), fp16 or bf16, on the CPU or a GPU.
    Returns out [B, N, H, d]; with return_attn_probs also softmax_lse [B, H, N] (float32) and the
    attention probabilities [B, H, N, Nk] (dropped entries negative)."""
    _tensor("q", q, 4)
    _tensor("k", k, 4, like=("q", q))
    _tensor("v", v, 4, like=("q", q))
    d = _heads(q, k, v)
    if k.shape[0] != q.shape[0]:
        raise ValueError(f"k: batch size {k.shape[0]} differs from q's {q.shape[0]}")
    p, scale, causal, window = _scalars(d, dropout_p, softmax_scale, causal, window_size, deterministic,
                                        return_attn_probs, softcap=(softcap, 0.0), alibi_slopes=(alibi_slopes, None))
    dp = _core.padded_head_dim(d)
    qp, kp, vp = _pad(q, dp), _pad(k, dp), _pad(v, dp)
    if qp.shape[1] and kp.shape[1] and not _compiling():
        _ops.precheck(qp, kp, causal, window, scale, p, _needs_grad(q, k, v), deterministic)
    seed = _seed(p)
    out, lse = _ops.attention(qp, kp, vp, scale, causal, window, p, seed, deterministic)
    out = out[..., :d] if dp != d else out  # [unpadded] no view to make when d needed no padding
    if not return_attn_probs:
        return out
    with torch.no_grad():
        probs = _probs(qp, kp, lse, scale, causal, window, p, seed)
    return out, lse, probs


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                             alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """kv [B, Nk, 2, HKV, d]: flash_attn_func on kv[:, :, 0] and kv[:, :, 1]."""
    if not isinstance(kv, torch.Tensor) or kv.dim() != 5 or kv.shape[2] != 2:
        raise ValueError(f"kv: expected a tensor [batch, seqlen, 2, nheads_k, headdim], got "
                         f"{tuple(kv.shape) if isinstance(kv, torch.Tensor) else type(kv).__name__}")
    return flash_attn_func(q, kv[:, :, 0], kv[:, :, 1], dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                              alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """qkv [B, N, 3, H, d]: flash_attn_func on its three parts."""
    if not isinstance(qkv, torch.Tensor) or qkv.dim() != 5 or qkv.shape[2] != 3:
        raise ValueError(f"qkv: expected a tensor [batch, seqlen, 3, nheads, headdim], got "
                         f"{tuple(qkv.shape) if isinstance(qkv, torch.Tensor) else type(qkv).__name__}")
    return flash_attn_func(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], dropout_p, softmax_scale, causal, window_size,
                           softcap, alibi_slopes, deterministic, return_attn_probs)


def _cu_seqlens(name, cu, total, max_seqlen, max_name, device):
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor of dtype torch.int32, got {type(cu).__name__}")
    if cu.dtype != torch.int32 or cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"{name}: expected a 1-D torch.int32 tensor of batch_size + 1 offsets, got "
                         f"{cu.dtype} of shape {tuple(cu.shape)}")
    if cu.device != device:
        raise ValueError(f"{name}: on {cu.device}, the tensors it indexes on {device}")
    if _compiling():
        return cu.shape[0] - 1
    c = cu.tolist()
    if c[0] != 0:
        raise ValueError(f"{name}: must start at 0 (got {c[0]})")
    if any(b < a for a, b in zip(c, c[1:])):
        raise ValueError(f"{name}: offsets must not decrease (got {c})")
    if c[-1] != total:
        raise ValueError(f"{name}: its last offset {c[-1]} must equal the packed tensor's total length {total}")
    longest = max(b - a for a, b in zip(c, c[1:]))
    if int(max_seqlen) < longest:
        raise ValueError(f"{max_name}: {max_seqlen} is shorter than the longest sequence of {name} ({longest})")
    return len(c) - 1


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """Packed sequences: q [total_q, H, d], k and v [total_k, HKV, d]; sequence b is rows
    cu_seqlens_q[b] .. cu_seqlens_q[b+1] of q (and likewise of k and v), with its own causal
    alignment and window. Returns out [total_q, H, d]; with return_attn_probs also softmax_lse
    [H, total_q] and the probabilities [B, H, max_seqlen_q, max_seqlen_k] (zero where a sequence is
    shorter)."""
    _tensor("q", q, 3)
    _tensor("k", k, 3, like=("q", q))
    _tensor("v", v, 3, like=("q", q))
    d = _heads(q, k, v)
    nq = _cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q, "max_seqlen_q", q.device)
    nk = _cu_seqlens("cu_seqlens_k", cu_seqlens_k, k.shape[0], max_seqlen_k, "max_seqlen_k", q.device)
    if nq != nk:
        raise ValueError(f"cu_seqlens_k: {nk} sequences, cu_seqlens_q {nq}")
    p, scale, causal, window = _scalars(d, dropout_p, softmax_scale, causal, window_size, deterministic,
                                        return_attn_probs, softcap=(softcap, 0.0), alibi_slopes=(alibi_slopes, None),
                                        block_table=(block_table, None))
    dp = _core.padded_head_dim(d)
    qp, kp, vp = _pad(q, dp), _pad(k, dp), _pad(v, dp)
    if qp.shape[0] and kp.shape[0] and not _compiling():
        _ops.precheck(qp[:1].unsqueeze(0), kp[:1].unsqueeze(0), causal, window, scale, p, _needs_grad(q, k, v),
                      deterministic)
    seed = _seed(p)
    out, lse = _ops.varlen_attention(qp, kp, vp, cu_seqlens_q, cu_seqlens_k, scale, causal, window, p, seed,
                                     deterministic)
    out = out[..., :d] if dp != d else out  # [unpadded] no view to make when d needed no padding
    if not return_attn_probs:
        return out
    with torch.no_grad():
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        probs = torch.zeros((nq, q.shape[1], int(max_seqlen_q), int(max_seqlen_k)), dtype=torch.float32,
                            device=q.device)
        for b in range(nq):
            n, m = cq[b + 1] - cq[b], ck[b + 1] - ck[b]
            if n == 0 or m == 0:
                continue
            qb, kb = qp[cq[b]:cq[b + 1]].unsqueeze(0), kp[ck[b]:ck[b + 1]].unsqueeze(0)
            lb = lse[:, cq[b]:cq[b + 1]].unsqueeze(0)
            probs[b, :, :n, :m] = _probs(qb, kb, lb, scale, causal, window, p, seed, offset=b)[0]
    return out, lse, probs


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """kv [total_k, 2, HKV, d]."""
    if not isinstance(kv, torch.Tensor) or kv.dim() != 4 or kv.shape[1] != 2:
        raise ValueError("kv: expected a tensor [total_k, 2, nheads_k, headdim]")
    return flash_attn_varlen_func(q, kv[:, 0], kv[:, 1], cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv [total, 3, H, d]."""
    if not isinstance(qkv, torch.Tensor) or qkv.dim() != 4 or qkv.shape[1] != 3:
        raise ValueError("qkv: expected a tensor [total, 3, nheads, headdim]")
    return flash_attn_varlen_func(qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                  dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


# ---- decoding ----------------------------------------------------------------------------------

_DECODE_STEP = "17"
_DECODE_MAX_Q = 16  # step 17's kMaxQlen: new tokens per sequence in one call


def _int32(name, t, shape, device):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.int32 tensor, got {type(t).__name__}")
    if t.dtype != torch.int32 or tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name}: expected torch.int32 of shape {tuple(shape)}, got {t.dtype} of shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name}: on {t.device}, q on {device}")
    return t


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                            cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0, rotary_interleaved=True,
                            alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """Decoding against a KV cache. q [B, Nq, H, d]; k_cache and v_cache [B_cache, S, HKV, d], or with
    block_table [B, pages_per_seq] (int32) a pool of pages [num_pages, page_size, HKV, d]. With k and
    v ([B, Nnew, HKV, d]) the new tokens are written into the cache in place at cache_seqlens[b] ..,
    and attended to. Sequence b sees keys 0 .. cache_seqlens[b] (+ Nnew) − 1, causal aligned to the
    last. Returns out [B, Nq, H, d] (and softmax_lse [B, H, Nq] with return_softmax_lse). No backward.

    Runs step 17 (split-KV, the query heads of a group packed as one tile) on the CPU's blueprint or
    the GPU, on a contiguous copy of the keys each sequence sees ([decode-gather]); calls it cannot
    express (more than 16 queries, or fewer keys than queries) run the dense forward per sequence."""
    _tensor("q", q, 4)
    _tensor("k_cache", k_cache, 4, like=("q", q))
    _tensor("v_cache", v_cache, 4, like=("q", q))
    d = _heads(q, k_cache, v_cache, kname="k_cache", vname="v_cache")
    B, Nq, H, _ = q.shape
    Hkv = k_cache.shape[2]
    if (k is None) != (v is None):
        raise ValueError(("v" if k is not None else "k") + ": k and v are given together or not at all")
    nnew = 0
    if k is not None:
        _tensor("k", k, 4, like=("q", q))
        _tensor("v", v, 4, like=("q", q))
        if tuple(k.shape) != (B, k.shape[1], Hkv, d) or k.shape != v.shape:
            raise ValueError(f"k: expected [{B}, seqlen_new, {Hkv}, {d}] (and v the same), got {tuple(k.shape)} and "
                             f"{tuple(v.shape)}")
        nnew = k.shape[1]
    _unsupported(rotary_cos=(rotary_cos, None), rotary_sin=(rotary_sin, None), cache_leftpad=(cache_leftpad, None),
                 softcap=(softcap, 0.0), alibi_slopes=(alibi_slopes, None))
    _flag("rotary_interleaved", rotary_interleaved)
    _flag("return_softmax_lse", return_softmax_lse)
    scale = _scale(softmax_scale, d)
    causal, window = _window(_flag("causal", causal), window_size)
    if not isinstance(num_splits, int) or num_splits < 0:
        raise ValueError(f"num_splits: expected an integer >= 0 (0: the heuristic), got {num_splits!r}")
    paged = block_table is not None
    if paged:
        if cache_batch_idx is not None:
            raise ValueError("cache_batch_idx: not with block_table (a paged cache is indexed by its table)")
        if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 or block_table.shape[0] != B:
            raise ValueError(f"block_table: expected a torch.int32 tensor [batch_size = {B}, pages_per_seq], got "
                             f"{tuple(block_table.shape) if isinstance(block_table, torch.Tensor) else block_table!r}")
        _int32("block_table", block_table, tuple(block_table.shape), q.device)
        page = k_cache.shape[1]
        capacity = block_table.shape[1] * page
        num_pages = k_cache.shape[0]
    else:
        capacity = k_cache.shape[1]
        if cache_batch_idx is not None:
            _int32("cache_batch_idx", cache_batch_idx, (B,), q.device)
            idx = cache_batch_idx.tolist()
            if any(i < 0 or i >= k_cache.shape[0] for i in idx):
                raise ValueError(f"cache_batch_idx: entries must index k_cache's {k_cache.shape[0]} sequences, got {idx}")
        elif k_cache.shape[0] < B:
            raise ValueError(f"k_cache: {k_cache.shape[0]} sequences for q's batch of {B}")
    if cache_seqlens is None:
        lens = [capacity - nnew] * B
    elif isinstance(cache_seqlens, int):
        lens = [cache_seqlens] * B
    else:
        lens = _int32("cache_seqlens", cache_seqlens, (B,), q.device).tolist()
    for b, n in enumerate(lens):
        if n < 0 or n + nnew > capacity:
            raise ValueError(f"cache_seqlens: sequence {b} holds {n} tokens; with the {nnew} new ones that must fit "
                             f"the cache of {capacity}")
    if paged:
        table = block_table.tolist()
        for b in range(B):
            used = (lens[b] + nnew + page - 1) // page
            bad = [x for x in table[b][:used] if x < 0 or x >= num_pages]
            if bad:
                raise ValueError(f"block_table: sequence {b} names page {bad[0]}, outside the pool of {num_pages}")
    rows = cache_batch_idx.tolist() if cache_batch_idx is not None else list(range(B))

    def token_index(b, t):  # (pool page or cache row, slot) of token t of sequence b
        return (table[b][t // page], t % page) if paged else (rows[b], t)

    # [decode-append] the new tokens into the caller's cache, in place (flash_attn does it in its kernel)
    if nnew:
        with torch.no_grad():
            for b in range(B):
                for t in range(nnew):
                    r, slot = token_index(b, lens[b] + t)
                    k_cache[r, slot] = k[b, t]
                    v_cache[r, slot] = v[b, t]
    keys = [n + nnew for n in lens]

    # [decode-gather] the keys each sequence sees, contiguous [B, capacity, HKV, dp] (a copy: step 17
    # may overwrite rows past the cached tokens while it sets up, never the caller's cache)
    dp = _core.padded_head_dim(d)
    kk = torch.zeros((B, capacity, Hkv, dp), dtype=q.dtype, device=q.device)
    vv = torch.zeros_like(kk)
    with torch.no_grad():
        for b in range(B):
            if paged:
                n_pages = (keys[b] + page - 1) // page
                pages = torch.tensor(table[b][:n_pages], dtype=torch.long, device=q.device)
                kk[b, :n_pages * page, :, :d] = k_cache[pages].reshape(-1, Hkv, d)[:n_pages * page]
                vv[b, :n_pages * page, :, :d] = v_cache[pages].reshape(-1, Hkv, d)[:n_pages * page]
            else:
                kk[b, :keys[b], :, :d] = k_cache[rows[b], :keys[b]]
                vv[b, :keys[b], :, :d] = v_cache[rows[b], :keys[b]]
        qp = _pad(q, dp)
        out = torch.zeros_like(qp)
        lse = torch.full((B, H, Nq), float("inf"), dtype=torch.float32, device=q.device)
        if Nq > 0 and Nq <= _DECODE_MAX_Q and all(n >= Nq for n in keys) and dp <= 128:
            options = {"splits": str(num_splits)} if num_splits > 0 else {}
            s = _core.make_shape(qp, kk, causal, window, scale, 0.0, 0, 0, cache_lens=[n - Nq for n in keys])
            _core.check(_DECODE_STEP, s, options, False, q.is_cuda)
            out, lse = _core.forward(_DECODE_STEP, qp, kk, vv, s, options)
        elif Nq > 0:  # the dense forward, one sequence at a time, over the keys it sees
            for b in range(B):
                if keys[b] == 0:
                    continue
                ob, lb = _ops.fwd_impl(qp[b:b + 1], kk[b:b + 1, :keys[b]], vv[b:b + 1, :keys[b]], scale, causal,
                                       window, 0.0, 0)
                out[b:b + 1], lse[b:b + 1] = ob, lb
    out = out[..., :d] if dp != d else out  # [unpadded] no view to make when d needed no padding
    return (out, lse) if return_softmax_lse else out
