from django.urls import path

from billing import views
from billing.policies import views as policy_views
from billing.prices import views as price_views
from billing.reconcile import views as reconcile_views

urlpatterns = [
    path("", views.cost_overview, name="cost_overview"),
    path("prices/", price_views.price_list, name="price_list"),
    path("prices/history/", price_views.price_history, name="price_history"),
    path("prices/upload/", price_views.price_upload, name="price_upload"),
    path("prices/export.csv", price_views.price_export, name="price_export"),
    path("prices/<str:kind>/new/", price_views.price_edit, name="price_new"),
    path("prices/<str:kind>/<int:pk>/", price_views.price_edit, name="price_edit"),
    path("policies/", policy_views.policy_list, name="policy_list"),
    path("policies/new/", policy_views.policy_edit, name="policy_new"),
    path("policies/<int:pk>/", policy_views.policy_detail, name="policy_detail"),
    path("policies/<int:pk>/edit/", policy_views.policy_edit, name="policy_edit"),
    path("policies/<int:pk>/versions/", policy_views.policy_versions, name="policy_versions"),
    path("policies/<int:pk>/versions/<int:number>/rollback/", policy_views.policy_rollback, name="policy_rollback"),
    path("policies/<int:pk>/channels/", policy_views.channel_add, name="policy_channel_add"),
    path(
        "policies/<int:pk>/channels/<int:channel_pk>/delete/", policy_views.channel_delete, name="policy_channel_delete"
    ),
]

# Reconciliation with the provider's bill (billing/reconcile/views.py).
urlpatterns += [path("reconcile/", reconcile_views.reconcile_overview, name="reconcile_overview")]
