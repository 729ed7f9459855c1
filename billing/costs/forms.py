"""Forms of the cost page (`/costs/`): its filters."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any, cast

from django import forms
from django.contrib.auth.models import Group
from django.db.models import Q, QuerySet
from django.utils import timezone

from billing.choices import GroupBy
from billing.costs.reports import CostFilters
from billing.models import UsagePolicy
from dashboard.kit.schemas import DATE_BOUNDS
from runs.choices import AcceleratorType, Region

# The stacked spend chart can be split by these (the tables cover the rest).
CHART_GROUPS = [
    (GroupBy.TEAM, GroupBy.TEAM.label),
    (GroupBy.ACCELERATOR_TYPE, GroupBy.ACCELERATOR_TYPE.label),
    (GroupBy.REGION, GroupBy.REGION.label),
]
DEFAULT_DAYS = 30
MAX_DAYS = 3660


class CostFilterForm(forms.Form):
    """Cost page filters: a date range (UTC days, inclusive), team, accelerator, region, policy, grouping."""

    start = forms.DateField(
        required=False, label="From", widget=forms.DateInput({"type": "date"}), validators=DATE_BOUNDS
    )
    end = forms.DateField(required=False, label="to", widget=forms.DateInput({"type": "date"}), validators=DATE_BOUNDS)
    team = forms.ModelChoiceField(required=False, queryset=Group.objects.none(), empty_label="all my teams")
    accelerator = forms.ChoiceField(required=False, choices=[("", "any"), *AcceleratorType.choices])
    region = forms.ChoiceField(required=False, choices=[("", "any"), *Region.choices])
    policy = forms.ChoiceField(required=False, choices=[("", "any")], label="Usage policy")
    group_by = forms.ChoiceField(required=False, choices=CHART_GROUPS, label="Stack by")

    def __init__(self, *args: Any, teams: QuerySet[Group], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ModelChoiceField, self.fields["team"]).queryset = teams
        # The policies these teams can see: those covering one of them, and those covering every team.
        names = (
            UsagePolicy.objects.filter(Q(teams__in=teams) | Q(teams__isnull=True))
            .values_list("name", flat=True)
            .distinct()
            .order_by("name")
        )
        cast(forms.ChoiceField, self.fields["policy"]).choices = [("", "any"), *((name, name) for name in names)]

    def clean(self) -> dict:
        super().clean()
        data = self.cleaned_data
        today = timezone.now().date()
        end = data.get("end") or today
        start = data.get("start") or end - timedelta(days=DEFAULT_DAYS - 1)
        if start > end:
            self.add_error("end", "The range ends before it starts.")
        elif (end - start).days > MAX_DAYS:
            self.add_error("start", "Pick a range of at most ten years.")
        data["start"], data["end"] = start, end
        data["group_by"] = data.get("group_by") or GroupBy.TEAM
        return data

    def filters(self) -> tuple[CostFilters, str]:
        """The page's filters and grouping; an unbound or invalid form filters nothing but the range."""
        data = self.cleaned_data if self.is_bound and self.is_valid() else {}
        start, end = self.range()
        filters = CostFilters(
            start, end,
            team_id=data["team"].pk if data.get("team") else None,
            accelerator_type=data.get("accelerator", ""),
            region=data.get("region", ""),
            usage_policy_name=data.get("policy", ""),
        )  # fmt: skip
        return filters, data.get("group_by") or GroupBy.TEAM

    def range(self) -> tuple[date, date]:
        data = getattr(self, "cleaned_data", {})
        today = timezone.now().date()
        return data.get("start", today - timedelta(days=DEFAULT_DAYS - 1)), data.get("end", today)
