"""dashboard/kit/progress.py: one redrawn line on a terminal, a line per ~10% anywhere else."""

from __future__ import annotations

import io

from dashboard.kit.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_redraws_one_line() -> None:
    out = Terminal()
    with Progress(10_000, "samples", stream=out) as bar:
        bar.advance(4_500)
        assert out.getvalue() == "\r[#########...........] 45% 4,500/10,000 samples"
        bar.advance(5_500)
    assert out.getvalue().endswith("\r[####################] 100% 10,000/10,000 samples\n")
    assert out.getvalue().count("\n") == 1


def test_pipe_gets_a_line_every_ten_percent() -> None:
    out = io.StringIO()
    with Progress(1_000, "rows", label="comparing", stream=out) as bar:
        for _ in range(1_000):
            bar.advance()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert lines[0] == "comparing 0% 1/1,000 rows" and lines[-1] == "comparing 100% 1,000/1,000 rows"
    assert len(lines) == 11


def test_empty_total_and_overshoot() -> None:
    out = io.StringIO()
    bar = Progress(0, "rows", stream=out)
    bar.update(0)
    assert out.getvalue() == "100% 0/0 rows\n"
    capped = Progress(10, "rows", stream=io.StringIO())
    capped.update(25)
    assert capped.done == 10 and capped.percent == 100


def test_default_stream_is_stderr(capsys) -> None:
    """Commands keep stdout clean: the bar goes to sys.stderr."""
    bar = Progress(5, "samples")
    bar.update(5)
    captured = capsys.readouterr()
    assert captured.out == "" and "100% 5/5 samples" in captured.err
