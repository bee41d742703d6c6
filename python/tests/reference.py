"""The references the package is tested against, and FlashAttention's tolerance rule.

- `attention(..., lowp=False)`: attention in float32 on float32 copies of the inputs (the truth).
- `attention(..., lowp=True)`: PyTorch's attention in the inputs' own dtype, the yardstick of
  FlashAttention's rule. On a GPU it runs natively in fp16/bf16. On the CPU (Debian's torch 1.13 has
  no fp16 matrix product there) it is emulated: each product, the softmax and every gradient rounded
  to the dtype where PyTorch's own kernels would round them (float32 arithmetic in between).
- The rule (flash_attn's tests): the package's max error against the truth is at most 2× the
  yardstick's for out, 3× for dq, dk and dv, plus a floor far below any rounding error, so that an
  exact yardstick (possible on tiny inputs) does not demand exactness.
"""

import torch

OUT_FACTOR, GRAD_FACTOR = 2.0, 3.0
FLOOR = 1e-6


class _Round(torch.autograd.Function):
    """x rounded to `dtype` and back to float32, forward and backward (the emulated low precision)."""

    @staticmethod
    def forward(ctx, x, dtype):
        ctx.dtype = dtype
        return x.to(dtype).to(torch.float32)

    @staticmethod
    def backward(ctx, g):
        return g.to(ctx.dtype).to(torch.float32), None


def visible_mask(n, nk, causal, window, device):
    """[n, nk] True where query i sees key j: bottom-right causal, the band of `window` keys."""
    i = torch.arange(n, device=device).view(n, 1)
    j = torch.arange(nk, device=device).view(1, nk)
    m = torch.ones(n, nk, dtype=torch.bool, device=device)
    if causal:
        m &= j <= i + nk - n
    if window:
        m &= j > i + nk - n - window
    return m


def fa_window(causal, window_size):
    """flash_attn's (left, right) with right = 0 or causal -> (causal, window) as the package maps it."""
    left, right = window_size
    if left < 0 and (right < 0 and not causal):
        return causal, 0
    return True, (0 if left < 0 else left + 1)


def attention(q, k, v, causal=False, window=0, scale=None, dropout_p=0.0, keep=None, lowp=False):
    """q [B, N, H, d], k and v [B, Nk, HKV, d]; keep [B, H, N, Nk] bool (dropout). Returns out in
    q's dtype, and lse [B, H, N] in float32 (upcast path)."""
    dtype = q.dtype
    B, N, H, d = q.shape
    Nk, Hkv = k.shape[1], k.shape[2]
    scale = d ** -0.5 if scale is None else scale
    k = k.repeat_interleave(H // Hkv, dim=2)
    v = v.repeat_interleave(H // Hkv, dim=2)
    native = lowp and q.is_cuda
    if native:
        r = lambda x: x  # noqa: E731  (PyTorch rounds itself)
        qf, kf, vf = q, k, v
    elif lowp:
        r = lambda x: _Round.apply(x, dtype)  # noqa: E731
        qf, kf, vf = q.float(), k.float(), v.float()
    else:
        r = lambda x: x  # noqa: E731
        qf, kf, vf = q.float(), k.float(), v.float()
    if lowp:  # flash_attn's yardstick scales K, then multiplies in the dtype
        s = r(torch.einsum("bnhd,bmhd->bhnm", qf, r(kf * scale)))
    else:
        s = torch.einsum("bnhd,bmhd->bhnm", qf, kf) * scale
    vis = visible_mask(N, Nk, causal, window, q.device)
    s = s.masked_fill(~vis, float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    a = torch.softmax(s.float(), dim=-1)
    a = r(a.to(s.dtype) if native else a)
    a = a.masked_fill(~vis.any(dim=-1).view(1, 1, N, 1), 0.0)  # rows that see no key: 0, not NaN
    if keep is not None:
        a = a.masked_fill(~keep, 0.0)
    vs = r(vf * (1.0 / (1.0 - dropout_p))) if dropout_p > 0 else vf
    out = r(torch.einsum("bhnm,bmhd->bnhd", a.to(vs.dtype), vs))
    return out.to(dtype), lse


def max_err(x, ref):
    e = (x.float() - ref.float()).abs().max().item()
    return float("inf") if e != e else e  # NaN never passes


def check_rule(name, ours, truth, yardstick, factor):
    """flash_attn's rule, with the numbers in the message."""
    e, e_pt = max_err(ours, truth), max_err(yardstick, truth)
    assert e <= factor * e_pt + FLOOR, (f"{name}: max error {e:.3g} against the float32 reference, PyTorch in the "
                                        f"inputs' dtype {e_pt:.3g}; the rule allows {factor:g}x that (+{FLOOR:g})")
    return e, e_pt
