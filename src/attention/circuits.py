"""A trained model's heads read as circuits (Elhage et al., 2021), and heads removed from it.

Notation (see CONTRIBUTING.md), in the book's row-vector convention (a token is a row x):
    d        model width; h heads of width d_h; L layers; n_vocab vocabulary size
    W_q, W_k, W_v  (d, d_h)   one head's slices of the projections
    W_o            (d_h, d)   the head's rows of the output projection
    Γ              (d, d)     the linear part of the norm the head reads through (norms.norm_matrix)
    R_Δ            (d_h, d_h) RoPE's rotation by the offset Δ = i - j of query i and key j

    QK circuit  W_QK = (Γ W_q) R_Δ (Γ W_k)ᵀ    score of query x_i against key x_j: x_i W_QK x_jᵀ
    OV circuit  W_OV = (Γ W_v) W_o              what the head adds to the stream: x_j W_OV

Elhage et al. write column vectors (their W_Q is our W_qᵀ) and define W_QK = W_Qᵀ W_K, the same
matrix as ours, and W_OV = W_O W_V, the transpose of ours.
Folding Γ in leaves out each token's division by its own scale and the biases. Everything is
computed in float64.
"""

import copy
import math
from collections.abc import Iterable
from numbers import Integral
from typing import cast

import torch
from torch import Tensor, nn

from ._checks import check_counts, shape_or_type
from .norms import norm_matrix
from .positions import RotaryEmbedding
from .transformer import TinyTransformer, TransformerBlock

__all__ = [
    "ablate_heads",
    "composition_score",
    "copying_score",
    "head_output_means",
    "head_weights",
    "ov_circuit",
    "qk_circuit",
    "rotation_matrix",
]


def _check_matrix(name: str, matrix: object) -> None:
    """Require a 2-d real floating-point tensor of finite entries: a complex matrix would lose
    its imaginary part in float64, an integer or bool one is no circuit, and inf or NaN makes
    the scores NaN."""
    if not isinstance(matrix, Tensor) or matrix.dim() != 2:
        raise ValueError(f"{name} must be a 2-d tensor, got {shape_or_type(matrix)}")
    if not matrix.is_floating_point():
        raise ValueError(f"{name} must be a real floating-point matrix, got {matrix.dtype}")
    if not bool(torch.isfinite(matrix).all()):
        bad = int((~torch.isfinite(matrix)).sum())
        raise ValueError(
            f"{name} must have finite entries, got {bad} inf or NaN of {matrix.numel()}"
        )


def _check_head(block: TransformerBlock, head: int) -> None:
    """Require a TransformerBlock and a head index 0 .. h - 1 of it (a Python or NumPy
    integer)."""
    if not isinstance(block, TransformerBlock):
        raise ValueError(f"block must be a TransformerBlock, got {type(block).__name__}")
    h = block.num_heads
    if isinstance(head, bool) or not isinstance(head, Integral) or not 0 <= head < h:
        raise ValueError(f"head must be an integer in [0, {block.num_heads}), got {head!r}")


# The part of a block that each circuit cannot read, as the block's option, the part, and why the
# circuit is no fixed matrix with it.
_UNREADABLE = {
    "qk_circuit": ("qk_norm", "a QK-norm", "a normalized query and key give a score that no W_QK gives"),
    "ov_circuit": ("output_gate", "an output gate",
                   "the gate, a function of the query token, multiplies what the head writes"),
}


def _check_circuit_head(circuit: str, block: TransformerBlock, head: int) -> None:
    """Require a head as _check_head does, in a block built without the option whose part
    ``circuit`` cannot read (_UNREADABLE)."""
    _check_head(block, head)
    option, part, why = _UNREADABLE[circuit]
    got = block.attn.qk_norm if option == "qk_norm" else block.attn.gate is not None
    if got not in (None, False):
        raise ValueError(f"{circuit} reads a head without {part} ({why}), got {option}={got!r}")


