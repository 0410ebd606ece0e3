"""QK and OV circuits reproduce a block's weights and outputs; composition, copying, ablation."""

import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from attention import RotaryEmbedding, TinyTransformer, TransformerBlock, YaRNScaling, circuits

ROTARIES = {"none": None, "rope": lambda: RotaryEmbedding(4),
            # YaRN's attention factor multiplies the rotated q and k: the score by its square
            "yarn": lambda: RotaryEmbedding(4, scaling=YaRNScaling(4.0, 16)),
            # only d_rot = 2 of the d_h = 4 features are rotated, and scaled by the factor
            "yarn-partial": lambda: RotaryEmbedding(4, rotary_dim=2, scaling=YaRNScaling(4.0, 16)),
            "yarn-partial-head": lambda: RotaryEmbedding(
                4, rotary_dim=2, scaling=YaRNScaling(4.0, 16, scaled_features="head"))}


def _block(norm: str, rotary: str) -> TransformerBlock:
    """A causal pre-norm attention-only block without biases, every weight random, float64."""
    torch.manual_seed(0)
    make = ROTARIES[rotary]
    block = TransformerBlock(8, 2, 16, is_causal=True, mlp=False, norm=norm, bias=False,
                             rotary=make() if make else None).double()
    with torch.no_grad():
        for parameter in block.parameters():
            parameter.normal_(0.0, 0.7)
    return block


def _scaled_tokens(x: torch.Tensor, norm: str, eps: float = 1e-5) -> torch.Tensor:
    """x divided by each token's own scale s, the part of the norm the circuits leave out."""
    if norm == "layer":
        return x / torch.sqrt(x.var(-1, correction=0, keepdim=True) + eps)
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("rotary", list(ROTARIES))
@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_circuits_reproduce_the_block_s_weights_and_output(norm: str, rotary: str) -> None:
    """A = softmax(x̃_i W_QK(i - j) x̃_jᵀ / sqrt(d_h)), output - x = Σ_h A_h x̃ W_OV^h."""
    block = _block(norm, rotary)
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    out, weights = block(x, return_weights=True)  # (1, t, d), (1, h, t, t)
    tokens = _scaled_tokens(x[0], norm)  # (t, d)
    written = torch.zeros(6, 8, dtype=torch.float64)
    for head in range(2):
        scores = torch.full((6, 6), -math.inf, dtype=torch.float64)
        for i in range(6):
            for j in range(i + 1):
                scores[i, j] = tokens[i] @ circuits.qk_circuit(block, head, i - j) @ tokens[j] / 2.0
        expected = torch.softmax(scores, dim=-1)
        torch.testing.assert_close(weights[0, head], expected, atol=1e-12, rtol=0)
        written += expected @ tokens @ circuits.ov_circuit(block, head)
    torch.testing.assert_close(out[0] - x[0], written, atol=1e-12, rtol=0)


def test_head_weights_are_the_slices_of_the_projections() -> None:
    block = TransformerBlock(8, 2, 16, norm_first=False).double()  # post-norm: nothing folded
    w_q, w_k, w_v, w_o = circuits.head_weights(block, 1)
    qkv, out = block.attn.qkv.weight, block.attn.out_proj.weight
    torch.testing.assert_close(w_q, qkv[4:8].T, rtol=0, atol=0)
    torch.testing.assert_close(w_k, qkv[12:16].T, rtol=0, atol=0)
    torch.testing.assert_close(w_v, qkv[20:24].T, rtol=0, atol=0)
    torch.testing.assert_close(w_o, out[:, 4:8].T, rtol=0, atol=0)
    assert w_q.dtype == torch.float64 and w_o.shape == (4, 8)


def test_rotation_matrix_turns_two_rotations_into_one() -> None:
    rotary = RotaryEmbedding(6)
    q, k = torch.randn(1, 6, dtype=torch.float64), torch.randn(1, 6, dtype=torch.float64)
    for i, j in ((5, 2), (9, 9), (3, 0)):
        score = rotary(q, i) @ rotary(k, j).T
        torch.testing.assert_close(score, q @ circuits.rotation_matrix(rotary, i - j) @ k.T)
    torch.testing.assert_close(circuits.rotation_matrix(rotary, 0), torch.eye(6, dtype=torch.float64))


