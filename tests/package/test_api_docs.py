"""The package as a typed, documented library: every public name resolves its annotations, has
Google-style Args / Returns / Raises sections and an example that runs, and a user's script
type-checks against the annotations the package ships (py.typed).

"Public" is what the API reference shows: ``attention.__all__`` and the public names of each
module that a page of docs/reference/ shows (its ``__all__``, or what it defines without a leading
underscore).
"""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import re
import tomllib
import typing
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import griffe
import pytest
from _reach import checks_flag, reaches

import attention
from book.docstrings import reference_modules

REPO = Path(__file__).resolve().parents[2]


def api_modules() -> list[ModuleType]:
    """The modules the pages of docs/reference/ show, page by page (the Triton kernels' modules
    only where Triton is installed: it has wheels for Linux only)."""
    modules = []
    for name in reference_modules():
        try:
            modules.append(importlib.import_module(name))
        except ModuleNotFoundError as error:
            if error.name != "triton":
                raise
    return modules


def public_names(module: ModuleType) -> list[str]:
    """The callables the API page shows for ``module``."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, o in vars(module).items() if not n.startswith("_")
                 and (inspect.isfunction(o) or inspect.isclass(o)) and o.__module__ == module.__name__]
    # Functions and classes; a Triton kernel (a ``triton.jit`` object) is called from kernels only.
    return [n for n in names if inspect.isfunction(o := getattr(module, n)) or inspect.isclass(o)]


MODULES = api_modules()
# (module, name) of every public callable, each object once: where it is defined.
PUBLIC: list[tuple[str, str]] = []
for _module in MODULES:
    for _name in public_names(_module):
        _obj = getattr(_module, _name)
        if getattr(_obj, "__module__", _module.__name__) == _module.__name__:
            PUBLIC.append((_module.__name__, _name))
_IDS = [f"{m.removeprefix('attention.')}.{n}" for m, n in PUBLIC]


def test_every_top_level_name_is_covered() -> None:
    covered = {id(getattr(importlib.import_module(m), n)) for m, n in PUBLIC}
    missing = [n for n in attention.__all__ if (inspect.isfunction(o := getattr(attention, n))
               or inspect.isclass(o)) and id(o) not in covered]
    assert missing == [], f"re-exported by attention but on no module of the API page: {missing}"


def test_version_is_the_installed_distribution_version() -> None:
    import importlib.metadata

    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    assert attention.__version__ == importlib.metadata.version("attention") == project["version"]


def test_the_wheel_ships_the_typing_marker() -> None:
    # PEP 561: without py.typed in the installed package, mypy and pyright ignore its annotations.
    assert (REPO / "src" / "attention" / "py.typed").is_file()
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]
    assert "py.typed" in setuptools["package-data"]["attention"]


def _functions(obj: Any) -> list[Callable[..., Any]]:
    """``obj`` itself, or a class's ``__init__`` and its public methods (class and static ones
    too, as their functions)."""
    if not inspect.isclass(obj):
        return [obj]
    methods = [getattr(v, "__func__", v) for k, v in vars(obj).items() if not k.startswith("_")
               and inspect.isfunction(getattr(v, "__func__", v))]
    return [obj.__init__, *methods] if "__init__" in vars(obj) else methods


@pytest.mark.parametrize(("module", "name"), PUBLIC, ids=_IDS)
def test_type_hints_resolve(module: str, name: str) -> None:
    # What typing.get_type_hints, dataclasses, pydantic and IDEs evaluate: every name defined.
    for function in _functions(getattr(importlib.import_module(module), name)):
        typing.get_type_hints(function)


def _raises_value_error(node: ast.AST) -> bool:
    """A ``raise ValueError(...)`` (for :func:`reaches`)."""
    if not (isinstance(node, ast.Raise) and node.exc is not None):
        return False
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return isinstance(exc, ast.Name) and exc.id == "ValueError"


def _checked_flags(function: Callable[..., Any]) -> list[str]:
    """The names ``function`` and the package functions it calls pass to
    ``check_flags(name=value)``."""
    names: list[str] = []

    def collect(node: ast.AST) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "check_flags":
            names.extend(k.arg for k in node.keywords if k.arg)
        return False  # never found: every reachable function is read

    reaches(function, collect)
    return names


@pytest.fixture(scope="module")
def griffe_package() -> griffe.Module:
    """The package as mkdocstrings reads it (statically, Google-style docstrings)."""
    return griffe.load("attention", search_paths=[str(REPO / "src")], docstring_parser="google")


# A sibling's arguments by reference, as PyTorch's documentation does: a docstring that says
# "Other arguments as in :class:`X`." documents in its Args only what differs (in the
# signature's order), and every other parameter must be documented by X under the same name.
REFERENCE = re.compile(r"(?:Other a|A)rguments as in :(?:func|class):`~?([\w.]+)`")


def _args(docstring: griffe.Docstring) -> list[str]:
    """The parameters a docstring's Args section lists, in order."""
    sections = {s.kind.value: s for s in docstring.parse("google")}
    return [p.name.lstrip("*") for p in getattr(sections.get("parameters"), "value", [])]


