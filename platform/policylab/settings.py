"""PolicyLab settings: every value comes from the environment, with an embedded default that runs on
one machine (SQLite under var/, Redis on localhost, a local Ray head)."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

REPO_ROOT = Path(__file__).resolve().parents[2]
VAR_DIR = Path(os.environ.get("POLICYLAB_VAR_DIR", REPO_ROOT / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = env_bool("DJANGO_DEBUG", True)
# The default key is for the embedded single-machine setup only; production sets DJANGO_SECRET_KEY.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "policylab-insecure-dev-key-change-me-in-production")
ALLOWED_HOSTS = [h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

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
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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
    # write lock (the default 5 s made ingest fail with "database is locked" under load).
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 20
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
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
POLICYLAB_RUNS_DIR = Path(os.environ.get("POLICYLAB_RUNS_DIR", VAR_DIR / "runs"))
POLICYLAB_MAX_RETRIES = int(os.environ.get("POLICYLAB_MAX_RETRIES", "2"))
# Jobs (policylab/jobs): supervisor poll period, its Redis lock's TTL (a dead supervisor's run is
# taken over after this), the beat reconcile period, and how the Ray job starts the trainer.
POLICYLAB_SUPERVISOR_POLL_S = float(os.environ.get("POLICYLAB_SUPERVISOR_POLL_S", "2"))
POLICYLAB_SUPERVISOR_LOCK_TTL_S = float(os.environ.get("POLICYLAB_SUPERVISOR_LOCK_TTL_S", "30"))
POLICYLAB_RECONCILE_INTERVAL_S = float(os.environ.get("POLICYLAB_RECONCILE_INTERVAL_S", "30"))
POLICYLAB_TRAINER_PYTHON = os.environ.get("POLICYLAB_TRAINER_PYTHON", "python")
POLICYLAB_TRAINER_PYTHONPATH = os.environ.get("POLICYLAB_TRAINER_PYTHONPATH", str(REPO_ROOT))
POLICYLAB_TRAINER_ARGS = os.environ.get("POLICYLAB_TRAINER_ARGS", "")  # e.g. "--workers local"

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
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "policylab.accounts.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
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
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("POLICYLAB_LOG_LEVEL", "INFO")},
}
