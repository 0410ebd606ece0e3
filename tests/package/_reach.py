"""What a package function does, itself or through the package functions it calls: read from
their source, for the tests of rules every function must follow (a Raises section for each
ValueError, a check of every scale)."""

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any


def _source(function: Callable[..., Any]) -> ast.Module | None:
    """The parsed source of ``function`` (None for one without Python source)."""
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError):
        return None


def reaches(function: Callable[..., Any], found: Callable[[ast.AST], bool],
            seen: set[int] | None = None) -> bool:
    """Whether a node of ``function``'s source, or of a package function it calls by name,
    satisfies ``found``."""
    seen = set() if seen is None else seen
    function = inspect.unwrap(function)  # a decorated function's own source and globals
    seen.add(id(function))
    tree = _source(function)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if found(node):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            callee = getattr(function, "__globals__", {}).get(node.func.id)
            if (inspect.isfunction(callee) and callee.__module__.startswith("attention")
                    and id(callee) not in seen and reaches(callee, found, seen)):
                return True
    return False


def _unconditional(body: list[ast.stmt]) -> list[ast.AST]:
    """The nodes of ``body`` that run whenever it runs: not inside an if, a loop, an except
    clause or a nested function (a ``with`` block and a ``try`` block start)."""
    nodes: list[ast.AST] = []
    for statement in body:
        if isinstance(statement, ast.With):
            nodes += [n for item in statement.items for n in ast.walk(item)]
            nodes += _unconditional(statement.body)
        elif isinstance(statement, ast.Try):
            nodes += _unconditional(statement.body) + _unconditional(statement.finalbody)
        elif not isinstance(statement, (ast.If, ast.For, ast.While, ast.Match,
                                        ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            nodes += list(ast.walk(statement))
    return nodes


def checks_flag(function: Callable[..., Any], flag: str, seen: set[tuple[int, str]] | None = None) -> bool:
    """Whether ``function`` always refuses a non-bool ``flag`` (one of its parameters, or a
    dataclass's field in its ``__post_init__``): it calls ``check_flags(flag=flag)`` on every path, or passes ``flag`` on every path to a
    package function that does so for the parameter it lands in."""
    seen = set() if seen is None else seen
    function = inspect.unwrap(function)
    if (id(function), flag) in seen:
        return False
    seen.add((id(function), flag))
    tree = _source(function)
    if tree is None:
        return False
    definition = tree.body[0]
    if not isinstance(definition, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for node in _unconditional(definition.body):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id == "check_flags" and any(
            k.arg == flag and ast.unparse(k.value) in (flag, f"self.{flag}")  # a dataclass's field
            for k in node.keywords
        ):
            return True
        callee = getattr(function, "__globals__", {}).get(node.func.id)
        if not (inspect.isfunction(callee) or inspect.isclass(callee)):
            continue
        if not getattr(callee, "__module__", "").startswith("attention"):
            continue
        target = callee.__init__ if inspect.isclass(callee) else callee
        try:
            parameters = [p for p in inspect.signature(target).parameters if p != "self"]
        except (TypeError, ValueError):
            continue
        landed = [parameters[i] for i, arg in enumerate(node.args)
                  if i < len(parameters) and isinstance(arg, ast.Name) and arg.id == flag]
        landed += [k.arg for k in node.keywords if isinstance(k.value, ast.Name) and k.value.id == flag]
        if any(checks_flag(target, name, seen) for name in landed if name):
            return True
    return False
