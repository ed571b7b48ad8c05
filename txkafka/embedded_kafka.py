"""A real Apache Kafka (KRaft) cluster on 127.0.0.1, started from Maven Central jars.

Why: exactly-once can only be tested against Apache Kafka itself, and the project's machines have no
Docker engine. Kafka is published on Maven Central as jars, so we fetch them once with ``mvn`` into a
cache, format KRaft storage and run each node as a plain ``java`` process. The same code backs the
``txkafka broker`` command, the demo and the pytest fixtures.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .cache import Progress, cache_dir, made_once

# The suite's version matrix: the newest Apache Kafka tested (the default) and the oldest (the
# sink's exactly_once needs transaction partition verification, Kafka 3.6+). Every test runs on
# the newest; the exactly-once subset (pytest marker ``kafka_matrix``) also on the oldest.
NEWEST_TESTED_KAFKA = "4.3.1"
OLDEST_TESTED_KAFKA = "3.6.2"
KAFKA_VERSION = os.environ.get("TXKAFKA_KAFKA_VERSION") or NEWEST_TESTED_KAFKA
BROKER_JVM_OPTIONS_ENV = "TXKAFKA_BROKER_JVM_OPTIONS"
LOG4J_VERSION = "2.25.2"
# Kafka 3.x logs through SLF4J 1.7 and log4j 1.x: its own distribution ships these two.
SLF4J_VERSION = "1.7.36"
RELOAD4J_VERSION = "1.2.25"
SCALA_BINARY = "2.13"

# librdkafka logs every refused connection while a broker starts; readiness polling is expected
# to see those, so its client logs go nowhere.
_QUIET = logging.getLogger("txkafka.embedded_kafka.librdkafka")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


class EmbeddedKafkaError(RuntimeError):
    """The local broker could not be fetched, formatted or started; the message carries the log tail."""


def _stderr_progress(msg: str) -> None:
    print(f"[txkafka broker] {msg}", file=sys.stderr, flush=True)


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.txkafka.local</groupId><artifactId>kafka-runtime</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version></dependency>
{logging}  </dependencies>
</project>
"""

_DEPENDENCY = """    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>
      <version>{version}</version></dependency>
"""

