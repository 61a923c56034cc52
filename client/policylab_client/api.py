"""The PolicyLab REST API from Python with the standard library only (urllib), authenticated by an API token.

Every method returns the API's JSON (dicts and lists, as documented at /api/docs/) or raises ApiError,
which carries the HTTP status (0: the server could not be reached) and the API's error messages.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from policylab_client import config

LATEST = "latest"


class ApiError(Exception):
    def __init__(self, status: int, messages: Sequence[str]) -> None:
        self.status = status
        self.messages = list(messages)
        super().__init__("; ".join(self.messages) or f"HTTP {status}")


def error_messages(body: bytes) -> list[str]:
    """The API's error shape {"errors": [{"field", "message"}]} as "field: message" lines."""
    try:
        data = json.loads(body)
    except ValueError:
        return [body.decode(errors="replace")[:500]] if body else []
    errors = data.get("errors") if isinstance(data, dict) else None
    if not errors:
        return [json.dumps(data)[:500]]
    return [f"{e['field']}: {e['message']}" if e.get("field") else str(e.get("message")) for e in errors]


class Client:
    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    @classmethod
    def from_config(cls, path: Path | None = None) -> Client:
        """The server and token `policylab login` stored (or $POLICYLAB_URL / $POLICYLAB_TOKEN)."""
        credentials = config.load(path)
        return cls(credentials.url, credentials.token)

    # --- transport ---------------------------------------------------------------------------------

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: Any = None,
                accept: str = "application/json") -> Any:
        """One call: JSON in, JSON (or text, for other media types) out; ApiError on any failure."""
        url = f"{self.url}{path}"
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Accept": accept,
            **({"Content-Type": "application/json"} if data is not None else {}),
        })
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
                kind = response.headers.get_content_type()
        except urllib.error.HTTPError as error:
            raise ApiError(error.code, error_messages(error.read())) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            raise ApiError(0, [f"cannot reach {self.url}: {reason}"]) from None
        if not payload:
            return None
        return json.loads(payload) if kind == "application/json" else payload.decode()

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body={} if body is None else body)

    # --- projects and experiments -----------------------------------------------------------------------

    def projects(self) -> list[dict[str, Any]]:
        return self.get("/api/projects/", limit=500)["results"]

    def project(self, name_or_id: str, *, create: bool = True) -> dict[str, Any]:
        """A project of the token's team by id or name; a name not found is created (with `create`)."""
        for project in self.projects():
            if str(project["id"]) == str(name_or_id) or project["name"] == name_or_id:
                return project
        if not create or str(name_or_id).isdigit():
            raise ApiError(404, [f"project: no project {name_or_id!r} in your team"])
        return self.post("/api/projects/", {"name": name_or_id})

    def create_experiment(self, project_id: int, name: str, config_text: str, overrides: Sequence[str] = (),
                          source_format: str = "auto", tags: Sequence[str] = ()) -> dict[str, Any]:
        return self.post("/api/experiments/", {
            "project": project_id, "name": name, "config": config_text, "overrides": list(overrides),
            "source_format": source_format, "tags": list(tags),
        })

    def launch(self, experiment_id: int, overrides: Sequence[str] = ()) -> dict[str, Any]:
        return self.post(f"/api/experiments/{experiment_id}/runs/", {"overrides": list(overrides)})

    def submit(self, config_text: str, overrides: Sequence[str] = (), *, name: str, project: str = "default",
               source_format: str = "auto", tags: Sequence[str] = ()) -> dict[str, Any]:
        """Save the config (YAML text in any of the four formats; the server translates and validates it,
        with the overrides) as a new experiment, and launch a run of it. Returns the run."""
        experiment = self.create_experiment(self.project(project)["id"], name, config_text, overrides,
                                            source_format, tags)
        return self.launch(experiment["id"])

    def delete_experiment(self, experiment_id: int) -> None:
        self.request("DELETE", f"/api/experiments/{experiment_id}/")

    # --- runs ---------------------------------------------------------------------------------------

    def run(self, run_id: int) -> dict[str, Any]:
        return self.get(f"/api/runs/{run_id}/")

    def runs(self, *, status: str | None = None, experiment: int | str | None = None, search: str | None = None,
             limit: int = 50) -> list[dict[str, Any]]:
        """Newest first. `experiment`: an id, or a name (the runs of every experiment of that name);
        `search`: text in the experiment's name, description, project or tags, or in the run's message."""
        return self.get("/api/runs/", status=status, experiment=experiment, search=search or None,
                        limit=limit)["results"]

    def cancel(self, run_id: int) -> dict[str, Any]:
        """Cancel (idempotent: a run already cancelling or cancelled comes back as it is)."""
        return self.post(f"/api/runs/{run_id}/cancel/")

    def resume(self, run_id: int, checkpoint: int | str = LATEST) -> dict[str, Any]:
        """The resumed run: the same run (from its latest checkpoint) or a new child run (an earlier one)."""
        return self.post(f"/api/runs/{run_id}/resume/", {"checkpoint": checkpoint})

    def fork(self, run_id: int, checkpoint: int | str = LATEST, overrides: Sequence[str] = (),
             name: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"checkpoint": checkpoint, "overrides": list(overrides)}
        if name:
            body["name"] = name
        return self.post(f"/api/runs/{run_id}/fork/", body)

    def delete_run(self, run_id: int) -> None:
        self.request("DELETE", f"/api/runs/{run_id}/")

    def checkpoints(self, run_id: int) -> list[dict[str, Any]]:
        return self.get(f"/api/runs/{run_id}/checkpoints/", page_size=1000)["results"]

    def logs(self, run_id: int, *, after: int = 0, limit: int = 500) -> dict[str, Any]:
        """One page: {"run": state, "results": [lines], "next_after": cursor}."""
        return self.get(f"/api/runs/{run_id}/logs/", after=after, limit=limit)

    def events(self, run_id: int, *, after: int = 0, limit: int = 500) -> dict[str, Any]:
        return self.get(f"/api/runs/{run_id}/events/", after=after, limit=limit)

    def metrics(self, run_id: int, *, csv: bool = False) -> Any:
        """Every metric point: {"columns", "rows"} (JSON), or the CSV text with csv=True."""
        return self.request("GET", f"/api/runs/{run_id}/metrics/export/", query={"format": "csv" if csv else "json"},
                            accept="text/csv" if csv else "application/json")

    def follow(self, run_id: int, *, after: int = 0, poll_s: float = 1.0,
               on_line: Callable[[dict[str, Any]], None] = lambda line: None,
               on_state: Callable[[dict[str, Any]], None] = lambda state: None) -> dict[str, Any]:
        """Tail the run's log until the run has finished and every line is read; returns the final state.
        `on_state` hears each new state (status, step, ETA, message) as it changes."""
        version = None
        while True:
            page = self.logs(run_id, after=after)
            state = page["run"]
            if state["version"] != version:
                version = state["version"]
                on_state(state)
            for line in page["results"]:
                on_line(line)
            after = page["next_after"]
            if not page["results"]:
                if state["finished"]:
                    return state
                time.sleep(poll_s)

