"""runs.telemetry.streaks.advance reads a GPU's new samples backwards: the same streaks as folding them all."""

from __future__ import annotations

from datetime import timedelta
from itertools import product
from operator import itemgetter

import pytest

from runs.telemetry.streaks import Streak, trailing_start
from tests.conftest import T0


@pytest.mark.parametrize("stored", [None, T0 - timedelta(hours=1)])
@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_the_backward_walk_is_the_forward_fold(stored, count: int) -> None:
    for flags in product([False, True], repeat=count):
        rows = [(T0 + timedelta(seconds=i), flag) for i, flag in enumerate(flags)]
        folded = Streak(last_ts=T0 - timedelta(seconds=1), hung_since=stored)
        for ts, flag in rows:
            folded.fold(ts, flag, False)
        walked = trailing_start(rows, itemgetter(1), itemgetter(0), stored)
        assert walked == folded.hung_since, flags
