"""The tiny language model: causal, its positions, its training and head scores, decoding with a
KV cache equal to the full pass, tied weights, and the cache's memory."""


import copy
import math
import pickle

import pytest
import torch
from _inputs import NON_BOOLS, randomize, refuses_non_bool
from torch import nn

from attention import (
    KVCache,
    ModelKVCache,
    RMSNorm,
    RollingKVCache,
    RotaryEmbedding,
    TinyTransformer,
    TransformerBlock,
    alibi_bias,
    head_scores,
    induction_data,
    kv_cache_bytes,
    lookback_data,
    next_token_accuracy,
    train_lm,
)

POSITIONS = [None, "learned", "sinusoidal", "rope", "alibi"]


# --- the tiny language model ------------------------------------------------------------------


@pytest.mark.parametrize("positions", POSITIONS)
def test_tiny_transformer_is_causal(positions: str | None) -> None:
    """Changing the tokens after position 3 leaves the logits up to position 3 unchanged."""
    torch.manual_seed(0)
    model = TinyTransformer(11, 8, 2, 2, context_length=8, positions=positions).eval()
    idx = torch.randint(11, (2, 8))
    other = idx.clone()
    other[:, 4:] = (other[:, 4:] + 1) % 11
    logits, weights = model(idx, return_weights=True)
    assert logits.shape == (2, 8, 11) and [w.shape for w in weights] == [(2, 2, 8, 8)] * 2
    torch.testing.assert_close(model(other)[:, :4], logits[:, :4])
    assert not torch.allclose(model(other)[:, 4:], logits[:, 4:])


def test_positions_tell_tokens_apart_only_when_there_are_some() -> None:
    """With no positions and the same token everywhere, every position gets the same logits."""
    idx = torch.full((1, 5), 3)
    schemes = [(None, True), ("learned", False), ("sinusoidal", False), ("rope", True)]
    for positions, same in [*schemes, ("alibi", True)]:  # rope, alibi: where to look, not what
        torch.manual_seed(0)
        logits = TinyTransformer(11, 8, 2, 1, 5, positions=positions).eval()(idx)
        assert torch.allclose(logits, logits[:, :1].expand_as(logits), atol=1e-6) == same


@pytest.mark.parametrize("positions", POSITIONS[1:])
def test_each_scheme_changes_the_logits(positions: str) -> None:
    """The same weights without positions give other logits: the scheme is used."""
    torch.manual_seed(0)
    model = TinyTransformer(11, 8, 2, 2, 6, positions=positions).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_()  # scores far from 0, so that attention is far from uniform
    plain = TinyTransformer(11, 8, 2, 2, 6, positions=None).eval()
    plain.load_state_dict(model.state_dict(), strict=False)  # all but a learned table
    idx = torch.randint(11, (2, 6))
    assert not torch.allclose(model(idx), plain(idx), atol=1e-4)


def test_train_lm_takes_every_seed_torch_takes_negative_ones_too() -> None:
    def losses(seed: int) -> list[float]:
        torch.manual_seed(0)
        model = TinyTransformer(8, 8, 2, 1, context_length=4, mlp=False)
        return train_lm(model, lambda g: lookback_data(2, 4, 8, g), 2, seed=seed)

    # torch reads a negative seed modulo 2**64
    assert losses(-1) == losses(2**64 - 1) != losses(0)


def test_train_lm_is_deterministic_and_learns_to_look_back() -> None:
    def run(seed: int = 0) -> tuple[list[float], TinyTransformer]:
        torch.manual_seed(0)
        model = TinyTransformer(8, 16, 2, 1, context_length=8, positions="rope", mlp=False)
        losses = train_lm(model, lambda g: lookback_data(16, 8, 8, g), 60, lr=1e-2, seed=seed)
        return losses, model

    losses, model = run()
    assert losses == run()[0] and len(losses) == 60 and not model.training
    assert run(seed=1)[0][0] != losses[0]  # the seed draws the batches
    assert losses[-1] < 0.3 * losses[0]
    test = lookback_data(64, 8, 8, torch.Generator().manual_seed(1))
    assert next_token_accuracy(model, *test) > 0.9


