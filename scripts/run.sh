#!/usr/bin/env bash
# Set up this machine (idempotent), then start the whole platform with the demo experiment:
# Redis (unless one answers), a local Ray head, Celery worker + beat, the ingest consumer and the
# ASGI server; the database is migrated, the demo user/team/experiment created, a demo run
# launched, and the URL printed. Ctrl-C stops everything it started.
#   bash scripts/run.sh [--port 8000] [--no-demo] [--debug]   (--debug: Django's DEBUG mode; off by default)
#   bash scripts/run.sh --nodes 2   (a second Ray node on this machine; the demo spans both)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false
exec python scripts/run_platform.py "$@"
