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
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Mapping

from txkafka import kafka_admin
from txkafka.cli_options import KafkaConnection, add_kafka_options


def say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _produce_input(conf: Mapping[str, str], topic: str, total: int, per_txn: int
                   ) -> tuple[int, int]:
    committed = aborted = 0
    p = kafka_admin.producer(conf, f"demo-feeder-{uuid.uuid4()}")
    p.init_transactions(30)
    seq = 0
    n_txn = 0
    while committed < total:
        n_txn += 1
        abort = n_txn % 5 == 0
        p.begin_transaction()
        keys = [f"{'aborted' if abort else 'id'}-{s:07d}" for s in range(seq, seq + per_txn)]
        kafka_admin.send(p, topic, [(key, f"payload of {key}") for key in keys])
        seq += per_txn
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
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip()
                log.write(raw)
                if line.startswith(("BATCH", "PIPELINE", "TXKAFKA-FAULT")):
                    say(f"  pipeline: {line}")
            return proc.wait()
        finally:
            # On an error or Ctrl-C here the pipeline (its own session, so no Ctrl-C reaches
            # it) would run on with its JVM and keep writing to the broker.
            _kill_session(proc.pid)
            proc.wait()


def _kill_session(sid: int) -> None:
    """SIGKILL what is left of the session ``sid`` started: its process group, and the PySpark
    workers, which sit in groups of their own. Nothing is left after a normal exit."""
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:  # no /proc: the group was all we could reach
        return
    for pid in pids:
        try:
            if os.getsid(pid) == sid:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def crash_verdict(rc: int, fault_fired: bool, open_txns: int) -> str | None:
    """Why step 3 did not leave the state the demo is about (None if it did): the driver killed
    by the injected SIGKILL, not exited on its own, with some of the decided batch's
    transactions committed and at least one still open."""
    if not fault_fired:
        return f"the crash was not injected (the pipeline exited with {rc})"
    if rc != -signal.SIGKILL:
        return f"the pipeline exited with {rc}, not by the injected SIGKILL ({-signal.SIGKILL})"
    if open_txns < 1:
        return ("no transaction of the sink is open after the crash, so the batch is not half "
                "committed and the restart proves nothing")
    return None


def _sink_open_transactions(conf: Mapping[str, str], checkpoint: str) -> list[str]:
    """Ongoing transactions of the sink that wrote under ``checkpoint`` (its ids start with
    ``{prefix}-{sinkId}-``, recorded in the checkpoint), not of any other sink on the cluster."""
    from txkafka.connector.sink.commit_log import SINK_DIR
    from txkafka.connector.client.transactions import TransactionClient

    try:
        with open(os.path.join(checkpoint, SINK_DIR, "sink.json")) as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return []
    prefix = f"{rec['prefix']}-{rec['sink_id']}-"
    with TransactionClient(conf) as tc:
        return [t.transactional_id for t in tc.list_transactions(prefix=prefix)
                if t.state == "Ongoing"]


def _failed(problem: str, log_path: str, tail: int = 25) -> int:
    """Say loudly what went wrong, with the pipeline log's end (the work dir is removed)."""
    try:
        with open(log_path, errors="replace") as fh:
            lines = fh.read().splitlines()[-tail:]
    except OSError:
        lines = []
    for line in lines:
        print(f"    | {line}", flush=True)
    say(f"RESULT: FAILED - {problem} (pipeline log: {log_path}, kept with --keep)")
    return 1


def run_demo(ns: argparse.Namespace) -> int:
    from txkafka.embedded_kafka import EmbeddedKafka
    from txkafka.verify import verify

    given = KafkaConnection.optional_from_args(ns)  # bad settings refused before anything starts
    workdir = tempfile.mkdtemp(prefix="txkafka-demo-")
    cluster = None
    if given is not None:
        conn = given
        say(f"step 1/5: using the Kafka cluster at {conn.bootstrap}")
    else:
        say("step 1/5: starting a local Apache Kafka broker")
        cluster = EmbeddedKafka("demo", 1, progress=lambda m: say("  " + m))
        conn = KafkaConnection.create(cluster.start(), {})
    bootstrap, conf = conn.bootstrap, conn.client_conf
    try:
        run_id = uuid.uuid4().hex[:6]
        src, dst = f"demo-input-{run_id}", f"demo-output-{run_id}"
        rf = min(3, len(kafka_admin.admin(conf).list_topics(timeout=30).brokers))
        for topic in (src, dst):
            kafka_admin.create_topic(conf, topic, 3, rf)
        say(f"step 2/5: writing {ns.records} committed records to '{src}' (every 5th "
            "transaction aborted)")
        committed, aborted = _produce_input(conf, src, ns.records, 500)
        say(f"  input: {committed} committed records, {aborted} aborted records")

        ckpt = os.path.join(workdir, "checkpoint")
        marker = os.path.join(workdir, "crash-marker")
        # The pipeline reads the same settings: the file by its name (no secret on its command
        # line), -X's as given (on the demo's own command line already).
        common = ["-b", bootstrap, "--input", src, "--output", dst, "--checkpoint", ckpt,
                  "--max-offsets", str(max(1000, ns.records // 6)), "--trigger-ms", "500",
                  "--until-done", "--timeout", "600",
                  *(["--command-config", ns.command_config] if ns.command_config else []),
                  *(a for kv in ns.conf or [] for a in ("--kafka-conf", kv))]
        fault = f"point=between_endtxn,batch={ns.crash_batch},action=kill,once={marker}"
        log_path = os.path.join(workdir, "pipeline.log")
        say(f"step 3/5: running the pipeline; its driver will be SIGKILLed between two EndTxn "
            f"calls of batch {ns.crash_batch}")
        rc = _run_pipeline(common + ["--fault", fault], log_path)
        open_now = _sink_open_transactions(conf, ckpt)
        problem = crash_verdict(rc, os.path.exists(marker), len(open_now))
        if problem:
            return _failed(problem, log_path)
        say(f"  driver killed (exit code {rc}); batch {ns.crash_batch} is decided but only "
            f"partly committed: {len(open_now)} of its transactions still open")

        say("step 4/5: restarting the pipeline from the same checkpoint")
        rc = _run_pipeline(common, log_path)
        if rc != 0:
            return _failed(f"the restarted pipeline exited with {rc}", log_path)

        say("step 5/5: verifying the output with read_committed consumers")
        report = verify(dict(conf), src, dst, id_in="key", id_out="key")
        print(report.text(), flush=True)
        still = _sink_open_transactions(conf, ckpt)
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
    p = sub.add_parser("demo", help="run Kafka -> Spark -> Kafka exactly once across a driver "
                       "crash, and verify the output")
    add_kafka_options(p, required=False, cluster="run on this Kafka cluster")
    p.add_argument("--records", type=int, default=20000, metavar="N",
                   help="committed input records")
    p.add_argument("--crash-batch", type=int, default=2, metavar="N",
                   help="the batch whose commit the driver crash interrupts")
    p.add_argument("--keep", action="store_true",
                   help="leave the broker and the work files for inspection")
    p.set_defaults(func=run_demo)
