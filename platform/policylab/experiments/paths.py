"""What runs may touch in this deployment, read from the settings: the one PathPolicy that validation (the editor,
the API, a launch) and the supervisor (making a run's paths absolute before it is submitted) both apply."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from trainer.config.confinement import PathPolicy


def path_policy(run_dir: Path | None = None) -> PathPolicy:
    """What runs may touch in this deployment: files under settings.POLICYLAB_READ_ROOTS and the run dir,
    URLs under POLICYLAB_URL_PREFIXES, and the system_envs POLICYLAB_SYSTEM_ENVS_ALLOW adds."""
    return PathPolicy(
        tuple(settings.POLICYLAB_READ_ROOTS), settings.POLICYLAB_TRAINER_WORKDIR, str(run_dir) if run_dir else None,
        tuple(settings.POLICYLAB_URL_PREFIXES), tuple(settings.POLICYLAB_SYSTEM_ENVS_ALLOW),
    )
