"""The Transformer block, a tiny decoder-only language model, and the experiments of the book.

Notation (see CONTRIBUTING.md):
    b        batch size
    t        number of tokens
    d        model width ``d_model`` (d_in = d_out = d in every block)
    h        number of heads, d_h = d / h the width of one head
    d_ff     width of the feed-forward network's hidden layer
    V        vocabulary size ``vocab_size``

One block, pre-LN (``norm_first=True``) or post-LN, as ``torch.nn.TransformerEncoderLayer``:

    pre-LN    x = x + SA(LN1(x));   x = x + FFN(LN2(x))
    post-LN   x = LN1(x + SA(x));   x = LN2(x + FFN(x))

    A      = drop(softmax(Q K^T / sqrt(d_h) + M))      (b, h, t, t), per head
    SA(x)  = drop(out_proj(A V, heads merged))         (b, t, d)
    FFN(x) = drop(linear2(drop(act(linear1(x)))))      (b, t, d), act = GELU or ReLU

Dropout sits where PyTorch puts it, all with probability ``dropout`` and only in training mode:
on the attention weights A, on the two residual branches SA(x) and FFN(x), and on the FFN's
hidden activations. M is the causal mask of a decoder block, plus any mask passed in.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import check_dropout, check_input, check_sizes, check_token_ids
from .functional import additive_causal_mask, attention_weights
from .positions import LearnedPositions, RotaryEmbedding, alibi_bias, sinusoidal_positions

__all__ = [
    "TinyTransformer",
    "TransformerBlock",
    "head_scores",
    "induction_data",
    "lookback_data",
    "next_token_accuracy",
    "train_lm",
]

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"gelu": F.gelu, "relu": F.relu}
POSITIONS = (None, "learned", "sinusoidal", "rope", "alibi")


def _check_heads(d_model: int, num_heads: int) -> None:
    """Require num_heads >= 1 dividing d_model (each head gets d_h = d_model / h features)."""
    check_sizes(d_model=d_model, num_heads=num_heads)
    if d_model % num_heads != 0:
        raise ValueError(
            f"d_model must be divisible by num_heads, got d_model={d_model} and "
            f"num_heads={num_heads}"
        )


class TransformerBlock(nn.Module):
    """Multi-head self-attention and a feed-forward network, each with a residual and LayerNorm.

    ``causal=True`` lets token i attend to tokens j <= i only (a decoder block); ``mlp=False``
    drops the feed-forward sublayer (an attention-only block). ``rotary``, if given, rotates
    queries and keys by their positions (RoPE) before the scores.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = True,
        causal: bool = False,
        activation: str = "gelu",
        *,
        mlp: bool = True,
        rotary: RotaryEmbedding | None = None,
        layer_norm_eps: float = 1e-5,
    ) -> None:
        """Attention with h heads of width d_model / h, and an FFN d_model -> d_ff -> d_model."""
        super().__init__()
        _check_heads(d_model, num_heads)
        check_sizes(d_ff=d_ff)
        check_dropout(dropout)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be 'gelu' or 'relu', got {activation!r}")
        if rotary is not None and rotary.d_h != d_model // num_heads:
            raise ValueError(
                f"rotary must rotate heads of width d_h={d_model // num_heads}, "
                f"got d_h={rotary.d_h}"
            )
        self.d_model, self.num_heads, self.d_h = d_model, num_heads, d_model // num_heads
        self.dropout, self.norm_first, self.causal = dropout, norm_first, causal
        self.activation, self.rotary = activation, rotary
        self.qkv = nn.Linear(d_model, 3 * d_model)  # W_q, W_k, W_v stacked, as torch's in_proj
        self.out_proj = nn.Linear(d_model, d_model)
        self.proj_dropout = nn.Dropout(dropout)  # on out_proj's output (torch's dropout1)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.mlp = mlp
        if mlp:
            self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
            self.linear1 = nn.Linear(d_model, d_ff)
            self.act_dropout = nn.Dropout(dropout)  # on the hidden activations (torch's dropout)
            self.linear2 = nn.Linear(d_ff, d_model)
            self.ffn_dropout = nn.Dropout(dropout)  # on the FFN's output (torch's dropout2)

    def _mask(self, t: int, attn_mask: Tensor | None, x: Tensor) -> Tensor | None:
        """The additive mask M (..., t, t): the causal mask plus ``attn_mask``, if any."""
        if not self.causal:
            return attn_mask
        causal = additive_causal_mask(t, dtype=x.dtype, device=x.device)  # (t, t)
        if attn_mask is None:
            return causal
        if attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros_like(causal).masked_fill(~attn_mask, float("-inf"))
        return causal + attn_mask  # (..., t, t)

    def attend(self, x: Tensor, attn_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """SA(x) (b, t, d) and the attention weights A (b, h, t, t) it applied to the values."""
        b, t, _ = x.shape
        h, d_h = self.num_heads, self.d_h
        queries, keys, values = self.qkv(x).split(self.d_model, dim=2)  # 3 x (b, t, d)
        queries = queries.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        keys = keys.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        values = values.view(b, t, h, d_h).transpose(1, 2)  # (b, h, t, d_h)
        if self.rotary is not None:
            queries, keys = self.rotary(queries), self.rotary(keys)  # (b, h, t, d_h) each
        dropout_p = self.dropout if self.training else 0.0
        mask = self._mask(t, attn_mask, x)
        attn_weights = attention_weights(queries, keys, mask, dropout_p)  # (b, h, t, t)
        context = (attn_weights @ values).transpose(1, 2).reshape(b, t, self.d_model)  # (b,t,d)
        return self.proj_dropout(self.out_proj(context)), attn_weights

    def feed_forward(self, x: Tensor) -> Tensor:
        """FFN(x) (b, t, d): two position-wise linear maps with the activation between them."""
        hidden = self.act_dropout(ACTIVATIONS[self.activation](self.linear1(x)))  # (b, t, d_ff)
        return self.ffn_dropout(self.linear2(hidden))  # (b, t, d)

    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """The block's output (b, t, d) for tokens x (b, t, d).

        ``attn_mask`` broadcasts to (b, h, t, t): ``bool`` with True where a query *may* attend
        (the package's convention, the opposite of ``nn.MultiheadAttention``'s), or a float
        added to the scaled scores (such as :func:`~attention.alibi_bias`); the causal mask, if
        the block is causal, is added to it. ``return_weights=True`` also returns A (b, h, t, t).
        """
        check_input(x, self.d_model, ranks=(3,), width_name="d_model")
        if self.norm_first:
            attended, attn_weights = self.attend(self.norm1(x), attn_mask)
            x = x + attended  # (b, t, d)
            if self.mlp:
                x = x + self.feed_forward(self.norm2(x))  # (b, t, d)
        else:
            attended, attn_weights = self.attend(x, attn_mask)
            x = self.norm1(x + attended)  # (b, t, d)
            if self.mlp:
                x = self.norm2(x + self.feed_forward(x))  # (b, t, d)
        return (x, attn_weights) if return_weights else x

    @classmethod
    def from_torch(
        cls, layer: nn.TransformerEncoderLayer, causal: bool = False
    ) -> "TransformerBlock":
        """The block that computes what ``layer`` computes, with its weights copied.

        ``layer`` must be batch-first, with biases, and use the activation "gelu" or "relu";
        norm_first, dropout, LayerNorm's eps and the training mode are carried over. With
        ``causal=True`` the block equals the layer called with a causal ``src_mask``.
        """
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise ValueError(f"layer must be a torch.nn.TransformerEncoderLayer, got {layer!r}")
        if not layer.self_attn.batch_first:
            raise ValueError("layer must be batch_first=True (inputs (b, t, d)), got False")
        if layer.linear1.bias is None or layer.self_attn.in_proj_bias is None:
            raise ValueError("layer must have biases (bias=True), got bias=False")
        activation = {1: "relu", 2: "gelu"}.get(layer.activation_relu_or_gelu)
        if activation is None:
            raise ValueError(f"layer's activation must be gelu or relu, got {layer.activation}")
        attn = layer.self_attn
        block = cls(
            attn.embed_dim,
            attn.num_heads,
            layer.linear1.out_features,
            dropout=layer.dropout.p,
            norm_first=layer.norm_first,
            causal=causal,
            activation=activation,
            layer_norm_eps=layer.norm1.eps,
        ).to(device=attn.in_proj_weight.device, dtype=attn.in_proj_weight.dtype)
        with torch.no_grad():
            block.qkv.weight.copy_(attn.in_proj_weight)  # (3d, d): W_q, W_k, W_v stacked
            block.qkv.bias.copy_(attn.in_proj_bias)  # (3d,)
            for name in ("out_proj", "norm1", "norm2", "linear1", "linear2"):
                source = attn.out_proj if name == "out_proj" else getattr(layer, name)
                getattr(block, name).load_state_dict(source.state_dict())
        return block.train(layer.training)


class TinyTransformer(nn.Module):
    """A decoder-only language model: embedding, positions, N causal pre-LN blocks, LN, LM head.

    ``positions`` picks how the model knows where a token is: ``"learned"`` (GPT-2) or
    ``"sinusoidal"`` vectors added to the embeddings, ``"rope"`` rotations of queries and keys,
    ``"alibi"`` biases on the scores, or ``None`` (only the causal mask tells positions apart).
    ``context_length`` bounds the sequences of the learned table only: the other schemes take
    any length, which is what a length-extrapolation experiment needs. ``mlp=False`` builds an
    attention-only model.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        num_heads: int,
        num_layers: int,
        context_length: int,
        d_ff: int | None = None,
        positions: str | None = "learned",
        mlp: bool = True,
        dropout: float = 0.0,
    ) -> None:
        """Every weight drawn from N(0, 0.02²), biases zero, as in GPT-2; d_ff = 4 d by default."""
        super().__init__()
        check_sizes(vocab_size=vocab_size, num_layers=num_layers, context_length=context_length)
        _check_heads(d_model, num_heads)
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {positions!r}")
        self.vocab_size, self.num_heads, self.positions = vocab_size, num_heads, positions
        self.tok_emb = nn.Embedding(vocab_size, d_model)  # (V, d)
        self.pos_emb = LearnedPositions(context_length, d_model) if positions == "learned" else None
        rotary = RotaryEmbedding(d_model // num_heads) if positions == "rope" else None
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.blocks = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, dropout, causal=True, mlp=mlp, rotary=rotary)
            for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)  # (d, V)
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(
        self, idx: Tensor, return_weights: bool = False
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        """Next-token logits (b, t, V) for token ids idx (b, t).

        ``return_weights=True`` also returns each layer's attention weights, a list of
        ``num_layers`` tensors (b, h, t, t).
        """
        check_token_ids(idx, "idx")
        if idx.numel() and not 0 <= int(idx.min()) <= int(idx.max()) < self.vocab_size:
            raise ValueError(
                f"idx must hold token ids in [0, vocab_size={self.vocab_size}), got ids from "
                f"{int(idx.min())} to {int(idx.max())}"
            )
        t = idx.shape[1]
        x = self.tok_emb(idx)  # (b, t, d)
        if self.positions == "learned":
            x = self.pos_emb(x)  # (b, t, d)
        elif self.positions == "sinusoidal":
            x = x + sinusoidal_positions(t, x.shape[-1]).to(x)  # (b, t, d) + (t, d)
        bias = alibi_bias(self.num_heads, t, t).to(x) if self.positions == "alibi" else None
        all_weights = []
        for block in self.blocks:
            x, attn_weights = block(x, attn_mask=bias, return_weights=True)  # (b, t, d)
            all_weights.append(attn_weights)  # (b, h, t, t)
        logits = self.lm_head(self.final_norm(x))  # (b, t, V)
        return (logits, all_weights) if return_weights else logits


def train_lm(
    model: nn.Module,
    data: Callable[[torch.Generator], tuple[Tensor, Tensor]],
    steps: int,
    lr: float = 1e-3,
    seed: int = 0,
) -> list[float]:
    """Train ``model`` with AdamW on next-token cross-entropy; return the loss of each step.

    ``data(generator)`` returns a batch (inputs (b, t), targets (b, t)); a target of -100 is
    not scored. The batches are drawn from a generator seeded with ``seed``, so the same model
    initialisation, data and seed give the same losses. The model is left in eval mode.
    """
    check_sizes(steps=steps)
    if isinstance(lr, bool) or not isinstance(lr, int | float) or not lr > 0:
        raise ValueError(f"lr must be a number > 0, got {lr!r}")
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        inputs, targets = data(generator)  # (b, t), (b, t)
        logits = model(inputs)  # (b, t, V)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


def induction_data(
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
    min_period: int = 2,
    max_period: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Repeated random segments: inputs (b, seq_len) and next-token targets (b, seq_len).

    Each row repeats a segment of P distinct random tokens, P drawn per row from
    [min_period, max_period] (default max: min(vocab_size, seq_len // 2)), until it is
    seq_len + 1 tokens long; inputs are its first seq_len tokens, targets its last seq_len.
    From i = P on, token i occurred before, at i - P, and its target is the token that followed
    it there: an induction head can copy it (Olsson et al., 2022). Earlier targets cannot be
    predicted and are -100 (not scored). P varies, so no fixed offset finds the earlier copy.
    """
    check_sizes(
        batch_size=batch_size, seq_len=seq_len, vocab_size=vocab_size, min_period=min_period
    )
    max_period = min(vocab_size, seq_len // 2) if max_period is None else max_period
    check_sizes(max_period=max_period)
    if not min_period <= max_period <= min(vocab_size, seq_len - 1):
        raise ValueError(
            f"need min_period <= max_period <= min(vocab_size, seq_len - 1), got "
            f"min_period={min_period}, max_period={max_period}, vocab_size={vocab_size}, "
            f"seq_len={seq_len}"
        )
    periods = torch.randint(min_period, max_period + 1, (batch_size, 1), generator=generator)
    segments = torch.rand(batch_size, vocab_size, generator=generator).argsort(dim=1)  # (b, V)
    positions = torch.arange(seq_len + 1)[None, :]  # (1, seq_len + 1)
    sequence = segments.gather(1, positions % periods)  # (b, seq_len + 1)
    inputs, targets = sequence[:, :-1], sequence[:, 1:]  # (b, seq_len) each
    targets = targets.masked_fill(positions[:, :-1] < periods, -100)  # first copy: unscored
    return inputs, targets


def lookback_data(
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
    offset: int = 1,
) -> tuple[Tensor, Tensor]:
    """Random tokens (b, seq_len) and targets (b, seq_len): target i is token i - offset.

    A task that only positions can solve: the answer's content is random, only its place is
    fixed. The first ``offset`` targets have nothing to look back at and are -100 (not scored).
    """
    check_sizes(batch_size=batch_size, seq_len=seq_len, vocab_size=vocab_size, offset=offset)
    if offset >= seq_len:
        raise ValueError(f"offset must be less than seq_len={seq_len}, got {offset}")
    inputs = torch.randint(vocab_size, (batch_size, seq_len), generator=generator)  # (b, t)
    targets = torch.full_like(inputs, -100)  # (b, t)
    targets[:, offset:] = inputs[:, :-offset]
    return inputs, targets


@torch.no_grad()
def next_token_accuracy(model: nn.Module, inputs: Tensor, targets: Tensor) -> float:
    """The fraction of scored targets (not -100) that the model's argmax predicts."""
    scored = targets != -100  # (b, t)
    if targets.shape != inputs.shape or not scored.any():
        raise ValueError(
            f"targets must have the inputs' shape {tuple(inputs.shape)} and a scored entry "
            f"(not -100), got shape {tuple(targets.shape)} with {int(scored.sum())} scored"
        )
    model.eval()
    predictions = model(inputs).argmax(dim=-1)  # (b, t)
    return (predictions[scored] == targets[scored]).double().mean().item()


@torch.no_grad()
def head_scores(model: TinyTransformer, inputs: Tensor) -> tuple[Tensor, Tensor]:
    """Previous-token and induction scores of every head: two tensors (num_layers, h).

    Previous-token score: the mean attention weight of query i on key i - 1 (i >= 1).
    Induction score (Olsson et al., 2022): for each query i whose token occurred before, at
    j < i, the total weight on the keys j + 1 that follow those earlier occurrences; averaged
    over such queries. ``model(inputs, return_weights=True)`` must return (logits, weights),
    weights a list of one (b, h, t, t) tensor per layer, as :class:`TinyTransformer` does.
    """
    model.eval()
    _, all_weights = model(inputs, return_weights=True)
    attn = torch.stack(all_weights, dim=1)  # (b, L, h, t, t)
    same = inputs[:, :, None] == inputs[:, None, :]  # (b, t, t): token i == token j
    earlier = same & torch.ones_like(same).tril(-1)  # (b, t, t): j < i
    after = torch.zeros_like(earlier)
    after[:, :, 1:] = earlier[:, :, :-1]  # (b, t, t): key j + 1 follows an earlier copy j
    queries = after.any(dim=2)  # (b, t): queries with an earlier occurrence
    if not queries.any():
        raise ValueError("inputs must repeat a token (an induction score needs one), got none")
    induction = (attn * after[:, None, None]).sum(-1)  # (b, L, h, t)
    induction = (induction * queries[:, None, None]).sum((0, 3)) / queries.sum()  # (L, h)
    previous = attn.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=(0, 3))  # (L, h)
    return previous, induction
