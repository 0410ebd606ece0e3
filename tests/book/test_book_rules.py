"""Rules every page of the book keeps: citations that resolve both ways, no private torch API, one
way to write each symbol, and the source of every module the opening chapters teach with shown on
a page.

A citation is a link ``references.md#key``; each entry of docs/references.bib becomes a paragraph of
the references page with its key as id (tools/book/hooks/references.py). The strict build fails on a
link to a missing id; these tests also catch an entry nobody cites, a key defined twice, and
teaching code that reaches into torch's private modules (``torch.utils._python_dispatch``,
``Tensor._materialize``), which any release may rename.
"""

import inspect
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from torch import nn

import attention
from book.chapters import chapters
from book.constants import DOCS

REFERENCES = DOCS / "references.md"  # the stub the hook fills; it cites nothing
BIBLIOGRAPHY = DOCS / "references.bib"
ENTRY_KEY = re.compile(r"^@\w+\{([^,\s]+),", re.MULTILINE)
# Markdown pages link references.md#key; notebooks (rendered one level deeper) link references/#key.
CITATION = re.compile(r"references(?:\.md|/)#([\w-]+)")
SOURCE_LISTING = re.compile(r'--8<-- "src/attention/(\w+)\.py"')
PACKAGE_IMPORT = re.compile(r"from attention import (?:\(([^)]*)\)|([^\n]*))")
PRIVATE_TORCH = re.compile(r"torch(?:\.\w+)*\._\w+|\.\s*_materialize\b|from torch[\w.]* import _\w+")


def chapter_text(chapter: str) -> str:
    """The Markdown of a chapter: its page, or its pages in reading order."""
    return "\n".join((DOCS / uri).read_text() for uri in chapters()[chapter])


def citing_files() -> list[Path]:
    """Pages, notebooks and the hooks that write page text: everything that may cite."""
    files = [*DOCS.rglob("*.md"), *DOCS.rglob("*.ipynb"), *(DOCS / "hooks").glob("*.py")]
    return [f for f in files if f != REFERENCES]


def citations() -> Counter:
    return Counter(key for f in citing_files() for key in CITATION.findall(f.read_text()))


def entry_keys() -> list[str]:
    return ENTRY_KEY.findall(BIBLIOGRAPHY.read_text(encoding="utf-8"))


def test_every_entry_has_one_id() -> None:
    ids = Counter(entry_keys())
    assert len(ids) >= 30, f"expected the bibliography's entries, found {len(ids)} ids"
    assert [key for key, n in ids.items() if n > 1] == []


def test_every_citation_names_an_entry_and_every_entry_is_cited() -> None:
    entries = set(entry_keys())
    cited = citations()
    assert sorted(set(cited) - entries) == [], "cited but missing from docs/references.bib"
    assert sorted(entries - set(cited)) == [], "listed in docs/references.bib but cited nowhere"


def test_every_chapter_cites_its_sources() -> None:
    for chapter in chapters():
        assert CITATION.search(chapter_text(chapter)), f"{chapter} cites no work"


def test_pages_use_no_private_torch_api() -> None:
    pages = [f for f in citing_files() if f.suffix in {".md", ".ipynb"}]
    found = [
        f"{f.relative_to(DOCS)}: {m.group(0)}"
        for f in pages
        for m in PRIVATE_TORCH.finditer(f.read_text())
    ]
    assert found == []


def test_private_api_pattern_catches_what_it_should() -> None:
    for text in (
        "from torch.utils._python_dispatch import TorchDispatchMode",
        "mask._materialize()",
        "torch._C._set_grad_enabled(True)",
    ):
        assert PRIVATE_TORCH.search(text), text
    for text in ("torch.nn.functional.scaled_dot_product_attention", "x.masked_fill(m, 0)"):
        assert not PRIVATE_TORCH.search(text), text


