"""Bahdanau's additive attention and a small GRU encoder-decoder that uses it.

Notation (see CONTRIBUTING.md): b batch size, t_k number of keys (source tokens), t_q number of
queries (target tokens), d_query / d_key / d_value widths of a query, a key and a value, d_attn
width of the hidden layer of the score, d_emb token-embedding width, d_hidden GRU state width,
n_vocab vocabulary size (the argument ``vocab_size``).

Bahdanau, Cho and Bengio (ICLR 2015; arXiv 2014) score a query q (the decoder state) against
each key k_j (the encoder's annotation of source token j) with a one-hidden-layer network
instead of a dot product:

    ω_j = tanh(q W₁ + k_j W₂) v,    α = softmax(ω),    z = Σ_j α_j v_j,

where v here is the learned score vector (not a value v_j) and z is the context vector. In the
code W₁ is ``W_query``, W₂ is ``W_key`` and v is ``v``; as everywhere in the book, ``nn.Linear``
applies them to row vectors.
"""

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.types import Device

from ._checks import (
    Factory,
    accumulation_dtype,
    autocast_off,
    check_input,
    check_mask,
    check_rank,
    check_sizes,
    check_token_id,
    check_token_ids,
)
from .functional import softmax

__all__ = ["AdditiveAttention", "Seq2SeqEncoder", "AttentionDecoder", "Seq2Seq"]


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau) attention of one query per batch element over a sequence of keys.

    W₁ = ``W_query`` maps d_query → d_attn, W₂ = ``W_key`` maps d_key → d_attn, and v
    (``v``, length d_attn) turns the hidden layer tanh(q W₁ + k_j W₂) into a score. ``d_attn``
    is unrelated to the GRU state width ``d_hidden`` of the encoder-decoder.

    Args:
        d_query: width of a query (the decoder state).
        d_key: width of a key (an encoder annotation).
        d_attn: width of the score network's hidden layer.
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Raises:
        ValueError: if a width is not an integer >= 1.

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> attention = AdditiveAttention(d_query=4, d_key=3, d_attn=5)
        >>> context, weights = attention(torch.randn(2, 4), journey_batch())
        >>> context.shape, weights.shape  # (b, d_value), (b, t_k)
        (torch.Size([2, 3]), torch.Size([2, 6]))
    """

    def __init__(
        self, d_query: int, d_key: int, d_attn: int, *, device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(d_query=d_query, d_key=d_key, d_attn=d_attn)
        factory = Factory(device=device, dtype=dtype)
        self.W_query = nn.Linear(d_query, d_attn, bias=False, **factory)
        self.W_key = nn.Linear(d_key, d_attn, bias=False, **factory)
        self.v = nn.Linear(d_attn, 1, bias=False, **factory)
        self.d_query, self.d_key = d_query, d_key

    def forward(
        self, query: Tensor, keys: Tensor, values: Tensor | None = None,
        mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Return the context vector z (b, d_value) and the attention weights α (b, t_k).

        Args:
            query: (b, d_query), one query per batch element.
            keys: (b, t_k, d_key).
            values: (b, t_k, d_value); defaults to ``keys``, as in Bahdanau's model.
            mask: (b, t_k) bool, True where the query MAY attend (padding is False). A row with
                no True gets zero weights and a zero context vector.

        No keys (t_k = 0) leave nothing to attend to: the weights are empty (b, 0) and the
        context vector is zero, what ``F.scaled_dot_product_attention`` gives a query with no
        keys. With half-precision inputs, all after the projections q W₁ and k_j W₂ (the tanh,
        the scores, the softmax and the context) runs in float32, rounded once at the end.

        Raises:
            ValueError: if query, keys or values are not floating point, do not have the
                shapes above or disagree on b and t_k, values have another dtype or device
                than keys, or mask is not a bool tensor, does not broadcast to (b, t_k) or is
                on another device.
        """
        check_input(query, self.d_query, (2,), "query", "d_query")
        check_input(keys, self.d_key, (3,), "keys", "d_key")
        values = keys if values is None else values
        check_rank(values, (3,), "values")
        for name, x in (("query", query), ("keys", keys), ("values", values)):
            if not x.is_floating_point():  # values meet no nn.Linear to refuse integers
                raise ValueError(f"{name} must be floating point, got {x.dtype}")
        # as torch's SDPA: values of another dtype were promoted (float16 values, float64 keys:
        # a float64 context) and another device was torch's RuntimeError naming no argument
        if (values.dtype, values.device) != (keys.dtype, keys.device):
            raise ValueError(f"values must have the keys' dtype {keys.dtype} and device "
                             f"{keys.device}, got {values.dtype} on {values.device}")
        if keys.shape[0] != query.shape[0] or values.shape[:2] != keys.shape[:2]:
            raise ValueError(
                "query (b, d_query), keys (b, t_k, d_key) and values (b, t_k, d_value) must "
                f"agree on b and t_k, got shapes {tuple(query.shape)}, {tuple(keys.shape)}, "
                f"{tuple(values.shape)}"
            )
        q_proj, k_proj = self.W_query(query), self.W_key(keys)  # (b, d_attn), (b, t_k, d_attn)
        # half precision: the hidden layer, scores, softmax and context in float32, rounded
        # once, as MultiHeadAttention's scores (a float16 score past 65504 was inf, its row nan)
        acc = accumulation_dtype(k_proj.dtype)
        hidden = torch.tanh(q_proj.to(acc)[:, None, :] + k_proj.to(acc))  # (b, t_k, d_attn)
        with autocast_off(hidden):  # which would run the float32 scores in its dtype again
            attn_scores = F.linear(hidden, self.v.weight.to(acc)).squeeze(-1)  # (b, t_k)
        if mask is not None:
            if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
                got = f"dtype {mask.dtype}" if isinstance(mask, Tensor) else type(mask).__name__
                raise ValueError(f"mask must be a bool tensor (True = may attend), got {got}")
            check_mask(mask, attn_scores.shape, "mask")
            if mask.device != attn_scores.device:
                raise ValueError(f"mask must be on the keys' device {attn_scores.device}, "
                                 f"got {mask.device}")
            attn_scores = attn_scores.masked_fill(~mask, float("-inf"))
        attn_weights = softmax(attn_scores, dim=-1)  # (b, t_k)
        weighted = attn_weights[:, :, None] * values.to(acc)  # (b, t_k, d_value)
        context = weighted.sum(dim=1)  # (b, d_value); 0 if t_k = 0
        return context.to(values.dtype), attn_weights.to(k_proj.dtype)