def head_weights(block: TransformerBlock, head: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """W_q, W_k, W_v (d, d_h) and W_o (d_h, d) of one head, float64, as x W multiplies them.

    In a pre-norm block the head reads norm1(x), so the norm's linear part Γ is folded into the
    three reading matrices (Γ W_q, Γ W_k, Γ W_v); a post-norm block's head reads x itself.

    Args:
        block: the Transformer block that holds the head.
        head: its index, 0 .. h - 1.

    Returns:
        (W_q, W_k, W_v, W_o), detached float64 copies.

    Raises:
        ValueError: if block is not a TransformerBlock or head is not an integer in [0, h).

    Examples:
        >>> block = TransformerBlock(4, 2, 8)
        >>> [tuple(w.shape) for w in head_weights(block, 1)]
        [(4, 2), (4, 2), (4, 2), (2, 4)]
    """
    _check_head(block, head)
    d, d_h = block.d_model, block.d_h
    rows = slice(head * d_h, (head + 1) * d_h)
    qkv = block.attn.qkv.weight.detach().double()  # (3d, d): nn.Linear stores W^T
    read = norm_matrix(block.norm1).double() if block.norm_first else torch.eye(d).double()
    w_q, w_k, w_v = (read @ qkv[i * d : (i + 1) * d][rows].T for i in range(3))  # (d, d_h)
    w_o = block.attn.out_proj.weight.detach().double()[:, rows].T  # (d_h, d)
    return w_q, w_k, w_v, w_o


def rotation_matrix(rotary: RotaryEmbedding, offset: int) -> Tensor:
    """R_Δ (d_h, d_h), float64: q R_i · k R_j = q R_Δ kᵀ for Δ = i - j >= 0.

    Row a is the basis vector e_a rotated as a query at position Δ; for rotations by angles
    linear in the position, R_i R_jᵀ = R_(i - j). A pure rotation: YaRN's attention factor,
    which multiplies the rotated features of queries and keys, is left out.

    Args:
        rotary: the rotary embedding of the queries and keys.
        offset: Δ = i - j >= 0, how far the key sits before the query.

    Returns:
        R_Δ (d_h, d_h) in float64.

    Raises:
        ValueError: if rotary is not a RotaryEmbedding or offset is not an integer >= 0.

    Examples:
        >>> rotation_matrix(RotaryEmbedding(2), 0)
        tensor([[1., 0.],
                [0., 1.]], dtype=torch.float64)
    """
    if not isinstance(rotary, RotaryEmbedding):
        raise ValueError(f"rotary must be a RotaryEmbedding, got {type(rotary).__name__}")
    check_counts(offset=offset)  # Δ = i - j
    basis = torch.eye(rotary.d_h, dtype=torch.float64)[:, None, :]  # (d_h, 1, d_h): t = 1
    return rotary.shift(basis, offset)[:, 0, :]  # (d_h, d_h)


def qk_circuit(block: TransformerBlock, head: int, offset: int = 0) -> Tensor:
    """W_QK = (Γ W_q) R_Δ (Γ W_k)ᵀ (d, d): query on the left, key on the right.

    Without RoPE there is no R_Δ and the offset changes nothing. The scale 1 / sqrt(d_h) is
    left out, as in Elhage et al.; YaRN's attention factor, which multiplies the rotated
    features of both query and key (every feature with ``scaled_features="head"``), is kept,
    squared, on those features.

    Args:
        block: the Transformer block that holds the head.
        head: its index, 0 .. h - 1.
        offset: Δ = i - j, the query's position minus the key's (used with RoPE only).

    Returns:
        W_QK (d, d) in float64: x_i W_QK x_jᵀ is the score of query x_i against key x_j.

    Raises:
        ValueError: if block is not a TransformerBlock, head is not an integer in [0, h),
            offset not an integer >= 0, or the block normalizes its queries and keys
            (QK-norm): its scores are then no bilinear form of the two tokens.

    Examples:
        >>> qk_circuit(TransformerBlock(4, 2, 8), head=0).shape
        torch.Size([4, 4])
    """
    _check_circuit_head("qk_circuit", block, head)
    check_counts(offset=offset)  # Δ = i - j; checked without RoPE too, where it changes nothing
    w_q, w_k, _, _ = head_weights(block, head)  # (d, d_h) each
    rotary = block.attn.rotary
    if rotary is None:
        return w_q @ w_k.T  # (d, d)
    # YaRN's factor multiplies the scaled features of q and k: their terms of the score by its
    # square, the others by 1
    factor = torch.ones(block.d_h, dtype=torch.float64)  # (d_h,)
    factor[: rotary.scaled_dim] = rotary.attention_factor**2
    return w_q @ (rotation_matrix(rotary, offset) * factor) @ w_k.T  # (d, d)


def ov_circuit(block: TransformerBlock, head: int) -> Tensor:
    """W_OV = (Γ W_v) W_o (d, d): an attended token's row x times W_OV is what the head writes.

    Args:
        block: the Transformer block that holds the head.
        head: its index, 0 .. h - 1.

    Returns:
        W_OV (d, d) in float64.

    Raises:
        ValueError: if block is not a TransformerBlock, head is not an integer in [0, h), or
            the block gates its attention's output: what a head writes then depends on the
            query token too.

    Examples:
        >>> ov_circuit(TransformerBlock(4, 2, 8), head=0).shape
        torch.Size([4, 4])
    """
    _check_circuit_head("ov_circuit", block, head)
    _, _, w_v, w_o = head_weights(block, head)
    return w_v @ w_o  # (d, d)


def composition_score(first: Tensor, second: Tensor) -> float:
    """||first · second||_F / (||first||_F ||second||_F), in [0, 1] (Elhage et al., 2021).

    For a head of layer 0 (OV circuit W_OV) and one of layer 1 (W_QK, W_OV'): Q-composition is
    ``composition_score(W_OV, W_QK)``, K-composition ``composition_score(W_QK, W_OV.T)`` and
    V-composition ``composition_score(W_OV, W_OV')``.

    Args:
        first: a matrix (m, n).
        second: a matrix (n, k).

    Returns:
        The score, a float in [0, 1].

    Raises:
        ValueError: if the two are not real floating-point matrices (2-d tensors) of finite
            entries whose product is defined, or one of them is 0 (the score is then 0 / 0).

    Examples:
        >>> composition_score(torch.eye(2), torch.eye(2))
        0.7071067811865475
    """
    _check_matrix("first", first)
    _check_matrix("second", second)
    if first.shape[1] != second.shape[0]:
        raise ValueError(
            f"first and second must be matrices (m, n) and (n, k), got shapes "
            f"{tuple(first.shape)} and {tuple(second.shape)}"
        )
    first, second = first.double(), second.double()
    largest = [matrix.abs().max() for matrix in (first, second)]  # scalars
    for name, top in zip(("first", "second"), largest):
        if top == 0:  # the score would be 0 / 0
            raise ValueError(
                f"composition_score is undefined for a zero matrix: ||{name}||_F = 0"
            )
    # The score does not change when a matrix is scaled: scaled to entries of at most 1, the
    # norms of tiny or huge matrices (1e-170, 1e200) no longer underflow to 0 or overflow to inf
    first, second = first / largest[0], second / largest[1]  # (m, n), (n, k)
    return ((first @ second).norm() / (first.norm() * second.norm())).item()


def copying_score(matrix: Tensor) -> float:
    """Σ λ / Σ |λ| over the eigenvalues λ of a square matrix: 1 when all are positive.

    Elhage et al.'s summary of an OV circuit: positive eigenvalues mean that the head raises the
    logits of the tokens it attends to (copying), negative ones that it lowers them.

    Args:
        matrix: a square matrix, an OV circuit read in token space.

    Returns:
        The score, a float in [-1, 1].

    Raises:
        ValueError: if matrix is not a square real floating-point tensor of finite entries, or
            every eigenvalue is 0 (the score is then 0 / 0).

    Examples:
        >>> copying_score(torch.diag(torch.tensor([3.0, -1.0])))
        0.5
    """
    if not isinstance(matrix, Tensor):
        raise ValueError(f"matrix must be a square tensor, got {type(matrix).__name__}")
    if matrix.dim() != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"matrix must be square, got shape {tuple(matrix.shape)}")
    _check_matrix("matrix", matrix)
    # as in composition_score, the score does not change when the matrix is scaled: scaled to
    # entries below 1, eigenvalues of 1e308 no longer sum to inf (a score of nan or 0); by a
    # power of two, which scales every entry exactly (at least 2**-1000: no overflow)
    exponent = max(math.frexp(float(matrix.detach().abs().max()))[1], -1000)  # top = m 2**e, m < 1
    eigenvalues = torch.linalg.eigvals(matrix.double() * 2.0**-exponent)  # (n,), complex
    total = eigenvalues.abs().sum()
    if total == 0:  # the score would be 0 / 0
        raise ValueError(
            "copying_score is undefined when every eigenvalue is 0 (a zero or nilpotent "
            f"matrix): got sum |λ| = 0 over the {matrix.shape[0]} eigenvalues"
        )
    return (eigenvalues.sum().real / total).item()


