"""Checkpoint layout, atomic writes, retention and RNG capture.

Layout (``checkpoint_config.output_dir``, by default ``<output_dir>/checkpoints``)::

    checkpoints/step_<k>/            one finished checkpoint (only ever created by a rename)
        trainer_state.json           step, data-sampler position, KL controller, reward stats, and the
                                     rollout state: next batch id, prompts drawn but not generated
                                     (re-queued on resume), the ledger lines recorded so far; the
                                     run-health monitor's state (trainer.pipeline.run.health)
        rollout_buffer.json          batches generated ahead and not trained yet (async rollout)
        driver_rng.pt                the driver's python / numpy / torch RNG states
        actor_train/ critic/ ...     each role's own files (strategy state, one RNG file per rank)
        hf_model/                    the policy in Hugging Face format (loadable by transformers)
        lora_adapter/                with LoRA: the policy's adapter as a PEFT folder (adapter_config.json,
                                     adapter_model.safetensors) over the base model, for adapter_name_or_path
        COMPLETE                     written last, inside the temporary directory
    checkpoints/.tmp-step_<k>-<pid>/ a save in progress; never picked by resume

A save writes everything into the temporary directory and then renames it to ``step_<k>``, so a
crash mid-save leaves only a ``.tmp-*`` directory that resume ignores (and the next save removes).
"""

from __future__ import annotations

import os
import random
import re
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.config.schema import PipelineConfig


CHECKPOINTS_DIR = "checkpoints"
COMPLETE_MARKER = "COMPLETE"
_STEP_DIR = re.compile(r"^step_(\d+)$")


def checkpoints_root(cfg: PipelineConfig) -> Path:
    """Where a run's checkpoints live: ``checkpoint_config.output_dir`` or ``<output_dir>/checkpoints``."""
    configured = getattr(getattr(cfg, "checkpoint_config", None), "output_dir", None)
    return Path(configured) if configured else Path(cfg.output_dir) / CHECKPOINTS_DIR


def list_checkpoints(root: str | Path) -> list[tuple[int, Path]]:
    """Finished checkpoints under the checkpoints directory ``root`` as (step, path), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / COMPLETE_MARKER).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def resolve_resume_path(resume_from_checkpoint: Any, root: str | Path) -> Path | None:
    """``resume_from_checkpoint`` -> checkpoint directory, or None to start fresh.

    ``false``/``None``/``""`` start fresh; ``true`` or ``"latest"`` pick the newest finished
    checkpoint under ``root`` (fresh start when there is none, as ROLL does); anything else is
    a path that must hold a finished checkpoint.
    """
    if resume_from_checkpoint in (None, False, "", "false", "False"):
        return None
    if resume_from_checkpoint is True or str(resume_from_checkpoint).lower() in ("latest", "true"):
        found = list_checkpoints(root)
        return found[-1][1] if found else None
    path = Path(str(resume_from_checkpoint))
    if not (path / COMPLETE_MARKER).is_file():
        raise FileNotFoundError(
            f"resume_from_checkpoint: {path} is not a finished checkpoint directory "
            f"(expected {path / COMPLETE_MARKER}); use 'latest' or a checkpoints/step_<k> path"
        )
    return path


@contextmanager
def atomic_checkpoint_dir(root: str | Path, step: int) -> Iterator[Path]:
    """Yield a temporary directory to fill; on success mark it complete and rename to step_<k>."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-step_*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f".tmp-step_{step}-{os.getpid()}"
    tmp.mkdir()
    try:
        yield tmp
        (tmp / COMPLETE_MARKER).write_text(f"{step}\n")
        final = root / f"step_{step}"
        if final.exists():  # re-saving the same step (e.g. after a resume): replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def enforce_retention(root: str | Path, max_ckpts_to_keep: int | None) -> list[Path]:
    """Delete the oldest finished checkpoints beyond ``max_ckpts_to_keep`` (None/<=0: keep all)."""
    if not max_ckpts_to_keep or max_ckpts_to_keep <= 0:
        return []
    found = list_checkpoints(root)
    removed = [path for _, path in found[: max(0, len(found) - max_ckpts_to_keep)]]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def checkpoint_size(path: str | Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def get_rng_state() -> dict[str, Any]:
    """This process's python, numpy and torch (CPU and, when present, CUDA) RNG states: the one
    capture every role and strategy saves, in a format `torch.load(weights_only=True)` reads."""
    import numpy as np
    import torch

    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": (np_kind, torch.from_numpy(np_keys.astype(np.int64)), np_pos, np_has_gauss, np_gauss),
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    import numpy as np
    import torch

    torch.set_rng_state(state["torch"])
    np_kind, np_keys, np_pos, np_has_gauss, np_gauss = state["numpy"]
    np.random.set_state((np_kind, np_keys.numpy().astype(np.uint32), np_pos, np_has_gauss, np_gauss))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_rank_rng(directory: Path, rank: int) -> None:
    """This rank's RNG state as `directory/rng_rank<rank>.pt`: the one writer of RNG files (each rank
    writes its own; a trained role's strategy writes it beside its state, other roles in their folder)."""
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    torch.save(get_rng_state(), directory / f"rng_rank{rank}.pt")


def load_rank_rng(directory: Path, rank: int, world_size: int) -> None:
    """Restore what save_rank_rng wrote; a missing file names the likely cause (another world size)."""
    import torch

    file = directory / f"rng_rank{rank}.pt"
    if not file.exists():
        raise FileNotFoundError(f"{file} missing: was this checkpoint saved with world_size={world_size}?")
    set_rng_state(torch.load(file, weights_only=True))