def test_induction_data_repeats_a_segment_and_scores_only_the_repeat() -> None:
    inputs, targets = induction_data(50, 12, 10, torch.Generator().manual_seed(0), 3, 6)
    assert inputs.shape == targets.shape == (50, 12)
    periods = set()
    for row, target in zip(inputs.tolist(), targets.tolist(), strict=True):
        period = row.index(row[0], 1)  # where the segment starts again
        periods.add(period)
        assert len(set(row[:period])) == period and 3 <= period <= 6
        assert all(row[i] == row[i % period] for i in range(12))
        assert target[:period] == [-100] * period
        assert target[period:] == [row[(i + 1) % period] for i in range(period, 12)]
    assert periods == {3, 4, 5, 6}


def test_lookback_data_targets_are_the_earlier_tokens() -> None:
    inputs, targets = lookback_data(4, 7, 5, torch.Generator().manual_seed(0), offset=2)
    assert (targets[:, :2] == -100).all() and (targets[:, 2:] == inputs[:, :-2]).all()


class _FixedAttention(nn.Module):
    """A stand-in model whose single layer attends with a given pattern (t, t)."""

    def __init__(self, pattern: torch.Tensor) -> None:
        super().__init__()
        self.pattern = pattern

    def forward(self, idx: torch.Tensor, return_weights: bool = False) -> object:
        b, t = idx.shape
        return None, [self.pattern.expand(b, 1, t, t)]


def test_head_scores_recognise_previous_token_and_induction_patterns() -> None:
    tokens = torch.tensor([[5, 1, 7, 2, 5, 1, 7, 2]])  # period 4
    previous = torch.eye(8).roll(-1, dims=1).tril()  # query i on key i - 1 (query 0 on itself)
    previous[0, 0] = 1.0
    induction = torch.zeros(8, 8)
    for i in range(4, 8):
        induction[i, i - 3] = 1.0  # token i occurred at i - 4: look at what came next
    induction[:4] = previous[:4]
    prev_scores, ind_scores = head_scores(_FixedAttention(previous), tokens)
    assert prev_scores.tolist() == [[1.0]] and ind_scores.tolist() == [[0.0]]
    prev_scores, ind_scores = head_scores(_FixedAttention(induction), tokens)
    assert ind_scores.tolist() == [[1.0]] and prev_scores.item() == pytest.approx(3 / 7)


# --- decoding with a KV cache --------------------------------------------------------------------


def _decoder(positions: str | None, dtype: torch.dtype = torch.float64) -> TinyTransformer:
    torch.manual_seed(0)
    model = TinyTransformer(11, 8, 2, 2, context_length=9, positions=positions).to(dtype).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_()  # far from uniform attention, so that positions matter
    return model


@pytest.mark.parametrize("chunks", [(3, 1, 1, 1, 1, 1, 1), (4, 5)])
@pytest.mark.parametrize("positions", POSITIONS)
def test_cached_forward_equals_the_full_pass(positions: str | None, chunks: tuple) -> None:
    model = _decoder(positions)
    idx = torch.randint(11, (2, 9))
    full, full_weights = model(idx, return_weights=True)
    cache = model.new_cache(2, 9)
    outputs = []
    for part in idx.split(chunks, dim=1):
        logits, weights = model(part, return_weights=True, cache=cache)
        outputs.append(logits)
    torch.testing.assert_close(torch.cat(outputs, dim=1), full, atol=1e-10, rtol=0)
    t = chunks[-1]  # the last chunk's weights are the last t rows of the full ones: (b, h, t, 9)
    for ours, expected in zip(weights, full_weights):
        torch.testing.assert_close(ours, expected[:, :, -t:], atol=1e-10, rtol=0)
    assert cache.length == 9


@pytest.mark.parametrize("positions", POSITIONS)
def test_no_tokens_give_no_logits(positions: str | None) -> None:
    # sinusoidal positions refused t = 0 ("t must be at least 1, got 0"), the others did not
    model = _decoder(positions)
    assert model(torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0, 11)
    cache = model.new_cache(2, 9)
    model(torch.zeros(2, 3, dtype=torch.long), cache=cache)
    assert model(torch.zeros(2, 0, dtype=torch.long), cache=cache).shape == (2, 0, 11)
    assert cache.length == 3


