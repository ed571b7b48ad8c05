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


# The worker's socket: TCP_QUICKACK on it at a txkafka task's start and after each task (the
# daemon's gc.collect()). A socket in the kernel's interactive mode reads TCP_QUICKACK as 0; the
# probe puts it there (setsockopt 0) and reads it back after each step.
_SOCKET_PROBE = """
import gc, json, socket, sys
from txkafka.python_datasource import spark_worker

family = sys.argv[1]
if family == "tcp":
    server = socket.create_server(("127.0.0.1", 0))
    jvm = socket.create_connection(server.getsockname())
    sock, _ = server.accept()
else:
    sock, jvm = socket.socketpair(socket.AF_UNIX)

def quickack():
    if family != "tcp":
        return None
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)

def interactive():
    if family == "tcp":
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)

# PySpark's daemon holds the socket as `sock` in a function of a pyspark module.
daemon = {"__name__": "pyspark.daemon_probe", "spark_worker": spark_worker}
exec("def worker(sock):\\n    spark_worker.tune_worker_socket()\\n", daemon)

seen = {}
interactive()
seen["before"] = quickack()
daemon["worker"](sock)                  # the first txkafka task
seen["task"] = quickack()
interactive()
gc.collect(0)
seen["young_collection"] = quickack()   # only the daemon's full collection resets it
gc.collect()                            # the daemon, after the task
seen["after_task"] = quickack()
interactive()
daemon["worker"](sock)                  # a later task of the same worker
seen["next_task"] = quickack()
seen["callbacks"] = sum(cb is spark_worker._after_collection for cb in gc.callbacks)
jvm.sendall(b"x")
seen["received"] = sock.recv(1).decode()  # the socket still works: its fd was never closed
fd = sock.fileno()
sock.close()
other = socket.create_server(("127.0.0.1", 0))  # may reuse the fd number: not the worker's socket
if other.fileno() == fd:
    other.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
gc.collect()
seen["reused_fd_untouched"] = (other.fileno() != fd or
                               other.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK) == 0)
print(json.dumps(seen))
"""


def _socket_probe(family: str, **env: str) -> dict:
    import json

    out = subprocess.run([sys.executable, "-c", _SOCKET_PROBE, family], capture_output=True,
                         text=True, env={**os.environ, **env}, timeout=120, check=True)
    return json.loads(out.stdout)


def test_worker_tcp_socket_acknowledges_at_once_at_each_task_and_after_it():
    import pytest

    if not sys.platform.startswith("linux"):
        pytest.skip("TCP_QUICKACK is Linux's")
    seen = _socket_probe("tcp")
    assert seen == {"before": 0, "task": 1, "young_collection": 0, "after_task": 1,
                    "next_task": 1, "callbacks": 1, "received": "x", "reused_fd_untouched": True}


def test_worker_socket_setting_can_be_turned_off():
    import pytest

    if not sys.platform.startswith("linux"):
        pytest.skip("TCP_QUICKACK is Linux's")
    seen = _socket_probe("tcp", TXKAFKA_WORKER_QUICKACK="0")
    assert (seen["task"], seen["after_task"], seen["next_task"], seen["callbacks"]) == (0, 0, 0, 0)


def test_unix_domain_worker_socket_is_left_alone():
    seen = _socket_probe("unix")
    assert seen["callbacks"] == 0 and seen["received"] == "x"
