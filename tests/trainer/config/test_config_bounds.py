"""Config input cannot crash, stall or leak (issue 10): every attack body answers a clear error, fast.

Each test here failed on the loader before trainer.config.bounds: the nesting one segfaulted the
process, the expansion ones took seconds and megabytes, `${oc.env:…}` echoed the server's
environment, and a string naming a file was opened.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.config import load_raw, validate_config
from trainer.config.bounds import MAX_ALIASES, MAX_DEPTH, MAX_NODES, MAX_RESOLVED_CHARS
from trainer.config.loading import config_environment

REPO = Path(__file__).resolve().parents[3]
DEMO = (REPO / "examples" / "demo_grpo_cpu.yaml").read_text()
SECOND = 2.0  # the budget for any one call


def timed_errors(source, overrides=(), **kwargs) -> tuple[list[str], float]:
    start = time.perf_counter()
    result = validate_config(source, overrides, **kwargs)
    elapsed = time.perf_counter() - start
    return [f"{i.path}: {i.message}" for i in result.errors], elapsed


def billion_laughs(levels: int, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def doubling(levels: int) -> str:
    lines = ["x0: " + "a" * 64]
    lines += [f"x{i}: ${{x{i - 1}}}${{x{i - 1}}}" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_deep_yaml_nesting_is_refused_without_crashing_the_process() -> None:
    """26,000 nested `[` (a 52 kB body) segfaulted libyaml's composer and killed the web process."""
    code = (
        "import time; from trainer.config import validate_config\n"
        "t = time.perf_counter(); r = validate_config('a: ' + '[' * 26000 + ']' * 26000)\n"
        "print(round(time.perf_counter() - t, 3)); print(r.errors[0].message)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    elapsed, message = proc.stdout.splitlines()[:2]
    assert f"nested deeper than {MAX_DEPTH} levels" in message
    assert float(elapsed) < SECOND


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5_000])
def test_nesting_past_the_limit_names_it(depth: int) -> None:
    errors, elapsed = timed_errors("a: " + "[" * depth + "]" * depth)
    assert errors == [f": <text>: nested deeper than {MAX_DEPTH} levels; the limit is {MAX_DEPTH}"]
    assert elapsed < SECOND


def test_nesting_within_the_limit_still_loads() -> None:
    depth = MAX_DEPTH - 2
    assert load_raw("a: " + "[" * depth + "1" + "]" * depth)["a"]


def test_billion_laughs_is_refused_before_expansion() -> None:
    errors, elapsed = timed_errors(billion_laughs(9))
    # refused at the values aliases add (issue 34), before the node count after expansion is reached
    assert len(errors) == 1 and "YAML aliases (*name) expand to more than" in errors[0]
    assert elapsed < SECOND
    assert load_raw(billion_laughs(3, width=3))["a2"] == [[["lol"] * 3] * 3] * 3  # small aliases still work


def test_alias_count_is_bounded() -> None:
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n"
    errors, _ = timed_errors(text)
    assert errors and f"more than {MAX_ALIASES:,} YAML aliases" in errors[0]


def test_interpolation_doubling_is_refused_before_resolving() -> None:
    """20 levels of `${x}${x}` returned 12.6 MB from a 1.5 kB request."""
    errors, elapsed = timed_errors(doubling(20))
    assert len(errors) == 1 and f"more than {MAX_RESOLVED_CHARS:,} characters" in errors[0]
    assert errors[0].startswith("x20:")  # the key whose value would blow up
    assert elapsed < SECOND
    assert load_raw(doubling(3))["x3"] == "a" * 64 * 8


def test_container_references_count_towards_the_bound() -> None:
    lines = ["c0: [" + ", ".join(["abcdefgh"] * 16) + "]"]
    lines += [f'c{i}: ["${{c{i - 1}}}", "${{c{i - 1}}}", "${{.c{i - 1}}}"]' for i in range(1, 16)]
    errors, elapsed = timed_errors("\n".join(lines))
    assert errors and "interpolation would expand" in errors[0] and elapsed < SECOND


def test_only_known_resolvers_run() -> None:
    errors, _ = timed_errors("a: {b: 1}\nc: ${oc.decode:'1'}\n")
    assert [e.split(":")[0] for e in errors] == ["c"]
    assert "resolver 'oc.decode' is not available" in errors[0]


def test_hydra_select_becomes_a_bounded_reference() -> None:
    """verl writes `${oc.select:key,default}`: the loader rewrites it to `${key}` (or the default) before
    the bounds run, so a select of a huge node is counted like a plain reference."""
    loaded = load_raw("a: {b: 1}\nc: ${oc.select:a}\nd: ${oc.select:missing,7}\n")
    assert loaded == {"c": {"b": 1}, "d": 7}  # `a` only feeds interpolation: a helper variable, dropped
    lines = ["c0: [" + ", ".join(["abcdefgh"] * 16) + "]"]
    lines += [f'c{i}: ["${{oc.select:c{i - 1}}}", "${{c{i - 1}}}", "${{c{i - 1}}}"]' for i in range(1, 16)]
    errors, elapsed = timed_errors("\n".join(lines))
    assert errors and "interpolation would expand" in errors[0] and elapsed < SECOND


def test_arithmetic_resolvers_refuse_huge_numbers() -> None:
    lines = ["n0: 1000000"] + [f"n{i}: ${{multiply:${{n{i - 1}}},${{n{i - 1}}}}}" for i in range(1, 8)]
    errors, elapsed = timed_errors("\n".join(lines))
    assert errors and "outside" in errors[0] and elapsed < SECOND


