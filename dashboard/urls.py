from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from billing.api import router as billing_router
from dashboard import metrics_views, views
from dashboard.api.core import api
from runs.api import router as runs_router
from runs.launch.api import router as admission_router
from runs.telemetry.api import router as telemetry_router

# The project wires the two apps' APIs into one (imported here, so the import graph and its
# contracts see the edges; neither app imports the other's).
api.add_router("/", runs_router)
api.add_router("/", telemetry_router)
api.add_router("/", admission_router)
api.add_router("/", billing_router)

urlpatterns = [
    path("", views.overview, name="overview"),
    path("login/", views.login_view, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("collectors/", views.collectors, name="collectors"),
    # Prometheus scrape target; bearer token, not a login (dashboard/metrics_views.py).
    path("metrics", metrics_views.metrics, name="metrics"),
    path("runs/", include("runs.urls")),
    path("costs/", include("billing.urls")),
    path("api/v1/", api.urls),
    # The admin's login form under the same per-address limit as the site's (dashboard/views.py).
    path("admin/login/", views.per_address_login_limit(admin.site.login)),
    path("admin/", admin.site.urls),
    # Browsers ask for /favicon.ico on their own (API docs, JSON, a bookmark): send them the site's icon.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True), name="favicon"),
]
