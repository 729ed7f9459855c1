"""The workload YAML that `databricks air run` submits: parse it, check it, report every problem.

`parse_workload(text)` returns a `Workload` or raises `WorkloadError` carrying every `Problem`
found in one pass, each with the dotted path (`compute.num_accelerators`, `secrets.HF_TOKEN`)
and the 1-based line of the offending key, so a user fixes the file in one go.

Two steps: runs/workload/loader.py reads the YAML into plain values and the line of every key
(duplicate keys, unreadable values and alias bombs are its problems); runs/workload/models.py
checks those values against pydantic models of the file (the CLI's rules, sourced there), whose
errors come back located by path, put on their lines here. `max_retries` defaults to 3 when the
file does not set it (DEFAULT_MAX_RETRIES: `check_workload`, admission and the launcher all read
`Workload.max_retries`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from runs.choices import GPUS_PER_NODE, AcceleratorType
from runs.workload.loader import Loaded, Problem
from runs.workload.models import WorkloadFile
from runs.workload.sections import SAID

__all__ = ["DEFAULT_MAX_RETRIES", "Problem", "Workload", "WorkloadError", "parse_workload"]

# `max_retries` when the file does not set it, as the CLI submits it.
DEFAULT_MAX_RETRIES = 3


class WorkloadError(ValueError):
    """A workload file was refused; `.problems` lists every reason, in file order."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(problems, key=lambda p: p.line or 0)
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True, kw_only=True)
class Workload:
    """A validated workload file: the fields the dashboard uses, plus the parsed mapping as `raw`."""

    experiment_name: str
    accelerator_type: str
    num_accelerators: int
    gpus_per_node: int
    nodes: int
    # A list of commands in the file is joined with newlines: the CLI runs them as one script.
    command: str
    environment: dict[str, Any] = field(default_factory=dict)
    code_source: dict[str, Any] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    env_variables: dict[str, str | int | float | bool] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)  # name -> "scope/key"
    max_retries: int = DEFAULT_MAX_RETRIES
    timeout_minutes: int | None = None
    usage_policy_name: str | None = None
    usage_policy_id: str | None = None
    idempotency_token: str | None = None
    mlflow_run_name: str | None = None
    mlflow_experiment_directory: str | None = None
    permissions: list[dict[str, str]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    def run_fields(self) -> dict[str, Any]:
        """The fields of a Run this workload decides (upserts and the local launcher fill runs from it)."""
        return {
            "experiment_name": self.experiment_name,
            "accelerator_type": self.accelerator_type,
            "num_accelerators": self.num_accelerators,
            "gpus_per_node": self.gpus_per_node,
            "timeout_minutes": self.timeout_minutes,
            "max_retries": self.max_retries,
            "usage_policy_name": self.usage_policy_name,
            "parameters": self.parameters,
        }

    def summary(self) -> dict[str, Any]:
        """The JSON-safe headline fields (what `check_workload --json` prints)."""
        return {
            "experiment_name": self.experiment_name,
            "accelerator_type": self.accelerator_type,
            "num_accelerators": self.num_accelerators,
            "gpus_per_node": self.gpus_per_node,
            "nodes": self.nodes,
            "max_retries": self.max_retries,
            "timeout_minutes": self.timeout_minutes,
            "usage_policy_name": self.usage_policy_name,
            "usage_policy_id": self.usage_policy_id,
            "secrets": dict(self.secrets),
            "env_variables": sorted(self.env_variables),
            "parameters": sorted(self.parameters),
        }


def parse_workload(text: str) -> Workload:
    """Parse and validate a workload file; raise `WorkloadError` listing every problem found."""
    loaded = Loaded(text)
    if loaded.root is None:
        raise WorkloadError(loaded.problems)
    try:
        checked = WorkloadFile.model_validate(loaded.root)
    except ValidationError as exc:
        # Every error the models raise is worded already (sections.Section.wording): only the line is new.
        found = [loaded.problem(error["loc"], error["msg"]) for error in exc.errors() if error["msg"] != SAID]
        raise WorkloadError([*loaded.problems, *found]) from None
    if loaded.problems:
        raise WorkloadError(loaded.problems)
    return _workload(checked, loaded.root)


def _workload(checked: WorkloadFile, raw: dict[str, Any]) -> Workload:
    compute = checked.compute
    per_node = GPUS_PER_NODE[AcceleratorType(compute.accelerator_type)]
    return Workload(
        experiment_name=checked.experiment_name,
        accelerator_type=compute.accelerator_type,
        num_accelerators=compute.num_accelerators,
        gpus_per_node=per_node,
        nodes=-(-compute.num_accelerators // per_node),
        command=checked.command,
        environment=raw.get("environment") or {},
        code_source=raw.get("code_source"),
        parameters=checked.parameters or {},
        env_variables=checked.env_variables or {},
        secrets=checked.secrets or {},
        max_retries=DEFAULT_MAX_RETRIES if checked.max_retries is None else checked.max_retries,
        timeout_minutes=checked.timeout_minutes,
        usage_policy_name=checked.usage_policy_name,
        usage_policy_id=checked.usage_policy_id,
        idempotency_token=checked.idempotency_token,
        mlflow_run_name=checked.mlflow_run_name,
        mlflow_experiment_directory=checked.mlflow_experiment_directory,
        permissions=raw.get("permissions") or [],
        raw=raw,
    )