def test_json_mappings_are_bounded_too() -> None:
    deep: dict = {}
    node = deep
    for _ in range(MAX_DEPTH + 5):
        node["k"] = {}
        node = node["k"]
    errors, _ = timed_errors(deep)
    assert errors == [f": <mapping>: nested deeper than {MAX_DEPTH} levels; the limit is {MAX_DEPTH}"]
    wide = {"tracker_kwargs": {f"k{i}": i for i in range(MAX_NODES + 1)}}
    errors, elapsed = timed_errors(wide)
    assert errors and f"more than {MAX_NODES:,} values" in errors[0] and elapsed < SECOND


def test_overrides_are_bounded() -> None:
    errors, _ = timed_errors("seed: 1", ["a=" + "[" * 1000 + "]" * 1000])
    assert errors and "override value: nested deeper" in errors[0]
    errors, _ = timed_errors("seed: 1", ["+" + ".".join(["k"] * 2000) + "=1"])
    assert errors and "deeper than" in errors[0]


def test_long_device_mapping_is_checked_in_linear_time() -> None:
    """`list(range(0,16384))` took 6.1 s through a quadratic duplicate check, per role."""
    text = DEMO
    overrides = [f"{role}.device_mapping=list(range(0,16384))" for role in ("actor_train", "actor_infer")]
    _, elapsed = timed_errors(text, overrides)
    assert elapsed < SECOND


@pytest.mark.parametrize(
    ("override", "field", "expected"),
    [
        ("actor_train.device_mapping=[100000000000000000000]", "actor_train.device_mapping", "at most 65535"),
        ("actor_train.device_mapping=list(range(0,70000))", "actor_train.device_mapping", "more than 65536"),
        ("seed=" + "1" + "0" * 60, "seed", "less than or equal to 4294967295"),
        ("seed=-1", "seed", "greater than or equal to 0"),
        # issue 34: 2**63 steps validated, and the trainer's first status event (total_steps) stopped ingest
        ("max_steps=9223372036854775808", "max_steps", "less than or equal to 2147483647"),
        (f"rollout_batch_size={2**64}", "rollout_batch_size", "must lie within ±9223372036854775807 (64-bit)"),
        (f"+tracker_kwargs.x={-2**70}", "tracker_kwargs.x", "must lie within ±9223372036854775807 (64-bit)"),
    ],
)
def test_out_of_range_integers_are_refused(override: str, field: str, expected: str) -> None:
    text = DEMO
    result = validate_config(text, [override])
    assert [(i.path, expected in i.message) for i in result.errors] == [(field, True)], result.errors


def test_env_is_never_read_without_an_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The web server kept `${oc.env:…}` nowhere: it resolved and echoed its own environment."""
    monkeypatch.setenv("POLICYLAB_TEST_SECRET", "s3cr3t-value")
    text = DEMO + "\nexp_name: ${oc.env:POLICYLAB_TEST_SECRET}\noutput_dir: ${oc.env:HOME,/tmp}/runs\n"
    result = validate_config(text, ["+tracker_kwargs.project=${oc.env:POLICYLAB_TEST_SECRET}"])
    assert result.ok, result.errors
    assert "s3cr3t-value" not in result.config.model_dump_json()
    assert result.config.exp_name == "${oc.env:POLICYLAB_TEST_SECRET}"
    assert result.config.tracker_kwargs["project"] == "${oc.env:POLICYLAB_TEST_SECRET}"
    trainer_side = validate_config(text, env={"POLICYLAB_TEST_SECRET": "visible-here"})
    assert trainer_side.config.exp_name == "visible-here"
    assert trainer_side.config.output_dir == "/tmp/runs"  # the default when the variable is absent


def test_env_references_must_be_literal() -> None:
    result = validate_config("exp_name: ${oc.env:${x}}\nx: HOME\n", env={"HOME": "/h"})
    assert {i.path for i in result.errors} == {"exp_name"}
    missing = validate_config("exp_name: ${oc.env:NOT_SET_ANYWHERE}\n", env={})
    assert "NOT_SET_ANYWHERE is not set" in missing.errors[0].message


def test_a_substituted_value_is_never_interpolated_again() -> None:
    result = validate_config(DEMO + "\nexp_name: ${oc.env:X}\n", env={"X": "${oc.env:Y}"})
    assert result.ok and result.config.exp_name == "${oc.env:Y}"


def test_config_environment_honours_the_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DJANGO_SECRET_KEY", "do-not-read")
    monkeypatch.setenv("POLICYLAB_CONFIG_ENV_ALLOW", "HOME, DATA_*")
    monkeypatch.setenv("DATA_ROOT", "/data")
    env = config_environment()
    assert env.get("DATA_ROOT") == "/data" and "DJANGO_SECRET_KEY" not in env
    monkeypatch.delenv("POLICYLAB_CONFIG_ENV_ALLOW")
    assert config_environment()["DJANGO_SECRET_KEY"] == "do-not-read"  # the CLI on one's own machine


def test_config_text_size_is_bounded() -> None:
    errors, elapsed = timed_errors("a: '" + "x" * 1_100_000 + "'\n")
    assert errors and "the limit is 1,000,000" in errors[0] and elapsed < SECOND
