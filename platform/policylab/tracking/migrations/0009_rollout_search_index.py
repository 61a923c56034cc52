"""The rollout search's index (issue 41, docs/decisions/0048-rollout-search-index.md): a sample's prompt and
response found by any substring of three characters or more without reading every sample of the run.

- SQLite: an FTS5 table with the trigram tokenizer (SQLite >= 3.34) over the samples' prompt and response,
  external-content (it stores the index, not a second copy of the text), kept in step by three triggers.
  A SQLite without the trigram tokenizer keeps the linear search (selectors.rollout_text_filter asks).
- PostgreSQL: pg_trgm GIN indexes on UPPER(prompt) and UPPER(response), the expressions Django's `icontains`
  compares, so the same query uses them.

Also an index on (run, stop_reason): every search answers with the run's stop reasons, which read the whole
run without it (most of the 1.1-2.4 s issue 41 measured, whatever the query).

Django never learns of these objects (no model state): the selector reaches the FTS table by name. A later
migration that rebuilds tracking_rolloutsample on SQLite (Django does that to alter a column) drops the
triggers with the old table; tests/platform/tracking/test_rollout_search_index.py fails until they are made
again (re-run `create_sqlite` below in that migration).
"""

from django.db import migrations, models

FTS = "tracking_rolloutsample_fts"
SAMPLES = "tracking_rolloutsample"

SQLITE_CREATE = [
    f"CREATE VIRTUAL TABLE {FTS} USING fts5(prompt, response, content='{SAMPLES}', content_rowid='id', "
    "tokenize='trigram')",
    f"CREATE TRIGGER {FTS}_insert AFTER INSERT ON {SAMPLES} BEGIN "
    f"INSERT INTO {FTS}(rowid, prompt, response) VALUES (new.id, new.prompt, new.response); END",
    f"CREATE TRIGGER {FTS}_delete AFTER DELETE ON {SAMPLES} BEGIN "
    f"INSERT INTO {FTS}({FTS}, rowid, prompt, response) VALUES ('delete', old.id, old.prompt, old.response); END",
    f"CREATE TRIGGER {FTS}_update AFTER UPDATE OF prompt, response ON {SAMPLES} BEGIN "
    f"INSERT INTO {FTS}({FTS}, rowid, prompt, response) VALUES ('delete', old.id, old.prompt, old.response); "
    f"INSERT INTO {FTS}(rowid, prompt, response) VALUES (new.id, new.prompt, new.response); END",
    f"INSERT INTO {FTS}({FTS}) VALUES ('rebuild')",  # the samples stored before this migration
]
SQLITE_DROP = [f"DROP TRIGGER IF EXISTS {FTS}_{event}" for event in ("insert", "delete", "update")] + [
    f"DROP TABLE IF EXISTS {FTS}"]

POSTGRES_CREATE = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",  # a trusted extension: the database's owner may create it
    f"CREATE INDEX IF NOT EXISTS rollout_prompt_trgm ON {SAMPLES} USING gin (UPPER(prompt) gin_trgm_ops)",
    f"CREATE INDEX IF NOT EXISTS rollout_response_trgm ON {SAMPLES} USING gin (UPPER(response) gin_trgm_ops)",
]
POSTGRES_DROP = ["DROP INDEX IF EXISTS rollout_prompt_trgm", "DROP INDEX IF EXISTS rollout_response_trgm"]


def sqlite_has_trigram(cursor) -> bool:
    try:
        cursor.execute("CREATE VIRTUAL TABLE temp.policylab_trigram_probe USING fts5(x, tokenize='trigram')")
    except Exception:  # sqlite3.OperationalError: no FTS5, or a SQLite older than 3.34
        return False
    cursor.execute("DROP TABLE temp.policylab_trigram_probe")
    return True


def create_sqlite(cursor) -> None:
    if sqlite_has_trigram(cursor):
        for statement in SQLITE_CREATE:
            cursor.execute(statement)


def create(apps, schema_editor) -> None:
    with schema_editor.connection.cursor() as cursor:
        if schema_editor.connection.vendor == "sqlite":
            create_sqlite(cursor)
        elif schema_editor.connection.vendor == "postgresql":
            for statement in POSTGRES_CREATE:
                cursor.execute(statement)


def drop(apps, schema_editor) -> None:
    statements = {"sqlite": SQLITE_DROP, "postgresql": POSTGRES_DROP}.get(schema_editor.connection.vendor, [])
    with schema_editor.connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


class Migration(migrations.Migration):

    dependencies = [
        ('tracking', '0008_run_profiles'),
    ]

    operations = [
        migrations.RunPython(create, drop, elidable=False),
        migrations.AddIndex(
            model_name='rolloutsample',
            index=models.Index(fields=['run', 'stop_reason'], name='rollout_run_stop_reason'),
        ),
    ]
