"""Find the Python fences of a Markdown page, their output blocks, and rewrite those blocks.

A page is parsed level by level. Level 0 is the whole page; markdown-it (CommonMark, the parser
of the page runner) finds its fences, including those in lists and block quotes. The body
of each container that Python-Markdown extensions open with a marker line,

    !!! note "..."      ??? example "..."      ???+ success "..."      === "Tab"

is the run of following lines indented by 4 spaces (or blank). markdown-it cannot see fences
there (4 spaces make indented code or paragraph text), so each body is dedented by 4 spaces and
parsed as a level of its own, recursively: nested ``??? success`` inside ``??? example`` is found.

A safety net then looks at every line that opens a Python fence: if it lies in no fence that was
found at any level, the fence would escape testing, and the page reports a problem for it.

Line numbers: ``start`` and ``end`` are 0-based indices into the page's lines (``end`` is one
past the closing fence line); ``line`` is the 1-based number of the opening line, as editors show.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

PYTHON_LANGUAGES = frozenset({"python", "py", "python3"})
UNSUPPORTED_OPTIONS = ("fixture:", "runner:", "retry:", "notest")
OUTPUT_INFO = "{.text .output}"

_CONTAINER = re.compile(r"(?:!!!\+?|\?\?\?\+?)\s+\S|===\+?\s+\"")
_FENCE_START = re.compile(r"(?P<prefix>[ \t>]*)(?P<marks>`{3,}|~{3,})")
PYTHON_FENCE_OPENER = re.compile(
    r"[ \t>]*(?:`{3,}|~{3,})\s*"
    r"(?:\{[^}]*?\.(?:python3?|py)(?=[\s}])|(?:python3?|py)(?=[\s{]|$))",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class OutputBlock:
    """A ```` ```{.text .output} ```` block: where it is and what it shows."""

    start: int
    end: int
    text: str

    @property
    def line(self) -> int:
        """1-based line number of the block's opening fence."""
        return self.start + 1


@dataclass(frozen=True)
class Fence:
    """A Python fence, with its dedented source and the output block that follows it, if any.

    ``prefix`` is what precedes the backticks on the opening line (the indentation of an
    admonition or list, or ``> `` in a block quote); an inserted output block repeats it.
    """

    start: int
    end: int
    source: str
    prefix: str
    continuation: bool
    output: OutputBlock | None

    @property
    def line(self) -> int:
        """1-based line number of the fence's opening line."""
        return self.start + 1


@dataclass(frozen=True)
class Problem:
    """Something on a page the runner refuses to pass over silently."""

    line: int
    message: str


@dataclass
class ParsedPage:
    """Everything the runner needs from one page.

    ``chains`` holds, for each fence in page order, the index of the fence that starts its chain
    (itself for a ```` ```python ```` fence). ``outputs`` holds every output block of the page,
    at any level, in page order (those that follow no Python fence too); ``other_fences`` the
    (start, end) of every other fence (``text``, ``bash``, ...), in page order. ``column_shift`` maps a
    0-based page line inside a fence to the number of characters the fence's code was dedented
    by on that line.
    """

    fences: list[Fence] = field(default_factory=list)
    outputs: list[OutputBlock] = field(default_factory=list)
    other_fences: list[tuple[int, int]] = field(default_factory=list)
    chains: list[int] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    column_shift: dict[int, int] = field(default_factory=dict)


def split_lines(text: str) -> list[str]:
    """Split ``text`` into lines, each keeping its line ending, breaking at ``\\n`` only."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def info_words(info: str) -> list[str]:
    """The words of a fence's info string, the language first.

    Two syntaxes: CommonMark's ``python continuation`` (the first word is the language) and the
    braces of pymdownx.superfences, which Material renders, ``{.python continuation}``: there the
    language is the first word that starts with a dot, and it comes back first, without the dot.
    Other words keep their order (``{.text .output}`` gives ``["text", ".output"]``).
    """
    info = info.strip()
    if not info.startswith("{"):
        return info.split()
    words = info.strip("{}").split()
    language = next((word for word in words if word.startswith(".")), None)
    if language is not None:
        words.remove(language)
        words.insert(0, language[1:])
    return words


