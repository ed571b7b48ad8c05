"""A driver that runs several Kafka -> Kafka queries at once in one SparkSession, each on its own
checkpoint with the source and the sink of its choice: Spark's built-in ``format("kafka")`` or
txkafka. The switching tests run it, kill it (a crash) and run it again on the same checkpoints
with other formats.

    python integration_tests/switch_driver.py SPEC.json

SPEC: {"trigger_ms": 300, "timeout_s": 240, "at_once": 4, "legs": [{"name", "bootstrap",
"input", "output", "checkpoint", "source": "kafka"|"txkafka", "sink": "kafka"|"txkafka",
"max_offsets": 0, "output_bootstrap": null, "sink_kafka": {librdkafka settings of a txkafka
sink}, "until_killed": false}]}

Legs start in the spec's order, at most ``at_once`` at a time. Each leg runs until its input's end
offsets (taken at start) are committed, then stops while idle (a clean stop), or with
``until_killed`` until the driver is killed. A leg whose query fails prints its error and the
others go on; one that fails because Spark's Python worker did not start in time is restarted
(``LEG <name> RESTARTED``). Prints ``LEG <name> DONE`` / ``LEG <name> FAILED <error>`` and
``ALL-DONE`` at the end.
"""

from __future__ import annotations

import json
import sys
import time

from txkafka import kafka_admin
from txkafka.pipeline import _caught_up
from txkafka.spark_session import session_builder


def start_leg(spark, leg: dict, trigger_ms: int):
    src = (spark.readStream.format(leg["source"])
           .option("kafka.bootstrap.servers", leg["bootstrap"])
           .option("subscribe", leg["input"])
           .option("startingOffsets", "earliest"))
    if leg["source"] == "kafka":
        # Spark's source reads uncommitted records unless told (Java's default).
        src = src.option("kafka.isolation.level", "read_committed")
    if leg.get("max_offsets"):
        src = src.option("maxOffsetsPerTrigger", str(leg["max_offsets"]))
    out = src.load().selectExpr("key", "concat(CAST(value AS STRING), '|seen') AS value")
    writer = (out.writeStream.format(leg["sink"])
              .option("checkpointLocation", leg["checkpoint"])
              .option("kafka.bootstrap.servers", leg.get("output_bootstrap") or leg["bootstrap"])
              .option("topic", leg["output"]))
    for k, v in (leg.get("sink_kafka") or {}).items():
        writer = writer.option(f"kafka.{k}", v)
    return writer.trigger(processingTime=f"{trigger_ms} milliseconds").start()


_NO_WORKER = "Python worker failed to connect back"


def start_one(spark, leg: dict, trigger_ms: int):
    q = start_leg(spark, leg, trigger_ms)
    print(f"LEG {leg['name']} STARTED {leg['source']}->{leg['sink']}", flush=True)
    # One query's start at a time: a dozen Python workers starting at once on a busy machine
    # miss Spark's connect-back timeout.
    started = time.monotonic()
    while (q.status["message"].startswith("Initializing") and q.exception() is None
           and time.monotonic() - started < 60):
        time.sleep(0.2)
    return q


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    spark = session_builder("txkafka-switch", "local[2,4]", {
        "spark.sql.streaming.stopTimeout": "30s",
        "spark.ui.showConsoleProgress": "false"}, spark_kafka=True).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    running = {}
    trigger_ms = spec.get("trigger_ms", 300)
    waiting = list(spec["legs"])
    # At most this many queries at once: on two cores more only add Python processes that start
    # too slowly for Spark's fixed connect-back wait.
    at_once = spec.get("at_once", 4)
    deadline = time.monotonic() + spec.get("timeout_s", 240)
    code = 0
    restarts: dict[str, int] = {}
    while (running or waiting) and time.monotonic() < deadline:
        while waiting and len(running) < at_once:
            leg = waiting.pop(0)
            target = kafka_admin.end_offsets({"bootstrap.servers": leg["bootstrap"]},
                                             leg["input"])
            running[leg["name"]] = (start_one(spark, leg, trigger_ms), leg, target)
        for name, (q, leg, target) in list(running.items()):
            if q.exception() is not None and _NO_WORKER in str(q.exception()) \
                    and restarts.get(name, 0) < 10:
                # The machine too busy for Spark's fixed 10 s Python worker start: a restart on
                # the same checkpoint, as an operator would do.
                restarts[name] = restarts.get(name, 0) + 1
                print(f"LEG {name} RESTARTED ({_NO_WORKER})", flush=True)
                running[name] = (start_one(spark, leg, trigger_ms), leg, target)
            elif q.exception() is not None:
                print(f"LEG {name} FAILED {json.dumps(str(q.exception()))}", flush=True)
                del running[name]
            elif not leg.get("until_killed") and _caught_up(q, leg["input"], target):
                q.stop()  # idle: nothing in flight
                print(f"LEG {name} DONE", flush=True)
                del running[name]
        time.sleep(0.3)
    for leg in waiting:
        print(f"LEG {leg['name']} TIMEOUT (not started)", flush=True)
        code = 3
    for name, (q, _, _) in running.items():
        print(f"LEG {name} TIMEOUT", flush=True)
        q.stop()
        code = 3
    print("ALL-DONE", flush=True)
    spark.stop()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
