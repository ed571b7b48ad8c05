"""A real Schema Registry on 127.0.0.1: Apicurio Registry, started from its Maven Central distribution.

Why: the formats (Avro, Protobuf, JSON Schema in Confluent's wire format) must be tested against a
real registry, and the project's machines have no Docker engine. Apicurio Registry (Apache-2.0)
serves Confluent's Schema Registry API at ``/apis/ccompat/v7`` and is published on Maven Central as
a runnable distribution, so it is fetched once with ``mvn`` into the cache the embedded Kafka uses
and run as a plain ``java`` process with in-memory storage. The same code backs the
``txkafka registry`` command and the integration tests' fixture.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from . import exit_codes
from .cli_options import add_json_flag, local_server_actions
from .cache import Progress, cache_dir, made_once
from .embedded_kafka import _pid_alive, _port_open, free_port

# Apicurio 3.0.x runs on Java 17 (3.1 and later need Java 21).
APICURIO_VERSION = os.environ.get("TXKAFKA_APICURIO_VERSION") or "3.0.9"
_ARTIFACT = "io.apicurio:apicurio-registry-app:{version}:tar.gz:all"
_RUNNER = "apicurio-registry-app-{version}-runner.jar"
CCOMPAT_PATH = "/apis/ccompat/v7"
# Confluent Schema Registry's default: a new version must read what the previous one wrote.
DEFAULT_COMPATIBILITY = "BACKWARD"



class EmbeddedRegistryError(RuntimeError):
    """The local registry could not be fetched or started; the message carries the log tail."""


def _stderr_progress(msg: str) -> None:
    print(f"[txkafka registry] {msg}", file=sys.stderr, flush=True)


def registry_home(progress: Progress = _stderr_progress, version: str = APICURIO_VERSION) -> Path:
    """The unpacked distribution's folder, fetched from Maven Central the first time."""
    home = cache_dir() / f"apicurio-registry-{version}"

    def fetch() -> None:
        if shutil.which("mvn") is None:
            raise EmbeddedRegistryError(
                "Maven ('mvn') is needed to fetch Apicurio Registry from Maven Central; install it "
                "(Debian: apt-get install maven), or point the option schema.registry.url at an "
                "existing registry.")
        if home.exists():
            shutil.rmtree(home)
        home.mkdir(parents=True)
        progress(f"fetching Apicurio Registry {version} from Maven Central (once, about 120 MB)")
        started = time.monotonic()
        cmd = ["mvn", "-B", "-q", "dependency:unpack",
               f"-Dartifact={_ARTIFACT.format(version=version)}", f"-DoutputDirectory={home}"]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              cwd=home)
        if proc.returncode != 0 or not (home / _RUNNER.format(version=version)).exists():
            raise EmbeddedRegistryError("mvn could not fetch Apicurio Registry:\n"
                                        + "\n".join(proc.stdout.splitlines()[-40:]))
        progress(f"Apicurio Registry ready in {home} ({time.monotonic() - started:.0f}s)")

    made_once(home / ".complete", cache_dir() / f".fetch-apicurio-{version}.lock", fetch,
              what=f"fetching Apicurio Registry {version}", progress=progress, marker=version)
    return home

@dataclass
class _State:
    port: int
    pid: int | None
    version: str


