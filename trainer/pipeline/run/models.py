"""Model references in a config: ``tiny://<size>[?seed=<n>]`` builds a fresh tiny model locally.

A run whose ``pretrain`` (or a role's ``model_args.model_name_or_path``) is, for example,
``tiny://tiny?seed=0`` gets a randomly initialised Qwen2-architecture model and its byte-level
tokenizer written to ``<output_dir>/models/tiny-seed0`` once (reused on resume); every role then
loads that directory like any HF checkpoint. Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.config import topology
from trainer.config.confinement import TINY_SCHEME, parse_tiny_ref

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig

def materialise_tiny_models(cfg: PipelineConfig) -> Any:
    """Return a copy of ``cfg`` with every ``tiny://`` reference replaced by a built directory.
    parse_tiny_ref refuses (ValueError) any name that is not a plain size name before a file is touched:
    the name becomes a folder of the run directory."""
    from trainer.models.tiny import build_tiny_model

    cfg = cfg.model_copy(deep=True)
    built: dict[str, str] = {}

    def resolve(ref: str | None) -> str | None:
        if not ref or not str(ref).startswith(TINY_SCHEME):
            return ref
        if ref not in built:
            size, seed = parse_tiny_ref(ref)
            out = Path(cfg.output_dir) / "models" / f"{size}-seed{seed}"
            if not (out / "config.json").is_file():
                build_tiny_model(out, size=size, seed=seed)
            built[ref] = str(out)
        return built[ref]

    cfg.pretrain = resolve(cfg.pretrain)
    cfg.reward_pretrain = resolve(cfg.reward_pretrain)
    for role in topology.WORKER_ROLES:
        section = getattr(cfg, role, None)
        if section is not None:
            section.model_args.model_name_or_path = resolve(section.model_args.model_name_or_path)
    for section in cfg.rewards.values():
        section.model_args.model_name_or_path = resolve(section.model_args.model_name_or_path)
    return cfg


def policy_path(cfg: PipelineConfig) -> str:
    path = cfg.actor_train.model_args.model_name_or_path or cfg.pretrain
    if not path:
        raise ValueError("actor_train.model_args.model_name_or_path: no policy model given (nor `pretrain`)")
    return str(path)
