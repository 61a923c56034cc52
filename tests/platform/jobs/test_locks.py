"""Exclusive supervision: the Redis lock (real Redis, this session's own database)."""

from __future__ import annotations

import time

import pytest

from policylab.jobs.locks import LockLost, SupervisorLock, is_supervised


def test_one_supervisor_per_run_and_takeover_after_the_ttl(redis_db) -> None:
    first = SupervisorLock(redis_db, 901, ttl=1.0)
    second = SupervisorLock(redis_db, 901, ttl=1.0)
    assert first.acquire() and is_supervised(redis_db, 901)
    assert not second.acquire()  # a second supervisor does nothing
    first.refresh()  # heartbeats keep it
    time.sleep(1.3)  # ...until they stop (the worker died): the key expires
    assert not is_supervised(redis_db, 901)
    assert second.acquire()
    with pytest.raises(LockLost, match="run 901"):
        first.refresh()  # the stalled supervisor learns it lost the run
    first.release()  # and cannot release the new owner's lock
    assert is_supervised(redis_db, 901)
    second.release()
    assert not is_supervised(redis_db, 901)


def test_supervise_run_does_nothing_while_another_supervisor_holds_the_run(redis_db, settings) -> None:
    from policylab.jobs.tasks import supervise_run

    holder = SupervisorLock(redis_db, 902, ttl=30)
    assert holder.acquire()
    try:
        assert supervise_run(902) == "already supervised"  # runs the task body in this process
    finally:
        holder.release()
