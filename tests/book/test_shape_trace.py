"""The shape-trace table of chapter 5, checked against real forward passes of MultiHeadAttention.

Section 5.2 (docs/chapters/05-multi-head-attention/one-projection-split-into-heads.md) keeps a
Markdown table with the shape of the tensor after every step of ``MultiHeadAttention.forward``, in
the legend's letters and with the running example's numbers. These tests parse that table and
compare it with the shapes PyTorch actually produces: a ``TorchFunctionMode`` records the name and
shape of the result of every torch operation during a forward pass, and the table's rows must
appear among those records, in order, produced by the operation each row names.

Notation: b batch size, t tokens, d_in input width, d_out output width, h heads, d_h = d_out / h.
"""

import re

import pytest
import torch
from torch.overrides import TorchFunctionMode

from attention import MultiHeadAttention
from book.constants import REPO
from book.pages import read_page

PAGE = REPO / "docs" / "chapters" / "05-multi-head-attention" / "one-projection-split-into-heads.md"
HEADER = "| step | code | shape | running example |"

# The running example: MultiHeadAttention(3, 2, context_length=6, dropout=0.0, num_heads=2) on journey_batch().
RUNNING = {"b": 2, "t": 6, "d_in": 3, "d_out": 2, "h": 2, "d_h": 1}
# Sizes that are all different, so that a swapped pair of axes cannot go unnoticed.
DISTINCT = {"b": 2, "t": 5, "d_in": 7, "d_out": 12, "h": 3, "d_h": 4}

# Which recorded operations may produce the row, judged from the row's code column.
OPERATIONS = (
    ("@", {"__matmul__", "matmul"}),
    ("softmax", None),  # any operation: a softmax may be written out by hand
    ("view", {"view", "reshape"}),
    ("transpose", {"transpose", "permute"}),
    ("W_", {"linear"}),
    ("out_proj", {"linear"}),
)


def read_table() -> list[dict[str, str]]:
    """The rows of the shape-trace table on the page, as dicts keyed by column name."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADER)
    columns = [cell.strip() for cell in HEADER.strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        rows.append(dict(zip(columns, cells, strict=True)))
    return rows


def parse_shape(text: str, sizes: dict[str, int] | None = None) -> tuple[int, ...]:
    """``"(b, t, d_in)"`` -> (2, 6, 3) with ``sizes``; ``"(2, 6, 3)"`` -> (2, 6, 3) without."""
    if not (text.startswith("(") and text.endswith(")")):
        raise ValueError(f"a shape must be written as (..., ...), got {text!r}")
    names = [name.strip() for name in text[1:-1].split(",")]
    return tuple(sizes[name] if sizes is not None else int(name) for name in names)


def allowed_operations(code: str) -> set[str] | None:
    """The operation names that may produce a row (None: any), or {"input"} for the input."""
    for marker, names in OPERATIONS:
        if marker in code:
            return names
    return {"input"}


class ShapeRecorder(TorchFunctionMode):
    """Records (operation name, result shape) for every torch operation that returns a tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[str, tuple[int, ...]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if isinstance(result, torch.Tensor):
            self.records.append((getattr(func, "__name__", str(func)), tuple(result.shape)))
        return result


def record_forward(sizes: dict[str, int]) -> list[tuple[str, tuple[int, ...]]]:
    """Records of one forward pass of MultiHeadAttention with the given sizes, input first."""
    torch.manual_seed(123)
    mha = MultiHeadAttention(sizes["d_in"], sizes["d_out"], sizes["h"], sizes["t"], 0.0)
    x = torch.rand(sizes["b"], sizes["t"], sizes["d_in"])  # (b, t, d_in)
    recorder = ShapeRecorder()
    with torch.no_grad(), recorder:
        out = mha(x)  # (b, t, d_out)
    assert out.shape == (sizes["b"], sizes["t"], sizes["d_out"])
    return [("input", tuple(x.shape)), *recorder.records]


def test_table_traces_the_whole_forward_pass():
    rows = read_table()
    assert len(rows) >= 10, "one row per step, from the input to the output projection"
    assert rows[0]["shape"] == "(b, t, d_in)"
    assert rows[-1]["shape"] == "(b, t, d_out)"
    assert "out_proj" in rows[-1]["code"]


def test_running_example_column_is_the_letters_evaluated():
    for row in read_table():
        assert parse_shape(row["running example"]) == parse_shape(row["shape"], RUNNING), row


@pytest.mark.parametrize("sizes", [DISTINCT, RUNNING], ids=["distinct-sizes", "running-example"])
def test_table_rows_occur_in_order_in_a_real_forward_pass(sizes):
    records = record_forward(sizes)
    position = 0
    for row in read_table():
        expected_shape = parse_shape(row["shape"], sizes)
        names = allowed_operations(row["code"])
        while position < len(records) and not (
            records[position][1] == expected_shape and (names is None or records[position][0] in names)
        ):
            position += 1
        assert position < len(records), (
            f"row {row} ({expected_shape}) not found, in order, among the recorded operations "
            f"{records}"
        )
        position += 1


def test_every_reshape_of_the_forward_pass_is_in_the_table():
    table_shapes = {parse_shape(row["shape"], DISTINCT) for row in read_table()}
    reshapes = [
        (name, shape)
        for name, shape in record_forward(DISTINCT)
        if name in {"view", "reshape", "transpose", "permute"}
    ]
    assert len(reshapes) >= 8, "3 views + 3 transposes for q, k, v, keys^T, and the merge"
    for name, shape in reshapes:
        assert shape in table_shapes, f"{name} produced {shape}, which no row of the table lists"


def test_printed_trace_on_the_page_equals_the_table():
    # The page runner's scanner finds the fence and its output block (the one fence scanner).
    fences = [fence for fence in read_page(PAGE).fences if 'show("x", x)' in fence.source]
    assert len(fences) == 1, "one fence of the page traces the shapes with show(...)"
    block = fences[0].output
    assert block is not None, "the trace snippet must be followed by its output block"
    shapes = re.findall(r"(\(\d+(?:, \d+)*\))$", block.text, re.MULTILINE)
    printed = [parse_shape(shape) for shape in shapes]
    assert printed == [parse_shape(row["running example"]) for row in read_table()]
