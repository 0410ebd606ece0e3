"""MkDocs hook: the references page, rendered from docs/references.bib on every build.

docs/references.bib is the one source of the bibliography; docs/references.md is a short stub
with the marker ``<!-- references:generated -->``, which this hook replaces with every entry,
grouped, and within a group sorted by year with code, datasheets and documentation last. The
.bib itself is copied into the site like any file in docs/, and the page links it for download.

Each entry renders as one paragraph with the entry's key as its id (``{: #key }``), so a chapter
cites it as ``references.md#`` followed by the key. Entries that would be cited alike (one first
author, as many authors, one year) get letters, 2023a and 2023b (``year_labels``); a citation
in the text uses the label of the entry it links to (tests/book/test_references.py checks).
The standard fields are BibTeX (LaTeX: ``--``, ``\\&``, ``\\emph{...}``, ``\\texttt{...}``,
``{...}`` protecting case); the book's own fields are Markdown and go to the page verbatim:

- ``group`` (required): the heading the entry is listed under; groups appear in the order of
  their first entry; within a group, entries are sorted by year (``reading_order``), with
  ``@software``, ``@online`` and ``@manual`` (datasheets) after the papers and books.
- ``annotation``: what the book takes from the source.
- ``titleaddon`` (biblatex): a short addition shown in parentheses after the title.
- ``urllabel``: the text of the ``url`` link, where the one derived from the address won't do.
- ``links``: further links, shown after the standard ones (``code: [label](address)``).

A ``note`` or ``annotation`` that begins with a capital letter or a digit is a sentence of its
own; one that begins with ``(`` follows the preceding text after a space, and any other (a
lower-case word, inline code) after a semicolon.

Every entry needs author, title and group, and a year unless it is code (``@software``) or
online documentation (``@online``). A missing field, a repeated key, a key that is not a
lower-case slug, an entry type or a LaTeX command this hook does not know stops the build with the
entry's key.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from pybtex.database import BibliographyData, Entry, Person, parse_string
from pybtex.exceptions import PybtexError
from pybtex.textutils import abbreviate

PAGE = "references.md"
BIB = "references.bib"
MARKER = "<!-- references:generated -->"
KEY = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
TYPES = {"article", "inproceedings", "techreport", "book", "misc", "manual", "software", "online"}
UNDATED_TYPES = {"software", "online"}  # code and documentation: versions, not editions
LAST_TYPES = {"software", "online", "manual"}  # code, documentation and datasheets: after papers
ITALIC_TITLE_TYPES = {"book", "manual"}
VENUE_TYPES = {"article", "inproceedings", "techreport", "book"}  # the others: howpublished
# Last names that stand for more authors: BibTeX's `and others`, the book's `and contributors`.
AUTHOR_TAILS = {"others": "et al.", "contributors": "and contributors"}
LATEX_MACROS = {"emph": "*{}*", "textit": "*{}*", "texttt": "`{}`"}
LATEX_ESCAPES = {"&", "#", "%", "_", "$", "{", "}"}


class Reference:
    """One bibliography entry: its key, BibTeX type, fields and authors, checked on creation."""

    def __init__(self, key: str, entry: Entry) -> None:
        self.key, self.type = key, entry.type.lower()
        self.fields = {name.lower(): " ".join(text.split()) for name, text in entry.fields.items()}
        self.authors: list[Person] = list(entry.persons.get("author", []))
        year = self.fields.get("year", "")
        if self.type not in TYPES:
            self.fail(f"expected a type in {sorted(TYPES)}, got @{self.type}")
        if missing := [name for name in self.required() if not self.has(name)]:
            needs = ", ".join(self.required())
            self.fail(f"has no {', '.join(missing)} (an @{self.type} entry needs {needs})")
        if not KEY.fullmatch(key):
            self.fail("expected a lower-case slug like 'luong2015' as key")
        if year and not re.fullmatch(r"\d{4}", year):
            self.fail(f"expected a four-digit year, got {year!r}")

    def fail(self, message: str) -> None:
        raise PluginError(f"{BIB}: entry {self.key!r}: {message}")

    def required(self) -> list[str]:
        return ["author", "title", *([] if self.type in UNDATED_TYPES else ["year"]), "group"]

    def has(self, name: str) -> bool:
        return bool(self.authors) if name == "author" else bool(self.fields.get(name))

    def text(self, name: str) -> str:
        """A standard field as Markdown ('' when absent)."""
        return latex_to_markdown(self.fields.get(name, ""), f"entry {self.key!r}, field {name}")


def load_bibliography(path: Path) -> list[Reference]:
    """Parse ``path`` and check every entry, in the file's order.

    Raises:
        PluginError: on a syntax error, a repeated key, a missing field or a key that is not a slug.
    """
    text = path.read_text(encoding="utf-8")
    keys = Counter(
        key.lower() for key in re.findall(r"^\s*@\s*\w+\s*[{(]\s*([^,\s]+)\s*,", text, re.M)
    )
    if repeated := sorted(key for key, n in keys.items() if n > 1):
        raise PluginError(f"{path.name}: keys defined more than once: {', '.join(repeated)}")
    try:
        data: BibliographyData = parse_string(text, "bibtex")
    except PybtexError as error:
        raise PluginError(f"{path.name}: {error}") from error
    return [Reference(key, entry) for key, entry in data.entries.items()]


def latex_to_markdown(text: str, where: str) -> str:
    """Turn the LaTeX of a standard field into Markdown; math (``$...$``) passes unchanged."""
    out, i = [], 0
    while i < len(text):
        char = text[i]
        if char == "$":  # inline math, kept for the page's math renderer
            end = text.find("$", i + 1)
            if end < 0:
                raise PluginError(f"{BIB}: {where}: unclosed $ in {text!r}")
            out.append(text[i : end + 1])
            i = end + 1
        elif char == "\\":
            match = re.match(r"\\([a-zA-Z]+)\{", text[i:])
            if text[i + 1 : i + 2] in LATEX_ESCAPES:
                out.append(text[i + 1])
                i += 2
            elif match and match.group(1) in LATEX_MACROS:
                end = closing_brace(text, i + match.end() - 1, where)
                inner = latex_to_markdown(text[i + match.end() : end], where)
                out.append(LATEX_MACROS[match.group(1)].format(inner))
                i = end + 1
            else:
                raise PluginError(f"{BIB}: {where}: unsupported LaTeX at {text[i:i + 20]!r}")
        elif char in "{}":  # case protection
            i += 1
        elif text.startswith("---", i):
            out.append("—")
            i += 3
        elif text.startswith("--", i):
            out.append("–")
            i += 2
        else:
            out.append("\u00a0" if char == "~" else char)
            i += 1
    return "".join(out)


def closing_brace(text: str, start: int, where: str) -> int:
    """Index of the brace closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0) if text[i - 1] != "\\" else 0
        if depth == 0:
            return i
    raise PluginError(f"{BIB}: {where}: unbalanced braces in {text!r}")


