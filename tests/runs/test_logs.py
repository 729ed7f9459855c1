"""runs/logs.py: assembling a node's log from chunks, the tail, search and highlighting."""

from __future__ import annotations

import pytest

from runs.logs import (
    MAX_LINE_CHARS,
    build_log_view,
    chunk_texts,
    display_text,
    grep_lines,
    highlight,
    iter_lines,
    query_pattern,
)
from runs.models import LogChunk, Node
from tests.conftest import World, make_run


def test_lines_split_across_chunk_boundaries() -> None:
    chunks = ["epoch 1 lo", "ss=0.5\nepoch 2 ", "loss=0.4\n", "", "done"]
    assert list(iter_lines(chunks)) == ["epoch 1 loss=0.5", "epoch 2 loss=0.4", "done"]


def test_trailing_newline_makes_no_empty_line_but_blank_lines_stay() -> None:
    assert list(iter_lines(["a\n\nb\n"])) == ["a", "", "b"]


def test_crlf_endings_are_dropped_but_form_feeds_do_not_split() -> None:
    # str.splitlines() would split on \x0c and renumber every line after it.
    assert list(iter_lines(["a\r\nb\x0cc\r\n"])) == ["a", "b\x0cc"]


def test_display_text_strips_ansi_and_keeps_the_last_progress_redraw() -> None:
    assert display_text("\x1b[31mERROR\x1b[0m boom") == "ERROR boom"
    assert display_text(" 10%|#  |\r 50%|### |\r100%|####|") == "100%|####|"


def test_tail_keeps_the_last_lines_with_their_numbers() -> None:
    chunks = ["".join(f"line {i}\n" for i in range(1, 101))]
    view = build_log_view(chunks, limit=10)
    assert view.total_lines == 100
    assert [line.number for line in view.lines] == list(range(91, 101))
    assert view.lines[0].text == "line 91"
    assert view.capped


def test_short_log_is_not_capped() -> None:
    view = build_log_view(["one\ntwo\n"], limit=10)
    assert [line.text for line in view.lines] == ["one", "two"]
    assert not view.capped
    assert not view.empty


def test_empty_log() -> None:
    view = build_log_view([])
    assert view.empty
    assert view.lines == []


def test_search_counts_every_match_case_insensitively_and_keeps_line_numbers() -> None:
    text = "ok\nRuntimeError: CUDA out of memory\nok\ncuda out of memory again\nok\n"
    view = build_log_view([text], "CUDA OUT")
    assert view.match_count == 2
    assert [line.number for line in view.lines] == [2, 4]
    assert view.lines[0].segments == (("RuntimeError: ", False), ("CUDA out", True), (" of memory", False))


def test_search_window_is_capped_but_count_is_complete() -> None:
    view = build_log_view(["".join("hit\n" for _ in range(30))], "hit", limit=5)
    assert view.match_count == 30
    assert len(view.lines) == 5
    assert view.capped


def test_query_is_literal_not_a_regex() -> None:
    pattern = query_pattern("a.b(")
    assert pattern is not None
    assert pattern.search("a.b(") and not pattern.search("axb(")
    assert query_pattern("   ") is None


def test_highlight_marks_each_occurrence() -> None:
    assert highlight("nan nan", query_pattern("nan")) == (("nan", True), (" ", False), ("nan", True))
    assert highlight("plain", None) == (("plain", False),)


def test_very_long_lines_are_cut_for_display() -> None:
    view = build_log_view(["x" * (MAX_LINE_CHARS + 500) + "\n"])
    assert len(view.lines[0].text) == MAX_LINE_CHARS
    assert view.lines[0].truncated


def test_grep_lines_prints_numbers_like_grep_n() -> None:
    assert list(grep_lines(["a\nerror 1\nb\nERROR 2\n"], "error")) == ["2:error 1\n", "4:ERROR 2\n"]


@pytest.mark.django_db
def test_chunk_texts_reads_a_nodes_chunks_in_seq_order(world: World) -> None:
    run = make_run(world.vision)
    node = Node.objects.get(attempt__run=run)
    # Inserted out of order, as concurrent pushes may land.
    LogChunk.objects.create(node=node, seq=1, text="second\n", line_count=1)
    LogChunk.objects.create(node=node, seq=0, text="first\n", line_count=1)
    LogChunk.objects.create(node=node, seq=2, text="third", line_count=1)
    assert "".join(chunk_texts(node)) == "first\nsecond\nthird"
    assert [line.text for line in build_log_view(chunk_texts(node.pk)).lines] == ["first", "second", "third"]