# One way to write a symbol (docs/index.md's notation table): what no page writes -> what it writes.
NOTATION = {
    r"\\circ(?![A-Za-z])": r"\odot",  # the entry-by-entry product
    r"\\operatorname\{lse\}": r"\mathrm{lse}",
    r"\\(?:mathrm|text)\{softmax\}": r"\operatorname{softmax}",
    r"\\mathrm\{(?:LN|FFN|SA|attn)\}": r"\operatorname{LN}, \operatorname{FFN}, \operatorname{SA}",
    r"\$N\(": r"\mathcal{N}(",  # a normal distribution
    r"W_[qkvo]\^\{\(": r"W_{k,i}",  # a superscript in parentheses names a token, not a head
    r"_\{\\text\{(?:old|new)\}\}": r"m^{\text{old}}, m^{\text{new}}",
}
# For each rule, text it must catch: what the pages wrote before they were made one notation.
NOTATION_CAUGHT = (r"dS = A \circ (dA - D)", r"\operatorname{lse}(\omega)", r"\text{softmax}(x)",
                   r"x + \mathrm{attn}(\mathrm{LN}_1(x))", r"from $N(0, 0.02^2)$",
                   r"W_k^{(g)} = \frac{1}{G}", r"e^{m_{\text{old}} - m_{\text{new}}}")


def test_each_symbol_is_written_one_way() -> None:
    pages = [f for f in citing_files() if f.suffix in {".md", ".ipynb"}]
    found = [
        f"{f.relative_to(DOCS)}: {m.group(0)}, where the book writes {ours}"
        for f in pages
        for other, ours in NOTATION.items()
        for m in re.finditer(other, f.read_text())
    ]
    assert found == []


def test_each_notation_rule_catches_what_it_should() -> None:
    for rule, text in zip(NOTATION, NOTATION_CAUGHT, strict=True):
        assert re.search(rule, text), (rule, text)
    for text in (r"\odot", r"\circledast", r"\mathcal{N}(0, 1)", r"W_{k,i}", r"m^{\text{new}}",
                 r"\operatorname{LN}(x)"):
        assert not any(re.search(rule, text) for rule in NOTATION), text


# Sentences of chapter 7 that are true only while the appendix has no GPU results.
NO_GPU_CLAIMS = ("It has no GPU measurements yet", "has CPU measurements only")


def gpu_results() -> list[str]:
    """Results files under docs/appendix/results measured on a CUDA device."""
    files = sorted((DOCS / "appendix" / "results").glob("*.json"))
    return [f.name for f in files if json.loads(f.read_text())["provenance"]["device_type"] == "cuda"]


def test_chapter_7_says_what_the_appendix_has() -> None:
    text = chapter_text("07-fast-attention")
    claims = [claim for claim in NO_GPU_CLAIMS if claim in text]
    if gpu_results():
        assert claims == [], f"GPU results exist ({gpu_results()}): chapter 7 still says {claims}"
    else:
        assert claims, "no GPU results: chapter 7 must say its timings are CPU-only"


@pytest.mark.parametrize("chapter", ["07-fast-attention", "10-inference"])
def test_chapters_7_and_10_cite_the_gpu_measurements_from_their_file(chapter: str) -> None:
    # A snippet of each reads a GPU results file (so the numbers printed are the file's), and the
    # prose links the appendix page of that GPU.
    text = chapter_text(chapter)
    read = [name for name in gpu_results() if name in text]
    assert read, f"{chapter} reads none of the GPU results files {gpu_results()}"
    assert re.search(r"(\.\./)+appendix/gpu-h200\.md", text), f"{chapter} does not link the H200 page"


def test_the_opening_chapters_show_the_source_of_every_module_they_use() -> None:
    """Chapters 1-6 teach with small modules; each one's source is on a chapter page."""
    texts = {chapter: chapter_text(chapter) for chapter in chapters()}
    shown = {name for text in texts.values() for name in SOURCE_LISTING.findall(text)}
    missing = []
    for chapter in list(texts)[:6]:
        for names in PACKAGE_IMPORT.findall(texts[chapter]):
            for name in re.findall(r"\w+", "".join(names)):
                obj = getattr(attention, name, None)
                if isinstance(obj, type) and issubclass(obj, nn.Module):
                    if Path(inspect.getsourcefile(obj)).stem not in shown:
                        missing.append(f"{chapter}: {name}")
    assert "src/attention/causal.py" in (DOCS / "chapters" / "04-causal-attention.md").read_text()
    assert missing == [], "show the source in a '??? info' block, as chapter 3 does"
