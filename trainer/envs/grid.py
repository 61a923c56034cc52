"""Grid puzzles in the family of ROLL's FrozenLake and SimpleSokoban, generated in code from a seed.

Both render as text, one character per cell, rows joined by newlines, with ROLL's symbols, and take
one move per turn: up, down, left or right (aliases u, d, l, r; see trainer.envs.actions for the
reply format). Cells are (row, column), row 0 on top.

FrozenLake (`frozen_lake`; env_config: size, p, is_slippery, action_format)
    Start top-left, goal bottom-right, every other cell frozen with probability p, else a hole;
    layouts are redrawn until a path exists (gym's generate_random_map). Reward 1 on reaching the
    goal (success), 0 otherwise; the episode ends on the goal or in a hole. Slippery ice moves the
    intended way or one of the two perpendicular ways, 1/3 each (drawn from the episode's seed).
    Symbols: P player, _ frozen, O hole, G goal, X player in a hole, √ player on the goal.

Sokoban (`sokoban`; env_config: dim_x rows, dim_y columns, num_boxes, search_depth, action_format, grid_lookup,
    grid_vocab)
    A walled room; push every box onto a target. Layouts come from reverse play: boxes start on
    their targets and the player makes `search_depth` random reverse moves, pulling a box behind it
    half of the time; replaying them forwards solves the puzzle, so every layout is solvable.
    Rewards (gym-sokoban's): −0.1 per move, +1 for a box pushed onto a target, −1 for one pushed
    off, +10 when all boxes are on targets (success; the episode ends).
    Symbols: # wall, _ empty, O target, X box, √ box on target, P player, S player on a target; ROLL's grid_lookup
    (cell code 0-6 -> symbol) replaces them and its grid_vocab (symbol -> meaning) is listed in the instruction.
"""

from __future__ import annotations

import random
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from trainer.config.registries import ENV_CONFIG_BOUNDS, check_env_config
from trainer.envs.actions import ACTION_FORMATS, parse_action
from trainer.envs.base import Env, StepResult

Cell = tuple[int, int]

MOVES: dict[str, Cell] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
ALIASES: dict[str, str] = {**{name: name for name in MOVES}, **{name[0]: name for name in MOVES}}
PERPENDICULAR: dict[str, tuple[str, str]] = {"up": ("left", "right"), "down": ("left", "right"),
                                             "left": ("up", "down"), "right": ("up", "down")}
MAX_LAYOUT_ATTEMPTS = 1000
LAKE, ROOM = ENV_CONFIG_BOUNDS["frozen_lake"], ENV_CONFIG_BOUNDS["sokoban"]  # defaults and ranges, declared once


def _shift(cell: Cell, move: str, sign: int = 1) -> Cell:
    dr, dc = MOVES[move]
    return cell[0] + sign * dr, cell[1] + sign * dc


def _reply_format(action_format: str) -> str:
    if action_format not in ACTION_FORMATS:
        raise ValueError(f"env_config.action_format: {action_format!r}; valid: {', '.join(ACTION_FORMATS)}")
    return "<answer>Right</answer>" if action_format == "answer_tag" else "Right (or R)"


class _GridEnv(Env):
    """Shared turn handling: parse the reply, refuse a step after the end, report format errors."""

    done: bool
    # reward of a reply with no valid action, before the manager's format_penalty: ROLL's FrozenLake gives 0
    INVALID_REPLY_REWARD = 0.0

    def __init__(self, action_format: str) -> None:
        self.example_reply = _reply_format(action_format)
        self.action_format = action_format
        self.done = True

    def step(self, reply: str) -> StepResult:
        if self.done:
            raise RuntimeError(f"{type(self).__name__}.step after the episode ended; call reset(seed) first")
        action = parse_action(reply, ALIASES, self.action_format)
        if action is None:
            return StepResult(self.render(), self.INVALID_REPLY_REWARD, False,
                              {"format_ok": False, "success": False, "action": None})
        reward, success = self._move(action)
        return StepResult(self.render(), reward, self.done,
                          {"format_ok": True, "success": success, "action": action})

    @abstractmethod
    def _move(self, action: str) -> tuple[float, bool]:
        """Apply one move; returns (reward, success) and sets `done`."""


