"""The `policylab` client's tests talk to live servers (processes or pytest-django's live_server thread)
that share the test database: SQLite as a file (see tests/services.py)."""

from __future__ import annotations

from tests.services import use_file_sqlite_test_database

use_file_sqlite_test_database()
