"""Additive (Bahdanau) attention: the score formula, masking, and a seq2seq model that learns."""

import copy
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attention.additive import AdditiveAttention, AttentionDecoder, Seq2Seq, Seq2SeqEncoder

BOS = 10  # digits 0-9 are tokens 0-9, the start token is 10: vocabulary of 11


def hand_weights(attention: AdditiveAttention, query: torch.Tensor, keys: torch.Tensor) -> list:
    """α_j = softmax_j(vᵀ tanh(W₁ q + W₂ k_j)) per batch element, one key at a time."""
    W1 = attention.W_query.weight.detach()  # (d_attn, d_query)
    W2 = attention.W_key.weight.detach()  # (d_attn, d_key)
    v = attention.v.weight.detach()[0]  # (d_attn,)
    alphas = []
    for b in range(query.shape[0]):
        scores = [float(v @ torch.tanh(W1 @ query[b] + W2 @ k)) for k in keys[b]]
        total = sum(math.exp(s) for s in scores)
        alphas.append([math.exp(s) / total for s in scores])
    return alphas


def test_weights_are_a_distribution_and_masked_keys_get_zero():
    torch.manual_seed(0)
    attention = AdditiveAttention(4, 3, 5)  # d_query=4, d_key=3, d_attn=5
    mask = torch.tensor([[True, True, False, True, False], [True] * 5, [False] * 5])
    context, weights = attention(torch.randn(3, 4), torch.randn(3, 5, 3), mask=mask)
    assert context.shape == (3, 3) and weights.shape == (3, 5)
    assert torch.all(weights >= 0)
    torch.testing.assert_close(weights[:2].sum(-1), torch.ones(2))
    assert torch.all(weights[0, ~mask[0]] == 0)
    assert torch.all(weights[2] == 0) and torch.all(context[2] == 0)  # nothing to attend: zeros


def test_score_formula_against_a_hand_loop():
    torch.manual_seed(0)
    attention = AdditiveAttention(4, 3, 5).double()  # d_query=4, d_key=3, d_attn=5
    query, keys = torch.randn(2, 4, dtype=torch.float64), torch.randn(2, 6, 3, dtype=torch.float64)
    values = torch.randn(2, 6, 2, dtype=torch.float64)
    with torch.no_grad():
        context, weights = attention(query, keys, values)
    for b, alpha in enumerate(hand_weights(attention, query, keys)):
        expected_context = sum(a * values[b, j] for j, a in enumerate(alpha))
        torch.testing.assert_close(weights[b], torch.tensor(alpha, dtype=torch.float64))
        torch.testing.assert_close(context[b], expected_context)


def test_float16_scores_past_65504_give_the_float64_answer():
    # |score| <= 4 · 2e4: past float16's largest number, it was inf, and a row of two such nan;
    # the scores and softmax run in float32, as MultiHeadAttention's for half inputs
    attention = AdditiveAttention(1, 1, 4).half()
    with torch.no_grad():
        attention.W_query.weight.fill_(5.0), attention.W_key.weight.fill_(5.0)
        attention.v.weight.fill_(2e4)
    query, keys = torch.ones(1, 1), torch.tensor([[[1.0], [1.0], [-1.0]]])
    values = torch.tensor([[[1.0], [2.0], [3.0]]])
    context, weights = attention(query.half(), keys.half(), values.half())
    want = copy.deepcopy(attention).double()(query.double(), keys.double(), values.double())
    assert context.dtype == weights.dtype == torch.float16
    assert want[1].tolist() == [[0.5, 0.5, 0.0]] and want[0].tolist() == [[1.5]]
    torch.testing.assert_close(context.double(), want[0], rtol=0, atol=0)
    torch.testing.assert_close(weights.double(), want[1], rtol=0, atol=0)


def test_float16_autocast_keeps_the_scores_in_float32_too():
    """Autocast ran the float32 product of the tanh layer and v in float16 again: scores of
    ±8e4 were inf, and the weights and context nan."""
    attention = AdditiveAttention(1, 1, 4)
    with torch.no_grad():
        attention.W_query.weight.fill_(5.0), attention.W_key.weight.fill_(5.0)
        attention.v.weight.fill_(2e4)
    query, keys = torch.ones(1, 1), torch.tensor([[[1.0], [1.0], [-1.0]]])
    values = torch.tensor([[[1.0], [2.0], [3.0]]])
    with torch.autocast("cpu", dtype=torch.float16):
        context, weights = attention(query, keys, values)
    assert weights.dtype == torch.float16 and context.dtype == torch.float32  # the values'
    assert weights.tolist() == [[0.5, 0.5, 0.0]] and context.tolist() == [[1.5]]


