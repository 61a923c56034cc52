"""`policylab`: the PolicyLab REST API from a shell.

Results go to stdout (a run id, a table, JSON, CSV, log lines), progress and errors to stderr, and the
exit code says what happened, so a script can rely on it:

    0  ok; for a command that follows or inspects a run (--follow, --wait, status): the run succeeded
       or is still on its way
    1  the run failed
    2  usage error, or the server refused the config or a value (every error is printed by field)
    3  not found or not allowed: no such run / project in your team, a bad or revoked token, no login
    4  the run was cancelled
    5  refused in the run's current state (e.g. resume while it runs or is cancelling, cancel after it ended)
    6  the server could not be reached or failed
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from policylab_client import config
from policylab_client.api import LATEST, ApiError, Client

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CANCELLED, EXIT_REFUSED, EXIT_UNAVAILABLE = range(7)
SOURCE_FORMATS = ("auto", "roll", "verl", "skyrl", "rlinf")


class CliError(Exception):
    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


def exit_code_for(error: ApiError) -> int:
    if error.status == 400:
        return EXIT_USAGE
    if error.status in (401, 403, 404):
        return EXIT_NOT_FOUND
    if error.status == 409:
        return EXIT_REFUSED
    return EXIT_UNAVAILABLE


def exit_code_for_state(state: dict[str, Any]) -> int:
    return {"failed": EXIT_FAILED, "cancelled": EXIT_CANCELLED}.get(state["status"], EXIT_OK)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def describe(state: dict[str, Any]) -> str:
    """One line: "run 12 running · step 3/6 · ETA 4 s · message" (works for a run and a run state)."""
    step = state.get("step", state.get("current_step", 0))
    total = state.get("total_steps")
    eta = state.get("eta_s", state.get("eta_seconds"))
    parts = [f"run {state['id']} {state['status']}", f"step {step}/{total if total is not None else '?'}"]
    if eta is not None and state["status"] in ("starting", "running"):
        parts.append(f"ETA {round(eta)} s")
    if state.get("message"):
        parts.append(state["message"])
    return " · ".join(parts)


def follow(client: Client, run_id: int, *, quiet: bool = False) -> int:
    """Print the run's log as it grows and its progress on stderr until it ends; exit code by its end."""
    final = client.follow(
        run_id,
        on_line=lambda line: None if quiet else print(line["text"], flush=True),
        on_state=lambda state: say(f"[{describe(state)}]"),
    )
    return exit_code_for_state(final)


