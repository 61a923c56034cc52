"""`manage.py ingest_events`: the long-running consumer of the runs' Redis Streams."""

from __future__ import annotations

import signal

import redis
from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection

from policylab.tracking.streams import StreamIngestor


class Command(BaseCommand):
    help = "Consume every run's telemetry stream (policylab:run:<id>:events) into the database until stopped."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--redis-url", default=None, help="defaults to settings.REDIS_URL")
        parser.add_argument("--consumer", default=None, help="consumer name in the group (default host-pid)")
        parser.add_argument("--count", type=int, default=2000, help="entries per read")
        parser.add_argument("--claim-idle-ms", type=int, default=30_000, help="take over entries pending this long")

    def handle(self, *args, redis_url: str | None, consumer: str | None, count: int, claim_idle_ms: int, **options):
        stopping = False

        def stop(signum, frame) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        if connection.vendor == "sqlite":
            # The embedded database: WAL lets the web server read while ingest writes, and NORMAL
            # syncs once per checkpoint instead of at every batch's commit (still crash-safe).
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA journal_mode=WAL")
                cursor.execute("PRAGMA synchronous=NORMAL")
        client = redis.Redis.from_url(redis_url or settings.REDIS_URL)
        ingestor = StreamIngestor(client, consumer=consumer, count=count, claim_idle_ms=claim_idle_ms)
        self.stdout.write(f"ingest_events: consumer {ingestor.consumer} reading {redis_url or settings.REDIS_URL}")
        ingestor.run(should_stop=lambda: stopping)
        self.stdout.write("ingest_events: stopped")
