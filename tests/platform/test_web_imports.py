"""The web server starts without torch, and the platform imports only trainer.config / trainer.telemetry."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_whole_url_map_and_asgi_app_load_without_torch():
    code = (
        "import os, sys; sys.path[:0] = ['platform', '.']; os.environ['DJANGO_SETTINGS_MODULE'] = 'policylab.settings'\n"
        "import django; django.setup()\n"
        "import policylab.asgi, policylab.urls\n"
        "from django.urls import get_resolver; get_resolver().url_patterns\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'ray.train') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_platform_imports_only_the_config_and_telemetry_of_the_trainer():
    pattern = re.compile(r"^\s*(?:from|import)\s+(trainer(?:\.\w+)*)", re.MULTILINE)
    used = {m for path in (REPO_ROOT / "platform").rglob("*.py") for m in pattern.findall(path.read_text())}
    assert {m for m in used if m.split(".")[:2] not in (["trainer", "config"], ["trainer", "telemetry"])} == set()
