"""Checkpoints: atomic save, `latest` resolution, retention, RNG capture (see `core`)."""

from trainer.checkpoint.core import (
    CHECKPOINTS_DIR,
    atomic_checkpoint_dir,
    checkpoint_size,
    checkpoints_root,
    enforce_retention,
    get_rng_state,
    list_checkpoints,
    resolve_resume_path,
    set_rng_state,
)

__all__ = [
    "CHECKPOINTS_DIR",
    "atomic_checkpoint_dir",
    "checkpoint_size",
    "checkpoints_root",
    "enforce_retention",
    "get_rng_state",
    "list_checkpoints",
    "resolve_resume_path",
    "set_rng_state",
]
