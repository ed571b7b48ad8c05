"""The writer options of an S3 checkpoint, copied from the Spark session's Hadoop settings.

Why: Spark reads the checkpoint through Hadoop's s3a with ``spark.hadoop.fs.s3a.*``, but the
sink's own access to it (its commit log) runs in a Python process without the session, so the
same settings reach it as the writer's options: ``.options(**s3_options(spark))``.
"""

from __future__ import annotations

from typing import Any

from ..connector.checkpoint.object_store import S3_OPTIONS, SPARK_HADOOP


def s3_options(spark: Any) -> dict[str, str]:
    """The ``fs.s3a.*`` settings the sink reads (endpoint, region, keys, session token, path
    style) that ``spark``'s configuration holds as ``spark.hadoop.fs.s3a.*``."""
    out: dict[str, str] = {}
    for name in S3_OPTIONS:
        value = spark.conf.get(SPARK_HADOOP + name, None)
        if value:
            out[name] = value
    return out
