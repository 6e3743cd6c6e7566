"""The README is a front page and the docs hold together: README.md stays short and names
the two commands, every docs page has content and is reachable from the README, and every
relative link in README.md and docs/*.md points to a file of the repository (and, where it
names a heading, to a heading of that page). Pure file reading: no build, no network."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 250

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans blanked."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(CODE_SPAN.sub("", line))
    return out


def links(path: Path) -> list[str]:
    found: list[str] = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        found += INLINE_LINK.findall(line)
        m = REF_LINK.match(line)
        if m:
            found.append(m.group(1))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lower case, punctuation
    dropped, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Each relative link of a page that does not resolve, said as `page: target (why)`."""
    bad: list[str] = []
    for target in links(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}: {target}"
        if not dest.is_relative_to(root):
            bad.append(f"{where} (outside the repository)")
        elif not dest.exists():
            bad.append(f"{where} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{where} (no such heading)")
    return bad


def test_readme_is_a_front_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_README_LINES
    assert "make demo" in text and "make test" in text


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_docs_pages_have_content_and_the_readme_reaches_them() -> None:
    docs = sorted(DOCS.glob("*.md"))
    assert docs, "no docs pages"
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    for page in docs:
        lines = [ln for ln in prose_lines(page.read_text(encoding="utf-8")) if ln.strip()]
        assert lines and lines[0].startswith("# "), f"{page.name}: no title"
        assert len(lines) >= 5, f"{page.name}: next to empty"
        assert page.resolve() in linked, f"{page.name}: not linked from README.md"


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    """A missing file, a missing heading and a link out of the repository are each caught;
    links in code and external links are left alone."""
    (tmp_path / "README.md").write_text("# Front\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# A page\n\n## Real heading\n\n"
        "[ok](#real-heading) [ok](../README.md#front) ![ok](page.md)\n"
        "[gone](no-such-page.md) [nohead](#no-such-heading) [out](../../elsewhere.md)\n"
        "`[code](ignored.md)` [web](https://example.org/x.md)\n\n"
        "```\n[fenced](ignored.md)\n## not a heading\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page, root=tmp_path) == [
        "docs/page.md: no-such-page.md (no such file)",
        "docs/page.md: #no-such-heading (no such heading)",
        "docs/page.md: ../../elsewhere.md (outside the repository)",
    ]
    assert anchors(page) == {"a-page", "real-heading"}
    assert slug("Correction strategies (`correction/strategies.py`)") == (
        "correction-strategies-correctionstrategiespy"
    )
