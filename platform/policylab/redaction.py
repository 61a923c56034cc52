"""What users are shown of text the servers wrote: credentials in URLs redacted, server paths relative.

Log lines (the trainer's and the Ray driver's), run messages, checkpoint listings and validation errors
reach every member of a team, viewers included. They may carry infrastructure URLs (the events Redis
URL, with its password when REDIS_URL has one) and the deployment's absolute paths.

- `redact_credentials`: the user-info of every URL (`redis://:pw@host` -> `redis://***@host`) and the
  value of secret-looking query parameters (`?password=…`, `&token=…`). Applied where log lines are
  stored (the database never holds the secret) and again wherever text is shown (rows stored earlier).
- `shown_text`: redact_credentials, then server paths written relative: the run's own directory as
  `<run_dir>`, any other run's as `<runs>/run-N`, the trainer's working directory (where relative
  config paths start) as `.`, the virtualenv as `<venv>` and the Python installation as `<python>`
  (tracebacks and stall stacks name `…/site-packages/ray/…` and the interpreter's home otherwise). Applied where log lines and validation errors are shown (stored log lines
  keep their paths), and where a run's message is written (experiments.run_state: its one writer).
- `path_in_run`: a path field (a checkpoint's folder) relative to the run directory.
- `shown_config` / `shown_config_text`: a config (tree, YAML text or an override) with the plain value of every
  credential-looking key (judge_api_key, tracker_kwargs.api_key, …) shown as `<redacted>`; a team secret's
  `${secret:NAME}` is shown as written (trainer.config.secrets). Applied wherever a config is shown or
  exported (the experiment page, the experiments and runs API, compare); only the trainer reads it whole.
"""

from __future__ import annotations

import os
import re
import site
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from django.conf import settings

from trainer.config.secrets import redact_config, redact_config_text

REDACTED = "***"
# scheme://user:password@host — bounded repetition keeps the search linear on any input
_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]{0,30}://)[^\s/?#@'\"<>]{1,512}@")
_SECRET_PARAM = re.compile(
    r"(?P<name>[?&;](?:password|passwd|pwd|secret|token|access_token|auth|api_key|apikey)=)[^&;\s#'\"<>]+",
    re.IGNORECASE,
)
_PATH_END = r"(?![\w.\-])"  # a prefix only matches whole path components: /srv/app, not /srv/app2


def redact_credentials(text: str) -> str:
    """`text` without the credentials of any URL in it (see the module docstring)."""
    if "://" not in text and "=" not in text:
        return text
    text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    return _SECRET_PARAM.sub(lambda m: f"{m['name']}{REDACTED}", text)


def interpreter_prefixes() -> list[tuple[str, str]]:
    """(folder, shown as) of the Python the servers and the trainer run on: the virtualenv (sys.prefix when it
    is not the installation itself) as `<venv>`, the installation as `<python>`, and a site-packages folder
    outside both (a user site) as `<site-packages>`."""
    bases = {sys.base_prefix, sys.base_exec_prefix}
    named = [(base, "<python>") for base in bases]
    named += [(prefix, "<venv>") for prefix in {sys.prefix, sys.exec_prefix} - bases]
    sites = [*site.getsitepackages(), site.getusersitepackages()] if hasattr(site, "getsitepackages") else []
    inside = tuple(os.path.join(os.path.normpath(folder), "") for folder, _ in named)
    named += [(folder, "<site-packages>") for folder in sites
              if not os.path.join(os.path.normpath(folder), "").startswith(inside)]
    return named


def _server_prefixes(run_dir: Path | str | None) -> tuple[tuple[str, str], ...]:
    """(absolute prefix, shown as) for the server's own folders, most specific first."""
    named = [*interpreter_prefixes(), (settings.POLICYLAB_TRAINER_WORKDIR, "."), (settings.POLICYLAB_RUNS_DIR, "<runs>")]
    if run_dir is not None:
        named.append((run_dir, "<run_dir>"))
    pairs: dict[str, str] = {}
    for path, shown in named:
        for variant in {os.path.normpath(str(path)), os.path.realpath(str(path))}:
            if len(variant) > 1:  # never "/" itself
                pairs[variant] = shown
    return tuple(sorted(pairs.items(), key=lambda pair: -len(pair[0])))


@lru_cache(maxsize=256)
def _path_pattern(prefixes: tuple[tuple[str, str], ...]) -> tuple[re.Pattern[str], dict[str, str]]:
    pattern = re.compile("|".join(f"{re.escape(prefix)}{_PATH_END}" for prefix, _ in prefixes))
    return pattern, dict(prefixes)


def hide_server_paths(text: str, run_dir: Path | str | None = None) -> str:
    """`text` with the deployment's absolute folders written relative (see the module docstring)."""
    if "/" not in text and os.sep not in text:
        return text
    pattern, shown = _path_pattern(_server_prefixes(run_dir))
    return pattern.sub(lambda m: shown[m.group(0)], text)


def shown_text(text: str, run_dir: Path | str | None = None) -> str:
    """Server-written text as users see it: credentials redacted, server paths relative."""
    return hide_server_paths(redact_credentials(text), run_dir)


def path_in_run(path: str, run_dir: Path | str) -> str:
    """A path as a run's pages list it: relative to the run directory when inside it (`checkpoints/step_4`),
    else with the server's folders hidden (`<runs>/run-3/checkpoints/step_4` for another run's)."""
    if path and os.path.isabs(path):
        root = os.path.normpath(str(run_dir))
        normal = os.path.normpath(path)
        if normal == root or normal.startswith(root + os.sep):
            return os.path.relpath(normal, root)
    return shown_text(path, run_dir)


def shown_config(config: Any) -> Any:
    """A config tree as users see it (see the module docstring)."""
    return redact_config(config)


def shown_config_text(text: str) -> str:
    """Config text (YAML, an override) as users see it (see the module docstring)."""
    return redact_config_text(text)