def read_config(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text()
    except OSError as error:
        raise CliError(EXIT_USAGE, f"cannot read {path}: {error.strerror}") from None


# --- commands ------------------------------------------------------------------------------------------

def cmd_login(args: argparse.Namespace) -> int:
    token = args.token
    if not token:
        token = getpass.getpass("API token (from /accounts/tokens/): ") if sys.stdin.isatty() else sys.stdin.readline()
    credentials = config.Credentials(args.url.rstrip("/"), token.strip())
    if not credentials.token:
        raise CliError(EXIT_USAGE, "no token given")
    Client(credentials.url, credentials.token).projects()  # proves URL and token before saving them
    path = config.save(credentials, args.credentials)
    say(f"logged in to {credentials.url} (token {credentials.token[:12]}…), saved in {path}")
    return EXIT_OK


def cmd_submit(client: Client, args: argparse.Namespace) -> int:
    text = read_config(args.config)
    name = args.name or (Path(args.config).stem if args.config != "-" else "submitted")
    run = client.submit(text, args.overrides, name=name, project=args.project, source_format=args.format,
                        tags=args.tag)
    say(f"run {run['id']} {run['status']}: {client.url}{run['dashboard_url']}")
    print(run["id"], flush=True)
    return follow(client, run["id"], quiet=args.quiet) if args.follow else EXIT_OK


def cmd_status(client: Client, args: argparse.Namespace) -> int:
    run = client.run(args.run)
    print(json.dumps(run, indent=1) if args.json else describe(run))
    return exit_code_for_state(run)


def cmd_logs(client: Client, args: argparse.Namespace) -> int:
    if args.follow:
        return follow(client, args.run)
    after = args.after
    while True:
        page = client.logs(args.run, after=after)
        for line in page["results"]:
            print(line["text"])
        if not page["results"]:
            return EXIT_OK
        after = page["next_after"]


def cmd_cancel(client: Client, args: argparse.Namespace) -> int:
    run = client.cancel(args.run)
    say(describe(run))
    if not args.wait:
        return EXIT_OK
    final = client.follow(args.run, on_state=lambda state: say(f"[{describe(state)}]"))
    return EXIT_OK if final["status"] == "cancelled" else EXIT_REFUSED


def cmd_resume(client: Client, args: argparse.Namespace) -> int:
    run = client.resume(args.run, checkpoint_ref(args.checkpoint))
    say(f"run {run['id']} {run['status']} ({run['message']}): {client.url}{run['dashboard_url']}")
    print(run["id"], flush=True)
    return follow(client, run["id"], quiet=args.quiet) if args.follow else EXIT_OK


def cmd_fork(client: Client, args: argparse.Namespace) -> int:
    run = client.fork(args.run, checkpoint_ref(args.checkpoint), args.overrides, args.name)
    say(f"run {run['id']} {run['status']} ({run['message']}): {client.url}{run['dashboard_url']}")
    print(run["id"], flush=True)
    return follow(client, run["id"], quiet=args.quiet) if args.follow else EXIT_OK


def cmd_metrics(client: Client, args: argparse.Namespace) -> int:
    data = client.metrics(args.run, csv=args.csv)
    text = data if args.csv else json.dumps(data, indent=1) + "\n"
    if args.output:
        Path(args.output).write_text(text)
        say(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_checkpoints(client: Client, args: argparse.Namespace) -> int:
    checkpoints = client.checkpoints(args.run)
    if args.json:
        print(json.dumps(checkpoints, indent=1))
        return EXIT_OK
    print(f"{'id':>6}  {'step':>7}  {'state':<22}  path")
    for c in checkpoints:
        state = checkpoint_state(c)
        print(f"{c['id']:>6}  {c['step']:>7}  {state:<22}  {c['path']}")
        if c.get("reason") and c.get("on_disk", True):  # why `resume` would refuse one that is still on disk
            print(f"{'':>17}  why not resumable: {c['reason']}"
                  + (f" (policylab fork {args.run} --checkpoint {c['id']} max_steps={c['fork_max_steps']})"
                     if c.get("fork_max_steps") else ""))
    return EXIT_OK


def checkpoint_state(c: dict[str, Any]) -> str:
    """The server's verdict on a checkpoint, in the words `resume` and `fork` act on."""
    if c["resumable"]:
        return "resumable"
    if c.get("fork_max_steps"):
        return "fork only"  # resuming would train nothing: the run finished all its steps
    if c.get("on_disk", False):
        return "not resumable now"  # the run is live or cancelling
    return "deleted by retention" if c["deleted"] else "gone from disk"


def cmd_runs_list(client: Client, args: argparse.Namespace) -> int:
    runs = client.runs(status=args.status, experiment=args.experiment, search=args.search, limit=args.limit)
    if args.json:
        print(json.dumps(runs, indent=1))
        return EXIT_OK
    print(f"{'id':>6}  {'status':<11}  {'step':>11}  {'created':<25}  experiment")
    for run in runs:
        step = f"{run['current_step']}/{run['total_steps'] if run['total_steps'] is not None else '?'}"
        name = run.get("experiment_name")  # a server older than the field: the id alone
        experiment = f"{name} (#{run['experiment']})" if name is not None else f"#{run['experiment']}"
        print(f"{run['id']:>6}  {run['status']:<11}  {step:>11}  {run['created_at']:<25}  {experiment}")
    return EXIT_OK


def cmd_runs_show(client: Client, args: argparse.Namespace) -> int:
    """The run's state line, then its health alerts (decision 0050), oldest first, each with the inspector's
    address at its step."""
    run = client.run(args.run)
    if args.json:
        print(json.dumps(run, indent=1))
        return EXIT_OK
    print(describe(run))
    alerts = list(reversed(run.get("alerts") or []))  # the API lists them newest first
    print(f"health alerts: {len(alerts) or 'none'}")
    for alert in alerts:
        print(f"  {alert_line(alert)}")
        print(f"    inspect: {client.url}{alert['inspector_url']}")
    return EXIT_OK


def alert_line(alert: dict[str, Any]) -> str:
    """"step 4  entropy_collapse  actor/entropy = 0.01 (threshold 0.05): message [samples: 3#0, 5#2]"."""
    value = "NaN/inf" if alert["value"] is None else f"{alert['value']:.4g}"
    threshold = "" if alert["threshold"] is None else f" (threshold {alert['threshold']:.4g})"
    samples = ", ".join(f"{s['group_id']}#{s['sample_index']}" for s in alert.get("samples") or [])
    return (f"step {alert['step']}  {alert['kind']}  {alert['metric']} = {value}{threshold}: {alert['message']}"
            + (f" [samples (group#index): {samples}]" if samples else ""))


def cmd_runs(client: Client, args: argparse.Namespace) -> int:
    return cmd_runs_show(client, args) if args.runs_command == "show" else cmd_runs_list(client, args)


def checkpoint_ref(text: str) -> int | str:
    if text == LATEST:
        return LATEST
    if text.isdigit():
        return int(text)
    raise CliError(EXIT_USAGE, f'--checkpoint: expected a checkpoint id or "latest", got {text!r}')


# --- the parser ----------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="policylab", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="server URL (default: what `policylab login` stored, or $POLICYLAB_URL)")
    parser.add_argument("--token", help="API token (default: the stored one, or $POLICYLAB_TOKEN)")
    parser.add_argument("--credentials", type=Path, metavar="FILE", help="where login keeps the URL and token "
                        "(default: $POLICYLAB_CONFIG or ~/.config/policylab/config.json)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    login = sub.add_parser("login", help="check a server URL and API token, and store them (mode 0600)")
    login.add_argument("--url", required=True, dest="url")
    login.add_argument("--token", dest="token", help="the token (default: prompt, or one line of stdin)")

    def run_id(p: argparse.ArgumentParser) -> None:
        p.add_argument("run", type=int, help="run id")

    def following(p: argparse.ArgumentParser) -> None:
        p.add_argument("--follow", "-f", action="store_true", help="follow the run's log until it ends; "
                       "the exit code is then the run's (0 succeeded, 1 failed, 4 cancelled)")
        p.add_argument("--quiet", "-q", action="store_true", help="with --follow: progress only, no log lines")

    submit = sub.add_parser("submit", help="save a config as an experiment and launch a run; prints the run id")
    submit.add_argument("config", help="YAML file (native/ROLL, verl, SkyRL or RLinf; - for stdin)")
    submit.add_argument("overrides", nargs="*", help="key=value overrides (Hydra style: +key=v, ~key)")
    submit.add_argument("--project", default="default", help="project name or id (a new name is created)")
    submit.add_argument("--name", help="experiment name (default: the file's name)")
    submit.add_argument("--format", choices=SOURCE_FORMATS, default="auto", help="the file's format (default: detect)")
    submit.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    following(submit)

    status = sub.add_parser("status", help="a run's state; exit code 0 (ok or running), 1 failed, 4 cancelled")
    run_id(status)
    status.add_argument("--json", action="store_true")

    logs = sub.add_parser("logs", help="a run's log (ANSI colours stripped)")
    run_id(logs)
    logs.add_argument("--follow", "-f", action="store_true", help="keep following until the run ends")
    logs.add_argument("--after", type=int, default=0, help="only lines after this line id")

    cancel = sub.add_parser("cancel", help="cancel a run (idempotent)")
    run_id(cancel)
    cancel.add_argument("--wait", action="store_true", help="wait until it has stopped (exit 0 once cancelled)")

    resume = sub.add_parser("resume", help="resume a finished run from a checkpoint; prints the run id")
    run_id(resume)
    resume.add_argument("--checkpoint", default=LATEST, help='checkpoint id, or "latest" (default)')
    following(resume)

    fork = sub.add_parser("fork", help="a new experiment and run from a checkpoint, with overrides")
    run_id(fork)
    fork.add_argument("overrides", nargs="*", help="key=value overrides for the fork")
    fork.add_argument("--checkpoint", default=LATEST, help='checkpoint id, or "latest" (default)')
    fork.add_argument("--name", help="the new experiment's name")
    following(fork)

    metrics = sub.add_parser("metrics", help="every metric point of a run, one row per step")
    run_id(metrics)
    kind = metrics.add_mutually_exclusive_group()
    kind.add_argument("--csv", action="store_true", help="CSV")
    kind.add_argument("--json", action="store_true", help="JSON (the default)")
    metrics.add_argument("--output", "-o", help="write to this file instead of stdout")

    checkpoints = sub.add_parser("checkpoints", help="a run's checkpoints and whether each is resumable")
    run_id(checkpoints)
    checkpoints.add_argument("--json", action="store_true")

    runs = sub.add_parser("runs", help="runs of your team")
    runs_sub = runs.add_subparsers(dest="runs_command", required=True, metavar="COMMAND")
    listing = runs_sub.add_parser("list", help="newest first")
    listing.add_argument("--status", help="only runs in this status")
    listing.add_argument("--experiment", metavar="ID_OR_NAME",
                         help="only runs of this experiment: its id, or its name (every experiment of that name)")
    listing.add_argument("--search", metavar="TEXT", help="only runs whose experiment name, description, project "
                         "or tags, or whose message, hold TEXT (ignoring case): History's search")
    listing.add_argument("--limit", type=int, default=20)
    listing.add_argument("--json", action="store_true")
    show = runs_sub.add_parser("show", help="a run's state and its health alerts (entropy collapse, length cap, …)")
    run_id(show)
    show.add_argument("--json", action="store_true", help="the API's whole run detail")
    return parser


COMMANDS = {
    "submit": cmd_submit, "status": cmd_status, "logs": cmd_logs, "cancel": cmd_cancel, "resume": cmd_resume,
    "fork": cmd_fork, "metrics": cmd_metrics, "checkpoints": cmd_checkpoints, "runs": cmd_runs,
}


def client_for(args: argparse.Namespace) -> Client:
    try:
        stored = config.load(args.credentials)
    except config.NotLoggedIn as error:
        if not (args.url and args.token):
            raise CliError(EXIT_NOT_FOUND, str(error)) from None
        stored = config.Credentials(args.url, args.token)
    return Client(args.url or stored.url, args.token or stored.token)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # usage errors exit 2
    try:
        if args.command == "login":
            return cmd_login(args)
        return COMMANDS[args.command](client_for(args), args)
    except ApiError as error:
        for message in error.messages or [str(error)]:
            say(f"error: {message}")
        return exit_code_for(error)
    except CliError as error:
        say(f"error: {error}")
        return error.code
    except KeyboardInterrupt:
        say("interrupted (the run goes on; `policylab cancel RUN` stops it)")
        return 130