def test_composition_score_measures_shared_subspaces() -> None:
    u, v, w = (torch.randn(5, 1, dtype=torch.float64) for _ in range(3))
    assert circuits.composition_score(u @ v.T, v @ w.T) == pytest.approx(1.0)  # A writes what B reads
    e = torch.eye(4, dtype=torch.float64)
    writes_first_two, reads_last_two = e[:, :2] @ e[:2], e[:, 2:] @ e[2:]
    assert circuits.composition_score(writes_first_two, reads_last_two) == 0.0  # orthogonal subspaces
    a, b = torch.randn(6, 6, dtype=torch.float64), torch.randn(6, 6, dtype=torch.float64)
    score = circuits.composition_score(a, b)
    assert 0.0 < score <= 1.0 and circuits.composition_score(3 * a, -b / 7) == pytest.approx(score)
    assert score == pytest.approx(((a @ b).norm() / (a.norm() * b.norm())).item())


@pytest.mark.parametrize("size", [1e-100, 1e-170, 1e160, 1e200])
def test_composition_score_does_not_depend_on_the_matrices_size(size: float) -> None:
    """The score is a ratio of norms: the norms of tiny or huge finite float64 matrices
    underflowed to 0 or overflowed to inf, and it came out 0.0 or nan, or refused a non-zero
    matrix as zero."""
    a, b = torch.randn(6, 6, dtype=torch.float64), torch.randn(6, 6, dtype=torch.float64)
    score = circuits.composition_score(a, b)
    assert circuits.composition_score(size * a, size * b) == pytest.approx(score)
    assert circuits.composition_score(size * a, b) == pytest.approx(score)


def test_copying_score_of_known_matrices() -> None:
    assert circuits.copying_score(torch.eye(5) * 2.0) == pytest.approx(1.0)
    assert circuits.copying_score(-torch.eye(5)) == pytest.approx(-1.0)
    quarter_turn = torch.tensor([[0.0, 1.0], [-1.0, 0.0]])  # eigenvalues ±i: neither
    assert circuits.copying_score(quarter_turn) == pytest.approx(0.0, abs=1e-12)
    assert circuits.copying_score(torch.diag(torch.tensor([3.0, -1.0]))) == pytest.approx(0.5)


@pytest.mark.parametrize(("entries", "expected"), [((1.7e308, 1.7e308), 1.0), ((1.7e308, -1e308), 0.7 / 2.7)])
def test_copying_score_does_not_depend_on_the_matrix_s_size(entries: tuple, expected: float) -> None:
    # eigenvalues summing past float64's range: nan and 0.0 (the sum of |λ| was inf)
    matrix = torch.diag(torch.tensor(entries, dtype=torch.float64))
    assert circuits.copying_score(matrix) == pytest.approx(expected, rel=1e-12)
    assert circuits.copying_score(torch.full((2, 2), 1e308, dtype=torch.float64)) == pytest.approx(1.0)


def _tiny() -> TinyTransformer:
    torch.manual_seed(0)
    model = TinyTransformer(11, 8, 2, 2, context_length=6, positions="rope", mlp=False).double()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.5)
    return model.eval()


def _with_context_replaced(model: TinyTransformer, layer: int, head: int, value) -> nn.Module:
    """The model with head's context vector z replaced by ``value`` (a hook on out_proj)."""

    def replace(_, args):
        z = args[0].clone()
        z[..., head * 4 : (head + 1) * 4] = value
        return (z,)

    model.blocks[layer].attn.out_proj.register_forward_pre_hook(replace)
    return model


def test_ablations_replace_a_head_s_context_by_zero_or_by_its_mean() -> None:
    model = _tiny()
    idx = torch.randint(11, (4, 6))
    means = circuits.head_output_means(model, idx)  # (L, h, d_h)
    with torch.no_grad():
        z = []
        hook = model.blocks[1].attn.out_proj.register_forward_pre_hook(
            lambda _, args: z.append(args[0]))
        before = model(idx)
        hook.remove()
        torch.testing.assert_close(means[1, 0], z[0][..., :4].mean(dim=(0, 1)))
        zeroed = circuits.ablate_heads(model, [(1, 0)])(idx)
        meaned = circuits.ablate_heads(model, [(1, 0)], means)(idx)
        torch.testing.assert_close(model(idx), before)  # the original is left alone
        hooked = _with_context_replaced(_tiny(), 1, 0, 0.0)
        torch.testing.assert_close(zeroed, hooked(idx), atol=1e-12, rtol=0)
        hooked = _with_context_replaced(_tiny(), 1, 0, means[1, 0])
        torch.testing.assert_close(meaned, hooked(idx), atol=1e-12, rtol=0)
    assert not torch.allclose(zeroed, meaned) and not torch.allclose(zeroed, before)