class EmbeddedRegistry:
    """One local Apicurio Registry with in-memory storage (its schemas die with the process).

    ``url`` is the Confluent-compatible API's root, the value of the option ``schema.registry.url``.
    Its health checks are served on the same loopback port (the distribution has no separate
    management interface).
    """

    def __init__(self, name: str = "default", *, root: Path | str | None = None,
                 heap: str = "256m", progress: Progress = _stderr_progress,
                 version: str = APICURIO_VERSION) -> None:
        self.name = name
        self.root = Path(root) if root else cache_dir() / "registries" / name
        self.heap = heap
        self.progress = progress
        self.version = version
        self.state: _State | None = None
        self._child: subprocess.Popen | None = None
        if self._state_path.exists():
            self.state = _State(**json.loads(self._state_path.read_text()))

    @property
    def _state_path(self) -> Path:
        return self.root / "registry.json"

    @property
    def log_path(self) -> Path:
        return self.root / "registry.log"

    @property
    def _marker(self) -> str:
        return f"-Dtxkafka.registry={self.root}"

    @property
    def url(self) -> str:
        if self.state is None:
            raise EmbeddedRegistryError(f"registry '{self.name}' was never started")
        return f"http://127.0.0.1:{self.state.port}{CCOMPAT_PATH}"

    def is_running(self) -> bool:
        return self.state is not None and _pid_alive(self.state.pid, self._marker)

    def status(self) -> dict:
        running = self.is_running()
        return {"name": self.name, "root": str(self.root),
                "url": self.url if self.state else None,
                "pid": self.state.pid if self.state else None,
                "version": self.state.version if self.state else None, "alive": running}

    def start(self, timeout: float = 120.0) -> str:
        """Start the registry (or return the running one), wait until it answers, return its URL."""
        if self.is_running():
            self.progress(f"registry '{self.name}' already running at {self.url}")
            self.wait_ready(timeout)
            return self.url
        self.stop(quiet=True)
        home = registry_home(self.progress, self.version)
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        port = free_port()
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get(
            "JAVA_HOME") else "java"
        cmd = [java, f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError",
               "-XX:TieredStopAtLevel=1", self._marker,
               "-Dquarkus.http.host=127.0.0.1", f"-Dquarkus.http.port={port}",
               # The distribution's default storage: an in-memory H2 database.
               "-Dapicurio.storage.kind=sql", "-Dapicurio.storage.sql.kind=h2",
               "-Dquarkus.http.access-log.enabled=false",
               "-jar", str(home / _RUNNER.format(version=self.version))]
        with open(self.log_path, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    cwd=self.root)
        self._child = proc
        # Between fork and exec /proc shows our own command line: wait for the JVM to appear.
        deadline = time.monotonic() + 10
        while proc.poll() is None and not _pid_alive(proc.pid, self._marker):
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        self.state = _State(port=port, pid=proc.pid, version=self.version)
        self._save()
        self.progress(f"started Apicurio Registry {self.version} on 127.0.0.1:{port}; waiting")
        self.wait_ready(timeout)
        self._request("PUT", "/config", {"compatibility": DEFAULT_COMPATIBILITY})
        self.progress(f"ready: {self.url}")
        return self.url

    def _save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self.state)))  # type: ignore[arg-type]
        tmp.replace(self._state_path)

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path, data=data, method=method,
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            return json.loads(resp.read() or b"{}")

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until the Confluent-compatible API answers."""
        assert self.state is not None
        deadline = time.monotonic() + timeout
        last = "port not open yet"
        while time.monotonic() < deadline:
            if not _pid_alive(self.state.pid, self._marker):
                raise EmbeddedRegistryError(
                    f"Apicurio Registry exited during start-up.\n{self.log_tail()}")
            if _port_open(self.state.port):
                try:
                    self._request("GET", "/config")
                    return
                except (OSError, urllib.error.URLError, ValueError) as e:
                    last = f"{type(e).__name__}: {e}"[:200]
            time.sleep(0.3)
        raise EmbeddedRegistryError(f"Apicurio Registry not ready after {timeout:.0f}s: {last}\n"
                                    + self.log_tail())

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return "(no log)"
        text = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        return "\n".join([f"--- {self.log_path} (last {lines} lines) ---", *text])

    def stop(self, quiet: bool = False) -> None:
        """SIGTERM, then SIGKILL after 15 s. Safe when nothing runs."""
        if self.state is None or not _pid_alive(self.state.pid, self._marker):
            return
        if not quiet:
            self.progress(f"stopping registry '{self.name}'")
        pid = self.state.pid
        assert pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while _pid_alive(pid, self._marker) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            time.sleep(0.2)
        if _pid_alive(pid, self._marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)
        self.state.pid = None
        self._save()

    def __enter__(self) -> "EmbeddedRegistry":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop(quiet=True)


def cmd_registry_start(args: argparse.Namespace) -> int:
    try:
        print(EmbeddedRegistry(args.name).start(timeout=args.timeout))
    except EmbeddedRegistryError as e:
        print(f"error: {e}", file=sys.stderr)
        return exit_codes.FINDINGS
    return exit_codes.OK


def cmd_registry_stop(args: argparse.Namespace) -> int:
    EmbeddedRegistry(args.name).stop()
    return exit_codes.OK


def cmd_registry_status(args: argparse.Namespace) -> int:
    reg = EmbeddedRegistry(args.name)
    st, running = reg.status(), reg.is_running()
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        print(f"registry {args.name}: " + (f"running at {st.get('url')}" if running
                                           else "not running"))
    return exit_codes.OK if running else exit_codes.NEEDS_OPERATOR


def register_cli(sub: argparse._SubParsersAction) -> None:
    rsub, named = local_server_actions(
        sub, "registry", "run a local Schema Registry (Apicurio, Confluent's API) for "
        "development, from Maven Central's jars", "registry")

    st = named(rsub.add_parser("start", help="start the local registry (or find it running) and "
                               "print its schema.registry.url"))
    st.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                    help="how long to wait until it answers")
    st.set_defaults(func=cmd_registry_start)
    named(rsub.add_parser("stop", help="stop the local registry (its schemas are kept in "
                          "memory: they go)")
          ).set_defaults(func=cmd_registry_stop)
    ss = named(rsub.add_parser("status", help="print whether the local registry runs, and where "
                               "(exit status 3 when not running)"))
    add_json_flag(ss, "the status")
    ss.set_defaults(func=cmd_registry_status)
