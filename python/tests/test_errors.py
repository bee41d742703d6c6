"""Bad input raises an exception that names the argument, before anything runs, and leaves nothing
changed (the KV cache untouched, no gradient written)."""

import pytest
import torch

import flash_attn_steps as fas

F16, BF16 = torch.float16, torch.bfloat16


def qkv(B=2, N=16, Nk=16, H=4, Hkv=4, d=64, dtype=F16):
    return (torch.randn(B, N, H, d).to(dtype), torch.randn(B, Nk, Hkv, d).to(dtype), torch.randn(B, Nk, Hkv, d).to(dtype))


def raises(exc, name, fn, *args, **kw):
    with pytest.raises(exc) as e:
        fn(*args, **kw)
    assert name in str(e.value), f"the message does not name {name}: {e.value}"
    return e.value


def test_dtype_device_layout_and_strides():
    q, k, v = qkv()
    raises(ValueError, "q", fas.flash_attn_func, q.float(), k, v)
    raises(ValueError, "k", fas.flash_attn_func, q, k.to(BF16), v)
    raises(ValueError, "v", fas.flash_attn_func, q, k, v[..., 0])
    raises(TypeError, "q", fas.flash_attn_func, q.numpy() if False else [1, 2], k, v)
    raises(ValueError, "q", fas.flash_attn_func, q.transpose(-1, -2), k, v)  # headdim not contiguous
    raises(ValueError, "k", fas.flash_attn_func, q, k[:1], v[:1])             # batch sizes differ
    if torch.cuda.is_available():
        raises(ValueError, "k", fas.flash_attn_func, q, k.cuda(), v)


def test_head_dimensions_and_heads():
    q, k, v = qkv()
    raises(ValueError, "k", fas.flash_attn_func, q, k[..., :32], v[..., :32])
    raises(ValueError, "v", fas.flash_attn_func, q, k, v[..., :32])
    q3, k3, v3 = qkv(H=4, Hkv=3)
    raises(ValueError, "k", fas.flash_attn_func, q3, k3, v3)
    q5, k5, v5 = qkv(d=320)
    raises(ValueError, "q", fas.flash_attn_func, q5, k5, v5)


def test_scalar_arguments():
    q, k, v = qkv()
    raises(ValueError, "dropout_p", fas.flash_attn_func, q, k, v, 1.0)
    raises(ValueError, "softmax_scale", fas.flash_attn_func, q, k, v, softmax_scale=float("nan"))
    raises(ValueError, "window_size", fas.flash_attn_func, q, k, v, window_size=(3,))
    raises(ValueError, "causal", fas.flash_attn_func, q, k, v, causal="yes")
    raises(fas.UnsupportedError, "softcap", fas.flash_attn_func, q, k, v, softcap=30.0)
    raises(fas.UnsupportedError, "alibi_slopes", fas.flash_attn_func, q, k, v, alibi_slopes=torch.ones(4))


def test_a_window_right_of_the_diagonal_is_refused():
    q, k, v = qkv()
    raises(fas.UnsupportedError, "window_size", fas.flash_attn_func, q, k, v, window_size=(4, 4))
    raises(fas.UnsupportedError, "window_size", fas.flash_attn_func, q, k, v, window_size=(4, -1))
    # right = 0 is the causal band: accepted with causal=False as well, and the same call
    a = fas.flash_attn_func(q, k, v, window_size=(4, 0))
    b = fas.flash_attn_func(q, k, v, causal=True, window_size=(4, 7))
    assert torch.equal(a, b)


def test_cu_seqlens():
    q, k, v = (x.reshape(-1, x.shape[2], x.shape[3]) for x in qkv())  # 32 tokens
    good = torch.tensor([0, 16, 32], dtype=torch.int32)
    call = fas.flash_attn_varlen_func
    raises(ValueError, "cu_seqlens_q", call, q, k, v, torch.tensor([0, 20, 12, 32], dtype=torch.int32), good, 20, 16)
    raises(ValueError, "cu_seqlens_q", call, q, k, v, torch.tensor([0, 16, 30], dtype=torch.int32), good, 16, 16)
    raises(ValueError, "cu_seqlens_k", call, q, k, v, good, torch.tensor([1, 16, 32], dtype=torch.int32), 16, 16)
    raises(ValueError, "cu_seqlens_q", call, q, k, v, good.long(), good, 16, 16)
    raises(ValueError, "max_seqlen_q", call, q, k, v, good, good, 8, 16)
    raises(ValueError, "cu_seqlens_k", call, q, k, v, good, torch.tensor([0, 32], dtype=torch.int32), 16, 32)
    raises(fas.UnsupportedError, "block_table", call, q, k, v, good, good, 16, 16,
           block_table=torch.zeros(2, 1, dtype=torch.int32))


def test_kvcache_arguments_and_an_untouched_cache():
    B, H, d, page = 2, 4, 64, 16
    q = torch.randn(B, 1, H, d).half()
    pool_k, pool_v = torch.randn(8, page, H, d).half(), torch.randn(8, page, H, d).half()
    before = (pool_k.clone(), pool_v.clone())
    kn, vn = torch.randn(B, 1, H, d).half(), torch.randn(B, 1, H, d).half()
    lens = torch.tensor([20, 40], dtype=torch.int32)
    table = torch.tensor([[0, 1, 2, 3], [4, 9, 6, 7]], dtype=torch.int32)  # 9 (used: sequence 1 needs 3 pages): outside the pool of 8
    call = fas.flash_attn_with_kvcache
    raises(ValueError, "block_table", call, q, pool_k, pool_v, kn, vn, cache_seqlens=lens, block_table=table)
    raises(ValueError, "block_table", call, q, pool_k, pool_v, kn, vn, cache_seqlens=lens,
           block_table=table[:, :2].long())
    raises(ValueError, "cache_seqlens", call, q, pool_k, pool_v, kn, vn, cache_seqlens=torch.tensor([20, 64],
           dtype=torch.int32), block_table=table.clamp(max=7))
    raises(ValueError, "v", call, q, pool_k, pool_v, kn, None, cache_seqlens=lens, block_table=table.clamp(max=7))
    raises(fas.UnsupportedError, "rotary_cos", call, q, pool_k, pool_v, cache_seqlens=lens,
           block_table=table.clamp(max=7), rotary_cos=torch.ones(64, 8), rotary_sin=torch.ones(64, 8))
    raises(ValueError, "num_splits", call, q, pool_k, pool_v, cache_seqlens=lens, block_table=table.clamp(max=7),
           num_splits=-1)
    assert torch.equal(pool_k, before[0]) and torch.equal(pool_v, before[1]), "a refused call changed the cache"


def test_a_refused_backward_names_the_step_and_runs_nothing():
    """d = 256 has a forward (step 16's tiles) and no backward: with gradients asked for, the call is
    refused before the forward runs, naming the step and the reason; without, the forward runs."""
    q, k, v = qkv(N=20, Nk=24, d=256)
    q.requires_grad_()
    e = raises(fas.UnsupportedError, "head dimension", fas.flash_attn_func, q, k, v)
    assert "step13" in str(e)
    assert q.grad is None
    with torch.no_grad():
        out = fas.flash_attn_func(q, k, v, causal=True)
    assert out.shape == q.shape and torch.isfinite(out).all()
