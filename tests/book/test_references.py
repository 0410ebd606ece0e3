"""The references page, rendered from docs/references.bib by tools/book/hooks/references.py.

The .bib must parse, with unique lower-case keys and the fields every entry needs; the page lists
every entry once, under its group, with its key as the paragraph's id; a broken entry stops the
build with a message naming its key; and in the built site every citation, from a chapter or a
notebook, lands on an id of the references page, which offers the .bib for download.
"""

import re
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import markdown
import pytest
from mkdocs.exceptions import PluginError

from book.constants import DOCS, REPO
from book.hooks import references as hook

BIB = DOCS / "references.bib"


@pytest.fixture(scope="module")
def refs():
    return hook.load_bibliography(BIB)


def write_bib(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "references.bib"
    path.write_text(text, encoding="utf-8")
    return path


def one_entry(tmp_path: Path, text: str) -> str:
    """The Markdown of the only entry in ``text``, without its id line."""
    (ref,) = hook.load_bibliography(write_bib(tmp_path, text))
    return hook.entry_markdown(ref).rsplit("\n", 1)[0]


def test_keys_are_unique_lower_case_slugs() -> None:
    keys = re.findall(r"^@\w+\{([^,\s]+),", BIB.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert len(keys) >= 30, f"expected the bibliography's entries, found {len(keys)} keys"
    assert sorted(k for k in set(keys) if keys.count(k) > 1) == []
    assert [k for k in keys if not re.fullmatch(r"[a-z][a-z0-9-]*", k)] == []


def test_every_entry_has_author_title_year_and_group(refs) -> None:
    for ref in refs:
        assert ref.authors and ref.fields.get("title") and ref.fields.get("group"), ref.key
        # Code and online documentation may have no year; every other work has one.
        assert ref.fields.get("year") or ref.type in {"software", "online"}, ref.key


def test_page_lists_every_entry_once_under_its_group(refs) -> None:
    page = hook.page_markdown(refs)
    listed = re.findall(r"^\{: #([\w-]+) \}$", page, flags=re.MULTILINE)
    assert sorted(listed) == sorted(r.key for r in refs)
    groups = list(dict.fromkeys(r.fields["group"] for r in refs))
    assert re.findall(r"^## (.+)$", page, flags=re.MULTILINE) == groups
    for ref in refs:  # each entry sits after its own group's heading and before the next one
        heading = page.index(f"## {ref.fields['group']}\n")
        after = [page.find(f"## {g}\n") for g in groups[groups.index(ref.fields["group"]) + 1 :]]
        assert heading < page.index(f"{{: #{ref.key} }}") < min(after, default=len(page)), ref.key


def test_each_group_is_sorted_by_year_with_code_and_documentation_last(refs) -> None:
    """What the references page's introduction promises its reader."""
    by_key = {r.key: r for r in refs}
    listed = re.findall(r"^\{: #([\w-]+) \}$", hook.page_markdown(refs), flags=re.MULTILINE)
    for group in dict.fromkeys(r.fields["group"] for r in refs):
        members = [by_key[k] for k in listed if by_key[k].fields["group"] == group]
        last = [r.type in {"software", "online", "manual"} for r in members]
        assert last == sorted(last), f"{group}: code or documentation before a paper"
        for kind in (False, True):
            years = [int(r.fields.get("year", 9999)) for r, l in zip(members, last) if l == kind]
            assert years == sorted(years), f"{group}: {[r.key for r in members]}"


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[str, str] = {}
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids[attrs["id"]] = tag
        if tag == "a" and attrs.get("href"):
            self.hrefs.append(attrs["href"])


def html_of(text: str) -> _Ids:
    parser = _Ids()
    parser.feed(text)
    return parser


def test_entries_cited_alike_get_letters_and_others_none(tmp_path) -> None:
    # Touvron et al., 2023a and 2023b; the key's own letter counts for nothing; Dao 2023 and
    # Dao et al. 2023 are cited apart without letters; a paper comes before a blog post
    refs = hook.load_bibliography(write_bib(tmp_path, "\n".join([
        entry(key="smith1999b", title="B"), entry(key="smith1999", title="A"),
        entry(key="post", title="C", kind="online"),
        entry(key="dao2023", author="Dao, T.", year="2023"),
        entry(key="dao2023x", author="Dao, T. and others", year="2023"),
        entry(key="lone1999", author="Lone, A."),
    ])))
    assert hook.year_labels(refs) == {"smith1999": "1999a", "smith1999b": "1999b", "post": "1999c",
                                      "dao2023": "2023", "dao2023x": "2023", "lone1999": "1999"}
    assert "**Smith, J. (1999b).**" in hook.page_markdown(refs)


# A citation's link: its text, then the entry it leads to (the text may run over two lines).
CITATION = re.compile(r"\[([^\]]*)\]\((?:\.\./)*references\.md#([a-z0-9-]+)\)")
CITED_YEAR = re.compile(r"\b(?:19|20)\d\d[a-z]?\b")


def test_a_citation_gives_the_year_label_of_the_entry_it_links(refs) -> None:
    labels = hook.year_labels(refs)
    wrong = []
    for page in sorted(DOCS.rglob("*.md")):
        for text, key in CITATION.findall(page.read_text(encoding="utf-8")):
            years = CITED_YEAR.findall(text)
            if years and key in labels and years[-1] != labels[key]:
                wrong.append(f"{page.relative_to(DOCS)}: [{' '.join(text.split())}] -> {key}, "
                             f"listed as {labels[key]}")
    assert wrong == [], "\n".join(wrong)


def test_every_entry_renders_as_a_paragraph_with_its_key_as_id(refs) -> None:
    html = markdown.markdown(hook.page_markdown(refs), extensions=["attr_list"])
    ids = html_of(html).ids
    assert {key: ids.get(key) for key in (r.key for r in refs)} == {r.key: "p" for r in refs}
    assert "{:" not in html, "an attribute list was left as text"


def test_entries_render_in_the_pages_format(tmp_path) -> None:
    article = one_entry(tmp_path, r"""@article{smith1999,
      author = {Smith, J. and van Dam, A.-B.}, title = {A {GPU} study}, journal = {J. \& Co.},
      volume = {5}, number = {2}, pages = {1--9}, year = {1999}, doi = {10.1/x},
      annotation = {The `row_max` trick.}, group = {G}}""")
    assert article == (
        "**Smith, J., & van Dam, A.-B. (1999).** A GPU study. *J. & Co.*, 5(2), 1–9. "
        "The `row_max` trick. [doi:10.1/x](https://doi.org/10.1/x)"
    )
    newsletter = one_entry(tmp_path, r"""@article{mccalpin1995, author = {McCalpin, J. D.},
      title = {Memory bandwidth}, journal = {TCCA Newsletter}, pages = {19--25}, month = dec,
      year = {1995}, group = {G}}""")
    assert newsletter == (
        "**McCalpin, J. D. (1995).** Memory bandwidth. *TCCA Newsletter*, December 1995, 19–25."
    )
    paper = one_entry(tmp_path, r"""@inproceedings{lee2020b,
      author = {Lee, K. and Kim, S. and Park, J. and others}, title = {Title},
      booktitle = {Proceedings of ICML 2020}, series = {PMLR}, volume = {119}, pages = {1--2},
      year = {2020}, eprint = {2001.00001}, archivePrefix = {arXiv},
      url = {https://aclanthology.org/2020.acl-1.1/}, note = {published later}, group = {G}}""")
    assert paper == (
        "**Lee, K., Kim, S., Park, J., et al. (2020).** Title. In *Proceedings of ICML 2020*, "
        "PMLR 119, 1–2; published later. [ACL Anthology 2020.acl-1.1](https://aclanthology.org/"
        "2020.acl-1.1/), [arXiv:2001.00001](https://arxiv.org/abs/2001.00001)"
    )
    preprint = one_entry(tmp_path, r"""@misc{ba2016, author = {Ba, Jimmy Lei and Hinton, G. E.},
      title = {Layer normalization}, titleaddon = {LN}, year = {2016}, eprint = {1607.06450},
      archivePrefix = {arXiv}, note = {(v1)}, group = {G}}""")
    assert preprint == (
        "**Ba, J. L., & Hinton, G. E. (2016).** Layer normalization (LN). arXiv preprint (v1). "
        "[arXiv:1607.06450](https://arxiv.org/abs/1607.06450)"
    )
    code = one_entry(tmp_path, r"""@software{flash, author = {Dao, T. and contributors},
      title = {\texttt{flash\_attn}: kernels}, howpublished = {GitHub repository},
      url = {https://github.com/Dao-AILab/flash-attention/tree/main/csrc},
      links = {[docs](https://example.org)}, annotation = {`softmax.h` keeps $m_i$.},
      group = {G}}""")
    assert code == (
        "**Dao, T., and contributors.** `flash_attn`: kernels, GitHub repository; `softmax.h` "
        "keeps $m_i$. [github.com/Dao-AILab/flash-attention](https://github.com/Dao-AILab/"
        "flash-attention/tree/main/csrc), [docs](https://example.org)"
    )
    book = one_entry(tmp_path, r"""@book{zhang2023, author = {{Hugging Face}}, title = {Dive},
      publisher = {CUP}, isbn = {978-1}, year = {2023}, url = {https://d2l.ai/}, group = {G}}""")
    assert book == "**Hugging Face (2023).** *Dive*. CUP. ISBN 978-1. [d2l.ai](https://d2l.ai/)"


FIELDS = {"author": "Smith, J.", "title": "T", "year": "1999", "group": "G"}


def entry(kind: str = "misc", key: str = "smith1999", drop: str = "", **changes: str) -> str:
    fields = {name: value for name, value in {**FIELDS, **changes}.items() if name != drop}
    return f"@{kind}{{{key}, " + ", ".join(f"{n} = {{{v}}}" for n, v in fields.items()) + "}"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (entry(drop="title"), "'smith1999'.*title"),
        (entry(drop="group"), "'smith1999'.*group"),
        (entry(drop="author"), "'smith1999'.*author"),
        (entry(drop="year"), "'smith1999'.*year"),
        (entry(key="Smith1999"), "'Smith1999'.*slug"),
        (entry(year="99"), "'smith1999'.*four-digit year, got '99'"),
        (entry("artcle"), "'smith1999'.*@artcle"),
        (entry(title="\\cite{x}"), "'smith1999', field title.*cite"),
        (entry(key="a1") + "\n" + entry(key="A1"), "more than once: a1"),
        (entry()[:-1], "references.bib"),  # unclosed: a syntax error
    ],
)
def test_a_broken_entry_fails_with_its_key(tmp_path, entry: str, message: str) -> None:
    with pytest.raises(PluginError, match=message):
        refs = hook.load_bibliography(write_bib(tmp_path, entry))
        hook.page_markdown(refs)


