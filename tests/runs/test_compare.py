"""Comparing runs (runs.compare): selection limits, scoping, config diff, overlaid metrics."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from runs.models import MetricPoint
from tests.conftest import T0, World, make_run

pytestmark = pytest.mark.django_db


def url(*ids: object, **extra: str) -> str:
    query = "&".join([*(f"run={i}" for i in ids), *(f"{k}={v}" for k, v in extra.items())])
    return f"{reverse('run_compare')}?{query}"


def test_two_runs_side_by_side_with_differences_only(world: World) -> None:
    a = make_run(world.vision, "run-a", parameters={"lr": 0.001, "seed": 42, "batch": 32})
    b = make_run(world.vision, "run-b", parameters={"lr": 0.002, "seed": 42}, num_accelerators=16)
    for run, loss in ((a, 2.0), (b, 1.5)):
        MetricPoint.objects.bulk_create(
            MetricPoint(run=run, key=key, step=s, ts=T0 + timedelta(seconds=s), value=value)
            for s in (10, 20)
            for key, value in (("loss", loss), ("samples_per_second", 4500.0))
        )
    client = world.client_for(world.alice)
    response = client.get(url(a.pk, b.pk))
    assert response.status_code == 200
    figure = response.context["metrics"]
    # One panel (y axis) per metric, one line per run in each: loss is not flattened by 4,500 samples/s.
    assert {t["yaxis"] for t in figure["data"]} == {"y", "y2"} and len(figure["data"]) == 4
    keys = {row.key: row for row in response.context["rows"]}
    assert keys["parameters.lr"].differs and not keys["parameters.seed"].differs
    assert keys["parameters.batch"].values == ("32", "—") and keys["num_accelerators"].differs
    only = client.get(url(a.pk, b.pk, diff="1")).context["rows"]
    assert {row.key for row in only} == {"parameters.lr", "parameters.batch", "num_accelerators"}
    by_time = client.get(url(a.pk, b.pk, x="time")).context["metrics"]
    # make_run starts runs at T0: steps 10 and 20 were logged 10 s and 20 s in.
    assert by_time["data"][0]["x"] == [round(10 / 60, 2), round(20 / 60, 2)]


def test_selection_is_checked_and_scoped(world: World) -> None:
    mine = make_run(world.vision, "run-a")
    theirs = make_run(world.nlp, "nlp-1")
    client = world.client_for(world.alice)
    assert client.get(url(mine.pk, theirs.pk)).status_code == 404  # another team's run is not there
    eleven = [make_run(world.vision, f"run-{i}").pk for i in range(11)]
    response = client.get(url(*eleven))
    assert response.status_code == 400 and "compare at most 10" in response.content.decode()
    assert client.get(url("x1")).status_code == 400
    nothing = client.get(reverse("run_compare"))
    assert nothing.status_code == 200 and "no run picked yet" in nothing.content.decode()
    assert "compare-form" in client.get(reverse("run_list")).content.decode()
