from django.urls import path

from runs import views

urlpatterns = [
    path("", views.run_list, name="run_list"),
    path("fleet/", views.fleet, name="fleet"),
    path("<int:pk>/", views.run_detail, name="run_detail"),
    path("<int:pk>/log/", views.run_log, name="run_log"),
    path("<int:pk>/cancel/", views.run_cancel, name="run_cancel"),
    path("<int:pk>/telemetry.json", views.run_telemetry, name="run_telemetry"),
]
