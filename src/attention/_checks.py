"""Input checks and small helpers shared by every module of the package.

Each check raises ``ValueError`` with a message that names the expected and the actual value,
and is called where the value enters: in a constructor or at the start of ``forward``. Modules
of the package (self_attention, causal, multihead, encoder, additive, flash, ...) import these
instead of writing their own; the names are public so that importing them across modules is
the intended use (the module itself is not part of the documented API).

Notation: b batch size, t tokens, d_in input width, d_out output width, h heads.
"""

import contextlib
import functools
import inspect
import math
import sys
from collections.abc import Callable, Sequence
from numbers import Integral, Real
from typing import Any, Literal, TypedDict, TypeGuard, TypeVar, cast, get_args

import torch
from torch import Size, Tensor
from torch.types import Device

# Where a causal mask's diagonal sits when t_q != t_k.
Alignment = Literal["top_left", "bottom_right"]
ALIGNMENTS: tuple[Alignment, ...] = get_args(Alignment)

F = TypeVar("F", bound=Callable[..., Any])


class Factory(TypedDict):
    """The ``device`` and ``dtype`` a module passes on to the layers and tensors it creates, as
    ``nn.Linear(..., **factory)`` (a TypedDict, so that the type checker reads each keyword's
    type where a plain dict would give every value the union of both)."""

    device: Device
    dtype: torch.dtype | None


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype statistics are kept in: float32 for float16 / bfloat16 inputs, else the input's.

    Fused kernels (FlashAttention, torch's) read half-precision tiles but compute scores, softmax
    and sums in float32, rounding once at the end; the functions here do the same.
    """
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def autocast_off(x: Tensor) -> contextlib.AbstractContextManager[object]:
    """Autocast turned off on x's device, for scores kept in float32: under autocast a matmul of
    float32 tensors runs in its float16 or bfloat16 again (a float16 score past 65504 inf, its
    row nan), where torch's fused kernels keep them in float32 under autocast too."""
    if torch.amp.is_autocast_available(x.device.type):
        return torch.autocast(x.device.type, enabled=False)
    return contextlib.nullcontext()  # the meta device has no autocast


def torch_takes_is_causal(t_q: int, t_k: int, scale: float | None) -> bool:
    """Whether torch's SDPA may be handed ``is_causal=True`` for a causal call: its top-left mask
    is the bottom-right one only for t_q = t_k, and its fused CPU kernel gives nan rows for a
    scale <= 0 (torch 2.13; its math backend and a bool mask give softmax(scale · Q Kᵀ) V)."""
    return t_q == t_k and (scale is None or scale > 0)


def renamed(**hints: str) -> Callable[[F], F]:
    """Decorator: a keyword another library (or an older version) spells differently raises a
    ``TypeError`` that says which keyword this function takes, instead of Python's bare one.

    ``hints`` maps the foreign name to the hint, for example ``causal="is_causal"``.
    """

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            for name in hints:
                if name in kwargs:
                    raise TypeError(
                        f"{fn.__qualname__}() got an unexpected keyword argument {name!r}: "
                        f"did you mean {hints[name]}?"
                    )
            return fn(*args, **kwargs)

        # which keywords are refused, for the API tests (each must say so under Raises)
        call.refused_keywords = dict(hints)  # type: ignore[attr-defined]  # set on a function
        return cast(F, call)

    return wrap


# flash-attn's and older names of the kernels' keywords, with the keyword each maps to
KERNEL_RENAMES = {
    "causal": "is_causal",
    "softmax_scale": "scale",
    "causal_alignment": "alignment",
    "window_size": "window=w (flash-attn's window_size=(w - 1, 0) is window=w with is_causal=True)",
}


def autocast_as_sdpa(fn: F) -> F:
    """Decorator: under ``torch.autocast``, ``fn`` takes its query, key and value in autocast's
    dtype and runs with autocast off, as torch's SDPA does (autocast casts its inputs down, and
    its kernels keep their statistics in float32). Else autocast would run the float32 products
    of ``fn``'s statistics in its dtype again: a float16 score past 65504 inf, its row nan.
    float64 stays float64, as autocast leaves it."""
    names = ("query", "key", "value")
    places = [i for i, name in enumerate(inspect.signature(fn).parameters) if name in names]

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        first = args[0] if args else kwargs.get("query")
        device = first.device.type if isinstance(first, Tensor) else None  # else fn refuses it
        if device is None or not (torch.amp.is_autocast_available(device)
                                  and torch.is_autocast_enabled(device)):
            return fn(*args, **kwargs)
        dtype = torch.get_autocast_dtype(device)

        def down(x: object) -> object:
            if isinstance(x, Tensor) and x.is_floating_point() and x.dtype != torch.float64:
                return x.to(dtype)
            return x

        args = tuple(down(x) if i in places else x for i, x in enumerate(args))
        kwargs = {name: down(x) if name in names else x for name, x in kwargs.items()}
        with torch.autocast(device, enabled=False):
            return fn(*args, **kwargs)

    call.autocast_as_sdpa = True  # type: ignore[attr-defined]  # for the conventions' test
    return cast(F, call)


def attention_kernel(fn: F) -> F:
    """Decorator of the attention kernels, for the conventions they share: flash-attn's and
    older names of their keywords raise a ``TypeError`` naming ours (:func:`renamed` with
    :data:`KERNEL_RENAMES`), and ``torch.autocast`` is taken as torch's SDPA takes it
    (:func:`autocast_as_sdpa`)."""
    return autocast_as_sdpa(renamed(**KERNEL_RENAMES)(fn))


def check_flags(**flags: object) -> None:
    """Require each named flag (``is_causal=True``, ...) to be a Python bool: a tensor or an int
    would be truth-tested silently."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be a bool, got {value!r} of type {type(value).__name__}")


def shape_or_type(x: object) -> object:
    """What a message says was given: x's shape as a tuple, or the name of its type if it is not
    a tensor (a list, say)."""
    return tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__


def is_integer(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer: a Python or NumPy one, not a bool (True is no count, no
    index and no position, though Python counts it as 1). Typed as int, as the package's sizes
    are: a NumPy integer is used as one."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def real_number(value: object) -> float | None:
    """``value`` as a finite float if it is a real number: a Python or NumPy scalar, or a 0-d
    tensor, as torch's SDPA takes for its scale (not a bool, which torch reads as 0 or 1); else
    None."""
    if isinstance(value, Tensor):
        if value.dim() != 0 or value.dtype == torch.bool or value.is_complex():
            return None
        value = value.detach()
    elif not isinstance(value, Real) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (OverflowError, RuntimeError):  # an int past float's range; a tensor without data
        return None
    return number if math.isfinite(number) else None


def _refuse_grad(name: str, value: object) -> None:
    """Refuse a tensor that requires grad where its value is used as a float: the float would
    drop its gradient."""
    if isinstance(value, Tensor) and value.requires_grad:
        raise ValueError(f"{name} must be a number or a tensor that does not require grad (it is "
                         f"used as a float, which would drop its gradient), got {value!r}")


def check_number(
    name: str, value: object, minimum: float, inclusive: bool = True, *, learnable: bool = False
) -> float:
    """``value`` as a float, if it is a finite number >= minimum (> minimum if not inclusive).
    A tensor that requires grad is refused, as the float would drop its gradient, unless the
    caller keeps ``value`` itself (``learnable``)."""
    number = real_number(value)
    if not learnable:
        _refuse_grad(name, value)
    if number is None or not (number >= minimum if inclusive else number > minimum):
        bound = f">= {minimum:g}" if inclusive else f"> {minimum:g}"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return number


def check_scale(scale: object) -> float | None:
    """The score scale as a float, or None (1 / sqrt(d_k)): refuses what is not a finite real
    number, where torch's SDPA takes NumPy scalars and 0-d tensors as well as floats."""
    if scale is None:
        return None
    _refuse_grad("scale", scale)  # as torch refuses it
    number = real_number(scale)
    if number is None:
        raise ValueError(f"scale must be None or a finite number, got {scale!r}")
    return number


def check_alignment(alignment: str) -> None:
    """Require one of the two ways to line up t_q queries against t_k keys."""
    if alignment not in ALIGNMENTS:
        raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {alignment!r}")


def check_counts(**values: int) -> None:
    """Require counts that may be zero (sink tokens, a prefix, queries or keys): integers >= 0,
    NumPy's among them, as :func:`check_sizes` takes."""
    for name, value in values.items():
        if not is_integer(value) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


def check_cache(cache: object, name: str = "cache") -> None:
    """Require a KV cache: what has a ``length`` and an ``append(keys, values)``, as a
    ``KVCache``, a ``RollingKVCache`` or a ``PagedSequence`` has."""
    if not (hasattr(cache, "length") and callable(getattr(cache, "append", None))):
        raise ValueError(
            f"{name} must be a KV cache with length and append (a KVCache, a RollingKVCache, "
            f"...), got {type(cache).__name__}"
        )


def check_no_mask_or_cache(layer: str, attn_mask: object, cache: object) -> None:
    """Require neither a mask (or an additive bias such as ALiBi) nor a KV cache, for a ``layer``
    that replaces a block's attention and can use neither."""
    if attn_mask is not None or cache is not None:
        raise ValueError(
            f"{layer} takes no attn_mask or bias (ALiBi) and no KV cache, got "
            f"attn_mask={None if attn_mask is None else 'a tensor'}, cache={cache!r}"
        )


def check_qkv(query: Tensor, key: Tensor, value: Tensor | None = None, *, min_dim: int = 2) -> None:
    """The one input check of the kernels: query (..., t_q, d_k), key (..., t_k, d_k) and value
    (..., t_k, d_v) are floating-point tensors of one dtype on one device, with at least
    ``min_dim`` dimensions, query and key of one width d_k >= 1, key and value of one length.

    A message about dtypes or devices names every tensor's dtype and device.
    """
    named = [("query", query), ("key", key)] + ([("value", value)] if value is not None else [])
    for name, tensor in named:
        if not isinstance(tensor, Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() < min_dim:
            shape = "(..., h, t, d)" if min_dim == 3 else "(..., t, d)"
            raise ValueError(
                f"{name} must have at least {min_dim} dimensions {shape}, "
                f"got a {tensor.dim()}-d tensor of shape {tuple(tensor.shape)}"
            )
    rule = None
    if not all(x.is_floating_point() for _, x in named):
        rule = "must be floating point"
    elif len({x.dtype for _, x in named}) > 1:
        rule = "must share one dtype"
    elif len({x.device for _, x in named}) > 1:
        rule = "must be on one device"
    if rule is not None:  # the message is formatted only when raised: kernels call this per call
        which = ", ".join(name for name, _ in named)
        found = ", ".join(f"{name} {x.dtype} on {x.device}" for name, x in named)
        raise ValueError(f"{which} {rule}, got {found}")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same last dimension d_k, "
            f"got {query.shape[-1]} and {key.shape[-1]}"
        )
    if query.shape[-1] == 0:
        raise ValueError("d_k must be at least 1 (the scale is 1 / sqrt(d_k)), got d_k = 0")
    if value is not None and key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same number of tokens t_k, "
            f"got {key.shape[-2]} and {value.shape[-2]}"
        )