@pytest.mark.parametrize("positions", POSITIONS)
def test_a_model_on_the_meta_device_gives_the_logits_shape(positions: str | None) -> None:
    """The check of the ids read their smallest and largest, which the meta device does not
    hold: "Tensor.item() cannot be called on meta tensors", where torch's nn.Embedding and every
    other layer of the model give shapes there."""
    model = TinyTransformer(11, 8, 2, 2, context_length=9, positions=positions, device="meta")
    idx = torch.zeros(2, 5, dtype=torch.long, device="meta")
    assert model(idx).shape == (2, 5, 11)
    cache = model.new_cache(2, 9)
    model(idx, cache=cache)
    assert model(idx[:, :1], cache=cache).shape == (2, 1, 11) and cache.length == 6


@pytest.mark.parametrize("positions", POSITIONS)
def test_generate_gives_the_same_tokens_with_and_without_the_cache(positions: str | None) -> None:
    model = _decoder(positions, torch.float32)
    prompt = torch.randint(11, (3, 2))
    cached = model.generate(prompt, 7)
    assert cached.shape == (3, 9) and torch.equal(cached[:, :2], prompt)
    assert torch.equal(cached, model.generate(prompt, 7, use_cache=False))
    assert len(cached.unique()) > 3  # not one token repeated


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_extends_an_empty_batch_with_or_without_the_cache(use_cache: bool) -> None:
    """As forward takes b = 0: with the cache it was a ValueError, "batch_size must be at least 1"."""
    out = _decoder("rope").generate(torch.zeros(0, 2, dtype=torch.long), 3, use_cache=use_cache)
    assert out.shape == (0, 5) and out.dtype == torch.long


VARIANTS = [
    {"norm": "rms", "activation": "swiglu", "bias": False},  # Llama's block
    {"parallel": True, "qk_norm": True, "tie_weights": True},
    {"norm": "rms", "qk_norm": True, "mlp": False},
]


@pytest.mark.parametrize("options", VARIANTS)
def test_cached_decoding_equals_the_full_pass_for_today_s_blocks(options: dict) -> None:
    torch.manual_seed(0)
    model = TinyTransformer(11, 8, 2, 2, context_length=9, positions="rope", **options)
    randomize(model.double()).eval()
    idx = torch.randint(11, (2, 9))
    cache = model.new_cache(2, 9)
    parts = [model(part, cache=cache) for part in idx.split((4, 1, 1, 3), dim=1)]
    torch.testing.assert_close(torch.cat(parts, dim=1), model(idx), atol=1e-10, rtol=0)


def test_tied_weights_share_one_matrix_and_its_gradient() -> None:
    torch.manual_seed(0)
    untied = TinyTransformer(11, 8, 2, 1, context_length=4, positions=None)
    tied = TinyTransformer(11, 8, 2, 1, context_length=4, positions=None, tie_weights=True)
    assert tied.lm_head.weight is tied.tok_emb.weight
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(untied) - count(tied) == 11 * 8
    idx = torch.tensor([[1, 2, 3]])
    logits = tied(idx)
    final = tied.final_norm(tied.blocks[0](tied.tok_emb(idx)))
    torch.testing.assert_close(logits, final @ tied.tok_emb.weight.T)
    logits[0, -1, 5].backward()  # the logit of token 5 reaches its row through both uses
    assert tied.tok_emb.weight.grad[5].abs().sum() > 0 and tied.lm_head.weight.grad is not None


@pytest.mark.parametrize("assign", [False, True], ids=["to_empty", "assign"])
def test_tied_weights_stay_tied_when_built_on_the_meta_device_and_loaded(assign: bool) -> None:
    """to_empty, and a load with assign=True, made one matrix for the embedding and one for the
    LM head: loaded, the model had 11 * 8 more parameters, and training moved the two apart."""
    torch.manual_seed(0)
    tied = TinyTransformer(11, 8, 2, 1, context_length=4, positions=None, tie_weights=True)
    loaded = TinyTransformer(11, 8, 2, 1, context_length=4, positions=None, tie_weights=True,
                             device="meta")
    if not assign:
        loaded = loaded.to_empty(device="cpu")
    loaded.load_state_dict(copy.deepcopy(tied.state_dict()), assign=assign)
    assert loaded.lm_head.weight is loaded.tok_emb.weight
    for model in (tied, loaded):
        model(torch.tensor([[1, 2, 3]])).logsumexp(-1).sum().backward()
        torch.optim.Adam(model.parameters(), lr=0.1).step()
    torch.testing.assert_close(loaded(torch.tensor([[1, 2, 3]])), tied(torch.tensor([[1, 2, 3]])))


