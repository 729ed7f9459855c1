"""Who sees what: the one rule every page, API, export and task that filters by team reads.

Staff (and superusers) see every team; everyone else sees the teams (auth groups) they belong
to. An API key sees exactly its own team. Nothing else in the code decides this: a view asks
`scope(queryset, user)` or `visible_teams(user)`, never `user.is_staff` or `user.groups`.

Low in the house: it imports Django's auth only, so models and every app may read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from django.contrib.auth.models import AnonymousUser, Group
from django.db.models import Q, QuerySet

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from dashboard.models import ApiKey

# A queryset of any model, its class (a custom QuerySet) kept.
QS = TypeVar("QS", bound=QuerySet[Any])


def sees_all_teams(user: User | AnonymousUser) -> bool:
    """Staff and superusers see every team's data; nobody else does."""
    return bool(user.is_authenticated and (user.is_staff or user.is_superuser))


def visible_teams(user: User | AnonymousUser) -> QuerySet[Group]:
    """The teams `user` may see, by name: every team for staff, their own groups otherwise."""
    if sees_all_teams(user):
        return Group.objects.order_by("name")
    if not user.is_authenticated:
        return Group.objects.none()
    return Group.objects.filter(pk__in=user.groups.values("pk")).order_by("name")


def visible_team_ids(user: User | AnonymousUser, *, all_with_perm: str = "") -> list[int] | None:
    """The ids of `user`'s teams, or None for "every team": for code that filters ids.

    Staff see every team; so do holders of `all_with_perm` where a page names one (a policy
    admin, `billing.manage_policies`, reads every team's part of a policy).
    """
    if sees_all_teams(user) or (all_with_perm and user.is_authenticated and user.has_perm(all_with_perm)):
        return None
    return list(visible_teams(user).values_list("pk", flat=True))


def key_teams(key: ApiKey) -> QuerySet[Group]:
    """What an API key sees: exactly its own team, whatever its creator may see."""
    return Group.objects.filter(pk=key.team_id)


def team_q(user: User | AnonymousUser, field: str = "team") -> Q:
    """A filter limiting `field` (a team foreign key, or a path to one) to `user`'s teams."""
    if sees_all_teams(user):
        return Q()
    return Q(**{f"{field}__in": visible_teams(user).values("pk")})


def scope(queryset: QS, user: User | AnonymousUser, field: str = "team") -> QS:
    """`queryset` limited to rows whose `field` is one of `user`'s teams (all rows for staff)."""
    if sees_all_teams(user):
        return queryset
    return queryset.filter(team_q(user, field))
