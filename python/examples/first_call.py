"""A first call of the package: flash_attn_func forward and backward on random inputs, on the GPU when
PyTorch sees one (else the CPU's blueprints), checked against PyTorch's attention written out in
float32. `scripts/run.sh python` builds the C library and runs this.

    python3 python/examples/first_call.py [--n 256] [--d 64] [--causal]
"""

import argparse
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import flash_attn_steps as fas  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and fas.built_with_cuda() else "cpu")
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, a.n, 4, a.d, device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out = fas.flash_attn_func(q, k, v, causal=a.causal)
    out.float().square().sum().backward()
    s = torch.einsum("bnhd,bmhd->bhnm", q.float(), k.float()) / a.d ** 0.5
    if a.causal:
        s = s.masked_fill(torch.ones(a.n, a.n, dtype=torch.bool, device=device).triu(1), float("-inf"))
    ref = torch.einsum("bhnm,bmhd->bnhd", torch.softmax(s, -1), v.float())
    fwd, bwd = fas.steps_for(device, 0.0, a.d)
    print(f"flash_attn_steps on {device} ({'blueprints' if device.type == 'cpu' else torch.cuda.get_device_name()}): "
          f"forward step {fwd}, backward step {bwd}; library {fas.library_path()}")
    print(f"out {tuple(out.shape)} {out.dtype}; max |out - float32 reference| = "
          f"{(out.float() - ref).abs().max().item():.2e}; dq, dk, dv: {tuple(q.grad.shape)}, {tuple(k.grad.shape)}, "
          f"{tuple(v.grad.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
