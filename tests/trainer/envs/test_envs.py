"""Environments: determinism by seed, dynamics against hand-worked cases, action parsing, the safe
calculator, the registries that refuse unknown names, and the env manager's groups and seeds."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import pytest

from trainer.config.registries import ANSWER_TAG_PATTERN, ENV_CONFIG_KEYS, ENV_TYPES
from trainer.config.roll_tools import DATASET_COLUMNS
from trainer.config.schema import CustomEnvConfig, EnvManagerConfig
from trainer.envs.actions import ANSWER_TAG, parse_action
from trainer.envs.calculator import Calculator, CalculatorError, evaluate, format_number
from trainer.envs.grid import ALIASES, MOVES, FrozenLake, Sokoban
from trainer.envs.manager import EnvManager, group_tags
from trainer.envs.registry import ENVS, env_config_keys, env_manager_kind, make_env

# -- determinism --------------------------------------------------------------------------------


def default_config(env_type: str, tmp_path: Path) -> dict[str, str]:
    """{} (the environment's defaults), or for a dataset environment a local file of 30 rows in its columns."""
    columns = DATASET_COLUMNS.get(env_type)
    if columns is None:
        return {}
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(dict(zip(columns, (f"What is {i} + 1?", str(i + 1)), strict=True))) + "\n"
                            for i in range(30)), encoding="utf-8")
    return {"dataset_name": str(path)}


@pytest.mark.parametrize("env_type", ENV_TYPES)
def test_same_seed_same_episode_and_seeds_differ(env_type: str, tmp_path: Path) -> None:
    replies = [
        "<answer>Down</answer>",
        "<answer>Right</answer>",
        "nonsense",
        "<calculator>1+2</calculator>",
        "<answer>Up</answer>",
        "<answer>Left</answer>",
    ]

    config = default_config(env_type, tmp_path)

    def episode(seed: int) -> list[object]:
        env = make_env(env_type, config)
        out: list[object] = [env.reset(seed), env.render()]
        for reply in replies:
            result = env.step(reply)
            out.append(result)
            if result.done:
                break
        return out

    assert episode(11) == episode(11)
    assert len({make_env(env_type, config).reset(seed) for seed in range(20)}) > 1  # the seed chooses the layout


# -- FrozenLake ---------------------------------------------------------------------------------


