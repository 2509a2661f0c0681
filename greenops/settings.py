"""One environment-driven settings module.

Every knob is an environment variable with a default that works for a newcomer: SQLite and
in-process tasks. Setting DATABASE_URL / REDIS_URL switches to PostgreSQL and Celery on Redis.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
from pathlib import Path
from urllib.parse import unquote, urlparse

from django.core.exceptions import ImproperlyConfigured
from kombu import Queue

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def envint(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def envfloat(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value not in (None, "") else default


def envlist(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def database_from_url(url: str) -> dict:
    """Parse postgres://user:pass@host:port/name or sqlite:///path into Django's dict."""
    parsed = urlparse(url)
    if parsed.scheme in {"postgres", "postgresql", "pgsql"}:
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")) or "greenops",
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            # Reused for 10 minutes: a request that opens a new connection pays ~13 ms more on
            # the team home (a new backend, its catalog caches, the prepared statements made
            # again), which at 60 s landed in the p95 of bench/dashboard's 20-request windows.
            # A connection that died is replaced on the next request (health checks).
            "CONN_MAX_AGE": envint("DB_CONN_MAX_AGE", 600),
            "CONN_HEALTH_CHECKS": True,
        }
    if parsed.scheme == "sqlite":
        path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else parsed.path
        if path:  # a fresh checkout has no var/ yet; SQLite will not create the folder
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path or BASE_DIR / "var/db.sqlite3",
            # WAL lets pages read while an ingest request writes; IMMEDIATE avoids lock upgrades
            # failing under concurrent writers.
            "OPTIONS": {
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
        }
    raise ValueError(f"DATABASE_URL: unsupported scheme {parsed.scheme!r}")


DATA_DIR = Path(os.environ.get("GREENOPS_DATA_DIR", BASE_DIR / "var"))

def secret_key() -> str:
    """SECRET_KEY from the environment; otherwise a random key kept in DATA_DIR, so no install
    ever runs with a key that is public in this repository."""
    key = os.environ.get("SECRET_KEY", "")
    if key.startswith("change-me"):
        raise ImproperlyConfigured("SECRET_KEY still holds the .env.example placeholder")
    if key:
        return key
    path = DATA_DIR / "secret_key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = secret_key()
DEBUG = envbool("DEBUG", False)
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", "")
# Public base URL for links in emails and install commands; empty: the URL of the request.
SITE_URL = os.environ.get("SITE_URL", "")

# Served over HTTPS (production): secure cookies, HSTS and a redirect from plain HTTP. Off for the
# demo and tests, which run on plain http://localhost where secure cookies would never be sent.
HTTPS = envbool("GREENOPS_HTTPS", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = HTTPS
# Sessions stay in the database (Django's default), not cached_db: reading them from Redis saved
# 0.6 ms a page but made every page fail while Redis is down (Django's Redis cache raises), and a
# logout during such an outage would leave the cached session valid once Redis came back.
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", HTTPS)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # the container health check calls plain http locally
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", HTTPS)
# Behind a TLS-terminating proxy that sets X-Forwarded-Proto: SECURE_PROXY_SSL_HEADER=
# "HTTP_X_FORWARDED_PROTO,https". Only set it when the proxy always overwrites that header.
_proxy_header = envlist("SECURE_PROXY_SSL_HEADER", "")
SECURE_PROXY_SSL_HEADER = tuple(_proxy_header) if len(_proxy_header) == 2 else None

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ninja",
    "axes",  # failed-login counts in PostgreSQL (greenops/login.py)
    "greenops.teams",
    "greenops.telemetry",
    "greenops.workloads",
    "greenops.kpis",
    "greenops.costs",
    "greenops.carbon",
    "greenops.alerts",
    "greenops.reports",
    "greenops.benchmarks",
    "greenops.advisor",
    "greenops.demo",
    "dashboards",
]

MIDDLEWARE = [
    # Outermost: any 4xx/5xx under /api/ that is not JSON becomes {error, field, message}.
    "greenops.api.errorshape.ApiErrorShape",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last: answers a locked-out login (greenops.login)
]

# django-axes first: it refuses a locked-out address or username before a password is checked.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend",
                           "django.contrib.auth.backends.ModelBackend"]

ROOT_URLCONF = "greenops.urls"
WSGI_APPLICATION = "greenops.wsgi.application"

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
                "greenops.teams.context_processors.my_teams",
            ]
        },
    }
]

