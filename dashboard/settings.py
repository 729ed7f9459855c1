"""Airboard settings: every value comes from the environment (see `.env.example`).

Embedded default: SQLite under `var/` (WAL mode) and a Celery broker on the filesystem, so
one machine with only Python runs the whole product. `DATABASE_URL` and `REDIS_URL` switch
to PostgreSQL and Redis for a team deployment.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from dashboard.kit.env import env_bool, env_float, env_int, env_list, env_str, env_url
from dashboard.schedule import BEAT_SCHEDULE

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("AIRBOARD_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DJANGO_DEBUG", False)
VAR_DIR.mkdir(parents=True, exist_ok=True)
(VAR_DIR / "static").mkdir(exist_ok=True)
SECRET_KEY = env_str("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if env_bool("AIRBOARD_REQUIRE_SECRET_KEY", False):
        raise ImproperlyConfigured("DJANGO_SECRET_KEY is required when AIRBOARD_REQUIRE_SECRET_KEY is on")
    # The embedded default: a random key made once per checkout and kept under var/.
    _key_file = VAR_DIR / "secret_key"
    if not _key_file.exists():
        _key_file.write_text(secrets.token_urlsafe(50))
        _key_file.chmod(0o600)
    SECRET_KEY = _key_file.read_text().strip()
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "ninja",
    # Login lockout on every login form, the admin's included (dashboard/kit/security.py).
    "axes",
    "dashboard",
    "runs",
    "billing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Security block (dashboard/kit/security.py): the CSP header, and a 413 for oversized bodies
    # before anything reads them.
    "dashboard.kit.security.ContentSecurityPolicyMiddleware",
    "dashboard.kit.security.RequestBodyLimitMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes requires: it turns a locked-out login into the 429.
    "axes.middleware.AxesMiddleware",
]

# django-axes checks every authenticate() call (our login, the admin's, any other form) before
# the password: a locked (username, address) pair is refused without being checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "dashboard.urls"
WSGI_APPLICATION = "dashboard.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
DATABASE_URL = env_url("DATABASE_URL", {"postgres", "postgresql", "sqlite"})
DATABASES: dict[str, Any]
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "airboard.sqlite3",
        }
    }
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # WAL lets the web process read while the worker writes; the timeout covers the short
    # write locks two processes take on the same file. The test database is a file too (not
    # in-memory) so that a real Celery worker in another process can reach it.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    # One test database file per test process, so two suites run side by side never share one.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-airboard-{os.getpid()}.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Auth -----------------------------------------------------------------------------
PASSWORD_HASHERS = [
    "django.contrib.auth.hashers.Argon2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

# --- I18N / time ----------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("AIRBOARD_TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

# --- Static files ---------------------------------------------------------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",  # the admin's own
    # vendor/plotly.min.js from the pinned plotly package (dashboard/staticfinders.py), not a copy.
    "dashboard.staticfinders.PlotlyFinder",
]
STATIC_ROOT = VAR_DIR / "static"
# Served by WhiteNoise from the app's own files, in every mode: no CDN, no network.
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

# --- Celery ---------------------------------------------------------------------------
REDIS_URL = env_url("REDIS_URL", {"redis", "rediss"})
CELERY_BROKER_DIR = Path(env_str("AIRBOARD_BROKER_DIR", str(VAR_DIR / "broker")))
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        # A task whose worker died unacknowledged comes back after this many seconds...
        "visibility_timeout": env_int("AIRBOARD_BROKER_VISIBILITY_TIMEOUT", 3600, minimum=1),
        # ...found by a sweep every this many seconds (kombu's default scans only every 10th
        # 10-second tick, which would add over a minute and a half to every recovery).
        "unacked_restore_interval": env_int("AIRBOARD_BROKER_RESTORE_INTERVAL", 10, minimum=1),
        "unacked_restore_throttle": 1,
    }
else:
    # kombu's filesystem transport: a folder of message files, no server to run.
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_BROKER_DIR / "queue"),
        "data_folder_out": str(CELERY_BROKER_DIR / "queue"),
        "control_folder": str(CELERY_BROKER_DIR / "control"),
        "store_processed": False,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "ingest"
# One queue per kind of work, so a flood of telemetry never delays billing or policy alerts
# (billing.enforce_policies runs on the billing queue).
CELERY_TASK_ROUTES = {
    "runs.ingest_*": {"queue": "ingest"},
    "runs.requeue_*": {"queue": "ingest"},
    "runs.collect_*": {"queue": "collect"},
    # Long batched deletes stay off the ingest queue.
    "runs.prune_*": {"queue": "collect"},
    # Partition DDL waits on locks (bounded by lock_timeout): never in front of ingest.
    "runs.maintain_*": {"queue": "collect"},
    # Compaction folds whole minutes; off the ingest queue, so ingest latency never waits on it.
    "runs.compact_*": {"queue": "collect"},
    "runs.classify_*": {"queue": "collect"},
    "billing.*": {"queue": "billing"},
}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE = BEAT_SCHEDULE
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Never eager: a task always goes through the broker to a worker.
CELERY_TASK_ALWAYS_EAGER = False

# --- Airboard -------------------------------------------------------------------------
# Largest GPU sample batch one API request may carry.
AIRBOARD_MAX_SAMPLES_PER_BATCH = env_int("AIRBOARD_MAX_SAMPLES_PER_BATCH", 10_000, minimum=1)
# Largest log chunk one request may carry, in bytes of UTF-8.
AIRBOARD_MAX_LOG_CHUNK_BYTES = env_int("AIRBOARD_MAX_LOG_CHUNK_BYTES", 1_048_576, minimum=1024)
# Largest request body Django reads into memory (a 10,000-sample batch is about 2 MB).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("AIRBOARD_MAX_REQUEST_BYTES", 8 * 1_048_576, minimum=1024)
# How far in the future a sample may be stamped before it is refused (clock skew allowance).
AIRBOARD_MAX_FUTURE_SKEW_SECONDS = env_int("AIRBOARD_MAX_FUTURE_SKEW_SECONDS", 300, minimum=0)
# Most accelerators a run pushed through the API may claim (a plausibility limit: the cost of
# a pushed run counts against its policy's budget, which can cancel other runs).
AIRBOARD_MAX_PUSHED_ACCELERATORS = env_int("AIRBOARD_MAX_PUSHED_ACCELERATORS", 512, minimum=1)
# North/south line rate per GPU, Gbit/s: a run's egress in a UTC day is at most its GPUs x this
# x 86,400 s (billing.costs.egress.max_bytes_per_day); reported records past it are a 422. 50:
# an 8-GPU HGX node's two 200 GbE north/south ports (NVIDIA HGX AI Factory reference architecture).
AIRBOARD_MAX_EGRESS_GBITS_PER_GPU = env_int("AIRBOARD_MAX_EGRESS_GBITS_PER_GPU", 50, minimum=1)
# Runs listed per page.
AIRBOARD_RUNS_PER_PAGE = env_int("AIRBOARD_RUNS_PER_PAGE", 50, minimum=1)
# Link to the MLflow UI; `{run_id}` is replaced by the MLflow run id.
AIRBOARD_MLFLOW_UI_URL = env_str("AIRBOARD_MLFLOW_UI_URL", "")
# Runs below this GPU utilization (percent) count as idle.
AIRBOARD_IDLE_UTILIZATION_PERCENT = env_float("AIRBOARD_IDLE_UTILIZATION_PERCENT", 5.0, minimum=0)
# A run is under-used when its GPUs' mean utilization (last 30 minutes, or its whole life once
# ended) is under this percent (runs/telemetry/underuse.py).
AIRBOARD_UNDERUSED_PERCENT = env_float("AIRBOARD_UNDERUSED_PERCENT", 40.0, minimum=0)

# --- Security: caches, rate limits, login lockout, CSP (dashboard/kit/security.py, ratelimit.py) ---
# Counters for rate limits and login lockout live in the cache. On Redis every web process
# shares them; the in-memory default counts per process (fine for the one-machine setup).
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "airboard",
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "airboard"}}
# Requests per minute one API key may make to write operations (POST); past it, 429 + Retry-After.
AIRBOARD_INGEST_RATE_PER_MINUTE = env_int("AIRBOARD_INGEST_RATE_PER_MINUTE", 600, minimum=1)
# Rows (samples, metric points, egress records) one key may write a minute (dashboard/api/fair_ingest.py).
AIRBOARD_INGEST_ROWS_PER_MINUTE = env_int("AIRBOARD_INGEST_ROWS_PER_MINUTE", 600_000, minimum=1)
# Distinct (run, attempt, node) one telemetry request may name: each may create a node.
AIRBOARD_MAX_NODES_PER_BATCH = env_int("AIRBOARD_MAX_NODES_PER_BATCH", 512, minimum=1)
# Failed logins per username and client address within the window before the form answers 429.
AIRBOARD_LOGIN_FAILURES = env_int("AIRBOARD_LOGIN_FAILURES", 5, minimum=1)
# Failed logins from one client address, any username (slows password spraying).
AIRBOARD_LOGIN_FAILURES_PER_IP = env_int("AIRBOARD_LOGIN_FAILURES_PER_IP", 50, minimum=1)
AIRBOARD_LOGIN_WINDOW_SECONDS = env_int("AIRBOARD_LOGIN_WINDOW_SECONDS", 900, minimum=1)
# Failures are counted by django-axes in the database (AccessAttempt): shared by every web
# process and machine, and kept across restarts; the limits above are read per request.
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_FAILURE_LIMIT = "dashboard.kit.security.login_failure_limit"
AXES_COOLOFF_TIME = "dashboard.kit.security.login_cool_off"
AXES_USERNAME_CALLABLE = "dashboard.kit.security.login_username"
AXES_CLIENT_IP_CALLABLE = "dashboard.kit.security.login_client_ip"
AXES_LOCKOUT_CALLABLE = "dashboard.kit.security.login_locked_out"
AXES_RESET_ON_SUCCESS = True
# Successful logins are not logged by axes: its access log would store every user's IP and agent.
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False
# Reverse proxies in front of the web process whose X-Forwarded-For is trusted (0: use REMOTE_ADDR).
AIRBOARD_TRUSTED_PROXIES = env_int("AIRBOARD_TRUSTED_PROXIES", 0, minimum=0)
# A Content-Security-Policy replacing the default one (dashboard/kit/security.py says why it is as it is).
AIRBOARD_CSP = env_str("AIRBOARD_CSP", "")

# --- Usage policies: alert email, webhooks, cancels (billing/policies/alerts.py, enforcement.py) ---
# Alert email: console in DEBUG; otherwise SMTP from AIRBOARD_EMAIL_HOST (etc.) when set.
EMAIL_HOST = env_str("AIRBOARD_EMAIL_HOST", "")
EMAIL_PORT = env_int("AIRBOARD_EMAIL_PORT", 587, minimum=1)
EMAIL_HOST_USER = env_str("AIRBOARD_EMAIL_USER", "")
EMAIL_HOST_PASSWORD = env_str("AIRBOARD_EMAIL_PASSWORD", "")
EMAIL_USE_TLS = env_bool("AIRBOARD_EMAIL_USE_TLS", True)
EMAIL_BACKEND = env_str(
    "AIRBOARD_EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST and not DEBUG
    else "django.core.mail.backends.console.EmailBackend",
)
DEFAULT_FROM_EMAIL = env_str("AIRBOARD_EMAIL_FROM", "airboard@localhost")
# Alert and cancel webhooks: seconds per try, retries after the first try, first backoff (doubles).
AIRBOARD_WEBHOOK_TIMEOUT_SECONDS = env_float("AIRBOARD_WEBHOOK_TIMEOUT_SECONDS", 5.0, minimum=0.1)
AIRBOARD_WEBHOOK_RETRIES = env_int("AIRBOARD_WEBHOOK_RETRIES", 3, minimum=0)
# Webhooks to private, loopback and link-local addresses: refused unless the receivers live on
# the private network (dashboard/kit/outbound.py). Metadata host names are refused either way.
AIRBOARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS = env_bool("AIRBOARD_WEBHOOK_ALLOW_PRIVATE_NETWORKS", False)
AIRBOARD_WEBHOOK_BACKOFF_SECONDS = env_float("AIRBOARD_WEBHOOK_BACKOFF_SECONDS", 1.0, minimum=0)
# Cancelling a run a policy stops: a command template ({run_id} = the source's run id; split
# with shlex, run without a shell), else a webhook; local runs are flagged for their launcher.
AIRBOARD_CANCEL_COMMAND = env_str("AIRBOARD_CANCEL_COMMAND", "")
AIRBOARD_CANCEL_TIMEOUT_SECONDS = env_float("AIRBOARD_CANCEL_TIMEOUT_SECONDS", 60.0, minimum=1)
AIRBOARD_CANCEL_WEBHOOK_URL = env_url("AIRBOARD_CANCEL_WEBHOOK_URL", {"http", "https"})
AIRBOARD_CANCEL_WEBHOOK_SECRET = env_str("AIRBOARD_CANCEL_WEBHOOK_SECRET", "")

# Key for secrets encrypted at rest (webhook URLs and signing secrets); default: derived from
# DJANGO_SECRET_KEY. Set it once and keep it: changing it makes those values unreadable.
AIRBOARD_ENCRYPTION_KEY = env_str("AIRBOARD_ENCRYPTION_KEY", "")

# --- Collectors ---------------------------------------------------------------------
# MLflow: the tracking server (or store URI) to pull runs and metric histories from.
AIRBOARD_MLFLOW_TRACKING_URI = env_str("MLFLOW_TRACKING_URI", "")
# Experiment ids or names to collect (comma-separated); empty = every active experiment.
AIRBOARD_MLFLOW_EXPERIMENTS = env_list("AIRBOARD_MLFLOW_EXPERIMENTS", [])
AIRBOARD_MLFLOW_INTERVAL_SECONDS = env_int("AIRBOARD_MLFLOW_INTERVAL_SECONDS", 60, minimum=5)
# Run source: a command printing the Databricks Jobs runs JSON (`jobs list-runs -o json` shape),
# e.g. "databricks jobs list-runs --active-only -o json"; or DATABRICKS_HOST + DATABRICKS_TOKEN.
AIRBOARD_RUN_SOURCE_COMMAND = env_str("AIRBOARD_RUN_SOURCE_COMMAND", "")
# Classic clusters: a command printing `clusters list -o json`.
AIRBOARD_CLUSTER_SOURCE_COMMAND = env_str("AIRBOARD_CLUSTER_SOURCE_COMMAND", "")
# A cluster's lifecycle events, `{cluster_id}` filled in: "databricks clusters events {cluster_id} -o json".
# They decide its billable uptime and worker count (runs/models/uptime.py); without them, last_restarted_time.
# A command printing the API's paged object gets `{request}` filled with each page's request body
# ("databricks api post /api/2.1/clusters/events --json {request}"), so next_page is followed.
AIRBOARD_CLUSTER_EVENTS_COMMAND = env_str("AIRBOARD_CLUSTER_EVENTS_COMMAND", "")

# Team that collected runs belong to when their creator is in no team.
AIRBOARD_RUN_SOURCE_TEAM = env_str("AIRBOARD_RUN_SOURCE_TEAM", "")
AIRBOARD_RUN_SOURCE_INTERVAL_SECONDS = env_int("AIRBOARD_RUN_SOURCE_INTERVAL_SECONDS", 60, minimum=5)
# The region of the workspace the run source reads (e.g. us-west-2): every collected run whose
# record names no region (all serverless GPU runs, classic runs on clusters without a zone) ran
# there, and is priced at that region's prices. Unset: such runs cost a lower bound that says so.
AIRBOARD_DATABRICKS_REGION = env_str("AIRBOARD_DATABRICKS_REGION", "").strip()
DATABRICKS_HOST = env_str("DATABRICKS_HOST", "")
DATABRICKS_TOKEN = env_str("DATABRICKS_TOKEN", "")
# Log source: a command template ({run_id}, {attempt}, {node}) printing one node's log, or a
# directory laid out as <run>/<attempt>/<node>.log that is tailed incrementally.
AIRBOARD_LOG_SOURCE_COMMAND = env_str("AIRBOARD_LOG_SOURCE_COMMAND", "")
AIRBOARD_LOG_SOURCE_DIR = env_str("AIRBOARD_LOG_SOURCE_DIR", "")
AIRBOARD_LOG_SOURCE_INTERVAL_SECONDS = env_int("AIRBOARD_LOG_SOURCE_INTERVAL_SECONDS", 30, minimum=5)
# Billed usage for reconciliation: a command printing system.billing.usage as CSV or as the
# SQL Statement Execution API's JSON (billing/reconcile/usage_source.py); list prices likewise. Empty:
# usage arrives only by `manage.py import_usage FILE`.
AIRBOARD_BILLING_USAGE_COMMAND = env_str("AIRBOARD_BILLING_USAGE_COMMAND", "")
AIRBOARD_BILLING_PRICES_COMMAND = env_str("AIRBOARD_BILLING_PRICES_COMMAND", "")
# Prometheus-compatible source (Prometheus, VictoriaMetrics, Mimir, Thanos): the dcgm-exporter series
# of each active or recently ended run's nodes, read with query_range (runs/collectors/prometheus.py).
# Empty: the collector returns at once. Credentials (bearer token, or basic auth) come from the
# environment only and are never logged or shown.
AIRBOARD_PROMETHEUS_URL = env_url("AIRBOARD_PROMETHEUS_URL", {"http", "https"})
AIRBOARD_PROMETHEUS_BEARER_TOKEN = env_str("AIRBOARD_PROMETHEUS_BEARER_TOKEN", "")
AIRBOARD_PROMETHEUS_USERNAME = env_str("AIRBOARD_PROMETHEUS_USERNAME", "")
AIRBOARD_PROMETHEUS_PASSWORD = env_str("AIRBOARD_PROMETHEUS_PASSWORD", "")
# Resolution of what is read: one point per GPU per step. At least the scrape interval, or every
# other step is empty and shows as a gap.
AIRBOARD_PROMETHEUS_STEP_SECONDS = env_int("AIRBOARD_PROMETHEUS_STEP_SECONDS", 30, minimum=1)
# Kubernetes: a node host matched by the `pod` label only within this namespace (empty: any).
AIRBOARD_PROMETHEUS_NAMESPACE = env_str("AIRBOARD_PROMETHEUS_NAMESPACE", "")
AIRBOARD_PROMETHEUS_TIMEOUT_SECONDS = env_float("AIRBOARD_PROMETHEUS_TIMEOUT_SECONDS", 30.0, minimum=1)
# Longest a collector's external command may run before it is killed.
AIRBOARD_COLLECTOR_TIMEOUT_SECONDS = env_int("AIRBOARD_COLLECTOR_TIMEOUT_SECONDS", 120, minimum=1)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("AIRBOARD_LOG_LEVEL", "INFO")},
}

if not REDIS_URL:
    for _folder in ("queue", "control"):
        (CELERY_BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)

# --- Telemetry tiers (runs/telemetry/store.py, runs/telemetry/retention.py) -----------------------------
# The live demo (dashboard.demo.live): in a demo workspace (seeded demo runs exist), beat pushes
# telemetry, metrics and logs for the running demo runs each minute, ends some and starts
# others so that about this many run. Off: the demo stays the snapshot seed_demo wrote.
AIRBOARD_DEMO_LIVE = env_bool("AIRBOARD_DEMO_LIVE", True)
AIRBOARD_DEMO_LIVE_RUNNING = env_int("AIRBOARD_DEMO_LIVE_RUNNING", 10, minimum=0)
# Days raw GPU samples are kept; the per-minute and per-hour rollups are kept as long as the run.
AIRBOARD_TELEMETRY_RAW_DAYS = env_int("AIRBOARD_TELEMETRY_RAW_DAYS", 14, minimum=1)
# Raw samples older than this many minutes are compacted into one GpuSampleBlock per node-minute (all
# the node's GPUs; runs/telemetry/blocks.py); a sample arriving later for a compacted minute reopens that minute.
# Short, because a live run's page pays per hot row: the agent ships at least once a minute.
AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES = env_int("AIRBOARD_TELEMETRY_COMPACT_AFTER_MINUTES", 3, minimum=2)
# While GPU-sample batches wait for a worker, compaction holds back to COMPACT_AFTER minutes before the oldest
# one was received, so a backlog does not reopen blocks: at most this many minutes before now (blocks.held_cutoff).
AIRBOARD_TELEMETRY_COMPACT_HOLD_MINUTES = env_int("AIRBOARD_TELEMETRY_COMPACT_HOLD_MINUTES", 10, minimum=2)
# Days minute rollups are kept; older minutes live on in the hour rollups (runs/telemetry/retention.py).
# 30 by default: at 1,000 GPUs a day of minutes is ~0.55 GB (docs/scaling.md).
AIRBOARD_TELEMETRY_MINUTE_DAYS = env_int("AIRBOARD_TELEMETRY_MINUTE_DAYS", 30, minimum=1)
# PostgreSQL (runs/telemetry/partitions.py): daily partitions of the raw samples are made this many days
# ahead, so a day's samples never start in the DEFAULT partition while the beat runs.
AIRBOARD_TELEMETRY_PARTITION_DAYS_AHEAD = env_int("AIRBOARD_TELEMETRY_PARTITION_DAYS_AHEAD", 7, minimum=1)
# Fleet page: a GPU counts as "now" if it has a minute rollup within this many minutes.
AIRBOARD_FLEET_RECENT_MINUTES = env_int("AIRBOARD_FLEET_RECENT_MINUTES", 5, minimum=1)

# --- Prometheus /metrics (dashboard/metrics_views.py) ------------------------------------
# Bearer token Prometheus sends (`authorization: credentials` in its scrape config). Empty:
# /metrics answers 404. The figures cover every team: treat the token as an operator secret.
AIRBOARD_METRICS_TOKEN = env_str("AIRBOARD_METRICS_TOKEN", "")
