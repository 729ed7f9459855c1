"""Forms of the reconciliation page (`/costs/reconcile/`): its filters."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from django import forms
from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.utils import timezone


class ReconcileFilterForm(forms.Form):
    """A UTC date range (default: this month so far) and an optional team."""

    start = forms.DateField(required=False, label="From", widget=forms.DateInput({"type": "date"}))
    end = forms.DateField(required=False, label="to", widget=forms.DateInput({"type": "date"}))
    team = forms.ModelChoiceField(required=False, queryset=Group.objects.none(), empty_label="all my teams")

    def __init__(self, *args: Any, teams: QuerySet[Group], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ModelChoiceField, self.fields["team"]).queryset = teams

    def clean(self) -> dict:
        super().clean()
        data = self.cleaned_data
        if data.get("start") and data.get("end") and data["start"] > data["end"]:
            self.add_error("end", "The range ends before it starts.")
        return data

    def values(self) -> tuple:
        today = timezone.now().date()
        data = self.cleaned_data if self.is_bound and self.is_valid() else {}
        end = data.get("end") or today
        start = data.get("start") or min(end.replace(day=1), end)
        if (end - start).days > 3660:
            start = end - timedelta(days=3660)
        return start, end, data.get("team")
