"""Model references in a config: ``tiny://<size>[?seed=<n>]`` builds a fresh tiny model locally.

A run whose ``pretrain`` (or a role's ``model_args.model_name_or_path``) is, for example,
``tiny://tiny?seed=0`` gets a randomly initialised Qwen2-architecture model and its byte-level
tokenizer written to ``<output_dir>/models/tiny-seed0`` once (reused on resume); every role then
loads that directory like any HF checkpoint. Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig


TINY_SCHEME = "tiny://"


def parse_tiny_ref(ref: str) -> tuple[str, int]:
    """``tiny://small?seed=3`` -> ("small", 3). ValueError for anything malformed."""
    parsed = urlparse(ref)
    size = parsed.netloc or parsed.path.strip("/")
    query = parse_qs(parsed.query)
    unknown = sorted(set(query) - {"seed"})
    if unknown:
        raise ValueError(f"{ref!r}: unknown option(s) {unknown}; valid: seed")
    try:
        seed = int(query.get("seed", ["0"])[0])
    except ValueError as exc:
        raise ValueError(f"{ref!r}: seed must be an integer") from exc
    return size or "tiny", seed


def materialise_tiny_models(cfg: PipelineConfig) -> Any:
    """Return a copy of ``cfg`` with every ``tiny://`` reference replaced by a built directory."""
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
    for role in ("actor_train", "actor_infer", "reference", "critic", "validation"):
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
