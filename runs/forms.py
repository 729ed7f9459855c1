"""Forms of the run pages: the run list's filters, and the search box's bound."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib.auth.models import AnonymousUser, Group, User
from django.db import models

from dashboard.kit import access
from dashboard.kit.schemas import DATE_BOUNDS
from runs.choices import AcceleratorType, Region, RunStatus

# Search boxes take at most this many characters; longer is a form error, not a slow query.
MAX_QUERY_LENGTH = 200


def blank_choice(choices: type[models.Choices]) -> list[tuple[str, str]]:
    return [("", "any"), *choices.choices]


class RunFilterForm(forms.Form):
    """The run list's filters; invalid values become form errors and are not applied."""

    q = forms.CharField(
        required=False,
        max_length=MAX_QUERY_LENGTH,
        label="Search",
        widget=forms.TextInput({"type": "search", "placeholder": "run id, experiment, creator, MLflow run id"}),
    )
    status = forms.ChoiceField(required=False, choices=blank_choice(RunStatus))
    team = forms.ModelChoiceField(required=False, queryset=Group.objects.none(), empty_label="any")
    creator = forms.CharField(required=False, max_length=MAX_QUERY_LENGTH)
    accelerator = forms.ChoiceField(required=False, choices=blank_choice(AcceleratorType))
    region = forms.ChoiceField(required=False, choices=blank_choice(Region))
    experiment = forms.CharField(required=False, max_length=MAX_QUERY_LENGTH, label="Experiment contains")
    submitted_from = forms.DateField(
        required=False, label="Submitted from", widget=forms.DateInput({"type": "date"}), validators=DATE_BOUNDS
    )
    submitted_to = forms.DateField(
        required=False, label="to", widget=forms.DateInput({"type": "date"}), validators=DATE_BOUNDS
    )
    # A Databricks sweep's parent run id: its iterations are runs naming it (`sweep_run_id`).
    sweep = forms.RegexField(
        required=False, max_length=20, regex=r"^[0-9]+$", label="Sweep run id",
        error_messages={"invalid": "A sweep is named by its Databricks run id (digits)."},
    )  # fmt: skip

    def __init__(self, *args: Any, user: User | AnonymousUser, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Only teams the user can see are choices, so the select never lists another team.
        cast(forms.ModelChoiceField, self.fields["team"]).queryset = access.visible_teams(user)

    def clean(self) -> dict:
        super().clean()
        data = self.cleaned_data
        start, end = data.get("submitted_from"), data.get("submitted_to")
        if start and end and start > end:
            # Which end the user got wrong is unknowable: apply neither, say why.
            self.add_error(None, "The submitted range ends before it starts; no date filter was applied.")
            data.pop("submitted_from", None)
            data.pop("submitted_to", None)
        return data