def check_sinks(sinks: object, query: Tensor) -> None:
    """Require None or one floating logit per query head on the query's device: shape (h,),
    h = query.shape[-3] of a query (..., h, t_q, d_k)."""
    if sinks is None:
        return
    h = query.shape[-3] if query.dim() >= 3 else None
    if (not isinstance(sinks, Tensor) or h is None or tuple(sinks.shape) != (h,)
            or not sinks.is_floating_point() or sinks.device != query.device):
        got = (f"shape {tuple(sinks.shape)} and dtype {sinks.dtype} on {sinks.device}"
               if isinstance(sinks, Tensor) else type(sinks).__name__)
        raise ValueError(
            f"sinks must be a float tensor of shape (h,) = ({h},), one logit per query head of a "
            f"query (..., h, t_q, d_k), on {query.device}, got {got}"
        )


def check_batch_dims(*named: tuple[str, Tensor], min_dim: int = 2, gqa: bool = False) -> Size:
    """Require the leading dimensions of the named tensors, all but the last ``min_dim`` (the
    token and width axes, or heads too), to broadcast, as in a batched matmul; returns their
    broadcast shape. The ValueError names every tensor's leading shape and, for a function
    that takes ``enable_gqa`` (``gqa``), suggests it when the head counts (dim -3) differ."""
    leads = [tensor.shape[: tensor.dim() - min_dim] for _, tensor in named]
    try:
        return torch.broadcast_shapes(*leads)
    except RuntimeError:
        pass
    names = [name for name, _ in named]
    which = ", ".join(names[:-1]) + " and " + names[-1]
    got = ", ".join(str(tuple(shape)) for shape in leads)
    heads = {tensor.shape[-3] for _, tensor in named if tensor.dim() >= 3}
    hint = ""
    if gqa and len(heads) > 1:
        hint = " (for fewer key and value heads than query heads, pass enable_gqa=True)"
    raise ValueError(f"leading dimensions of {which} must broadcast, got {got}{hint}")


