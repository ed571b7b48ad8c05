"""Fixtures shared by the unit tests."""

from __future__ import annotations

import threading
import time
from typing import Callable

import pytest


@pytest.fixture
def virtual_clock(monkeypatch) -> Callable[[], float]:
    """time.sleep returns at once and moves time.monotonic ahead instead: retries, backoffs and
    deadlines play out in virtual seconds, which the machine's load cannot stretch. Returns the
    clock."""
    real_monotonic, real_sleep = time.monotonic, time.sleep
    ahead = [0.0]
    lock = threading.Lock()

    def sleep(seconds: float) -> None:
        with lock:
            ahead[0] += max(0.0, seconds)
        real_sleep(0)

    monkeypatch.setattr(time, "monotonic", lambda: real_monotonic() + ahead[0])
    monkeypatch.setattr(time, "sleep", sleep)
    return time.monotonic
