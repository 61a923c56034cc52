"""`manage.py import_events RUN events.jsonl`: backfill a run from its JSONL file (idempotent)."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from policylab.experiments.models import Run
from policylab.tracking.ingest import ingest_events, read_jsonl

CHUNK = 5000


class Command(BaseCommand):
    help = "Store the events of an events.jsonl file for RUN (a run id); replaying a file never duplicates."

    def add_arguments(self, parser) -> None:
        parser.add_argument("run", type=int, help="platform run id (Run pk)")
        parser.add_argument("path", type=Path, help="an events.jsonl written by the trainer")
        parser.add_argument("--no-publish", action="store_true", help="do not notify open run pages")

    def handle(self, *args, run: int, path: Path, no_publish: bool, **options) -> None:
        if not Run.objects.filter(pk=run).exists():
            raise CommandError(f"run {run} does not exist")
        if not path.is_file():
            raise CommandError(f"{path}: no such file")
        events = read_jsonl(path)
        total = 0
        while chunk := list(islice(events, CHUNK)):
            ingest_events(chunk, run_id=run, publish=not no_publish, backfill_gaps=False)
            total += len(chunk)
        self.stdout.write(f"run {run}: {total} events from {path} ingested")