def is_causal_bias(x: object) -> bool:
    """Whether x is torch's ``CausalBias`` (``causal_upper_left`` or ``causal_lower_right``),
    which torch's SDPA takes as its attn_mask. Its module is not imported here (it loads
    torch._dynamo, seconds): while it is not loaded, no CausalBias exists."""
    bias = sys.modules.get("torch.nn.attention.bias")
    return bias is not None and isinstance(x, bias.CausalBias)


def check_attn_mask(attn_mask: Tensor, query: Tensor, name: str = "attn_mask") -> None:
    """The one mask rule: ``bool`` keeps (True = may attend) or hides; a float is added to the
    scaled scores and has dtype float32 or the query's (torch's rule); any other dtype, an int
    0/1 mask included, is refused rather than added. On the query's device, with at least the
    two dimensions (t_q, t_k): torch raises an IndexError for fewer, where broadcasting would
    silently apply a key mask to every query."""
    if not isinstance(attn_mask, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor or None, got {type(attn_mask).__name__}")
    if is_causal_bias(attn_mask):  # a Tensor subclass whose shape and values mean nothing
        raise ValueError(
            f"{name} must be a bool or float mask here, got torch's CausalBias ({name} of "
            "scaled_dot_product_attention and attention_weights only): pass "
            "causal_mask(t_q, t_k, alignment=...) instead"
        )
    if attn_mask.dim() < 2:
        raise ValueError(
            f"{name} must have at least 2 dimensions (..., t_q, t_k), got shape "
            f"{tuple(attn_mask.shape)}"
        )
    if attn_mask.dtype not in (torch.bool, torch.float32, query.dtype):
        raise ValueError(
            f"{name} must be bool (True = may attend) or a float added to the scores, of dtype "
            f"torch.float32 or the query's {query.dtype}, got {attn_mask.dtype} (for a 0/1 "
            f"mask pass {name}.bool())"
        )
    if attn_mask.device != query.device:
        raise ValueError(
            f"{name} must be on the query's device {query.device}, got {attn_mask.device}"
        )


def additive_mask(attn_mask: Tensor, dtype: torch.dtype) -> Tensor:
    """A checked mask as the additive M: bool -> 0 where kept, -inf where hidden; float as is."""
    if attn_mask.dtype == torch.bool:
        return torch.zeros(attn_mask.shape, dtype=dtype, device=attn_mask.device).masked_fill(
            ~attn_mask, float("-inf")
        )
    return attn_mask.to(dtype)


def check_dropout(p: float, name: str = "dropout") -> None:
    """Require a dropout probability: a number in [0, 1)."""
    if isinstance(p, bool) or not isinstance(p, Real) or not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {p!r}")


def check_sizes(**sizes: object) -> tuple[int, ...]:
    """Require each named size (``d_in=3``, ``context_length=6``, ...) to be an integer >= 1;
    return them as Python ints, in order.

    A bool or a float such as 2.0 is refused, even where it would compare equal to an integer:
    a size is a count, and PyTorch's layers (``nn.Linear``, ``Tensor.view``) take only integers.
    A NumPy integer is taken, and returned as an int: arithmetic in np.int32 wraps around.
    """
    for name, value in sizes.items():
        if not is_integer(value):
            raise ValueError(
                f"{name} must be an integer, got {value!r} of type {type(value).__name__}"
            )
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    # int() of an Integral: mypy knows no such overload
    return tuple(int(value) for value in sizes.values())  # type: ignore[call-overload]


def check_heads(d_out: int, num_heads: int, width_name: str = "d_out") -> None:
    """Require an integer ``num_heads >= 1`` that divides d_out (head width d_h = d_out / h).

    ``width_name`` is the width's name in the message (``d_out``, ``d_model``).
    """
    check_sizes(num_heads=num_heads)
    if d_out % num_heads != 0:
        raise ValueError(
            f"{width_name} must be divisible by num_heads, got {width_name}={d_out} and "
            f"num_heads={num_heads}"
        )


def check_rank(x: Tensor, ranks: Sequence[int] = (2, 3), name: str = "input") -> None:
    """Require a tensor whose ``x.dim()`` is one of ``ranks``."""
    expected = " or ".join(f"{r}-d" for r in ranks)
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a {expected} tensor, got {type(x).__name__}")
    if x.dim() not in ranks:
        raise ValueError(
            f"{name} must be {expected}, got a {x.dim()}-d tensor of shape {tuple(x.shape)}"
        )


def check_input(
    x: Tensor,
    d_in: int,
    ranks: Sequence[int] = (2, 3),
    name: str = "input",
    width_name: str = "d_in",
) -> None:
    """Require a token tensor of rank in ``ranks`` whose last dimension is ``d_in``.

    ``width_name`` is the width's name in the message (``d_in``, ``d_kv``, ``d_key``, ...).
    """
    check_rank(x, ranks, name)
    if x.shape[-1] != d_in:
        raise ValueError(
            f"{name} must have last dimension {width_name}={d_in}, got {x.shape[-1]} "
            f"(shape {tuple(x.shape)})"
        )


def check_token_ids(x: Tensor, name: str, vocab_size: int | None = None) -> None:
    """Require a (b, t) tensor of integer token ids, what ``nn.Embedding`` looks up: in
    [0, vocab_size) when it is given (the embedding's own error names no id)."""
    check_rank(x, (2,), name)
    if x.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"{name} must hold integer token ids (torch.int64 or torch.int32), got {x.dtype}"
        )
    if vocab_size is None or x.is_meta:  # meta tensors hold no ids to check, as nn.Embedding's
        return
    if x.numel() and not 0 <= int(x.min()) <= int(x.max()) < vocab_size:
        raise ValueError(
            f"{name} must hold token ids in [0, vocab_size={vocab_size}), got ids from "
            f"{int(x.min())} to {int(x.max())}"
        )


