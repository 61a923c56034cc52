"""Production defaults of the web surface (issue 10): DEBUG off unless asked for, a secret key that is
never the well-known default, the deployment checklist clean, security headers and a CSP on every
response, no inline script a CSP would have to allow, and one plotly config without cloud sharing."""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from policylab.settings import persistent_secret_key

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = REPO_ROOT / "frontend" / "templates"
STATIC = REPO_ROOT / "frontend" / "static"
OLD_DEFAULT_KEY = "policylab-insecure-dev-key-change-me-in-production"
HTTPS_ENV = {
    "DJANGO_SECURE_COOKIES": "1",
    "DJANGO_SECURE_SSL_REDIRECT": "1",
    "DJANGO_SECURE_HSTS_SECONDS": "31536000",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "DJANGO_SECURE_HSTS_PRELOAD": "1",
}


def django_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A clean environment for a fresh Django process: none of the DJANGO_* of the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "POLICYLAB_SECRET"))}
    env |= {"DJANGO_SETTINGS_MODULE": "policylab.settings", "POLICYLAB_VAR_DIR": str(tmp_path / "var")}
    env.pop("DATABASE_URL", None)
    return env | extra


def settings_of(env: dict[str, str]) -> dict:
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({'DEBUG': s.DEBUG, 'SECRET_KEY': s.SECRET_KEY, 'cookies': s.SESSION_COOKIE_SECURE}))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO_ROOT / "platform", capture_output=True,
                         text=True, timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_manage_py_check_deploy_is_clean_under_production_settings(tmp_path):
    env = django_env(tmp_path, DJANGO_SECRET_KEY=secrets.token_urlsafe(50), **HTTPS_ENV)
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_check_deploy_still_flags_a_plain_http_setup(tmp_path):
    """The clean run above is the HTTPS variables' doing, not silenced checks."""
    env = django_env(tmp_path, DJANGO_SECRET_KEY=secrets.token_urlsafe(50))
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy"], env=env, cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=120)
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in result.stdout + result.stderr


def test_debug_is_off_unless_asked_for_and_the_key_is_generated_once(tmp_path):
    env = django_env(tmp_path)
    first = settings_of(env)
    assert first["DEBUG"] is False and first["cookies"] is False
    key = first["SECRET_KEY"]
    assert key != OLD_DEFAULT_KEY and len(key) >= 50 and len(set(key)) >= 5
    key_file = tmp_path / "var" / "secret_key"
    assert key_file.read_text().strip() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    # the same key on the next start (sessions survive restarts); DJANGO_DEBUG=1 turns DEBUG on
    second = settings_of(env | {"DJANGO_DEBUG": "1"})
    assert second == {"DEBUG": True, "SECRET_KEY": key, "cookies": False}
    assert settings_of(env | {"DJANGO_SECRET_KEY": "k" * 60, "DJANGO_SECURE_COOKIES": "1"})["SECRET_KEY"] == "k" * 60


def test_persistent_secret_key_keeps_the_first_key(tmp_path):
    path = tmp_path / "nested" / "secret_key"
    first = persistent_secret_key(path)
    assert persistent_secret_key(path) == first
    assert [p.name for p in path.parent.iterdir()] == ["secret_key"]  # no draft left behind


def test_run_script_passes_debug_on_only_when_asked():
    """`scripts/run.sh --debug` reaches run_platform.py, which sets DJANGO_DEBUG for every service."""
    run_sh = (REPO_ROOT / "scripts" / "run.sh").read_text()
    assert 'run_platform.py "$@"' in run_sh and "DJANGO_DEBUG" not in run_sh
    source = (REPO_ROOT / "scripts" / "run_platform.py").read_text()
    assert '"--debug"' in source and 'os.environ["DJANGO_DEBUG"] = "1"' in source


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/accounts/login/", "/api/runs/", "/static/css/policylab.css"])
def test_security_headers_and_csp_on_every_response(url):
    response = Client().get(url)
    if not url.startswith("/static/"):  # WhiteNoise answers static files before the clickjacking middleware
        assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    csp = dict(part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";"))
    assert csp["script-src"] == "'self'"  # no inline scripts, no CDN
    assert csp["frame-ancestors"] == "'none'" and csp["object-src"] == "'none'"
    assert set(csp["connect-src"].split()) == {"'self'", "ws:", "wss:"}


@pytest.mark.django_db
def test_session_cookie_is_http_only(alice):
    client = Client()
    client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-123456"})
    assert client.cookies["sessionid"]["httponly"]


INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"""<[^>]+\son[a-z]+\s*=""", re.I)
JS_URL = re.compile(r"""(href|src|action)\s*=\s*["']?\s*javascript:""", re.I)


@pytest.mark.parametrize("template", sorted(TEMPLATES.rglob("*.html")), ids=lambda p: str(p.relative_to(TEMPLATES)))
def test_templates_have_no_inline_script_a_csp_would_block(template):
    html = template.read_text()
    assert not INLINE_SCRIPT.search(html), "move the script to frontend/static"
    assert not INLINE_HANDLER.search(html), "bind event handlers in a static JS module"
    assert not JS_URL.search(html)


@pytest.mark.django_db
def test_the_api_docs_page_has_no_inline_script(alice):
    client = Client()
    client.force_login(alice)
    html = client.get("/api/docs/").content.decode()
    assert "swagger-ui" in html and not INLINE_SCRIPT.search(html)


