"""Import a build hook of docs/hooks/ as a module, for the tests (the hooks are not a package)."""

import importlib.util
from pathlib import Path
from types import ModuleType

HOOKS = Path(__file__).resolve().parents[1] / "docs" / "hooks"


def load_hook(name: str) -> ModuleType:
    """Import docs/hooks/<name>.py as the module ``book_<name>_hook``."""
    spec = importlib.util.spec_from_file_location(f"book_{name}_hook", HOOKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
