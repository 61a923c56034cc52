#!/usr/bin/env bash
# Set up everything the tests need (idempotent), then run lint and the whole test suite.
#   bash scripts/test.sh               # everything CI runs
#   bash scripts/test.sh tests/trainer # any pytest arguments narrow the run
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
. .venv/bin/activate
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false

echo "[test] ruff"
ruff check .

echo "[test] pytest (SQLite)"
set +e
python -m pytest "$@"
status=$?
set -e
[ "$status" = 5 ] && { echo "pytest collected no tests" >&2; exit 1; }
[ "$status" = 0 ] || exit "$status"

# The platform suite runs on PostgreSQL too when one is reachable (CI machines start one).
if [ $# = 0 ] && python - <<'PY'
import socket, sys
try:
    socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
except OSError:
    sys.exit(1)
PY
then
  echo "[test] pytest tests/platform (PostgreSQL)"
  DATABASE_URL="${POLICYLAB_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/policylab}" \
    python -m pytest tests/platform -m "not slow"
else
  [ $# = 0 ] && echo "[test] no PostgreSQL on 127.0.0.1:5432: skipped the PostgreSQL pass"
fi
