from django.urls import path

from runs.clusters import views as cluster_views
from runs.failures import views as postmortem_views
from runs.views import detail, lists, telemetry

urlpatterns = [
    path("", lists.run_list, name="run_list"),
    path("compare/", lists.run_compare, name="run_compare"),
    path("fleet/", lists.fleet, name="fleet"),
    path("<int:pk>/", detail.run_detail, name="run_detail"),
    path("<int:pk>/log/", detail.run_log, name="run_log"),
    path("<int:pk>/log/view/", detail.run_log_view, name="run_log_view"),
    path("<int:pk>/cancel/", detail.run_cancel, name="run_cancel"),
    path("<int:pk>/telemetry.json", telemetry.run_telemetry, name="run_telemetry"),
    path("<int:pk>/status.json", telemetry.run_status, name="run_status"),
]

# Classic clusters and configuration advice (runs/clusters/views.py).
urlpatterns += [
    path("clusters/", cluster_views.cluster_list, name="cluster_list"),
    path("clusters/<int:pk>/", cluster_views.cluster_detail, name="cluster_detail"),
    path("advice/", cluster_views.advice, name="advice"),
]

# Failures and post-mortems (runs/failures/views.py).
urlpatterns += [
    path("failures/", postmortem_views.failures_overview, name="failures_overview"),
    path("<int:pk>/failure/", postmortem_views.failure_detail, name="failure_detail"),
    path("<int:pk>/log/tail.json", postmortem_views.log_tail, name="run_log_tail"),
    path("<int:pk>/search/", postmortem_views.run_search, name="run_search"),
    path("<int:pk>/postmortem/new/", postmortem_views.postmortem_new, name="postmortem_new"),
    path("postmortems/", postmortem_views.postmortem_index, name="postmortem_index"),
    path("postmortems/<int:pk>/", postmortem_views.postmortem_detail, name="postmortem_detail"),
    path("postmortems/<int:pk>/edit/", postmortem_views.postmortem_edit, name="postmortem_edit"),
]