def lake_layout(size: int, p: float, rng: random.Random) -> frozenset[Cell]:
    """The holes of a size x size lake with a path from (0, 0) to (size-1, size-1): each other cell
    is frozen with probability p, redrawn until the goal is reachable (gym's generate_random_map)."""
    goal = (size - 1, size - 1)
    for _ in range(MAX_LAYOUT_ATTEMPTS):
        holes = frozenset((r, c) for r in range(size) for c in range(size)
                          if (r, c) not in ((0, 0), goal) and rng.random() >= p)
        if _reachable((0, 0), goal, size, holes):
            return holes
    raise ValueError(f"env_config.p: {p} leaves no path to the goal in {MAX_LAYOUT_ATTEMPTS} layouts; "
                     "raise p")


def _reachable(start: Cell, goal: Cell, size: int, holes: frozenset[Cell]) -> bool:
    seen, todo = {start}, [start]
    while todo:
        cell = todo.pop()
        if cell == goal:
            return True
        for move in MOVES:
            nxt = _shift(cell, move)
            if 0 <= nxt[0] < size and 0 <= nxt[1] < size and nxt not in holes and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


class FrozenLake(_GridEnv):
    """Module docstring."""

    def __init__(self, size: int = LAKE["size"].default, p: float = LAKE["p"].default, is_slippery: bool = False,
                 action_format: str = "answer_tag") -> None:
        check_env_config("frozen_lake", size=size, p=p)  # p: the probability that a cell is frozen
        super().__init__(action_format)
        self.size, self.p, self.is_slippery = size, p, is_slippery
        self.instruction = ("FrozenLake: walk P to the goal G over the frozen cells _ and avoid the holes O. "
                            "Each turn reply with one move: Up, Down, Left or Right, "
                            f"e.g. {self.example_reply}.")

    def reset(self, seed: int) -> str:
        self.rng = random.Random(f"frozen_lake:{seed}")
        self.holes = lake_layout(self.size, self.p, self.rng)
        self.goal = (self.size - 1, self.size - 1)
        self.player: Cell = (0, 0)
        self.done = False
        return self.render()

    def _move(self, action: str) -> tuple[float, bool]:
        if self.is_slippery:
            action = self.rng.choice([action, *PERPENDICULAR[action]])
        row, col = _shift(self.player, action)
        self.player = (min(max(row, 0), self.size - 1), min(max(col, 0), self.size - 1))
        success = self.player == self.goal
        self.done = success or self.player in self.holes
        return (1.0 if success else 0.0), success

    def render(self) -> str:
        def cell(at: Cell) -> str:
            if at == self.player:
                return "X" if at in self.holes else "√" if at == self.goal else "P"
            return "O" if at in self.holes else "G" if at == self.goal else "_"

        return "\n".join("".join(cell((r, c)) for c in range(self.size)) for r in range(self.size))


def sokoban_layout(rows: int, cols: int, num_boxes: int, search_depth: int,
                   rng: random.Random) -> tuple[frozenset[Cell], frozenset[Cell], Cell]:
    """(targets, boxes, player) of a walled rows x cols room, by reverse play (module docstring); at
    least one box ends off its target."""
    interior = [(r, c) for r in range(1, rows - 1) for c in range(1, cols - 1)]
    for _ in range(MAX_LAYOUT_ATTEMPTS):
        cells = rng.sample(interior, num_boxes + 1)
        targets, boxes, player = frozenset(cells[:num_boxes]), set(cells[:num_boxes]), cells[-1]
        for _ in range(search_depth):
            move = rng.choice(list(MOVES))
            ahead, behind = _shift(player, move), _shift(player, move, -1)
            if ahead not in interior or ahead in boxes:
                continue
            if behind in boxes and rng.random() < 0.5:  # pull the box along: the reverse of a push
                boxes.remove(behind)
                boxes.add(player)
            player = ahead
        if boxes != targets:
            return targets, frozenset(boxes), player
    raise ValueError(f"env_config.search_depth: {search_depth} reverse moves left every box on its target "
                     f"in {MAX_LAYOUT_ATTEMPTS} layouts; raise search_depth")


# ROLL's Sokoban cell codes (gym-sokoban's room state) and their meaning; the default symbol of each
SOKOBAN_CELLS: dict[int, str] = {0: "wall", 1: "empty", 2: "target", 3: "box on target", 4: "box", 5: "player",
                                 6: "player on target"}
SOKOBAN_SYMBOLS: dict[int, str] = {0: "#", 1: "_", 2: "O", 3: "√", 4: "X", 5: "P", 6: "S"}


