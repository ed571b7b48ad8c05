"""The embedded broker's configuration per Apache Kafka release: the jars Maven resolves, logging,
the KRaft quorum and format arguments, and the features a release does not have. The version
matrix's integration run (make test) starts both tested releases for real."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from txkafka import embedded_kafka
from txkafka.embedded_kafka import (
    NEWEST_TESTED_KAFKA,
    OLDEST_TESTED_KAFKA,
    EmbeddedKafka,
    EmbeddedKafkaError,
    KafkaRelease,
    NodeInfo,
)


def _cluster(tmp_path: Path, version: str, nodes: int = 1, **kw) -> EmbeddedKafka:
    """A cluster with its nodes laid out (as a start would) but nothing formatted or launched."""
    c = EmbeddedKafka("versions", nodes, root=tmp_path / version, version=version,
                      progress=lambda m: None, **kw)
    c.node_infos = [NodeInfo(i, 9000 + 10 * i, 9001 + 10 * i, str(tmp_path / f"node{i}"))
                    for i in range(1, nodes + 1)]
    return c


def _props(c: EmbeddedKafka, node_index: int = 0) -> dict[str, str]:
    text = c._server_properties(c.node_infos[node_index])
    return dict(line.split("=", 1) for line in text.splitlines())


def _log_options(c: EmbeddedKafka) -> list[str]:
    cmd = c._java_cmd(Path("/lib"), c.node_infos[0])
    return [a for a in cmd if a.startswith(("-Dlog4j", "-Dkafka.logs"))]


def _dependencies(pom: str) -> dict[str, str]:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.fromstring(pom)
    return {f"{d.find('m:groupId', ns).text}:{d.find('m:artifactId', ns).text}":
            d.find("m:version", ns).text for d in root.iterfind(".//m:dependency", ns)}


def test_the_tested_releases_are_the_matrix_ends():
    assert KafkaRelease(OLDEST_TESTED_KAFKA).minor_version == (3, 6)  # exactly_once's minimum
    assert KafkaRelease(NEWEST_TESTED_KAFKA).minor_version >= (4, 0)
    assert EmbeddedKafka("x", root="/nonexistent").release.version == embedded_kafka.KAFKA_VERSION


def test_the_version_comes_from_the_environment():
    code = "from txkafka.embedded_kafka import EmbeddedKafka as E; print(E('x').release.version)"
    env = {k: v for k, v in os.environ.items() if k != "TXKAFKA_KAFKA_VERSION"}
    for value, want in (("3.6.2", "3.6.2"), ("", NEWEST_TESTED_KAFKA), (None, NEWEST_TESTED_KAFKA)):
        run_env = dict(env) if value is None else {**env, "TXKAFKA_KAFKA_VERSION": value}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=run_env, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == want


@pytest.mark.parametrize("version", ["3.6", "3.6.2.1", "4.x.1", "latest", "3.2.3", "2.8.2"])
def test_versions_that_cannot_run_are_refused(version):
    with pytest.raises(ValueError, match=re.escape(version)):
        KafkaRelease(version)


_LOGGING = {
    # Kafka 4 logs through log4j2 (SLF4J 1.7's binding); Kafka 3 through log4j 1 (reload4j), as
    # each release's own distribution does.
    "4.3.1": ({"org.apache.logging.log4j:log4j-api": embedded_kafka.LOG4J_VERSION,
               "org.apache.logging.log4j:log4j-core": embedded_kafka.LOG4J_VERSION,
               "org.apache.logging.log4j:log4j-slf4j-impl": embedded_kafka.LOG4J_VERSION},
              "-Dlog4j2.configurationFile=", "log4j2.properties",
              "appender.file.fileName = ${sys:kafka.logs.dir}/server.log"),
    "3.6.2": ({"org.slf4j:slf4j-reload4j": embedded_kafka.SLF4J_VERSION,
               "ch.qos.reload4j:reload4j": embedded_kafka.RELOAD4J_VERSION},
              "-Dlog4j.configuration=file:", "log4j.properties",
              "log4j.appender.file.File=${kafka.logs.dir}/server.log"),
}


@pytest.mark.parametrize("version", sorted(_LOGGING))
def test_jars_and_logging_per_release(tmp_path, version):
    logging_jars, flag, config_name, log_file_line = _LOGGING[version]
    assert _dependencies(KafkaRelease(version).pom()) == {
        "org.apache.kafka:kafka_2.13": version, **logging_jars}
    c = _cluster(tmp_path, version)
    node_dir = Path(c.node_infos[0].directory)
    assert c.release.log_config_name == config_name
    assert _log_options(c) == [f"{flag}{node_dir / config_name}",
                               f"-Dkafka.logs.dir={node_dir / 'logs'}"]
    assert log_file_line in c.release.log_config().splitlines()
    # request_log: the request logger at DEBUG, to its own file, not to server.log
    quiet, logged = c.release.log_config(), c.release.log_config(request_log=True)
    assert "kafka-request.log" not in quiet and "kafka-request.log" in logged
    assert ("logger.request.level = DEBUG" in logged.splitlines() if c.release.log4j2
            else "log4j.logger.kafka.request.logger=DEBUG, requests" in logged.splitlines())
    assert "WARN" not in "".join(line for line in logged.splitlines() if "request" in line)


def test_one_node_quorum_is_dynamic_from_3_9_and_static_before(tmp_path):
    for version in ("4.3.1", "3.9.1"):
        c = _cluster(tmp_path, version)
        props = _props(c)
        assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:9011"
        assert "controller.quorum.voters" not in props
        assert "--standalone" in c._format_args(c.node_infos[0], "CID")
    for version in ("3.8.1", "3.6.2"):
        c = _cluster(tmp_path, version)
        props = _props(c)
        assert props["controller.quorum.voters"] == "1@127.0.0.1:9011"
        assert "controller.quorum.bootstrap.servers" not in props
        assert "--standalone" not in c._format_args(c.node_infos[0], "CID")


@pytest.mark.parametrize("version", ["4.3.1", "3.6.2"])
def test_three_nodes_have_static_voters_on_every_release(tmp_path, version):
    c = _cluster(tmp_path, version, nodes=3)
    for i in range(3):
        props = _props(c, i)
        assert props["controller.quorum.voters"] == ("1@127.0.0.1:9011,2@127.0.0.1:9021,"
                                                     "3@127.0.0.1:9031")
        assert props["transaction.state.log.replication.factor"] == "3"
        assert props["transaction.state.log.min.isr"] == "2"
        assert "--standalone" not in c._format_args(c.node_infos[i], "CID")


def test_settings_every_release_needs_for_transactions(tmp_path):
    for version in ("4.3.1", "3.6.2"):
        props = _props(_cluster(tmp_path, version))
        assert props["process.roles"] == "broker,controller"
        assert props["transaction.state.log.replication.factor"] == "1"
        assert props["transaction.state.log.min.isr"] == "1"
        assert props["offsets.topic.replication.factor"] == "1"
        assert props["listeners"] == "PLAINTEXT://127.0.0.1:9010,CONTROLLER://127.0.0.1:9011"
    # Share groups are Kafka 4.0+: an older broker would only warn about unknown settings.
    assert _props(_cluster(tmp_path, "4.3.1"))["share.coordinator.state.topic.min.isr"] == "1"
    assert not any(k.startswith("share.") for k in _props(_cluster(tmp_path, "3.6.2")))


def test_transaction_version_is_a_kafka_4_feature(tmp_path):
    args = _cluster(tmp_path, "4.3.1", transaction_version=0)._format_args(
        NodeInfo(1, 1, 2, str(tmp_path)), "CID")
    assert args[args.index("--feature") + 1] == "transaction.version=0"
    # Kafka 3.x speaks only the protocol of transaction.version 0: nothing to format.
    old = _cluster(tmp_path, "3.6.2", transaction_version=0)
    assert old.transaction_version is None
    assert "--feature" not in old._format_args(old.node_infos[0], "CID")
    for tv in (1, 2):
        with pytest.raises(ValueError, match="needs Kafka 4.0"):
            EmbeddedKafka("x", root=tmp_path / "x", version="3.6.2", transaction_version=tv)


def test_format_arguments_name_the_cluster_and_the_config(tmp_path):
    c = _cluster(tmp_path, "3.6.2", format_args=["--add-scram", "SCRAM-SHA-512=[name=u,password=p]"])
    node = c.node_infos[0]
    assert c._format_args(node, "CID") == [
        "kafka.tools.StorageTool", "format", "--cluster-id=CID", "-c", str(node.config_path),
        "--add-scram", "SCRAM-SHA-512=[name=u,password=p]"]


@pytest.mark.parametrize("running, outcome", [
    ("4.3.1", ["reused"]),
    ("3.6.2", ["stopped", "jars 4.3.1", "started"]),
])
def test_a_running_cluster_is_reused_only_if_it_runs_the_release_asked_for(
        tmp_path, monkeypatch, running, outcome):
    c = _cluster(tmp_path, "4.3.1")
    c._state_version = running
    calls = []
    monkeypatch.setattr(c, "is_running", lambda: True)
    monkeypatch.setattr(c, "wait_ready", lambda timeout: calls.append("reused"))
    monkeypatch.setattr(c, "stop", lambda **kw: calls.append("stopped"))
    monkeypatch.setattr(embedded_kafka, "kafka_jars",
                        lambda progress, version: calls.append(f"jars {version}") or tmp_path)
    monkeypatch.setattr(c, "_start_once", lambda lib, timeout: calls.append("started"))
    c.start()
    assert calls == outcome


def test_broker_jvm_options_from_the_environment_go_before_the_classpath(tmp_path, monkeypatch):
    c = _cluster(tmp_path, NEWEST_TESTED_KAFKA)
    monkeypatch.delenv(embedded_kafka.BROKER_JVM_OPTIONS_ENV, raising=False)
    plain = c._java_cmd(Path("/lib"), c.node_infos[0])
    monkeypatch.setenv(embedded_kafka.BROKER_JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1 -Dx='a b'")
    cmd = c._java_cmd(Path("/lib"), c.node_infos[0])
    assert cmd[:len(plain) - 2] == plain[:-2] and cmd[-2:] == ["-cp", "/lib/*"]
    assert cmd[len(plain) - 2:-2] == ["-XX:TieredStopAtLevel=1", "-Dx=a b"]
    monkeypatch.setenv(embedded_kafka.BROKER_JVM_OPTIONS_ENV, "-Dx='unclosed")
    with pytest.raises(EmbeddedKafkaError, match="TXKAFKA_BROKER_JVM_OPTIONS is not a list"):
        c._java_cmd(Path("/lib"), c.node_infos[0])
