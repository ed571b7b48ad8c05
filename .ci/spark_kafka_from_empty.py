"""Spark's built-in Kafka connector, resolved into an empty local Maven repository and an empty
txkafka cache, then loaded by a Spark driver: what `make test` and `make bench` need on a machine
that has never run Maven. Run by .ci/run with MAVEN_OPTS=-Dmaven.repo.local=<empty folder> and
TXKAFKA_CACHE=<empty folder>."""

import os
import sys
from pathlib import Path

from txkafka.spark_kafka_packages import builtin_kafka_conf
from txkafka.spark_session import session_builder

repo = Path(os.environ["MAVEN_OPTS"].split("-Dmaven.repo.local=")[1].split()[0])
cache = Path(os.environ["TXKAFKA_CACHE"])
jars = [Path(j) for j in builtin_kafka_conf()["spark.jars"].split(",")]
assert jars and all(j.is_file() and cache in j.parents for j in jars), jars
assert any(repo.rglob("kafka-clients-*.jar")), f"Maven did not use the empty repository {repo}"
spark = session_builder("spark-kafka-from-empty", spark_kafka=True).getOrCreate()
try:
    # Loading a batch relation instantiates Spark's KafkaSourceProvider without a broker.
    schema = (spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
              .option("subscribe", "t").load().schema)
    assert [f.name for f in schema.fields][:2] == ["key", "value"], schema
finally:
    spark.stop()
print(f"[spark-kafka-from-empty] Spark's kafka format loaded from {len(jars)} jars fetched into "
      f"an empty Maven repository")
sys.exit(0)
