"""A user's script, type-checked with ``mypy --strict`` by test_api_docs.py (it is not run): the
package's annotations must let a caller's own typed code pass without casts or ignores."""

import torch
from torch import Tensor

from attention import (
    MultiHeadAttention,
    RotaryEmbedding,
    TransformerBlock,
    causal_mask,
    flash_attention,
    linear_attention,
    scaled_dot_product_attention,
    sliding_window_mask,
)

b, h, t, d_h = 2, 4, 16, 8
query, key, value = (torch.randn(b, h, t, d_h) for _ in range(3))

z: Tensor = scaled_dot_product_attention(query, key, value, is_causal=True)
mask: Tensor = causal_mask(t, device=torch.device("cpu"))
window: Tensor = sliding_window_mask(t, t, 4)
linear: Tensor = linear_attention(query, key, value)

rope = RotaryEmbedding(d_h, t)
rotated: Tensor = rope(query)

mha = MultiHeadAttention(d_in=32, d_out=32, context_length=t, dropout=0.0, num_heads=h)
block = TransformerBlock(32, h, 64)
x = torch.randn(b, t, 32)
y: Tensor = block(mha(x))
