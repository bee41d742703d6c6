"""flash_attn_with_kvcache: step 17 on a contiguous or paged cache, with cache_seqlens, new tokens
appended in place, GQA and windows, against the float32 reference by FlashAttention's rule."""

import itertools

import pytest
import torch

import flash_attn_steps as fas
from reference import OUT_FACTOR, attention, check_rule


def make_cache(device, dtype, B, Nq, H, Hkv, d, capacity, lens, nnew, page=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=g).to(dtype).to(device)  # noqa: E731
    q = rnd(B, Nq, H, d)
    kc, vc = rnd(B, capacity, Hkv, d), rnd(B, capacity, Hkv, d)
    kn = rnd(B, nnew, Hkv, d) if nnew else None
    vn = rnd(B, nnew, Hkv, d) if nnew else None
    table = None
    if page:
        per = capacity // page
        order = torch.randperm(B * per, generator=g)  # a fragmented pool: pages in a random order
        table = order.view(B, per).to(torch.int32).to(device)
        pool_k = torch.full((B * per, page, Hkv, d), float("nan"), dtype=dtype, device=device)
        pool_v = pool_k.clone()
        for b in range(B):
            for i in range(per):
                pool_k[table[b, i]] = kc[b, i * page:(i + 1) * page]
                pool_v[table[b, i]] = vc[b, i * page:(i + 1) * page]
        return q, kc, vc, kn, vn, table, pool_k, pool_v
    return q, kc, vc, kn, vn, None, kc.clone(), vc.clone()


CASES = list(itertools.product([torch.float16, torch.bfloat16], ["mha", "gqa"], [None, 16], [0, 1, 3], [False, True]))


@pytest.mark.parametrize("dtype,mha,page,nnew,causal", CASES)
def test_decode_against_the_reference(device, dtype, mha, page, nnew, causal):
    B, H, d, capacity = 3, 8, 64, 96
    Hkv = 8 if mha == "mha" else 2
    Nq = max(nnew, 1)
    lens = [40, 0 if nnew else Nq, 93 - nnew]
    q, kc, vc, kn, vn, table, k_cache, v_cache = make_cache(device, dtype, B, Nq, H, Hkv, d, capacity, lens, nnew, page,
                                                       seed=nnew * 10 + (page or 0))
    seqlens = torch.tensor(lens, dtype=torch.int32, device=device)
    out, lse = fas.flash_attn_with_kvcache(q, k_cache, v_cache, kn, vn, cache_seqlens=seqlens, block_table=table,
                                           causal=causal, return_softmax_lse=True)
    assert out.shape == q.shape and lse.shape == (B, H, Nq)
    for b in range(B):
        keys = lens[b] + nnew
        kb = torch.cat([kc[b, :lens[b]]] + ([kn[b]] if nnew else []))
        vb = torch.cat([vc[b, :lens[b]]] + ([vn[b]] if nnew else []))
        ref, _ = attention(q[b:b + 1], kb[None], vb[None], causal)
        pt, _ = attention(q[b:b + 1], kb[None], vb[None], causal, lowp=True)
        check_rule(f"out of sequence {b} ({keys} keys)", out[b:b + 1], ref, pt, OUT_FACTOR)
        # [decode-append] the new tokens are in the caller's cache afterwards, bit for bit
        for t in range(nnew):
            pos = lens[b] + t
            where = (table[b, pos // page].item(), pos % page) if page else (b, pos)
            assert torch.equal(k_cache[where], kn[b, t]) and torch.equal(v_cache[where], vn[b, t])


def test_a_window_and_more_queries_than_step17_takes(device):
    """A sliding window, and 20 queries (step 17 takes 16: the dense forward runs per sequence)."""
    dtype, B, H, d, capacity = torch.float16, 2, 4, 32, 120
    for Nq, window in ((4, 30), (20, 0), (20, 25)):
        q, kc, vc, _, _, _, k_cache, v_cache = make_cache(device, dtype, B, Nq, H, H, d, capacity, [0, 0], 0, seed=Nq)
        lens = [100, 57]
        out = fas.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.tensor(lens, dtype=torch.int32,
                                          device=device), causal=True, window_size=(window - 1 if window else -1, 0))
        for b in range(B):
            ref, _ = attention(q[b:b + 1], kc[b:b + 1, :lens[b]], vc[b:b + 1, :lens[b]], True, window)
            pt, _ = attention(q[b:b + 1], kc[b:b + 1, :lens[b]], vc[b:b + 1, :lens[b]], True, window, lowp=True)
            check_rule(f"Nq {Nq}, window {window}, sequence {b}", out[b:b + 1], ref, pt, OUT_FACTOR)


def test_cache_batch_idx_picks_the_cache_rows(device):
    dtype, H, d = torch.bfloat16, 2, 64
    q, kc, vc, _, _, _, k_cache, v_cache = make_cache(device, dtype, 3, 1, H, H, d, 50, [0, 0, 0], 0, seed=11)
    idx = torch.tensor([2, 0], dtype=torch.int32, device=device)
    out = fas.flash_attn_with_kvcache(q[:2], k_cache, v_cache, cache_seqlens=30, cache_batch_idx=idx)
    for b, row in enumerate((2, 0)):
        ref, _ = attention(q[b:b + 1], kc[row:row + 1, :30], vc[row:row + 1, :30])
        pt, _ = attention(q[b:b + 1], kc[row:row + 1, :30], vc[row:row + 1, :30], lowp=True)
        check_rule(f"sequence {b} (cache row {row})", out[b:b + 1], ref, pt, OUT_FACTOR)
