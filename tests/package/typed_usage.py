"""A user's script, type-checked with ``mypy --strict`` by .ci/run (it is not run): the package's
annotations must let a caller's own typed code pass without casts or ignores (but the one below,
which shows that a string option is a ``Literal``: mypy's warn_unused_ignores fails the run if the
wrong string were accepted)."""

# mypy: warn-unused-ignores

from typing import assert_type

import torch
from torch import Tensor

from attention import (
    MultiHeadAttention,
    RotaryEmbedding,
    TransformerBlock,
    causal_mask,
    dense_attention,
    flash_attention,
    linear_attention,
    scaled_dot_product_attention,
    sliding_window_mask,
    split_kv_attention,
)
from attention.norms import make_norm

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

# The flags that add an output: one overload per value, so each call has one return type.
out: Tensor = flash_attention(query, key, value, is_causal=True)
out, lse = flash_attention(query, key, value, return_lse=True)
assert_type(dense_attention(query, key, value, return_lse=True), tuple[Tensor, Tensor])
assert_type(split_kv_attention(query, key, value, num_splits=2), Tensor)
prefill, state = linear_attention(query, key, value, is_causal=True, output_final_state=True)
flag: bool = bool(torch.rand(()) < 0.5)
assert_type(flash_attention(query, key, value, return_lse=flag), Tensor | tuple[Tensor, Tensor])
assert_type(mha.forward(x, return_weights=True), tuple[Tensor, Tensor])
assert_type(block.forward(x, return_weights=True), tuple[Tensor, Tensor])

# String options are Literals: a spelling the package knows type-checks, a typo does not.
top_left: Tensor = flash_attention(query, key, value, is_causal=True, alignment="bottom_right")
chunked: Tensor = linear_attention(query, key, value, form="chunked", feature_map="elu+1")
swiglu = TransformerBlock(32, h, 64, activation="swiglu", norm="rms")
norm = make_norm("rms", 32)
gelu_typo = TransformerBlock(32, h, 64, activation="GELU")  # type: ignore[arg-type]
