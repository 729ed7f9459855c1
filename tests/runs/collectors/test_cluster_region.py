"""A classic cluster's region from its zone: AWS and GCP zones name it, Databricks' own values do not.

Zone shapes as databricks-sdk documents `aws_attributes.zone_id` ("us-west-2a", "auto") and
`gcp_attributes.zone_id` ("HA", "AUTO", or a GCP zone such as us-central1-a).
"""

from __future__ import annotations

import pytest

from runs.collectors.run_records import cluster_fields, region_from_zone


@pytest.mark.parametrize(
    ("zone", "region"),
    [
        ("us-west-2a", "us-west-2"),
        ("eu-central-1b", "eu-central-1"),
        ("us-gov-west-1a", "us-gov-west-1"),
        ("us-central1-a", "us-central1"),
        ("europe-west4-b", "europe-west4"),
        ("auto", ""),
        ("HA", ""),
        ("AUTO", ""),
        ("us-west-2-lax-1a", ""),  # an AWS Local Zone: not a region of its own
        ("", ""),
    ],
)
def test_region_from_zone(zone: str, region: str) -> None:
    assert region_from_zone(zone) == region


def test_a_gcp_cluster_has_its_region() -> None:
    record = {"cluster_id": "0101-gcp", "node_type_id": "a2-highgpu-1g", "gcp_attributes": {"zone_id": "us-central1-a"}}
    assert cluster_fields(record)["region"] == "us-central1"


def test_an_aws_cluster_has_its_region_and_auto_has_none() -> None:
    assert cluster_fields({"aws_attributes": {"zone_id": "us-east-1d"}})["region"] == "us-east-1"
    assert cluster_fields({"aws_attributes": {"zone_id": "auto"}})["region"] == ""


def test_an_azure_cluster_names_no_region() -> None:
    record = {"node_type_id": "Standard_NC6s_v3", "azure_attributes": {"availability": "ON_DEMAND_AZURE"}}
    assert cluster_fields(record)["region"] == ""


def test_attributes_that_are_not_objects_give_no_region() -> None:
    assert cluster_fields({"gcp_attributes": ["x"], "aws_attributes": "us-west-2a"})["region"] == ""
