"""Our Triton FlashAttention kernel: correct against torch's SDPA, and a clear error where it cannot run.

Without a GPU the kernel runs in Triton's interpreter, which Triton chooses when the kernel is
defined, from ``TRITON_INTERPRET=1``. The variable must therefore be set before Triton is first
imported, and must not leak into the other tests: each check runs in a fresh Python process.

Triton 3.9's interpreter computes ``tl.dot`` on bfloat16 tiles wrongly (a 16 × 16 product is off
by ~1e10), so on CPU only the float16 path is checked; the kernel has no dtype-specific code, and
the bfloat16 path runs on a GPU.
"""

import importlib.util
import json
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch



def why_no_triton() -> str:
    """Why Triton is not installed here (requirements.txt installs it only where it has wheels)."""
    here = f"{platform.system()} {platform.machine()}"
    if here in ("Linux x86_64", "Linux aarch64"):
        return f"Triton is not installed: pip install -r requirements.txt installs it on {here}"
    return f"Triton has no wheels for {here}, only for Linux x86_64 and aarch64: not installed"


# Skipped where Triton is not installed; an installed but broken Triton fails the tests instead.
needs_triton = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason=why_no_triton()
)


def run_python(code: str, **env: str) -> dict:
    """Run ``code`` in a fresh interpreter with extra environment variables; parse its last line."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],  # dedent: the scripts below may be indented
        env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


INTERPRETER_SCRIPT = """
import json, torch
import torch.nn.functional as F
from attention.triton_flash import triton_available, triton_flash_attention

torch.manual_seed(0)
errors = {}
# t not a multiple of the block (masked edges), t_q != t_k, both head widths of the kernel.
for causal in (False, True):
    for t_q, t_k, d_h in ((80, 80, 64), (40, 72, 128)):
        q = torch.randn(2, 2, t_q, d_h, dtype=torch.float16)
        k, v = (torch.randn(2, 2, t_k, d_h, dtype=torch.float16) for _ in range(2))
        out = triton_flash_attention(q, k, v, is_causal=causal, block_m=32, block_n=32)
        want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        error = (out.float() - want).abs().max().item()
        errors[f"causal={causal} t_q={t_q} t_k={t_k} d_h={d_h}"] = [str(out.dtype), error]

x = torch.randn(1, 1, 16, 64, dtype=torch.float16)
messages = []
for args, kwargs in (
    ((x.float(), x.float(), x.float()), {}),
    ((x[..., :48], x[..., :48], x[..., :48]), {}),
    ((x, x, x), {"block_m": 24}),
    ((x, x[:, :, :8], x), {}),
):
    try:
        triton_flash_attention(*args, **kwargs)
    except ValueError as error:
        messages.append(str(error))
print(json.dumps({"available": triton_available(), "errors": errors, "messages": messages}))
"""


@pytest.fixture(scope="module")
def interpreted() -> dict:
    """The kernel's results and error messages, from one process running Triton's interpreter."""
    return run_python(INTERPRETER_SCRIPT, TRITON_INTERPRET="1")


@needs_triton
def test_kernel_matches_sdpa_in_the_interpreter(interpreted):
    assert interpreted["available"][0] and "interpreter" in interpreted["available"][1]
    assert len(interpreted["errors"]) == 4
    for case, (dtype, error) in interpreted["errors"].items():
        assert dtype == "torch.float16", case
        assert error < 2e-3, case  # float16 rounding of the output; a wrong mask gives O(1)


@needs_triton
def test_kernel_rejects_what_it_does_not_handle(interpreted):
    assert interpreted["messages"] == [
        "query must be float16 or bfloat16, got torch.float32",
        "d_h must be one of (16, 32, 64, 128), got 48",
        "block_m must be a power of two >= 16, got 24",
        "key and value must have shape (1, 1, t_k, 64), got (1, 1, 8, 64) and (1, 1, 16, 64)",
    ]


@needs_triton
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without CUDA")
def test_without_cuda_the_error_says_why():
    from attention.triton_flash import triton_available, triton_flash_attention

    if os.environ.get("TRITON_INTERPRET"):
        pytest.skip("TRITON_INTERPRET is set in this process: the interpreter is available")
    ok, reason = triton_available()
    assert not ok and "no CUDA device" in reason
    x = torch.randn(1, 1, 16, 64, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="cannot run here: no CUDA device"):
        triton_flash_attention(x, x, x)


def test_without_triton_the_error_says_why():
    result = run_python(
        """
        import json, sys
        sys.modules["triton"] = None  # what a machine without Triton sees: ImportError
        import torch
        from attention.triton_flash import triton_available, triton_flash_attention

        x = torch.randn(1, 1, 16, 64, dtype=torch.float16)
        try:
            triton_flash_attention(x, x, x)
        except RuntimeError as error:
            message = str(error)
        print(json.dumps({"available": triton_available(), "message": message}))
        """
    )
    assert result["available"][0] is False and "Triton is not installed" in result["available"][1]
    assert result["message"].startswith("triton_flash_attention cannot run here: Triton is not installed")


def test_without_triton_the_kernel_tests_are_skipped_with_the_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """This module, collected where Triton is not installed (macOS, Windows): its three kernel
    tests are skipped, each saying why. (Deselected here: the test of the package's message
    without Triton, which starts a Python process, and the tests of the skip itself.)"""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name.split(".")[0] == "triton" else find_spec(name, *args),
    )
    pytester.makefile(".py", test_kernel=Path(__file__).read_text(encoding="utf-8"))
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-p", "no:xdist", "-rs",
        "-k", "not without_triton and not skip_reason",
    )
    result.assert_outcomes(skipped=3)
    skips = [line for line in result.stdout.lines if line.startswith("SKIPPED")]
    assert len(skips) == 3 and all(line.endswith(f": {why_no_triton()}") for line in skips), skips


@pytest.mark.parametrize(
    ("system", "machine", "reason"),
    [
        ("Linux", "x86_64", "Triton is not installed: pip install -r requirements.txt installs it"),
        ("Darwin", "arm64", "Triton has no wheels for Darwin arm64, only for Linux x86_64 and"),
        ("Windows", "AMD64", "Triton has no wheels for Windows AMD64, only for Linux x86_64 and"),
    ],
)
def test_the_skip_reason_names_the_platform(monkeypatch, system, machine, reason):
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    assert why_no_triton().startswith(reason)
