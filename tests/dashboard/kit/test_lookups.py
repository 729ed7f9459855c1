"""`field__any=[...]` answers what `field__in` answers, as one array parameter on PostgreSQL."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.models import Run
from tests.conftest import World, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(world: World) -> list[Run]:
    return [make_run(world.vision, f"run-{i}") for i in range(5)]


def ids(queryset) -> set[int]:
    return set(queryset.values_list("pk", flat=True))


def test_the_same_rows_as_in(runs: list[Run]) -> None:
    wanted = [runs[0].pk, runs[3].pk, 10**12, None]  # a missing id and a None are nothing
    assert ids(Run.objects.filter(pk__any=wanted)) == ids(Run.objects.filter(pk__in=wanted)) == {runs[0].pk, runs[3].pk}
    names = ["run-1", "run-4", "run-9"]
    assert ids(Run.objects.filter(external_id__any=names)) == {runs[1].pk, runs[4].pk}
    assert ids(Run.objects.exclude(pk__any=[runs[2].pk])) == ids(Run.objects.exclude(pk=runs[2].pk))
    assert not Run.objects.filter(pk__any=[]).exists() and not Run.objects.filter(pk__any=[None]).exists()
    subquery = Run.objects.filter(external_id="run-2").values("pk")
    assert ids(Run.objects.filter(pk__any=subquery)) == {runs[2].pk}


def test_one_parameter_on_postgresql_a_list_elsewhere(runs: list[Run]) -> None:
    many = [run.pk for run in runs] + list(range(10**9, 10**9 + 5000))
    with CaptureQueriesContext(connection) as captured:
        assert ids(Run.objects.filter(pk__any=many)) == {run.pk for run in runs}
    sql = captured.captured_queries[-1]["sql"]
    if connection.vendor == "postgresql":
        assert "= ANY(" in sql and " IN (" not in sql and sql.count(",") > 5000  # the array, inlined by the log
    else:
        assert " IN (" in sql and "ANY" not in sql


def test_on_a_foreign_key_ids_and_instances(world: World, runs: list[Run]) -> None:
    from runs.models import Attempt

    wanted = [runs[1], runs[2].pk]
    expected = set(Attempt.objects.filter(run__in=wanted).values_list("pk", flat=True))
    assert len(expected) == 2
    for lookup in ("run__any", "run_id__any"):
        found = set(Attempt.objects.filter(**{lookup: wanted}).values_list("pk", flat=True))
        assert found == expected, lookup
    assert set(Run.objects.filter(team__any=[world.vision]).values_list("pk", flat=True)) == {r.pk for r in runs}
