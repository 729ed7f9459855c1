"""Forms of the failure pages: the failures filter and a post-mortem's editable fields."""

from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib.auth.models import AnonymousUser, Group, User
from django.core.validators import MaxLengthValidator

from dashboard.kit import access
from dashboard.kit.schemas import DATE_BOUNDS
from runs.failures import postmortem
from runs.failures.rules import CLASSES
from runs.models import PostMortem


class PostMortemForm(forms.ModelForm):
    """A post-mortem's fields; action items edited as `- [ ] text @owner` lines."""

    action_items_text = forms.CharField(
        required=False,
        max_length=postmortem.ACTION_ITEMS_MAX_CHARS,
        label="Action items",
        widget=forms.Textarea({"rows": 5, "placeholder": "- [ ] Lower the per-GPU batch size @alice"}),
        help_text="One per line: - [ ] what @owner; [x] when done.",
    )

    class Meta:
        model = PostMortem
        fields = ["title", "summary", "status", "owner", "root_cause", "body"]
        widgets = {
            "summary": forms.Textarea({"rows": 3}),
            "root_cause": forms.Textarea({"rows": 6}),
            "body": forms.Textarea({"rows": 14}),
        }

    def __init__(self, *args: Any, team: Group, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Owners come from the run's team only.
        cast(forms.ModelChoiceField, self.fields["owner"]).queryset = User.objects.filter(groups=team).order_by(
            "username"
        )
        # Markdown fields are rendered on every view of the page: bounded here, where they are written.
        for name in ("summary", "root_cause", "body"):
            cast(forms.CharField, self.fields[name]).max_length = postmortem.MARKDOWN_MAX_CHARS
            self.fields[name].validators.append(MaxLengthValidator(postmortem.MARKDOWN_MAX_CHARS))
            self.fields[name].widget.attrs["maxlength"] = str(postmortem.MARKDOWN_MAX_CHARS)
        if self.instance.pk and not self.is_bound:
            self.initial["action_items_text"] = postmortem.format_action_items(self.instance.action_items)

    def save(self, commit: bool = True) -> PostMortem:
        self.instance.action_items = postmortem.parse_action_items(self.cleaned_data.get("action_items_text", ""))
        return super().save(commit)


class FailureFilterForm(forms.Form):
    team = forms.ModelChoiceField(required=False, queryset=Group.objects.none(), empty_label="any")
    failure_class = forms.ChoiceField(required=False, label="Class")
    start = forms.DateField(
        required=False, label="From", widget=forms.DateInput({"type": "date"}), validators=DATE_BOUNDS
    )
    end = forms.DateField(required=False, label="to", widget=forms.DateInput({"type": "date"}), validators=DATE_BOUNDS)

    def __init__(self, *args: Any, user: User | AnonymousUser, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ModelChoiceField, self.fields["team"]).queryset = access.visible_teams(user)
        cast(forms.ChoiceField, self.fields["failure_class"]).choices = [("", "any")] + [
            (k, c.title) for k, c in CLASSES.items()
        ]
