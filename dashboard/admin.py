"""Admin for API keys: the hash is never listed, never editable, and keys are revoked, not deleted."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from dashboard.models import ApiKey


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ("prefix", "name", "team", "role", "created_at", "last_used_at", "revoked_at")
    list_filter = ("role", "team", ("revoked_at", admin.EmptyFieldListFilter))
    search_fields = ("prefix", "name", "team__name")
    list_select_related = ("team",)
    # The stored hash and prefix are evidence, never edited by hand.
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at", "revoked_at")
    actions = ["revoke"]

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> tuple[str, ...]:
        if obj is None:
            # Adding: the key is generated on save, so only what the admin chooses is shown.
            return ("name", "team", "role")
        return ("name", "team", "role", "prefix", "key_hash", "created_at", "last_used_at", "revoked_at")

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        # ApiKey.issue() is the one place a raw key is made; it is shown here once and never stored.
        key, raw = ApiKey.issue(obj.team, obj.role, name=obj.name)
        obj.pk, obj.prefix, obj.key_hash, obj.created_at = key.pk, key.prefix, key.key_hash, key.created_at
        self.message_user(
            request, f"New key for {key.team.name}: {raw} (copy it now; it is not shown again).", messages.WARNING
        )

    @admin.action(description="Revoke selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        # Only keys still live: revoking twice would move the revocation time.
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} key{'s' if count != 1 else ''}.", messages.SUCCESS)
