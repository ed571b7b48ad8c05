"""``txkafka demo``: Kafka -> Spark -> Kafka exactly once, across a driver crash, on a local broker.

1. Starts a real Apache Kafka (fetched from Maven Central once) on 127.0.0.1.
2. Fills an input topic in transactions, some of them aborted (those records must never appear).
3. Runs the pipeline in its own driver process and SIGKILLs it in the worst place: after the sink
   decided to commit a batch and between two of that batch's EndTxn calls, so the batch is half
   visible to read_committed readers.
4. Restarts it from the same checkpoint: the sink rolls the decided batch forward, Spark re-runs
   the batch, the sink recognises it and writes nothing twice.
5. Verifies the output with read_committed consumers: every committed input record exactly once,
   no duplicates, no gaps, no open transactions.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid


_quiet = logging.getLogger("txkafka.demo.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


def say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _produce_input(bootstrap: str, topic: str, total: int, per_txn: int) -> tuple[int, int]:
    from confluent_kafka import Producer

    committed = aborted = 0
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"demo-feeder-{uuid.uuid4()}",
                  "partitioner": "murmur2_random", "linger.ms": 5, "logger": _quiet})
    p.init_transactions(30)
    seq = 0
    n_txn = 0
    while committed < total:
        n_txn += 1
        abort = n_txn % 5 == 0
        p.begin_transaction()
        for _ in range(per_txn):
            key = f"{'aborted' if abort else 'id'}-{seq:07d}"
            while True:
                try:
                    p.produce(topic, f"payload of {key}".encode(), key.encode())
                    break
                except BufferError:
                    p.poll(0.05)
            seq += 1
        if abort:
            p.flush(30)
            p.abort_transaction(30)
            aborted += per_txn
        else:
            p.commit_transaction(30)
            committed += per_txn
        if n_txn % 10 == 0:
            say(f"  produced {committed} committed + {aborted} aborted records")
    return committed, aborted


def _run_pipeline(args: list[str], log_path: str) -> int:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "txkafka.pipeline", *args], stdout=subprocess.PIPE,
                                stderr=log, env=env, start_new_session=True)
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            log.write(raw)
            if line.startswith(("BATCH", "PIPELINE", "TXKAFKA-FAULT")):
                say(f"  pipeline: {line}")
        return proc.wait()


def run_demo(ns: argparse.Namespace) -> int:
    from txkafka.embedded_kafka import EmbeddedKafka
    from txkafka.verify import verify
    from confluent_kafka.admin import AdminClient, NewTopic
    from txkafka.connector.transaction_client import TransactionClient

    workdir = tempfile.mkdtemp(prefix="txkafka-demo-")
    cluster = None
    if ns.bootstrap:
        bootstrap = ns.bootstrap
        say(f"step 1/5: using the Kafka cluster at {bootstrap}")
    else:
        say("step 1/5: starting a local Apache Kafka broker")
        cluster = EmbeddedKafka("demo", 1, progress=lambda m: say("  " + m))
        bootstrap = cluster.start()
    try:
        run_id = uuid.uuid4().hex[:6]
        src, dst = f"demo-input-{run_id}", f"demo-output-{run_id}"
        admin = AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet})
        rf = min(3, len(admin.list_topics(timeout=30).brokers))
        for f in admin.create_topics([NewTopic(src, 3, rf), NewTopic(dst, 3, rf)]).values():
            f.result(60)
        del admin
        say(f"step 2/5: writing {ns.records} committed records to '{src}' (every 5th "
            "transaction aborted)")
        committed, aborted = _produce_input(bootstrap, src, ns.records, 500)
        say(f"  input: {committed} committed records, {aborted} aborted records")

        ckpt = os.path.join(workdir, "checkpoint")
        marker = os.path.join(workdir, "crash-marker")
        common = ["--bootstrap", bootstrap, "--input", src, "--output", dst, "--checkpoint", ckpt,
                  "--max-offsets", str(max(1000, ns.records // 6)), "--trigger-ms", "500",
                  "--until-done", "--timeout", "600"]
        fault = f"point=between_endtxn,batch={ns.crash_batch},action=kill,once={marker}"
        log_path = os.path.join(workdir, "pipeline.log")
        say(f"step 3/5: running the pipeline; its driver will be SIGKILLed between two EndTxn "
            f"calls of batch {ns.crash_batch}")
        rc = _run_pipeline(common + ["--fault", fault], log_path)
        if not os.path.exists(marker):
            say(f"error: the crash was not injected (pipeline exit code {rc}); log: {log_path}")
            return 1
        say(f"  driver killed (exit code {rc}); batch {ns.crash_batch} is decided but only "
            "partly committed")
        with TransactionClient({"bootstrap.servers": bootstrap}) as tc:
            open_now = [t for t in tc.list_transactions(prefix="txkafka-") if t.state == "Ongoing"]
        say(f"  open transactions left by the crash: {len(open_now)}")

        say("step 4/5: restarting the pipeline from the same checkpoint")
        rc = _run_pipeline(common, log_path)
        if rc != 0:
            say(f"error: the restarted pipeline exited with {rc}; log: {log_path}")
            return 1

        say("step 5/5: verifying the output with read_committed consumers")
        report = verify({"bootstrap.servers": bootstrap}, src, dst, id_in="key", id_out="key")
        print(report.text(), flush=True)
        with TransactionClient({"bootstrap.servers": bootstrap}) as tc:
            still = [t for t in tc.list_transactions(prefix="txkafka-") if t.state == "Ongoing"]
        say(f"open transactions of the sink after the run: {len(still)}")
        ok = report.ok and report.expected == committed and not still
        say("RESULT: exactly once across a driver crash" if ok else "RESULT: FAILED")
        return 0 if ok else 1
    finally:
        if not ns.keep:
            if cluster is not None:
                cluster.destroy()
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            say(f"kept broker at {bootstrap} and work dir {workdir}")


def register_cli(sub) -> None:
    p = sub.add_parser("demo", help="exactly-once Kafka -> Spark -> Kafka across a driver crash")
    p.add_argument("--records", type=int, default=20000, help="committed input records")
    p.add_argument("--crash-batch", type=int, default=2, help="batch whose commit is interrupted")
    p.add_argument("--keep", action="store_true", help="leave the broker and files for inspection")
    p.add_argument("--bootstrap", help="use this Kafka cluster instead of starting a local broker")
    p.set_defaults(func=run_demo)
