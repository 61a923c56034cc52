"""Where `policylab login` keeps the server URL and the API token: a JSON file readable by its owner only.

The file is $POLICYLAB_CONFIG, else $XDG_CONFIG_HOME/policylab/config.json (~/.config/policylab/...).
$POLICYLAB_URL and $POLICYLAB_TOKEN, when set, win over the file (CI jobs pass them that way).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Credentials:
    url: str
    token: str


class NotLoggedIn(Exception):
    """No URL or token: neither the config file nor the environment has them."""


def config_path() -> Path:
    if os.environ.get("POLICYLAB_CONFIG"):
        return Path(os.environ["POLICYLAB_CONFIG"])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "policylab" / "config.json"


def load(path: Path | None = None) -> Credentials:
    path = path or config_path()
    stored: dict[str, str] = {}
    if path.is_file():
        stored = json.loads(path.read_text())
    url = os.environ.get("POLICYLAB_URL") or stored.get("url")
    token = os.environ.get("POLICYLAB_TOKEN") or stored.get("token")
    if not url or not token:
        raise NotLoggedIn(f"not logged in: run `policylab login --url URL` (or set POLICYLAB_URL and POLICYLAB_TOKEN); "
                          f"looked in {path}")
    return Credentials(url.rstrip("/"), token)


def save(credentials: Credentials, path: Path | None = None) -> Path:
    """Write the file with mode 0600 (its directory 0700) before the token is in it."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its mode through O_CREAT: set it
    with os.fdopen(fd, "w") as handle:
        json.dump({"url": credentials.url, "token": credentials.token}, handle, indent=1)
    return path
