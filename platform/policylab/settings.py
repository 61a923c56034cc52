"""PolicyLab settings: every value comes from the environment, with an embedded default that runs on
one machine (SQLite under var/, Redis on localhost, a local Ray head)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlparse

import dj_database_url

REPO_ROOT = Path(__file__).resolve().parents[2]
VAR_DIR = Path(os.environ.get("POLICYLAB_VAR_DIR", REPO_ROOT / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def persistent_secret_key(path: Path) -> str:
    """A random key made once and kept in `path` (mode 0600), for a deployment that sets no
    DJANGO_SECRET_KEY: sessions survive restarts, and no two installations share a key. Linked into
    place atomically, so processes starting together (web, worker, ingest) all read the same key."""
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    import secrets

    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(50))
    try:
        os.link(draft, path)  # fails if another process got there first: then its key wins
    except FileExistsError:
        pass
    finally:
        draft.unlink()
    return path.read_text().strip()


# Production defaults: DEBUG only when asked for (DJANGO_DEBUG=1, `scripts/run.sh --debug`).
DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or persistent_secret_key(
    Path(os.environ.get("POLICYLAB_SECRET_KEY_FILE", VAR_DIR / "secret_key"))
)
# Team secrets (accounts.team_secrets) are encrypted at rest with this key, kept apart from SECRET_KEY (rotating
# that one must not lose them). POLICYLAB_SECRETS_KEY may list several, comma-separated: the first encrypts,
# each one decrypts (rotation). The embedded default makes one and keeps it in var/ like SECRET_KEY.
POLICYLAB_SECRETS_KEYS = [key.strip() for key in (os.environ.get("POLICYLAB_SECRETS_KEY") or persistent_secret_key(
    Path(os.environ.get("POLICYLAB_SECRETS_KEY_FILE", VAR_DIR / "secrets_key")))).split(",") if key.strip()]
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

# --- HTTP security (Django's deployment checklist; `manage.py check --deploy` is clean when the
# HTTPS variables below are set). Headers are on everywhere; what needs HTTPS is set by env.
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
# Served over HTTPS (directly or behind a proxy that sets X-Forwarded-Proto: DJANGO_SECURE_PROXY_SSL_HEADER=1).
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", False)
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_SECURE_HSTS_SECONDS", "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
if env_bool("DJANGO_SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Request bodies (Django's default, stated because RequestSizeLimitMiddleware answers 413 past it).
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
# Content-Security-Policy (policylab.middleware): no inline or third-party scripts. Inline styles
# stay allowed: plotly.js and the API docs (Swagger UI, Redoc) set style attributes at run time.
CONTENT_SECURITY_POLICY = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:"],
    "font-src": ["'self'", "data:"],
    "connect-src": ["'self'", "ws:", "wss:"],  # the run page's websocket
    "worker-src": ["'self'", "blob:"],  # Redoc's search worker
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}

INSTALLED_APPS = [
    "daphne",  # ASGI runserver (HTTP + websockets); must precede django.contrib.staticfiles
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc assets, served locally
    "channels",
    "policylab.accounts",
    "policylab.experiments",
    "policylab.jobs",
    "policylab.tracking",
    "policylab.api",
    "axes",  # sign-in throttling (AXES_* below)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "policylab.middleware.ApiErrorBodyMiddleware",
    "policylab.middleware.RequestSizeLimitMiddleware",
    "policylab.middleware.NulInQueryMiddleware",
    "policylab.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks: turns a lockout into its page
]

ROOT_URLCONF = "policylab.urls"
WSGI_APPLICATION = "policylab.wsgi.application"
ASGI_APPLICATION = "policylab.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [REPO_ROOT / "frontend" / "templates"],
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

if "DATABASE_URL" not in os.environ:
    VAR_DIR.mkdir(parents=True, exist_ok=True)  # the embedded SQLite database lives here
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'policylab.sqlite3'}"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "0")),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Ingest, the Celery worker and the web server write concurrently: wait up to 20 s for SQLite's
    # write lock (the default 5 s made ingest fail with "database is locked" under load), and take
    # the write lock when a transaction begins (IMMEDIATE): a DEFERRED transaction that reads first
    # cannot upgrade to a write while another process writes, and fails at once instead of waiting.
    DATABASES["default"].setdefault("OPTIONS", {}).update(timeout=20, transaction_mode="IMMEDIATE")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "policylab.accounts.backends.LoginThrottleBackend",  # first: refuses locked-out sign-ins
    "django.contrib.auth.backends.ModelBackend",
]
# Sign-in throttling (django-axes): 10 failed sign-ins of one username from one address lock that
# pair out for 15 minutes (another address, or another username, is not affected); a successful
# sign-in clears the count. API tokens do not sign in and are not counted.
AXES_FAILURE_LIMIT = int(os.environ.get("POLICYLAB_LOGIN_FAILURE_LIMIT", "10"))
AXES_COOLOFF_TIME = timedelta(minutes=int(os.environ.get("POLICYLAB_LOGIN_COOLOFF_MINUTES", "15")))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "accounts/locked_out.html"
AXES_VERBOSE = False
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "experiments:home"
LOGOUT_REDIRECT_URL = "accounts:login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [REPO_ROOT / "frontend" / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "policylab.tracking.finders.PlotlyFinder",  # vendor/plotly.min.js from the plotly package (no CDN)
]
# WhiteNoise serves static files straight from the app folders, so a deployment needs no
# collectstatic step and no separate file server (set DJANGO_STATIC_ROOT to use collectstatic).
WHITENOISE_USE_FINDERS = True
STATIC_ROOT = os.environ.get("DJANGO_STATIC_ROOT") or None

# --- services -------------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
RAY_ADDRESS = os.environ.get("RAY_ADDRESS", "http://127.0.0.1:8265")
# The Ray cluster's token (Ray's token authentication; scripts/services.py generates it, mode 0600): the job
# client sends it with every request. No file: a cluster without authentication, nothing is sent.
POLICYLAB_RAY_AUTH_TOKEN_PATH = Path(os.environ.get("POLICYLAB_RAY_AUTH_TOKEN_PATH", str(VAR_DIR / "ray_auth_token")))
POLICYLAB_RUNS_DIR = Path(os.environ.get("POLICYLAB_RUNS_DIR", VAR_DIR / "runs"))
POLICYLAB_MAX_RETRIES = int(os.environ.get("POLICYLAB_MAX_RETRIES", "2"))
# Jobs (policylab/jobs): supervisor poll period, its Redis lock's TTL (a dead supervisor's run is
# taken over after this), the beat reconcile period, and how the Ray job starts the trainer.
POLICYLAB_SUPERVISOR_POLL_S = float(os.environ.get("POLICYLAB_SUPERVISOR_POLL_S", "2"))
POLICYLAB_SUPERVISOR_LOCK_TTL_S = float(os.environ.get("POLICYLAB_SUPERVISOR_LOCK_TTL_S", "30"))
POLICYLAB_RECONCILE_INTERVAL_S = float(os.environ.get("POLICYLAB_RECONCILE_INTERVAL_S", "30"))
# Every HTTP request to Ray's job API gives up after this (the Ray SDK sets no timeout at all).
POLICYLAB_RAY_HTTP_TIMEOUT_S = float(os.environ.get("POLICYLAB_RAY_HTTP_TIMEOUT_S", "30"))
POLICYLAB_TRAINER_PYTHON = os.environ.get("POLICYLAB_TRAINER_PYTHON", "python")
POLICYLAB_TRAINER_PYTHONPATH = os.environ.get("POLICYLAB_TRAINER_PYTHONPATH", str(REPO_ROOT))
POLICYLAB_TRAINER_ARGS = os.environ.get("POLICYLAB_TRAINER_ARGS", "")  # e.g. "--workers local"
# What a run may touch (trainer.config.confinement): models and data only under these folders
# (comma-separated, on the cluster's disk), relative paths taken from POLICYLAB_TRAINER_WORKDIR;
# everything a run writes goes to its own run directory. Another team's runs are never readable.
POLICYLAB_READ_ROOTS = [
    str(Path(p).absolute())
    for p in os.environ.get("POLICYLAB_READ_ROOTS", f"{REPO_ROOT / 'examples'},{VAR_DIR / 'data'},{VAR_DIR / 'models'}")
    .split(",")
    if p.strip()
]
POLICYLAB_TRAINER_WORKDIR = os.environ.get("POLICYLAB_TRAINER_WORKDIR", str(REPO_ROOT))
# URLs a run may read and write besides plain paths (comma-separated prefixes, e.g.
# "s3://team-bucket/,gs://shared-data/"); none by default: file:, s3://, http://, … are refused.
POLICYLAB_URL_PREFIXES = [p.strip() for p in os.environ.get("POLICYLAB_URL_PREFIXES", "").split(",") if p.strip()]
# system_envs a config may set beyond trainer.config.confinement.SYSTEM_ENVS_ALLOWED (NCCL_*, CUDA_*,
# VLLM_*, TORCH_*, OMP_NUM_THREADS, WANDB_*, …): comma-separated names or globs, e.g. "HF_HUB_*,MY_FLAG".
POLICYLAB_SYSTEM_ENVS_ALLOW = [
    p.strip() for p in os.environ.get("POLICYLAB_SYSTEM_ENVS_ALLOW", "").split(",") if p.strip()
]
# Quotas of this deployment, checked when a run is submitted (experiments.quotas): live runs per team
# (queued to cancelling), steps per run (max_steps), and samples per step (rollout_batch_size ×
# num_return_sequences_in_group).
POLICYLAB_QUOTA_CONCURRENT_RUNS = int(os.environ.get("POLICYLAB_QUOTA_CONCURRENT_RUNS", "8"))
POLICYLAB_QUOTA_STEPS_PER_RUN = int(os.environ.get("POLICYLAB_QUOTA_STEPS_PER_RUN", "100000"))
POLICYLAB_QUOTA_SAMPLES_PER_STEP = int(os.environ.get("POLICYLAB_QUOTA_SAMPLES_PER_STEP", "65536"))
# Open websockets re-check their access (token, session, membership) this often, besides on a signal when
# access is removed (tracking.access).
POLICYLAB_WS_ACCESS_RECHECK_S = float(os.environ.get("POLICYLAB_WS_ACCESS_RECHECK_S", "2"))
# A rollout search (GET /api/runs/N/rollouts/?q=) is stopped past this many seconds (policylab.query_budget).
POLICYLAB_ROLLOUT_SEARCH_BUDGET_S = float(os.environ.get("POLICYLAB_ROLLOUT_SEARCH_BUDGET_S", "5"))
# Outbound calls of a run (trainer.config.outbound: judge_api_url, code_url): public addresses only, besides
# the hosts or URL prefixes listed here (comma-separated, e.g. "judge.internal,http://10.0.0.5:9000/v1"); the
# ports of the platform's own services stay refused on this machine even when listed.
POLICYLAB_OUTBOUND_ALLOW = os.environ.get("POLICYLAB_OUTBOUND_ALLOW", "")
POLICYLAB_OUTBOUND_DENY = sorted(
    {8000, 8265, 6379, 5432}
    | {port for port in (urlparse(RAY_ADDRESS).port, urlparse(REDIS_URL).port) if port}
    | ({int(DATABASES["default"]["PORT"])} if str(DATABASES["default"].get("PORT") or "").isdigit() else set())
    | {int(p) for p in os.environ.get("POLICYLAB_OUTBOUND_DENY", "").split(",") if p.strip().isdigit()}
)
# The environment variables `${oc.env:…}` may read in a run's trainer (comma-separated globs).
POLICYLAB_CONFIG_ENV_ALLOW = os.environ.get("POLICYLAB_CONFIG_ENV_ALLOW", "HOME,USER,TMPDIR,POLICYLAB_DATA_*")

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", REDIS_URL)
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND", REDIS_URL)
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            # redis-py 8 reads with a 5 s socket timeout by default, exactly channels-redis's blocking
            # receive (BZPOPMIN, 5 s): an idle websocket then dies with "Timeout reading". Wait longer.
            "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
            "prefix": os.environ.get("POLICYLAB_CHANNELS_PREFIX", "policylab:asgi"),
        },
    }
}

# --- REST API -------------------------------------------------------------------------------
# The OpenAPI document and its viewers (/api/schema/, /api/docs/, /api/redoc/) need a signed-in user or an
# API token, like the API itself; POLICYLAB_PUBLIC_API_SCHEMA=1 opens them to anonymous readers.
POLICYLAB_PUBLIC_API_SCHEMA = env_bool("POLICYLAB_PUBLIC_API_SCHEMA", False)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "policylab.accounts.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # signed in first; then a query parameter the endpoint's OpenAPI document does not list is a 400
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "policylab.api.query.KnownQueryParameters",
    ],
    # JSON with a depth limit and no lone surrogates (policylab/api/parsers.py); forms as DRF's defaults.
    "DEFAULT_PARSER_CLASSES": [
        "policylab.api.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "policylab.api.pagination.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "policylab.api.errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "PolicyLab API",
    "DESCRIPTION": "Experiments, runs, configs and API tokens of PolicyLab, an RL post-training platform.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",  # the default hook, kept
        "policylab.api.schema.document_id_bounds",
    ],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("POLICYLAB_LOG_LEVEL", "INFO")},
    # django-axes logs every failed sign-in at INFO; lockouts are WARNING
    "loggers": {"axes": {"level": os.environ.get("POLICYLAB_AXES_LOG_LEVEL", "WARNING")}},
}