DATABASES = {
    "default": database_from_url(
        os.environ.get("DATABASE_URL", f"sqlite:///{DATA_DIR / 'greenops.sqlite3'}")
    )
}
# A PostgreSQL streaming replica for page reads, API reads and report generation
# (greenops/db_router.py); writes, ingest, tasks and a user's reads right after their own writes
# stay on the primary. Unset: one database, nothing routed.
DATABASE_REPLICA_URL = os.environ.get("DATABASE_REPLICA_URL", "")
# Seconds a measure of the replica's lag is reused per process; after the replica failed to
# answer, seconds before it is tried again (its reads go to the primary meanwhile).
REPLICA_PROBE_S = envfloat("GREENOPS_REPLICA_PROBE_S", 5.0)
REPLICA_RETRY_S = envfloat("GREENOPS_REPLICA_RETRY_S", 30.0)
# Pages say "as of HH:MM:SS (replica N s behind)" beyond this lag; reports read the primary then.
REPLICA_LAG_LABEL_S = envfloat("GREENOPS_REPLICA_LAG_LABEL_S", 60.0)
# After a write, the writer reads the primary until the replica has replayed it, at most this.
REPLICA_PIN_MAX_S = envint("GREENOPS_REPLICA_PIN_MAX_S", 600)
if DATABASE_REPLICA_URL:
    if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured("DATABASE_REPLICA_URL needs a PostgreSQL DATABASE_URL")
    DATABASES["replica"] = database_from_url(DATABASE_REPLICA_URL)
    if DATABASES["replica"]["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured("DATABASE_REPLICA_URL: a PostgreSQL streaming replica")
    # A replica that does not answer costs a page this long once, then REPLICA_RETRY_S of
    # primary reads; the replica holds the primary's test database too (a physical copy).
    DATABASES["replica"]["OPTIONS"] = {
        "connect_timeout": envint("GREENOPS_REPLICA_CONNECT_TIMEOUT_S", 2)}
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
    DATABASE_ROUTERS = ["greenops.db_router.ReplicaRouter"]
    # Before sessions: a session read is routed, a session save pins the user to the primary.
    MIDDLEWARE.insert(MIDDLEWARE.index("django.contrib.sessions.middleware.SessionMiddleware"),
                      "greenops.db_router.ReplicaReads")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "dashboards.staticfinders.PlotlyFinder",
]
# Serve from the app dirs without collectstatic in the demo; production runs collectstatic.
WHITENOISE_USE_FINDERS = True

LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

# The agent posts gzip-compressed batches; the decompressed limit is enforced by the API.
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("INGEST_MAX_BODY_BYTES", 16 * 1024 * 1024)

# --- Ingest limits -------------------------------------------------------------------------
# enroll and inventory documents are a few KB; refusing more early keeps unauthenticated callers
# from holding a worker.
SMALL_BODY_MAX_BYTES = envint("SMALL_BODY_MAX_BYTES", 256 * 1024)
# Decompressed JSON per operation, sized to its largest legitimate body (greenops/body_limits.py):
# 20,000 samples of every column are < 8 MiB; the agent sends at most 4,000 a POST.
INGEST_MAX_SAMPLES = envint("INGEST_MAX_SAMPLES", 20_000)
INGEST_MAX_DECOMPRESSED_BYTES = envint("INGEST_MAX_DECOMPRESSED_BYTES", 8 * 1024 * 1024)
INFERENCE_MAX_DECOMPRESSED_BYTES = envint("INFERENCE_MAX_DECOMPRESSED_BYTES", 8 * 1024 * 1024)
API_BODY_MAX_BYTES = envint("API_BODY_MAX_BYTES", 1024 * 1024)  # every other JSON body
INGEST_MAX_FUTURE_S = envint("INGEST_MAX_FUTURE_S", 300)
INGEST_MAX_AGE_S = envint("INGEST_MAX_AGE_S", 30 * 86400)
# Group commit: a draining ingest worker waits this long between groups that did not fill, so
# batches arriving meanwhile share one transaction (greenops/telemetry/ingest.py). Adds at most
# this much to the time from 202 to stored; 0 claims again at once.
INGEST_GROUP_WAIT_S = envfloat("INGEST_GROUP_WAIT_S", 0.05)
# The ingest path's hottest statements run as prepared statements (parsed and planned once per
# connection). Behind PgBouncer older than 1.21 in transaction pooling mode, which cannot carry
# prepared statements, set DB_PREPARED_STATEMENTS=false.
DB_PREPARED_STATEMENTS = envbool("DB_PREPARED_STATEMENTS", True)
# Storage over time (greenops/telemetry/partitions.py): raw samples kept N days (PostgreSQL: one
# partition per UTC day), minute rollups N weeks (one partition per ISO week); hour and day
# rollups are kept forever. 0 keeps a table forever. Raw days should exceed INGEST_MAX_AGE_S:
# samples older than a dropped day are refused so a replay cannot count them twice. Minute
# weeks should cover the longest page range (90 days) since pages count GPU-minutes from them.
RETAIN_RAW_SAMPLES_DAYS = envint("GREENOPS_RETAIN_RAW_DAYS", 35)
RETAIN_MINUTE_ROLLUPS_WEEKS = envint("GREENOPS_RETAIN_MINUTE_WEEKS", 14)
PARTITIONS_AHEAD_DAYS = envint("GREENOPS_PARTITIONS_AHEAD_DAYS", 7)

