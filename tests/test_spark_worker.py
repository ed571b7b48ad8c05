"""The Python worker's heap is frozen after txkafka's first read and first write task (PySpark's
daemon then collects only what later tasks create), unless TXKAFKA_WORKER_GC_FREEZE=0."""

from __future__ import annotations

import os
import subprocess
import sys

_PROBE = """
import gc, json
from txkafka.python_datasource.spark_worker import freeze_worker_heap, frozen_after
base = gc.get_freeze_count()  # some interpreters start with objects frozen (3.12: a few hundred)
seen = []
for _ in frozen_after(iter([1, 2]), "read"):
    seen.append(gc.get_freeze_count() - base)  # nothing frozen while the task runs
after_read = gc.get_freeze_count() - base
import decimal  # a module the write task imports lazily
freeze_worker_heap("write")
after_write = gc.get_freeze_count() - base
freeze_worker_heap("write")  # once per kind: a second write task freezes nothing more
class Cycle:
    pass
a, b = Cycle(), Cycle()
a.other, b.other = b, a
del a, b
print(json.dumps([seen, after_read, after_write, gc.get_freeze_count() - base - after_write,
                  gc.collect()]))
"""


def _probe(**env: str) -> list:
    import json

    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=120, check=True)
    return json.loads(out.stdout)


def test_first_read_and_first_write_task_freeze_the_heap_once_each():
    seen, after_read, after_write, added, collected = _probe()
    assert seen == [0, 0]
    assert after_read > 1000
    assert after_write > after_read  # the write task's lazy imports are frozen as well
    assert added == 0
    assert collected >= 2  # what a task leaves in cycles afterwards is still collected


def test_the_freeze_can_be_turned_off():
    assert _probe(TXKAFKA_WORKER_GC_FREEZE="0")[1:3] == [0, 0]
