"""The whole platform on this machine, with the demo experiment running: what `bash scripts/run.sh`
starts once the environment is set up.

Order matters: the database is migrated before anything that reads it starts (ingest, web); then
Redis, a local Ray head, a Celery worker and beat, the ingest consumer and the ASGI server start
(each only when missing); then the demo user, team and experiment are created (once) and a demo
run is launched unless one is already active. A service that exits is started again
(services.Platform.restart_dead). Ctrl-C stops everything started here.

`--nodes 2` starts a Ray head and a second Ray node on this machine (each marked with its node
resource) and launches the demo with actor_train on the head and actor_infer on the second node.
Logs and runs go under $POLICYLAB_VAR_DIR (default var/), as the settings' own files do.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "platform")]

from scripts.services import DEFAULT_VAR_DIR, Platform, cpus_per_node, serve  # noqa: E402


def launch_demo_run(username: str, overrides: list[str]) -> tuple[int, bool]:
    """Launch a run of the demo experiment unless one is active; return (run id, launched now)."""
    from django.contrib.auth import get_user_model

    from policylab.experiments import services
    from policylab.experiments.models import Experiment, Run
    from policylab.experiments.statuses import ACTIVE

    experiment = Experiment.objects.get(project__team__slug="demo", name="demo_grpo_cpu")
    active = Run.objects.filter(experiment=experiment, status__in=ACTIVE).order_by("-pk").first()
    if active is not None:
        return active.pk, False
    user = get_user_model().objects.get(username=username)
    return services.launch_run(experiment, user, overrides).pk, True


def spread_over_nodes(nodes: int) -> list[str]:
    """Demo overrides that put actor_infer on the second node: devices count num_gpus_per_node per node."""
    if nodes < 2:
        return []
    per_node = cpus_per_node(nodes)
    return [f"num_gpus_per_node={per_node}", f"actor_infer.device_mapping=[{per_node}]"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("POLICYLAB_PORT", "8000")))
    parser.add_argument("--no-demo", action="store_true", help="start the platform without launching the demo run")
    parser.add_argument("--nodes", type=int, default=1,
                        help="Ray nodes on this machine: 2 starts a second node and spreads the demo run over both")
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

    def when_up(platform: Platform) -> None:
        username = os.environ.get("POLICYLAB_DEMO_USER", "demo")
        call_command("bootstrap_demo", username=username)
        url = f"http://{args.host}:{args.port}/"
        if not args.no_demo:
            run_id, launched = launch_demo_run(username, spread_over_nodes(args.nodes))
            state = "launched" if launched else "already active"
            print(f"[run] demo run {run_id} {state}: {url}runs/{run_id}/", flush=True)
        print(f"[run] PolicyLab is up at {url} (Ctrl-C stops everything started here)", flush=True)

    var_dir = Path(os.environ.get("POLICYLAB_VAR_DIR", DEFAULT_VAR_DIR))
    return serve(var_dir=var_dir, web_host=args.host, web_port=args.port, nodes=args.nodes,
                 log=lambda line: print(f"[run] {line}", flush=True), when_up=when_up, error_prefix="[run] ")


if __name__ == "__main__":
    sys.exit(main())
