"""Experiment trackers for `track_with`: stdout, tensorboard, wandb, swanlab, none.

One small interface, `log(metrics, step)` / `close()`. Heavy backends are imported lazily, and one
that is asked for but not installed fails with a clear error naming `track_with`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TextIO

TRACKERS: tuple[str, ...] = ("stdout", "tensorboard", "wandb", "swanlab", "none")


class Tracker(Protocol):
    def log(self, metrics: Mapping[str, float], step: int) -> None: ...
    def close(self) -> None: ...


class NullTracker:
    def log(self, metrics: Mapping[str, float], step: int) -> None:
        pass

    def close(self) -> None:
        pass


class StdoutTracker:
    """One compact line per logging step: `step 12 | actor/loss -0.0123 | reward/mean 0.52`."""

    def __init__(self, stream: TextIO | None = None, keys: list[str] | None = None) -> None:
        self.stream, self.keys = stream or sys.stdout, keys

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        keys = self.keys if self.keys is not None else sorted(metrics)
        parts = [f"{k} {metrics[k]:.4g}" for k in keys if k in metrics]
        print(" | ".join([f"step {step}", *parts]), file=self.stream, flush=True)

    def close(self) -> None:
        pass


class TensorBoardTracker:
    def __init__(self, log_dir: str | Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise RuntimeError(f"track_with: tensorboard needs the `tensorboard` package ({exc})") from exc
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    def __init__(self, project: str = "policylab", name: str | None = None,
                 config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        try:
            import wandb
        except ImportError:
            raise RuntimeError("track_with: wandb is not installed; `pip install wandb` or choose "
                               "tensorboard, stdout or none") from None
        self.run = wandb.init(project=project, name=name, config=dict(config or {}), **kwargs)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class SwanlabTracker:
    def __init__(self, project: str = "policylab", name: str | None = None,
                 config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        try:
            import swanlab
        except ImportError:
            raise RuntimeError("track_with: swanlab is not installed; `pip install swanlab` or choose "
                               "tensorboard, stdout or none") from None
        self.swanlab = swanlab
        swanlab.init(project=project, experiment_name=name, config=dict(config or {}), **kwargs)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        self.swanlab.log(dict(metrics), step=step)

    def close(self) -> None:
        self.swanlab.finish()


def build_tracker(name: str, run_dir: str | Path, /, *, run_name: str | None = None,
                  config: Mapping[str, Any] | None = None, **kwargs: Any) -> Tracker:
    """The tracker `track_with` names; tensorboard writes to `run_dir/tensorboard` unless `log_dir` is given.
    `kwargs` are tracker_kwargs: a `name` there (RLinf's experiment name) names the wandb / swanlab run."""
    if name == "none":
        return NullTracker()
    if name == "stdout":
        return StdoutTracker(keys=kwargs.get("keys"))
    if name == "tensorboard":
        return TensorBoardTracker(kwargs.get("log_dir") or Path(run_dir) / "tensorboard")
    if name == "wandb":
        return WandbTracker(**{"name": run_name, "config": config, **kwargs})
    if name == "swanlab":
        return SwanlabTracker(**{"name": run_name, "config": config, **kwargs})
    raise ValueError(f"track_with: unknown tracker {name!r}; valid: {', '.join(TRACKERS)}")