def test_context_mixes_the_values_given_and_the_keys_by_default():
    torch.manual_seed(0)
    attention = AdditiveAttention(2, 3, 4).double()  # d_query=2, d_key=3, d_attn=4
    query, keys = torch.randn(2, 2, dtype=torch.float64), torch.randn(2, 5, 3, dtype=torch.float64)
    values = torch.randn(2, 5, 6, dtype=torch.float64)  # d_value = 6, not d_key
    with torch.no_grad():
        context_v, weights_v = attention(query, keys, values)
        context_k, weights_k = attention(query, keys)
    assert context_v.shape == (2, 6) and context_k.shape == (2, 3)
    for b, alpha in enumerate(hand_weights(attention, query, keys)):
        # the weights come from the query and the keys only, whatever the values
        expected_weights = torch.tensor(alpha, dtype=torch.float64)
        torch.testing.assert_close(weights_v[b], expected_weights)
        torch.testing.assert_close(weights_k[b], expected_weights)
        # Bahdanau's model: without values, the annotations (keys) are what is mixed
        torch.testing.assert_close(context_v[b], sum(a * values[b, j] for j, a in enumerate(alpha)))
        torch.testing.assert_close(context_k[b], sum(a * keys[b, j] for j, a in enumerate(alpha)))


def small_model(seed: int = 123) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq(Seq2SeqEncoder(11, 16, 32), AttentionDecoder(11, 16, 32, 32))


