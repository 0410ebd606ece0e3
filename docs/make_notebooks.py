"""Write every chapter's notebook into notebooks/, the copies that "Open in Colab" opens.

    python docs/make_notebooks.py

The build makes the same notebooks for download (docs/hooks/notebooks.py); tests/test_notebooks.py
fails when the copies in notebooks/ differ from them, and names this command.
"""

import importlib.util
import sys
from pathlib import Path

HOOK = Path(__file__).resolve().parent / "hooks" / "notebooks.py"

if __name__ == "__main__":
    spec = importlib.util.spec_from_file_location("book_notebooks_hook", HOOK)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    for path in hook.write_notebooks(hook.REPO / "docs", hook.repository_config()):
        print(path.relative_to(hook.REPO), file=sys.stderr)
