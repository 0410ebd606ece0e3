"""The hook that ends a successful ``mkdocs build`` without the interpreter's teardown
(book.hooks.quick_exit): only a build, only when it succeeded, streams flushed first."""

from __future__ import annotations

import pytest

from book.hooks import quick_exit as hook


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The statuses the hook would end the process with (os._exit recorded, not called)."""
    calls: list[int] = []
    monkeypatch.setattr(hook.os, "_exit", calls.append)
    return calls


def test_a_successful_build_ends_with_status_0(exits: list[int]) -> None:
    hook.on_startup("build", False)
    try:  # MkDocs calls on_shutdown from a finally
        pass
    finally:
        hook.on_shutdown()
    assert exits == [0]


@pytest.mark.parametrize("command", ["serve", "gh-deploy"])
def test_other_commands_end_as_usual(exits: list[int], command: str) -> None:
    hook.on_startup(command, False)
    hook.on_shutdown()
    assert exits == []


def test_a_build_that_failed_ends_as_usual(exits: list[int]) -> None:
    hook.on_startup("build", False)
    hook.on_build_error(RuntimeError("a strict build's warnings"))
    hook.on_shutdown()
    hook.on_startup("build", False)  # the next build (mkdocs serve builds again) starts afresh
    with pytest.raises(KeyboardInterrupt):
        try:  # an interrupt is no Exception: MkDocs calls no on_build_error for it
            raise KeyboardInterrupt
        finally:
            hook.on_shutdown()
    assert exits == []