def test_a_model_pickled_before_tie_weights_was_kept_still_moves() -> None:
    """A model pickled whole has no attribute the class added later: moving it must not ask
    for tie_weights (an AttributeError from the re-tying after a move)."""
    model = TinyTransformer(11, 8, 2, 1, context_length=4, positions=None, tie_weights=True)
    del model.__dict__["tie_weights"]  # what unpickling an older model gives
    moved = pickle.loads(pickle.dumps(model)).to(torch.float64)
    assert moved.lm_head.weight is moved.tok_emb.weight  # .to() keeps the tie itself


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("options", VARIANTS)
def test_generate_under_autocast_gives_the_tokens_of_the_full_pass(options: dict, dtype) -> None:
    """Under autocast the keys come out in its dtype: the cache, made in the weights' float32,
    refused them ("keys must have the cache's dtype torch.float32, got torch.bfloat16"), so
    generate failed with a cache and ran without one."""
    torch.manual_seed(0)
    model = randomize(TinyTransformer(11, 8, 2, 2, context_length=9, positions="rope",
                                      **options)).eval()
    prompt = torch.randint(11, (2, 3))
    with torch.autocast("cpu", dtype=dtype):
        assert model.new_cache(2, 4).layers[0].keys.dtype == dtype
        cached = model.generate(prompt, 5)
        assert torch.equal(cached, model.generate(prompt, 5, use_cache=False))
    assert model.new_cache(2, 4).layers[0].keys.dtype == torch.float32  # outside: the weights'


def test_tiny_model_options_reach_every_block() -> None:
    model = TinyTransformer(11, 32, 2, 2, context_length=4, norm="rms", activation="swiglu",
                            parallel=True, qk_norm=True, bias=False)
    assert isinstance(model.final_norm, RMSNorm)
    for block in model.blocks:
        assert block.linear1.out_features == 85 and block.parallel  # int(2 * 4 * 32 / 3)
        assert isinstance(block.attn.q_norm, RMSNorm) and block.attn.qkv.bias is None
    assert TinyTransformer(11, 32, 2, 1, 4).blocks[0].linear1.out_features == 128  # 4 d


def _cache(batch_size: int, max_tokens: int) -> object:
    return _decoder(None).new_cache(batch_size, max_tokens)


def test_model_cache_memory_is_the_formula() -> None:
    model = TinyTransformer(11, 8, 2, 3, context_length=9)
    cache = model.new_cache(2, 7)
    assert all(isinstance(layer, KVCache) for layer in cache.layers)
    assert cache.nbytes == kv_cache_bytes(2, 7, 3, 2, 4, 4) == 2 * 2 * 7 * 3 * 2 * 4 * 4
    model(torch.zeros(2, 3, dtype=torch.long), cache=cache)
    cache.reset()
    assert cache.length == 0


@pytest.mark.parametrize("bias", [False, True])
def test_bias_reaches_the_final_norm_and_the_lm_head_never_has_one(bias: bool) -> None:
    """bias=False leaves no bias anywhere, the final norm's β too; the LM head has none either
    way (GPT-2's): a bias there would add a parameter no checkpoint holds."""
    model = TinyTransformer(11, 8, 2, 2, context_length=4, mlp=True, bias=bias, output_gate=True)
    assert model.lm_head.bias is None
    assert (model.final_norm.bias is not None) == bias
    with_bias = [name for name, module in model.named_modules()
                 if getattr(module, "bias", None) is not None]
    assert bool(with_bias) == bias, with_bias