def test_heads_layers_and_offsets_may_be_numpy_integers() -> None:
    # refused as "head must be an integer in [0, 2), got np.int64(1)", a message naming an integer
    model, n = _tiny(), np.int64
    block = model.blocks[1]
    assert torch.equal(circuits.qk_circuit(block, n(1), n(3)), circuits.qk_circuit(block, 1, 3))
    assert torch.equal(circuits.ov_circuit(block, n(1)), circuits.ov_circuit(block, 1))
    ablated, expected = circuits.ablate_heads(model, [(n(1), n(0))]), circuits.ablate_heads(model, [(1, 0)])
    assert torch.equal(ablated.blocks[1].attn.out_proj.weight, expected.blocks[1].attn.out_proj.weight)


class TestBadInput:
    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: circuits.head_weights(TransformerBlock(8, 2, 16), 2), r"\[0, 2\), got 2"),
            (lambda: circuits.ov_circuit(TransformerBlock(8, 2, 16), True), r"got True"),
            (  # normalized q and k: the score is not x_i W_QK x_jᵀ
                lambda: circuits.qk_circuit(TransformerBlock(8, 2, 16, qk_norm=True), 0),
                r"qk_circuit reads a head without a QK-norm.*got qk_norm='layer'",
            ),
            (  # a gate that the query token sets multiplies what the head writes
                lambda: circuits.ov_circuit(TransformerBlock(8, 2, 16, output_gate=True), 0),
                r"ov_circuit reads a head without an output gate.*got output_gate=True",
            ),
            (lambda: circuits.rotation_matrix(RotaryEmbedding(4), -1), r"offset must be an integer >= 0.*got -1"),
            (lambda: circuits.rotation_matrix("rope", 0), r"rotary must be a RotaryEmbedding, got str"),
            # each raised an AttributeError ('str' object has no attribute 'num_heads', 'dim', ...)
            (lambda: circuits.head_weights("block", 0), r"block must be a TransformerBlock, got str"),
            (lambda: circuits.qk_circuit(_tiny(), 0), r"block must be a TransformerBlock, got TinyTransformer"),
            (lambda: circuits.ov_circuit(None, 0), r"block must be a TransformerBlock, got NoneType"),
            (lambda: circuits.composition_score([[1.0]], torch.eye(2)), r"first must be a 2-d tensor, got list"),
            (lambda: circuits.composition_score(torch.eye(2), torch.ones(2)), r"second must be a 2-d tensor, got \(2,\)"),
            (lambda: circuits.copying_score([[1.0]]), r"matrix must be a square tensor, got list"),
            (lambda: circuits.head_output_means("model", torch.zeros(1, 2, dtype=torch.long)),
             r"model must be a TinyTransformer, got str"),
            (lambda: circuits.ablate_heads(_tiny().blocks[0], [(0, 0)]), r"model must be a TinyTransformer, got TransformerBlock"),
            (lambda: circuits.ablate_heads(_tiny(), [(0, 0)], means=[0.0]),
             r"means must have shape \(L, h, d_h\) = \(2, 2, 4\), got list"),
            # without RoPE the offset was never read, so any value passed
            (lambda: circuits.qk_circuit(TransformerBlock(8, 2, 16), 0, offset=1.5),
             r"offset must be an integer >= 0.*got 1\.5"),
            (lambda: circuits.qk_circuit(TransformerBlock(8, 2, 16), 0, offset=float("nan")),
             r"offset must be an integer >= 0.*got nan"),
            (
                lambda: circuits.composition_score(torch.ones(3, 4), torch.ones(3, 4)),
                r"\(m, n\) and \(n, k\), got shapes \(3, 4\) and \(3, 4\)",
            ),
            (lambda: circuits.copying_score(torch.ones(3, 4)), r"square, got shape \(3, 4\)"),
            (lambda: circuits.ablate_heads(_tiny(), [(2, 0)]), r"layer must be in \[0, 2\), got 2"),
            (lambda: circuits.ablate_heads(_tiny(), [(0, 5)]), r"head must be .* got 5"),
            (
                lambda: circuits.ablate_heads(_tiny(), [(0, 0)], torch.zeros(2, 2)),
                r"means must have shape \(L, h, d_h\) = \(2, 2, 4\), got \(2, 2\)",
            ),
            (
                lambda: circuits.ablate_heads(
                    TinyTransformer(5, 8, 2, 1, 4, bias=False), [(0, 0)], torch.zeros(1, 2, 4)
                ),
                r"mean ablation needs out_proj with a bias.*got bias=None",
            ),
        ],
    )
    def test_heads_layers_and_matrix_shapes_must_be_in_range(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()  # type: ignore[operator]

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            # the imaginary part was dropped with a UserWarning: 1.0 for eigenvalues 1 ± i
            (lambda: circuits.copying_score(torch.eye(2) + torch.diag(torch.tensor([1j, -1j]))),
             r"matrix must be a real floating-point matrix, got torch.complex64"),
            (lambda: circuits.composition_score(torch.eye(2), 1j * torch.eye(2)),
             r"second must be a real floating-point matrix, got torch.complex64"),
            # integer and bool matrices were read as floats without a word
            (lambda: circuits.copying_score(torch.eye(2, dtype=torch.long)),
             r"matrix must be a real floating-point matrix, got torch.int64"),
            (lambda: circuits.composition_score(torch.eye(2, dtype=torch.bool), torch.eye(2)),
             r"first must be a real floating-point matrix, got torch.bool"),
            # the scores were NaN
            (lambda: circuits.copying_score(torch.tensor([[float("nan"), 0.0], [0.0, 1.0]])),
             r"matrix must have finite entries, got 1 inf or NaN of 4"),
            (lambda: circuits.composition_score(torch.eye(2), torch.full((2, 3), float("inf"))),
             r"second must have finite entries, got 6 inf or NaN of 6"),
        ],
    )
    def test_complex_integer_and_non_finite_matrices_are_refused(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()  # type: ignore[operator]

    @pytest.mark.parametrize(
        "heads",
        [
            (0, 1),  # one pair, not a list of them: a TypeError (cannot unpack int)
            None,  # a TypeError ('NoneType' object is not iterable)
            [(0, 1, 2)],  # "too many values to unpack (expected 2)"
            [0, 1],
            "01",
        ],
    )
    def test_heads_that_are_not_a_list_of_pairs_are_refused(self, heads: object) -> None:
        with pytest.raises(ValueError, match=r"heads must be a list of \(layer, head\) pairs.*got " + re.escape(repr(heads))):
            circuits.ablate_heads(_tiny(), heads)  # type: ignore[arg-type]

    @pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.complex64])
    def test_means_that_are_not_floating_point_are_refused(self, dtype: torch.dtype) -> None:
        # True was read as a mean of 1.0, an integer as a float, a complex lost its imaginary part
        with pytest.raises(ValueError, match=rf"means must be floating point .*got {dtype}"):
            circuits.ablate_heads(_tiny(), [(0, 0)], torch.ones(2, 2, 4, dtype=dtype))

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: circuits.composition_score(torch.zeros(3, 4), torch.ones(4, 2)),
             r"undefined for a zero matrix: \|\|first\|\|_F = 0"),
            (lambda: circuits.composition_score(torch.ones(3, 4), torch.zeros(4, 2)),
             r"undefined for a zero matrix: \|\|second\|\|_F = 0"),
            (lambda: circuits.copying_score(torch.zeros(3, 3)), r"undefined when every eigenvalue is 0"),
            (lambda: circuits.copying_score(torch.tensor([[0.0, 1.0], [0.0, 0.0]])),
             r"undefined when every eigenvalue is 0"),
            # a mean over no token: nan means, which mean ablation spread to every output
            (lambda: circuits.head_output_means(_tiny(), torch.zeros(0, 3, dtype=torch.long)),
             r"averages over the tokens of inputs: it needs at least one, got inputs of shape \(0, 3\)"),
            (lambda: circuits.head_output_means(_tiny(), torch.zeros(2, 0, dtype=torch.long)),
             r"needs at least one, got inputs of shape \(2, 0\)"),
        ],
    )
    def test_scores_that_would_be_zero_over_zero_are_refused(self, make: object, message: str) -> None:
        """0 / 0 (a score of nan before): the score is undefined there."""
        with pytest.raises(ValueError, match=message):
            make()  # type: ignore[operator]
