"""The documentation stays navigable: README.md is a short front page, every doc a reference of readable length, and
every relative link resolves.

Walks README.md and docs/**/*.md, follows each relative link or image (a file or folder of the repository,
and for a Markdown target its #anchor: a heading's GitHub slug or an explicit <a id="...">), and fails on
a broken one. Links inside fenced code blocks and external URLs are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200
DOC_MAX_LINES = 350  # a doc longer than this holds two subjects or a history: split it, or move the history out
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
_INLINE_CODE = re.compile(r"`([^`]*)`")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = _INLINE_CODE.sub(r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML such as <a id=...></a>
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file offers: heading slugs (with GitHub's -1, -2 for repeats) and <a id>."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = path.read_text(encoding="utf-8")
    for _, line in _prose_lines(text):
        found.update(_EXPLICIT_ANCHOR.findall(line))
        m = _HEADING.match(line)
        if m:
            slug = github_slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def relative_links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every relative link and image outside code blocks."""
    links = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in _LINK.findall(_INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:, ...
                continue
            links.append((number, target))
    return links


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not dest.exists():
            problems.append(f"{where} (no such file)")
        elif ROOT not in dest.parents and dest != ROOT:
            problems.append(f"{where} (outside the repository)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where} (no heading or <a id> '{anchor}' in {dest.relative_to(ROOT)})")
    return problems


def test_the_readme_is_a_short_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move details into docs/ (limit {README_MAX_LINES})"


@pytest.mark.parametrize("path", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_every_doc_is_a_reference_of_readable_length(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines <= DOC_MAX_LINES, f"{path.name} has {lines} lines (limit {DOC_MAX_LINES}): split its subjects or drop history"


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


_HISTORY = re.compile(r"\bissue #?[0-9]+|\bsessions?\b", re.IGNORECASE)


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_documentation_speaks_of_the_package_not_of_its_history(path: Path) -> None:
    """Tracker numbers and development history mean nothing to a reader: say what a thing does and where a figure
    comes from (command, machine, date) instead."""
    text = path.read_text(encoding="utf-8")
    hits = [f"{n}: {line.strip()[:100]}" for n, line in enumerate(text.splitlines(), 1) if _HISTORY.search(line)]
    assert hits == []


def test_the_checker_finds_broken_links_and_anchors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "b.md").write_text("# Some `code` title (x)\n\n<a id=\"here\"></a>text\n", encoding="utf-8")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#some-code-title-x) [ok](b.md#here) [ok](#local) ![img](b.md) [web](https://x.org/y)\n"
        "## Local\n[bad](missing.md) [bad](b.md#nowhere)\n```\n[in code](nothing.md)\n```\n",
        encoding="utf-8",
    )
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert "missing.md (no such file)" in problems[0]
    assert "b.md#nowhere" in problems[1]
