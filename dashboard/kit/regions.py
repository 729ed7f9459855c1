"""The one rule for a cloud region's name, read by the API, the price book and every form.

AWS-style names ("us-west-2", "us-gov-west-1"), where Databricks serverless GPUs run: the rule
catches typos such as "us-west2" or "US West 2" while allowing a workspace home region outside
the six serverless GPU regions. `internet` is the far end of egress that leaves the cloud.
"""

from __future__ import annotations

import re

INTERNET = "internet"
# Without anchors, for schemas that embed it (pydantic's `pattern`).
REGION_PATTERN = r"[a-z]{2}(-gov)?-[a-z]+-\d+"
REGION = re.compile(rf"^{REGION_PATTERN}$")
EXAMPLE = "us-west-2"


def is_region(value: str, *, allow_internet: bool = False) -> bool:
    """Whether `value` names a region (or, when allowed, the internet)."""
    return (allow_internet and value == INTERNET) or REGION.match(value) is not None


def region_problem(value: str, *, allow_internet: bool = False) -> str:
    """What is wrong with `value` as a region name, or "" when nothing is."""
    if is_region(value, allow_internet=allow_internet):
        return ""
    also = f" or {INTERNET!r}" if allow_internet else ""
    return f"{value!r} is not a region name like {EXAMPLE!r}{also}"