# --- Teams and enrollment ------------------------------------------------------------------
INVITATION_TTL_DAYS = envint("INVITATION_TTL_DAYS", 7)
ENROLL_TOKEN_TTL_MINUTES = envint("ENROLL_TOKEN_TTL_MINUTES", 60)

# --- Carbon accounting ---------------------------------------------------------------------
# PUE for hosts whose site sets none. 1.56 is the industry-average annual PUE reported by the
# Uptime Institute Global Data Center Survey 2024: without knowing the facility, assuming an
# average one avoids under-reporting. Hyperscale cloud regions run nearer 1.1-1.2 (AWS 1.15,
# Google 1.10 fleet-wide in 2023): give such hosts a site with that PUE.
GREENOPS_DEFAULT_PUE = envfloat("GREENOPS_DEFAULT_PUE", 1.56)
# A change between two periods is shown only when both measured at least this share of their
# host-hours; below it the change is flagged, not printed as a bare percentage (issue 29).
GREENOPS_COMPARE_MIN_COVERAGE = envfloat("GREENOPS_COMPARE_MIN_COVERAGE", 0.9)

# --- Costs ---------------------------------------------------------------------------------
# Regions whose spot prices the refresh asks for (comma-separated); empty: every region with a
# GPU on-demand price in the catalog.
GREENOPS_SPOT_REGIONS = envlist("GREENOPS_SPOT_REGIONS", "")

# --- Alerts --------------------------------------------------------------------------------
# Key for channel credentials at rest (webhook secrets, apprise URLs); empty: derived from
# SECRET_KEY. Changing either makes stored channel targets unreadable: re-enter them.
ALERTS_CHANNEL_KEY = os.environ.get("ALERTS_CHANNEL_KEY", "")
ALERTS_HTTP_TIMEOUT_S = envint("ALERTS_HTTP_TIMEOUT_S", 10)
ALERTS_MAX_ATTEMPTS = envint("ALERTS_MAX_ATTEMPTS", 5)  # then the notification is failed
# How often pending notifications are sent: alerts of one team that fire within this many
# seconds of each other go to a channel as one message.
ALERTS_DELIVER_EVERY_S = envint("ALERTS_DELIVER_EVERY_S", 15)
ALERTS_KEEP_VALUES_DAYS = envint("ALERTS_KEEP_VALUES_DAYS", 14)
# Private ranges that alert webhooks and apprise URLs may reach (on-prem receivers), e.g.
# "10.20.0.0/16,127.0.0.1/32". Empty: loopback, private, link-local and metadata addresses are
# refused (greenops/outbound.py). A bad entry stops start-up here rather than at the first send.
GREENOPS_OUTBOUND_ALLOW = envlist("GREENOPS_OUTBOUND_ALLOW", "")
for _net in GREENOPS_OUTBOUND_ALLOW:
    ipaddress.ip_network(_net, strict=False)
# E-mails one team's alert channels may send per hour (the rest wait for the next hour).
ALERTS_EMAIL_HOURLY_CAP = envint("ALERTS_EMAIL_HOURLY_CAP", 30)

# --- Monthly reports -----------------------------------------------------------------------
# Hours after a month closes in a team's time zone before beat generates its report: agents
# replaying a spool after an outage deliver late data, and a report that misses it is restated.
REPORTS_GRACE_HOURS = envint("REPORTS_GRACE_HOURS", 48)
# After a month's first report, beat generates it again once a day for this many days; changed
# figures become a new revision (default: INGEST_MAX_AGE_S's 30 days, the oldest data accepted).
REPORTS_RECHECK_DAYS = envint("REPORTS_RECHECK_DAYS", 30)
# Optional copy of every new revision in S3 (boto3's usual credentials); empty bucket: no upload.
REPORTS_S3_BUCKET = os.environ.get("REPORTS_S3_BUCKET", "")
REPORTS_S3_PREFIX = os.environ.get("REPORTS_S3_PREFIX", "greenops-reports/")
REPORTS_S3_REGION = os.environ.get("REPORTS_S3_REGION", "")
# For S3-compatible stores (MinIO, Ceph): their endpoint URL; empty for AWS itself.
REPORTS_S3_ENDPOINT_URL = os.environ.get("REPORTS_S3_ENDPOINT_URL", "")

