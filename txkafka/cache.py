"""txkafka's cache of fetched and built tools (Kafka's jars, the registry, the S3 server, Spark
packages): where it is, the file lock that serialises processes, and "fetch or build once".

Why one owner: several processes (pytest workers, CI's early build, two commands) may ask for
the same tool at once; exactly one of them must make it while the others wait, and a tool half
made by a killed process must never look ready. The standard library only: CI's system Python
builds the S3 server with it before the project's environment exists.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Callable, Iterator

Progress = Callable[[str], None]


def cache_dir() -> Path:
    """Where jars, built servers (and by default clusters) live; survives between runs, never
    committed. ``$TXKAFKA_CACHE``, else ``$XDG_CACHE_HOME/txkafka`` or ``~/.cache/txkafka``."""
    root = os.environ.get("TXKAFKA_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "txkafka"
    )
    return Path(root)


@contextlib.contextmanager
def file_lock(path: Path, *, waiting: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive lock on ``path`` (created), across processes, released on exit or death.
    ``waiting``: called once if another process holds it (before this one blocks)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def made_once(ready: Path, lock: Path, make: Callable[[], None], *, what: str,
              progress: Progress | None = None, marker: str | None = None) -> bool:
    """Make a cached tool once, whichever process asks first: ``ready`` exists once it is made.

    Without ``ready``, under ``lock``: ``make()``, then (``marker`` given) ``ready`` is written
    with it, last, so a process killed part-way leaves no ``ready`` and the next one makes it
    again. Without ``marker``, ``make`` creates ``ready`` itself as its last step (a rename).
    A process that finds the lock held says so through ``progress`` and waits for it. Returns
    whether this call made it (False: it was ready)."""
    if ready.exists():
        return False

    def waiting() -> None:
        if progress is not None:
            progress(f"waiting for another process to finish {what} (lock {lock})")

    with file_lock(lock, waiting=waiting):
        if ready.exists():
            return False
        make()
        if marker is not None:
            ready.write_text(marker)
        if not ready.exists():
            raise RuntimeError(f"{what}: finished without {ready}")
    return True
