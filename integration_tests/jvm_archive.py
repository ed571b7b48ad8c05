"""Every Spark driver the tests start shares one class-data-sharing archive
(txkafka.devtools.jvm_startup).

The archive is built in the background from the start of the session, while the unit tests run and
the broker's jars download; whatever starts a Spark driver calls ``ready()`` first, so the
``SPARK_SUBMIT_OPTS`` it inherits already name the archive.
"""

from __future__ import annotations

import threading

from txkafka.devtools.jvm_startup import use_spark_archive

_lock = threading.Lock()
_thread: threading.Thread | None = None


def start_building() -> None:
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=use_spark_archive, name="txkafka-cds", daemon=True)
            _thread.start()


def ready() -> None:
    """Wait for the archive (or for its build to give up: drivers then start at normal speed)."""
    start_building()
    assert _thread is not None
    _thread.join()