def person_name(person: Person, where: str) -> str:
    """'van Merriënboer, B.' for a person, the name itself for an organization ({NVIDIA})."""
    last = latex_to_markdown(" ".join([*person.prelast_names, *person.last_names]), where)
    initials = " ".join(abbreviate(name) for name in [*person.first_names, *person.middle_names])
    return f"{last}, {initials}" if initials else last


def authors_markdown(ref: Reference) -> str:
    """APA-style list: 'A, & B', 'A, B, & C', 'A, B, et al.'."""
    names = [person_name(p, f"entry {ref.key!r}, field author") for p in ref.authors]
    tail = AUTHOR_TAILS.get(names[-1]) if len(names) > 1 else None
    if tail:
        return ", ".join([*names[:-1], tail])
    if len(names) == 1:
        return names[0]
    return ", ".join(names[:-1]) + ", & " + names[-1]


def url_label(url: str) -> str:
    """The link text for an address: 'ACL Anthology D15-1166', 'github.com/owner/repo', or the
    address without scheme, 'www.', 'index.html', '.html' and the final slash."""
    if match := re.fullmatch(r"https?://aclanthology\.org/([^/]+)/?", url):
        return f"ACL Anthology {match.group(1)}"
    if match := re.match(r"https?://github\.com/([^/]+/[^/]+)", url):
        return f"github.com/{match.group(1)}"
    label = re.sub(r"^https?://(www\.)?", "", url)
    return re.sub(r"(/index\.html|\.html|/)$", "", label)


def links_markdown(ref: Reference) -> str:
    f = ref.fields
    links = []
    if doi := f.get("doi"):
        links.append(f"[doi:{doi}](https://doi.org/{doi})")
    if url := f.get("url"):
        links.append(f"[{f.get('urllabel') or url_label(url)}]({url})")
    if (eprint := f.get("eprint")) and f.get("archiveprefix", "").lower() == "arxiv":
        links.append(f"[arXiv:{eprint}](https://arxiv.org/abs/{eprint})")
    if extra := f.get("links"):
        links.append(extra)
    return ", ".join(links)


