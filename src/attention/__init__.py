"""attention: every mechanism of the textbook, from the functional building blocks to the modules.

Notation used across the package (see CONTRIBUTING.md): b batch size, t tokens (t_q, t_k for
queries and keys), d_in input width, d_out output width, h heads, d_h = d_out / h head width,
d_k width of queries and keys.
"""

from importlib import metadata as _metadata

from . import distributed as distributed  # not in __all__: the real ring and Ulysses
from .additive import AdditiveAttention, AttentionDecoder, Seq2Seq, Seq2SeqEncoder
from .block_attention import BlockAttention
from .causal import CausalAttention
from .circuits import (
    ablate_heads,
    composition_score,
    copying_score,
    head_output_means,
    head_weights,
    ov_circuit,
    qk_circuit,
    rotation_matrix,
)
from .data import JOURNEY_TOKENS, journey_batch, journey_inputs
from .decoding import split_kv_attention, weights_read_per_token
from .delta import decayed_linear_attention, delta_rule, gated_delta_rule
from .delta_layer import GatedDeltaNet
from .encoder import BidirectionalSelfAttention, CrossAttention
from .favor import (
    favor_attention,
    favor_error_variance,
    positive_random_features,
    random_projection,
)
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
from .inference import GroupedQueryAttention, sink_window_mask
from .io_model import (
    IOCount,
    TwoLevelMemory,
    standard_attention_io,
    standard_io_formula,
    tiled_attention_io,
    tiled_io_formula,
)
from .kv_cache import KVCache, ModelKVCache, RollingKVCache, kv_cache_bytes
from .latent import LatentKVCache, MultiHeadLatentAttention, latent_cache_bytes
from .linear import (
    elu_plus_one,
    linear_attention,
    linear_attention_flops,
    linear_attention_weights,
)
from .linear_model import KernelBlockAttention, use_kernel_attention
from .lse_weights import weights_from_lse
from .masks import block_sparsity, dense_attention, to_bias, to_dense
from .memory import MemoryTracker
from .multihead import (
    FusedMultiHeadAttention,
    MultiHeadAttention,
    MultiHeadAttentionWrapper,
    from_torch_state_dict,
    to_torch_state_dict,
)
from .norms import RMSNorm
from .packing import cu_seqlens_from_lengths, document_ids, pack, unpack, varlen_attention
from .paged import PagedKVCache, PagedSequence
from .plotting import plot_attention
from .positions import (
    LearnedPositions,
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    rotary_permutation,
    sinusoidal_positions,
)
from .ring import ring_attention, ring_attention_io, ring_shards, ring_work
from .rope_scaling import (
    DynamicNTKScaling,
    Llama3Scaling,
    NTKAwareScaling,
    PositionInterpolation,
    YaRNScaling,
)
from .self_attention import SelfAttentionV1, SelfAttentionV2
from .sparse import (
    LightningIndexer,
    block_topk_mask,
    dsa_attention,
    dsa_flops,
    moba_attention,
    moba_mask,
    nsa_attention,
    nsa_mask,
    topk_mask,
)
from .streaming import StreamingKVCache, streaming_cache
from .training import head_scores, induction_data, lookback_data, next_token_accuracy, train_lm
from .transformer import TinyTransformer, TransformerBlock, swiglu_width

try:  # the installed distribution's version, so that it cannot drift from pyproject.toml
    __version__ = _metadata.version("attention")
except _metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "MemoryTracker",
    "JOURNEY_TOKENS",
    "AdditiveAttention",
    "AttentionDecoder",
    "BidirectionalSelfAttention",
    "BlockAttention",
    "CausalAttention",
    "CrossAttention",
    "DynamicNTKScaling",
    "FusedMultiHeadAttention",
    "GatedDeltaNet",
    "GroupedQueryAttention",
    "IOCount",
    "KernelBlockAttention",
    "KVCache",
    "LatentKVCache",
    "LearnedPositions",
    "LightningIndexer",
    "Llama3Scaling",
    "ModelKVCache",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "MultiHeadAttentionWrapper",
    "NTKAwareScaling",
    "PagedKVCache",
    "PagedSequence",
    "PositionInterpolation",
    "RMSNorm",
    "RollingKVCache",
    "RotaryEmbedding",
    "SelfAttentionV1",
    "SelfAttentionV2",
    "StreamingKVCache",
    "Seq2Seq",
    "Seq2SeqEncoder",
    "TinyTransformer",
    "TransformerBlock",
    "TwoLevelMemory",
    "YaRNScaling",
    "ablate_heads",
    "additive_causal_mask",
    "alibi_bias",
    "alibi_slopes",
    "attention_weights",
    "block_sparsity",
    "block_topk_mask",
    "causal_mask",
    "composition_score",
    "copying_score",
    "cu_seqlens_from_lengths",
    "dense_attention",
    "document_ids",
    "dsa_attention",
    "dsa_flops",
    "elu_plus_one",
    "favor_attention",
    "favor_error_variance",
    "decayed_linear_attention",
    "delta_rule",
    "flash_attention",
    "from_torch_state_dict",
    "gated_delta_rule",
    "head_output_means",
    "head_scores",
    "head_weights",
    "induction_data",
    "journey_batch",
    "journey_inputs",
    "kv_cache_bytes",
    "latent_cache_bytes",
    "linear_attention",
    "linear_attention_flops",
    "linear_attention_weights",
    "lookback_data",
    "moba_attention",
    "moba_mask",
    "next_token_accuracy",
    "nsa_attention",
    "nsa_mask",
    "ov_circuit",
    "pack",
    "plot_attention",
    "positive_random_features",
    "qk_circuit",
    "random_projection",
    "ring_attention",
    "ring_attention_io",
    "ring_shards",
    "ring_work",
    "rotary_permutation",
    "rotation_matrix",
    "scaled_dot_product_attention",
    "sink_window_mask",
    "sinusoidal_positions",
    "sliding_window_mask",
    "softmax",
    "softmax_naive",
    "split_kv_attention",
    "standard_attention_io",
    "standard_io_formula",
    "streaming_cache",
    "swiglu_width",
    "tiled_attention_io",
    "tiled_io_formula",
    "to_bias",
    "to_dense",
    "to_torch_state_dict",
    "topk_mask",
    "train_lm",
    "unpack",
    "use_kernel_attention",
    "varlen_attention",
    "weights_from_lse",
    "weights_read_per_token",
]
