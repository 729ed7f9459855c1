"""Forms of the price book pages (`/costs/prices/`): a price of each kind, a CSV upload."""

from __future__ import annotations

from django import forms
from django.contrib.auth.models import AnonymousUser, User
from django.utils import timezone

from billing.models import AcceleratorPrice, EgressPrice, InstancePrice
from dashboard.kit import access, regions


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
