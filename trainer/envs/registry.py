"""Environments by name. A config names an environment (`custom_envs.<tag>.env_type`) and an env
manager (`*_env_manager.worker_cls`, ROLL's class path); both are looked up here, never imported.
trainer.config.registries holds the same names torch-free for validation (a test keeps them equal).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from trainer.config.registries import ROLL_ENV_MANAGERS, ROLL_UNSUPPORTED_ENV_MANAGERS
from trainer.envs.base import Env
from trainer.envs.calculator import Calculator
from trainer.envs.gem import GuessTheNumber, LetterCounting
from trainer.envs.gem_data import RollMath, RollQa
from trainer.envs.grid import FrozenLake, Sokoban
from trainer.envs.native import SokobanNative
from trainer.envs.tools import ToolUse

ENVS: dict[str, type[Env]] = {"frozen_lake": FrozenLake, "sokoban": Sokoban, "calculator": Calculator,
                              "tool_use": ToolUse, "game:GuessTheNumber-v0": GuessTheNumber,
                              "rg:letter_counting": LetterCounting, "roll_math": RollMath, "roll_qa": RollQa,
                              "sokoban_native_env": SokobanNative}
# Pipeline-level keys an environment may take as keyword-only parameters (never from env_config).
PIPELINE_KEYS: tuple[str, ...] = ("parse_tool_call_parameter_to_dict",)


def env_config_keys(env_type: str) -> list[str]:
    return [name for name, p in inspect.signature(ENVS[env_type]).parameters.items() if p.kind != p.KEYWORD_ONLY]


def takes_pipeline_key(env_type: str, key: str) -> bool:
    """Whether environments of `env_type` act on the pipeline-level `key` (one of PIPELINE_KEYS)."""
    return key in inspect.signature(ENVS[env_type]).parameters


def make_env(env_type: str, env_config: Mapping[str, Any] | None = None, *, where: str = "env_type",
             pipeline: Mapping[str, Any] | None = None) -> Env:
    """A new environment of the registered type, built from its env_config and the PIPELINE_KEYS values
    in `pipeline` that it takes; ValueError naming the field (`where`, e.g. custom_envs.Lake.env_type)
    and the valid names otherwise."""
    if env_type not in ENVS:
        raise ValueError(f"{where}: {env_type!r} is not a registered environment; valid: {', '.join(ENVS)} "
                         "(environments are looked up by name, never imported)")
    options = dict(env_config or {})
    prefix = where.rsplit(".", 1)[0] + "." if "." in where else ""
    unknown = sorted(set(options) - set(env_config_keys(env_type)))
    if unknown:
        top = [key for key in unknown if key in PIPELINE_KEYS]
        raise ValueError(f"{prefix}env_config: unknown key(s) {unknown} for {env_type}; "
                         f"valid: {', '.join(env_config_keys(env_type))}"
                         + (f" ({', '.join(top)} is set at the top level of the config)" if top else ""))
    given = {key: value for key, value in (pipeline or {}).items() if takes_pipeline_key(env_type, key)}
    try:
        return ENVS[env_type](**options, **given)
    except TypeError as exc:  # a value of the wrong type meets a comparison or arithmetic
        raise ValueError(f"{prefix}env_config: a value has the wrong type for {env_type} ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"{prefix}{exc}") from None


def env_manager_kind(worker_cls: str | None, *, where: str = "worker_cls") -> str:
    """What runs a ROLL env-manager class here: unset or ROLL's trajectory manager -> "trajectory"
    (trainer.pipeline.agentic); anything else is a ValueError listing the known classes."""
    if worker_cls is None:
        return "trajectory"
    if worker_cls in ROLL_ENV_MANAGERS:
        return ROLL_ENV_MANAGERS[worker_cls]
    if worker_cls in ROLL_UNSUPPORTED_ENV_MANAGERS:
        raise ValueError(f"{where}: the {ROLL_UNSUPPORTED_ENV_MANAGERS[worker_cls]} ({worker_cls}) is not "
                         f"supported yet; valid: {', '.join(ROLL_ENV_MANAGERS)}")
    raise ValueError(f"{where}: unknown env manager class {worker_cls!r}; valid: "
                     f"{', '.join(ROLL_ENV_MANAGERS)} (classes are looked up by name, never imported)")