# --- Celery --------------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = envint("CELERY_WORKER_PREFETCH_MULTIPLIER", 4)
# Celery's Django fixup otherwise closes the database connection after every task: a new
# PostgreSQL backend per ingest batch. Reuse it for this many tasks (bench/ingest: ~2x batches/s).
CELERY_DB_REUSE_MAX = envint("CELERY_DB_REUSE_MAX", 100)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", 3600),
    # A request that queues a task must not hang on a broker that does not answer.
    "socket_connect_timeout": envfloat("CELERY_BROKER_CONNECT_TIMEOUT_S", 1.0),
    "socket_timeout": envfloat("CELERY_BROKER_SOCKET_TIMEOUT_S", 5.0),
    # Publishing gives up at once when the broker is down (kombu otherwise retries the
    # connection for seconds while the web request waits). Ingest needs no retry here: beat
    # re-queues batches still pending.
    "max_retries": envint("CELERY_BROKER_PUBLISH_RETRIES", 0),
}
# Queue groups, so each can get its own workers (docker-compose.yml runs one worker service per
# group): a flood of ingest batches never delays alert delivery, and a long report never holds
# up ingest. Exact names win over patterns; patterns match in this order. A worker started
# without -Q consumes every queue of CELERY_TASK_QUEUES (one worker for everything, as in the
# Makefile and the benchmarks); the embedded default runs tasks in-process and routes nothing.
CELERY_TASK_ROUTES = {
    "greenops.telemetry.tasks.store_batch": {"queue": "ingest"},
    "greenops.telemetry.tasks.process_pending_batches": {"queue": "ingest"},
    "greenops.telemetry.tasks.*": {"queue": "rollups"},  # housekeeping: pruning, partitions
    "greenops.kpis.tasks.*": {"queue": "rollups"},
    "greenops.costs.tasks.*": {"queue": "rollups"},
    "greenops.workloads.tasks.*": {"queue": "rollups"},
    "dashboards.tasks.*": {"queue": "rollups"},  # team home snapshots (cost figures)
    "greenops.alerts.tasks.*": {"queue": "alerts"},
    "greenops.teams.tasks.*": {"queue": "alerts"},  # invitation mail: outbound, like alerts
    "greenops.reports.tasks.*": {"queue": "reports"},
}
CELERY_TASK_DEFAULT_QUEUE = "rollups"  # a task nobody routed still lands on a consumed queue
CELERY_TASK_QUEUES = [
    Queue(name) for name in dict.fromkeys(r["queue"] for r in CELERY_TASK_ROUTES.values())
]
CELERY_BEAT_SCHEDULE = {
    # Safety net: batches whose queue message was lost (Redis restart) are still stored.
    "ingest-catch-up": {
        "task": "greenops.telemetry.tasks.process_pending_batches",
        "schedule": 60.0,
    },
    "ingest-prune": {"task": "greenops.telemetry.tasks.prune_batches", "schedule": 86400.0},
    "storage-partitions": {"task": "greenops.telemetry.tasks.create_partitions",
                           "schedule": 3600.0},
    "storage-retention": {"task": "greenops.telemetry.tasks.apply_retention", "schedule": 3600.0},
    "kpi-rollups": {"task": "greenops.kpis.tasks.rollup_kpis", "schedule": 300.0},
    # Kubernetes pods' share of each finished GPU-hour (greenops.workloads.pods).
    "pod-hour-rollups": {"task": "greenops.workloads.tasks.rollup_pod_hours", "schedule": 300.0},
    "prices-refresh": {"task": "greenops.costs.tasks.refresh_prices", "schedule": 6 * 3600.0},
    # The team home's cost figures per team, retaken when 15 min old (headline.SNAPSHOT_*).
    "team-home-snapshots": {"task": "dashboards.tasks.snapshot_team_homes", "schedule": 300.0},
    # The team charts' closed display buckets per team (greenops.telemetry.fleetroll).
    "team-fleet-rollups": {"task": "dashboards.tasks.fill_fleet_rollups", "schedule": 60.0},
    "alerts-evaluate": {"task": "greenops.alerts.tasks.evaluate_rules", "schedule": 60.0},
    "alerts-deliver": {"task": "greenops.alerts.tasks.deliver_due",
                       "schedule": float(ALERTS_DELIVER_EVERY_S)},
    "alerts-prune": {"task": "greenops.alerts.tasks.prune_values", "schedule": 86400.0},
    # Each team's previous month, once it has closed in the team's zone plus the grace period.
    "reports-monthly": {"task": "greenops.reports.tasks.schedule_monthly", "schedule": 3600.0},
}