class Seq2SeqEncoder(nn.Module):
    """Bidirectional GRU encoder: one annotation per source token, of width 2·d_hidden.

    An embedding (vocab_size → d_emb), a bidirectional GRU, and a linear layer that makes the
    decoder's initial state from the backward GRU's last state.

    Args:
        vocab_size: n_vocab of the source language.
        d_emb: width of a token embedding.
        d_hidden: width of each GRU's state.
        device: where the parameters are created (torch's default when None).
        dtype: their dtype (torch's default when None).

    Raises:
        ValueError: if a size is not an integer >= 1.

    Examples:
        >>> encoder = Seq2SeqEncoder(vocab_size=10, d_emb=4, d_hidden=3)
        >>> annotations, state = encoder(torch.tensor([[1, 2, 3, 4]]))
        >>> annotations.shape, state.shape  # (b, t_k, 2 d_hidden), (b, d_hidden)
        (torch.Size([1, 4, 6]), torch.Size([1, 3]))
    """

    def __init__(
        self, vocab_size: int, d_emb: int, d_hidden: int, *, device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(vocab_size=vocab_size, d_emb=d_emb, d_hidden=d_hidden)
        factory = Factory(device=device, dtype=dtype)
        self.embedding = nn.Embedding(vocab_size, d_emb, **factory)
        self.rnn = nn.GRU(d_emb, d_hidden, batch_first=True, bidirectional=True, **factory)
        self.init_state = nn.Linear(d_hidden, d_hidden, **factory)
        self.d_hidden = d_hidden

    def forward(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Encode src (b, t_k) token ids: annotations (b, t_k, 2·d_hidden), state (b, d_hidden).

        Annotation j joins the forward state after token j with the backward state after token j
        (reading right to left), so it describes token j in the context of the whole sentence.
        The decoder starts from s⁽⁰⁾ = tanh(h← W_s + b_s), h← being the backward GRU's state at
        token 0 (x⁽¹⁾ in the prose's counting).

        An empty source (t_k = 0) is refused with a ``ValueError``: there is no token 0 to take
        that state from, and ``nn.GRU`` itself rejects sequences of length 0.

        Raises:
            ValueError: if src is not (b, t_k) of token ids in [0, vocab_size) with t_k >= 1.
        """
        check_token_ids(src, "src", self.embedding.num_embeddings)
        if src.shape[1] == 0:
            raise ValueError(f"src must have at least 1 token, got shape {tuple(src.shape)}")
        # (b, t_k, 2·d_hidden), (2, b, d_hidden)
        annotations, last = self.rnn(self.embedding(src))
        state = torch.tanh(self.init_state(last[1]))  # (b, d_hidden), from the backward GRU
        return annotations, state


class AttentionDecoder(nn.Module):
    """GRU decoder that attends over the encoder's annotations at every step (Bahdanau style).

    An embedding, additive attention over 2·d_hidden-wide annotations, a GRU cell and an output
    layer. ``d_hidden`` is the width of the GRU state, ``d_attn`` that of the hidden layer of
    the additive attention's score network (two different widths).

    Other arguments as in :class:`AdditiveAttention`, the attention it holds.

    Args:
        vocab_size: n_vocab of the target language.
        d_emb: width of a token embedding.
        d_hidden: width of the GRU state (the encoder's d_hidden).

    Raises:
        ValueError: if a size is not an integer >= 1.

    Examples:
        >>> decoder = AttentionDecoder(vocab_size=10, d_emb=4, d_hidden=3, d_attn=5)
        >>> annotations = torch.randn(1, 4, 6)  # (b, t_k, 2 d_hidden)
        >>> logits, weights = decoder(torch.tensor([[0, 5]]), torch.zeros(1, 3), annotations)
        >>> logits.shape, weights.shape  # (b, t_q, n_vocab), (b, t_q, t_k)
        (torch.Size([1, 2, 10]), torch.Size([1, 2, 4]))
    """

    def __init__(
        self, vocab_size: int, d_emb: int, d_hidden: int, d_attn: int, *, device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        check_sizes(vocab_size=vocab_size, d_emb=d_emb, d_hidden=d_hidden, d_attn=d_attn)
        factory = Factory(device=device, dtype=dtype)
        self.embedding = nn.Embedding(vocab_size, d_emb, **factory)
        self.attention = AdditiveAttention(d_hidden, 2 * d_hidden, d_attn, **factory)
        self.cell = nn.GRUCell(d_emb + 2 * d_hidden, d_hidden, **factory)
        self.out = nn.Linear(d_hidden + 2 * d_hidden, vocab_size, **factory)
        self.d_hidden = d_hidden

    def step(
        self, token: Tensor, state: Tensor, annotations: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """One step: last token (b,), state (b, d_hidden) → logits (b, n_vocab), state,
        α (b, t_k).

        Raises:
            ValueError: if token is not (b,) of token ids in [0, vocab_size), state is not
                (b, d_hidden) or annotations not (b, t_k, 2·d_hidden).
        """
        check_rank(token, (1,), "token")
        check_token_ids(token[:, None], "token", self.embedding.num_embeddings)
        self._check_state(len(token), state, annotations)
        return self._step(token, state, annotations)

    def _check_state(self, b: int, state: Tensor, annotations: Tensor) -> None:
        """The encoder's outputs, under the decoder's names (not its attention's)."""
        check_input(state, self.d_hidden, (2,), "state", "d_hidden")
        check_input(annotations, 2 * self.d_hidden, (3,), "annotations", "2·d_hidden")
        if not b == len(state) == len(annotations):
            raise ValueError("the tokens, state and annotations must agree on b, got "
                             f"{b}, {len(state)} and {len(annotations)}")

    def _step(
        self, token: Tensor, state: Tensor, annotations: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`step` for tokens already checked (forward's) or made here (greedy_decode's):
        the check reads the ids back from the device at every step."""
        context, attn_weights = self.attention(state, annotations)  # (b, 2·d_hidden), (b, t_k)
        # (b, d_emb + 2·d_hidden)
        rnn_input = torch.cat([self.embedding(token), context], dim=-1)
        state = self.cell(rnn_input, state)  # (b, d_hidden)
        logits = self.out(torch.cat([state, context], dim=-1))  # (b, n_vocab)
        return logits, state, attn_weights

    def forward(
        self, tgt_in: Tensor, state: Tensor, annotations: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Teacher forcing: feed tgt_in (b, t_q) → logits (b, t_q, n_vocab), α (b, t_q, t_k).

        No target tokens (t_q = 0) give empty logits (b, 0, n_vocab) and weights (b, 0, t_k).

        Raises:
            ValueError: if tgt_in is not (b, t_q) of token ids in [0, vocab_size), state is
                not (b, d_hidden) or annotations not (b, t_k, 2·d_hidden).
        """
        check_token_ids(tgt_in, "tgt_in", self.embedding.num_embeddings)
        b, t_q = tgt_in.shape
        self._check_state(b, state, annotations)
        if t_q == 0:
            n_vocab, t_k = self.out.out_features, annotations.shape[1]
            return state.new_zeros(b, 0, n_vocab), state.new_zeros(b, 0, t_k)
        all_logits, all_weights = [], []
        for i in range(t_q):
            logits, state, attn_weights = self._step(tgt_in[:, i], state, annotations)
            all_logits.append(logits)
            all_weights.append(attn_weights)
        logits = torch.stack(all_logits, dim=1)  # (b, t_q, n_vocab)
        return logits, torch.stack(all_weights, dim=1)  # ..., (b, t_q, t_k)


class Seq2Seq(nn.Module):
    """Encoder-decoder with additive attention: the model of Bahdanau et al. in miniature.

    Args:
        encoder: the source encoder.
        decoder: the target decoder; its GRU state has the encoder's width d_hidden.

    Raises:
        ValueError: if encoder is not a Seq2SeqEncoder, decoder not an AttentionDecoder, or
            they have different d_hidden.

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> model = Seq2Seq(Seq2SeqEncoder(10, 4, 3), AttentionDecoder(10, 4, 3, 5))
        >>> tokens, weights = model.greedy_decode(torch.tensor([[1, 2, 3]]), max_len=2, bos=0)
        >>> tokens.shape, weights.shape  # (b, max_len), (b, max_len, t_k)
        (torch.Size([1, 2]), torch.Size([1, 2, 3]))
    """

    def __init__(self, encoder: Seq2SeqEncoder, decoder: AttentionDecoder) -> None:
        super().__init__()
        if not isinstance(encoder, Seq2SeqEncoder) or not isinstance(decoder, AttentionDecoder):
            raise ValueError("encoder and decoder must be a Seq2SeqEncoder and an "
                             f"AttentionDecoder, got {type(encoder).__name__} and "
                             f"{type(decoder).__name__}")
        if encoder.d_hidden != decoder.d_hidden:
            raise ValueError(
                "encoder and decoder must share d_hidden, "
                f"got {encoder.d_hidden} and {decoder.d_hidden}"
            )
        self.encoder, self.decoder = encoder, decoder

    def forward(self, src: Tensor, tgt_in: Tensor) -> tuple[Tensor, Tensor]:
        """src (b, t_k), tgt_in (b, t_q) (targets shifted right, starting with BOS).

        Returns logits (b, t_q, n_vocab) and attention weights (b, t_q, t_k).

        Raises:
            ValueError: if src or tgt_in is not (b, ·) of integer ids, or their batch sizes
                differ.
        """
        check_token_ids(src, "src")
        check_token_ids(tgt_in, "tgt_in")
        if src.shape[0] != tgt_in.shape[0]:
            raise ValueError(
                "src and tgt_in must have the same batch size b, "
                f"got {src.shape[0]} and {tgt_in.shape[0]}"
            )
        annotations, state = self.encoder(src)  # (b, t_k, 2·d_hidden), (b, d_hidden)
        return self.decoder(tgt_in, state, annotations)

    @torch.no_grad()
    def greedy_decode(self, src: Tensor, max_len: int, bos: int) -> tuple[Tensor, Tensor]:
        """Decode max_len tokens, each step feeding back the most likely token.

        Returns tokens (b, max_len) and attention weights (b, max_len, t_k).

        Raises:
            ValueError: if max_len is not an integer >= 1, bos is not a token id of the target
                vocabulary, or src is not (b, t_k) of token ids with t_k >= 1.
        """
        check_sizes(max_len=max_len)
        bos = check_token_id(bos, "bos", self.decoder.embedding.num_embeddings)
        annotations, state = self.encoder(src)  # (b, t_k, 2·d_hidden), (b, d_hidden)
        token = torch.full((src.shape[0],), bos, dtype=torch.long, device=src.device)  # (b,)
        all_tokens, all_weights = [], []
        for _ in range(max_len):
            logits, state, attn_weights = self.decoder._step(token, state, annotations)
            token = logits.argmax(dim=-1)  # (b,)
            all_tokens.append(token)
            all_weights.append(attn_weights)
        tokens = torch.stack(all_tokens, dim=1)  # (b, max_len)
        return tokens, torch.stack(all_weights, dim=1)  # ..., (b, max_len, t_k)
