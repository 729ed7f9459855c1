from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from dashboard import metrics_views, views
from dashboard.api import api

# The project wires the two apps' APIs into one (routers by import path: neither app imports the other's).
api.add_router("/", "runs.api.router")
api.add_router("/", "billing.api.router")

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
    path("admin/", admin.site.urls),
]
