"""The one SparkSession builder of txkafka's programs: shared settings, callers' settings win."""

from __future__ import annotations

import sys

from txkafka.spark_session import BASE_CONF, session_builder


def _options(builder) -> dict[str, str]:
    return dict(builder._options)  # the builder keeps its settings until getOrCreate()


def test_shared_settings_and_this_interpreter_for_executors():
    opts = _options(session_builder("app-x", "local[3]"))
    assert opts["spark.master"] == "local[3]" and opts["spark.app.name"] == "app-x"
    assert {k: opts[k] for k in BASE_CONF} == BASE_CONF
    assert opts["spark.executorEnv.PYSPARK_PYTHON"] == sys.executable


def test_a_callers_settings_win_and_builders_do_not_share_them():
    opts = _options(session_builder("a", conf={"spark.sql.shuffle.partitions": "7",
                                               "spark.driver.memory": "3g"}))
    assert opts["spark.sql.shuffle.partitions"] == "7" and opts["spark.driver.memory"] == "3g"
    assert "spark.driver.memory" not in _options(session_builder("b"))


def test_spark_kafka_adds_the_builtin_connectors_packages(monkeypatch):
    from txkafka import spark_kafka_packages

    monkeypatch.setattr(spark_kafka_packages, "builtin_kafka_conf",
                        lambda: {"spark.jars.packages": "g:a:1"})
    assert _options(session_builder("p", spark_kafka=True))["spark.jars.packages"] == "g:a:1"
