"""The whole book on one page (tools/book/hooks/print_page.py): the hook's functions, called
directly. What the built print page holds is checked in tests/browser/test_figures_print.py."""

from __future__ import annotations

import pytest
from mkdocs.exceptions import PluginError

from book.hooks import print_page as hook


class TestBadInput:
    def test_a_dirty_build_is_refused_with_the_commands_that_work(self) -> None:
        # A dirty build renders the changed pages only, and the print page needs every page: it
        # failed with a KeyError on the first page it had no content for.
        with pytest.raises(PluginError, match=r"expected a full build, got `mkdocs build --dirty`"
                           r".*`mkdocs serve --dirty`.*`mkdocs build --strict`"):
            hook.on_startup(command="build", dirty=True)


@pytest.mark.parametrize(("command", "dirty"), [("build", False), ("serve", True), ("serve", False)])
def test_full_builds_and_serve_are_allowed(command: str, dirty: bool) -> None:
    # `mkdocs serve --dirty` keeps the content of the pages its first build rendered.
    assert hook.on_startup(command=command, dirty=dirty) is None
