#!/usr/bin/env bash
# Set up this machine (idempotent), then run the demo experiment through the trainer CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 TOKENIZERS_PARALLELISM=false
exec python -m trainer run examples/demo_grpo_cpu.yaml "$@"
