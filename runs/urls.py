from django.urls import path

from runs import views

urlpatterns = [
    path("", views.run_list, name="run_list"),
]
