"""The repository as others take it up: pins that match what it uses, its licences and citation.

requirements.txt pins exactly every distribution the repository uses directly and nothing else.
"Uses directly" means: a module of it is imported by the package, the tests, the build hooks, the
figure scripts, a snippet of a page or a cell of a notebook; or mkdocs.yml names it (a theme, a
plugin, a Markdown extension, a ``!!python/name:`` tag); or it is a pytest plugin listed below
with the reason it is used. Distributions that only other distributions need (nbformat, nbclient,
ipykernel: mkdocs-jupyter's) come with those and are not pinned.
"""

from __future__ import annotations

import ast
import datetime
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest
import yaml
from packaging.markers import Marker
from packaging.requirements import Requirement

from book.constants import REPO
from book.pages import read_page
from book.runner.notebooks import read_cells

# Where the repository's own Python lives; every .py file under these is scanned for imports.
CODE = [REPO / "src", REPO / "tools", REPO / "tests", REPO / "docs", REPO / ".ci", REPO / "conftest.py"]
# Pinned, used, but never imported: why each is needed.
NOT_IMPORTED = {
    "pytest-xdist": "pytest plugin: pyproject.toml's addopts run the suite with -n 2 "
    "--dist loadgroup",
    "ruff": "a command: .ci/run runs `ruff check` (configured in pyproject.toml)",
    "mypy": "a command: .ci/run type-checks the package and tests/package/typed_usage.py with "
    "`mypy --strict`",
    "black": "mkdocstrings-python formats the API reference's signatures with it when installed",
}


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> dict[str, Requirement]:
    """The requirements of requirements.txt (not the editable package itself), by name."""
    found = {}
    for line in (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith(("#", "-e")):
            requirement = Requirement(line)
            found[normalized(requirement.name)] = requirement
    return found


def python_files() -> list[Path]:
    files = []
    for place in CODE:
        files += [place] if place.is_file() else sorted(place.rglob("*.py"))
    return files


def snippets() -> list[tuple[str, str]]:
    """(where, source) of every Python fence of every page and code cell of every notebook."""
    found = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        found += [(f"{page.name}:{fence.line}", fence.source) for fence in read_page(page).fences]
    for notebook in sorted((REPO / "docs").rglob("*.ipynb")):
        cells, _ = read_cells(notebook.read_text(encoding="utf-8"))
        found += [(f"{notebook.name}, cell {cell.number}", cell.source) for cell in cells]
    return found


def top_level_imports(source: str) -> set[str]:
    """The top-level names of every absolute import in ``source``."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def imported_modules() -> dict[str, str]:
    """Top-level module names imported anywhere, each with one place that imports it."""
    sources = [(str(path.relative_to(REPO)), path.read_text("utf-8")) for path in python_files()]
    found: dict[str, str] = {}
    for where, source in sources + snippets():
        for name in sorted(top_level_imports(source)):
            found.setdefault(name, where)
    return found


def local_modules() -> set[str]:
    """Names the repository's own files and packages are imported by."""
    names = {path.stem for path in python_files()}
    names |= {path.parent.name for path in python_files() if path.name == "__init__.py"}
    return names | {"tests"}


class _IgnoreTags(yaml.SafeLoader):
    """Reads mkdocs.yml, keeping a ``!!python/name:module.attr`` tag as the string after it."""


_IgnoreTags.add_multi_constructor(
    "tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix
)


def mkdocs_config() -> dict:
    return yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_IgnoreTags)


def named_in_mkdocs_yml() -> dict[str, str]:
    """Distribution -> what in mkdocs.yml names it (theme, plugins, extensions, python tags)."""
    config = mkdocs_config()
    found = {}
    plugins = [next(iter(p)) if isinstance(p, dict) else p for p in config["plugins"]]
    for group, names in (("mkdocs.themes", [config["theme"]["name"]]), ("mkdocs.plugins", plugins)):
        points = {point.name: point for point in importlib.metadata.entry_points(group=group)}
        for name in names:
            assert name in points, f"mkdocs.yml names the {group} entry {name!r}: not installed"
            found[normalized(points[name].dist.name)] = f"mkdocs.yml {group} {name}"
    modules = {}
    for extension in config["markdown_extensions"]:
        name = next(iter(extension)) if isinstance(extension, dict) else extension
        # A bare name (admonition, toc) is one of Python-Markdown's own extensions.
        modules[name.split(".")[0] if "." in name else "markdown"] = f"markdown_extensions {name}"
        for value in (extension.get(name) or {}).values() if isinstance(extension, dict) else ():
            if isinstance(value, str) and re.fullmatch(r"\w+(\.\w+)+", value):
                modules[value.split(".")[0]] = f"!!python/name:{value}"
    for plugin in config["plugins"]:
        settings = plugin.get("mkdocstrings", {}) if isinstance(plugin, dict) else {}
        for handler in settings.get("handlers", {}):  # loaded as mkdocstrings_handlers.<name>
            modules["mkdocstrings_handlers"] = f"mkdocstrings handler {handler}"
    owners = importlib.metadata.packages_distributions()
    for module, why in modules.items():
        for distribution in owners.get(module, []):
            found[normalized(distribution)] = f"mkdocs.yml {why}"
    return found


