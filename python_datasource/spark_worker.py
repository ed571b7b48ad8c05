"""Spark's Python worker process, as txkafka's tasks find it.

A reused PySpark worker (``spark.python.worker.reuse``, on by default) runs a full ``gc.collect()``
after every task (pyspark/daemon.py). A full collection walks every container object the process
holds, and a worker that has imported pyspark, pyarrow, confluent-kafka and txkafka holds
50,000-80,000 of them: that collection was the largest part of a Python task's own cost in the
``tasks`` benchmark (docs/benchmarks.md), paid once per task whatever the task did.
"""

from __future__ import annotations

import gc
import os
import threading

# `spark.executorEnv.TXKAFKA_WORKER_GC_FREEZE=0` turns the freeze off (for comparison).
FREEZE_ENV = "TXKAFKA_WORKER_GC_FREEZE"

_done = False
_lock = threading.Lock()


def freeze_worker_heap() -> None:
    """Once per worker process: collect, then move every object alive now (modules, classes,
    import-time state) into the collector's permanent generation (``gc.freeze``), so the daemon's
    collection after each task walks only what later tasks create.

    Frozen objects are still freed by reference counting as usual; only reference cycles among
    them are no longer collected, and they are import-time objects that live as long as the
    process anyway.
    """
    global _done
    if _done:
        return
    with _lock:
        if _done:
            return
        _done = True
        if os.environ.get(FREEZE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
            return
        gc.collect()
        gc.freeze()
