"""Fill MetricSummary for the points stored before it existed (ingest keeps it from then on)."""

from django.db import migrations
from django.db.models import Count, Max, Min, OuterRef, Subquery


def backfill(apps, schema_editor) -> None:
    MetricPoint = apps.get_model("tracking", "MetricPoint")
    MetricSummary = apps.get_model("tracking", "MetricSummary")
    last = MetricPoint.objects.filter(run_id=OuterRef("run_id"), key=OuterRef("key")).order_by("-step")
    grouped = (
        MetricPoint.objects.values("run_id", "key")
        .annotate(points=Count("id"), last_step=Max("step"), min_value=Min("value"), max_value=Max("value"),
                  first_time=Min("time"), last_value=Subquery(last.values("value")[:1]))
        .order_by()
    )
    batch = []
    for row in grouped.iterator(chunk_size=2000):
        batch.append(MetricSummary(**row))
        if len(batch) >= 2000:
            MetricSummary.objects.bulk_create(batch, ignore_conflicts=True)
            batch = []
    MetricSummary.objects.bulk_create(batch, ignore_conflicts=True)


class Migration(migrations.Migration):
    dependencies = [("tracking", "0003_inspector_and_summaries")]

    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