PLOTLY_CALL = re.compile(r"Plotly\.(newPlot|react|plot|update|restyle|relayout|addTraces)\s*\(")


def plotly_calls() -> list[tuple[Path, str]]:
    calls = []
    for path in STATIC.rglob("*.js"):
        if "vendor" in path.parts:
            continue
        text = path.read_text()
        for match in PLOTLY_CALL.finditer(text):
            depth, end = 0, match.end() - 1
            for end in range(match.end() - 1, len(text)):  # the call's full argument list
                depth += {"(": 1, ")": -1}.get(text[end], 0)
                if depth == 0:
                    break
            calls.append((path, text[match.start(): end + 1]))
    return calls


def test_every_plotly_chart_uses_the_shared_config():
    calls = plotly_calls()
    assert calls, "no Plotly call found: has the chart code moved?"
    for path, call in calls:
        if call.startswith(("Plotly.newPlot", "Plotly.react", "Plotly.plot")):
            assert call.rstrip(")").rstrip().endswith("PLOTLY_CONFIG"), f"{path.name}: {call[:120]}"
        text = path.read_text()
        assert 'import { PLOTLY_CONFIG } from "./plotly_config.js"' in text or path.name == "plotly_config.js"


def test_the_shared_plotly_config_offers_no_cloud_sharing():
    text = (STATIC / "tracking" / "plotly_config.js").read_text()
    body = text[text.index("{"): text.rindex("}") + 1]
    config = json.loads(re.sub(r"(\w+):", r'"\1":', body).replace(",\n}", "\n}"))
    assert config["displaylogo"] is False
    assert config["showSendToCloud"] is False and config["showEditInChartStudio"] is False
    assert {"sendDataToCloud", "editInChartStudio"} <= set(config["modeBarButtonsToRemove"])


@pytest.mark.django_db
def test_the_openapi_schema_and_its_viewers_need_a_sign_in_unless_the_deployment_opens_them(alice, team_a, settings):
    """Issue 34: the schema was open to anonymous users; now like the API it describes, unless
    POLICYLAB_PUBLIC_API_SCHEMA opens it."""
    from policylab.accounts.services import create_api_token

    urls = ("/api/schema/", "/api/docs/", "/api/redoc/")
    for url in urls:
        anonymous = Client().get(url)
        assert anonymous.status_code == 401, url
        assert "openapi" not in anonymous.content.decode().lower() and "swagger" not in anonymous.content.decode()
    browser = Client()
    browser.force_login(alice)
    token = Client(HTTP_AUTHORIZATION=f"Bearer {create_api_token(alice, team_a, 'docs').secret}")
    for url in urls:
        assert browser.get(url).status_code == 200, url
    assert b"openapi:" in token.get("/api/schema/").content
    settings.POLICYLAB_PUBLIC_API_SCHEMA = True
    for url in urls:
        assert Client().get(url).status_code == 200, url


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/editor/check/", "/api/configs/validate/"])
def test_the_asgi_stack_refuses_a_chunked_body_once_past_the_limit_without_reading_the_rest(settings, path):
    """Issue 34: the 413 read Content-Length only. For ASGI servers that stream bodies (uvicorn, hypercorn;
    daphne is capped where it reads the socket: tests/platform/server/), the application counts the bytes of
    a body with no Content-Length as they arrive and stops reading at the limit."""
    from asgiref.sync import async_to_sync
    from asgiref.testing import ApplicationCommunicator

    from policylab.asgi import application

    mib, sent = 2**20, 100
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 3 * mib
    scope = {"type": "http", "method": "POST", "path": path, "query_string": b"", "http_version": "1.1",
             "headers": [(b"host", b"testserver"), (b"transfer-encoding", b"chunked")]}
    result: dict = {}

    async def upload() -> None:
        app = ApplicationCommunicator(application, scope)
        for _ in range(sent):
            await app.send_input({"type": "http.request", "body": b"a" * mib, "more_body": True})
        result["start"] = await app.receive_output(timeout=10)
        result["body"] = (await app.receive_output(timeout=10))["body"]
        result["unread"] = app.input_queue.qsize()
        await app.wait(timeout=10)

    async_to_sync(upload)()
    assert result["start"]["status"] == 413
    assert f"larger than {3 * mib} bytes".encode() in result["body"]
    assert result["unread"] >= sent - 4  # stopped reading at the limit (3 MiB + the one past it)
    if path.startswith("/api/"):
        assert json.loads(result["body"])["errors"][0]["message"] == f"request body is larger than {3 * mib} bytes"


@pytest.mark.parametrize(("path", "named"), [
    ("/api/runs/?search=a%00b", "search"), ("/api/runs/?sea%00rch=x", "sea\\x00rch"), ("/history/?q=%00", "q"),
])
def test_a_nul_character_in_a_query_parameter_is_a_400_naming_it(alice, path, named):
    """PostgreSQL's text refuses NUL: `?search=%00` reached the runs filter and was a 500 there (found by
    the API fuzz test on CI's PostgreSQL pass; SQLite took it)."""
    client = Client()
    client.force_login(alice)
    response = client.get(path)
    assert response.status_code == 400
    message = response.json()["errors"][0]["message"] if path.startswith("/api/") else response.content.decode()
    assert message.startswith(f"query parameter {named!r} holds a NUL character")
    assert client.get(path.replace("%00", "")).status_code == 200