def test_frozen_lake_layouts_are_solvable_and_start_top_left() -> None:
    env = FrozenLake(size=5, p=0.6)
    for seed in range(30):
        rows = env.reset(seed).split("\n")
        assert rows[0][0] == "P" and rows[-1][-1] == "G" and len(rows) == 5
        holes = {(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "O"}
        assert _grid_path((0, 0), (4, 4), 5, 5, holes) is not None


def test_frozen_lake_moves_holes_and_goal() -> None:
    env = FrozenLake(size=3, action_format="plain")
    env.reset(0)
    env.holes = frozenset({(0, 1)})  # a hand-made lake:  P O _ / _ _ _ / _ _ G
    assert env.render() == "PO_\n___\n__G"
    assert env.step("up") == (
        "PO_\n___\n__G",
        0.0,
        False,
        {"format_ok": True, "success": False, "action": "up"},
    )
    obs, reward, done, info = env.step("D")
    assert (obs, reward, done) == ("_O_\nP__\n__G", 0.0, False)
    for move in ("r", "d"):
        obs, reward, done, info = env.step(move)
    assert (obs, reward, done, info["success"]) == ("_O_\n___\n_PG", 0.0, False, False)
    obs, reward, done, info = env.step("Right")
    assert (obs, reward, done, info["success"]) == ("_O_\n___\n__√", 1.0, True, True)
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("up")
    env.reset(0)
    env.holes = frozenset({(0, 1)})
    obs, reward, done, info = env.step("right")  # into the hole: the episode ends without success
    assert (obs, reward, done, info["success"]) == ("_X_\n___\n__G", 0.0, True, False)


def test_slippery_lake_slips_sideways_and_replays_by_seed() -> None:
    """On all-ice 8 x 8 from (0, 0), "down" lands on (1, 0), or slips left (stays, clamped) or
    right (0, 1)."""

    def first_move(seed: int) -> str:
        env = FrozenLake(size=8, p=1.0, is_slippery=True, action_format="plain")
        env.reset(seed)
        return env.step("down").observation

    landed = {first_move(seed).index("P") for seed in range(12)}  # index in the text: 0, 1 or 9 (row 1)
    assert landed == {0, 1, 9}
    assert [first_move(seed) for seed in range(12)] == [first_move(seed) for seed in range(12)]
    steady = FrozenLake(size=8, p=1.0, action_format="plain")
    steady.reset(0)
    assert steady.step("down").observation.index("P") == 9


# -- Sokoban ------------------------------------------------------------------------------------


def test_sokoban_layouts_are_solvable_by_an_independent_search() -> None:
    env = Sokoban(dim_x=6, dim_y=6, num_boxes=1, search_depth=20)
    for seed in range(15):
        rows = env.reset(seed).split("\n")
        assert all(ch == "#" for ch in rows[0] + rows[-1]) and sum(row.count("X") for row in rows) == 1
        plan = _solve_sokoban(rows)
        assert plan is not None, f"seed {seed}: no solution for\n" + "\n".join(rows)
        result = None
        for move in plan:
            result = env.step(f"<answer>{move}</answer>")
        assert result is not None and result.done and result.info["success"]


def test_sokoban_push_rewards_and_blocked_moves() -> None:
    env = Sokoban(dim_x=5, dim_y=6, num_boxes=1, action_format="plain")
    env.reset(0)
    env.targets, env.boxes, env.player = frozenset({(2, 4)}), {(2, 2)}, (2, 1)
    assert env.render() == "######\n#____#\n#PX_O#\n#____#\n######"
    assert env.step("up").reward == pytest.approx(-0.1)  # a plain move: the step penalty only
    env.player = (2, 1)
    obs, reward, done, _ = env.step("right")  # push the box to (2, 3): off-target to off-target
    assert (obs, reward, done) == ("######\n#____#\n#_PXO#\n#____#\n######", pytest.approx(-0.1), False)
    obs, reward, done, info = env.step("right")  # onto the target: -0.1 + 1 + 10, solved
    assert (obs, reward, done, info["success"]) == (
        "######\n#____#\n#__P√#\n#____#\n######",
        pytest.approx(10.9),
        True,
        True,
    )
    env.reset(0)
    env.targets, env.boxes, env.player = frozenset({(1, 1)}), {(1, 4)}, (1, 3)
    obs, reward, done, _ = env.step("right")  # the box is against the wall: nothing moves
    assert (obs, reward, done) == ("######\n#O_PX#\n#____#\n#____#\n######", pytest.approx(-0.1), False)
    env.targets, env.boxes, env.player = frozenset({(1, 2), (3, 3)}), {(1, 2), (2, 3)}, (1, 1)
    obs, reward, _, _ = env.step("right")  # push a box off its target: -0.1 - 1
    assert reward == pytest.approx(-1.1) and obs.split("\n")[1] == "#_SX_#"  # S: the player on a target


# -- action parsing -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "answer_tag", "plain"),
    [
        ("<answer>Right</answer>", "right", "right"),
        ("<think>go</think> <answer> r </answer>", "right", "right"),
        ("<answer>UP</answer><answer>down</answer>", "up", "up"),  # the first answer counts
        ("R", None, "right"),
        (" left\n", None, "left"),
        ("d", None, "down"),
        ("go right", None, None),
        ("Right!", None, None),
        ("R R", None, None),
        ("<answer>Jump</answer>", None, None),
        ("<answer>Right", None, None),
        ("", None, None),
    ],
)
def test_parse_action(reply: str, answer_tag: str | None, plain: str | None) -> None:
    assert parse_action(reply, ALIASES, "answer_tag") == answer_tag
    assert parse_action(reply, ALIASES, "plain") == plain


def test_a_broken_reply_changes_nothing_and_says_so() -> None:
    env = FrozenLake(size=4)
    start = env.reset(5)
    observation, reward, done, info = env.step("Right")  # answer_tag format: bare words break it
    assert (observation, reward, done, info) == (
        start,
        0.0,
        False,
        {"format_ok": False, "success": False, "action": None},
    )
    with pytest.raises(ValueError, match=r"env_config.action_format: 'json'; valid: answer_tag, plain"):
        FrozenLake(action_format="json")


def test_a_broken_sokoban_reply_costs_the_step_penalty_as_rolls_no_op() -> None:
    """ROLL's SokobanEnv plays a reply with no valid action as gym-sokoban's no-op action 0: the board stays,
    the step penalty (-0.1) is paid; FrozenLake's broken reply pays nothing before the format penalty."""
    env = Sokoban()
    start = env.reset(3)
    observation, reward, done, info = env.step("Left")  # answer_tag format: a bare word is no action
    assert (observation, reward, done, info["format_ok"]) == (start, Sokoban.STEP_PENALTY, False, False)
    assert reward == -0.1


