"""The whole platform on this machine, with the demo experiment running: what `bash scripts/run.sh`
starts once the environment is set up.

Order matters: the database is migrated before anything that reads it starts (ingest, web); then
Redis, a local Ray head, a Celery worker and beat, the ingest consumer and the ASGI server start
(each only when missing); then the demo user, team and experiment are created (once) and a demo
run is launched unless one is already queued or running. Ctrl-C stops everything started here.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "platform")]

from scripts.services import ServiceError, running_services, stop_on_signals  # noqa: E402

ACTIVE_STATES = ("queued", "submitting", "running")


def launch_demo_run(username: str) -> tuple[int, bool]:
    """Launch a run of the demo experiment unless one is active; return (run id, launched now)."""
    from django.contrib.auth import get_user_model

    from policylab.experiments import services
    from policylab.experiments.models import Experiment, Run

    experiment = Experiment.objects.get(project__team__slug="demo", name="demo_grpo_cpu")
    active = Run.objects.filter(experiment=experiment, status__in=ACTIVE_STATES).order_by("-pk").first()
    if active is not None:
        return active.pk, False
    user = get_user_model().objects.get(username=username)
    return services.launch_run(experiment, user, []).pk, True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("POLICYLAB_PORT", "8000")))
    parser.add_argument("--no-demo", action="store_true", help="start the platform without launching the demo run")
    parser.add_argument("--debug", action="store_true",
                        help="Django's DEBUG mode (tracebacks in the browser); never on a shared machine")
    args = parser.parse_args(argv)
    if args.debug:
        os.environ["DJANGO_DEBUG"] = "1"  # read by settings here and by every service started below

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "policylab.settings")
    import django
    from django.core.management import call_command

    django.setup()
    print("[run] migrating the database", flush=True)
    call_command("migrate", interactive=False, verbosity=0)

    stop_on_signals()
    try:
        with running_services(web_host=args.host, web_port=args.port, log=lambda line: print(f"[run] {line}", flush=True)):
            username = os.environ.get("POLICYLAB_DEMO_USER", "demo")
            call_command("bootstrap_demo", username=username)
            url = f"http://{args.host}:{args.port}/"
            if not args.no_demo:
                run_id, launched = launch_demo_run(username)
                state = "launched" if launched else "already active"
                print(f"[run] demo run {run_id} {state}: {url}runs/{run_id}/", flush=True)
            print(f"[run] PolicyLab is up at {url} (Ctrl-C stops everything started here)", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except ServiceError as error:
        print(f"[run] error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