def is_output_info(info: str) -> bool:
    """Whether a fence's info string marks it as an output block (``{.text .output}``)."""
    words = info_words(info)
    return bool(words) and (words[0] == "output" or ".output" in words[1:])


def _dedent_container(line: str) -> str | None:
    """The line without one level of container indentation, or None if it ends the body."""
    if line.startswith("\t"):
        return line[1:]
    if line.startswith("    "):
        return line[4:]
    return "" if not line.strip() else None


class _PageParser:
    """One parse of one page; ``covered`` collects every line inside a fence, at any level."""

    def __init__(self, text: str, md: MarkdownIt) -> None:
        self.md = md
        self.raw_lines = [line.rstrip("\r\n") for line in split_lines(text)]
        self.page = ParsedPage()
        self.covered: set[int] = set()
        self.claimed_outputs: set[int] = set()
        self.outputs: list[OutputBlock] = []

    def parse(self) -> ParsedPage:
        self._parse_level(self.raw_lines, 0)
        self._check_escaped_fences()
        self._check_orphan_outputs()
        self._link_chains()
        self.page.outputs = sorted(self.outputs, key=lambda block: block.start)
        self.page.other_fences.sort()
        self.page.problems.sort(key=lambda problem: problem.line)
        return self.page

    def _parse_level(self, lines: list[str], offset: int) -> None:
        tokens = self.md.parse("\n".join(lines) + "\n")
        level_covered: set[int] = set()
        for i, token in enumerate(tokens):
            if not token.map:
                continue
            start, end = token.map[0] + offset, token.map[1] + offset
            if token.type == "html_block" and token.content.lstrip().startswith("<!--"):
                self.covered.update(range(start, end))
            if token.type != "fence":
                continue
            self.covered.update(range(start, end))
            level_covered.update(range(token.map[0], token.map[1]))
            if is_output_info(token.info):
                self.outputs.append(OutputBlock(start, end, token.content))
                continue
            words = info_words(token.info)
            if not words or words[0].lower() not in PYTHON_LANGUAGES:
                self.page.other_fences.append((start, end))
                continue
            following = tokens[i + 1] if i + 1 < len(tokens) else None
            output = None
            if following is not None and following.type == "fence" and following.map:
                if is_output_info(following.info):
                    output = OutputBlock(
                        following.map[0] + offset, following.map[1] + offset, following.content
                    )
                    self.claimed_outputs.add(output.start)
            self._add_fence(start, end, token.content, words[1:], output)
        self._parse_containers(lines, offset, level_covered)

    def _parse_containers(self, lines: list[str], offset: int, level_covered: set[int]) -> None:
        i = 0
        while i < len(lines):
            if i in level_covered or not _CONTAINER.match(lines[i]):
                i += 1
                continue
            body = []
            j = i + 1
            while j < len(lines):
                dedented = _dedent_container(lines[j])
                if dedented is None:
                    break
                body.append(dedented)
                j += 1
            if body:
                self._parse_level(body, offset + i + 1)
            i = j

    def _add_fence(
        self, start: int, end: int, source: str, options: list[str], output: OutputBlock | None
    ) -> None:
        for option in options:
            if option.startswith(UNSUPPORTED_OPTIONS):
                self.page.problems.append(
                    Problem(
                        start + 1,
                        f"the fence option {option!r} is not supported: every Python fence runs "
                        "as a program, in a fresh namespace or as a {.python continuation}",
                    )
                )
        opener = self.raw_lines[start]
        match = _FENCE_START.match(opener)
        prefix = match.group("prefix") if match else ""
        for k, code_line in enumerate(source.splitlines()):
            page_line = self.raw_lines[start + 1 + k] if start + 1 + k < len(self.raw_lines) else ""
            if page_line.endswith(code_line):
                self.page.column_shift[start + 1 + k] = len(page_line) - len(code_line)
        fence = Fence(start, end, source, prefix, "continuation" in options, output)
        self.page.fences.append(fence)

    def _check_escaped_fences(self) -> None:
        for index, line in enumerate(self.raw_lines):
            if index not in self.covered and PYTHON_FENCE_OPENER.match(line):
                self.page.problems.append(
                    Problem(
                        index + 1,
                        "this Python fence is not collected, so it would never run: put it at the "
                        "top level, in a list, or in the body of an admonition, ??? block or "
                        "content tab indented by exactly 4 spaces per level",
                    )
                )

    def _check_orphan_outputs(self) -> None:
        for block in self.outputs:
            if block.start not in self.claimed_outputs:
                self.page.problems.append(
                    Problem(
                        block.line,
                        "this output block does not follow a Python fence (blank lines may "
                        "separate them, nothing else), so nothing checks it",
                    )
                )

    def _link_chains(self) -> None:
        self.page.fences.sort(key=lambda fence: fence.start)
        for index, fence in enumerate(self.page.fences):
            if fence.continuation and index == 0:
                self.page.problems.append(
                    Problem(
                        fence.line,
                        "a {.python continuation} fence must follow a Python fence it continues; "
                        "this one is the first on the page",
                    )
                )
            chain_start = self.page.chains[-1] if fence.continuation and index else index
            self.page.chains.append(chain_start)


