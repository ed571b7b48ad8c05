"""The Python worker's heap is frozen once by txkafka's first task (PySpark's daemon then collects
only what later tasks create), unless TXKAFKA_WORKER_GC_FREEZE=0."""

from __future__ import annotations

import os
import subprocess
import sys

_PROBE = """
import gc
from txkafka.python_datasource.spark_worker import freeze_worker_heap
freeze_worker_heap()
frozen = gc.get_freeze_count()
freeze_worker_heap()  # once per process: a second task freezes nothing more
class Cycle:
    pass
a, b = Cycle(), Cycle()
a.other, b.other = b, a
del a, b
print(frozen, gc.get_freeze_count() - frozen, gc.collect())
"""


def _probe(**env: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=120, check=True)
    return [int(x) for x in out.stdout.split()]


def test_first_task_freezes_the_import_time_heap_once():
    frozen, added, collected = _probe()
    assert frozen > 1000  # pyspark-free here; a real worker holds 50,000 and more
    assert added == 0
    assert collected >= 2  # what a task leaves in cycles afterwards is still collected


def test_the_freeze_can_be_turned_off():
    assert _probe(TXKAFKA_WORKER_GC_FREEZE="0")[0] == 0
