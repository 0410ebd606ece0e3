"""attention: every mechanism of the textbook, from the functional building blocks to the modules.

Notation used across the package (see CONTRIBUTING.md): b batch size, t tokens (t_q, t_k for
queries and keys), d_in input width, d_out output width, h heads, d_h = d_out / h head width,
d_k width of queries and keys.
"""

from .additive import AdditiveAttention, AttentionDecoder, Seq2Seq, Seq2SeqEncoder
from .causal import CausalAttention
from .data import JOURNEY_TOKENS, journey_batch, journey_inputs
from .encoder import BidirectionalSelfAttention, CrossAttention
from .flash import flash_attention
from .functional import (
    additive_causal_mask,
    attention_weights,
    causal_mask,
    scaled_dot_product_attention,
    sliding_window_mask,
    softmax,
    softmax_naive,
)
from .inference import (
    GroupedQueryAttention,
    KVCache,
    ModelKVCache,
    PagedKVCache,
    RollingKVCache,
    kv_cache_bytes,
)
from .io_model import (
    IOCount,
    TwoLevelMemory,
    standard_attention_io,
    standard_io_formula,
    tiled_attention_io,
    tiled_io_formula,
)
from .linear import (
    elu_plus_one,
    favor_attention,
    favor_error_variance,
    linear_attention,
    linear_attention_flops,
    linear_attention_weights,
    positive_random_features,
    random_projection,
)
from .linear_model import use_kernel_attention
from .memory import MemoryTracker
from .multihead import FusedMultiHeadAttention, MultiHeadAttention, MultiHeadAttentionWrapper
from .plotting import plot_attention
from .positions import (
    LearnedPositions,
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    rotary_permutation,
    sinusoidal_positions,
)
from .self_attention import SelfAttentionV1, SelfAttentionV2
from .training import head_scores, induction_data, lookback_data, next_token_accuracy, train_lm
from .transformer import TinyTransformer, TransformerBlock

__version__ = "0.1.0"

__all__ = [
    "MemoryTracker",
    "JOURNEY_TOKENS",
    "AdditiveAttention",
    "AttentionDecoder",
    "BidirectionalSelfAttention",
    "CausalAttention",
    "CrossAttention",
    "FusedMultiHeadAttention",
    "GroupedQueryAttention",
    "IOCount",
    "KVCache",
    "LearnedPositions",
    "ModelKVCache",
    "MultiHeadAttention",
    "MultiHeadAttentionWrapper",
    "PagedKVCache",
    "RollingKVCache",
    "RotaryEmbedding",
    "SelfAttentionV1",
    "SelfAttentionV2",
    "Seq2Seq",
    "Seq2SeqEncoder",
    "TinyTransformer",
    "TransformerBlock",
    "TwoLevelMemory",
    "additive_causal_mask",
    "alibi_bias",
    "alibi_slopes",
    "attention_weights",
    "causal_mask",
    "elu_plus_one",
    "favor_attention",
    "favor_error_variance",
    "flash_attention",
    "head_scores",
    "induction_data",
    "journey_batch",
    "journey_inputs",
    "kv_cache_bytes",
    "linear_attention",
    "linear_attention_flops",
    "linear_attention_weights",
    "lookback_data",
    "next_token_accuracy",
    "plot_attention",
    "positive_random_features",
    "random_projection",
    "rotary_permutation",
    "scaled_dot_product_attention",
    "sinusoidal_positions",
    "sliding_window_mask",
    "softmax",
    "softmax_naive",
    "standard_attention_io",
    "standard_io_formula",
    "tiled_attention_io",
    "tiled_io_formula",
    "train_lm",
    "use_kernel_attention",
]
