"""A Kafka -> txkafka -> Kafka pipeline as a standalone driver program.

Used by the demo, the tests and the chaos suite, which run it in its own process so they can kill
it (SIGKILL: a driver crash) and restart it from the same checkpoint. Stops by itself once every
input record up to the input's end offsets (taken at start) has been committed, or after --timeout.

    python -m txkafka.pipeline -b HOST:PORT --input in --output out --checkpoint DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from txkafka import kafka_admin
from txkafka.connector.fault_injection import ENV_VAR, merge_specs
from txkafka.spark_session import session_builder


def run(args: argparse.Namespace) -> int:
    from pyspark.sql import functions as F

    kafka_conf = client_settings(args)
    spark_conf = dict(kv.split("=", 1) for kv in (args.spark_conf or []))
    if args.fault:
        # Faults are armed from the environment only: this process's (Spark's JVM and its local
        # Python workers inherit it) and, on a cluster, the executors'. Rules already armed there
        # (the chaos suite arms the reader's that way) stay armed.
        key = f"spark.executorEnv.{ENV_VAR}"
        os.environ[ENV_VAR] = merge_specs(os.environ.get(ENV_VAR), args.fault)
        spark_conf[key] = merge_specs(spark_conf.get(key), os.environ[ENV_VAR])
    spark = session_builder("txkafka-pipeline", args.master, spark_conf).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if args.batch:
        try:
            return run_batch(args, spark, kafka_conf)
        finally:
            spark.stop()

    reader = (spark.readStream.format("txkafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input)
              .option("startingOffsets", args.starting_offsets))
    if args.savepoint:
        reader = reader.option("savepoint", args.savepoint)
    if args.max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets))
    if args.min_partitions:
        reader = reader.option("minPartitions", str(args.min_partitions))
    for k, v in kafka_conf.items():
        reader = reader.option(f"kafka.{k}", v)
    reader = reader.options(**format_options(args))
    src = reader.load()

    if args.mode == "map":
        out = src.selectExpr("key", "concat(CAST(value AS STRING), '|seen') AS value")
        output_mode = "append"
    elif args.mode == "project":
        # Another projection of the same records (a changed query, e.g. after a savepoint).
        out = src.selectExpr("key", "concat('moved|', CAST(value AS STRING), '|', "
                             "CAST(partition AS STRING), ':', CAST(offset AS STRING)) AS value")
        output_mode = "append"
    elif args.mode == "passthrough":
        # Key and value as read: with --format-conf, a decoded struct value written re-encoded.
        out = src.selectExpr("key", "value")
        output_mode = "append"
    elif args.mode == "aggregate":
        # A stateful count per (key, event-time window). Spark 4.3's Python sinks take append
        # (and truncate) only, not update: each window is written once, when the watermark
        # closes it. Output key "<key>@<window start ms>", value the count (txkafka verify
        # --check windowed-counts).
        out = (src.withWatermark("timestamp", f"{args.watermark_ms} milliseconds")
               .groupBy(F.window("timestamp", f"{args.window_ms} milliseconds"), "key").count()
               .selectExpr("concat(CAST(key AS STRING), '@', "
                           "CAST(unix_millis(window.start) AS STRING)) AS key",
                           "CAST(`count` AS STRING) AS value"))
        output_mode = "append"
    else:
        raise SystemExit(f"unknown --mode {args.mode}")

    if args.repartition:
        out = out.repartition(args.repartition)
    if args.coalesce:
        out = out.coalesce(args.coalesce)
    from txkafka.object_store import s3_options

    writer = (out.writeStream.format("txkafka").outputMode(output_mode)
              .option("checkpointLocation", args.checkpoint)
              .options(**sink_options(args, kafka_conf), **s3_options(spark)))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")

    # Last stable offsets of every partition: what the pipeline must have consumed to be done.
    target = (kafka_admin.end_offsets({"bootstrap.servers": args.bootstrap, **kafka_conf},
                                      args.input) if args.until_done else None)
    q = writer.start()
    print(f"PIPELINE-STARTED query={q.id} target={json.dumps(target)}", flush=True)
    until_stop_file = bool(args.stop_file) and target is None
    deadline = time.monotonic() + args.timeout
    last_batch = -1
    caught_up_at: tuple[float, int] | None = None
    try:
        while time.monotonic() < deadline:
            if q.exception() is not None:
                print(f"PIPELINE-FAILED {q.exception()}", flush=True)
                return 2
            # Every batch since the last poll, not only the latest: two short batches can end
            # between polls, and a batch id missing from the log reads like a lost batch. Only
            # batches that ran (addBatch): an idle trigger's progress carries the next batch's id.
            for p in q.recentProgress:
                if p["batchId"] > last_batch and "addBatch" in (p.get("durationMs") or {}):
                    last_batch = p["batchId"]
                    print(f"BATCH {p['batchId']} rows={p['numInputRows']} "
                          f"ms={p['durationMs'].get('triggerExecution')}", flush=True)
            if until_stop_file and target is None and os.path.exists(args.stop_file):
                # Told to finish: what the input holds now is the pipeline's target.
                target = kafka_admin.end_offsets({"bootstrap.servers": args.bootstrap,
                                                  **kafka_conf}, args.input)
                print(f"PIPELINE-STOPPING target={json.dumps(target)}", flush=True)
            if args.available_now and not q.isActive:
                if q.exception() is not None:
                    continue  # reported at the top of the loop
                _linger(args.linger_s)
                print("PIPELINE-DONE", flush=True)
                return 0
            if target is not None and _caught_up(q, args.input, target):
                if caught_up_at is None:
                    caught_up_at = (time.monotonic(), last_batch)
                # An aggregation emits closed windows in the batch after the watermark moved
                # (a batch without data): wait for it, a bounded while.
                if args.mode != "aggregate" or _no_data_batch_after(q, caught_up_at[1]) or \
                        time.monotonic() - caught_up_at[0] > max(30.0, 10 * args.trigger_ms / 1000):
                    _linger(args.linger_s)
                    print("PIPELINE-DONE", flush=True)
                    return 0
            time.sleep(0.5)
        print("PIPELINE-TIMEOUT", flush=True)
        return 3
    finally:
        q.stop()
        spark.stop()


def client_settings(args: argparse.Namespace) -> dict[str, str]:
    """--command-config's settings, then --kafka-conf's, in librdkafka's names (the reader and
    the sink take them as kafka.* options, the pipeline's own clients as they are)."""
    from txkafka.cli_options import KafkaConnection, read_command_config

    settings = read_command_config(args.command_config) if args.command_config else {}
    settings.update(kv.split("=", 1) for kv in (args.kafka_conf or []))
    conf = dict(KafkaConnection.create(args.bootstrap, settings).client_conf)
    del conf["bootstrap.servers"]
    return conf


