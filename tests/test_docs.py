"""The README stays a newcomer's page, and the documentation's links lead somewhere (issue 36).

README.md says what Airboard is, how to run and test it and where the rest lives: it stays short, and
everything else is in docs/*.md. A relative link (or a heading anchor) that names a file or heading that
is not there sends a reader nowhere, so every one in README.md, docs/*.md, bench/README.md and
SECURITY.md is checked, anchors against the target's headings as GitHub writes them.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

README_MAX_LINES = 220
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def documents(root: Path) -> list[Path]:
    found = [root / "README.md", root / "SECURITY.md", root / "bench" / "README.md"]
    return [p for p in found if p.exists()] + sorted((root / "docs").glob("*.md"))


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {anchor(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def broken_links(path: Path) -> list[str]:
    """`file: target (why)` for each relative link of `path` that leads nowhere."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # code is not a link
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        name, _, fragment = target.partition("#")
        linked = (path.parent / name).resolve() if name else path
        if not linked.exists():
            broken.append(f"{path.name}: {target} (no such file)")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{path.name}: {target} (no such heading)")
    return broken


def test_the_readme_stays_short() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move detail into docs/"


def test_every_relative_link_of_the_documentation_leads_somewhere() -> None:
    checked = documents(ROOT)
    assert ROOT / "docs" / "architecture.md" in checked
    assert [b for path in checked for b in broken_links(path)] == []


def test_every_code_block_of_the_documentation_is_closed() -> None:
    # An unclosed ``` turns the rest of a page into code, and hides its links from the check above.
    assert [p.name for p in documents(ROOT) if p.read_text().count("```") % 2] == []


def test_the_readme_links_every_docs_page() -> None:
    readme = (ROOT / "README.md").read_text()
    linked = {Path(t.partition("#")[0]).as_posix() for t in LINK.findall(readme)}
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set()


def test_ci_runs_the_test_command_the_readme_gives() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = [
        line.split("#")[0].strip()
        for block in re.findall(r"```sh\n(.*?)```", readme, flags=re.S)
        for line in block.splitlines()
    ]
    assert "make test" in commands
    assert re.search(r"^\s*(env .*)?make test$", (ROOT / ".ci" / "run").read_text(), flags=re.M)


def test_a_missing_file_or_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "here.md").write_text("# Here\n\n## The `/metrics` door, in short\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/here.md) [ok](docs/here.md#the-metrics-door-in-short) [web](https://example.com/x.md)\n"
        "![gone](docs/gone.png) [bad](docs/here.md#nowhere) [self](#here-too)\n"
        "```sh\n[not a link](nowhere.md)\n```\n"
    )
    assert broken_links(page) == [
        "README.md: docs/gone.png (no such file)",
        "README.md: docs/here.md#nowhere (no such heading)",
        "README.md: #here-too (no such heading)",
    ]
