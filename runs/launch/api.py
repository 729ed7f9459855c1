"""The admission dry run over the API: would this workload be admitted for this team now?

`POST /api/v1/admission` answers what `manage.py check_workload` and the launcher decide
(runs.launch.admission.admit_yaml), scoped to the caller's team; nothing is stored.
"""

from __future__ import annotations

from typing import Literal

from django.http import HttpRequest
from ninja import Router, Schema
from ninja.errors import HttpError
from pydantic import Field

from dashboard.api.core import Access, read_auth
from dashboard.kit.schemas import ERRORS
from runs.launch.admission import admit_yaml

router = Router(tags=["policies"])


class AdmissionIn(Schema):
    workload_yaml: str = Field(..., max_length=1_000_000)
    team: str = Field(..., max_length=150)
    user: str = Field("", max_length=150)
    region: str | None = Field(None, max_length=32)


class ViolationOut(Schema):
    rule: str
    message: str


class AdmissionOut(Schema):
    decision: Literal["allow", "deny"]
    violations: list[ViolationOut]
    warnings: list[str]
    policy: str | None
    region: str
    remaining_budget_usd: str | None
    estimated_usd_per_hour: str | None


@router.post("/admission", auth=read_auth, response={200: AdmissionOut, **ERRORS})
def admission(request: HttpRequest, payload: AdmissionIn) -> dict:
    """Would this workload be admitted for this team now? A dry run: nothing is stored.

    A key (ingest or read) answers only for its own team (403 otherwise); a user only for a
    team they belong to (404 otherwise, as for a team that does not exist).
    """
    access = Access(request)
    if access.key is not None and access.key.team.name != payload.team:
        raise HttpError(403, "This API key belongs to another team; use a key of the team you ask about.")
    team = access.teams().filter(name=payload.team).first()
    if team is None:
        raise HttpError(404, f"No team named {payload.team!r} that you belong to.")
    return admit_yaml(payload.workload_yaml, team, region=payload.region or None).as_dict()
