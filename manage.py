#!/usr/bin/env python
"""Django's command-line utility for PolicyLab. Puts platform/ (the Django source root) on sys.path."""

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent


def main() -> None:
    # platform/ is a source root, not a package: importing it as `platform` would shadow the stdlib.
    sys.path.insert(0, str(REPO_ROOT / "platform"))
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(1, str(REPO_ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "policylab.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