def _check_model(model: object) -> None:
    """Require a TinyTransformer, whose blocks the hooks and the ablation reach."""
    if not isinstance(model, TinyTransformer):
        raise ValueError(f"model must be a TinyTransformer, got {type(model).__name__}")


@torch.no_grad()
def head_output_means(model: TinyTransformer, inputs: Tensor) -> Tensor:
    """Each head's context vector z averaged over the tokens of ``inputs`` (b, t): (L, h, d_h).

    z is what ``attn.out_proj`` reads, the heads' A V side by side; a forward hook records it.
    The model is put in eval mode.

    Args:
        model: the model to run.
        inputs: token ids (b, t).

    Returns:
        The means (L, h, d_h).

    Raises:
        ValueError: if model is not a TinyTransformer, as it raises for inputs, or inputs hold
            no token (the mean would be 0 / 0).

    Examples:
        >>> model = TinyTransformer(5, 4, 2, 1, context_length=3)  # n_vocab, d, h, L
        >>> head_output_means(model, torch.tensor([[0, 1, 2]])).shape
        torch.Size([1, 2, 2])
    """
    _check_model(model)
    model.eval()
    recorded: list[Tensor] = []
    hooks = [
        block.attn.out_proj.register_forward_pre_hook(lambda _, args: recorded.append(args[0]))
        for block in cast(Iterable[TransformerBlock], model.blocks)  # torch types them Module
    ]
    try:
        model(inputs)
    finally:
        for hook in hooks:
            hook.remove()
    if recorded[0].shape[:2].numel() == 0:  # z (b, t, d): the mean would be 0 / 0, nan
        raise ValueError("head_output_means averages over the tokens of inputs: it needs at "
                         f"least one, got inputs of shape {tuple(inputs.shape)}")
    means = torch.stack([z.mean(dim=(0, 1)) for z in recorded])  # (L, d)
    return means.view(len(model.blocks), model.num_heads, -1)  # (L, h, d_h)


