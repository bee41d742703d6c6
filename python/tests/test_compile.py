"""torch.compile(fullgraph=True) traces a block through the package's operators (GPU runs only:
conftest.py leaves this file out of a CPU run)."""

import pytest
import torch

import flash_attn_steps as fas
from flash_attn_steps import _ops


@pytest.mark.skipif(not _ops.HAVE_CUSTOM_OP, reason="this PyTorch has no torch.library.custom_op (2.4 and later)")
@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("dispatch", _ops.DISPATCHES)
def test_compile_fullgraph_forward_and_backward(device, varlen, dispatch, monkeypatch):
    """[dispatch] With `auto` the eager block runs through torch.autograd.Function and the compiled one
    through the operators: the two must still agree."""
    if device.type != "cuda":
        pytest.skip("torch.compile is tried on the GPU")
    monkeypatch.setattr(_ops, "DISPATCH", dispatch)
    torch.manual_seed(0)
    B, N, H, d = 2, 256, 4, 64
    x = torch.randn(B, N, H * d, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(H * d, 3 * H * d, device=device, dtype=torch.bfloat16) / (H * d) ** 0.5
    cu = torch.tensor([0, N, 2 * N], dtype=torch.int32, device=device)

    def block(x):
        q, k, v = (x @ w).view(B, N, 3, H, d).unbind(2)
        if varlen:
            o = fas.flash_attn_varlen_func(q.reshape(B * N, H, d), k.reshape(B * N, H, d), v.reshape(B * N, H, d),
                                           cu, cu, N, N, causal=True)
            return o.view(B, N, H * d)
        return fas.flash_attn_func(q, k, v, causal=True).reshape(B, N, H * d)

    eager = block(x)
    g_eager = torch.autograd.grad(eager.float().square().sum(), x)[0]
    compiled = torch.compile(block, fullgraph=True)
    out = compiled(x)
    g = torch.autograd.grad(out.float().square().sum(), x)[0]
    assert torch.equal(out, eager)
    assert (g.float() - g_eager.float()).abs().max().item() <= 1e-2 * g_eager.float().abs().max().item()