@pytest.fixture(scope="module")
def used() -> dict[str, str]:
    """Distribution -> where the repository uses it, for every distribution it uses directly."""
    owners = importlib.metadata.packages_distributions()
    found, unknown = {}, []
    local = local_modules()
    for module, where in imported_modules().items():
        if module in sys.stdlib_module_names or module in local:
            continue
        if module not in owners:
            unknown.append(f"{module} (imported by {where})")
        for distribution in owners.get(module, []):
            found.setdefault(normalized(distribution), f"import {module} in {where}")
    assert unknown == [], "imported, but installed by no distribution: " + ", ".join(unknown)
    return {**named_in_mkdocs_yml(), **found}


def test_every_used_distribution_is_pinned_exactly(used: dict[str, str]) -> None:
    pinned = pins()
    missing = [f"{name} ({where})" for name, where in sorted(used.items()) if name not in pinned]
    assert missing == [], "used but not in requirements.txt: " + "; ".join(missing)
    loose = [str(r) for r in pinned.values() if not re.fullmatch(r"==[^,]+", str(r.specifier))]
    assert loose == [], f"pins must be exact (==): {loose}"


def test_every_pin_is_used(used: dict[str, str]) -> None:
    unused = sorted(set(pins()) - set(used) - set(NOT_IMPORTED))
    assert unused == [], f"pinned in requirements.txt, but nothing uses them: {unused}"
    for name, reason in NOT_IMPORTED.items():
        assert name in pins(), f"{name} is listed as used without an import ({reason}): pin it"
        assert name not in used, f"{name} is imported after all: remove it from NOT_IMPORTED"


def test_torch_stays_at_the_cpu_wheel_on_this_machine() -> None:
    assert str(pins()["torch"].specifier) == "==2.13.0"


PLATFORMS = {
    "Linux x86_64": {"sys_platform": "linux", "platform_machine": "x86_64"},
    "Linux aarch64": {"sys_platform": "linux", "platform_machine": "aarch64"},
    "macOS arm64": {"sys_platform": "darwin", "platform_machine": "arm64"},
    "Windows": {"sys_platform": "win32", "platform_machine": "AMD64"},
}


@pytest.mark.parametrize("platform", PLATFORMS)
def test_triton_is_installed_only_where_it_has_wheels(platform: str) -> None:
    """Triton 3.9.0's wheels on PyPI: manylinux x86_64 and aarch64 only (CPython 3.11+)."""
    for requirement in (pins()["triton"], Requirement(pyproject_extra("triton"))):
        marker = requirement.marker or Marker("python_version > '0'")
        assert marker.evaluate(PLATFORMS[platform]) == platform.startswith("Linux"), requirement


# Imported by the package only inside the functions that draw figures, so that `import attention`
# works without it; the harness's extra installs it.
DRAWING_ONLY = {"matplotlib", "numpy"}


def third_party_imports(files: list[Path]) -> set[str]:
    """Distributions the files import (stdlib, the package itself and Triton left out)."""
    owners, found = importlib.metadata.packages_distributions(), set()
    for path in files:
        for top in top_level_imports(path.read_text("utf-8")) - set(sys.stdlib_module_names) - {"attention", "triton"}:
            found |= {normalized(d) for d in owners.get(top, [top])}
    return found


def test_the_package_declares_what_it_and_its_harness_import() -> None:
    """``pip install .`` gives what ``import attention`` needs, and the extra ``bench`` what
    ``python -m attention.bench`` needs, so the README's commands work from a plain install."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    declared = {normalized(Requirement(r).name) for r in project["dependencies"]}
    bench = declared | {normalized(Requirement(r).name) for r in project["optional-dependencies"]["bench"]}
    package = [f for f in (REPO / "src" / "attention").rglob("*.py") if "bench" not in f.parts]
    hf = {normalized(Requirement(r).name) for r in project["optional-dependencies"]["hf"]}
    missing = third_party_imports(package) - declared - DRAWING_ONLY - hf  # attention.hf: lazy
    assert missing == set(), f"the package imports {sorted(missing)}, which pyproject.toml does not declare"
    harness = sorted((REPO / "src" / "attention" / "bench").glob("*.py"))
    missing = third_party_imports(harness) - bench - {"numpy"}  # numpy comes with matplotlib
    assert missing == set(), f"the harness imports {sorted(missing)}, which the extra bench does not declare"
    assert "tqdm" in bench and "matplotlib" in bench


def pyproject_extra(name: str) -> str:
    """The one requirement of the optional dependency ``name`` in pyproject.toml."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    (requirement,) = extras["optional-dependencies"][name]
    return requirement


