"""Forms of the policy pages: a policy, and an alert channel (whose secret is shown once)."""

from __future__ import annotations

import re
import secrets
from typing import Any

from django import forms
from django.contrib.auth.models import AnonymousUser, Group, User
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator, validate_email

from billing.choices import ChannelKind
from billing.models import AlertChannel, UsagePolicy
from billing.policies.versions import setting_label
from dashboard.kit import access
from dashboard.kit.outbound import destination_problem
from dashboard.kit.regions import region_problem
from runs.choices import AcceleratorType

UUID_FORMAT = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
MAX_THRESHOLD = 1000


# The permission of policy admins (besides staff): they write policies and see every team's part.
MANAGE_POLICIES = "billing.manage_policies"


def can_manage_policies(user: User | AnonymousUser) -> bool:
    """Policy admins: staff, or holders of the `billing.manage_policies` permission."""
    return access.sees_all_teams(user) or bool(user.is_authenticated and user.has_perm(MANAGE_POLICIES))


class CommaListField(forms.CharField):
    """A list typed as comma-separated text ("50, 80, 100")."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return ", ".join(str(v) for v in value)
        return value

    def to_python(self, value: Any) -> list[str]:  # type: ignore[override]  # a CharField that cleans to a list
        text = super().to_python(value) or ""
        return [part.strip() for part in text.split(",") if part.strip()]


class ThresholdsField(CommaListField):
    """Percent thresholds: whole numbers from 1 to 1000, sorted, without repeats."""

    def clean(self, value: Any) -> list[int]:
        out = set()
        for part in super().clean(value):
            # isascii: '²'.isdigit() is true but int('²') raises.
            if not (part.isascii() and part.isdigit() and len(part) <= 6) or not 1 <= int(part) <= MAX_THRESHOLD:
                raise ValidationError(f"{part!r} is not a whole percent from 1 to {MAX_THRESHOLD}.")
            out.add(int(part))
        return sorted(out)


class RegionsField(CommaListField):
    def clean(self, value: Any) -> list[str]:
        regions = super().clean(value)
        for region in regions:
            problem = region_problem(region)
            if problem:
                raise ValidationError(f"{problem}.")
        return sorted(set(regions))


class PolicyForm(forms.ModelForm):
    """Create or edit a usage policy."""

    teams = forms.ModelMultipleChoiceField(
        queryset=Group.objects.order_by("name"), required=False, help_text="None selected: every team."
    )
    alert_thresholds = ThresholdsField(required=False, help_text="Percent of the budget, e.g. 50, 80, 100.")
    forecast_thresholds = ThresholdsField(
        required=False, help_text="Alert when the forecast to the period's end passes these percents."
    )
    allowed_accelerator_types = forms.MultipleChoiceField(
        choices=AcceleratorType.choices, required=False, widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: any type.",
    )  # fmt: skip
    allowed_regions = RegionsField(required=False, help_text="Comma-separated; empty: any region.")

    class Meta:
        model = UsagePolicy
        fields = [
            "name", "databricks_policy_id", "description", "teams", "budget_usd", "period", "period_start_day",
            "alert_thresholds", "forecast_thresholds", "action", "allowed_accelerator_types", "max_num_accelerators",
            "max_timeout_minutes", "max_retries", "allowed_regions", "allow_cross_region", "idle_gpu_percent",
            "idle_warn_minutes", "idle_cancel_minutes",
        ]  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The fields declared above take their label from the model as the others do, so the
        # form, the admin and the history page (billing.policies.history) name a setting alike.
        for name in self.declared_fields:
            self.fields[name].label = setting_label(name)

    def clean_databricks_policy_id(self) -> str:
        value = (self.cleaned_data.get("databricks_policy_id") or "").strip().lower()
        if value and not UUID_FORMAT.match(value):
            raise ValidationError("Give the policy's id as Databricks shows it, a UUID; leave it blank for none.")
        return value

    def clean_budget_usd(self) -> Any:
        budget = self.cleaned_data.get("budget_usd")
        if budget is not None and budget <= 0:
            raise ValidationError("A budget must be more than $0; leave it blank for no budget.")
        return budget

    def clean_idle_gpu_percent(self) -> Any:
        value = self.cleaned_data.get("idle_gpu_percent")
        if value is not None and not 0 < value <= 100:
            raise ValidationError("Give a utilization percent above 0 and at most 100.")
        return value

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        percent, warn, cancel = (
            data.get("idle_gpu_percent"),
            data.get("idle_warn_minutes"),
            data.get("idle_cancel_minutes"),
        )
        if percent is not None and warn is None and cancel is None:
            self.add_error(
                "idle_warn_minutes", "The idle-GPU rule needs minutes to warn after, to cancel after, or both."
            )
        if percent is None and (warn is not None or cancel is not None):
            self.add_error("idle_gpu_percent", "Give the utilization percent below which GPUs count as idle.")
        if warn is not None and cancel is not None and cancel <= warn:
            self.add_error(
                "idle_cancel_minutes", "Cancel after more minutes than the warning, so the warning comes first."
            )
        if data.get("action") != "notify" and data.get("budget_usd") is None:
            self.add_error("action", "Refusing or cancelling runs needs a budget.")
        return data


class ChannelForm(forms.ModelForm):
    """Add an alert channel; a signed webhook without a secret gets a generated one."""

    secret = forms.CharField(
        required=False, max_length=200, widget=forms.PasswordInput,
        help_text="Signed webhooks only. Blank: one is generated. Shown once, after saving.",
    )  # fmt: skip

    class Meta:
        model = AlertChannel
        fields = ["kind", "target", "secret"]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        kind, target = data.get("kind"), (data.get("target") or "").strip()
        if kind == ChannelKind.EMAIL:
            for address in [a.strip() for a in target.split(",") if a.strip()] or [""]:
                try:
                    validate_email(address)
                except ValidationError:
                    self.add_error("target", f"{address!r} is not an email address.")
        elif kind:
            try:
                URLValidator(schemes=["http", "https"])(target)
            except ValidationError:
                self.add_error("target", "Give the webhook's http(s) URL.")
            else:
                # Resolved now and again at each delivery (dashboard/kit/outbound.py): no private,
                # loopback, link-local or metadata destinations.
                problem = destination_problem(target)
                if problem:
                    self.add_error("target", f"This URL cannot receive webhooks: {problem}.")
        if kind == ChannelKind.WEBHOOK and not data.get("secret"):
            data["secret"] = secrets.token_urlsafe(32)
        if kind != ChannelKind.WEBHOOK:
            data["secret"] = ""
        data["target"] = target
        return data

    def save(self, commit: bool = True) -> AlertChannel:
        channel = super().save(commit=False)
        channel.secret = self.cleaned_data["secret"]
        channel.secret_prefix = channel.secret[:6]
        if commit:
            channel.save()
        return channel