# -- calculator ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("1+2*3", "7"),
        ("(1+2)*3", "9"),
        ("7/2", "3.5"),
        ("-3 + +4", "1"),
        ("0.1+0.2", "0.3"),
        ("10/3", "3.333333"),
        ("2*(3-(4-5))", "8"),
        ("1_000*3", "3000"),
    ],
)
def test_calculator_evaluates_arithmetic_exactly(expression: str, value: str) -> None:
    assert format_number(evaluate(expression)) == value


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("2**10", "Pow is not allowed"),
        ("7//2", "FloorDiv is not allowed"),
        ("7%2", "Mod is not allowed"),
        ("__import__('os').system('true')", "Call is not allowed"),
        ("x+1", "Name is not allowed"),
        ("(1).real", "Attribute is not allowed"),
        ("1 if 1 else 2", "IfExp is not allowed"),
        ("1<2", "Compare is not allowed"),
        ("'a'*3", "Constant is not allowed"),
        ("True+1", "Constant is not allowed"),
        ("1j*1j", "Constant is not allowed"),
        ("[1][0]", "Subscript is not allowed"),
        ("1/0", "division by zero"),
        ("1/(2-2)", "division by zero"),
        ("9" * 19, "exceeds"),
        ("999999999*999999999*999999999", "exceeds"),
        ("1e400", "exceeds"),
        ("1+" * 150 + "1", "longer than 200"),
        ("import os", "not an arithmetic expression"),
        ("1+", "not an arithmetic expression"),
    ],
)
def test_calculator_refuses_everything_else(expression: str, why: str) -> None:
    with pytest.raises(CalculatorError, match=why):
        evaluate(expression)


def test_calculator_episode_tool_call_then_answer() -> None:
    env = Calculator(num_operands=3, max_operand=20, operators="+*")
    question = env.reset(4).removeprefix("Question: ")
    value = format_number(evaluate(question))
    result = env.step(f"<calculator>{question}</calculator>")
    assert result == (
        f"<result>{value}</result>",
        0.0,
        False,
        {"format_ok": True, "success": False, "action": "calculator", "tool_error": False},
    )
    result = env.step("<calculator>2**99</calculator>")
    assert result.observation.startswith("<error>Pow is not allowed") and result.info["tool_error"]
    result = env.step("the answer is 5")
    assert result.info["format_ok"] is False and not result.done
    result = env.step("<answer>forty</answer>")
    assert result.info["format_ok"] is False and "not a number" in result.observation
    result = env.step(f"<answer>{value}</answer>")
    assert (result.reward, result.done, result.info["success"]) == (1.0, True, True)
    env.reset(4)
    wrong = env.step(f"<answer>{int(value) + 1}</answer>")
    assert (wrong.reward, wrong.done, wrong.info["success"]) == (0.0, True, False)
    assert "Question: " in env.render() and "wrong" in env.render()


# -- registries ---------------------------------------------------------------------------------


def test_registry_names_equal_the_config_registry_and_unknown_names_are_refused() -> None:
    assert tuple(ENVS) == ENV_TYPES
    # validation's copy of each environment's keys and of the default action parse
    assert {name: tuple(env_config_keys(name)) for name in ENVS} == ENV_CONFIG_KEYS
    assert ANSWER_TAG.pattern == ANSWER_TAG_PATTERN
    with pytest.raises(
        ValueError,
        match=r"custom_envs.Maze.env_type: 'maze' is not a registered environment; "
        r"valid: frozen_lake, sokoban, calculator",
    ):
        make_env("maze", where="custom_envs.Maze.env_type")
    with pytest.raises(
        ValueError,
        match=r"custom_envs.Lake.env_config: unknown key\(s\) \['dim'\] for frozen_lake; "
        r"valid: size, p, is_slippery, action_format",
    ):
        make_env("frozen_lake", {"dim": 4}, where="custom_envs.Lake.env_type")
    with pytest.raises(ValueError, match=r"custom_envs.Lake.env_config.size: 40; valid: 2..16"):
        make_env("frozen_lake", {"size": 40}, where="custom_envs.Lake.env_type")
    with pytest.raises(ValueError, match=r"custom_envs.Lake.env_config.size: '4' is not an integer; valid: 2..16"):
        make_env("frozen_lake", {"size": "4"}, where="custom_envs.Lake.env_type")


def test_env_manager_classes_map_through_the_registry() -> None:
    assert env_manager_kind(None) == "trajectory"
    assert (
        env_manager_kind("roll.pipeline.agentic.env_manager.traj_env_manager.TrajEnvManager") == "trajectory"
    )
    assert env_manager_kind("roll.pipeline.agentic.env_manager.step_env_manager.StepEnvManager") == "step"
    with pytest.raises(ValueError, match=r"vision-language env manager .* is not supported yet; valid: "):
        env_manager_kind("roll.pipeline.agentic.env_manager.vl_traj_env_manager.VLTrajEnvManager")
    with pytest.raises(
        ValueError, match=r"train_env_manager.worker_cls: unknown env manager class 'os.system'"
    ):
        env_manager_kind("os.system", where="train_env_manager.worker_cls")


# -- env manager --------------------------------------------------------------------------------