_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
"""

# Every request the broker completes, one JSON line each (Kafka's request log at DEBUG), in
# kafka-request.log: how benchmarks count a client's Produce requests as the broker saw them.
_REQUEST_LOG4J2 = """logger.request.level = DEBUG
logger.request.additivity = false
logger.request.appenderRef.requests.ref = REQUESTS
appender.requests.type = File
appender.requests.name = REQUESTS
appender.requests.fileName = ${sys:kafka.logs.dir}/kafka-request.log
appender.requests.layout.type = PatternLayout
appender.requests.layout.pattern = %m%n
"""
_REQUEST_LOG4J1 = """log4j.logger.kafka.request.logger=DEBUG, requests
log4j.additivity.kafka.request.logger=false
log4j.appender.requests=org.apache.log4j.FileAppender
log4j.appender.requests.File=${kafka.logs.dir}/kafka-request.log
log4j.appender.requests.layout=org.apache.log4j.PatternLayout
log4j.appender.requests.layout.ConversionPattern=%m%n
"""
REQUEST_LOG = "kafka-request.log"

_LOG4J1 = """log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=${kafka.logs.dir}/server.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
"""


@dataclass(frozen=True)
class KafkaRelease:
    """What differs between the Apache Kafka releases the embedded broker runs (3.3 and later).

    Kafka 4.0 moved the broker to log4j2 and added the ``transaction.version`` feature (KIP-890)
    and share groups; 3.9 added dynamic KRaft quorums (``--standalone``,
    ``controller.quorum.bootstrap.servers``); before that a quorum is a static voter list.
    """

    version: str

    def __post_init__(self) -> None:
        parts = self.version.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise ValueError(f"Kafka version {self.version!r}: expected MAJOR.MINOR.PATCH as "
                             "published on Maven Central, for example 4.3.1 or 3.6.2")
        if self.minor_version < (3, 3):
            raise ValueError(f"Kafka {self.version}: the embedded broker runs KRaft (no "
                             "ZooKeeper), production-ready from Kafka 3.3")

    @property
    def minor_version(self) -> tuple[int, int]:
        major, minor, _ = self.version.split(".")
        return int(major), int(minor)

    @property
    def log4j2(self) -> bool:
        return self.minor_version >= (4, 0)

    @property
    def dynamic_quorum(self) -> bool:
        return self.minor_version >= (3, 9)

    @property
    def transaction_version_feature(self) -> bool:
        return self.minor_version >= (4, 0)

    @property
    def share_groups(self) -> bool:
        return self.minor_version >= (4, 0)

    def pom(self) -> str:
        """The Maven project whose dependencies are the broker's runtime classpath."""
        if self.log4j2:
            # Kafka's pom names no logging backend: SLF4J 1.7's binding to log4j2.
            deps = [("org.apache.logging.log4j", a, LOG4J_VERSION)
                    for a in ("log4j-api", "log4j-core", "log4j-slf4j-impl")]
        else:
            deps = [("org.slf4j", "slf4j-reload4j", SLF4J_VERSION),
                    ("ch.qos.reload4j", "reload4j", RELOAD4J_VERSION)]
        logging_deps = "".join(_DEPENDENCY.format(group=g, artifact=a, version=v)
                               for g, a, v in deps)
        return _POM.format(scala=SCALA_BINARY, kafka=self.version, logging=logging_deps)

    @property
    def log_config_name(self) -> str:
        return "log4j2.properties" if self.log4j2 else "log4j.properties"

    def log_config(self, request_log: bool = False) -> str:
        if self.log4j2:
            return _LOG4J2.replace("logger.request.level = WARN\n", _REQUEST_LOG4J2) \
                if request_log else _LOG4J2
        return _LOG4J1.replace("log4j.logger.kafka.request.logger=WARN\n", _REQUEST_LOG4J1) \
            if request_log else _LOG4J1

    def log_jvm_options(self, node_dir: Path) -> list[str]:
        config = node_dir / self.log_config_name
        flag = (f"-Dlog4j2.configurationFile={config}" if self.log4j2
                else f"-Dlog4j.configuration=file:{config}")
        return [flag, f"-Dkafka.logs.dir={node_dir / 'logs'}"]


def kafka_jars(progress: Progress = _stderr_progress, version: str = KAFKA_VERSION) -> Path:
    """Return the folder of Kafka's runtime jars, fetching them from Maven Central the first time."""
    release = KafkaRelease(version)
    home = cache_dir() / f"kafka-{version}"
    lib = home / "lib"

    def fetch() -> None:
        if shutil.which("mvn") is None:
            raise EmbeddedKafkaError(
                "Maven ('mvn') is needed to fetch Apache Kafka jars from Maven Central; install it "
                "(Debian: apt-get install maven), or point TXKAFKA_BOOTSTRAP at an existing cluster."
            )
        home.mkdir(parents=True, exist_ok=True)
        (home / "pom.xml").write_text(release.pom())
        if lib.exists():
            shutil.rmtree(lib)
        progress(f"fetching Apache Kafka {version} jars from Maven Central (once, about 45 MB)")
        cmd = [
            "mvn", "-B", "-f", str(home / "pom.xml"),
            "dependency:copy-dependencies", f"-DoutputDirectory={lib}",
        ]
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        tail: list[str] = []
        fetched = 0
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-40:]
            if "Downloaded from" in line and line.rstrip().endswith(".jar"):
                fetched += 1
                if fetched % 10 == 0:
                    progress(f"  {fetched} jars downloaded ({time.monotonic() - started:.0f}s)")
        if proc.wait() != 0 or not any(lib.glob("kafka_*.jar")):
            raise EmbeddedKafkaError("mvn could not fetch Kafka jars:\n" + "\n".join(tail))
        progress(f"Kafka jars ready in {lib} ({time.monotonic() - started:.0f}s)")

    made_once(home / ".complete", cache_dir() / f".fetch-{version}.lock", fetch,
              what=f"fetching Kafka {version}'s jars", progress=progress, marker=version)
    return lib

