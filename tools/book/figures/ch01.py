"""Figures of chapter 1: why attention.

Notation: b batch size, t tokens, d_in token width, d_hidden RNN state width, d_attn width of
the additive attention's hidden layer; the reversal model maps a source of t = 6 digits to the
same digits in reverse order. The gradient figure uses an untrained RNN and self-attention
without trainable weights, scaled by 1/sqrt(d_k).
"""

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from attention import (
    AttentionDecoder,
    Seq2Seq,
    Seq2SeqEncoder,
    plot_attention,
    scaled_dot_product_attention,
)
from book.figures import INK

BOS = 10  # start token; digits are tokens 0-9


def _train_reverser() -> Seq2Seq:
    """The chapter's recipe: 100 Adam steps on batches of 64 random 6-digit sequences."""
    torch.manual_seed(123)
    encoder = Seq2SeqEncoder(vocab_size=11, d_emb=16, d_hidden=32)
    decoder = AttentionDecoder(vocab_size=11, d_emb=16, d_hidden=32, d_attn=32)
    model = Seq2Seq(encoder, decoder)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    for _ in range(100):
        src = torch.randint(0, 10, (64, 6))  # (b, t)
        tgt = src.flip(1)  # (b, t)
        tgt_in = torch.cat([torch.full((64, 1), BOS), tgt[:, :-1]], dim=1)  # (b, t)
        logits, _ = model(src, tgt_in)  # (b, t, n_vocab)
        loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model


def alignment() -> Figure:
    """Learned attention weights of the reversal model for the source 3 1 4 1 5 9."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the page trains on one thread; same numbers here
    try:
        model = _train_reverser()
    finally:
        torch.set_num_threads(threads)
    src = torch.tensor([[3, 1, 4, 1, 5, 9]])  # (b, t)
    tokens, attn = model.greedy_decode(src, max_len=6, bos=BOS)  # (b, t), (b, t, t)
    fig, ax = plt.subplots(figsize=(4.8, 4.4), layout="constrained")
    plot_attention(
        attn[0],
        row_labels=[f"out {i + 1}: {d}" for i, d in enumerate(tokens[0].tolist())],
        col_labels=[f"{d} (pos {j + 1})" for j, d in enumerate(src[0].tolist())],
        ax=ax,
        title="Learned alignment: reversing 3 1 4 1 5 9",
    )
    ax.set_xlabel("source token (key)")
    ax.set_ylabel("output token (query)")
    return fig


def gradient_paths() -> Figure:
    """Gradient norm of the last output w.r.t. each input token: an RNN vs self-attention."""
    torch.manual_seed(123)
    rnn = torch.nn.RNN(input_size=16, hidden_size=16, batch_first=True)
    torch.manual_seed(123)
    x = torch.randn(1, 30, 16, requires_grad=True)  # (b, t, d_in)
    _, last_state = rnn(x)  # (1, b, d_hidden)
    last_state.sum().backward()
    rnn_norms = x.grad[0].norm(dim=-1)  # (t,)

    torch.manual_seed(123)
    x = torch.randn(30, 16, requires_grad=True)  # (t, d_in)
    scaled_dot_product_attention(x, x, x)[-1].sum().backward()
    attn_norms = x.grad.norm(dim=-1)  # (t,)

    positions = range(1, 31)
    fig, ax = plt.subplots(figsize=(6.4, 3.6), layout="constrained")
    ax.semilogy(positions, rnn_norms.numpy(), "o-", color="#d94801", markersize=4,
                label="untrained RNN: final state $h^{(30)}$")
    ax.semilogy(positions, attn_norms.numpy(), "s-", color="#2171b5", markersize=4,
                label="self-attention, no weights, scaled: last context vector $z^{(30)}$")
    ax.set_xlabel("input token $j$")
    ax.set_ylabel(r"$\Vert \partial\,(\mathrm{sum\ of\ output}) / \partial x^{(j)} \Vert$")
    ax.set_title("How strongly each of 30 tokens reaches the last output")
    ax.set_xlim(0.5, 30.5)
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(True, which="major", axis="y", color=INK, alpha=0.12)
    ax.legend(frameon=False, loc="lower right")
    return fig


FIGURES = {
    "ch01-alignment": alignment,
    "ch01-gradient-paths": gradient_paths,
}
