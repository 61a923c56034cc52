"""env_config values out of an environment's declared range (trainer.config.registries.ENV_CONFIG_BOUNDS) fail
validation, naming the full key path, the value, the valid range and an override; a value on the bound validates
and the environment builds with it (the environments read their defaults and bounds from the same declaration)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from config_testing import DELETE, changed

from trainer.config import validate_config
from trainer.config.registries import ENV_CONFIG_BOUNDS, ENV_CONFIG_KEYS, env_config_defaults
from trainer.config.roll_env_config import ROLL_KEYS

AGENTIC: dict[str, Any] = {
    "train_env_manager": {"env_groups": 2, "group_size": 4, "tags": ["Env"]},
    "actor_train.data_args": DELETE,
    "rewards": DELETE,
}
P = "custom_envs.Env.env_config"

# (env_type, env_config, the message's valid range, the override) for a value just outside each bound
OUTSIDE: list[tuple[str, dict[str, Any], str, str]] = [
    ("frozen_lake", {"size": 1}, "1; valid: 2..16", f"{P}.size=2"),
    ("frozen_lake", {"size": 17}, "17; valid: 2..16", f"{P}.size=16"),
    ("frozen_lake", {"p": 0}, "0; valid: (0, 1]", f"~{P}.p"),
    ("frozen_lake", {"p": 1.001}, "1.001; valid: (0, 1]", f"{P}.p=1.0"),
    ("frozen_lake", {"max_steps": 0}, "0; valid: >= 1", f"{P}.max_steps=1"),
    ("sokoban", {"dim_x": 2}, "2; valid: 3..16", f"{P}.dim_x=3"),
    ("sokoban", {"dim_y": 17}, "17; valid: 3..16", f"{P}.dim_y=16"),
    (
        "sokoban",
        {"dim_room": [2, 6]},
        "[2, 6] ([rows, cols] = [dim_x, dim_y]): dim_x 2; valid: 3..16",
        f"{P}.dim_room=[3,6]",
    ),
    ("sokoban", {"dim_room": [6, 17]}, "dim_y 17; valid: 3..16", f"{P}.dim_room=[6,16]"),
    ("sokoban", {"num_boxes": 0}, "0; valid: 1..(dim_x - 2) * (dim_y - 2) - 2, 0 with no interior side of 3 (14)", f"{P}.num_boxes=1"),
    ("sokoban", {"num_boxes": 15}, "15; valid: 1..(dim_x - 2) * (dim_y - 2) - 2, 0 with no interior side of 3 (14)", f"{P}.num_boxes=14"),
    (
        "sokoban",
        {"dim_room": [4, 5], "num_boxes": 5},
        "5; valid: 1..(dim_x - 2) * (dim_y - 2) - 2, 0 with no interior side of 3 (4)",
        f"{P}.num_boxes=4",
    ),
    ("sokoban", {"search_depth": 0}, "0; valid: >= 1", f"{P}.search_depth=1"),
    ("sokoban", {"max_steps": 0}, "0; valid: >= 1", f"{P}.max_steps=1"),
    ("calculator", {"num_operands": 1}, "1; valid: 2..8", f"{P}.num_operands=2"),
    ("calculator", {"num_operands": 9}, "9; valid: 2..8", f"{P}.num_operands=8"),
    ("calculator", {"max_operand": 0}, "0; valid: 1..1000000", f"{P}.max_operand=1"),
    ("calculator", {"max_operand": 10**6 + 1}, "1000001; valid: 1..1000000", f"{P}.max_operand=1000000"),
    ("tool_use", {"catalog_size": 0}, "0; valid: 1..16", f"{P}.catalog_size=1"),
    ("tool_use", {"catalog_size": 17}, "17; valid: 1..16", f"{P}.catalog_size=16"),
    ("tool_use", {"num_items": 0}, "0; valid: 1..catalog_size (8)", f"{P}.num_items=1"),
    ("tool_use", {"catalog_size": 3, "num_items": 4}, "4; valid: 1..catalog_size (3)", f"{P}.num_items=3"),
    ("tool_use", {"max_quantity": 0}, "0; valid: 1..1000000", f"{P}.max_quantity=1"),
    ("tool_use", {"max_price": 10**6 + 1}, "1000001; valid: 1..1000000", f"{P}.max_price=1000000"),
    ("tool_use", {"max_tool_uses": 0}, "0; valid: >= 1, or unset", f"{P}.max_tool_uses=1"),
    ("tool_use", {"tool_reward": "high"}, "'high' is not a number; valid: any number", f"~{P}.tool_reward"),
    ("game:GuessTheNumber-v0", {"max_number": 1}, "1; valid: >= 2", f"{P}.max_number=2"),
    ("game:GuessTheNumber-v0", {"min_number": 0}, "0; valid: 1..max_number - 1 (19)", f"{P}.min_number=1"),
    ("game:GuessTheNumber-v0", {"min_number": 20}, "20; valid: 1..max_number - 1 (19)", f"{P}.min_number=19"),
    ("game:GuessTheNumber-v0", {"max_turns": 0}, "0; valid: >= 1", f"{P}.max_turns=1"),
    ("rg:letter_counting", {"size": 0}, "0; valid: >= 1", f"{P}.size=1"),
    ("rg:letter_counting", {"seed": 1.5}, "1.5 is not an integer; valid: any integer", f"~{P}.seed"),
    ("frozen_lake", {"size": True}, "True is not an integer; valid: 2..16", f"~{P}.size"),
]

# a value on each bound (p's lower bound is open: a value just inside it)
ON_BOUND: list[tuple[str, dict[str, Any]]] = [
    ("frozen_lake", {"size": 2, "p": 1}),
    ("frozen_lake", {"size": 16, "p": 1e-9}),
    ("sokoban", {"dim_x": 3, "dim_y": 16, "num_boxes": 12, "search_depth": 1}),
    ("sokoban", {"dim_room": [16, 3], "num_boxes": 1}),
    ("sokoban", {"dim_room": [6, 6], "num_boxes": 14}),
    ("calculator", {"num_operands": 2, "max_operand": 1}),
    ("calculator", {"num_operands": 8, "max_operand": 10**6}),
    ("game:GuessTheNumber-v0", {"min_number": 1, "max_number": 2, "max_turns": 1}),
    ("game:GuessTheNumber-v0", {"min_number": 19}),
    ("rg:letter_counting", {"size": 1, "seed": -3}),
    ("tool_use", {"catalog_size": 1, "num_items": 1, "max_quantity": 1, "max_price": 1, "max_tool_uses": 1}),
    (
        "tool_use",
        {
            "catalog_size": 16,
            "num_items": 16,
            "max_quantity": 10**6,
            "max_price": 10**6,
            "max_tool_uses": None,
            "tool_reward": -1,
        },
    ),
]


def _config(env_type: str, env_config: dict[str, Any], max_steps: int = 1) -> dict[str, Any]:
    env = {"env_type": env_type, "max_tokens_per_step": 4, "max_steps": max_steps, "env_config": env_config}
    return changed({**AGENTIC, "custom_envs": {"Env": env}})


@pytest.mark.parametrize(
    ("env_type", "env_config", "why", "override"),
    OUTSIDE,
    ids=[f"{e}-{'-'.join(f'{k}={v}' for k, v in c.items())}" for e, c, _, _ in OUTSIDE],
)
def test_a_value_outside_a_bound_fails_validation_naming_path_value_range_and_override(
    env_type: str, env_config: dict[str, Any], why: str, override: str
) -> None:
    result = validate_config(_config(env_type, env_config))
    errors = [(i.path, i.message) for i in result.errors]
    assert len(errors) == 1, errors
    path, message = errors[0]
    key = override.lstrip("~").split("=")[0].rsplit(".", 1)[1]
    assert path == f"{P}.{key}"
    assert why in message and f"the {env_type} environment refuses it" in message, message
    assert message.endswith(f"override {override}"), message


@pytest.mark.parametrize(("env_type", "env_config"), ON_BOUND)
def test_a_value_on_a_bound_validates_and_the_environment_builds(
    env_type: str, env_config: dict[str, Any]
) -> None:
    from trainer.envs.manager import EnvManager

    result = validate_config(_config(env_type, env_config))
    assert result.errors == [], result.errors
    config = result.config
    manager = EnvManager(
        "train_env_manager", config.train_env_manager, config.custom_envs, batch_size=8, seed=0
    )
    env = manager.make_env("Env")
    if env_type == "sokoban":  # the fullest room that validates has a layout: the run can start
        rows = env.reset(0).splitlines()
        room = env_config.get("dim_room") or [env_config["dim_x"], env_config["dim_y"]]
        assert [len(rows), len(rows[0])] == room


def test_the_max_steps_bound_is_roll_s_and_an_env_limit_on_it_validates() -> None:
    """ROLL's env max_steps 1 is on its bound; it validates when the episode's limit is 1 too."""
    assert validate_config(_config("sokoban", {"max_steps": 1}, max_steps=1)).errors == []


def test_the_declaration_covers_the_environments_keys_and_is_what_they_read() -> None:
    from trainer.envs.registry import ENVS
    from trainer.envs.tools import ITEMS

    for env_type, bounds in ENV_CONFIG_BOUNDS.items():
        assert set(bounds) <= set(ENV_CONFIG_KEYS[env_type]) | set(ROLL_KEYS.get(env_type, ())), env_type
        params = inspect.signature(ENVS[env_type]).parameters
        assert {k: params[k].default for k in env_config_defaults(env_type)} == env_config_defaults(env_type)
    assert ENV_CONFIG_BOUNDS["tool_use"]["catalog_size"].hi == len(ITEMS)
    with pytest.raises(
        ValueError,
        match=r"^env_config.num_boxes: 15; valid: 1..\(dim_x - 2\) \* \(dim_y - 2\) - 2, 0 with no "
        r"interior side of 3 \(14\)$",
    ):
        ENVS["sokoban"](num_boxes=15)


def test_a_room_where_no_box_can_be_pushed_is_refused_at_validation() -> None:
    """A 2 x 2 interior has no three cells in a line: no layout exists (reset would fail at run start)."""
    result = validate_config(_config("sokoban", {"dim_room": [4, 4], "num_boxes": 1}))
    assert [i.path for i in result.errors] == ["custom_envs.Env.env_config.num_boxes"], result.errors
    assert "1; valid: 1..(dim_x - 2) * (dim_y - 2) - 2, 0 with no interior side of 3 (0)" in result.errors[0].message
