"""One concern per module: no module of the project's packages runs past MAX_LINES lines.

A module that grows past it holds more than one concern; split it along them (issue 36).
Migrations are generated and left out.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import TESTS

ROOT = TESTS.parent
PACKAGES = ("runs", "billing", "dashboard", "agent", "scripts")
MAX_LINES = 600


def line_count(path: Path) -> int:
    """Lines as `wc -l` counts them, plus a last line without its newline."""
    text = path.read_bytes()
    return text.count(b"\n") + (1 if text and not text.endswith(b"\n") else 0)


def oversized(root: Path, packages: tuple[str, ...], limit: int) -> list[tuple[str, int]]:
    """(path relative to `root`, lines) of each .py module under `packages` past `limit`, migrations excluded."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            if "migrations" in relative.parts:
                continue
            if (lines := line_count(path)) > limit:
                found.append((relative.as_posix(), lines))
    return found


def test_no_module_is_over_600_lines() -> None:
    offenders = oversized(ROOT, PACKAGES, MAX_LINES)
    listed = "\n".join(f"  {path}: {lines} lines" for path, lines in offenders)
    assert not offenders, f"modules over {MAX_LINES} lines (split them along their concerns):\n{listed}"


def test_the_count_finds_a_long_module_and_skips_migrations(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "migrations").mkdir(parents=True)
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * 600)
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * 600 + "y = 2")
    (tmp_path / "pkg" / "migrations" / "0001_initial.py").write_text("x = 1\n" * 900)
    assert oversized(tmp_path, ("pkg",), 600) == [("pkg/long.py", 601)]
