"""Spark's own Kafka connector looked up by name through Maven (a stand-in ``mvn`` here)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from txkafka import spark_kafka_packages as skp

FAKE_MVN = """#!/bin/sh
# Answers like mvn: exit 0 when the artifact is in $FAKE_MVN_HAS; dependency:copy writes the jar.
echo "$@" >> "$FAKE_MVN_LOG"
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


def test_the_installed_version_when_maven_resolves_it(mvn):
    log = mvn(f"{skp.CONNECTOR}:4.3.0", f"{skp.TOKEN_PROVIDER}:4.3.0")
    conf = skp.builtin_kafka_conf("4.3.0")
    assert conf["spark.jars.packages"] == f"org.apache.spark:{skp.CONNECTOR}:4.3.0"
    assert "spark.jars" not in conf and "spark.jars.excludes" not in conf
    assert all(line.split()[:3] == ["-B", "-q", "dependency:get"] for line in log.read_text().splitlines())
    log.unlink()
    assert skp.builtin_kafka_conf("4.3.0") == conf and not log.exists()  # cached answer


def test_an_older_connector_and_a_separate_token_provider(mvn, tmp_path):
    mvn(f"{skp.CONNECTOR}:4.2.0", f"{skp.TOKEN_PROVIDER}:4.1.0")
    conf = skp.builtin_kafka_conf("4.3.0")
    assert conf["spark.jars.packages"] == f"org.apache.spark:{skp.CONNECTOR}:4.2.0"
    assert conf["spark.jars.excludes"] == f"org.apache.spark:{skp.TOKEN_PROVIDER}"
    jar = Path(conf["spark.jars"])
    assert jar.name == f"{skp.TOKEN_PROVIDER}-4.1.0.jar" and jar.is_file()
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