@pytest.mark.parametrize("positions", ["sinusoidal", "alibi"])
def test_a_float64_model_s_position_tables_are_float64(positions: str) -> None:
    """Both tables came in torch's default dtype: off by 8e-8 (sinusoidal) and 3e-8 (ALiBi, 16
    heads, whose slopes include 2^-0.5; 200 tokens), not by float64's rounding."""
    torch.manual_seed(0)
    model = randomize(TinyTransformer(11, 32, 16, 1, 8, positions=positions, mlp=False)).double()
    idx = torch.randint(11, (1, 200), generator=torch.Generator().manual_seed(1))
    i, j = torch.arange(200.0, dtype=torch.float64)[:, None], torch.arange(200.0)[None, :]
    x, bias = model.tok_emb(idx), None
    if positions == "alibi":  # slopes 2^(-8 k / 16), k = 1 .. 16
        slopes = 2.0 ** (-0.5 * torch.arange(1, 17, dtype=torch.float64))  # (h,)
        bias = -slopes[:, None, None] * (i - j)  # (h, t, t)
    else:
        angles = i * 10000.0 ** (-torch.arange(0, 32, 2, dtype=torch.float64) / 32)  # (t, d/2)
        x = x + torch.stack([angles.sin(), angles.cos()], dim=-1).reshape(200, 32)
    with torch.no_grad():
        for block in model.blocks:
            x = block(x, bias)
        expected = model.lm_head(model.final_norm(x))
        torch.testing.assert_close(model(idx), expected, atol=1e-13, rtol=0)


def test_a_half_precision_model_adds_alibi_in_float32() -> None:
    """As fused kernels add it: the bias was rounded to bfloat16 (4.9497 became 4.9375)."""
    torch.manual_seed(0)
    model = TinyTransformer(11, 32, 16, 1, 8, positions="alibi", mlp=False).to(torch.bfloat16)
    idx = torch.randint(11, (1, 40), generator=torch.Generator().manual_seed(1))
    seen = []
    model.blocks[0].attn.register_forward_pre_hook(lambda _, args: seen.append(args[1]))
    model(idx)
    assert seen[0].dtype == torch.float32
    torch.testing.assert_close(seen[0], alibi_bias(16, 40, 40, torch.float64).float(), atol=0,
                               rtol=0)


def test_rope_model_rotates_as_rotary_embedding_defaults() -> None:
    """positions="rope" is one RotaryEmbedding(d_h) shared by every block: halves pairing, base
    10000. Its frequencies are not in the state dict, so another pairing or base would silently
    change what a saved checkpoint computes."""
    model = TinyTransformer(11, 16, 2, 2, context_length=6, positions="rope")
    rotary = model.blocks[0].attn.rotary
    assert all(block.attn.rotary is rotary for block in model.blocks)
    x = torch.randn(1, 2, 6, 8)
    torch.testing.assert_close(rotary(x, start=3), RotaryEmbedding(8)(x, start=3),
                               rtol=0, atol=0)


def test_linear_and_embedding_weights_start_at_gpt2_s_scale_and_biases_at_zero() -> None:
    torch.manual_seed(0)
    model = TinyTransformer(50, 64, 2, 2, context_length=16, activation="swiglu", output_gate=True)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            assert abs(module.weight.std().item() - 0.02) < 0.004, name
        if isinstance(module, nn.Linear) and module.bias is not None:
            assert not module.bias.any(), name


def test_generate_with_learned_positions_may_fill_the_context() -> None:
    """t + max_new_tokens - 1 = context_length: the last token is chosen, never run."""
    model = _decoder("learned")
    idx = torch.zeros(1, 3, dtype=torch.long)
    out = model.generate(idx, 7)  # 3 + 7 - 1 = 9 = context_length
    assert out.shape == (1, 10)
    assert torch.equal(out, model.generate(idx, 7, use_cache=False))
    assert model.new_cache(1, 9).layers[0].max_tokens == 9  # a cache of context_length tokens

