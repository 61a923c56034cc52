"""The fault suite's stack (scripts/run_platform.py --nodes 2 on the test database) and its table, printed
at the end of the session (see harness.py)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "policylab.settings")

import django

django.setup()

import pytest  # noqa: E402

from tests.faults.harness import (  # noqa: E402
    FAULTS,
    LOCKED,
    ROWS,
    SEED,
    Client,
    Stack,
    client_for,
    make_experiment,
    table,
    tenant,
)
from tests.services import use_file_sqlite_test_database  # noqa: E402

use_file_sqlite_test_database()



@pytest.fixture(scope="package")
def fault_stack(shared_test_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from django.conf import settings

    stack = Stack(tmp_path_factory.mktemp("faults"), shared_test_database, secret_key=settings.SECRET_KEY)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()
        LOCKED.append((settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1], stack.log_count("database is locked")))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not ROWS:
        return
    order = [fault.name for fault in FAULTS]
    terminalreporter.write_sep("=", f"fault table (POLICYLAB_FAULT_SEED={SEED})")
    terminalreporter.write_line(table(sorted(ROWS, key=lambda row: order.index(row.fault))))
    for engine, count in LOCKED:
        terminalreporter.write_line(f"'database is locked' in the stack's service logs ({engine}): {count}")
    for row in ROWS:
        for problem in row.problems:
            terminalreporter.write_line(f"{row.fault}: {problem}")


@pytest.fixture
def tenant_client(fault_stack: Stack) -> tuple[Client, int]:
    """A user of a team of their own on the stack, the team's API client, and an experiment of the short demo."""
    user, team, project = tenant(f"faults-{uuid.uuid4().hex[:8]}")
    return client_for(fault_stack, user, team), make_experiment(project, user)
