"""YAML loading: interpolation, resolvers, overrides, defaults files, device_mapping expressions."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from config_testing import base, changed

from trainer.config import ConfigError, load_raw, validate_config
from trainer.config.device_mapping import DeviceMappingError, parse_device_mapping


def test_interpolation_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLICYLAB_TEST_DIR", "/data/runs")
    text = """
response_length: 512
output_dir: ${oc.env:POLICYLAB_TEST_DIR}/exp
actor_infer:
  generating_args:
    max_new_tokens: ${response_length}
"""
    trainer_side = load_raw(text, env={"POLICYLAB_TEST_DIR": "/data/runs"})
    assert trainer_side["output_dir"] == "/data/runs/exp"
    assert trainer_side["actor_infer"]["generating_args"]["max_new_tokens"] == 512
    web_side = load_raw(text)  # no env: the reference is kept for the trainer, never read here
    assert web_side["output_dir"] == "${oc.env:POLICYLAB_TEST_DIR}/exp"
    assert web_side["actor_infer"]["generating_args"]["max_new_tokens"] == 512
    assert load_raw(web_side, env={"POLICYLAB_TEST_DIR": "/x"})["output_dir"] == "/x/exp"


def test_rlinf_resolvers() -> None:
    raw = load_raw(
        """
runner: {seq_length: 3072}
data: {max_prompt_length: 1024}
a: ${subtract:${runner.seq_length}, ${data.max_prompt_length}}
b: ${add:1,2,3}
c: ${multiply:${data.max_prompt_length},2}
d: ${int_div:${runner.seq_length},1000}
e: ${not:false}
f: ${divide:3,2}
"""
    )
    assert (raw["a"], raw["b"], raw["c"], raw["d"], raw["e"], raw["f"]) == (2048, 6, 2048, 3, True, 1.5)


def test_bad_interpolation_is_an_issue_not_a_traceback() -> None:
    result = validate_config("response_length: 4\nactor_infer: {generating_args: {max_new_tokens: '${nope}'}}\n")
    assert not result.ok
    assert "interpolation" in result.errors[0].message
    assert result.errors[0].path == "actor_infer.generating_args.max_new_tokens"


def test_overrides_set_add_delete_and_parse_values() -> None:
    raw = load_raw(
        changed({}),
        [
            "actor_train.training_args.learning_rate=1e-5",
            "+actor_train.model_args.lora_rank=8",
            "actor_train.device_mapping=[0,1]",
            "~reference",
            "exp_name=run-1",
            "++seed=3",
            "actor_infer.device_mapping=list(range(0,2))",
        ],
    )
    assert raw["actor_train"]["training_args"]["learning_rate"] == 1e-5
    assert raw["actor_train"]["model_args"]["lora_rank"] == 8
    assert raw["actor_train"]["device_mapping"] == [0, 1]
    assert raw["actor_infer"]["device_mapping"] == [0, 1]
    assert "reference" not in raw
    assert (raw["exp_name"], raw["seed"]) == ("run-1", 3)


def test_override_can_use_interpolation() -> None:
    raw = load_raw(changed({}), ["actor_infer.generating_args.max_new_tokens=${prompt_length}"])
    assert raw["actor_infer"]["generating_args"]["max_new_tokens"] == 64


@pytest.mark.parametrize(
    ("override", "path"),
    [("no_equals_sign", ""), ("~missing_key", "missing_key"), ("bad key=1", ""), ("exp_name.x=1", "exp_name")],
)
def test_bad_overrides_are_issues(override: str, path: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_raw(changed({}), [override])
    assert info.value.issues[0].path == path
    assert override.split("=")[0].lstrip("~") in info.value.issues[0].message
    assert not validate_config(changed({}), [override]).ok


def test_defaults_files_are_merged(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "common.yaml").write_text("seed: 5\nmax_steps: 7\nmy_zero:\n  zero_optimization: {stage: 3}\n")
    (tmp_path / "exp").mkdir()
    data = changed({"max_steps": 9, "save_steps": 3, "eval_steps": 3})
    data["defaults"] = ["../config/common@_here_", "../config/deepspeed_zero2@_here_"]
    data["hydra"] = {"run": {"dir": "."}}
    data["actor_train"]["strategy_args"] = {"strategy_name": "deepspeed_train", "strategy_config": "${my_zero}"}
    data["critic"] = {"strategy_args": {"strategy_name": "deepspeed_train", "strategy_config": "${deepspeed_zero2}"}}
    data["adv_estimator"] = "gae"
    path = tmp_path / "exp" / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    result = validate_config(path)
    assert result.rule_errors == [], result.issues
    config = result.config
    assert config.seed == 5  # from the defaults file
    assert config.max_steps == 9  # the file itself wins over its defaults
    assert config.actor_train.strategy_args.strategy_config.zero_optimization.stage == 3
    assert config.critic.strategy_args.strategy_config.zero_optimization.stage == 2  # built-in preset


def test_missing_defaults_entry_is_a_warning(tmp_path: Path) -> None:
    data = changed({})
    data["defaults"] = ["../config/my_local_envs@_here_"]  # neither next to the file nor built in
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    result = validate_config(path)
    assert result.ok
    assert [w.path for w in result.warnings] == ["defaults.0"]


def test_helper_keys_from_self_are_still_unknown() -> None:
    result = validate_config(changed({"my_var": 3}))
    assert [i.path for i in result.errors] == ["my_var"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("list(range(0,16))", list(range(16))),
        ("range(0,8)", list(range(8))),
        ("range(4)", [0, 1, 2, 3]),
        ("range(0,8,2)", [0, 2, 4, 6]),
        ("[0,1,2]", [0, 1, 2]),
        ("(3, 4)", [3, 4]),
        ("list(range(0,4)) + list(range(8,12))", [0, 1, 2, 3, 8, 9, 10, 11]),
        ("[0] + range(2,3)", [0, 2]),
        ("5", [5]),
    ],
)
def test_device_mapping_expressions(text: str, expected: list[int]) -> None:
    assert parse_device_mapping(text) == expected
    assert load_raw(changed({"actor_train.device_mapping": text}))["actor_train"]["device_mapping"] == expected


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('touch {marker}')",
        "eval('1')",
        "open('{marker}', 'w')",
        "[x for x in range(3)]",
        "range(10**12)",
        "range(0, 10000000000)",
        "list(range(0,4)).__class__",
        "range(0,8,0)",
        "[0.5]",
        "['a']",
        "lambda: 1",
        "import os",
        "",
    ],
)
def test_malicious_or_invalid_device_mapping_never_runs(text: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    expression = text.format(marker=marker)
    with pytest.raises(DeviceMappingError):
        parse_device_mapping(expression)
    for source in (changed({"actor_train.device_mapping": expression}), f"actor_train:\n  device_mapping: {expression!r}\n"):
        result = validate_config(source)
        assert not result.ok
        assert any(i.path == "actor_train.device_mapping" for i in result.errors), result.errors
    result = validate_config(base(), [f"actor_train.device_mapping={expression}"])
    assert not result.ok
    assert not marker.exists()


def test_yaml_syntax_error_and_non_mapping() -> None:
    for text in ("a: [1, 2\nb: 3", "- 1\n- 2\n", "just text", "a: {b: ${c}, d: 1}"):
        result = validate_config(text)
        assert not result.ok
        assert result.errors and result.errors[0].path == ""


def test_missing_file() -> None:
    result = validate_config(Path("/nonexistent/config.yaml"))
    assert not result.ok
    assert "not found" in result.errors[0].message


def test_a_string_is_never_opened_as_a_file(tmp_path: Path) -> None:
    """Web and API input is text: naming a readable file must not read it nor tell that it exists."""
    secret = tmp_path / "config.yaml"
    secret.write_text("exp_name: other-teams-run\nseed: 7\n")
    present, absent = validate_config(str(secret)), validate_config(str(tmp_path / "missing.yaml"))
    assert not present.ok and "other-teams-run" not in str(present.issues)
    assert [i.message for i in present.errors] == [i.message.replace("missing.yaml", "config.yaml") for i in absent.errors]
    assert "YAML text" in present.errors[0].message


def test_validate_config_routes_through_the_importers() -> None:
    """validate_config asks the importers package for the format; foreign files never reach the
    native schema untranslated, and an unknown --from value is an issue, not a traceback."""
    cases = {
        "verl": {"actor_rollout_ref": {"model": {"path": "x"}}, "data": {}},
        "rlinf": {"runner": {}, "cluster": {}},
    }
    for fmt, raw in cases.items():
        result = validate_config(raw)
        assert result.source_format == fmt
        assert not result.ok
        assert not any(i.path in ("actor_rollout_ref", "runner", "cluster") and "unknown key" in i.message
                       for i in result.errors)
    result = validate_config(base(), source_format="nonsense")
    assert not result.ok
    assert "nonsense" in result.errors[0].message
