"""Pipeline drivers as separate processes, crashed the way a machine crashes.

Each driver is started in a new session. PySpark's daemon puts its Python workers in process
groups of their own, so killing the driver's process group would leave workers running (and able
to open transactions after the "crash"); killing every process of the session does not.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from integration_tests import jvm_archive

REPO = Path(__file__).resolve().parents[2]
_BATCH = re.compile(r"^BATCH (\d+) rows=(\d+)", re.M)


def session_pids(sid: int) -> list[int]:
    """Every live process whose session id is ``sid`` (Linux /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) == sid:
                stat = Path(f"/proc/{entry}/stat").read_text()
                if ") Z" not in stat:
                    out.append(int(entry))
        except (OSError, ValueError):
            continue
    return out


class PipelineDriver:
    """``python -m txkafka.pipeline ...`` in its own session, output to ``log_path``."""

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        jvm_archive.ready()  # the environment copied below names it
        self.args = args
        self.log_path = Path(log_path)
        self.env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
                    "PYSPARK_DRIVER_PYTHON": sys.executable,
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                                os.environ.get("PYTHONPATH")])),
                    **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.started = 0.0

    def start(self) -> "PipelineDriver":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "txkafka.pipeline", *self.args], stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                start_new_session=True, cwd=str(REPO))
        self.started = time.monotonic()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def poll(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def alive(self) -> bool:
        return self.poll() is None and self.proc is not None

    def kill_session(self, timeout: float = 30.0) -> None:
        """SIGKILL every process of the driver's session (driver, JVM, Python workers)."""
        if self.proc is None:
            return
        deadline = time.monotonic() + timeout
        while True:
            victims = session_pids(self.proc.pid)
            if self.proc.poll() is None and self.proc.pid not in victims:
                victims.append(self.proc.pid)
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
            if self.proc.poll() is not None and not session_pids(self.proc.pid):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"driver session {self.proc.pid} survived SIGKILL for "
                                     f"{timeout}s: {session_pids(self.proc.pid)}")

    def reap_session(self, timeout: float = 20.0) -> None:
        """After the driver died by itself (an injected kill), make sure nothing of it lingers."""
        if self.proc is None:
            return
        deadline = time.monotonic() + timeout
        while session_pids(self.proc.pid):
            if time.monotonic() > deadline:
                self.kill_session()
                return
            time.sleep(0.1)

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = 40) -> str:
        # Progress bars and JVM stack frames hide the lines that explain a failure.
        text = [ln for ln in self.output().replace("\r", "\n").splitlines()
                if ln.strip() and not ln.startswith("[Stage") and not ln.lstrip().startswith("at ")
                and not ln.lstrip().startswith("^")]
        return "\n".join(text[-lines:])

    def batches(self) -> list[tuple[int, int]]:
        """(batch id, rows) of every BATCH line the driver printed."""
        return [(int(a), int(b)) for a, b in _BATCH.findall(self.output())]
