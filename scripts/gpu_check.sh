#!/usr/bin/env bash
# The GPU check: the GRPO demo learning on CUDA through every training strategy, the gpu-marked tests of
# trainer/, then bench/gpu.py's throughput rows, on a bare GPU machine, which has Python 3.12 (`python3`),
# torch + CUDA, transformers, pytest and hypothesis, but no network, no package index, no Ray, and lacks
# pydantic, omegaconf, megatron-core, deepspeed and hjson (as seen 2026-11-26; ../shared/ENVIRONMENT.md).
#
#   bash scripts/gpu_check.sh prepare    # here, on a CPU machine with the package index: the wheels the
#                                        # GPU machine lacks, into $GPU_WHEELS_DIR (default .gpu_wheels/,
#                                        # git-ignored); fails when checkout + wheels exceed 60 MiB
#   bash scripts/gpu_check.sh run        # there: install those wheels (only what is missing or at another
#                                        # version) into a temporary --target, check the imports, then the
#                                        # GRPO demo per strategy, pytest -m gpu, the throughput rows; each
#                                        # step and row appended to $OUT/gpu_check.jsonl as it finishes, the
#                                        # log in $OUT/gpu_check.log; ends with GPU CHECK PASSED|INCOMPLETE|FAILED
#   bash scripts/gpu_check.sh run --dry-run       # print the install plan and the commands, run nothing
#   bash scripts/gpu_check.sh run --install-only  # install and check the imports, no tests, no bench
#   bash scripts/gpu_check.sh run --reinstall     # install every wheel this interpreter takes, even where
#                                                 # the same version is importable (to try the step on CPU)
#   bash scripts/gpu_check.sh run --steps demo,bench  # only these of install,imports,demo,pytest,bench
#                                                 # (the others are recorded as skipped: never PASSED)
#   bash scripts/gpu_check.sh selftest   # on a CPU (CI): the run step with CUDA hidden, and the verdicts
#
# Verdict (scripts/gpu_report.py): FAILED when any step or row failed or timed out; else INCOMPLETE when a
# mandatory one (install, imports, the demo with torch_train, fsdp2_train, deepspeed_train and megatron_train,
# pytest) did not run and pass (skipped for time, no CUDA, a package missing); else PASSED. Throughput rows
# that miss their target are listed but do not fail the check. Exit code: 0 PASSED, 1 FAILED, 3 INCOMPLETE.
#
# Knobs (environment): GPU_CHECK_PYTHON (default python3; on a machine where it lacks torch or pytest,
# .venv/bin/python), GPU_CHECK_BUDGET (s for the whole run, default 560: the device tool allows 600 s a
# command), GPU_CHECK_PYTEST_TIMEOUT (s, default 150; the demo leaves pytest this much of the budget),
# GPU_CHECK_TEST_TIMEOUT (s per test, default 120), GPU_CHECK_BENCH_ARGS (e.g. "--sections update"),
# GPU_CHECK_RESULTS (the rows; default $OUT/gpu_check.jsonl, else a temporary file), GPU_CHECK_SITE (install
# target; default a fresh /tmp/policylab-site.XXXXXX, removed at the end), GPU_CHECK_MAX_MIB (prepare's limit),
# GPU_CHECK_WHEEL_PYTHON (the Python version prepare downloads for, default 3.12; 3.11 to rehearse here).
# Budget on an H100/H200 (estimates: nothing measured since 2026-11-26): install + imports ~45 s, the four
# demos ~310 s (each starts only when the time left covers its estimate), pytest 108 s measured, the rest
# to throughput rows; a second `run --steps install,bench` measures the rows the first had no time for.
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELS=${GPU_WHEELS_DIR:-.gpu_wheels}
MAX_MIB=${GPU_CHECK_MAX_MIB:-60}
# pinned exactly (the version this checkout is tested with); everything else only has to satisfy the
# requirements of what is installed
EXACT="pydantic pydantic-core omegaconf megatron-core transformers deepspeed"
# what `prepare` downloads: the GPU machine lacks the first nine; transformers is there at an older
# version, and its own dependencies come along in case that machine's are too old for our pin; hypothesis
# (a gpu-marked module's helper imports it; it needs sortedcontainers) is there too, carried for a barer
# image (installed only where missing)
PACKAGES="pydantic pydantic-core annotated-types typing-inspection typing-extensions omegaconf PyYAML
megatron-core hjson transformers tokenizers safetensors huggingface-hub regex hypothesis sortedcontainers"

