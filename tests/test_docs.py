"""The README and docs/: a short README that keeps the quick start CI runs, no pointer outside the repository, and
every cited page, section and relative link present."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

README_MAX_LINES = 200
"""Issue 45, item 7: the README is for users, at most 200 lines; the rest lives in docs/."""

QUICK_START = {
    "# run the main job": "pip install torch==2.13.0 && pip install -e . && python -m phaze.run model=llama2 hw=phaze_grid",
    "# run the tests": "pip install torch==2.13.0 && pip install -e '.[test]' && python -m pytest",
}
"""The quick start's two commands, byte for byte: .ci/run runs the line after the first `# run the tests`."""

SCANNED = ("phaze", "conf", "docs", "tests", "experiments")
"""Folders whose text files may cite only the repository (with README.md and pyproject.toml)."""

TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".csv", ".txt", ".sh", ".cfg", ".ini", ".json"}

OUTSIDE = re.compile(r"\.\./shared|/work[/]shared|DESIGN\.md|ecosystem\.md|phaze[-]method\.md|modern[-]parallelism\.md")
"""Pointers to the design notes the project was started from, which live outside the repository."""

DOC_CITE = re.compile(r"(?<![\w/.-])docs/([\w.-]+\.(?:md|csv))")
OTHER_REPO = re.compile(r"[\w.-]+/[\w.-]+ $")
"""`owner/repo docs/x.md`: another repository's page (a source cited in docs/validation_runs.csv), not ours."""
SECTION_CITE = re.compile(r"docs/([\w.-]+\.md),? §(\d+(?:\.\d+)?)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def text_files() -> list[Path]:
    files = [README, ROOT / "pyproject.toml"]
    for folder in SCANNED:
        files += [p for p in sorted((ROOT / folder).rglob("*"))
                  if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts]
    return files


def slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")}


def test_readme_is_short() -> None:
    n_lines = len(README.read_text().splitlines())
    assert 0 < n_lines <= README_MAX_LINES, f"README.md has {n_lines} lines, at most {README_MAX_LINES}"


def test_quick_start_commands_unchanged() -> None:
    lines = README.read_text().splitlines()
    for marker, command in QUICK_START.items():
        assert marker in lines, f"README.md lost the line {marker!r}"
        assert lines[lines.index(marker) + 1] == command, f"the command after {marker!r} changed"


def test_nothing_points_outside_the_repository() -> None:
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
            for p in text_files()
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if OUTSIDE.search(line)]
    assert not hits, "pointers outside the repository:\n" + "\n".join(hits)


def test_the_scan_sees_a_planted_pointer() -> None:
    planted = "see " + "../" + "shared/" + "DESIGN" + ".md section 2"
    assert OUTSIDE.search(planted)
    assert not OUTSIDE.search("see docs/architecture.md section 2")


def cited_docs(text: str) -> list[str]:
    """The docs/ pages a text cites, leaving out other repositories' docs/ folders."""
    return [m.group(1) for m in DOC_CITE.finditer(text) if not OTHER_REPO.search(text[max(0, m.start() - 80):m.start()])]


def test_cited_docs_exist() -> None:
    missing = sorted({f"{p.relative_to(ROOT)} cites docs/{name}"
                      for p in text_files() for name in cited_docs(p.read_text(errors="replace"))
                      if not (ROOT / "docs" / name).is_file()})
    assert not missing, "\n".join(missing)


def test_citation_scan_reads_ours_only() -> None:
    assert cited_docs("see docs/usage.md and pytorch/torchtitan docs/performance.md") == ["usage.md"]


def test_cited_sections_exist() -> None:
    """`docs/phaze-reference.md §3.3` names a heading of that page numbered 3.3."""
    missing = []
    for p in text_files():
        for name, section in SECTION_CITE.findall(p.read_text(errors="replace")):
            page = ROOT / "docs" / name
            heading = re.compile(rf"^#+ {re.escape(section)}[.\s]", re.MULTILINE)
            if page.is_file() and not heading.search(page.read_text()):
                missing.append(f"{p.relative_to(ROOT)} cites docs/{name} §{section}")
    assert not missing, "\n".join(sorted(set(missing)))


@pytest.mark.parametrize("page", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def test_the_readme_quotes_the_validation_page_numbers():
    """The README's validation sentence (runs, median and maximum error, first-seen runs and error) and its example of
    `phaze.validate`'s summary line are the page's."""
    page = (ROOT / "docs" / "validation.md").read_text()
    median, maximum, runs, signed = re.search(
        r"\*\*Median absolute error: ([\d.]+%); maximum: ([\d.]+%)\*\* over (\d+) runs.*?signed median ([+-][\d.]+%)", page).groups()
    seen_runs, seen = re.search(r"\*\*First seen\*\* \((\d+) runs, .*?median absolute error ([\d.]+%) then", page).groups()
    readme = " ".join(README.read_text().split())
    assert f"checked against {runs} published training runs" in readme
    assert f"median error {median}, maximum {maximum}" in readme
    assert f"on the {seen_runs} runs it had not seen before, predicted before any change they motivated, {seen}" in readme
    assert f"`median absolute error {median}, max {maximum} over {runs} runs, signed median {signed}`" in readme