def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """n distinct free ports: all held open until all are chosen, so none is handed out twice."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# Another process can take a chosen port before the broker binds it (ports are picked, then
# released, then bound by the JVM): such a start is retried on new ports.
_PORT_TAKEN = "Address already in use"
_START_ATTEMPTS = 3


def _random_cluster_id() -> str:
    """Kafka's Uuid.toString() form: URL-safe base64 of 16 bytes, no padding.

    Like Kafka's own Uuid.randomUuid(), never starts with "-": kafka-storage's argument
    parser would read such an id as an option and refuse to format (1 run in 64)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pid_alive(pid: int | None, marker: str) -> bool:
    """True when pid runs a Kafka JVM started for this node (guards against recycled pids)."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True  # no /proc (macOS): trust the pid
    stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    if ") Z" in stat:  # zombie: exited, not yet reaped
        return False
    return marker in cmdline


@dataclass
class NodeInfo:
    node_id: int
    broker_port: int
    controller_port: int
    directory: str
    pid: int | None = None
    extra_ports: dict[str, int] = field(default_factory=dict)

    @property
    def config_path(self) -> Path:
        return Path(self.directory) / "server.properties"

    @property
    def log_path(self) -> Path:
        return Path(self.directory) / "logs" / "server.log"

    @property
    def stdout_path(self) -> Path:
        return Path(self.directory) / "stdout.log"


class EmbeddedKafka:
    """One local KRaft cluster of 1 or 3 combined broker+controller nodes.

    ``version`` is the Apache Kafka release (default: ``TXKAFKA_KAFKA_VERSION``, else the newest
    tested). ``transaction_version`` (a Kafka 4.0+ feature) formats the cluster with that
    ``transaction.version``; 0 on Kafka 3.x is what the broker speaks anyway. ``listeners`` maps
    extra listener names to security protocols (for secured-cluster tests); their settings go in
    ``extra_config``. The PLAINTEXT listener always exists: it is the inter-broker
    listener and the one the readiness check uses. ``format_args`` are appended to StorageTool's
    ``format`` command (for example ``["--add-scram", "SCRAM-SHA-512=[name=u,password=p]"]``).
    ``request_log``: each node logs every request it completes (:meth:`request_log_path`).
    """

    def __init__(
        self,
        name: str = "default",
        nodes: int = 1,
        *,
        root: Path | str | None = None,
        transaction_version: int | None = None,
        version: str | None = None,
        extra_config: dict[str, str] | None = None,
        listeners: dict[str, str] | None = None,
        format_args: list[str] | None = None,
        heap: str = "768m",
        progress: Progress = _stderr_progress,
        request_log: bool = False,
    ) -> None:
        if nodes not in (1, 3):
            raise ValueError(f"nodes must be 1 or 3, got {nodes}")
        if transaction_version not in (None, 0, 1, 2):
            raise ValueError(f"transaction_version must be 0, 1 or 2, got {transaction_version}")
        self.release = KafkaRelease(version or KAFKA_VERSION)
        if not self.release.transaction_version_feature:
            if transaction_version not in (None, 0):
                raise ValueError(f"transaction.version {transaction_version} needs Kafka 4.0+; "
                                 f"Kafka {self.release.version} speaks only the protocol of "
                                 "transaction.version 0")
            transaction_version = None  # nothing to format: 3.x has only that protocol
        self.name = name
        self.nodes = nodes
        self.root = Path(root) if root else cache_dir() / "clusters" / name
        self.transaction_version = transaction_version
        self.extra_config = dict(extra_config or {})
        self.listeners = dict(listeners or {})
        self.format_args = list(format_args or [])
        self.heap = heap
        self.progress = progress
        self.request_log = request_log
        self.node_infos: list[NodeInfo] = []
        # The release that formatted the data on disk (restarting a node must use the same jars).
        self._state_version: str | None = None
        # Nodes started by this process (the CLI lets them outlive it; fixtures reap them).
        self._children: dict[int, subprocess.Popen] = {}
        self._load_state()

    # ------------------------------------------------------------------ state

    @property
    def _state_path(self) -> Path:
        return self.root / "cluster.json"

    def _load_state(self) -> None:
        if self._state_path.exists():
            state = json.loads(self._state_path.read_text())
            self.node_infos = [NodeInfo(**n) for n in state["nodes"]]
            self._state_version = state.get("kafka_version")

    def _save_state(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        state = {
            "name": self.name,
            "kafka_version": self._state_version,
            "transaction_version": self.transaction_version,
            "bootstrap_servers": self.bootstrap_servers if self.node_infos else None,
            "nodes": [asdict(n) for n in self.node_infos],
        }
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self._state_path)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{n.broker_port}" for n in self.node_infos)

    def listener_bootstrap(self, listener: str) -> str:
        return ",".join(f"127.0.0.1:{n.extra_ports[listener]}" for n in self.node_infos)

    def _marker(self, node: NodeInfo) -> str:
        return str(node.config_path)

    def alive_nodes(self) -> list[int]:
        return [n.node_id for n in self.node_infos if _pid_alive(n.pid, self._marker(n))]

    def is_running(self) -> bool:
        return bool(self.node_infos) and len(self.alive_nodes()) == len(self.node_infos)

    def status(self) -> dict:
        return {
            "name": self.name,
            "root": str(self.root),
            "kafka_version": self._state_version,
            "bootstrap_servers": self.bootstrap_servers if self.node_infos else None,
            "nodes": [
                {
                    "node_id": n.node_id,
                    "port": n.broker_port,
                    "pid": n.pid,
                    "alive": _pid_alive(n.pid, self._marker(n)),
                }
                for n in self.node_infos
            ],
        }

    # --------------------------------------------------------------- start/stop

    def start(self, timeout: float = 180.0) -> str:
        """Start the cluster (or return the running one) and wait until transactions work."""
        if (self.is_running() and len(self.node_infos) == self.nodes
                and self._state_version == self.release.version
                and (not self.request_log or self.request_log_path(1).exists())):
            self.progress(f"cluster '{self.name}' already running at {self.bootstrap_servers}")
            self.wait_ready(timeout)
            return self.bootstrap_servers
        self.stop(quiet=True)
        lib = kafka_jars(self.progress, self.release.version)
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                return self._start_once(lib, timeout)
            except EmbeddedKafkaError as e:
                if attempt == _START_ATTEMPTS or _PORT_TAKEN not in str(e):
                    raise
                self.progress(f"a chosen port was taken by another process before the broker "
                              f"bound it; starting again on new ports ({attempt + 1}/"
                              f"{_START_ATTEMPTS})")
                self.stop(quiet=True, graceful=False)  # its data is discarded anyway
        raise AssertionError("unreachable")

    def _start_once(self, lib: Path, timeout: float) -> str:
        if self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        self.node_infos = []
        self._state_version = self.release.version
        per_node = 2 + len(self.listeners)
        ports = free_ports(per_node * self.nodes)
        for i in range(1, self.nodes + 1):
            d = self.root / f"node{i}"
            (d / "logs").mkdir(parents=True)
            mine = ports[(i - 1) * per_node: i * per_node]
            extra = dict(zip(self.listeners, mine[2:]))
            self.node_infos.append(NodeInfo(i, mine[0], mine[1], str(d), None, extra))
        cluster_id = _random_cluster_id()
        for node in self.node_infos:
            node.config_path.write_text(self._server_properties(node))
            (Path(node.directory) / self.release.log_config_name).write_text(
                self.release.log_config(self.request_log))
        self.progress(f"formatting KRaft storage for {self.nodes} node(s) "
                      f"(Apache Kafka {self.release.version})")
        formats = [self._format(lib, node, cluster_id) for node in self.node_infos]
        for node, proc in zip(self.node_infos, formats):
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise EmbeddedKafkaError(f"formatting node {node.node_id} failed:\n{out[-3000:]}")
        for node in self.node_infos:
            self._launch(lib, node)
        self._save_state()
        self.progress(f"started {self.nodes} node(s); waiting until transactions work")
        self.wait_ready(timeout)
        self.progress(f"ready: bootstrap servers {self.bootstrap_servers}")
        return self.bootstrap_servers

    def _java_cmd(self, lib: Path, node: NodeInfo | None,
                  release: KafkaRelease | None = None) -> list[str]:
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get(
            "JAVA_HOME") else "java"
        cmd = [
            java, f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseSerialGC",
            "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
        ]
        if node is not None:
            cmd += (release or self.release).log_jvm_options(Path(node.directory))
        # Extra JVM options for the nodes (the test suite runs them with the JIT's first tier only).
        try:
            cmd += shlex.split(os.environ.get(BROKER_JVM_OPTIONS_ENV, ""))
        except ValueError as e:
            raise EmbeddedKafkaError(f"{BROKER_JVM_OPTIONS_ENV} is not a list of JVM options in "
                                     f"shell quoting ({e}); fix or unset it") from e
        return cmd + ["-cp", str(lib / "*")]

    def _format(self, lib: Path, node: NodeInfo, cluster_id: str) -> subprocess.Popen:
        cmd = self._java_cmd(lib, None) + self._format_args(node, cluster_id)
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def _format_args(self, node: NodeInfo, cluster_id: str) -> list[str]:
        """StorageTool's arguments: ``--standalone`` bootstraps a one-node dynamic quorum (3.9+);
        older releases and three nodes take the static voters in server.properties."""
        args = ["kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}",
                "-c", str(node.config_path)]
        if self.nodes == 1 and self.release.dynamic_quorum:
            args.append("--standalone")
        if self.transaction_version is not None:
            args += ["--feature", f"transaction.version={self.transaction_version}"]
        return args + self.format_args

    def _launch(self, lib: Path, node: NodeInfo, release: KafkaRelease | None = None) -> None:
        cmd = self._java_cmd(lib, node, release) + ["kafka.Kafka", str(node.config_path)]
        with open(node.stdout_path, "ab") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=node.directory,
            )
        node.pid = proc.pid
        self._children[node.node_id] = proc
        # Between fork and exec /proc shows our own command line: wait for the JVM to appear.
        deadline = time.monotonic() + 10
        while proc.poll() is None and not _pid_alive(proc.pid, self._marker(node)):
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)

    def _server_properties(self, node: NodeInfo) -> str:
        rf = 1 if self.nodes == 1 else 3
        min_isr = 1 if self.nodes == 1 else 2
        listeners = [f"PLAINTEXT://127.0.0.1:{node.broker_port}",
                     f"CONTROLLER://127.0.0.1:{node.controller_port}"]
        advertised = [f"PLAINTEXT://127.0.0.1:{node.broker_port}"]
        protocol_map = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        for lname, proto in self.listeners.items():
            listeners.append(f"{lname}://127.0.0.1:{node.extra_ports[lname]}")
            advertised.append(f"{lname}://127.0.0.1:{node.extra_ports[lname]}")
            protocol_map.append(f"{lname}:{proto}")
        props: dict[str, str] = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "listeners": ",".join(listeners),
            "advertised.listeners": ",".join(advertised),
            "listener.security.protocol.map": ",".join(protocol_map),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(Path(node.directory) / "data"),
            "num.partitions": "1",
            "default.replication.factor": str(rf),
            "min.insync.replicas": str(min_isr),
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(min_isr),
            "transaction.state.log.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "log.cleaner.dedupe.buffer.size": "16777216",
            "log.cleaner.threads": "1",
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            # Short checks so retention/deletion tests don't wait minutes.
            "log.retention.check.interval.ms": "2000",
            "log.segment.delete.delay.ms": "1000",
            "file.delete.delay.ms": "1000",
            # Orphan-transaction tests want the coordinator to expire timed-out ones quickly.
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "2000",
            "transaction.remove.expired.transaction.cleanup.interval.ms": "60000",
        }
        if self.release.share_groups:
            props["share.coordinator.state.topic.replication.factor"] = str(rf)
            props["share.coordinator.state.topic.min.isr"] = str(min_isr)
        if self.nodes == 1 and self.release.dynamic_quorum:
            props["controller.quorum.bootstrap.servers"] = f"127.0.0.1:{node.controller_port}"
        elif self.nodes == 1:
            props["controller.quorum.voters"] = f"{node.node_id}@127.0.0.1:{node.controller_port}"
        else:
            voters = ",".join(
                f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.node_infos
            )
            props["controller.quorum.voters"] = voters
            props["broker.session.timeout.ms"] = "6000"
            props["broker.heartbeat.interval.ms"] = "1000"
            props["unclean.leader.election.enable"] = "false"
        props.update(self.extra_config)
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def wait_ready(self, timeout: float = 180.0, nodes: int | None = None) -> None:
        """Block until ``nodes`` brokers are registered and a transaction commits end to end."""
        from confluent_kafka import KafkaException, Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        want = nodes if nodes is not None else len(self.node_infos)
        deadline = time.monotonic() + timeout
        last_err = "no attempt yet"
        announced = 0.0
        while time.monotonic() < deadline:
            dead = [n for n in self.node_infos if n.pid and not _pid_alive(n.pid, self._marker(n))]
            if nodes is None and dead:
                raise EmbeddedKafkaError(
                    f"Kafka node {dead[0].node_id} exited during start-up.\n" + self.log_tail(dead[0])
                )
            if time.monotonic() - announced > 10:
                announced = time.monotonic()
                if announced + 10 < deadline:
                    self.progress(f"  waiting for brokers ({last_err})")
            if not any(_port_open(n.broker_port) for n in self.node_infos):
                last_err = "broker port not open yet"
                time.sleep(0.3)
                continue
            try:
                admin = AdminClient({"bootstrap.servers": self.bootstrap_servers,
                                     "socket.timeout.ms": 3000, "logger": _QUIET})
                md = admin.list_topics(timeout=3)
                if len(md.brokers) < want:
                    last_err = f"{len(md.brokers)}/{want} brokers registered"
                    time.sleep(0.5)
                    continue
                topic = "__txkafka_ready"
                if topic not in md.topics:
                    rf = 1 if len(self.node_infos) == 1 else 3
                    fs = admin.create_topics([NewTopic(topic, 1, rf)], operation_timeout=10)
                    for f in fs.values():
                        try:
                            f.result(timeout=15)
                        except KafkaException as e:
                            if "TOPIC_ALREADY_EXISTS" not in str(e):
                                raise
                p = Producer({
                    "bootstrap.servers": self.bootstrap_servers,
                    "transactional.id": f"__txkafka_ready-{uuid.uuid4().hex[:8]}",
                    "transaction.timeout.ms": 10000,
                    "message.timeout.ms": 10000,
                    "logger": _QUIET,
                })
                p.init_transactions(15)
                p.begin_transaction()
                p.produce(topic, b"ready")
                p.commit_transaction(15)
                return
            except Exception as e:  # noqa: BLE001 - any failure means "not ready yet"
                last_err = f"{type(e).__name__}: {e}"[:200]
                time.sleep(1)
        raise EmbeddedKafkaError(
            f"Kafka cluster '{self.name}' not ready after {timeout:.0f}s: {last_err}\n"
            + "\n".join(self.log_tail(n) for n in self.node_infos)
        )

    def request_log_path(self, node_id: int) -> Path:
        """Where node ``node_id`` logs its requests (with ``request_log``)."""
        return Path(self._node(node_id).directory) / "logs" / REQUEST_LOG

    def log_tail(self, node: NodeInfo, lines: int = 40) -> str:
        chunks = []
        for path in (node.stdout_path, node.log_path):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                chunks.append(f"--- node {node.node_id} {path.name} (last {lines} lines) ---")
                chunks.extend(text)
        return "\n".join(chunks)

    def kill_node(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Kill one node (SIGKILL by default: a crash, not a clean shutdown)."""
        node = self._node(node_id)
        if node.pid and _pid_alive(node.pid, self._marker(node)):
            os.kill(node.pid, sig)
            self._wait_exit(node, 30)

    def pause_node(self, node_id: int) -> None:
        """Freeze one node (SIGSTOP): its sockets stay open and nothing answers, as on a host
        that hangs or a JVM in a long pause. ``resume_node`` continues it."""
        node = self._node(node_id)
        if not _pid_alive(node.pid, self._marker(node)):
            raise EmbeddedKafkaError(f"node {node_id} is not running")
        os.kill(node.pid, signal.SIGSTOP)  # type: ignore[arg-type]

    def resume_node(self, node_id: int) -> None:
        node = self._node(node_id)
        if node.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.pid, signal.SIGCONT)

    def start_node(self, node_id: int, timeout: float = 120.0) -> None:
        """Restart a stopped node on its old ports and data."""
        node = self._node(node_id)
        if _pid_alive(node.pid, self._marker(node)):
            return
        # The release that formatted the node's data, whatever this object would start afresh.
        release = KafkaRelease(self._state_version) if self._state_version else self.release
        self._launch(kafka_jars(self.progress, release.version), node, release)
        self._save_state()
        deadline = time.monotonic() + timeout
        while not _port_open(node.broker_port):
            if not _pid_alive(node.pid, self._marker(node)):
                raise EmbeddedKafkaError(f"node {node_id} exited on restart\n" + self.log_tail(node))
            if time.monotonic() > deadline:
                raise EmbeddedKafkaError(f"node {node_id} did not listen again\n" + self.log_tail(node))
            time.sleep(0.3)

    def _node(self, node_id: int) -> NodeInfo:
        for n in self.node_infos:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no node {node_id} in cluster '{self.name}'")

    def _wait_exit(self, node: NodeInfo, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _pid_alive(node.pid, self._marker(node)):
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(node.pid or -1, os.WNOHANG)
                return True
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(node.pid or -1, os.WNOHANG)
            time.sleep(0.2)
        return False

    def stop(self, quiet: bool = False, graceful: bool = True) -> None:
        """Stop every node: SIGTERM, then SIGKILL after 20 s (at once unless ``graceful``).
        Safe to call when nothing runs."""
        alive = [n for n in self.node_infos if _pid_alive(n.pid, self._marker(n))]
        if alive and not quiet:
            self.progress(f"stopping cluster '{self.name}' ({len(alive)} node(s))")
        for n in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(n.pid, signal.SIGTERM if graceful else signal.SIGKILL)  # type: ignore[arg-type]
        for n in alive:
            if not self._wait_exit(n, 20):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(n.pid, signal.SIGKILL)  # type: ignore[arg-type]
                self._wait_exit(n, 10)
        for n in self.node_infos:
            n.pid = None
        if self.node_infos:
            self._save_state()

    def destroy(self) -> None:
        """Stop and delete the cluster's data (no clean shutdown: the data is going anyway)."""
        self.stop(quiet=True, graceful=False)
        if self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)
        self.node_infos = []

    def __enter__(self) -> "EmbeddedKafka":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()
