"""Run a Spark query driver in its own process group, so a test can SIGKILL it like a crash."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from integration_tests import jvm_archive

REPO = Path(__file__).resolve().parent.parent
# Drivers' logs live as long as the test process (a failing test's message carries the tail);
# TXKAFKA_KEEP_DRIVER_LOGS=1 keeps them.
_LOGS = tempfile.mkdtemp(prefix="txkafka-drivers-")
if not os.environ.get("TXKAFKA_KEEP_DRIVER_LOGS"):
    atexit.register(shutil.rmtree, _LOGS, True)


class DriverProcess:
    def __init__(self, script: str | Path, args: list[str], env: dict | None = None,
                 launcher: Sequence[str] = (), cwd: str | Path | None = None,
                 inherit_env: bool = True) -> None:
        """``env`` adds to the environment: this process's with the repository on the path and
        Spark's Python processes on this interpreter, or with ``inherit_env=False`` nothing else
        (a user's program: ``launcher``, e.g. another Python or spark-submit, runs ``script``
        instead of this interpreter, in ``cwd``)."""
        jvm_archive.ready()  # the environment copied below names it
        self.script = str(script)
        self.args = args
        self.launcher = list(launcher) or [sys.executable]
        self.cwd = cwd
        base = {**os.environ, "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get(
                    "PYTHONPATH")]))} if inherit_env else {}
        self.env = {**base, **(env or {})}
        fd, self.log_path = tempfile.mkstemp(prefix="driver-", suffix=".log", dir=_LOGS)
        os.close(fd)
        self.proc: subprocess.Popen | None = None

    def start(self) -> "DriverProcess":
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [*self.launcher, self.script, *self.args], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=self.env, cwd=self.cwd, start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Kill the whole process group: the Python driver, its JVM and its Python workers."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        # The JVM is a child in the same group; give it a moment to vanish.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def output(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def wait_for_output(self, needle: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.output():
                return True
            if not self.alive():
                return needle in self.output()
            time.sleep(0.2)
        return False