def check_token_id(value: object, name: str, vocab_size: int) -> int:
    """One token id in [0, vocab_size), as an int: a Python or NumPy integer or a 0-d integer
    tensor, what ``torch.full`` takes (not a bool or a float, which it would round)."""
    number = -1
    if isinstance(value, Tensor):
        if value.dim() == 0 and value.device.type != "meta" and not (
                value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
            number = int(value)
    elif is_integer(value):
        number = int(value)
    if not 0 <= number < vocab_size:
        raise ValueError(f"{name} must be a token id in [0, {vocab_size}), got {value!r}")
    return number


def check_seed(seed: object) -> int:
    """Require a seed ``torch.Generator.manual_seed`` takes: an integer in [-2**63, 2**64) (a
    negative one is read modulo 2**64). Returns it as a Python int, which the generator needs
    (a NumPy integer, which ``torch.manual_seed`` takes, is a TypeError there)."""
    if not is_integer(seed) or not -(2**63) <= seed < 2**64:
        raise ValueError(f"seed must be an integer in [-2**63, 2**64) as torch.Generator takes, "
                         f"got {seed!r}")
    return int(seed)


def check_generator(generator: object) -> None:
    """Require None (torch's default generator) or a ``torch.Generator`` to draw from: torch's
    random functions raise a ``TypeError`` listing their overloads for anything else."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None, got {generator!r} of "
                         f"type {type(generator).__name__}")


def check_context_length(t: int, context_length: int) -> None:
    """Require a sequence no longer than the module's ``context_length``."""
    if t > context_length:
        raise ValueError(
            f"sequence length must be at most context_length={context_length}, got {t}"
        )


def check_mask(mask: Tensor, scores_shape: Size, name: str = "attn_mask") -> None:
    """Require a mask that broadcasts to the scores' shape (..., t_q, t_k) without growing it."""
    pairs = zip(reversed(mask.shape), reversed(scores_shape))
    if mask.dim() > len(scores_shape) or any(m not in (1, s) for m, s in pairs):
        raise ValueError(
            f"{name} must broadcast to the scores' shape {tuple(scores_shape)}, "
            f"got shape {tuple(mask.shape)}"
        )


def check_rule(rule: object, name: str) -> None:
    """Require a rule: a callable, as flex_attention takes it."""
    if not callable(rule):
        raise ValueError(f"{name} must be a callable rule, as flex_attention takes it, got "
                         f"{type(rule).__name__}")


def mask_answer(dense: object, device: torch.device) -> Tensor:
    """A mask rule's answer as a bool tensor, refusing one of numbers (nonzero is no answer)."""
    answer = torch.as_tensor(dense, device=device)
    if answer.dtype != torch.bool:
        raise ValueError(f"mask_mod must answer True or False (a bool tensor, as flex_attention's "
                         f"mask_mod does), got {answer.dtype}")
    return answer


def check_block_size(block_size: object) -> int | tuple[int, int] | None:
    """Require a tiled kernel's block size: None (its default), an integer >= 1, or a pair
    (B_q, B_k) of them; return it in Python ints (a NumPy integer is taken, as sizes are)."""
    sizes = block_size if isinstance(block_size, tuple) else (block_size,)
    valid = len(sizes) == (2 if isinstance(block_size, tuple) else 1) and all(
        is_integer(s) and int(s) >= 1 for s in sizes
    )
    if block_size is None:
        return None
    if not valid:
        raise ValueError(
            f"block_size must be an integer >= 1 or a pair of them, got {block_size!r}"
        )
    ints = tuple(int(cast(Integral, s)) for s in sizes)
    return (ints[0], ints[1]) if isinstance(block_size, tuple) else ints[0]


def check_kv_heads(query: Tensor, kv: Tensor, name: str, dim: int = -3) -> None:
    """``enable_gqa``: require query (..., h, t_q, d_k) and kv (..., h_kv, t_k, d) with h_kv
    dividing h, as PyTorch's ``scaled_dot_product_attention`` does; the heads are dimension
    ``dim`` (1 in the varlen layout (t, h, d))."""
    for tensor_name, tensor in (("query", query), (name, kv)):
        if tensor.dim() < 3:
            raise ValueError(
                f"with enable_gqa=True, {tensor_name} must have at least 3 dimensions "
                f"(..., heads, t, d), got shape {tuple(tensor.shape)}"
            )
    h, h_kv = query.shape[dim], kv.shape[dim]
    if h_kv == 0 or h % h_kv != 0:
        raise ValueError(
            f"with enable_gqa=True, {name}'s number of heads (dim {dim}) must divide the query's "
            f"h={h}, got {h_kv}"
        )


def check_causal_options(is_causal: bool, alignment: str, window: int | None) -> int | None:
    """``is_causal`` a bool; the causal mask's alignment and window: known values, and only with
    ``is_causal``. Returns the window as a Python int (a NumPy integer is taken), or None."""
    check_flags(is_causal=is_causal)
    check_alignment(alignment)
    if window is not None and (not is_integer(window) or window < 1):
        raise ValueError(f"window must be None or an integer >= 1, got {window!r}")
    if not is_causal and (window is not None or alignment != "top_left"):
        raise ValueError(
            "window and alignment apply to causal attention only: pass is_causal=True, "
            f"got is_causal={is_causal!r}, window={window!r}, alignment={alignment!r}"
        )
    return None if window is None else int(window)