def sokoban_lookup(grid_lookup: Mapping[Any, str] | None) -> dict[int, str]:
    """The symbol of each cell code: ROLL's `grid_lookup` (code -> symbol) over the defaults."""
    lookup = dict(SOKOBAN_SYMBOLS)
    for key, symbol in (grid_lookup or {}).items():
        if str(key) not in {str(c) for c in SOKOBAN_CELLS}:
            raise ValueError(f"env_config.grid_lookup: cell code {key!r}; valid: "
                             + ", ".join(f"{c} ({m})" for c, m in SOKOBAN_CELLS.items()))
        lookup[int(key)] = str(symbol)
    return lookup


class Sokoban(_GridEnv):
    """Module docstring."""

    STEP_PENALTY, BOX_ON_TARGET, FINISHED = -0.1, 1.0, 10.0
    # ROLL's SokobanEnv plays a reply with no valid action as gym-sokoban's action 0, a no-op that still
    # costs the step penalty (roll/pipeline/agentic/env/sokoban/env.py, step)
    INVALID_REPLY_REWARD = STEP_PENALTY

    def __init__(self, dim_x: int = ROOM["dim_x"].default, dim_y: int = ROOM["dim_y"].default,
                 num_boxes: int = ROOM["num_boxes"].default, search_depth: int = ROOM["search_depth"].default,
                 action_format: str = "answer_tag", grid_lookup: Mapping[Any, str] | None = None,
                 grid_vocab: Mapping[str, str] | None = None) -> None:
        self.lookup = sokoban_lookup(grid_lookup)
        # rows and columns count the walls
        check_env_config("sokoban", dim_x=dim_x, dim_y=dim_y, num_boxes=num_boxes, search_depth=search_depth)
        super().__init__(action_format)
        self.rows, self.cols, self.num_boxes, self.search_depth = dim_x, dim_y, num_boxes, search_depth
        self.instruction = ("Sokoban: push every box X onto a target O; # is a wall, P is you. "
                            "Each turn reply with one move: Up, Down, Left or Right, "
                            f"e.g. {self.example_reply}.")
        if grid_lookup is not None or grid_vocab is not None:  # ROLL's symbols: its instruction lists their meaning
            vocab = dict(grid_vocab) if grid_vocab is not None else \
                {self.lookup[code]: meaning for code, meaning in SOKOBAN_CELLS.items()}
            self.instruction = ("Sokoban: push every box onto a target. Each turn reply with one move: Up, Down, "
                                f"Left or Right, e.g. {self.example_reply}.\nThe meaning of each symbol in the "
                                "state is:\n" + ", ".join(f"{k}: {v}" for k, v in vocab.items()))

    def reset(self, seed: int) -> str:
        rng = random.Random(f"sokoban:{seed}")
        self.targets, boxes, self.player = sokoban_layout(self.rows, self.cols, self.num_boxes,
                                                          self.search_depth, rng)
        self.boxes = set(boxes)
        self.done = False
        return self.render()

    def _free(self, cell: Cell) -> bool:
        return 0 < cell[0] < self.rows - 1 and 0 < cell[1] < self.cols - 1 and cell not in self.boxes

    def _move(self, action: str) -> tuple[float, bool]:
        reward = self.STEP_PENALTY
        ahead = _shift(self.player, action)
        if ahead in self.boxes:
            beyond = _shift(ahead, action)
            if not self._free(beyond):
                return reward, False
            self.boxes.remove(ahead)
            self.boxes.add(beyond)
            reward += self.BOX_ON_TARGET * ((beyond in self.targets) - (ahead in self.targets))
        elif not self._free(ahead):
            return reward, False
        self.player = ahead
        success = self.boxes == self.targets
        self.done = success
        return reward + (self.FINISHED if success else 0.0), success

    def render(self) -> str:
        def code(at: Cell) -> int:
            if not (0 < at[0] < self.rows - 1 and 0 < at[1] < self.cols - 1):
                return 0
            if at == self.player:
                return 6 if at in self.targets else 5
            if at in self.boxes:
                return 3 if at in self.targets else 4
            return 2 if at in self.targets else 1

        def cell(at: Cell) -> str:
            return self.lookup[code(at)]

        return "\n".join("".join(cell((r, c)) for c in range(self.cols)) for r in range(self.rows))
