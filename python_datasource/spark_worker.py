"""Spark's Python worker process, as txkafka's tasks find it.

A reused PySpark worker (``spark.python.worker.reuse``, on by default) runs a full ``gc.collect()``
after every task (pyspark/daemon.py). A full collection walks every container object the process
holds, and a worker that has run txkafka's reader and writer holds ~80,000 of them (pyspark,
pyarrow, numpy, confluent-kafka, txkafka): that collection was the largest part of a Python task's
own cost in the ``tasks`` benchmark (docs/benchmarks.md), paid once per task whatever the task did.
"""

from __future__ import annotations

import gc
import os
import threading
from typing import Iterator, TypeVar

# `spark.executorEnv.TXKAFKA_WORKER_GC_FREEZE=0` turns the freeze off (for comparison).
FREEZE_ENV = "TXKAFKA_WORKER_GC_FREEZE"

_frozen_after: set[str] = set()
_lock = threading.Lock()
T = TypeVar("T")


def freeze_worker_heap(kind: str) -> None:
    """After the first task of each ``kind`` ("read", "write") in this worker process: collect,
    then move every object alive now into the collector's permanent generation (``gc.freeze``),
    so the daemon's collection after each task walks only what later tasks create.

    Called at the end of a task, so the modules that task imported lazily (the producer's
    client, pyarrow's compute functions, ...) are frozen too; the collection first means no
    garbage of that task is. Objects frozen with it (the task's own) are still freed by reference
    counting when the task drops them; only a reference cycle among them would stay, once per
    worker and kind.
    """
    if kind in _frozen_after:
        return
    with _lock:
        if kind in _frozen_after:
            return
        _frozen_after.add(kind)
        if os.environ.get(FREEZE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
            return
        gc.collect()
        gc.freeze()


def frozen_after(items: Iterator[T], kind: str) -> Iterator[T]:
    """``items``, then ``freeze_worker_heap(kind)`` once they are exhausted."""
    yield from items
    freeze_worker_heap(kind)
