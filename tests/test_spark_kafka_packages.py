"""Spark's own Kafka connector looked up by name through Maven (a stand-in ``mvn`` here)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from txkafka import spark_kafka_packages as skp

FAKE_MVN = """#!/bin/sh
# Answers like mvn: exit 0 when the artifact is in $FAKE_MVN_HAS; dependency:copy writes the jar;
# dependency:copy-dependencies of the closure project writes the connector's jar, a dependency's,
# and one of a library Spark ships itself.
echo "$@" >> "$FAKE_MVN_LOG"
if [ "$5" = "dependency:copy-dependencies" ]; then
  [ -n "$FAKE_MVN_CLOSURE_FAILS" ] && { echo "Could not resolve dependencies"; exit 1; }
  out=${6#-DoutputDirectory=}; v=$(grep spark-sql-kafka "$4" | sed -n 's:.*<version>\\([0-9][^<]*\\)</version>.*:\\1:p')
  for j in spark-sql-kafka-0-10_2.13-$v kafka-clients-3.9.2 slf4j-api-1.7.36; do echo jar > "$out/$j.jar"; done
  exit 0
fi
for a in "$@"; do
  case "$a" in -Dartifact=*) art=${a#-Dartifact=}; art=${art%:pom};; -DoutputDirectory=*) out=${a#-DoutputDirectory=};; esac
done
case " $FAKE_MVN_HAS " in *" $art "*) ;; *) echo "Could not find artifact $art"; exit 1;; esac
if [ "$2" = "-q" ] && [ "$3" = "dependency:copy" ]; then
  a=${art#*:}; echo jar > "$out/${a%%:*}-${a#*:}.jar"
fi
"""


@pytest.fixture
def mvn(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "mvn"
    script.write_text(FAKE_MVN)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("TXKAFKA_CACHE", str(tmp_path / "cache"))
    log = tmp_path / "mvn.log"
    monkeypatch.setenv("FAKE_MVN_LOG", str(log))

    def has(*coordinates: str) -> Path:
        monkeypatch.setenv("FAKE_MVN_HAS", " ".join(f"org.apache.spark:{c}" for c in coordinates))
        return log

    return has


def _jar_names(conf: dict[str, str]) -> list[str]:
    return [Path(j).name for j in conf["spark.jars"].split(",")]


def test_the_installed_version_when_maven_resolves_it(mvn, tmp_path):
    log = mvn(f"{skp.CONNECTOR}:4.3.0", f"{skp.TOKEN_PROVIDER}:4.3.0")
    conf = skp.builtin_kafka_conf("4.3.0")
    # The connector and its dependencies as jars, without the ones Spark ships (slf4j-api); never
    # through Spark's Ivy (spark.jars.packages), which fails on a POM in ~/.m2 without its jar.
    assert list(conf) == ["spark.jars"]
    assert _jar_names(conf) == ["kafka-clients-3.9.2.jar", f"{skp.CONNECTOR}-4.3.0.jar"]
    assert all(Path(j).is_file() for j in conf["spark.jars"].split(","))
    calls = [line.split() for line in log.read_text().splitlines()]
    assert all(c[3].endswith(":pom") for c in calls if c[2] == "dependency:get")
    closure = [c for c in calls if "dependency:copy-dependencies" in c]
    assert len(closure) == 1 and "<exclusion>" not in Path(closure[0][3]).read_text()
    log.unlink()
    assert skp.builtin_kafka_conf("4.3.0") == conf and not log.exists()  # cached answer


def test_a_cached_answer_whose_jars_are_gone_is_resolved_again(mvn, tmp_path):
    log = mvn(f"{skp.CONNECTOR}:4.3.0", f"{skp.TOKEN_PROVIDER}:4.3.0")
    conf = skp.builtin_kafka_conf("4.3.0")
    Path(conf["spark.jars"].split(",")[-1]).unlink()
    log.unlink()
    assert skp.builtin_kafka_conf("4.3.0") == conf
    assert any("dependency:copy-dependencies" in line for line in log.read_text().splitlines())
    assert all(Path(j).is_file() for j in conf["spark.jars"].split(","))


def test_jars_that_cannot_be_fetched_say_so(mvn, monkeypatch):
    mvn(f"{skp.CONNECTOR}:4.3.0", f"{skp.TOKEN_PROVIDER}:4.3.0")
    monkeypatch.setenv("FAKE_MVN_CLOSURE_FAILS", "1")
    with pytest.raises(skp.SparkKafkaPackageError, match="could not fetch the jars"):
        skp.builtin_kafka_conf("4.3.0")


def test_jar_names_without_their_versions():
    assert skp._artifact_name(f"{skp.CONNECTOR}-4.2.0.jar") == skp.CONNECTOR
    assert skp._artifact_name("scala-parallel-collections_2.13-1.2.0.jar") == "scala-parallel-collections_2.13"
    assert skp._artifact_name("guava-33.0-jre.jar") == "guava"


def test_an_older_connector_and_a_separate_token_provider(mvn, tmp_path):
    mvn(f"{skp.CONNECTOR}:4.2.0", f"{skp.TOKEN_PROVIDER}:4.1.0")
    conf = skp.builtin_kafka_conf("4.3.0")
    assert _jar_names(conf) == [f"{skp.TOKEN_PROVIDER}-4.1.0.jar", "kafka-clients-3.9.2.jar",
                                f"{skp.CONNECTOR}-4.2.0.jar"]
    closure = tmp_path / "cache" / "spark-kafka" / "jars-4.2.0" / "closure.pom.xml"
    assert f"<artifactId>{skp.TOKEN_PROVIDER}</artifactId></exclusion>" in closure.read_text()
    saved = json.loads((tmp_path / "cache" / "spark-kafka" / "resolved-4.3.0.json").read_text())
    assert saved == conf


def test_nothing_resolvable_says_so(mvn):
    mvn()
    with pytest.raises(skp.SparkKafkaPackageError, match="resolves no"):
        skp.builtin_kafka_conf("4.3.0")


def test_no_maven_names_the_way_out(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("TXKAFKA_CACHE", str(tmp_path / "cache"))
    with pytest.raises(skp.SparkKafkaPackageError, match="--skip-builtin"):
        skp.builtin_kafka_conf("4.3.0")
