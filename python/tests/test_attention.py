"""flash_attn_func and flash_attn_varlen_func against the references, by FlashAttention's rule.

The matrix (`cases`): flash_attn's (seqlen_q, seqlen_k) pairs, crossed with the head dimensions,
fp16 and bf16, MHA / MQA / GQA, no mask / causal / a local window, and dropout 0 and 0.17. On the
GPU (FLASH_ATTN_STEPS_TEST_MATRIX=full) every combination; in CI a covering subset that the blueprints
run in minutes: every value of every factor at least once, and every dtype × mask × dropout
combination.
"""

import itertools

import pytest
import torch

import flash_attn_steps as fas
from conftest import matrix
from reference import GRAD_FACTOR, OUT_FACTOR, attention, check_rule, visible_mask

SEQLENS = [(113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256), (1024, 1024), (1023, 1024),
           (1024, 1023), (2048, 2048)]
HEAD_DIMS = [32, 40, 59, 64, 96, 128]   # 40, 59 and 96 run zero-padded to a compiled d ([pad-d])
DTYPES = [torch.float16, torch.bfloat16]
MHA = ["mha", "mqa", "gqa"]
MASKS = ["none", "causal", "local"]
DROPOUT = [0.0, 0.17]


def cases():
    if matrix() == "full":
        return list(itertools.product(SEQLENS, HEAD_DIMS, DTYPES, MHA, MASKS, DROPOUT))
    # CI: every dtype × MHA/MQA/GQA × mask × dropout; the sequence lengths and head dimensions cycled
    # so that each appears. The CPU runs the blueprints: the short pairs (the first four) only.
    out = []
    for n, (dt, mha, mk, p) in enumerate(itertools.product(DTYPES, MHA, MASKS, DROPOUT)):
        out.append((SEQLENS[n % 4], HEAD_DIMS[n % len(HEAD_DIMS)], dt, mha, mk, p))
    return out


def test_the_ci_subset_covers_every_value():
    got = cases()
    short = SEQLENS if matrix() == "full" else SEQLENS[:4]
    for i, values in enumerate((short, HEAD_DIMS, DTYPES, MHA, MASKS, DROPOUT)):
        assert {c[i] for c in got} == set(values)
    assert len({(c[2], c[3], c[4], c[5]) for c in got}) == len(DTYPES) * len(MHA) * len(MASKS) * len(DROPOUT)


def heads(mha):
    return {"mha": (6, 6), "mqa": (6, 1), "gqa": (6, 2)}[mha]


def make(device, dtype, B, N, Nk, H, Hkv, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g).to(dtype).to(device).requires_grad_()  # noqa: E731
    return mk(B, N, H, d), mk(B, Nk, Hkv, d), mk(B, Nk, Hkv, d)


def window_for(mask, Nk, seed):
    """(causal, window keys, flash_attn's window_size) for a mask kind."""
    if mask == "none":
        return False, 0, (-1, -1)
    if mask == "causal":
        return True, 0, (-1, -1)
    w = int(torch.randint(1, Nk, (1,), generator=torch.Generator().manual_seed(seed)).item())
    return True, w, (w - 1, 0)


@pytest.mark.parametrize("seqlens,d,dtype,mha,mask,dropout_p", cases())
def test_output_and_gradients(device, seqlens, d, dtype, mha, mask, dropout_p):
    N, Nk = seqlens
    H, Hkv = heads(mha)
    B = 2 if device.type == "cpu" else 4
    q, k, v = make(device, dtype, B, N, Nk, H, Hkv, d, seed=N * 7 + d)
    causal, window, window_size = window_for(mask, Nk, N + Nk)
    torch.manual_seed(1)
    out, lse, S = fas.flash_attn_func(q, k, v, dropout_p, causal=causal and mask == "causal", window_size=window_size,
                                      return_attn_probs=True)
    assert out.shape == q.shape and out.dtype == dtype and lse.shape == (B, H, N) and S.shape == (B, H, N, Nk)
    keep = S >= 0 if dropout_p > 0 else None
    if dropout_p > 0:  # the mask the kernels drew: about dropout_p of the visible entries dropped
        vis = visible_mask(N, Nk, causal, window, device).expand(B, H, N, Nk)
        frac = 1.0 - keep[vis].float().mean().item()
        assert abs(frac - dropout_p) <= 0.02, f"dropped {frac:.4f} of the visible weights, asked {dropout_p}"
    ref, ref_lse = attention(q, k, v, causal, window, dropout_p=dropout_p, keep=keep)
    pt, _ = attention(q, k, v, causal, window, dropout_p=dropout_p, keep=keep, lowp=True)
    check_rule("out", out, ref, pt, OUT_FACTOR)
    fin = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), fin), "softmax_lse: +inf exactly where a row sees no key"
    assert (lse[fin] - ref_lse[fin]).abs().max().item() <= 1e-2, "softmax_lse against the float32 reference"
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(5)).to(dtype).to(device)
    grads = torch.autograd.grad(out, (q, k, v), g)
    ref_grads = torch.autograd.grad(ref, (q, k, v), g)
    pt_grads = torch.autograd.grad(pt, (q, k, v), g)
    for name, x, r, p in zip(("dq", "dk", "dv"), grads, ref_grads, pt_grads):
        assert x.shape == r.shape and x.dtype == dtype
        check_rule(name, x, r, p, GRAD_FACTOR)