def _resolve(name: str, module: str, package: griffe.Module) -> griffe.Object | griffe.Alias | None:
    """The object a Sphinx role names, from ``module``: a name of its own, or a full path."""
    for path in (f"{module}.{name}", name):
        path = path.removeprefix("attention.")
        try:
            return package[path]
        except KeyError:
            continue
    return None


@pytest.mark.parametrize(("module", "name"), PUBLIC, ids=_IDS)
def test_docstring_sections(module: str, name: str, griffe_package: griffe.Module) -> None:
    obj = getattr(importlib.import_module(module), name)
    path = f"{module.removeprefix('attention.')}.{name}"
    docstring = griffe_package[path].docstring
    assert docstring is not None, f"{path} has no docstring"
    sections = {s.kind.value: s for s in docstring.parse("google")}
    signature = inspect.signature(obj)
    parameters = [p.lstrip("*") for p in signature.parameters]
    documented = _args(docstring)
    referred = REFERENCE.search(docstring.value)
    if referred is not None:  # the rest as the sibling documents them, under the same names
        target = _resolve(referred.group(1), module, griffe_package)
        assert target is not None, f"{path}: {referred.group(0)} names no object of the package"
        theirs = _args(target.docstring) if target.docstring is not None else []
        missing = [p for p in parameters if p not in documented and p not in theirs]
        assert missing == [], f"{path}: neither it nor {target.path} documents {missing}"
        parameters = [p for p in parameters if p in documented]
    assert documented == parameters, f"{path}: Args lists {documented}, the signature {parameters}"
    if not inspect.isclass(obj):
        generator = inspect.isgeneratorfunction(obj)
        returns = signature.return_annotation not in (None, "None", inspect.Signature.empty)
        if returns:
            assert ("yields" if generator else "returns") in sections, f"{path}: no Returns"
    # A class checks its arguments in __init__, or in a dataclass's __post_init__.
    functions = [getattr(obj, f, None) for f in ("__init__", "__post_init__")] if inspect.isclass(obj) else [obj]
    raised = [str(e.annotation) for e in getattr(sections.get("raises"), "value", [])]
    if any(reaches(f, _raises_value_error) for f in functions if f is not None):
        assert "ValueError" in raised, f"{path} raises ValueError: no Raises section"
    # a flag it checks itself is named where Raises says it refuses a non-bool: in one clause
    refusals = " ".join(" ".join(e.description.split()) for e in getattr(sections.get("raises"), "value", []))
    # the list that ends in "not a bool" (``a``, ``b`` or ``c`` that is not a bool): 60 characters,
    # asides in parentheses left out ("(1, or 2 with keep_first)" names no refused flag)
    plain = re.sub(r"\([^()]*\)", "", refusals)
    lists = [plain[max(0, m.start() - 60):m.start()] for m in re.finditer("not a bool", plain)]
    unnamed = [flag for f in functions if f is not None for flag in _checked_flags(f)
               if flag in parameters and not any(re.search(rf"\b{flag}\b", text) for text in lists)]
    assert unnamed == [], f"{path} refuses a non-bool {unnamed}: not in its Raises"
    # another library's keyword (flash-attn's causal=) raises a TypeError naming ours
    refused = getattr(obj, "refused_keywords", {})
    if refused:
        assert "TypeError" in raised, f"{path} refuses {sorted(refused)}: no TypeError in Raises"
    examples = sections.get("examples")
    assert examples is not None and any(
        kind.value == "examples" for kind, _ in examples.value
    ), f"{path}: no Examples section with a >>> line"