# (soft, hard) time limits of each beat task, in seconds. At the soft limit Celery raises
# SoftTimeLimitExceeded inside the task (each batch/bucket it already finished stays stored); at
# the hard limit the worker kills the process. greenops.beat.single_flight keeps a run from
# starting while the previous one still works, and its lock expires at the hard limit, so a
# limit longer than the schedule's period does not pile runs up. The embedded default runs beat
# in a thread, where Celery enforces no time limit.
BEAT_TASK_TIME_LIMITS_S: dict[str, tuple[int, int]] = {
    "greenops.telemetry.tasks.process_pending_batches": (240, 300),
    "greenops.telemetry.tasks.prune_batches": (1800, 1900),
    "greenops.telemetry.tasks.create_partitions": (300, 360),
    # The rolled-up check counts a day's raw samples per GPU (one partition scan).
    "greenops.telemetry.tasks.apply_retention": (3000, 3300),
    "greenops.kpis.tasks.rollup_kpis": (600, 660),
    "greenops.workloads.tasks.rollup_pod_hours": (240, 300),
    "greenops.costs.tasks.refresh_prices": (600, 660),
    "dashboards.tasks.snapshot_team_homes": (3000, 3300),
    "dashboards.tasks.refresh_team_home": (3000, 3300),
    # A first fill of a 1,000-GPU team reads a day of minute and 30 days of hour rollups.
    "dashboards.tasks.fill_fleet_rollups": (600, 660),
    "greenops.alerts.tasks.evaluate_rules": (50, 60),  # only fans out one task per rule
    "greenops.alerts.tasks.deliver_due": (50, 60),  # only fans out one task per channel
    "greenops.alerts.tasks.prune_values": (1800, 1900),
    "greenops.reports.tasks.schedule_monthly": (1800, 1900),
}
CELERY_TASK_ANNOTATIONS = {
    name: {"soft_time_limit": soft_s, "time_limit": hard_s}
    for name, (soft_s, hard_s) in BEAT_TASK_TIME_LIMITS_S.items()
}

# Failed login and enrollment attempts allowed per client (and username, for login) per window.
RATELIMIT_ENABLED = envbool("RATELIMIT_ENABLED", True)
RATELIMIT_WINDOW_S = envint("RATELIMIT_WINDOW_S", 900)
RATELIMIT_LOGIN_FAILURES = envint("RATELIMIT_LOGIN_FAILURES", 10)
RATELIMIT_ENROLL_FAILURES = envint("RATELIMIT_ENROLL_FAILURES", 20)
# Logins (django-axes, counts in PostgreSQL): RATELIMIT_LOGIN_FAILURES per address and per
# username per window, and at most RATELIMIT_LOGIN_GLOBAL_PER_MIN failures a minute site-wide.
RATELIMIT_LOGIN_GLOBAL_PER_MIN = envint("RATELIMIT_LOGIN_GLOBAL_PER_MIN", 100)
AXES_ENABLED = RATELIMIT_ENABLED
AXES_FAILURE_LIMIT = "greenops.login.failure_limit"
AXES_COOLOFF_TIME = "greenops.login.cool_off"
AXES_LOCKOUT_PARAMETERS = ["ip_address", "username"]
AXES_LOCKOUT_CALLABLE = "greenops.login.lockout"
AXES_CLIENT_IP_CALLABLE = "greenops.login.client_ip"
AXES_RESET_ON_SUCCESS = True  # a person who mistyped and then got in starts afresh
AXES_ENABLE_ACCESS_FAILURE_LOG = True  # the global rate counts these rows
AXES_USERNAME_FORM_FIELD = "username"
# An address over the enroll limit still gets one request checked per this many seconds.
RATELIMIT_LOCKED_PROBE_S = envint("RATELIMIT_LOCKED_PROBE_S", 10)

CACHES = {
    "default": (
        # Redis down: answers from process memory instead of raising (greenops/cache.py).
        {"BACKEND": "greenops.cache.FailSoftRedisCache", "LOCATION": REDIS_URL}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "greenops@localhost")
# For EMAIL_BACKEND=django.core.mail.backends.smtp.EmailBackend (Django's defaults otherwise).
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = envint("EMAIL_TIMEOUT", 10)  # a dead mail server must not hang the invite page

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.server": {"level": "WARNING"}},
}