def test_citation_file_is_cff_1_2_and_agrees_with_the_project() -> None:
    import tomllib

    citation = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    assert citation["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors"):  # required by CFF 1.2.0
        assert citation.get(key), f"CITATION.cff needs {key!r}"
    assert all("name" in a or "family-names" in a for a in citation["authors"])
    assert citation["type"] == "software" and citation["version"] == project["version"]
    assert citation["license"] == project["license"]["text"] == "MIT"
    assert citation["repository-code"] == mkdocs_config()["repo_url"]
    assert citation["url"] == mkdocs_config()["site_url"]
    assert isinstance(citation["date-released"], datetime.date)  # YAML reads YYYY-MM-DD as a date


def test_licences_are_present_and_shown_in_the_site_footer() -> None:
    code = (REPO / "LICENSE").read_text(encoding="utf-8")
    text = (REPO / "LICENSE-text.md").read_text(encoding="utf-8")
    assert code.startswith("MIT License") and "WITHOUT WARRANTY OF ANY KIND" in code
    assert "creativecommons.org/licenses/by/4.0/" in text
    footer = mkdocs_config()["copyright"]
    assert "MIT" in footer and "CC BY 4.0" in footer, footer


def test_docs_holds_content_and_the_hooks_only_import_the_tooling() -> None:
    # Code lives in packages and is imported; docs/ is what the site shows.
    assert sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*.py")) == []
    hooks = mkdocs_config()["hooks"]
    assert hooks and all(h.startswith("tools/mkdocs_hooks/") for h in hooks), hooks
    for hook in hooks:
        tree = ast.parse((REPO / hook).read_text(encoding="utf-8"))
        body = [node for node in tree.body if not isinstance(node, ast.Expr)]  # past the docstring
        assert [type(node) for node in body] == [ast.ImportFrom], f"{hook}: more than one import"
        assert body[0].module == f"book.hooks.{Path(hook).stem}", f"{hook} imports {body[0].module}"
        # Every event the logic module defines reaches MkDocs, which sees only the shim's names.
        logic = ast.parse((REPO / "tools" / "book" / "hooks" / Path(hook).name).read_text(encoding="utf-8"))
        defined = {node.name for node in logic.body if isinstance(node, ast.FunctionDef)}
        defined |= {target.id for node in logic.body if isinstance(node, ast.Assign)  # CombinedEvent
                    for target in node.targets if isinstance(target, ast.Name)}
        events = {name for name in defined if name.startswith("on_")}
        assert {alias.name for alias in body[0].names} == events, f"{hook} re-exports other events"


def test_no_file_is_imported_by_its_path() -> None:
    # Every module of the package and of the tooling is imported by name; only MkDocs loads the
    # two-line hook files of mkdocs.yml by path.
    loaders = re.compile(r"spec_from_file_location|SourceFileLoader|run_path\(|exec\(open\(")
    found = [f"{path.relative_to(REPO)}:{n}" for place in (REPO / "src", REPO / "tools", REPO / "tests")
             for path in place.rglob("*.py") if path.name != Path(__file__).name
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if loaders.search(line)]
    assert found == []


def test_browser_test_ids_are_accepted_with_the_group_xdist_prints(
    pytestconfig: pytest.Config,
) -> None:
    from book.scheduling import without_group as without_browser_group

    printed = "tests/browser/test_desktop_reader.py::test_search[causal]@browser-desktop"
    assert without_browser_group(printed) == printed.removesuffix("@browser-desktop")
    kept = "tests/test_x.py::test_mail[a@browser-desktop.org]"
    assert without_browser_group(kept) == kept


def test_every_folder_of_the_tooling_is_a_package_an_install_ships() -> None:
    # An install finds packages by their __init__.py (tools/pyproject.toml's packages.find); a
    # folder without one imports in the editable install, as a namespace package, but is left out
    # of a wheel.
    folders = {p.parent for p in (REPO / "tools" / "book").rglob("*.py") if "__pycache__" not in p.parts}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file()) == []