def _manager(batch: int = 8, **fields: object) -> EnvManager:
    custom = {"Lake": CustomEnvConfig(env_type="frozen_lake"), "Box": CustomEnvConfig(env_type="sokoban")}
    config = EnvManagerConfig(**{"env_groups": 2, "group_size": 2, "tags": ["Lake", "Box"], **fields})
    return EnvManager("train_env_manager", config, custom, batch_size=batch, seed=3)


def test_groups_share_a_seed_and_rounds_fill_the_batch() -> None:
    manager = _manager(batch=8)  # 2 groups x 2 envs = 4 environments, so 2 rounds
    episodes = manager.episodes(step=1)
    assert [(e.env_id, e.group_id, e.sample_index, e.round, e.tag, e.state_id) for e in episodes] == [
        (0, 0, 0, 0, "Lake", 0),
        (1, 0, 1, 0, "Lake", 0),
        (2, 1, 0, 0, "Box", 1),
        (3, 1, 1, 0, "Box", 1),
        (0, 0, 0, 1, "Lake", 2),
        (1, 0, 1, 1, "Lake", 2),
        (2, 1, 0, 1, "Box", 3),
        (3, 1, 1, 1, "Box", 3),
    ]
    seeds = [e.seed for e in episodes]
    assert seeds[0] == seeds[1] and seeds[2] == seeds[3] and seeds[4] == seeds[5]  # a group: one start state
    assert len({seeds[0], seeds[2], seeds[4], seeds[6]}) == 4
    assert manager.episodes(step=1) == episodes and manager.episodes(step=2) != episodes
    assert manager.episodes(None) == manager.episodes(None) != episodes  # evaluation: fixed start states


def test_layout_rules_name_the_field() -> None:
    assert group_tags(["a", "b"], 5, None) == ["a", "a", "a", "b", "b"]
    assert group_tags(["a", "b"], 3, [1, 2]) == ["a", "b", "b"]
    with pytest.raises(
        ValueError,
        match=r"train_env_manager.max_traj_per_env: 1, but 8 trajectories from 4 "
        r"environments need 2 per environment",
    ):
        _manager(batch=8, max_traj_per_env=1)
    with pytest.raises(ValueError, match=r"train_env_manager.group_size: 4 does not divide the batch of 6"):
        _manager(batch=6, group_size=4, env_groups=1, tags=["Lake"])
    with pytest.raises(
        ValueError, match=r"train_env_manager.tags: \['Maze'\] are not defined in custom_envs"
    ):
        _manager(tags=["Maze"])
    with pytest.raises(ValueError, match=r"train_env_manager.n_groups: \[1\] must give each of the 2 tags"):
        _manager(n_groups=[1])


def test_position_and_layout_survive_a_checkpoint() -> None:
    manager = _manager()
    manager.draw(1)
    manager.draw(2)
    restored = _manager()
    restored.load_state_dict(manager.state_dict())
    assert restored.position == 16
    with pytest.raises(ValueError, match="resume with the same env groups, tags and batch size"):
        _manager(batch=4).load_state_dict(manager.state_dict())


# -- independent solvers ------------------------------------------------------------------------


def _grid_path(
    start: tuple[int, int], goal: tuple[int, int], rows: int, cols: int, blocked: set[tuple[int, int]]
) -> list[tuple[int, int]] | None:
    todo, seen = deque([(start, [start])]), {start}
    while todo:
        cell, path = todo.popleft()
        if cell == goal:
            return path
        for dr, dc in MOVES.values():
            nxt = (cell[0] + dr, cell[1] + dc)
            if 0 <= nxt[0] < rows and 0 <= nxt[1] < cols and nxt not in blocked and nxt not in seen:
                seen.add(nxt)
                todo.append((nxt, [*path, nxt]))
    return None


def _solve_sokoban(rows: list[str]) -> list[str] | None:
    """Breadth-first search over (player, boxes) states of a rendered room."""
    cells = {(r, c): ch for r, row in enumerate(rows) for c, ch in enumerate(row)}
    walls = {p for p, ch in cells.items() if ch == "#"}
    targets = frozenset(p for p, ch in cells.items() if ch in "O√S")
    boxes = frozenset(p for p, ch in cells.items() if ch in "X√")
    player = next(p for p, ch in cells.items() if ch in "PS")
    todo, seen = deque([(player, boxes, [])]), {(player, boxes)}
    while todo:
        player, boxes, plan = todo.popleft()
        if boxes == targets:
            return plan
        for name, (dr, dc) in MOVES.items():
            ahead = (player[0] + dr, player[1] + dc)
            if ahead in walls:
                continue
            moved = boxes
            if ahead in boxes:
                beyond = (ahead[0] + dr, ahead[1] + dc)
                if beyond in walls or beyond in boxes:
                    continue
                moved = (boxes - {ahead}) | {beyond}
            if (ahead, moved) not in seen:
                seen.add((ahead, moved))
                todo.append((ahead, moved, [*plan, name]))
    return None