say() { printf '[gpu_check] %s\n' "$*"; }
die() { printf '[gpu_check] error: %s\n' "$*" >&2; exit 1; }

# ------------------------------------------------------------------------------------------------
# prepare (CPU machine)

checkout_bytes() {
  # what the device tool carries: tracked files and untracked files git does not ignore
  git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null |
    awk '{s += $1} END {print s + 0}'
}

mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }

prepare() {
  local py=${GPU_CHECK_PREP_PYTHON:-}
  if [ -z "$py" ]; then
    if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
  fi
  mkdir -p "$WHEELS"
  # the versions this checkout runs with: the prepare interpreter's, else requirements.txt's range
  local specs
  specs=$("$py" - "$PACKAGES deepspeed" <<'EOF'
import re
import sys
from importlib import metadata

pins = {}
for line in open("requirements.txt", encoding="utf-8"):
    line = line.split("#")[0].strip()
    match = re.match(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?\s*(.*)", line)
    if match and line:
        pins[match.group(1).lower()] = match.group(3).replace(" ", "")
for name in sys.argv[1].split():
    try:
        print(f"{name}=={metadata.version(name)}")
    except metadata.PackageNotFoundError:
        print(f"{name}{pins.get(name.lower(), '')}")
EOF
) || die "cannot read package versions with $py"
  local pyver=${GPU_CHECK_WHEEL_PYTHON:-3.12}
  say "wheels for Python $pyver, manylinux x86_64, into $WHEELS/:"
  printf '  %s\n' $specs
  local kept=() spec file
  for spec in $specs; do
    case "$spec" in deepspeed*) continue ;; esac
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
      --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --platform any \
      -d "$WHEELS" "$spec" 2>&1 | { grep -v '^WARNING: Location' || true; }
    file=$(wheel_for "$spec") || die "no Python $pyver manylinux x86_64 wheel found for $spec"
    kept+=("$file")
  done
  # DeepSpeed publishes no wheel: build one without its C++ ops (they compile on first use there)
  local ds_spec
  ds_spec=$(printf '%s\n' $specs | grep '^deepspeed')
  if ! file=$(wheel_for "$ds_spec"); then
    say "building the DeepSpeed wheel ($ds_spec, DS_BUILD_OPS=0: ops JIT-compile on the GPU machine)"
    DS_BUILD_OPS=0 "$py" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELS" "$ds_spec" 2>&1 |
      { grep -v '^WARNING: Location' || true; }
    file=$(wheel_for "$ds_spec") || die "building the DeepSpeed wheel ($ds_spec) failed"
  fi
  kept+=("$file")
  # drop what an earlier prepare left that is not wanted now (another version)
  local f stale
  for f in "$WHEELS"/*; do
    stale=1
    for file in "${kept[@]}"; do [ "$f" = "$WHEELS/$file" ] && stale=0; done
    if [ "$stale" = 1 ]; then say "removing stale $f"; rm -f -- "$f"; fi
  done
  say "wheels:"
  (cd "$WHEELS" && ls -l -- *.whl | awk '{printf "  %8.1f KiB  %s\n", $5 / 1024, $9}')
  local wheel_bytes code_bytes total
  wheel_bytes=$(cat "$WHEELS"/*.whl | wc -c)
  code_bytes=$(checkout_bytes)
  total=$((wheel_bytes + code_bytes))
  say "size: wheels $(mib "$wheel_bytes") MiB + checkout $(mib "$code_bytes") MiB = $(mib "$total") MiB (limit $MAX_MIB MiB)"
  if [ "$total" -gt $((MAX_MIB * 1048576)) ]; then
    die "checkout + wheels exceed $MAX_MIB MiB: the device tool carries at most 64 MiB per call"
  fi
  say "ready: carry '$WHEELS' with the checkout and run 'bash scripts/gpu_check.sh run' on the GPU machine"
}

# the file name of the wheel in $WHEELS that `spec` (name==version, or name with a range) resolved to
wheel_for() {
  local spec=$1 name version norm
  name=$(printf '%s' "$spec" | sed -E 's/[=<>!~;[].*//')
  norm=$(printf '%s' "$name" | tr 'A-Z-.' 'a-z__')
  version=$(printf '%s' "$spec" | sed -nE 's/^[^=]*==([^,;]*)$/\1/p')
  local f base
  for f in "$WHEELS"/*.whl; do
    [ -e "$f" ] || continue
    base=$(basename "$f")
    # wheel names: {distribution}-{version}-...; distribution normalised to lower case with _
    if [ "$(printf '%s' "${base%%-*}" | tr 'A-Z-.' 'a-z__')" = "$norm" ]; then
      if [ -z "$version" ] || [ "$(printf '%s' "$base" | cut -d- -f2)" = "$version" ]; then
        printf '%s\n' "$base"; return 0
      fi
    fi
  done
  return 1
}

# ------------------------------------------------------------------------------------------------
# run (the GPU machine)

PLAN_PY=$(cat <<'EOF'
"""plan WHEEL_DIR REINSTALL OUT_LIST | check WHEEL..."""
import email.parser
import sys
import zipfile
from importlib import metadata
from pathlib import Path

try:
    from packaging.requirements import Requirement
    from packaging.tags import sys_tags
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import InvalidVersion, Version
except ImportError:  # pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.tags import sys_tags
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename
    from pip._vendor.packaging.version import InvalidVersion, Version

EXACT = {canonicalize_name(n) for n in sys.argv[-1].split()}
SUPPORTED = set(sys_tags())


def wheel(path):
    name, version, _, tags = parse_wheel_filename(path.name)
    with zipfile.ZipFile(path) as archive:
        meta = next(n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        fields = email.parser.Parser().parsestr(archive.read(meta).decode("utf-8"))
    reqs = []
    for text in fields.get_all("Requires-Dist") or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            reqs.append(req)
    return {"name": canonicalize_name(name), "version": version, "reqs": reqs, "path": path,
            "fits": bool(set(tags) & SUPPORTED)}


def found(name):
    try:
        return Version(metadata.version(name))
    except (metadata.PackageNotFoundError, InvalidVersion):
        return None


def plan(wheel_dir, reinstall, out_list):
    wheels = {w["name"]: w for w in map(wheel, sorted(Path(wheel_dir).glob("*.whl")))}
    if not wheels:
        sys.exit(f"no wheels in {wheel_dir}: run `bash scripts/gpu_check.sh prepare` on a CPU machine first")
    why = {}
    for name, w in wheels.items():
        have = found(name)
        if reinstall:
            why[name] = "--reinstall"
        elif have is None:
            why[name] = "missing"
        elif name in EXACT and have != w["version"]:
            why[name] = f"pinned {w['version']}, found {have}"
    changed = True
    while changed:  # what the wheels to install require, at versions this machine lacks
        changed = False
        for name in list(why):
            for req in wheels[name]["reqs"]:
                dep = canonicalize_name(req.name)
                have = found(dep)
                if dep in why or (have is not None and req.specifier.contains(have, prereleases=True)):
                    continue
                if dep in wheels and req.specifier.contains(wheels[dep]["version"], prereleases=True):
                    why[dep] = f"{name} needs {req.specifier or 'it'}"
                    changed = True
    problems = []
    for name in why:
        for req in wheels[name]["reqs"]:
            dep = canonicalize_name(req.name)
            have = wheels[dep]["version"] if dep in why else found(dep)
            if have is None or not req.specifier.contains(have, prereleases=True):
                problems.append(f"{name} needs {req}: found {have or 'nothing'}, and no carried wheel fits")
    install = []
    print(f"  {'package':24} {'wheel':14} {'found here':14} action")
    for name, w in sorted(wheels.items()):
        have = found(name)
        if name not in why:
            action = "skip (importable at a fitting version)"
        elif not w["fits"]:
            action = f"skip: its wheel is not for this Python ({why[name]})"
            if have is None:
                problems.append(f"{name}: missing here and {w['path'].name} does not fit this interpreter")
        else:
            action = f"install ({why[name]})"
            install.append(str(w["path"]))
        print(f"  {name:24} {w['version']!s:14} {have or '-'!s:14} {action}")
    for line in problems:
        print(f"  WARNING: {line}")
    Path(out_list).write_text("".join(p + "\n" for p in install), encoding="utf-8")


def check(paths):
    """After the install (PYTHONPATH set): every requirement of the installed wheels is met."""
    bad = []
    for path in paths:
        w = wheel(Path(path))
        for req in w["reqs"]:
            have = found(req.name)
            if have is None or not req.specifier.contains(have, prereleases=True):
                bad.append(f"{w['name']} {w['version']} needs {req}, found {have or 'nothing'}")
    for line in bad:
        print(f"  WARNING: {line}")
    print(f"  requirements of the {len(paths)} installed wheel(s): {'all met' if not bad else f'{len(bad)} unmet'}")
    return 1 if bad else 0


if sys.argv[1] == "plan":
    plan(sys.argv[2], sys.argv[3] == "1", sys.argv[4])
else:
    sys.exit(check(sys.argv[2:-1]))
EOF
)

IMPORTS_PY=$(cat <<'EOF'
import importlib
import importlib.util
import sys
import time
from importlib import metadata

failed = 0
for module, dist in [("torch", "torch"), ("pydantic", "pydantic"), ("omegaconf", "omegaconf"), ("yaml", "PyYAML"),
                     ("hjson", "hjson"), ("transformers", "transformers"), ("deepspeed", "deepspeed"),
                     ("megatron.core", "megatron-core")]:
    start = time.perf_counter()
    try:
        loaded = importlib.import_module(module)
        where = (getattr(loaded, "__file__", None) or "?").split("/site-packages/")[-1]
        print(f"  {module:14} {metadata.version(dist):12} {time.perf_counter() - start:5.1f} s  {where}")
    except Exception as error:  # report every failure, go on
        failed += 1
        print(f"  {module:14} FAILED: {type(error).__name__}: {error}")
print(f"  ray importable: {importlib.util.find_spec('ray') is not None} (the local backend needs none)")
sys.exit(1 if failed else 0)
EOF
)

DEVICE_PY=$(cat <<'EOF'
import platform
import torch

print(f"  python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"available: {torch.cuda.is_available()}")
for i in range(torch.cuda.device_count()):
    props = torch.cuda.get_device_properties(i)
    print(f"  cuda:{i} {props.name}, {props.total_memory / 2**30:.1f} GiB, sm_{props.major}{props.minor}")
EOF
)

pick_python() {
  if [ -n "${GPU_CHECK_PYTHON:-}" ]; then printf '%s\n' "$GPU_CHECK_PYTHON"; return; fi
  if python3 -c 'import torch, pytest' >/dev/null 2>&1; then printf 'python3\n'; return; fi
  if [ -x .venv/bin/python ] && .venv/bin/python -c 'import torch, pytest' >/dev/null 2>&1; then
    printf '.venv/bin/python\n'; return
  fi
  printf 'python3\n'
}

STEPS_ALL="install,imports,demo,pytest,bench"
STEPS=$STEPS_ALL
RESULTS=""  # the rows, one JSON object a line (scripts/gpu_report.py)
REPORT_PY=python3  # the report needs only the standard library

step_done() {  # name rc|skip seconds [note]: one row of the results
  local state note=${4:-}
  case "$2" in
    0) state=passed ;;
    skip) state=skipped ;;
    124|137) state="timed out" ;;
    *) state=failed; note="exit $2${note:+: $note}" ;;
  esac
  "$REPORT_PY" scripts/gpu_report.py add "$RESULTS" --section "$1" --state "$state" --seconds "$3" --note "$note"
}

selected() { case ",$STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

left_of() {  # budget started: the seconds left of the budget now
  echo $(($1 - ($(date +%s) - $2)))
}

# bench/gpu.py over some sections with `budget` seconds; its rows land in $RESULTS as they finish. It exits
# 0, or 3 when a row failed (the rows say which): anything else is a crash, recorded as a failed step.
bench_step() {  # step-name sections budget
  local t0 rc
  t0=$(date +%s)
  if [ "$3" -lt 1 ]; then
    step_done "$1" skip 0 "budget: no time left"
    return
  fi
  say "bench/gpu.py --sections $2 ${GPU_CHECK_BENCH_ARGS:-}(a row starts while its estimate fits in $3 s)"
  # shellcheck disable=SC2086  # the args are words
  timeout -k 15 $(($3 + 60)) "$py" bench/gpu.py --sections "$2" --budget-s "$3" --results "$RESULTS" \
    ${GPU_CHECK_BENCH_ARGS:-}
  rc=$?
  case "$rc" in 0|3) ;; *) step_done "$1" "$rc" $(($(date +%s) - t0)) "bench/gpu.py itself (see the log)" ;; esac
}

run_check() {
  local dry=0 install_only=0 reinstall=0 arg
  while [ $# -gt 0 ]; do
    case "$1" in
      --dry-run) dry=1 ;;
      --install-only) install_only=1 ;;
      --reinstall) reinstall=1 ;;
      --steps) STEPS=${2:-}; shift ;;
      *) die "run: unknown option $1 (--dry-run, --install-only, --reinstall, --steps $STEPS_ALL)" ;;
    esac
    shift
  done
  for arg in ${STEPS//,/ }; do
    case ",$STEPS_ALL," in *",$arg,"*) ;; *) die "run --steps: unknown step '$arg' (some of $STEPS_ALL)" ;; esac
  done
  [ "$install_only" = 1 ] && STEPS=install,imports
  local t0 started rev budget=${GPU_CHECK_BUDGET:-560} pytest_timeout=${GPU_CHECK_PYTEST_TIMEOUT:-150}
  py=$(pick_python)
  started=$(date +%s)
  rev=$(git rev-parse --short HEAD 2>/dev/null) || rev="?"
  [ "$rev" != "?" ] && ! git diff --quiet HEAD 2>/dev/null && rev="$rev + local changes"
  say "$(date -u '+%Y-%m-%d %H:%M:%S UTC') on $(uname -n), checkout $rev, interpreter $py, steps $STEPS"
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/  /'
  "$py" -c "$DEVICE_PY" || say "warning: $py cannot import torch: the tests and the bench will fail"
  command -v "$REPORT_PY" >/dev/null 2>&1 || REPORT_PY=$py
  RESULTS=${GPU_CHECK_RESULTS:-}
  if [ -z "$RESULTS" ]; then
    if [ -n "${OUT:-}" ]; then RESULTS=$OUT/gpu_check.jsonl
    elif [ "$dry" = 1 ]; then RESULTS="<a temporary file>"
    else RESULTS=$(mktemp /tmp/gpu_check.XXXXXX.jsonl); fi
  fi
  [ "$dry" = 1 ] || : > "$RESULTS"

  # 1. the carried wheels: only what this machine lacks or has at another version
  local site=${GPU_CHECK_SITE:-} own_site=0 rc=0 to_install=()
  if selected install || [ "$dry" = 1 ]; then
    [ -d "$WHEELS" ] || die "no $WHEELS/: run 'bash scripts/gpu_check.sh prepare' on a CPU machine and carry it along"
    if [ -z "$site" ]; then
      site=$(mktemp -d /tmp/policylab-site.XXXXXX) own_site=1
      # shellcheck disable=SC2064  # the path now
      [ "$dry" = 1 ] || trap "rm -rf '$site'" EXIT
    fi
    local list
    list=$(mktemp)
    t0=$(date +%s)
    say "install plan ($WHEELS/ -> $site):"
    "$py" -c "$PLAN_PY" plan "$WHEELS" "$reinstall" "$list" "$EXACT" || die "cannot plan the install"
    mapfile -t to_install < "$list"
    rm -f "$list"
  fi
  if [ "$dry" = 1 ]; then
    say "dry run: would run"
    [ ${#to_install[@]} -gt 0 ] && echo "  $py -m pip install --no-index --no-deps --target $site ${to_install[*]}"
    echo "  PYTHONPATH=$site:$PWD $py bench/gpu.py --sections demo --budget-s <what is left of $budget s, less $pytest_timeout s for pytest> --results $RESULTS"
    echo "  PYTHONPATH=$site:$PWD timeout $pytest_timeout $py -m pytest -m gpu -q -p no:cacheprovider" \
      "--continue-on-collection-errors $(grep -rlE 'mark\.gpu\b' tests/trainer --include='test_*.py' | sort | xargs)"
    echo "  PYTHONPATH=$site:$PWD $py bench/gpu.py --sections update,generate,sync --budget-s <what is left> --results $RESULTS ${GPU_CHECK_BENCH_ARGS:-}"
    echo "  $REPORT_PY scripts/gpu_report.py summary $RESULTS"
    [ "$own_site" = 1 ] && rmdir "$site"
    return 0
  fi
  if selected install; then
    if [ ${#to_install[@]} -gt 0 ]; then
      PIP_ROOT_USER_ACTION=ignore "$py" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --no-warn-conflicts \
        --target "$site" "${to_install[@]}" 2>&1 | grep -v '^WARNING: Location'
      rc=${PIPESTATUS[0]}
    fi
    export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    if [ "$rc" = 0 ] && [ ${#to_install[@]} -gt 0 ]; then
      "$py" -c "$PLAN_PY" check "${to_install[@]}" "$EXACT"
    fi
    step_done install "$rc" $(($(date +%s) - t0)) "${#to_install[@]} wheel(s) into $site"
  else
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    step_done install skip 0 "not selected (--steps $STEPS)"
  fi

  if selected imports; then
    t0=$(date +%s)
    say "imports (PYTHONPATH=$PYTHONPATH):"
    "$py" -W ignore -c "$IMPORTS_PY"
    step_done imports $? $(($(date +%s) - t0))
  else
    step_done imports skip 0 "not selected (--steps $STEPS)"
  fi

  # 2. the GRPO demo per training strategy: mandatory and first; it leaves pytest its time
  if selected demo; then
    local reserve=0
    selected pytest && reserve=$pytest_timeout
    bench_step demo demo $(($(left_of "$budget" "$started") - reserve))
  else
    for arg in torch_train fsdp2_train deepspeed_train megatron_train; do
      "$REPORT_PY" scripts/gpu_report.py add "$RESULTS" --section demo --case "$arg" --state skipped \
        --note "not selected (--steps $STEPS)"
    done
  fi

  # 3. the gpu-marked tests (they skip without CUDA)
  if selected pytest; then
    t0=$(date +%s)
    local test_timeout=() gpu_modules=() timeout_s
    timeout_s=$(left_of "$budget" "$started")
    [ "$timeout_s" -gt "$pytest_timeout" ] && timeout_s=$pytest_timeout
    "$py" -c 'import pytest_timeout' >/dev/null 2>&1 && test_timeout=(--timeout "${GPU_CHECK_TEST_TIMEOUT:-120}")
    # only the modules that hold gpu-marked tests: collecting all of tests/trainer stops at the modules
    # that import ray, redis or pyarrow at the top, which that machine lacks
    mapfile -t gpu_modules < <(grep -rlE 'mark\.gpu\b' tests/trainer --include='test_*.py' | sort)
    if [ ${#gpu_modules[@]} = 0 ]; then
      step_done pytest 1 0 "no module of tests/trainer holds a gpu-marked test"
    elif [ "$timeout_s" -lt 30 ]; then
      step_done pytest skip 0 "budget: ${timeout_s} s left"
    else
      say "pytest -m gpu over ${#gpu_modules[@]} modules of tests/trainer (at most $timeout_s s)"
      local pytest_log counts
      pytest_log=$(mktemp)
      timeout -k 15 "$timeout_s" "$py" -m pytest -m gpu -q -p no:cacheprovider -rfEs \
        --continue-on-collection-errors "${test_timeout[@]}" "${gpu_modules[@]}" 2>&1 | tee "$pytest_log"
      rc=${PIPESTATUS[0]}
      counts=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|deselected|error)' "$pytest_log" | tail -1 | tr -d '=' | xargs)
      rm -f "$pytest_log"
      step_done pytest "$rc" $(($(date +%s) - t0)) "${counts:-no summary line}"
    fi
  else
    step_done pytest skip 0 "not selected (--steps $STEPS)"
  fi

  # 4. the throughput rows, with what is left (a row that does not fit is recorded as skipped)
  if selected bench; then
    bench_step bench update,generate,sync "$(left_of "$budget" "$started")"
  fi

  say "report ($(($(date +%s) - started)) s in all; rows in $RESULTS):"
  "$REPORT_PY" scripts/gpu_report.py summary "$RESULTS"
}

# ------------------------------------------------------------------------------------------------
# selftest (a CPU machine, CI): the run step walked with CUDA hidden, then the verdict of three reports

SELFTEST_FAILURES=0
expect() {  # what got want
  if [ "$2" = "$3" ]; then printf '  ok    %s: %s\n' "$1" "$2"
  else printf '  WRONG %s: got %s, want %s\n' "$1" "$2" "$3"; SELFTEST_FAILURES=$((SELFTEST_FAILURES + 1)); fi
}

selftest() {
  local dir out rc state want arg
  py=$(pick_python)
  command -v "$REPORT_PY" >/dev/null 2>&1 || REPORT_PY=$py
  dir=$(mktemp -d /tmp/gpu_check_selftest.XXXXXX)
  # shellcheck disable=SC2064  # the path now
  trap "rm -rf '$dir'" EXIT
  say "selftest 1: run --steps demo with CUDA hidden: the demo rows skipped, the check INCOMPLETE (exit 3)"
  out=$(CUDA_VISIBLE_DEVICES="" GPU_CHECK_PYTHON=$py GPU_CHECK_RESULTS=$dir/run.jsonl OUT="" \
        bash "$0" run --steps demo 2>&1)
  rc=$?
  printf '%s\n' "$out" | sed 's/^/  | /'
  expect "exit code" "$rc" 3
  expect "last line" "$(printf '%s\n' "$out" | tail -1)" "GPU CHECK INCOMPLETE"
  expect "demo rows" "$("$REPORT_PY" -c '
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(", ".join(r["case"] + " " + r["state"] + " (" + str(r.get("note")) + ")" for r in rows if r["section"] == "demo"))
' "$dir/run.jsonl")" "$(printf '%s skipped (no CUDA device), ' torch_train fsdp2_train deepspeed_train \
    | sed 's/, $//'), megatron_train skipped (no CUDA device)"

  say "selftest 2: three reports through the run step's own rows and summary (megatron_train's demo varies)"
  for arg in "skipped INCOMPLETE 3" "failed FAILED 1" "passed PASSED 0"; do
    read -r state want rc <<< "$arg"
    RESULTS=$dir/$state.jsonl
    : > "$RESULTS"
    step_done install 0 1
    step_done imports 0 1
    for arg in torch_train fsdp2_train deepspeed_train; do
      "$REPORT_PY" scripts/gpu_report.py add "$RESULTS" --section demo --case "$arg" --state passed
    done
    "$REPORT_PY" scripts/gpu_report.py add "$RESULTS" --section demo --case megatron_train --state "$state"
    step_done pytest 0 1 "12 passed"
    "$REPORT_PY" scripts/gpu_report.py add "$RESULTS" --section update --case 0.5B/torch_train --state "below target"
    out=$("$REPORT_PY" scripts/gpu_report.py summary "$RESULTS")
    expect "demo $state: exit code" "$?" "$rc"
    expect "demo $state: verdict" "$(printf '%s\n' "$out" | tail -1)" "GPU CHECK $want"
  done
  if [ "$SELFTEST_FAILURES" = 0 ]; then say "selftest passed"; return 0; fi
  say "selftest FAILED: $SELFTEST_FAILURES expectation(s) not met"
  return 1
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  run)
    shift
    if [ -n "${OUT:-}" ]; then  # everything also in $OUT/gpu_check.log (what the device tool brings back)
      mkdir -p "$OUT"
      run_check "$@" 2>&1 | tee -a "$OUT/gpu_check.log"
      exit "${PIPESTATUS[0]}"
    fi
    run_check "$@" ;;
  selftest) selftest ;;
  *) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 2 ;;
esac