def test_without_dropout_the_probabilities_are_the_softmax(device):
    q, k, v = make(device, torch.float16, 1, 70, 90, 2, 2, 32, seed=3)
    _, lse, S = fas.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    s = torch.einsum("bnhd,bmhd->bhnm", q.float(), k.float()) * 32 ** -0.5
    s = s.masked_fill(~visible_mask(70, 90, True, 0, device), float("-inf"))
    assert (S - torch.softmax(s, -1)).abs().max().item() < 1e-5
    assert (S >= 0).all()


def test_packed_variants_are_the_same_call(device):
    q, k, v = make(device, torch.bfloat16, 2, 40, 40, 4, 4, 64, seed=4)
    want = fas.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(fas.flash_attn_qkvpacked_func(torch.stack([q, k, v], 2), causal=True), want)
    assert torch.equal(fas.flash_attn_kvpacked_func(q, torch.stack([k, v], 2), causal=True), want)


def test_deterministic_backward_is_bitwise_repeatable(device):
    q, k, v = make(device, torch.float16, 2, 150, 150, 4, 2, 64, seed=6)
    g = torch.randn(2, 150, 4, 64).half().to(device)
    runs = []
    for _ in range(3 if device.type == "cpu" else 10):
        out = fas.flash_attn_func(q, k, v, causal=True, deterministic=True)
        runs.append(torch.autograd.grad(out, (q, k, v), g))
    for r in runs[1:]:
        for a, b in zip(r, runs[0]):
            assert torch.equal(a, b)


def unpad(x, lens):
    return torch.cat([x[b, :n] for b, n in enumerate(lens)])


def cu(lens, device):
    return torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32, device=device)


@pytest.mark.parametrize("mask", MASKS)
def test_varlen_equals_dense_on_a_padded_batch(device, mask):
    """Sequences of different lengths packed: each must be what the dense call gives on it alone,
    bit for bit, with its own causal alignment and window; the padding rows of the batch take no
    part. (Deterministic backwards on both sides: the plain one's dQ adds race.)"""
    dtype, d, H, Hkv = torch.float16, 64, 4, 2
    lq, lk = [37, 1, 80, 64], [50, 33, 80, 17]
    B, N, Nk = len(lq), max(lq), max(lk)
    q, k, v = make(device, dtype, B, N, Nk, H, Hkv, d, seed=8)
    causal, window, window_size = window_for(mask, 17, 9)
    qv, kv_, vv = (unpad(x.detach(), l).requires_grad_() for x, l in ((q, lq), (k, lk), (v, lk)))
    out = fas.flash_attn_varlen_func(qv, kv_, vv, cu(lq, device), cu(lk, device), max(lq), max(lk),
                                     causal=mask == "causal", window_size=window_size, deterministic=True)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(2)).to(dtype).to(device)
    dq, dk, dv = torch.autograd.grad(out, (qv, kv_, vv), g)
    o0 = q0 = k0 = 0
    for b in range(B):
        qb = q[b:b + 1, :lq[b]].detach().requires_grad_()
        kb = k[b:b + 1, :lk[b]].detach().requires_grad_()
        vb = v[b:b + 1, :lk[b]].detach().requires_grad_()
        ob = fas.flash_attn_func(qb, kb, vb, causal=mask == "causal", window_size=window_size, deterministic=True)
        gb = torch.autograd.grad(ob, (qb, kb, vb), g[q0:q0 + lq[b]].unsqueeze(0))
        assert torch.equal(out[o0:o0 + lq[b]], ob[0]), f"sequence {b}: out"
        assert torch.equal(dq[q0:q0 + lq[b]], gb[0][0]), f"sequence {b}: dq"
        assert torch.equal(dk[k0:k0 + lk[b]], gb[1][0]), f"sequence {b}: dk"
        assert torch.equal(dv[k0:k0 + lk[b]], gb[2][0]), f"sequence {b}: dv"
        o0 += lq[b]
        q0 += lq[b]
        k0 += lk[b]