class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize("positions", POSITIONS)
    def test_only_learned_positions_stop_at_the_context_length(self, positions: str | None) -> None:
        model = TinyTransformer(11, 8, 2, 1, context_length=4, positions=positions)
        idx = torch.zeros(1, 6, dtype=torch.long)
        if positions == "learned":
            with pytest.raises(ValueError, match=r"at most context_length=4, got 6"):
                model(idx)
        else:
            assert model(idx).shape == (1, 6, 11)

    @pytest.mark.parametrize("positions", POSITIONS)
    def test_alibi_refuses_a_windowed_cache(self, positions: str | None) -> None:
        """A RollingKVCache hands back only its window's keys: the ALiBi bias, of all n + t,
        was refused as if the caller had passed a mask, "attn_mask must broadcast to the
        scores' shape (1, 2, 1, 4), got shape (2, 1, 5)". Other positions decode with it."""
        model = TinyTransformer(11, 8, 2, 2, context_length=8, positions=positions)
        cache = ModelKVCache([RollingKVCache(1, 2, window=3, d_h=4, sinks=1) for _ in range(2)])
        idx = torch.tensor([[1, 2, 3, 4, 5, 6]])
        if positions != "alibi":
            assert torch.cat([model(idx[:, i:i + 1], cache=cache) for i in range(6)], 1).shape == (
                1, 6, 11)
            return
        with pytest.raises(ValueError, match=r"positions='alibi' needs a cache that keeps every "
                                             r"key .*got \['RollingKVCache', 'RollingKVCache'\]"):
            model(idx[:, :1], cache=cache)
        assert cache.length == 0

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: TinyTransformer(11, 8, 2, 1, 4, positions="absolute"), r"got 'absolute'"),
            (lambda: TinyTransformer(11, 6, 2, 1, 4, positions="rope"), r"d_h must be even .*got 3"),
            # built, then refused by its first forward ("d must be even")
            (lambda: TinyTransformer(11, 5, 1, 1, 4, positions="sinusoidal"),
             r"positions='sinusoidal' needs an even d_model \(sin and cos in pairs\), got 5"),
            (lambda: TinyTransformer(11, 8, 2, 1, 4, dropout=1.0), r"dropout must be in \[0, 1\), got 1\.0"),
            (lambda: TinyTransformer(11, 8, 3, 1, 4),
             r"d_model must be divisible by num_heads.*got d_model=8 and num_heads=3"),
            (lambda: TinyTransformer(11, 8, 2, 1, 4)(torch.zeros(1, 3)), r"idx must hold integer.*got torch\.float32"),
            (lambda: TinyTransformer(11, 8, 2, 1, 4)(torch.tensor([[1, 11]])),
             r"idx must hold token ids in \[0.*got ids from 1 to 11"),
            (lambda: train_lm(nn.Linear(2, 2), lambda g: None, steps=0), r"steps must be at least 1.*got 0"),
            (lambda: train_lm(nn.Linear(2, 2), lambda g: None, 5, lr=0), r"lr must be .* got 0"),
            (lambda: train_lm(nn.Linear(2, 2), lambda g: None, 5, lr=math.inf), r"lr must be a finite .* got inf"),
            (lambda: train_lm(nn.Linear(2, 2), lambda g: None, 5, seed=1.5), r"seed must be an integer in .*got 1.5"),
            (lambda: train_lm(nn.Linear(2, 2), lambda g: None, 5, seed=2**64),
             r"seed must be an integer in \[-2\*\*63, 2\*\*64\) as torch.Generator takes, got 18446744073709551616"),
            (lambda: induction_data(1, 1, 4),  # it named a max_period of 0, never given
             r"seq_len and vocab_size must leave room for a period of min_period=2.*got seq_len=1, vocab_size=4"),
            (lambda: induction_data(4, 12, 5, max_period=6),
             r"need min_period <= max_period.*got min_period=2, max_period=6, vocab_size=5, seq_len=12"),
            (lambda: induction_data(4, 12, 16, min_period=5, max_period=4),
             r"need min_period <= max_period.*got min_period=5, max_period=4, vocab_size=16, seq_len=12"),
            (lambda: lookback_data(4, 3, 5, offset=3), r"offset must be less than seq_len=3, got 3"),
            (
                lambda: next_token_accuracy(
                    TinyTransformer(5, 8, 2, 1, 4), torch.zeros(1, 3, dtype=torch.long),
                    torch.full((1, 3), -100),
                ),
                r"targets must have the inputs' shape.*got shape \(1, 3\) with 0 scored",
            ),
            (
                lambda: next_token_accuracy(
                    TinyTransformer(5, 8, 2, 1, 4), torch.zeros(1, 3, dtype=torch.long),
                    torch.zeros(1, 3),
                ),
                r"targets must be integer ids, got torch.float32",
            ),
        ],
    )
    def test_model_sizes_token_ids_and_training_arguments_must_be_valid(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()  # type: ignore[operator]

    @pytest.mark.parametrize(
        ("make", "message"),
        [
            (lambda: _decoder("learned").generate(torch.zeros(1, 3, dtype=torch.long), 8),
             r"context_length=9 with learned positions, got 3 \+ 8 - 1 = 10"),
            (lambda: _decoder("learned").new_cache(1, 10), r"max_tokens must be at most context_len.*got 10"),
            (lambda: _decoder(None).generate(torch.zeros(1, 3, dtype=torch.long), -1),
             r"max_new_tokens must be at least 1, got -1"),
            # returned the prompt tensor itself: writing into the result wrote into the prompt;
            # transformers' generate refuses max_new_tokens=0
            (lambda: _decoder(None).generate(torch.zeros(1, 3, dtype=torch.long), 0),
             r"max_new_tokens must be at least 1, got 0$"),
            (lambda: _decoder(None).generate(torch.zeros(1, 0, dtype=torch.long), 2),
             r"at least one token per sequence, got shape \(1, 0\)"),
            # returned as the "generated" sequence without a word when max_new_tokens=0
            (lambda: _decoder(None).generate(torch.tensor([[0, -1, 3]]), 0),
             r"idx must hold token ids in \[0, vocab_size=11\), got ids from -1 to 3"),
            (lambda: _decoder(None).generate(torch.tensor([[0, 11]]), 0),
             r"idx must hold token ids in \[0, vocab_size=11\), got ids from 0 to 11"),
            (lambda: _decoder(None)(torch.zeros(1, 4, dtype=torch.long), cache=_cache(1, 3)),
             r"max_tokens=3 tokens, got 4"),
            (lambda: _decoder(None)(torch.zeros(2, 1, dtype=torch.long), cache=_cache(1, 3)),
             r"\(1, 2, t, 4\), got \(2, 2, 1, 4\)"),
            (lambda: _decoder(None)(torch.zeros(1, 1, dtype=torch.long), cache=KVCache(1, 2, 3, 4)),
             r"cache must be a ModelKVCache of 2 layers from new_cache\(\), got KVCache"),
            (lambda: _decoder(None)(torch.zeros(1, 1, dtype=torch.long), cache=_cache(1, 3).layers),
             r"cache must be a ModelKVCache of 2 layers from new_cache\(\), got list"),
            # its repr named no number of layers
            (lambda: _decoder(None)(torch.zeros(1, 1, dtype=torch.long),
                                    cache=ModelKVCache(_cache(1, 3).layers[:1])),
             r"cache must be a ModelKVCache of 2 layers from new_cache\(\), got one of 1$"),
            (lambda: TransformerBlock(8, 2, 16)(torch.randn(1, 2, 8), cache=KVCache(1, 2, 3, 4)),
             r"a cache needs a causal block \(is_causal=True\), got is_causal=False"),
        ],
    )
    def test_cache_must_fit_the_model_and_the_tokens(self, make: object, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            make()  # type: ignore[operator]

    def test_head_scores_need_a_sequence_that_repeats_a_token(self) -> None:
        with pytest.raises(ValueError, match=r"must repeat a token.*got none"):
            head_scores(_FixedAttention(torch.eye(8)), torch.arange(8)[None])

    @pytest.mark.parametrize("value", NON_BOOLS)
    @pytest.mark.parametrize(
        ("flag", "call"),
        [
            *[(flag, lambda value, flag=flag: TinyTransformer(11, 8, 2, 1, 4, **{flag: value}))
              for flag in ("mlp", "parallel", "qk_norm", "bias", "output_gate", "tie_weights")],
            ("return_weights",
             lambda value: TinyTransformer(11, 8, 2, 1, 4)(torch.zeros(1, 3, dtype=torch.long), return_weights=value)),
            ("use_cache",
             lambda value: TinyTransformer(11, 8, 2, 1, 4).generate(torch.zeros(1, 2, dtype=torch.long), 1, use_cache=value)),
        ],
    )
    def test_flags_must_be_bools(self, flag: str, call, value: object) -> None:
        with refuses_non_bool(flag, value):
            call(value)
