"""What a package function does, itself or through the package functions it calls: read from
their source, for the tests of rules every function must follow (a Raises section for each
ValueError, a check of every scale)."""

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any


def reaches(function: Callable[..., Any], found: Callable[[ast.AST], bool],
            seen: set[int] | None = None) -> bool:
    """Whether a node of ``function``'s source, or of a package function it calls by name,
    satisfies ``found``."""
    seen = set() if seen is None else seen
    function = inspect.unwrap(function)  # a decorated function's own source and globals
    seen.add(id(function))
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError):
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
