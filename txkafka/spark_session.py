"""The SparkSession of txkafka's own programs: tests, the demo's pipeline, the benchmark, the JVM
start-up archive's warm-up and the tests' driver scripts.

One place for what they share: a loopback driver (no network but 127.0.0.1 needed), no UI, few
shuffle partitions (Spark's 200 cost ~20 ms of Python worker time each per batch on 2 cores),
UTC, every secret option hidden in the plans Spark shows, and executors started on this
interpreter (the one txkafka is installed in; Spark would start ``python3`` from PATH). Callers add
what differs through ``conf``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Mapping

from .connector.secrets_redaction import SPARK_OPTIONS_REDACTION_REGEX

BASE_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    # The plans Spark shows (explain, event log) hide every secret option, not only passwords.
    "spark.sql.redaction.options.regex": SPARK_OPTIONS_REDACTION_REGEX,
}


def session_builder(app: str, master: str = "local[2]", conf: Mapping[str, str] | None = None,
                    *, spark_kafka: bool = False) -> Any:
    """``SparkSession.builder`` with the shared settings, then ``conf``'s (which win).

    ``spark_kafka``: also load Spark's built-in Kafka connector (its packages, resolved at JVM
    start), for comparisons with it.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {**BASE_CONF, "spark.executorEnv.PYSPARK_PYTHON": sys.executable}
    if spark_kafka:
        from .spark_kafka_packages import builtin_kafka_conf

        settings.update(builtin_kafka_conf())
    settings.update(conf or {})
    b = SparkSession.builder.master(master).appName(app)
    for key, value in settings.items():
        b = b.config(key, value)
    return b
