"""A Spark standalone cluster on one machine whose workers look like separate hosts.

Speculative execution never runs a task's copy on the host of the original attempt, and in local or
local-cluster mode every executor is on the same host. Linux routes all of 127.0.0.0/8 to loopback,
so a master on 127.0.0.1 and workers bound to 127.0.0.2 and 127.0.0.3 make executors on two distinct
"hosts": speculation runs for real, and each executor is its own JVM that a test can kill.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Mapping

from txkafka.embedded_kafka import free_port


def _spark_class(env: Mapping[str, str]) -> tuple[str, str]:
    """The cluster's spark-class and SPARK_HOME: ``env``'s SPARK_HOME when it names one (the test
    run's, .ci/pytest_gate.py), else the installed pyspark's, as a user's would be."""
    home = env.get("SPARK_HOME")
    if not home:
        import pyspark

        home = os.path.dirname(pyspark.__file__)
    return os.path.join(home, "bin", "spark-class"), home


class SparkStandalone:
    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                 env: Mapping[str, str] | None = None) -> None:
        """``env``: the environment of the master, the workers and so of the executors they start
        (default: this process's, with executors on this interpreter)."""
        self.root = Path(root)
        self.env = dict(env) if env is not None else {**os.environ, "PYSPARK_PYTHON": sys.executable}
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.procs: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _launch(self, name: str, args: list[str], extra_env: dict[str, str]) -> subprocess.Popen:
        spark_class, home = _spark_class(self.env)
        # The workers' and executors' scratch space (an application's files, a packed
        # environment unpacked per executor: 300 MB) in the cluster's folder, not /tmp: an
        # executor killed at the end of a test never cleans up after itself.
        local = self.root / "local"
        local.mkdir(parents=True, exist_ok=True)
        env = {**self.env, "SPARK_HOME": home, "SPARK_LOG_DIR": str(self.root),
               "SPARK_LOCAL_DIRS": str(local), **extra_env}
        log = open(self.root / f"{name}.log", "ab")
        proc = subprocess.Popen([spark_class, *args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start(self, timeout: float = 120.0) -> str:
        self.root.mkdir(parents=True, exist_ok=True)
        self._launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                "--port", str(self.port), "--webui-port", "0"], {})
        for i in range(self.workers):
            host = f"127.0.0.{i + 2}"
            self._launch(f"worker{i + 1}", [
                "org.apache.spark.deploy.worker.Worker", "--host", host, "--cores", str(self.cores),
                "--memory", self.memory, "--webui-port", "0", "--work-dir",
                str(self.root / f"work{i + 1}"), self.master_url], {"SPARK_LOCAL_IP": host})
        deadline = time.monotonic() + timeout
        log = self.root / "master.log"
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace") if log.exists() else ""
            if len(re.findall(r"Registering worker", text)) >= self.workers:
                return self.master_url
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                break
            time.sleep(0.5)
        tail = "\n".join((self.root / f).read_text(errors="replace")[-2000:]
                         for f in os.listdir(self.root) if f.endswith(".log"))
        self.stop()
        raise RuntimeError(f"Spark standalone cluster did not start:\n{tail}")

    def executor_pids(self) -> list[int]:
        out = subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True,
                             text=True).stdout.split()
        # A worker launches its executors as children, in the session it was started in; their
        # command lines name neither the master's port nor this cluster's folder.
        sessions = {p.pid for p in self.procs}
        mine = []
        for pid in map(int, out):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                sid = os.getsid(pid)
            except OSError:
                continue
            if sid in sessions or str(self.root) in cmd or f"127.0.0.1:{self.port}" in cmd:
                mine.append(pid)
        return mine

    def stop(self) -> None:
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        for pid in self.executor_pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.procs.clear()


def running_cluster(root: Path, **how) -> Iterator[SparkStandalone]:
    """A fixture's cluster: started under ``root`` (``how``: SparkStandalone's settings), yielded,
    stopped; one that cannot start fails the test with its logs' tails, never a skip."""
    import pytest

    cluster = SparkStandalone(root, **how)
    try:
        cluster.start()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()
