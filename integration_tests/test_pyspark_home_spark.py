"""`txkafka pyspark-home` with real Spark: a driver started with the mirrored SPARK_HOME runs its Python
workers and the txkafka streaming source's runner from the bytecode zip, and reads every record."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from integration_tests import jvm_archive
from integration_tests.kafka_helpers import unique
from txkafka.pyspark_home import ZIP_RELATIVE

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

DRIVER = r"""
import json, sys, tempfile
from pyspark.sql import SparkSession
bootstrap, topic = sys.argv[1], sys.argv[2]
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
         .getOrCreate())
import pyspark
worker = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__).collect()
q = (spark.readStream.format("txkafka").option("kafka.bootstrap.servers", bootstrap)
     .option("subscribe", topic).option("startingOffsets", "earliest").load()
     .selectExpr("CAST(value AS STRING) AS v").writeStream.format("memory").queryName("got")
     .option("checkpointLocation", tempfile.mkdtemp()).trigger(availableNow=True).start())
q.awaitTermination(120)
values = sorted(r.v for r in spark.sql("SELECT v FROM got").collect())
print("RESULT " + json.dumps({"worker": worker[0], "values": values}))
spark.stop()
"""


def test_spark_workers_and_streaming_source_run_from_the_bytecode_zip(kafka, tmp_path):
    home = tmp_path / "spark-home"
    built = subprocess.run([sys.executable, "-m", "txkafka", "pyspark-home", "--out", str(home)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    assert built.stdout.strip() == f"export SPARK_HOME={shlex.quote(str(home))}"

    topic = unique("pyc-home")
    kafka.create_topic(topic, partitions=2)
    kafka.produce(topic, [(f"k{i}", f"v{i:03d}") for i in range(50)])

    jvm_archive.ready()
    env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    run = subprocess.run([sys.executable, "-c", DRIVER, kafka.bootstrap, topic], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(run.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result["worker"] == str(home / ZIP_RELATIVE / "pyspark" / "__init__.pyc")
    assert result["values"] == [f"v{i:03d}" for i in range(50)]