def sink_options(args: argparse.Namespace, kafka_conf: dict[str, str]) -> dict[str, str]:
    sink_conf = dict(kv.split("=", 1) for kv in (args.sink_conf or []))
    opts = {"kafka.bootstrap.servers": args.bootstrap, "topic": args.output,
            "deliveryGuarantee": args.guarantee, "producer": args.producer,
            **{f"kafka.{k}": v for k, v in {**kafka_conf, **sink_conf}.items()}}
    if args.transaction_timeout_ms:
        opts["kafka.transaction.timeout.ms"] = str(args.transaction_timeout_ms)
    return {**opts, **format_options(args)}


def format_options(args: argparse.Namespace) -> dict[str, str]:
    """--format-conf's options (keyFormat, valueFormat, schema.registry.*), reader and sink alike."""
    return dict(kv.split("=", 1) for kv in (getattr(args, "format_conf", None) or []))


def run_batch(args: argparse.Namespace, spark, kafka_conf: dict[str, str]) -> int:
    """One ``df.write`` of the input's committed records, mapped as ``--mode map`` does."""
    reader = (spark.read.format("txkafka").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input).option("startingOffsets", "earliest")
              .option("endingOffsets", "latest"))
    for k, v in kafka_conf.items():
        reader = reader.option(f"kafka.{k}", v)
    out = reader.load().selectExpr("key", "concat(CAST(value AS STRING), '|seen') AS value")
    out.write.format("txkafka").options(**sink_options(args, kafka_conf)).mode("append").save()
    if args.done_file:
        with open(args.done_file, "w"):
            pass
    print("PIPELINE-WRITTEN", flush=True)
    _linger(args.linger_s)
    print("PIPELINE-DONE", flush=True)
    return 0


