"""A user's driver program as it runs on a cluster: pyspark and format("txkafka"), nothing else.

The deployment tests start it with an interpreter that has only txkafka's wheel installed (nothing of
this repository on its path), so it imports no test helper and no txkafka module: how its
interpreter and the executors' find txkafka is what those tests check.

    python shipped_app.py '{"master": ..., "bootstrap": ..., "input": ..., "output": ...,
                            "checkpoint": ..., "trigger": "available_now" | "processing_time",
                            "max_offsets": N, "conf": {spark settings}}'

Prints ``BATCH <id> rows=<n> t=<seconds since start>`` for every batch that ran, then ``DONE`` (an
available-now run that ended) or ``FAILED <error>`` (exit 2). A processing-time run goes on until
it is killed or ``timeout_s`` passes.
"""

from __future__ import annotations

import json
import sys
import time

STARTED = time.monotonic()


def main(cfg: dict) -> int:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(cfg["master"]).appName("txkafka-shipped")
    for key, value in cfg.get("conf", {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if cfg.get("register"):
        # docs/deployment.md: registered from the driver's Python, the source's Python processes
        # are PYSPARK_PYTHON's (Spark's own scan uses the driver JVM's, found from its folder).
        import pyspark_txkafka

        spark.dataSource.register(pyspark_txkafka.DefaultSource)
    print(f"SESSION t={time.monotonic() - STARTED:.1f}", flush=True)

    src = (spark.readStream.format("txkafka")
           .option("kafka.bootstrap.servers", cfg["bootstrap"])
           .option("subscribe", cfg["input"]).option("startingOffsets", "earliest")
           .option("maxOffsetsPerTrigger", str(cfg["max_offsets"])).load())
    writer = (src.selectExpr("key", "concat(CAST(value AS STRING), '|seen') AS value")
              .writeStream.format("txkafka")
              .option("kafka.bootstrap.servers", cfg["bootstrap"]).option("topic", cfg["output"])
              .option("checkpointLocation", cfg["checkpoint"]))
    if cfg["trigger"] == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="500 milliseconds")
    q = writer.start()
    deadline = time.monotonic() + cfg.get("timeout_s", 600)
    last = -1
    try:
        while time.monotonic() < deadline:
            for p in q.recentProgress:
                if p["batchId"] > last and "addBatch" in (p.get("durationMs") or {}):
                    last = p["batchId"]
                    print(f"BATCH {last} rows={p['numInputRows']} "
                          f"t={time.monotonic() - STARTED:.1f}", flush=True)
            if q.exception() is not None:
                print(f"FAILED {q.exception()}", flush=True)
                return 2
            if not q.isActive:
                print("DONE", flush=True)
                return 0
            time.sleep(0.3)
        print("TIMEOUT", flush=True)
        return 3
    finally:
        q.stop()
        spark.stop()


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
