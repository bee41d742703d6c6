"""flash_attn_steps: FlashAttention-2's Python interface over the kernels of "FlashAttention, step by
step".

    from flash_attn_steps import flash_attn_func      # instead of: from flash_attn import ...
    out = flash_attn_func(q, k, v, causal=True)       # q, k, v: [batch, seqlen, nheads, headdim]

On an H200/H100 the forward is step 16 and the backward step 19; on other GPUs (sm_80 and later)
steps 12 and 13; CPU tensors run the same steps' blueprints (exact and slow); decoding is step 17.
docs/python.md says what runs where, what is not offered, and how it was measured.
"""

from ._lib import UnsupportedError, built_with_cuda, gpu_info, library_path, step_head_dims
from ._core import steps_for
from .interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__version__ = "0.1.0"

__all__ = [
    "flash_attn_func",
    "flash_attn_kvpacked_func",
    "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func",
    "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func",
    "flash_attn_with_kvcache",
    "UnsupportedError",
    "built_with_cuda",
    "gpu_info",
    "library_path",
    "step_head_dims",
    "steps_for",
]