# Flags annotated bool that no check_flags refuses, on purpose: callable (module-relative
# qualified name) -> its unchecked flags. Only where refusing would be wrong or is done before.
UNCHECKED_FLAGS: dict[str, tuple[str, ...]] = {
    # The Triton launchers check nothing (their docstrings say so): triton_flash_attention and
    # TritonOptions refuse a non-bool before a flag reaches them, and their host time counts
    # at small t.
    "triton_forward.mask_args": ("causal",),
    "triton_forward.forward": ("causal", "longest_first", "descriptors", "warp_specialize"),
    "triton_backward.backward": ("causal", "deterministic", "longest_first"),
}


@pytest.mark.parametrize(("module", "name"), PUBLIC, ids=_IDS)
def test_bool_flags_refuse_non_bools(module: str, name: str) -> None:
    # A flag that is truth-tested does the opposite of what a string from a config file says
    # ("no" is true): every parameter annotated bool is passed to check_flags on every path, by
    # the callable or by the package function it is passed to (a class's in __init__ or a
    # dataclass's __post_init__); a check under an if, such as a norm's, does not count.
    obj = getattr(importlib.import_module(module), name)
    unchecked = []
    for function in _functions(obj):
        flags = [p for p, hint in typing.get_type_hints(function).items()
                 if hint is bool and p != "return"]
        checkers = [function]
        if inspect.isclass(obj) and function.__name__ == "__init__":
            checkers.append(getattr(obj, "__post_init__", None))
        where = f"{module.removeprefix('attention.')}.{function.__qualname__}"
        exempt = UNCHECKED_FLAGS.get(where, ())
        unchecked += [f"{where}: {flag}" for flag in flags if flag not in exempt
                      and not any(checks_flag(f, flag) for f in checkers if f is not None)]
    assert unchecked == [], f"bool flags that accept any value (no check_flags): {unchecked}"


def test_unchecked_flags_are_bool_flags_of_public_callables() -> None:
    # an exemption that outlives its flag (renamed, or checked after all) is removed
    functions = {f"{m.removeprefix('attention.')}.{f.__qualname__}": f for m, n in PUBLIC
                 for f in _functions(getattr(importlib.import_module(m), n))}
    stale = [f"{where}: {flag}" for where, flags in UNCHECKED_FLAGS.items() for flag in flags
             if where not in functions or typing.get_type_hints(functions[where]).get(flag) is not bool
             or checks_flag(functions[where], flag)]
    assert stale == []


# What the examples may use besides their module's own names: the package's top-level names.
_TOP_LEVEL = {name: getattr(attention, name) for name in attention.__all__}


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__ for m in MODULES])
def test_docstring_examples_run(module: ModuleType) -> None:
    # Every >>> line of the module's docstrings, run in the module's namespace.
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(module, globs={**_TOP_LEVEL, **vars(module)})
    output: list[str] = []
    for test in tests:
        runner.run(test, out=output.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(output)


def test_devices_are_torch_types_device() -> None:
    # One spelling of "a device", PyTorch's own: a torch.device, a string or an index.
    from torch.types import Device

    wrong = []
    for module, name in PUBLIC:
        for function in _functions(getattr(importlib.import_module(module), name)):
            hint = typing.get_type_hints(function).get("device")
            if hint is not None and hint != Device:
                wrong.append(f"{module}.{function.__qualname__}: {hint}")
    assert wrong == []