def parse_page(text: str, md: MarkdownIt | None = None) -> ParsedPage:
    """Parse the Markdown ``text`` of a page with the markdown-it parser ``md`` (default:
    CommonMark, the parser of the runner). With the default parser, a text parsed before gives
    the same :class:`ParsedPage` again (the notebooks hook and half a dozen test modules read
    every page): read it, do not change it."""
    if md is None:
        return _parse_commonmark(text)
    return _PageParser(text, md).parse()


@functools.lru_cache(maxsize=256)
def _parse_commonmark(text: str) -> ParsedPage:
    from markdown_it import MarkdownIt

    return _PageParser(text, MarkdownIt("commonmark")).parse()


def read_page(path: Path) -> ParsedPage:
    """Parse the page at ``path`` as the runner does: the one fence scanner of the repository,
    used by the runner, the notebooks hook and the tests."""
    return parse_page(path.read_bytes().decode("utf-8"))


def _newline_of(lines: list[str]) -> str:
    return "\r\n" if lines and lines[0].endswith("\r\n") else "\n"


def render_output_block(text: str, prefix: str, newline: str) -> list[str]:
    """Lines (with endings) of an output block showing ``text``, each line led by ``prefix``."""
    body = [line.rstrip() for line in text.rstrip().splitlines()]
    longest = max((len(run) for line in body for run in re.findall(r"`+", line)), default=0)
    marks = "`" * max(3, longest + 1)
    blank = prefix.rstrip()
    lines = [prefix + marks + OUTPUT_INFO]
    lines += [prefix + line if line else blank for line in body]
    lines.append(prefix + marks)
    return [line + newline for line in lines]


def rewrite_outputs(
    text: str, fence_outputs: dict[Fence, str]
) -> tuple[str, list[tuple[int, str]]]:
    """Rewrite the output blocks of the given fences; every other byte of ``text`` is kept.

    ``fence_outputs`` maps a fence of the page to its real output: a fence with output gets its
    block replaced (or one inserted right after it); a fence whose output is empty loses its block.
    Returns the new text and, for the terminal report, each change as (fence line, what changed).
    """
    lines = split_lines(text)
    newline = _newline_of(lines)
    changes = []
    for fence, output in sorted(fence_outputs.items(), key=lambda item: -item[0].start):
        block = fence.output
        if not output.strip():
            if block is None:
                continue
            prose_follows = block.end < len(lines) and lines[block.end].strip()
            first = block.start if prose_follows else fence.end
            del lines[first : block.end]
            changes.append((fence.line, f"removed the output block at line {block.line}"))
            continue
        new_block = render_output_block(output, fence.prefix, newline)
        if block is not None:
            lines[block.start : block.end] = new_block
            changes.append((fence.line, f"rewrote the output block at line {block.line}"))
            continue
        if not lines[fence.end - 1].endswith("\n"):
            lines[fence.end - 1] += newline
        blank = fence.prefix.rstrip() + newline
        inserted = [blank, *new_block]
        if fence.end < len(lines) and lines[fence.end].strip():
            inserted.append(blank)
        lines[fence.end : fence.end] = inserted
        changes.append((fence.line, "inserted an output block"))
    return "".join(lines), changes[::-1]
