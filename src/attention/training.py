"""Training the tiny model, and the data and scores of the book's experiments.

Notation (see CONTRIBUTING.md): b batch size, t (``seq_len``) tokens, n_vocab vocabulary size,
L layers, h heads per layer. A target of -100 is not scored (``F.cross_entropy``'s
``ignore_index``).

Two synthetic tasks: ``induction_data`` repeats a random segment, so that a token's successor can
be copied from its earlier occurrence (an induction head, Olsson et al., 2022); ``lookback_data``
asks for the token ``offset`` places back, which only positional information can find.
``head_scores`` measures how much each head attends to the previous token and to the token after
an earlier copy of the current one.
"""

import inspect
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ._checks import check_generator, check_number, check_seed, check_sizes, shape_or_type
from .transformer import TinyTransformer

__all__ = [
    "head_scores",
    "induction_data",
    "lookback_data",
    "next_token_accuracy",
    "recall_data",
    "train_lm",
]


def _check_model(model: object) -> None:
    """Require a module (a function of token ids would have no parameters or mode)."""
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")


def _check_target_ids(targets: Tensor) -> Tensor:
    """Require integer ids: a float, complex or bool target (a bool read as 0 or 1) is no id.

    Returns them in int64, as cross_entropy takes them (it refuses int32, which the models take
    as ids) and where -100 is itself: compared with uint8 ids it wraps to 156, a byte's id.
    """
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        raise ValueError(f"targets must be integer ids, got {targets.dtype}")
    return targets.long()


def _check_in_vocabulary(targets: Tensor, n_vocab: int) -> Tensor:
    """The scored targets (not -100), required in [0, n_vocab), as F.cross_entropy requires."""
    ids = targets[targets != -100]
    if not bool(((ids >= 0) & (ids < n_vocab)).all()):
        raise ValueError(
            f"targets must be token ids in [0, n_vocab={n_vocab}) or -100 (not scored), got ids "
            f"from {int(ids.min())} to {int(ids.max())}"
        )
    return ids


def _check_logits(logits: object, inputs: Tensor | None = None) -> Tensor:
    """Require what a model returns to be logits (b, t, n_vocab), of the inputs' (b, t) when
    given: a tuple (logits, extras) has no ``.shape``, and Python's AttributeError names no
    model."""
    if not (isinstance(logits, Tensor) and logits.dim() == 3
            and (inputs is None or logits.shape[:2] == inputs.shape)):
        bt = "" if inputs is None else f" of the inputs' (b, t) = {tuple(inputs.shape)}"
        raise ValueError(f"model must return logits (b, t, n_vocab){bt}, got "
                         f"{shape_or_type(logits)}")
    return logits


def _takes_return_weights(model: nn.Module) -> bool:
    """Whether the model's forward takes a ``return_weights`` keyword (or any keyword); True
    when its signature cannot be read."""
    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):  # a builtin or a wrapped forward: let the call decide
        return True
    return any(p.name == "return_weights" or p.kind is p.VAR_KEYWORD for p in parameters)