def venue(ref: Reference) -> list[str]:
    """The sentences that say where the work appeared."""
    t, volume, number, pages = ref.text, ref.text("volume"), ref.text("number"), ref.text("pages")
    issue = f"{volume}({number})" if volume and number else volume
    if ref.type == "article":  # a newsletter may give a month instead of a volume
        date = f"{t('month')} {t('year')}" if ref.has("month") else ""
        return [", ".join(filter(None, [f"*{t('journal')}*", issue, date, pages]))]
    if ref.type == "inproceedings":
        series = " ".join(filter(None, [t("series"), issue]))
        return [", ".join(filter(None, [f"In *{t('booktitle')}*", series, pages]))]
    if ref.type == "techreport":
        return [f"{t('institution')} {t('type') or 'technical report'}"]
    if ref.type == "book":
        return list(filter(None, [t("publisher"), ref.fields.get("isbn") and f"ISBN {t('isbn')}"]))
    if ref.has("eprint") and not ref.has("howpublished"):
        return ["arXiv preprint"]
    return []


def add_sentence(sentences: list[str], text: str) -> None:
    """Append ``text`` as a sentence, or join it to the last one (see the module docstring)."""
    if text[0] == "(":
        sentences[-1] += " " + text
    elif text[0].isupper() or text[0].isdigit():
        sentences.append(text)
    else:
        sentences[-1] += "; " + text


def cited_as(ref: Reference) -> str:
    """How the text names the entry's authors: 'Dao', 'Jain and Wallace', 'Touvron et al.'."""
    last = [" ".join([*p.prelast_names, *p.last_names]) for p in ref.authors]
    if len(last) > 2 or last[-1] in AUTHOR_TAILS:
        return f"{last[0]} et al."
    return " and ".join(last)


def year_labels(refs: list[Reference]) -> dict[str, str]:
    """The year each dated entry is cited with, by key: its year, and a letter where entries
    would be cited alike, 'Touvron et al., 2023a' and '2023b' (papers before code and
    documentation, then by key)."""
    alike: dict[tuple[str, str], list[Reference]] = {}
    for ref in refs:
        if ref.has("year"):
            alike.setdefault((cited_as(ref), ref.fields["year"]), []).append(ref)
    labels = {}
    for (_, year), group in alike.items():
        group.sort(key=lambda ref: (ref.type in LAST_TYPES, ref.key))
        for i, ref in enumerate(group):
            labels[ref.key] = year + (string.ascii_lowercase[i] if len(group) > 1 else "")
    return labels


def entry_markdown(ref: Reference, year: str | None = None) -> str:
    """The entry as one Markdown paragraph, ending with its id; ``year`` is its label
    (:func:`year_labels`; its year field if None)."""
    authors = authors_markdown(ref)
    if ref.has("year"):
        head = f"{authors} ({year or ref.fields['year']})."
    else:
        head = authors if authors.endswith(".") else authors + "."
    title = ref.text("title")
    title = f"*{title}*" if ref.type in ITALIC_TITLE_TYPES else title
    if addon := ref.text("titleaddon"):
        title += f" ({addon})"
    if ref.type not in VENUE_TYPES and (how := ref.text("howpublished")):
        title += f", {how}"  # `torch.nn.Linear`, PyTorch documentation
    sentences = [title, *venue(ref)]
    for extra in (ref.text("note"), ref.fields.get("annotation", "")):
        if extra:
            add_sentence(sentences, extra)
    body = " ".join(s if s.endswith((".", "?", "!")) else s + "." for s in sentences)
    paragraph = " ".join(filter(None, [f"**{head}**", body, links_markdown(ref)]))
    return f"{paragraph}\n{{: #{ref.key} }}"


def reading_order(ref: Reference) -> tuple[bool, int]:
    """Papers and books first, by year; then code, datasheets and documentation, by year (the
    undated last); entries that tie keep the order of the .bib file (the sort is stable)."""
    return ref.type in LAST_TYPES, int(ref.fields.get("year", "9999"))


def page_markdown(refs: list[Reference]) -> str:
    """Every entry under its group's heading, groups in order of first appearance, each group
    in :func:`reading_order`."""
    groups: dict[str, list[Reference]] = {}
    for ref in refs:
        groups.setdefault(ref.fields["group"], []).append(ref)
    groups = {group: sorted(members, key=reading_order) for group, members in groups.items()}
    years = year_labels(refs)
    return "\n\n".join(
        f"## {group}\n\n" + "\n\n".join(entry_markdown(ref, years.get(ref.key)) for ref in members)
        for group, members in groups.items()
    )


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Replace the marker on the references page with the rendered bibliography."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"{PAGE}: expected the marker {MARKER} where the entries go")
    return markdown.replace(MARKER, page_markdown(load_bibliography(Path(config.docs_dir) / BIB)))
