"""The class-data-sharing archive only ever speeds Spark up: a failed build changes nothing."""

from __future__ import annotations

import os

from txkafka.devtools import jvm_startup


def test_a_failed_build_leaves_no_archive_and_no_jvm_options(tmp_path, monkeypatch):
    monkeypatch.setenv("TXKAFKA_CACHE", str(tmp_path))
    monkeypatch.delenv("TXKAFKA_NO_CDS", raising=False)
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Dmine=1")
    monkeypatch.setattr(jvm_startup, "_WARMUP", "import sys; sys.exit(7)")
    said: list[str] = []
    assert jvm_startup.use_spark_archive(said.append) is False
    assert os.environ["SPARK_SUBMIT_OPTS"] == "-Dmine=1"
    assert not list((tmp_path / "cds").glob("*.jsa*"))
    assert "no class-data-sharing archive" in said[-1]


def test_an_existing_archive_is_named_once_in_the_driver_options(tmp_path, monkeypatch):
    monkeypatch.setenv("TXKAFKA_CACHE", str(tmp_path))
    monkeypatch.delenv("TXKAFKA_NO_CDS", raising=False)
    monkeypatch.setenv("SPARK_SUBMIT_OPTS", "-Dmine=1")
    key = jvm_startup._fingerprint()
    assert key is not None  # java and pyspark are installed wherever the tests run
    archive = tmp_path / "cds" / f"spark-driver-{key}.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"archive")
    assert jvm_startup.use_spark_archive() and jvm_startup.use_spark_archive()
    opts = os.environ["SPARK_SUBMIT_OPTS"].split()
    assert opts[0] == "-Dmine=1" and opts.count(f"-XX:SharedArchiveFile={archive}") == 1
    assert "-Xlog:cds=off" in opts  # a mismatched archive must not print on drivers' stdout


def test_the_kill_switch(tmp_path, monkeypatch):
    monkeypatch.setenv("TXKAFKA_CACHE", str(tmp_path))
    monkeypatch.setenv("TXKAFKA_NO_CDS", "1")
    monkeypatch.delenv("SPARK_SUBMIT_OPTS", raising=False)
    assert jvm_startup.use_spark_archive() is False
    assert "SPARK_SUBMIT_OPTS" not in os.environ