def train_lm(
    model: nn.Module,
    data: Callable[[torch.Generator], tuple[Tensor, Tensor]],
    steps: int,
    lr: float = 1e-3,
    seed: int = 0,
) -> list[float]:
    """Train ``model`` with AdamW on next-token cross-entropy; return the loss of each step.

    ``data(generator)`` returns a batch (inputs (b, t), targets (b, t)); targets are integer ids
    in [0, n_vocab), or -100, not scored (``F.cross_entropy``'s ``ignore_index``). The batches
    are drawn from a generator seeded with ``seed``, and dropout from torch's own generators
    seeded with ``seed`` too (their state is restored afterwards), so the same model
    initialization, data and seed give the same losses. The model is left in eval mode.

    Args:
        model: maps token ids (b, t) to logits (b, t, n_vocab); trained in place.
        data: draws one batch from the generator it is given.
        steps: number of optimizer steps.
        lr: AdamW's learning rate (no weight decay).
        seed: seed of the generator the batches are drawn from.

    Returns:
        The loss of each step, ``steps`` floats.

    Raises:
        ValueError: if model is not a torch.nn.Module or returns no logits (b, t, n_vocab), data
            is not callable or returns no pair (inputs, targets), steps is not an integer >= 1,
            seed not an integer torch's generator takes (-2**63 to 2**64 - 1), lr not a finite
            number > 0, a batch's targets are not integer ids of the logits' (b, t) in
            [0, n_vocab) or -100 (n_vocab the logits' last dimension) or are all -100, or a
            step's loss is nan or infinite (raised before that step updates the model).

    Examples:
        >>> _ = torch.manual_seed(123)
        >>> model = TinyTransformer(4, 8, 2, 1, context_length=6)  # n_vocab, d, h, L
        >>> losses = train_lm(model, lambda g: lookback_data(4, 6, 4, g), steps=3)
        >>> len(losses), losses[-1] < losses[0]
        (3, True)
    """
    _check_model(model)
    if not callable(data):
        raise ValueError(
            f"data must be a function of a torch.Generator, got {type(data).__name__}"
        )
    check_sizes(steps=steps)
    seed = check_seed(seed)
    check_number("lr", lr, 0.0, inclusive=False)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses: list[float] = []
    gpus = sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})
    with torch.random.fork_rng(devices=gpus):  # dropout draws from the global generators
        torch.manual_seed(seed)
        for step in range(steps):
            batch = data(generator)
            pair = isinstance(batch, (tuple, list))
            if not pair or len(batch) != 2:  # else Python's error, which names no batch
                got = f"{len(batch)} values" if pair else type(batch).__name__
                raise ValueError(f"data must return a batch (inputs, targets), got {got}")
            inputs, targets = batch  # (b, t), (b, t)
            logits = _check_logits(model(inputs))  # (b, t, n_vocab)
            if not isinstance(targets, Tensor) or targets.shape != logits.shape[:-1]:
                # flattened, targets of another shape with as many ids would be misaligned
                raise ValueError(
                    f"targets must have the logits' shape (b, t) = {tuple(logits.shape[:-1])}, "
                    f"got {shape_or_type(targets)}"
                )
            # checked here, not by cross_entropy: its RuntimeError or IndexError names no batch
            targets = _check_target_ids(targets)  # int64
            if not _check_in_vocabulary(targets, logits.shape[-1]).numel():
                # cross_entropy's mean over no target is nan, which AdamW would step with
                raise ValueError(f"targets of step {step} must have a scored entry (not -100), "
                                 f"got none of {targets.numel()}")
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
            if not bool(loss.isfinite()):  # its gradient would make every parameter nan
                raise ValueError(
                    f"the loss of step {step} must be finite, got {loss.item()} (nan or inf "
                    f"logits: nan or inf parameters, after a lr={lr} too large, say); the model "
                    f"is left as step {step} found it"
                )
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

    Args:
        batch_size: b, the number of rows.
        seq_len: t, tokens per row.
        vocab_size: n_vocab; tokens are 0 .. n_vocab - 1.
        generator: the random generator to draw from (torch's default one if None).
        min_period: smallest segment length P.
        max_period: largest segment length P (default min(vocab_size, seq_len // 2)).

    Returns:
        (inputs, targets), int64 tensors (b, seq_len) each.

    Raises:
        ValueError: if a size is not an integer >= 1, not min_period <= max_period <=
            min(vocab_size, seq_len - 1), or generator is not a torch.Generator or None.

    Examples:
        >>> inputs, targets = induction_data(1, 6, 8, torch.Generator().manual_seed(0), 3, 3)
        >>> inputs, targets
        (tensor([[1, 2, 3, 1, 2, 3]]), tensor([[-100, -100, -100,    2,    3,    1]]))
    """
    check_sizes(
        batch_size=batch_size, seq_len=seq_len, vocab_size=vocab_size, min_period=min_period
    )
    check_generator(generator)
    if max_period is None:  # the default, never given: name what leaves it too small
        max_period = min(vocab_size, seq_len // 2)
        if max_period < min_period:
            raise ValueError(
                f"seq_len and vocab_size must leave room for a period of min_period={min_period} "
                f"(seq_len >= {2 * min_period}, vocab_size >= {min_period}), got "
                f"seq_len={seq_len}, vocab_size={vocab_size}"
            )
    check_sizes(max_period=max_period)
    if not min_period <= max_period <= min(vocab_size, seq_len - 1):
        raise ValueError(
            f"need min_period <= max_period <= min(vocab_size, seq_len - 1), got "
            f"min_period={min_period}, max_period={max_period}, vocab_size={vocab_size}, "
            f"seq_len={seq_len}"
        )
    periods = torch.randint(min_period, max_period + 1, (batch_size, 1), generator=generator)
    segments = torch.rand(batch_size, vocab_size, generator=generator)  # (b, n_vocab)
    segments = segments.argsort(dim=1)  # (b, n_vocab), a random order of the vocabulary
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

    Args:
        batch_size: b, the number of rows.
        seq_len: t, tokens per row.
        vocab_size: n_vocab; tokens are 0 .. n_vocab - 1.
        generator: the random generator to draw from (torch's default one if None).
        offset: how many places back the target token is, 1 .. seq_len - 1.

    Returns:
        (inputs, targets), int64 tensors (b, seq_len) each.

    Raises:
        ValueError: if a size is not an integer >= 1, offset >= seq_len, or generator is not
            a torch.Generator or None.

    Examples:
        >>> lookback_data(1, 5, 10, torch.Generator().manual_seed(0), offset=2)
        (tensor([[4, 9, 3, 0, 3]]), tensor([[-100, -100,    4,    9,    3]]))
    """
    check_sizes(batch_size=batch_size, seq_len=seq_len, vocab_size=vocab_size, offset=offset)
    check_generator(generator)
    if offset >= seq_len:
        raise ValueError(f"offset must be less than seq_len={seq_len}, got {offset}")
    inputs = torch.randint(vocab_size, (batch_size, seq_len), generator=generator)  # (b, t)
    targets = torch.full_like(inputs, -100)  # (b, t)
    targets[:, offset:] = inputs[:, :-offset]
    return inputs, targets


@torch.no_grad()
def next_token_accuracy(model: nn.Module, inputs: Tensor, targets: Tensor) -> float:
    """The fraction of scored targets (not -100) that the model's argmax predicts.

    The model is put in eval mode and run without gradients.

    Args:
        model: maps token ids (b, t) to logits (b, t, n_vocab).
        inputs: token ids (b, t).
        targets: target ids (b, t); -100 is not scored.

    Returns:
        The accuracy, a float in [0, 1].

    Raises:
        ValueError: if model is not a torch.nn.Module or returns no logits (b, t, n_vocab) of
            the inputs' (b, t), inputs is not a tensor, or targets is not an integer tensor of
            the inputs' shape with a scored entry, or holds an id outside [0, n_vocab) other
            than -100 (n_vocab the logits' last dimension).

    Examples:
        >>> model = TinyTransformer(4, 8, 2, 1, context_length=6)  # n_vocab, d, h, L
        >>> inputs, targets = lookback_data(2, 6, 4, torch.Generator().manual_seed(0))
        >>> 0.0 <= next_token_accuracy(model, inputs, targets) <= 1.0
        True
    """
    _check_model(model)
    for name, ids in (("inputs", inputs), ("targets", targets)):
        if not isinstance(ids, Tensor):
            raise ValueError(f"{name} must be a tensor of token ids, got {shape_or_type(ids)}")
    targets = _check_target_ids(targets)  # int64: a float compared with an id is never refused
    scored = targets != -100  # (b, t)
    if targets.shape != inputs.shape or not scored.any():
        raise ValueError(
            f"targets must have the inputs' shape {tuple(inputs.shape)} and a scored entry "
            f"(not -100), got shape {tuple(targets.shape)} with {int(scored.sum())} scored"
        )
    model.eval()
    logits = _check_logits(model(inputs), inputs)  # (b, t, n_vocab)
    ids = _check_in_vocabulary(targets, logits.shape[-1])  # F.cross_entropy refuses them too
    predictions = logits.argmax(dim=-1)  # (b, t)
    return (predictions[scored] == ids).double().mean().item()


@torch.no_grad()
def head_scores(model: TinyTransformer, inputs: Tensor) -> tuple[Tensor, Tensor]:
    """Previous-token and induction scores of every head: two tensors (num_layers, h).

    Previous-token score: the mean attention weight of query i on key i - 1 (i >= 1).
    Induction score (Olsson et al., 2022): for each query i whose token occurred before, at
    j < i, the total weight on the keys j + 1 that follow those earlier occurrences; averaged
    over such queries. ``model(inputs, return_weights=True)`` must return (logits, weights),
    weights a list of one (b, h, t, t) tensor per layer, as :class:`TinyTransformer` does.

    Args:
        model: the model whose heads are scored (put in eval mode).
        inputs: token ids (b, t) that repeat at least one token.

    Returns:
        (previous, induction), each (L, h).

    Raises:
        ValueError: if model is not a torch.nn.Module whose forward takes ``return_weights``
            and returns (logits, weights) as above, inputs is not a tensor, or no token of
            inputs occurs twice.

    Examples:
        >>> model = TinyTransformer(4, 8, 2, 1, context_length=6)  # n_vocab, d, h, L
        >>> previous, induction = head_scores(model, torch.tensor([[0, 1, 2, 0, 1, 2]]))
        >>> previous.shape, induction.shape
        (torch.Size([1, 2]), torch.Size([1, 2]))
    """
    _check_model(model)
    if not _takes_return_weights(model):
        raise ValueError(
            "model must take return_weights=True and return (logits, weights), as a "
            f"TinyTransformer does, got {type(model).__name__}, whose forward takes no "
            "return_weights"
        )
    if not isinstance(inputs, Tensor):
        raise ValueError(f"inputs must be a tensor of token ids, got {shape_or_type(inputs)}")
    model.eval()
    output = model(inputs, return_weights=True)
    all_weights = output[1] if isinstance(output, tuple) and len(output) == 2 else None
    b, t = inputs.shape[0], inputs.shape[-1]
    if not (isinstance(all_weights, (list, tuple)) and all_weights and all(
            isinstance(w, Tensor) and w.dim() == 4 and w.shape[::2] == (b, t)
            and w.shape[1:] == all_weights[0].shape[1:] and w.shape[-1] == t
            for w in all_weights)):
        got = ([shape_or_type(w) for w in all_weights] if isinstance(all_weights, (list, tuple))
               else shape_or_type(output if all_weights is None else all_weights))
        raise ValueError(
            f"model(inputs, return_weights=True) must return (logits, weights), weights a list "
            f"of one (b, h, t, t) = ({b}, h, {t}, {t}) tensor per layer, got {got}"
        )
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


def recall_data(
    batch_size: int,
    num_pairs: int,
    num_keys: int,
    num_values: int,
    generator: torch.Generator | None = None,
    num_queries: int | None = None,
    distinct_keys: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Multi-query associative recall: inputs (b, t) and targets (b, t), t = 2 n + n_q.

    Each row writes ``num_pairs`` (n) key-value pairs, "k_1 v_1 ... k_n v_n", with keys from
    ids [0, num_keys) and values from [num_keys, num_keys + num_values), then asks for
    ``num_queries`` (n_q) of the written keys again, each once, in a random order. The target of
    an asked key is the value written with it last; every other target is -100 (not scored).

    With ``distinct_keys=None`` the n keys are distinct and n_q defaults to n: Arora et al.'s
    (2024, Zoology) task ("MQAR"). With ``distinct_keys=m < n``, the n writes draw their keys from m
    distinct keys, so keys come back with new values and the answer is the latest one; n_q
    defaults to the number of keys written, and must not exceed it in any row.

    Args:
        batch_size: b.
        num_pairs: n, key-value pairs written per row.
        num_keys: ids of keys.
        num_values: ids of values.
        generator: the random generator to draw from (torch's default one if None).
        num_queries: n_q, keys asked again.
        distinct_keys: m, distinct keys the writes draw from (None: n distinct keys).

    Returns:
        (inputs, targets), int64 tensors (b, 2 n + n_q) each.

    Raises:
        ValueError: if a size is not an integer >= 1, the counts do not fit each other, or
            generator is not a torch.Generator or None.

    Examples:
        >>> inputs, targets = recall_data(1, 2, 4, 4, torch.Generator().manual_seed(0))
        >>> inputs, targets  # k v k v, then the two keys again
        (tensor([[2, 7, 3, 7, 2, 3]]), tensor([[-100, -100, -100, -100,    7,    7]]))
    """
    m = num_pairs if distinct_keys is None else distinct_keys
    check_sizes(batch_size=batch_size, num_pairs=num_pairs, num_keys=num_keys,
                num_values=num_values, distinct_keys=m)
    check_generator(generator)
    if m > min(num_pairs, num_keys):
        raise ValueError(
            f"need at most min(num_pairs, num_keys) distinct keys, got {m} with "
            f"num_pairs={num_pairs}, num_keys={num_keys}"
        )
    b, n = batch_size, num_pairs
    pool = torch.rand(b, num_keys, generator=generator).argsort(dim=1)[:, :m]  # (b, m) distinct
    if distinct_keys is None:
        keys = pool  # (b, n): every key once
    else:  # each key at least once, in a random order, the rest drawn again from the pool
        extra = torch.randint(m, (b, n - m), generator=generator)  # (b, n - m)
        slots = torch.cat([torch.arange(m).expand(b, m), extra], dim=1)  # (b, n)
        order = torch.rand(b, n, generator=generator).argsort(dim=1)  # (b, n)
        keys = pool.gather(1, slots.gather(1, order))  # (b, n)
    values = num_keys + torch.randint(num_values, (b, n), generator=generator)  # (b, n)
    num_queries = m if num_queries is None else num_queries
    check_sizes(num_queries=num_queries)
    if num_queries > m:
        raise ValueError(f"num_queries must be at most the {m} keys written, got {num_queries}")
    same = keys[:, :, None] == keys[:, None, :]  # (b, n, n): write i and write j share a key
    latest = torch.where(same, torch.arange(n), -1).amax(dim=2)  # (b, n): last write, same key
    asked_slots = torch.rand(b, m, generator=generator).argsort(dim=1)[:, :num_queries]
    asked = pool.gather(1, asked_slots)  # (b, n_q): distinct keys that were written
    first = (keys[:, None, :] == asked[:, :, None]).int().argmax(dim=2)  # (b, n_q): a write
    answer = values.gather(1, latest.gather(1, first))  # (b, n_q): its key's latest value
    pairs = torch.stack([keys, values], dim=2).reshape(b, 2 * n)  # (b, 2n): k_1 v_1 k_2 v_2 ...
    inputs = torch.cat([pairs, asked], dim=1)  # (b, 2n + n_q)
    targets = torch.full_like(inputs, -100)
    targets[:, 2 * n :] = answer  # (b, n_q)
    return inputs, targets
