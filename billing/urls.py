from django.urls import path

from billing import views

urlpatterns = [
    path("", views.cost_overview, name="cost_overview"),
    path("prices/", views.price_list, name="price_list"),
    path("prices/history/", views.price_history, name="price_history"),
    path("prices/upload/", views.price_upload, name="price_upload"),
    path("prices/export.csv", views.price_export, name="price_export"),
    path("prices/<str:kind>/new/", views.price_edit, name="price_new"),
    path("prices/<str:kind>/<int:pk>/", views.price_edit, name="price_edit"),
]
