"""Run pages, a module per concern: `lists` (run list, compare, fleet), `detail` (the run page, its
log and cancel), `telemetry` (the run page's JSON endpoints).

Every view scopes to `Run.objects.for_user(user)` first: another team's run is a 404, not a
403, so the page does not even confirm that the run exists.
"""
