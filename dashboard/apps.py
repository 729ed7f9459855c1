from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "dashboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from dashboard import taskstate  # noqa: F401  (records every Celery task's pass, in workers)
        from dashboard.kit import lookups  # noqa: F401  (registers field__any)
        from dashboard.kit.pg import session_settings

        connection_created.connect(session_settings, dispatch_uid="airboard-session-settings")