def _linger(seconds: float) -> None:
    """Keep the driver (and an idle query) alive a while after the work is done: what the
    driver-side follow-up sweeps need to end a late attempt's transaction."""
    if seconds > 0:
        print(f"PIPELINE-LINGER {seconds:.0f}s", flush=True)
        time.sleep(seconds)


def _no_data_batch_after(q, batch_id: int) -> bool:
    p = q.lastProgress
    return bool(p) and p["batchId"] > batch_id and p["numInputRows"] == 0 and \
        not q.status.get("isTriggerActive")


def _caught_up(q, topic: str, target: dict[int, int]) -> bool:
    """True once a committed batch's end offsets reach the target for every partition."""
    p = q.lastProgress
    if not p or q.status.get("isDataAvailable"):
        return False
    for src in p.get("sources", []):
        end = src.get("endOffset")
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                return False
        if not isinstance(end, dict) or topic not in end:
            continue
        got = {int(k): int(v) for k, v in end[topic].items()}
        return all(got.get(part, -1) >= off for part, off in target.items())
    return False


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("-b", "--bootstrap-servers", dest="bootstrap", required=True,
                   metavar="HOST:PORT[,...]")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties file (security settings), as txkafka's commands take it")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--mode", choices=["map", "project", "aggregate", "passthrough"],
                   default="map",
                   help="map: value + '|seen'; project: another projection of the same records; "
                   "aggregate: windowed counts; passthrough: key and value as read")
    p.add_argument("--starting-offsets", default="earliest", help="the reader's startingOffsets")
    p.add_argument("--savepoint", default="", help="start a new query from this savepoint")
    p.add_argument("--repartition", type=int, default=0,
                   help="repartition the output to this many tasks (0: as read)")
    p.add_argument("--coalesce", type=int, default=0,
                   help="coalesce the output to at most this many tasks (0: as read); unlike "
                   "--repartition it keeps each input partition's records in order")
    p.add_argument("--min-partitions", type=int, default=0,
                   help="the reader's minPartitions (0: one task per Kafka partition)")
    p.add_argument("--guarantee", choices=["exactly_once", "at_least_once"], default="exactly_once")
    p.add_argument("--producer", choices=["auto", "txkafka", "librdkafka"], default="auto",
                   help="the sink's option producer (its default: auto)")
    p.add_argument("--master", default="local[2,4]")
    p.add_argument("--trigger-ms", type=int, default=1000)
    p.add_argument("--available-now", action="store_true",
                   help="Trigger.AvailableNow instead of processing-time (ends by itself)")
    p.add_argument("--linger-s", type=float, default=0.0,
                   help="keep the driver (and the idle query) alive this long once done")
    p.add_argument("--batch", action="store_true",
                   help="one batch write (df.write) of the input instead of a stream")
    p.add_argument("--done-file", default="", help="--batch: created once the write returned")
    p.add_argument("--max-offsets", type=int, default=0)
    p.add_argument("--window-ms", type=int, default=2000, help="aggregate: event-time window")
    p.add_argument("--watermark-ms", type=int, default=10000, help="aggregate: watermark delay")
    p.add_argument("--transaction-timeout-ms", type=int, default=0)
    p.add_argument("--fault", default="", help="fault-injection spec (testing only)")
    p.add_argument("--until-done", action="store_true",
                   help="stop once the input's current end offsets are committed")
    p.add_argument("--stop-file", default="",
                   help="once this file exists, stop when the input's end offsets at that moment "
                   "are committed (like --until-done, with the target taken then)")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--kafka-conf", action="append", help="extra kafka.* setting key=value")
    p.add_argument("--sink-conf", action="append",
                   help="extra kafka.* setting key=value of the sink only")
    p.add_argument("--spark-conf", action="append", help="extra Spark setting key=value")
    p.add_argument("--format-conf", action="append",
                   help="a format option key=value for the reader and the sink (valueFormat, "
                        "schema.registry.url, ...)")
    return p


if __name__ == "__main__":
    sys.exit(run(parser().parse_args()))
