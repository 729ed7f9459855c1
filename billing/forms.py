"""Forms of the cost pages (filters) and the price book pages (prices, CSV upload)."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any, cast

from django import forms
from django.contrib.auth.models import AnonymousUser, Group, User
from django.db.models import Q, QuerySet
from django.utils import timezone

from billing.choices import GroupBy
from billing.models import AcceleratorPrice, EgressPrice, InstancePrice, UsagePolicy
from dashboard.kit import access, regions
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

    def range(self) -> tuple[date, date]:
        data = getattr(self, "cleaned_data", {})
        today = timezone.now().date()
        return data.get("start", today - timedelta(days=DEFAULT_DAYS - 1)), data.get("end", today)


def _check_region(value: str, *, allow_internet: bool = False) -> str:
    problem = regions.region_problem(value, allow_internet=allow_internet)
    if problem:
        raise forms.ValidationError(f"{problem}.")
    return value


class _PriceForm(forms.ModelForm):
    def clean_effective_from(self) -> object:
        value = self.cleaned_data["effective_from"]
        if value is not None and timezone.is_naive(value):
            value = timezone.make_aware(value)
        return value


class AcceleratorPriceForm(_PriceForm):
    class Meta:
        model = AcceleratorPrice
        fields = ["accelerator_type", "region", "kind", "effective_from", "usd_per_hour", "source"]
        help_texts = {"effective_from": "UTC, e.g. 2026-06-01 00:00.", "usd_per_hour": "Per accelerator-hour."}

    def clean_region(self) -> str:
        return _check_region(self.cleaned_data["region"])


class InstancePriceForm(_PriceForm):
    class Meta:
        model = InstancePrice
        fields = ["instance_type", "region", "effective_from", "usd_per_hour", "source"]
        help_texts = {"effective_from": "UTC, e.g. 2026-06-01 00:00.", "usd_per_hour": "Per instance-hour."}

    def clean_region(self) -> str:
        value = self.cleaned_data["region"]
        return _check_region(value) if value else value


class EgressPriceForm(_PriceForm):
    class Meta:
        model = EgressPrice
        fields = [
            "source_region",
            "destination_region",
            "effective_from",
            "usd_per_gb",
            "usd_per_gb_processing",
            "source",
        ]

    def clean_source_region(self) -> str:
        return _check_region(self.cleaned_data["source_region"], allow_internet=True)

    def clean_destination_region(self) -> str:
        return _check_region(self.cleaned_data["destination_region"], allow_internet=True)

    def clean(self) -> dict:
        super().clean()
        data = self.cleaned_data
        if data.get("source_region") and data.get("source_region") == data.get("destination_region"):
            self.add_error("destination_region", "Source and destination are the same region.")
        return data


PRICE_FORMS: dict[str, type[forms.ModelForm]] = {
    "accelerator": AcceleratorPriceForm,
    "instance": InstancePriceForm,
    "egress": EgressPriceForm,
}


class PriceUploadForm(forms.Form):
    """A price CSV to load; `dry_run` checks it and shows what would change, writing nothing."""

    file = forms.FileField(label="CSV file")
    dry_run = forms.BooleanField(required=False, initial=True, label="Preview only (write nothing)")
    replace = forms.BooleanField(required=False, label="Overwrite stored prices that differ")


def can_edit_prices(user: User | AnonymousUser) -> bool:
    """Billing admins edit the price book: staff, or holders of billing.change_acceleratorprice."""
    return access.sees_all_teams(user) or user.has_perm("billing.change_acceleratorprice")
