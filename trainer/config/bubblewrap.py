"""Whether bubblewrap can isolate a program on this machine: the local code sandbox (`use_local: true` of
the code_sandbox reward, trainer/rewards/sandbox.py) runs untrusted code only under it.

Validation calls `bubblewrap_problem()` to refuse `use_local: true` where bwrap is missing or the kernel
refuses it new namespaces (a container without user namespaces, a hardened sysctl); the sandbox itself
checks again, end to end, when the reward is built. Standard library only (the web server imports it).
"""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache

INSTALL_HINT = ("install the Debian package bubblewrap (scripts/setup.sh does), or set use_local: false and code_url "
                "to a sandbox service")
PROBE_TIMEOUT_S = 20.0


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@lru_cache(maxsize=1)
def bubblewrap_problem() -> str | None:
    """None when bwrap runs a command in new user, pid, network, mount, ipc and uts namespaces as uid 65534
    with no capabilities; else why not, in a few words. Cached: the answer holds for the process's life."""
    bwrap = bwrap_path()
    if bwrap is None:
        return "bwrap is not installed (no bwrap on PATH)"
    command = [bwrap, "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL",
               "--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
               "--", "true"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be run ({exc})"
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"bwrap cannot create namespaces here ({why[:200]})"
    return None


def local_sandbox_refusal(field: str = "use_local") -> str | None:
    """The error for `use_local: true` on a machine without a working bubblewrap, or None."""
    problem = bubblewrap_problem()
    if problem is None:
        return None
    return f"{field}: the local code sandbox runs untrusted code only under bubblewrap, and {problem}; {INSTALL_HINT}"
