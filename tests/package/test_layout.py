"""The tests mirror the package: a test module per module, bad input in one TestBadInput class."""

import ast
from functools import cache
from pathlib import Path

TESTS = Path(__file__).parent
PACKAGE = TESTS.parents[1] / "src" / "attention"

# Modules without a test module of their own, and where their tests are instead.
TESTED_ELSEWHERE = {
    "_checks": "the checks every module shares: each module's TestBadInput",
    "data": "the book's example inputs, no logic: read by test_self_attention.py, test_causal.py and others",
    "flash_tiles": "test_flash.py: the tiles are flash_attention's, checked through its outputs",
    "triton_forward": "test_triton_flash.py, through triton_flash (Triton's interpreter on a CPU)",
    "triton_backward": "test_triton_flash.py, through triton_flash (Triton's interpreter on a CPU)",
}

# Test modules that check one rule across many modules, not one module.
CROSS_CUTTING = {
    "test_api_docs": "every public name is documented, and its examples run",
    "test_edge_cases": "empty inputs, nan and inf, mask dtypes, for every kernel",
    "test_half_precision": "float16 and bfloat16 errors, for every kernel",
    "test_internal_api": "the shared helpers' public names",
    "test_kernel_conventions": "the calling conventions every kernel shares",
    "test_layout": "this file",
    "test_module_conventions": "the conventions every nn.Module shares",
    "test_module_lists": "__init__, __all__ and the API page list the same modules",
    "test_properties": "hypothesis invariants across kernels",
    "test_reference_outputs": "stored outputs of several modules",
    "test_sinks": "attention sinks, across functional, flash and the KV caches",
    "test_tiny_transformer": "the tiny model: transformer, training and inference together",
}


@cache
def _modules() -> frozenset[str]:
    """The package's modules and sub-packages that hold logic (a def or class of their own)."""
    names = set()
    for path in PACKAGE.iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            names.add(path.name)
        elif path.suffix == ".py" and path.stem != "__init__":
            tree = ast.parse(path.read_text())
            if any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in tree.body):
                names.add(path.stem)
    return frozenset(names)


def _test_modules() -> list[Path]:
    """The package's test modules, the benchmark harness's (in bench/) included."""
    return sorted(TESTS.rglob("test_*.py"))


def test_every_module_has_a_test_module_named_after_it() -> None:
    tested = {p.stem.removeprefix("test_") for p in TESTS.glob("test_*.py")} | {"bench"}
    missing = sorted(_modules() - tested - TESTED_ELSEWHERE.keys())
    assert not missing, f"add tests/package/test_<module>.py (or a TESTED_ELSEWHERE entry) for {missing}"
    stale = sorted(TESTED_ELSEWHERE.keys() - _modules())
    assert not stale, f"TESTED_ELSEWHERE names modules that are gone: {stale}"


def test_every_test_module_is_named_after_a_module_or_a_rule() -> None:
    modules = _modules()
    strays = sorted(
        p.stem for p in TESTS.glob("test_*.py")
        if p.stem.removeprefix("test_") not in modules and p.stem not in CROSS_CUTTING
    )
    assert not strays, f"name these after the module they test, or list them in CROSS_CUTTING: {strays}"
    gone = sorted(CROSS_CUTTING.keys() - {p.stem for p in TESTS.glob("test_*.py")})
    assert not gone, f"CROSS_CUTTING names test modules that are gone: {gone}"


def _raises_value_error(node: ast.AST) -> list[ast.Call]:
    """Every ``pytest.raises(ValueError, ...)`` call under ``node``."""
    return [
        call for call in ast.walk(node)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "raises"
        and call.args and isinstance(call.args[0], ast.Name) and call.args[0].id == "ValueError"
    ]


def test_bad_input_lives_in_one_test_bad_input_class() -> None:
    """A test that expects ValueError sits in its module's one TestBadInput and matches the message."""
    problems = []
    for path in _test_modules():
        name = str(path.relative_to(TESTS))
        tree = ast.parse(path.read_text())
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TestBadInput"]
        if len(classes) > 1:
            problems.append(f"{name}: {len(classes)} TestBadInput classes")
        rest = ast.Module(body=[n for n in tree.body if n not in classes], type_ignores=[])
        problems += [
            f"{name}: move {n.name} into TestBadInput" for n in ast.walk(rest)
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test") and _raises_value_error(n)
        ]
        problems += [
            f"{name}:{call.lineno}: pytest.raises(ValueError) without match="
            for call in _raises_value_error(tree) if not any(k.arg == "match" for k in call.keywords)
        ]
    assert not problems, "\n".join(problems)