def reversal_batch(b: int, t: int = 6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random digits src (b, t), their reversal tgt (b, t) and tgt_in = [BOS, tgt[:-1]]."""
    src = torch.randint(0, 10, (b, t))
    tgt = src.flip(1)
    tgt_in = torch.cat([torch.full((b, 1), BOS), tgt[:, :-1]], dim=1)
    return src, tgt, tgt_in


def test_seq2seq_shapes_and_attention_rows():
    model = small_model()
    src, _, tgt_in = reversal_batch(3, 7)
    logits, attn = model(src, tgt_in[:, :5])
    assert logits.shape == (3, 5, 11) and attn.shape == (3, 5, 7)
    torch.testing.assert_close(attn.sum(-1), torch.ones(3, 5))


def test_greedy_decode_takes_bos_as_a_numpy_or_0d_tensor_integer():
    model, src = small_model(), reversal_batch(2)[0]
    expected = model.greedy_decode(src, max_len=3, bos=BOS)
    for bos in (np.int64(BOS), torch.tensor(BOS)):  # torch.full takes both
        for got, want in zip(model.greedy_decode(src, max_len=3, bos=bos), expected):
            assert torch.equal(got, want)


def test_greedy_decode_equals_teacher_forcing_on_its_own_output():
    model = small_model()
    src, _, _ = reversal_batch(4)
    tokens, attn = model.greedy_decode(src, max_len=5, bos=BOS)
    assert tokens.shape == (4, 5) and attn.shape == (4, 5, 6)
    tgt_in = torch.cat([torch.full((4, 1), BOS), tokens[:, :-1]], dim=1)
    with torch.no_grad():
        logits, forced_attn = model(src, tgt_in)
    assert torch.equal(logits.argmax(-1), tokens)
    torch.testing.assert_close(forced_attn, attn)


@pytest.fixture
def one_thread():
    """Run on one CPU thread (fastest for these tiny matrices), then restore the setting."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_seq2seq_learns_reversal_with_anti_diagonal_attention(one_thread):
    model = small_model(seed=123)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    for _ in range(100):
        src, tgt, tgt_in = reversal_batch(64)
        logits, _ = model(src, tgt_in)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    src, tgt, _ = reversal_batch(200)
    tokens, attn = model.greedy_decode(src, max_len=6, bos=BOS)
    assert (tokens == tgt).float().mean() > 0.9
    # Output i copies source token 5 - i, and that is where the decoder looks.
    looks_at = attn.argmax(dim=-1)  # (b, t_q)
    assert (looks_at == torch.arange(5, -1, -1)).float().mean() > 0.9


def _seq2seq() -> Seq2Seq:
    return Seq2Seq(Seq2SeqEncoder(11, 4, 6), AttentionDecoder(11, 4, 6, 5))


class TestBadInput:
    """Bad input raises ValueError naming the expected and the actual value."""

    @pytest.mark.parametrize(
        ("state", "annotations", "message"),
        [
            ((2, 4), (2, 5, 6), "state must have last dimension d_hidden=3, got 4"),
            ((2, 3), (2, 5, 5), "annotations must have last dimension 2·d_hidden=6, got 5"),
            ((2, 3), (2, 6), "annotations must be 3-d, got a 2-d tensor"),
            ((3, 3), (2, 5, 6), "the tokens, state and annotations must agree on b, got 2, 3 and 2"),
        ],
    )
    def test_decoder_names_the_encoder_outputs_it_is_given(self, state, annotations, message):
        """Not the names of the attention inside it (query, keys, d_query)."""
        decoder = AttentionDecoder(10, 4, 3, 5)
        tokens = torch.zeros(2, 1, dtype=torch.long)
        for call in (lambda: decoder.step(tokens[:, 0], torch.zeros(state), torch.zeros(annotations)),
                     lambda: decoder(tokens, torch.zeros(state), torch.zeros(annotations))):
            with pytest.raises(ValueError, match=re.escape(message)):
                call()

    def test_token_ids_and_bos_must_lie_in_the_vocabulary(self):
        model = _seq2seq()  # vocabularies of 11
        src = torch.tensor([[1, 2, 11]])
        with pytest.raises(ValueError, match=r"src must hold token ids in \[0, vocab_size=11\), got ids from 1 to 11"):
            model.encoder(src)
        with pytest.raises(ValueError, match=r"tgt_in must hold token ids in \[0, vocab_size=11\), got ids from -1"):
            model(src[:, :2], torch.tensor([[-1, 2]]))
        for bos in (1.7, 11):  # 1.7 went through torch.full as token 1
            with pytest.raises(ValueError, match=rf"bos must be a token id in \[0, 11\), got {bos}"):
                model.greedy_decode(src[:, :2], 3, bos)
        for bos in (torch.tensor(1.0), torch.tensor([1]), np.float32(1), torch.tensor(3.7 + 0j),
                    torch.tensor(1, device="meta")):
            with pytest.raises(ValueError, match=r"bos must be a token id in \[0, 11\), got "):
                model.greedy_decode(src[:, :2], 3, bos)
        state, annotations = torch.zeros(1, model.decoder.d_hidden), model.encoder(src[:, :2])[0]
        for token, words in ((torch.tensor([11]), r"token must hold token ids in \[0, vocab_size=11\), got ids from 11"),
                             (torch.tensor([1.0]), r"token must hold integer token ids"),
                             (torch.tensor([[1]]), r"token must be 1-d, got a 2-d tensor")):
            with pytest.raises(ValueError, match=words):
                model.decoder.step(token, state, annotations)

    @pytest.mark.parametrize("which", ["query", "keys", "values"])
    @pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64])
    def test_inputs_must_be_floating_point(self, which: str, dtype: torch.dtype) -> None:
        # integer or bool values were multiplied by the weights without a word (complex ones
        # too); an integer query or keys raised torch's RuntimeError from nn.Linear
        attention = AdditiveAttention(4, 3, 5)
        inputs = {"query": torch.randn(2, 4), "keys": torch.randn(2, 6, 3), "values": torch.randn(2, 6, 3)}
        inputs[which] = torch.ones_like(inputs[which], dtype=dtype)
        with pytest.raises(ValueError, match=rf"{which} must be floating point, got {dtype}"):
            attention(**inputs)

    @pytest.mark.parametrize(("dtype", "device"), [(torch.float16, "cpu"), (torch.float64, "cpu"),
                                                   (torch.float32, "meta")])
    def test_values_must_have_the_dtype_and_device_of_keys(self, dtype, device) -> None:
        # as torch's SDPA refuses: other float values were promoted (a float64 context from
        # float32 keys) and values on meta raised torch's RuntimeError naming no argument
        attention = AdditiveAttention(4, 3, 5)
        values = torch.randn(2, 6, 3, dtype=dtype, device=device)
        with pytest.raises(ValueError, match=rf"values must have the keys' dtype torch.float32 "
                                             rf"and device cpu, got {dtype} on {device}"):
            attention(torch.randn(2, 4), torch.randn(2, 6, 3), values)

    def test_seq2seq_needs_the_book_s_encoder_and_decoder(self) -> None:
        # an AttributeError ('NoneType' object has no attribute 'd_hidden')
        with pytest.raises(ValueError, match="must be a Seq2SeqEncoder and an AttentionDecoder, got NoneType and NoneType"):
            Seq2Seq(None, None)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="got Seq2SeqEncoder and GRU"):
            Seq2Seq(Seq2SeqEncoder(11, 4, 3), torch.nn.GRU(4, 3))  # type: ignore[arg-type]

    def test_query_keys_mask_and_model_sizes_must_agree(self):
        attention = AdditiveAttention(4, 3, 5)
        query, keys = torch.randn(2, 4), torch.randn(2, 6, 3)
        with pytest.raises(ValueError, match="query must be 2-d, got a 3-d"):
            attention(query[:, None], keys)
        with pytest.raises(ValueError, match=r"mask must be on the keys' device cpu, got meta"):
            attention(query, keys, mask=torch.ones(2, 6, dtype=torch.bool, device="meta"))
        with pytest.raises(ValueError, match="d_key=3, got 2"):
            attention(query, keys[..., :2])
        with pytest.raises(ValueError, match=r"must agree on b and t_k.*got shapes \(2, 4\), \(2, 6, 3\), \(2, 5, 3\)"):
            attention(query, keys, torch.randn(2, 5, 3))
        with pytest.raises(
            ValueError, match=r"broadcast to the scores' shape \(2, 6\), got shape \(2, 5\)"
        ):
            attention(query, keys, mask=torch.ones(2, 5, dtype=torch.bool))
        with pytest.raises(ValueError, match=r"bool tensor.*got dtype torch\.float32"):
            attention(query, keys, mask=torch.ones(2, 6))
        # a list raised an AttributeError ('list' object has no attribute 'dtype')
        with pytest.raises(ValueError, match=r"mask must be a bool tensor \(True = may attend\), got list"):
            attention(query, keys, mask=[[True] * 6] * 2)
        with pytest.raises(ValueError, match="share d_hidden, got 32 and 16"):
            Seq2Seq(Seq2SeqEncoder(11, 16, 32), AttentionDecoder(11, 16, 16, 32))
        with pytest.raises(ValueError, match="max_len must be at least 1, got 0"):
            small_model().greedy_decode(torch.zeros(1, 6, dtype=torch.long), max_len=0, bos=BOS)

    @pytest.mark.parametrize(
        ("build", "message"),
        [
            (lambda: AdditiveAttention(3, 5, 0), "d_attn must be at least 1, got 0"),
            (lambda: Seq2SeqEncoder(11, 4, 0), "d_hidden must be at least 1, got 0"),
            (lambda: AttentionDecoder(0, 4, 6, 5), "vocab_size must be at least 1, got 0"),
        ],
    )
    def test_sizes_must_be_positive_integers(self, build, message: str) -> None:
        with pytest.raises(ValueError, match=re.escape(message)):
            build()

    @pytest.mark.parametrize(
        ("src", "message"),
        [
            (torch.tensor([1, 2, 3]), "src must be 2-d, got a 1-d tensor of shape (3,)"),
            (torch.tensor(4), "src must be 2-d, got a 0-d tensor of shape ()"),
            (torch.ones(2, 3, 1, dtype=torch.long), "src must be 2-d, got a 3-d tensor"),
            (torch.ones(2, 3), "src must hold integer token ids (torch.int64 or torch.int32), got torch.float32"),
            (torch.ones(2, 0, dtype=torch.long), "src must have at least 1 token, got shape (2, 0)"),
        ],
        ids=["1-d", "0-d", "3-d", "float", "empty"],
    )
    def test_seq2seq_source_must_be_a_nonempty_matrix_of_token_ids(self, src: torch.Tensor, message: str) -> None:
        model = _seq2seq()
        tgt_in = torch.zeros(2, 4, dtype=torch.long)
        for call in (lambda: model(src, tgt_in), lambda: model.greedy_decode(src, 3, bos=0)):
            with pytest.raises(ValueError, match=re.escape(message)):
                call()

    def test_seq2seq_target_must_be_a_matrix_of_the_sources_batch(self) -> None:
        model = _seq2seq()
        src = torch.zeros(2, 5, dtype=torch.long)
        with pytest.raises(ValueError, match=re.escape("tgt_in must be 2-d, got a 1-d tensor")):
            model(src, torch.zeros(4, dtype=torch.long))
        with pytest.raises(ValueError, match="same batch size b, got 2 and 3"):
            model(src, torch.zeros(3, 4, dtype=torch.long))
        with pytest.raises(ValueError, match="max_len must be at least 1, got 0"):
            model.greedy_decode(src, 0, bos=0)