def test_the_hook_fills_the_stub_and_is_registered() -> None:
    stub = (DOCS / "references.md").read_text(encoding="utf-8")
    config = SimpleNamespace(docs_dir=str(DOCS))
    page = SimpleNamespace(file=SimpleNamespace(src_uri="references.md"))
    filled = hook.on_page_markdown(stub, page=page, config=config, files=None)
    assert hook.MARKER not in filled and filled.count("\n{: #") == len(hook.load_bibliography(BIB))
    assert "](references.bib)" in stub, "the page must offer the .bib for download"
    with pytest.raises(PluginError, match="marker"):
        hook.on_page_markdown("# References\n", page=page, config=config, files=None)
    mkdocs = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    hooks = re.search(r"^hooks:\n((?:  - .+\n)+)", mkdocs, flags=re.MULTILINE)
    assert re.search(r"^  - tools/mkdocs_hooks/references.py\b", hooks.group(1), flags=re.MULTILINE)


CITATION_HREF = re.compile(r'href="((?:[^"#]*/)?references/(?:index\.html)?)#([^"]+)"')


def test_every_citation_in_the_built_site_lands_on_an_entry(built_site: Path, refs) -> None:
    page = built_site / "references" / "index.html"
    ids = html_of(page.read_text(encoding="utf-8")).ids
    assert sorted({r.key for r in refs} - set(ids)) == [], "entries without an id on the page"
    broken, cited = [], 0
    for html in sorted(built_site.rglob("*.html")):
        for target, key in CITATION_HREF.findall(html.read_text(encoding="utf-8")):
            cited += 1
            if (html.parent / target).resolve() != page.parent.resolve() or key not in ids:
                broken.append(f"{html.relative_to(built_site)}: {target}#{key}")
    assert cited > 50, f"expected the chapters' citations, found {cited}"
    assert broken == []
    assert (built_site / "references.bib").read_bytes() == BIB.read_bytes()