def test_varlen_with_dropout_against_the_reference(device):
    dtype, d, H = torch.bfloat16, 32, 2
    lq = lk = [30, 75]
    q, k, v = make(device, dtype, 2, 75, 75, H, H, d, seed=10)
    qv, kv_, vv = (unpad(x.detach(), lq).requires_grad_() for x in (q, k, v))
    torch.manual_seed(3)
    out, lse, S = fas.flash_attn_varlen_func(qv, kv_, vv, cu(lq, device), cu(lk, device), 75, 75, 0.17, causal=True,
                                             return_attn_probs=True)
    assert lse.shape == (H, sum(lq)) and S.shape == (2, H, 75, 75)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(4)).to(dtype).to(device)
    grads = torch.autograd.grad(out, (qv, kv_, vv), g)
    at = 0
    for b, n in enumerate(lq):
        qb, kb, vb = (x[at:at + n].detach().unsqueeze(0).requires_grad_() for x in (qv, kv_, vv))
        keep = S[b:b + 1, :, :n, :n] >= 0
        ref, _ = attention(qb, kb, vb, True, dropout_p=0.17, keep=keep)
        pt, _ = attention(qb, kb, vb, True, dropout_p=0.17, keep=keep, lowp=True)
        check_rule(f"out of sequence {b}", out[at:at + n].unsqueeze(0), ref, pt, OUT_FACTOR)
        gb = g[at:at + n].unsqueeze(0)
        for name, x, r, p in zip(("dq", "dk", "dv"), grads, torch.autograd.grad(ref, (qb, kb, vb), gb),
                                 torch.autograd.grad(pt, (qb, kb, vb), gb)):
            check_rule(f"{name} of sequence {b}", x[at:at + n].unsqueeze(0), r, p, GRAD_FACTOR)
        at += n


def test_steps_that_run():
    fwd, bwd = fas.steps_for(torch.device("cpu"))
    assert (fwd, bwd) == ("12", "13")


@pytest.mark.parametrize("d,mask,mha", [(64, "causal", "gqa"), (128, "local", "mha"), (59, "none", "mqa")])
def test_the_hopper_steps_through_the_package(device, monkeypatch, d, mask, mha):
    """Steps 16 and 19 (what an H200 runs) on the same calls, by the same rule: on the CPU their
    blueprints, chosen through FLASH_ATTN_STEPS_FORWARD and _BACKWARD."""
    if device.type == "cuda" and fas.gpu_info()[0] != 90:
        pytest.skip("steps 16 and 19 need sm_90")
    monkeypatch.setenv("FLASH_ATTN_STEPS_FORWARD", "16")
    monkeypatch.setenv("FLASH_ATTN_STEPS_BACKWARD", "19")
    H, Hkv = heads(mha)
    q, k, v = make(device, torch.bfloat16, 2, 113, 211, H, Hkv, d, seed=d)
    causal, window, window_size = window_for(mask, 211, 5)
    out = fas.flash_attn_func(q, k, v, causal=mask == "causal", window_size=window_size)
    ref, _ = attention(q, k, v, causal, window)
    pt, _ = attention(q, k, v, causal, window, lowp=True)
    check_rule("out", out, ref, pt, OUT_FACTOR)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16).to(device)
    for name, x, r, p in zip(("dq", "dk", "dv"), torch.autograd.grad(out, (q, k, v), g),
                             torch.autograd.grad(ref, (q, k, v), g), torch.autograd.grad(pt, (q, k, v), g)):
        check_rule(name, x, r, p, GRAD_FACTOR)
