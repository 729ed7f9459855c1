"""Another team's admission dry run writes nothing into a policy's log (issue 33).

On 4ab1749 a read key of nlp asking about vision's policy was denied, and the denial was stored
as a row of vision's admission log (its policy page lists them): any team could write there.
"""

from __future__ import annotations

import json

from billing.models import Admission, UsagePolicy
from dashboard.models import ApiKeyRole
from tests.runs.launch.test_admission import WORKLOAD, policy  # noqa: F401 (fixture)


def test_a_dry_run_naming_another_teams_policy_stores_nothing(world, policy: UsagePolicy) -> None:  # noqa: F811
    body = {"workload_yaml": WORKLOAD, "region": "us-west-2"}
    response = world.api(world.nlp, ApiKeyRole.READ).post(
        "/api/v1/admission", json.dumps({**body, "team": "nlp"}), content_type="application/json"
    )
    assert response.status_code == 200, response.content
    assert "does not cover team nlp" in response.json()["violations"][0]["message"]
    assert not Admission.objects.exists()
    # The policy's own team still has its dry runs logged.
    world.api(world.vision, ApiKeyRole.READ).post(
        "/api/v1/admission", json.dumps({**body, "team": "vision"}), content_type="application/json"
    )
    assert list(Admission.objects.values_list("team__name", flat=True)) == ["vision"]