def _check_pairs(heads: object) -> list[tuple[int, int]]:
    """Require an iterable (a list, a tuple) of (layer, head) pairs, each a tuple or a list of
    two; returns them as a list (the ranges are checked per model)."""
    pairs = list(heads) if isinstance(heads, Iterable) and not isinstance(heads, str) else None
    if pairs is None or not all(isinstance(p, (tuple, list)) and len(p) == 2 for p in pairs):
        raise ValueError(f"heads must be a list of (layer, head) pairs, such as [(0, 1)], got "
                         f"{heads!r}")
    return [(layer, head) for layer, head in pairs]


def ablate_heads(
    model: TinyTransformer, heads: list[tuple[int, int]], means: Tensor | None = None
) -> TinyTransformer:
    """A copy of ``model`` without the output of each (layer, head) in ``heads``.

    Zero ablation (``means=None``) zeroes the head's rows of W_o, so it adds nothing; mean
    ablation adds instead the constant that its mean context vector from
    :func:`~attention.circuits.head_output_means` would add (``out_proj`` needs a bias).

    Args:
        model: the model; it is not changed.
        heads: the (layer, head) pairs to remove.
        means: the heads' mean context vectors (L, h, d_h), floating point, for mean ablation;
            None zeroes them.

    Returns:
        The ablated copy.

    Raises:
        ValueError: if model is not a TinyTransformer, heads is not a list of (layer, head)
            pairs, means is not a floating-point tensor of the shape above, a layer or head is
            out of range, or mean ablation meets an ``out_proj`` without a bias.

    Examples:
        >>> model = TinyTransformer(5, 4, 2, 1, context_length=3)  # n_vocab, d, h, L
        >>> ablated = ablate_heads(model, [(0, 1)])
        >>> ablated.blocks[0].attn.out_proj.weight[:, 2:].abs().sum().item()
        0.0
    """
    _check_model(model)
    pairs = _check_pairs(heads)
    expected = (len(model.blocks), model.num_heads, cast(TransformerBlock, model.blocks[0]).d_h)
    if means is not None and shape_or_type(means) != expected:
        raise ValueError(
            f"means must have shape (L, h, d_h) = {expected}, got {shape_or_type(means)}"
        )
    if isinstance(means, Tensor) and not means.is_floating_point():  # as head_output_means gives
        raise ValueError(f"means must be floating point (mean context vectors), got {means.dtype}")
    ablated = copy.deepcopy(model)
    for layer, head in pairs:
        if isinstance(layer, bool) or not isinstance(layer, Integral) or not (
            0 <= layer < len(ablated.blocks)
        ):
            raise ValueError(f"layer must be in [0, {len(ablated.blocks)}), got {layer!r}")
        block = cast(TransformerBlock, ablated.blocks[layer])  # torch types it Module
        _check_head(block, head)
        out_proj: nn.Linear = block.attn.out_proj
        rows = slice(head * block.d_h, (head + 1) * block.d_h)
        with torch.no_grad():
            if means is not None:
                if out_proj.bias is None:
                    raise ValueError("mean ablation needs out_proj with a bias, got bias=None")
                mean = means[layer, head].to(out_proj.weight)  # (d_h,)
                out_proj.bias.add_(out_proj.weight[:, rows] @ mean)  # (d,): z W_o, z the mean
            out_proj.weight[:, rows] = 0  # the columns of nn.Linear's W_oᵀ read head's z
    return ablated
