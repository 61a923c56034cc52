#!/usr/bin/env bash
# Set up everything the tests need (idempotent), then run lint and the test suite.
#   bash scripts/test.sh               # everything CI runs (tests marked `slow` deselected: ~45 min on 2 cores)
#   bash scripts/test.sh --slow        # the same plus the `slow` tests (the 2-step corpus smoke, example launches, …)
#   bash scripts/test.sh tests/trainer # any pytest arguments narrow the run (slow tests included)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
. .venv/bin/activate
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false

# CI's pass leaves out the long tail (`-m "not slow"`); `--slow` (or POLICYLAB_TEST_SLOW=1) keeps it.
marker=(-m "not slow")
if [ "${1:-}" = "--slow" ]; then shift; marker=(); fi
[ "${POLICYLAB_TEST_SLOW:-0}" = 1 ] && marker=()
[ $# = 0 ] || marker=()

echo "[test] ruff"
ruff check .

echo "[test] mypy (the packages [tool.mypy] in pyproject.toml lists)"
mypy

echo "[test] pytest (SQLite)${marker:+, slow tests deselected}"
set +e
python -m pytest --durations=30 "${marker[@]}" "$@"
status=$?
set -e
[ "$status" = 5 ] && { echo "pytest collected no tests" >&2; exit 1; }
[ "$status" = 0 ] || exit "$status"

# The platform suite runs on PostgreSQL too: the machine's own server when one answers on
# 127.0.0.1:5432 (CI machines start one), else a throw-away cluster started here on a free port.
[ $# = 0 ] || exit 0
pg_url="${POLICYLAB_TEST_POSTGRES_URL:-}"
pg_pid=""
if [ -z "$pg_url" ]; then
  if python - <<'PY'
import socket, sys
try:
    socket.create_connection(("127.0.0.1", 5432), timeout=1).close()
except OSError:
    sys.exit(1)
PY
  then
    pg_url="postgres://postgres@127.0.0.1:5432/policylab"
  else
    echo "[test] no PostgreSQL on 127.0.0.1:5432: starting a throw-away one"
    pg_out=$(mktemp)
    python scripts/services.py postgres > "$pg_out" &
    pg_pid=$!
    trap 'kill "$pg_pid" 2>/dev/null; wait "$pg_pid" 2>/dev/null; rm -f "$pg_out"' EXIT
    for _ in $(seq 1 120); do
      [ -s "$pg_out" ] && break
      kill -0 "$pg_pid" 2>/dev/null || { echo "could not start PostgreSQL" >&2; exit 1; }
      sleep 0.5
    done
    pg_url=$(head -n 1 "$pg_out")
  fi
fi
echo "[test] pytest tests/platform (PostgreSQL: ${pg_url%%@*}@…)"
DATABASE_URL="$pg_url" python -m pytest tests/platform -m "not slow"

# The fault suite: every fault injected at a random step of a real run on a two-node stack (~9 min);
# it prints the fault table (fault x outcome x points lost / duplicated x time to recover).
echo "[test] pytest tests/faults"
python -m pytest tests/faults -q
