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
import socket
import stat
import sys
import threading
from typing import Iterator, Optional, TypeVar

# TXKAFKA_WORKER_GC_FREEZE=0 in the executors' environment turns the freeze off (for comparison;
# docs/user-guide.md, Python worker settings).
FREEZE_ENV = "TXKAFKA_WORKER_GC_FREEZE"

_frozen_after: set[str] = set()
_lock = threading.Lock()
T = TypeVar("T")


def _switched_off(name: str) -> bool:
    """An off switch of docs/user-guide.md's Python worker settings (on unless 0/false/no/off)."""
    return os.environ.get(name, "1").strip().lower() in ("0", "false", "no", "off")


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
        if _switched_off(FREEZE_ENV):
            return
        gc.collect()
        gc.freeze()


def frozen_after(items: Iterator[T], kind: str) -> Iterator[T]:
    """``items``, then ``freeze_worker_heap(kind)`` once they are exhausted."""
    yield from items
    freeze_worker_heap(kind)


# ----------------------------------------------------------------------------- the worker's socket

# TXKAFKA_WORKER_QUICKACK=0 in the executors' environment leaves the worker's socket as Spark made
# it (docs/user-guide.md, Python worker settings).
QUICKACK_ENV = "TXKAFKA_WORKER_QUICKACK"

_socket_checked = False
_socket_id: Optional[tuple[int, int, int]] = None  # (fd, st_dev, st_ino) of the worker's socket


def _worker_socket_fd() -> Optional[int]:
    """The file descriptor of the socket this Python worker talks to Spark's JVM through, as
    PySpark's worker loop holds it further up this task's stack: the daemon's ``sock`` (kept for
    the worker's life), else the worker's ``outfile`` or ``sock_file``."""
    frame = sys._getframe(1)
    found: Optional[int] = None
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("pyspark") or (module == "__main__" and "pyspark" in
                                            frame.f_code.co_filename):
            for name in ("sock", "outfile", "sock_file"):
                fd = _socket_fileno(frame.f_locals.get(name))
                if fd is not None:
                    found = fd
                    if name == "sock":
                        return fd
        frame = frame.f_back
    return found


def _socket_fileno(obj: object) -> Optional[int]:
    fileno = getattr(obj, "fileno", None)
    if fileno is None:
        return None
    try:
        fd = fileno()
        return fd if isinstance(fd, int) and fd >= 0 and stat.S_ISSOCK(os.fstat(fd).st_mode) \
            else None
    except (OSError, ValueError):
        return None


def _quickack() -> None:
    """``TCP_QUICKACK`` on the worker's socket, if it is still the one found (same fd, device and
    inode): acknowledge what the JVM sent at once and leave the kernel's interactive mode, in
    which it holds each acknowledgement for a reply."""
    if _socket_id is None:
        return
    fd, dev, ino = _socket_id
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (dev, ino):
            return
        sock = socket.socket(fileno=fd)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        finally:
            sock.detach()  # the fd stays PySpark's: never closed here
    except OSError:
        pass  # an acknowledgement's timing only: the task runs the same without it


def _after_collection(phase: str, info: dict) -> None:
    # PySpark's daemon runs gc.collect() after each task of a reused worker, after the task's last
    # write and before it reads the next task: the moment to leave interactive mode.
    if phase == "stop" and info.get("generation") == 2:
        _quickack()


def tune_worker_socket() -> None:
    """Once per worker process that runs a txkafka task: acknowledge the JVM's sends on the
    worker's TCP socket at once (``TCP_QUICKACK``) now and after each task.

    Spark's JVM sends a task's command and then its input in separate small writes, without
    ``TCP_NODELAY``: its Nagle algorithm holds the input until the worker acknowledges the
    command. A worker that answered the previous task is in the kernel's interactive (ping-pong)
    mode and holds that acknowledgement for a reply, up to its delayed-ACK timer (40 ms on
    Linux): every task of a reused worker waits that long. Leaving the mode after each task
    (it is re-entered when the worker answers) makes the kernel acknowledge as the worker reads.
    Only acknowledgement timing changes, never a byte sent. A Unix domain socket
    (``spark.python.unix.domain.socket.enabled``) has no such wait and is left alone, as is any
    platform without ``TCP_QUICKACK``."""
    global _socket_checked, _socket_id
    if _socket_checked:
        _quickack()
        return
    _socket_checked = True
    if _switched_off(QUICKACK_ENV):
        return
    if not hasattr(socket, "TCP_QUICKACK"):
        return
    fd = _worker_socket_fd()
    if fd is None:
        return
    try:
        probe = socket.socket(fileno=fd)
        try:
            tcp = probe.family in (socket.AF_INET, socket.AF_INET6) and \
                probe.type == socket.SOCK_STREAM
        finally:
            probe.detach()
        st = os.fstat(fd)
    except OSError:
        return
    if not tcp:
        return
    _socket_id = (fd, st.st_dev, st.st_ino)
    gc.callbacks.append(_after_collection)
    _quickack()
