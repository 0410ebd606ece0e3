"""attention.hf: transformers models rebuilt from the book's pieces give the same float64 logits
(1e-10 relative) and the same 16 greedy tokens as transformers; the rest is refused by name."""

import pytest
import torch
from _inputs import randomize

from attention import hf
from attention.hf import CausalLM, from_transformers, upcast_transformers  # no transformers import

transformers = pytest.importorskip("transformers")

SMALL = {
    "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": 48,
    "vocab_size": 64, "max_position_embeddings": 64,
}
GQA = dict(SMALL, num_key_value_heads=2)
LLAMA3 = {
    "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 16,
    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
}
GEMMA3 = dict(
    GQA, num_hidden_layers=3, head_dim=8, sliding_window=4, query_pre_attn_scalar=12,
    layer_types=["sliding_attention", "sliding_attention", "full_attention"],
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
    },
)
# multimodal Gemma 3 (4B-27B) with a one-layer vision tower of 2 x 2 patches; image_token_id
# 262144 lies outside the 64 ids, so the input is text only
GEMMA3_VISION = {
    "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
    "image_size": 28, "patch_size": 14,
}
CASES = {
    "gpt2": ("gpt2", {"n_layer": 2, "n_embd": 32, "n_head": 4, "vocab_size": 64, "n_positions": 64}),
    "gpt_neox": ("gpt_neox", SMALL),  # rotary on a quarter of each head, parallel residual
    "gpt_neox-sequential": ("gpt_neox", dict(SMALL, use_parallel_residual=False)),
    "llama": ("llama", GQA),
    "llama-linear": ("llama", dict(
        GQA, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0})),
    "llama-llama3": ("llama", dict(GQA, rope_parameters=LLAMA3)),
    "llama-dynamic": ("llama", dict(GQA, max_position_embeddings=12, rope_parameters={
        "rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})),  # 7 + 16 tokens: past t_train
    "llama-yarn": ("llama", {**GQA, "head_dim": 32, "rope_parameters": {  # ramp over pairs 0-5
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 64}}),
    "llama-yarn-truncate-none": ("llama", {**GQA, "head_dim": 32, "rope_parameters": {  # read as False
        "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 64, "truncate": None}}),
    "mistral": ("mistral", dict(GQA, sliding_window=4)),
    "qwen3": ("qwen3", dict(GQA, head_dim=16)),
    "gemma3": ("gemma3_text", GEMMA3),
    "gemma3-multimodal": ("gemma3", {  # Gemma3ForConditionalGeneration: its text model read
        "text_config": GEMMA3, "vision_config": GEMMA3_VISION, "mm_tokens_per_image": 4}),
    "gemma3-dynamic": ("gemma3_text", dict(  # a rule per layer type: dynamic past 12 tokens
        GQA, head_dim=8, sliding_window=4, query_pre_attn_scalar=12, max_position_embeddings=12,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "dynamic", "rope_theta": 1e6, "factor": 4.0},
        },
    )),
    "gpt_oss": ("gpt_oss", {  # learned sinks, alternating windows, YaRN, experts borrowed
        **GQA, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
        "sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                            "original_max_position_embeddings": 16, "beta_fast": 8.0,
                            "beta_slow": 1.0, "truncate": False}}),
    "deepseek_v3": ("deepseek_v3", {  # MLA, interleaved RoPE with YaRN and mscale, MoE
        **SMALL, "num_key_value_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 8,
        "qk_rope_head_dim": 4, "qk_nope_head_dim": 8, "v_head_dim": 6,
        "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
        "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                            "original_max_position_embeddings": 16, "mscale": 1.0,
                            "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0}}),
    "deepseek_v32": ("deepseek_v32", {  # V3 plus the lightning indexer's top 4 of 7 to 23
        **SMALL, "num_key_value_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 8,
        "qk_rope_head_dim": 4, "qk_nope_head_dim": 8, "v_head_dim": 6,
        "moe_intermediate_size": 16, "n_routed_experts": 4, "num_experts_per_tok": 2,
        "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "index_topk": 4,
        "index_head_dim": 8, "index_n_heads": 4,
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                            "original_max_position_embeddings": 16, "mscale": 1.0,
                            "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0}}),
    "qwen3_next": ("qwen3_next", {  # gated attention and Gated DeltaNet layers, MoE borrowed
        **GQA, "head_dim": 8, "layer_types": ["linear_attention", "full_attention"],
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
        "linear_value_head_dim": 6, "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 16, "shared_expert_intermediate_size": 16}),
}


MOE = ("gpt_oss", "deepseek_v3", "qwen3_next", "deepseek_v32")


def _model(model_type: str, options: dict | None = None, **more: object) -> torch.nn.Module:
    """A random float64 transformers model, generating without an end-of-sequence token."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(model_type, **(options or {}), **more)
    # experts: the loop over experts, as torch's grouped matmul has no float64
    extra = {"experts_implementation": "eager"} if model_type in MOE else {}
    model = transformers.AutoModelForCausalLM.from_config(config, **extra).double().eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


@pytest.mark.parametrize("case", CASES)
def test_same_logits_and_greedy_tokens(case: str) -> None:
    model_type, options = CASES[case]
    model = _model(model_type, options)
    ours = from_transformers(model)
    upcast_transformers(model)
    ids = torch.randint(0, 64, (2, 14), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(ids).logits  # (2, 14, 64)
        logits = ours(ids)
    ids = ids[:, :7]
    assert isinstance(ours, CausalLM) and logits.dtype == torch.float64
    error = ((logits - expected).abs().max() / expected.abs().max()).item()
    assert error < 1e-10, error
    generated = model.generate(  # (2, 23); the mask says no token is padding
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False
    )
    assert torch.equal(ours.generate(ids, 16), generated)


def _logit_error(model: torch.nn.Module, ours: CausalLM, ids: torch.Tensor) -> float:
    """max |ours - theirs| / max |theirs| of the logits of ids, transformers' in float64."""
    upcast_transformers(model)
    with torch.no_grad():
        expected = model(ids).logits
        return ((ours(ids) - expected).abs().max() / expected.abs().max()).item()


DEEPSEEK_V3 = CASES["deepseek_v3"][1]
# options the cases above leave at their defaults; every weight drawn anew (randomize), so that
# biases are not zero and norm gains not all equal, as transformers initialises them
OPTIONS = {
    # mscale weighs YaRN's RoPE ratio mscale / mscale_all_dim, mscale_all_dim the score scale
    "deepseek_v3-mscale-unlike-mscale_all_dim": ("deepseek_v3", dict(DEEPSEEK_V3, rope_parameters=dict(
        DEEPSEEK_V3["rope_parameters"], mscale=0.5, mscale_all_dim=2.0))),
    "deepseek_v3-rope-in-halves": ("deepseek_v3", dict(DEEPSEEK_V3, rope_interleave=False)),
    "deepseek_v3-attention-bias": ("deepseek_v3", dict(DEEPSEEK_V3, attention_bias=True)),
    "deepseek_v32-attention-bias": ("deepseek_v32", dict(CASES["deepseek_v32"][1], attention_bias=True)),
    "gemma3-final-logit-softcap": ("gemma3_text", dict(GEMMA3, final_logit_softcapping=0.5)),
    "llama-attention-and-mlp-bias": ("llama", dict(GQA, attention_bias=True, mlp_bias=True)),
    # options the model's modules ignore: the copy computes as the model does, without a bias
    "mistral-ignores-attention-bias": ("mistral", dict(GQA, attention_bias=True)),
    "qwen3-ignores-mlp-bias": ("qwen3", dict(CASES["qwen3"][1], mlp_bias=True)),
}


@pytest.mark.parametrize("case", OPTIONS)
def test_same_logits_with_options_left_at_default_above(case: str) -> None:
    model = randomize(_model(*OPTIONS[case]))
    error = _logit_error(model, from_transformers(model), torch.arange(11).repeat(2, 1))
    assert error < 1e-10, error


@pytest.mark.parametrize("case", ["llama-dynamic", "gemma3-dynamic"])
def test_dynamic_rope_is_read_after_a_forward_past_t_train(case: str) -> None:
    """transformers rescales inv_freq in place past t_train (12 here); original_inv_freq keeps
    the rule's frequencies, which the copy is checked against: it was refused as different."""
    model = _model(*CASES[case])
    with torch.no_grad():
        model(torch.zeros(1, 20, dtype=torch.long))  # inv_freq now that of 20 positions
    ours = from_transformers(model)
    error = _logit_error(_model(*CASES[case]), ours, torch.arange(16).repeat(2, 1))  # a fresh one
    assert error < 1e-10, error


@pytest.mark.parametrize("case", ["llama", "gemma3", "deepseek_v3"])
def test_a_model_on_the_meta_device_is_copied_there(case: str) -> None:
    """Its inv_freq holds no numbers to check the book's against: NotImplementedError before.
    The copy runs where transformers' does (DeepSeek-V3's experts need numbers to route)."""
    model_type, options = CASES[case]
    config = transformers.AutoConfig.for_model(model_type, **options)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    ours = from_transformers(model)
    assert {p.device.type for p in ours.parameters()} == {"meta"}
    assert [c.nbytes for c in ours.new_caches(1, 8)] == [  # the same caches as on the CPU
        c.nbytes for c in from_transformers(_model(model_type, options).float()).new_caches(1, 8)]
    if case != "deepseek_v3":
        logits = ours(torch.zeros(2, 5, dtype=torch.long, device="meta"))
        assert logits.shape == (2, 5, 64) and logits.is_meta


@pytest.mark.parametrize("case", ["llama", "gemma3", "qwen3_next", "deepseek_v3"])
def test_the_layers_transformers_runs_are_the_layers_copied(case: str) -> None:
    """Llama-like models and DeepSeek run layers[:config.num_hidden_layers]: a model whose
    config was set to fewer layers after loading, as early-exit and layer-pruning studies do,
    was copied whole, its logits 40% away from transformers'. (gpt-oss, GPT-2 and GPT-NeoX run
    every layer, and are copied whole.)"""
    model_type, options = CASES[case]
    options = dict(options, num_hidden_layers=3)  # Gemma 3's 2 local, 1 global
    if case == "qwen3_next":
        options["layer_types"] = ["linear_attention", "full_attention", "linear_attention"]
    model = randomize(_model(model_type, options))
    model.config.num_hidden_layers = 2
    ours = from_transformers(model)
    assert len(ours.blocks) == 2
    error = _logit_error(model, ours, torch.arange(11).repeat(2, 1))
    assert error < 1e-10, error


@pytest.mark.parametrize("case", ["gpt2", "llama", "gemma3", "qwen3_next", "deepseek_v3"])
def test_a_model_without_layers_gives_the_same_logits_and_tokens(case: str) -> None:
    """No layer: embedding, final norm and head. GPT-2's copy's generate raised an IndexError
    (its learned positions counted the tokens before from the first layer's cache) and Gemma
    3's was not built (its rope_parameters then hold one rule, not one per layer type)."""
    model_type, options = CASES[case]
    options = dict(options, **{"n_layer" if case == "gpt2" else "num_hidden_layers": 0})
    if "layer_types" in options:
        options["layer_types"] = []
    model = randomize(_model(model_type, options))
    ours = from_transformers(model)
    assert len(ours.blocks) == 0
    ids = torch.arange(1, 8).repeat(2, 1)  # (2, 7)
    assert _logit_error(model, ours, ids) < 1e-10
    generated = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4,
                               do_sample=False)  # (2, 11)
    assert torch.equal(ours.generate(ids, 4), generated)


@pytest.mark.parametrize("case", ["gpt2", "gemma3", "deepseek_v32", "qwen3_next"])
def test_generating_under_autocast_caches_in_autocasts_dtype(case: str) -> None:
    """Under torch.autocast the projections give bfloat16 keys (latents, index keys): the
    caches were made in the weights' float32 and refused them, where transformers generates."""
    model = _model(*CASES[case]).float()
    ours = from_transformers(model)
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        generated = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4,
                                   do_sample=False)  # (2, 11)
        assert torch.equal(ours.generate(ids, 4), generated)


def test_the_copy_is_in_eval_mode_with_the_models_dtype() -> None:
    model = _model(*CASES["gpt2"]).float().train()
    ours = from_transformers(model)
    assert not any(module.training for module in ours.modules())
    assert {p.dtype for p in ours.parameters()} == {torch.float32}


@pytest.mark.parametrize("case", ["gpt2", "llama"])
def test_tied_embeddings_stay_one_matrix(case: str) -> None:
    model_type, options = CASES[case]
    model = _model(model_type, options, tie_word_embeddings=True)
    assert model.lm_head.weight is model.get_input_embeddings().weight
    ours = from_transformers(model)
    assert ours.lm_head.weight is ours.embed.weight  # one (n_vocab, d) matrix, as in the source
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in model.parameters())


def test_int32_ids_give_the_int64_ids_logits_and_tokens() -> None:
    # nn.Embedding looks up either; the book's other models take both (check_token_ids)
    ours = from_transformers(_model(*CASES["gpt2"]))
    ids = torch.tensor([[1, 5, 9], [2, 0, 63]])
    torch.testing.assert_close(ours(ids.int()), ours(ids), atol=0, rtol=0)
    generated = ours.generate(ids.int(), 2)
    assert generated.dtype == torch.int32  # the ids' dtype kept, as TinyTransformer.generate does
    assert torch.equal(generated.long(), ours.generate(ids, 2))


def test_gemma_embedding_scale_is_rounded_to_the_weights_dtype() -> None:
    """sqrt(d) becomes a bfloat16 number before the product, as in transformers' embedding."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model("gemma3_text", **GEMMA3)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    ours = from_transformers(model)
    seen = []
    ours.blocks[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    ids = torch.arange(64)[None]
    with torch.no_grad():
        ours(ids)
        expected = model.model.embed_tokens(ids)  # (1, 64, 32) bfloat16
    assert seen[0].dtype == torch.bfloat16
    torch.testing.assert_close(seen[0], expected, atol=0, rtol=0)


@pytest.mark.parametrize("case", ["gemma3", "qwen3_next"])
def test_bfloat16_norms_of_gain_one_plus_gamma_equal_transformers(case: str) -> None:
    """1 + γ is taken in float32, as transformers takes it: rounded to bfloat16 first, 17% and 22%
    of the final norm's outputs were a bfloat16 step away from transformers'."""
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(CASES[case][0], **CASES[case][1])
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        model.model.norm.weight.normal_(0, 0.3)  # γ - 1, not zeros
    x = torch.randn(4, 64, model.config.hidden_size, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(from_transformers(model).norm(x), model.model.norm(x), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES)
def test_a_half_precision_copy_errs_no_more_than_transformers_model(case: str, dtype) -> None:
    """flash-attention's rule: against the float64 logits, the copy of a half-precision model
    errs at most twice as much as that model itself (0.7 to 1.4 times over these cases)."""
    model_type, options = CASES[case]
    reference = _model(model_type, options)
    extra = {"experts_implementation": "eager"} if model_type in MOE else {}
    model = transformers.AutoModelForCausalLM.from_config(reference.config, dtype=dtype, **extra).eval()
    model.load_state_dict(reference.state_dict())  # the same weights, rounded to dtype
    upcast_transformers(reference)
    ids = torch.randint(0, 64, (2, 14), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        exact = reference(ids).logits  # (2, 14, 64) float64
        theirs = (model(ids).logits.double() - exact).abs().max().item()
        ours = (from_transformers(model)(ids).double() - exact).abs().max().item()
    assert 0 < ours <= 2 * theirs, (ours, theirs)


def test_sliding_window_layers_use_a_rolling_cache() -> None:
    ours = from_transformers(_model(*CASES["gemma3"]))
    assert ours.layer_kinds == ["local", "local", "global"]
    caches = ours.new_caches(1, 100)
    assert [type(c).__name__ for c in caches] == ["RollingKVCache", "RollingKVCache", "KVCache"]


def test_deepseek_v32_caches_its_index_keys_beside_the_latents() -> None:
    ours = from_transformers(_model(*CASES["deepseek_v32"]))
    caches = ours.new_caches(1, 10)
    assert [type(c).__name__ for c in caches] == ["IndexedLatentKVCache"] * 2
    ours(torch.arange(6)[None], caches)
    assert [(c.length, c.index_length) for c in caches] == [(6, 6)] * 2
    assert caches[0].nbytes == 10 * (8 + 4 + 8) * 8  # (d_c + d_h^R + d_I) per token, float64


def test_unpatched_reference_agrees_to_float32_rounding() -> None:
    """Without upcast_transformers, transformers' float32 RoPE and RMSNorm show up, and only them."""
    model = _model("llama", **GQA)
    ours = from_transformers(model)
    ids = torch.arange(7)[None]
    with torch.no_grad():
        error = ((ours(ids) - model(ids).logits).abs().max()).item()
    assert 1e-12 < error < 1e-5


def test_patched_rms_norm_cast_to_float16_does_not_overflow_where_transformers_does_not() -> None:
    """The patch keeps float64 as it is; half precision is normalized in float32, as before it."""
    norm = upcast_transformers(_model("llama", **GQA)).model.norm.half()
    theirs = type(norm)(32, eps=norm.variance_epsilon).half()  # transformers' own forward
    with torch.no_grad():
        norm.weight.uniform_(-1.5, 1.5)
        theirs.weight.copy_(norm.weight)
        x = torch.full((2, 32), 300.0, dtype=torch.float16)  # x² = 90000 > float16's 65504
        x[1] = torch.randn(32, generator=torch.Generator().manual_seed(0)).half() * 100
        torch.testing.assert_close(norm(x), theirs(x), atol=0, rtol=0)


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    def test_ids_without_a_token_or_a_batch_and_caches_not_a_list_are_refused(self) -> None:
        ours = from_transformers(_model(*CASES["llama"]))
        with pytest.raises(ValueError, match=r"at least one token per sequence, got shape \(1, 0\)"):
            ours.generate(torch.zeros(1, 0, dtype=torch.long), 2)
        with pytest.raises(ValueError, match=r"input_ids must be 2-d, got a 1-d tensor of shape \(2,\)"):
            ours.generate(torch.tensor([1, 2]), 2)
        with pytest.raises(ValueError, match=r"caches must be the list new_caches\(\) returns, got 5"):
            ours(torch.tensor([[1, 2]]), 5)
        with pytest.raises(ValueError, match=r"caches must be the list new_caches\(\) returns, got \[None"):
            ours(torch.tensor([[1, 2]]), [None] * len(ours.blocks))
        gpt2 = from_transformers(_model("gpt2", dict(CASES["gpt2"][1], n_layer=0)))
        with pytest.raises(ValueError, match=r"caches must be None for a model without layers and "
                                             r"with learned positions .*, got \[\]"):
            gpt2(torch.tensor([[1, 2]]), gpt2.new_caches(1, 4))

    @pytest.mark.parametrize(
        ("option", "message"),
        [
            ({"embed": "e"}, r"embed must be an nn\.Embedding, got str"),
            ({"blocks": ["b"]}, r"blocks\[0\] must be a torch\.nn\.Module with an attention sublayer .*, got str"),
            ({"blocks": [torch.nn.Linear(4, 4)]}, r"blocks\[0\] must be .* attention sublayer .*, got Linear"),
            ({"norm": "n"}, r"norm must be a torch\.nn\.Module, got str"),
            ({"lm_head": "h"}, r"lm_head must be a torch\.nn\.Module, got str"),
            ({"positions": "p"}, r"positions must be None or a LearnedPositions, got str"),
            ({"embed_scale": float("nan")}, r"embed_scale must be a finite number > 0, got nan"),
            ({"embed_scale": "2"}, r"embed_scale must be a finite number > 0, got '2'"),
            ({"final_softcap": -30.0}, r"final_softcap must be a finite number > 0, got -30\.0"),
            ({"final_softcap": "30"}, r"final_softcap must be a finite number > 0, got '30'"),
        ],
    )
    def test_causal_lm_parts_and_scales_must_be_valid(self, option: dict, message: str) -> None:
        # an AttributeError or a TypeError came at the first call; NaN and a negative cap
        # (c tanh(z / c) is the cap -c) passed
        parts = {"embed": torch.nn.Embedding(8, 4), "blocks": [], "norm": torch.nn.LayerNorm(4),
                 "lm_head": torch.nn.Linear(4, 8)}
        parts.update(option)
        with pytest.raises(ValueError, match=message):
            CausalLM(**parts)

    def test_rope_scaling_the_book_lacks_is_refused(self) -> None:
        rope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0] * 4,
                "long_factor": [1.0] * 4, "original_max_position_embeddings": 16}
        with pytest.raises(ValueError, match="rope_type='longrope' is not supported"):
            from_transformers(_model("llama", {**GQA, "rope_parameters": rope}))

    def test_unsupported_models_and_options_are_refused(self) -> None:
        with pytest.raises(ValueError, match=r"model_type in .*got Linear with model_type None"):
            from_transformers(torch.nn.Linear(2, 2))
        with pytest.raises(ValueError, match=r"model_type in .*got PhiForCausalLM with model_type 'phi'"):
            from_transformers(_model("phi", **SMALL))
        with pytest.raises(ValueError, match="reorder_and_upcast_attn=True"):
            from_transformers(_model("gpt2", **dict(CASES["gpt2"][1], reorder_and_upcast_attn=True)))
        # Gemma3ForConditionalGeneration ignores the text model's final soft cap: no one meaning
        text = dict(GEMMA3, final_logit_softcapping=30.0)
        with pytest.raises(ValueError, match=r"final_logit_softcapping=30.0 is not implemented"):
            from_transformers(_model("gemma3", text_config=text, vision_config=GEMMA3_VISION,
                                     mm_tokens_per_image=4))
        # bidirectional Gemma 3 (an encoder) attends both ways within its windows: not causal
        kind, options = CASES["gemma3"]
        with pytest.raises(ValueError, match=r"use_bidirectional_attention=True .* \(False, None\)"):
            from_transformers(_model(kind, **dict(options, use_bidirectional_attention=True)))

    @pytest.mark.parametrize("auto", ["AutoModel", "AutoModelForSequenceClassification"])
    @pytest.mark.parametrize("case", ["gpt2", "llama", "deepseek_v3"])
    def test_a_model_without_a_language_model_head_is_refused(self, auto: str, case: str) -> None:
        # a supported model_type, but no lm_head (or no .model/.transformer): AttributeError
        model_type, options = CASES[case]
        config = transformers.AutoConfig.for_model(model_type, **options)
        model = getattr(transformers, auto).from_config(config)
        name = type(model).__name__
        with pytest.raises(ValueError, match=rf"model must be a transformers causal LM with an "
                                             rf"lm_head, got {name}, which has none"):
            from_transformers(model)

    def test_attention_scalings_the_book_lacks_are_refused(self) -> None:
        with pytest.raises(ValueError, match=r"gemma3_text: attn_logit_softcapping=50.0 is not implemented"):
            from_transformers(_model("gemma3_text", GEMMA3, attn_logit_softcapping=50.0))
        gpt2 = CASES["gpt2"][1]
        with pytest.raises(ValueError, match=r"gpt2: scale_attn_by_inverse_layer_idx=True is not"):
            from_transformers(_model("gpt2", gpt2, scale_attn_by_inverse_layer_idx=True))
        with pytest.raises(ValueError, match=r"gpt2: scale_attn_weights=False is not implemented"):
            from_transformers(_model("gpt2", gpt2, scale_attn_weights=False))

    def test_rope_frequencies_unlike_the_books_rule_are_refused(self) -> None:
        model = _model(*CASES["llama"])
        model.model.rotary_emb.inv_freq[-1] *= 1.00001  # one pair 1e-5 off (the check allows float32's 1e-6)
        with pytest.raises(ValueError, match=r"llama: the book's RoPE frequencies for .* differ from "
                                             r"the model's inv_freq"):
            from_transformers(model)

    def test_deepseek_with_fewer_key_value_heads_than_heads_is_refused(self) -> None:
        # MLA expands the latent into every head's key and value; transformers fails on h_kv < h
        with pytest.raises(ValueError, match=r"deepseek_v3: num_key_value_heads=1 is not "
                                             r"implemented here, supported: \(4,\)"):
            from_transformers(_model("deepseek_v3", dict(DEEPSEEK_V3, num_key_value_heads=1)))

    def test_llama_layer_types_with_a_window_are_refused(self) -> None:
        # Llama's attention ignores layer_types (global everywhere) but its cache follows it
        options = dict(GQA, layer_types=["sliding_attention", "full_attention"], sliding_window=4)
        with pytest.raises(ValueError, match=r"llama: layer_types must be in \['full_attention'\], "
                                             r"got \['full_attention', 'sliding_attention'\]"):
            from_transformers(_model("llama", options))

    def test_window_layer_types_without_one_meaning_are_refused(self) -> None:
        # transformers' cache follows layer_types: without a window it fails; Mistral's
        # attention windows every layer, so a full layer's cache would not match it
        with pytest.raises(ValueError, match=r"qwen3: layer_types has 'sliding_attention' layers, "
                                             r"so sliding_window must be an int, got None"):
            from_transformers(_model("qwen3", GQA, layer_types=["sliding_attention", "full_attention"]))
        with pytest.raises(ValueError, match=r"mistral: with sliding_window=4 every layer is "
                                             r"windowed, so layer_types must be all 'sliding_attention', "
                                             r"got \['full_attention', 'sliding_attention'\]"):
            from_transformers(_model("mistral", GQA, sliding_window=4,
                                     layer_types=["full_attention", "sliding_attention"]))

    def test_a_refusal_of_the_books_modules_names_the_model(self) -> None:
        # the rope rule's own message names the field and value; the model type comes first
        config = dict(GQA, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 0.5})
        with pytest.raises(ValueError, match=r"^llama: factor must be .*got 0.5"):
            from_transformers(_model("llama", config))

    @pytest.mark.parametrize(("case", "options", "field"), [
        ("llama", {"sliding_window": 4}, "sliding_window=4"),
        ("gpt2", {"attention_chunk_size": 4}, "attention_chunk_size=4"),
        ("mistral", {"sliding_window": None, "attention_chunk_size": 4}, "attention_chunk_size=4"),
        ("deepseek_v3", {"layer_types": ["full_attention", "sliding_attention"], "sliding_window": 4},
         r"layer_types\[1\]='sliding_attention' with sliding_window=4"),
    ], ids=["llama", "gpt2", "mistral", "deepseek_v3"])
    def test_a_cache_window_the_attention_lacks_is_refused(
        self, case: str, options: dict, field: str
    ) -> None:
        # transformers' generate caches a layer by layer_types, else by sliding_window or
        # attention_chunk_size, whatever its attention does: a forward sees every token, generate
        # the last 4. The copies were made (20 of a Llama's 24 greedy tokens differed)
        model_type, base = CASES[case]
        layer = 1 if case == "deepseek_v3" else 0
        with pytest.raises(ValueError, match=rf"{model_type}: {field} makes transformers' generate "
                                             rf"cache layer {layer} in a window of 4 tokens, where "
                                             r"its attention sees every token"):
            from_transformers(_model(model_type, dict(base, **options)))

    def test_qwen3_next_window_layer_types_are_refused(self) -> None:
        # Qwen3-Next builds no attention in a 'sliding_attention' layer and has no mask for it:
        # transformers fails at the first call; an AttributeError was raised here
        options = dict(CASES["qwen3_next"][1], layer_types=["linear_attention", "sliding_attention"],
                       sliding_window=3)
        with pytest.raises(ValueError, match=r"qwen3_next: layer_types must be in \['full_attention', "
                                             r"'linear_attention'\], got \['linear_attention', "
                                             r"'sliding_attention'\]"):
            from_transformers(_model("qwen3_next", options))

    @pytest.mark.parametrize("model_type", ["llama", "gpt_oss", "deepseek_v3", "deepseek_v32"])
    def test_a_partial_rotation_of_whole_head_rope_is_refused(self, model_type: str) -> None:
        # their attention rotates whole heads: transformers fails (YaRN) or ignores the option;
        # DeepSeek-V3's interleaved RoPE turned every pair by the first angles, and the copy,
        # which rotated half of d_h^R, was 121% of the logits' scale away
        rope = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                "original_max_position_embeddings": 16, "partial_rotary_factor": 0.5}
        options = CASES[model_type][1] if model_type.startswith("deepseek") else dict(GQA, head_dim=16)
        with pytest.raises(ValueError, match=rf"{model_type}: partial_rotary_factor=0.5 is not "
                                             r"implemented here, supported: \(1.0,\)"):
            from_transformers(_model(model_type, dict(options, rope_parameters=rope)))

    def test_an_activation_the_book_lacks_is_refused_before_any_copy(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        copies = []
        monkeypatch.setattr(hf, "_copy", lambda *args: copies.append(args))
        with pytest.raises(ValueError, match=r"gpt2: activation_function='relu' is not implemented"):
            from_transformers(_model("gpt2", **dict(CASES["gpt2"][1], activation_function="relu")))
        with pytest.raises(ValueError, match=r"llama: hidden_act='relu' is not implemented"):
            from_transformers(_model("llama", GQA, hidden_act="relu"))
        with pytest.raises(ValueError, match=r"gemma3_text: hidden_activation='relu' is not"):
            from_transformers(_model("gemma3_text", GEMMA3, hidden_activation="relu"))
        assert copies == []

    def test_upcast_of_a_family_not_supported_is_refused(self) -> None:
        # its modules are patched by name: VaultGemma's RMSNorm (gain 1 + γ) became γ, and the
        # "reference" logits moved by 111% of their size
        options = dict(GQA, head_dim=8, query_pre_attn_scalar=8, layer_types=["full_attention"] * 2)
        with pytest.raises(ValueError, match=r"model must be a transformers model of model_type in "
                                             r"\('gpt2', .*\), got VaultGemmaForCausalLM with "
                                             r"model_type 'vaultgemma'"):
            upcast_transformers(_model("vaultgemma", options))
        with pytest.raises(ValueError, match=r"got Linear with model_type None"):
            upcast_transformers(torch.nn.Linear(2, 2).double())

    def test_a_model_cast_after_loading_is_refused_by_its_inv_freq(self) -> None:
        # .to(torch.bfloat16) casts the float32 inv_freq that from_pretrained(dtype=) keeps
        model = _model(*CASES["llama"]).to(torch.bfloat16)
        with pytest.raises(ValueError, match=r"llama: the model's inv_freq is torch.bfloat16 \(the "
                                             r"model was cast after loading\)"):
            from_transformers(model)

    def test_token_ids_max_new_tokens_and_dtype_must_be_valid(self) -> None:
        ours = from_transformers(_model(*CASES["gpt2"]))
        with pytest.raises(ValueError, match=r"input_ids must be 2-d, got a 1-d tensor of shape \(7,\)"):
            ours(torch.zeros(7, dtype=torch.long))
        with pytest.raises(ValueError, match=r"integer token ids \(torch.int64 or torch.int32\), got torch.float32"):
            ours.generate(torch.zeros(1, 3), 1)
        with pytest.raises(ValueError, match=r"in \[0, vocab_size=64\), got ids from 0 to 64"):
            ours(torch.tensor([[0, 64]]))
        with pytest.raises(ValueError, match=r"max_new_tokens.*got -1"):
            ours.generate(torch.zeros(1, 3, dtype=torch.long), -1)
        # returned input_ids itself, as transformers' generate does not: it refuses 0
        with pytest.raises(ValueError, match=r"max_new_tokens must be at least 1, got 0$"):
            ours.generate(torch.zeros(1, 3, dtype=torch.long), 0)
        with pytest.raises(ValueError, match=r"must be float64 .*, got torch\.float32"):
            upcast_transformers(_model(*CASES["gpt2"]).float())
        # a string raised an AttributeError, a model without parameters a StopIteration
        with pytest.raises(ValueError, match=r"model must be a torch\.nn\.Module, got str"):
            upcast_transformers("m")
        with pytest.raises(ValueError, match=r"must be float64 .*, got no parameters"):
            upcast_transformers(torch.nn.ReLU())
