"""Checkpoints on a real S3 server (SeaweedFS on loopback, signed requests), real Spark (s3a)
and real Kafka: the exactly-once pipeline across driver kills, the operator's commands (with
the AWS environment, and with Spark's settings as spark-submit takes them), verify through the
checkpoint, a savepoint, a copied checkpoint, two drivers on one checkpoint, and the store's own refusal of a
second writer of a commit-log record (conditional writes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from integration_tests.pipeline_helpers import (assert_exactly_once, make_input, pipeline_args,
                                                run_pipeline, sink_prefix, wait_until)
from txkafka.connector.checkpoint.object_store import S3Settings
from txkafka.connector.errors import (CheckpointMovedError, CheckpointStoreError,
                                      ConcurrentWriterError)
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.embedded_s3 import REGION
from txkafka.spark_s3a_packages import s3a_conf, s3a_settings

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

# How a driver that meets another one on its checkpoint fails (test_operator_actions' list).
CONCURRENT = ("ConcurrentWriterError", "CONCURRENT_STREAM_LOG_UPDATE", "Concurrent update to the",
              "Multiple streaming queries are concurrently using")


@pytest.fixture(scope="module")
def bucket(s3_server) -> str:
    return s3_server.create_bucket("ck-" + uuid.uuid4().hex[:8])


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """This process's (and the commands' it runs) AWS environment: the standard variables."""
    for k, v in s3_server.environment().items():
        monkeypatch.setenv(k, v)
    return s3_server.environment()


def _settings(s3_server, **changes) -> S3Settings:
    return S3Settings.from_options({**s3_server.settings(), **changes}, environ={})


def _spark_args(s3_server) -> list[str]:
    """Spark's s3a (hadoop-aws and the AWS SDK modules) pointed at the server. The pipeline
    copies the spark.hadoop.fs.s3a.* settings into the writer's options."""
    conf = {**s3a_conf(), **s3a_settings(s3_server.endpoint, s3_server.access_key,
                                          s3_server.secret_key, region=REGION)}
    return [a for k, v in conf.items() for a in ("--spark-conf", f"{k}={v}")]


# A driver environment whose AWS variables are wrong: the sink must use the writer's options.
_WRONG_ENV = {"AWS_ACCESS_KEY_ID": "wrong", "AWS_SECRET_ACCESS_KEY": "wrong-secret",
              "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``txkafka ARGS``; ``env``: variables over this process's environment."""
    return subprocess.run([sys.executable, "-m", "txkafka", *args], capture_output=True,
                          text=True, timeout=180, env={**os.environ, **(env or {})})


def _spark_defaults(s3_server, path) -> list[str]:
    """A spark-defaults.conf as a Spark user has it (s3a's settings among Spark's others), and
    the flags that hand it to a command: ``--properties-file FILE``."""
    conf = {"spark.master": "local[1]", **s3a_settings(s3_server.endpoint, s3_server.access_key,
                                                       s3_server.secret_key, region=REGION)}
    path.write_text("# spark-defaults.conf\n" + "".join(f"{k}  {v}\n" for k, v in conf.items()))
    return ["--properties-file", str(path)]


def _conf_flags(s3_server) -> list[str]:
    """spark-submit's --conf flags for every setting the commands take (keys included)."""
    return [a for k, v in s3_server.settings().items()
            for a in ("--conf", f"spark.hadoop.{k}={v}")]


# ----------------------------------------------------------- the store itself, no Spark


def test_the_store_refuses_a_second_writer_of_a_record(s3_server, bucket):
    """PutObject with If-None-Match: * against the server: the second create of a name is
    refused by the store (412), also among racing writers; the commit log's create maps that
    answer to ConcurrentWriterError without reading anything back."""
    client = s3_server.client()
    key = f"race/{uuid.uuid4().hex}"
    client.put_object(Bucket=bucket, Key=key, Body=b"first", IfNoneMatch="*")
    with pytest.raises(Exception) as refused:
        client.put_object(Bucket=bucket, Key=key, Body=b"second", IfNoneMatch="*")
    answer = refused.value.response  # type: ignore[attr-defined]
    print(f"second writer: HTTP {answer['ResponseMetadata']['HTTPStatusCode']} "
          f"{answer['Error']['Code']}")
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert answer["Error"]["Code"] == "PreconditionFailed"
    assert client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"first"

    raced = f"race/{uuid.uuid4().hex}"

    def create(i: int) -> bool:
        try:
            client.put_object(Bucket=bucket, Key=raced, Body=str(i).encode(),
                                          IfNoneMatch="*")
            return True
        except Exception as e:  # noqa: BLE001
            assert e.response["Error"]["Code"] in ("PreconditionFailed",  # type: ignore
                                                   "ConditionalRequestConflict")
            return False
    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(create, range(8))) == 1

    ck = f"s3a://{bucket}/refused-{uuid.uuid4().hex[:6]}"
    log = SinkCommitLog(ck, _settings(s3_server))
    log.check_store()
    store = log._exclusive_s3
    assert store is not None and store.supported(bucket)
    path = f"{log.log_dir}/{0:020d}-000.decision.json"
    assert store.create(path, b"{}", log._taken)
    with pytest.raises(ConcurrentWriterError, match="second driver"):
        store.create(path, b"{}", log._taken)  # the store's 412; no check, no read-back
    other = SinkCommitLog(ck, _settings(s3_server))
    with pytest.raises(ConcurrentWriterError):
        other.write_decision(0, 0, [], [0])


def test_wrong_credentials_endpoint_or_bucket_fail_at_start_without_the_secret(s3_server, bucket):
    ck = f"s3a://{bucket}/creds"
    bad = SinkCommitLog(ck, _settings(s3_server, **{"fs.s3a.secret.key": "not-the-secret-xyz"}))
    with pytest.raises(CheckpointStoreError) as e:
        bad.check_store()
    text = str(e.value)
    assert ck in text and "refused the credentials" in text and "fs.s3a.access.key" in text
    assert "not-the-secret-xyz" not in text and s3_server.secret_key not in text

    closed = SinkCommitLog(ck, _settings(s3_server, **{"fs.s3a.endpoint": "http://127.0.0.1:9"}))
    with pytest.raises(CheckpointStoreError, match="does not answer"):
        closed.check_store()
    missing = SinkCommitLog(f"s3a://no-such-{uuid.uuid4().hex[:8]}/ck", _settings(s3_server))
    with pytest.raises(CheckpointStoreError, match="bucket does not exist"):
        missing.check_store()


def test_a_copied_checkpoint_is_refused(s3_server, bucket):
    """The sink's place record names the checkpoint's bucket and path: a copy elsewhere stops."""
    ck = f"s3a://{bucket}/orig-{uuid.uuid4().hex[:6]}"
    log = SinkCommitLog(ck, _settings(s3_server))
    log.identity("txkafka")
    log.require_own_place()
    client = s3_server.client()
    prefix = ck.split("/", 3)[3]
    copy = f"{prefix}-copy"
    for obj in client.list_objects_v2(Bucket=bucket, Prefix=prefix + "/")["Contents"]:
        if obj["Key"].endswith("/"):
            continue  # a folder marker
        client.copy_object(Bucket=bucket, Key=copy + obj["Key"][len(prefix):],
                           CopySource={"Bucket": bucket, "Key": obj["Key"]})
    with pytest.raises(CheckpointMovedError, match="moved or copied"):
        SinkCommitLog(f"s3a://{bucket}/{copy}", _settings(s3_server)).require_own_place()


# ------------------------------------------------------------- Spark + Kafka + S3


@pytest.mark.timeout(1500)
def test_exactly_once_on_an_s3_checkpoint_across_a_driver_kill_with_commands_and_savepoint(
        kafka, s3_server, bucket, s3_env, driver_processes, tmp_path):
    topics = make_input(kafka, records=600, per_txn=100)
    ck = f"s3a://{bucket}/q-{uuid.uuid4().hex[:6]}"
    spark = _spark_args(s3_server)
    marker = tmp_path / "kill.marker"
    fault = f"point=between_endtxn,batch=1,action=kill,once={marker}"
    slow_ok = ("--transaction-timeout-ms", "600000")
    args = pipeline_args(kafka, topics, ck, "--max-offsets", "300", *spark, *slow_ok)
    proc = driver_processes(*args, "--fault", fault, env=_WRONG_ENV)
    code = proc.wait(300)
    assert marker.exists() and code == -9, proc.tail()

    # The operator's commands on the S3 checkpoint: with the AWS environment variables, and
    # with Spark's settings (spark-submit's flags) in an environment whose variables are wrong.
    state = SinkCommitLog(ck).latest()
    assert state.batch_id == 1 and state.pending is not None
    shown = _cli("commit-log", "show", "--checkpoint", ck)
    assert "decided, not finished" in shown.stdout, shown.stdout + shown.stderr
    defaults = _spark_defaults(s3_server, tmp_path / "spark-defaults.conf")
    flagged = _cli("commit-log", "show", "--checkpoint", ck, *_conf_flags(s3_server),
                   env=_WRONG_ENV)
    assert flagged.stdout == shown.stdout, flagged.stdout + flagged.stderr
    listed = _cli("transactions", "list", "-b", kafka.bootstrap, "--checkpoint", ck, "--json",
                  *defaults, env=_WRONG_ENV)
    rows = json.loads(listed.stdout or "[]")
    assert rows and all(r["decided_pending_commit"] for r in rows), listed.stdout + listed.stderr
    # Without them, the wrong environment is what the command has: it fails, naming no secret.
    unflagged = _cli("commit-log", "show", "--checkpoint", ck, env=_WRONG_ENV)
    assert unflagged.returncode == 4, unflagged.stdout + unflagged.stderr
    assert "wrong-secret" not in unflagged.stderr and s3_server.secret_key not in unflagged.stderr

    proc = driver_processes(*args, env=_WRONG_ENV)
    assert proc.wait(300) == 0, proc.tail()
    assert "rolling forward batch 1" in proc.output()
    assert_exactly_once(kafka, topics, ck)
    # The operator's first look at the S3 checkpoint: healthy, nothing behind, nothing open.
    st = _cli("status", "--checkpoint", ck, "-b", kafka.bootstrap, "--json", *defaults,
              env=_WRONG_ENV)
    report = json.loads(st.stdout or "{}")
    assert st.returncode == 0, st.stdout + st.stderr
    assert report["lag"]["recordsBehindLatest"] == 0 and report["open_transactions"] == []
    assert report["sink_batches"] and not report["needs_operator"], report
    # The output checked through the checkpoint's offsets: what its committed batches read, once.
    checked = _cli("verify", "-b", kafka.bootstrap, "--input", topics.source, "--output",
                   topics.sink, "--checkpoint", ck, "--json", *defaults, env=_WRONG_ENV)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    verdict = json.loads(checked.stdout)
    assert verdict["ok"] and verdict["with_checkpoint"] and verdict["batches"] >= 2, verdict
    assert (verdict["expected"], verdict["pending_input"], verdict["duplicates"]) == (
        topics.expected_ids, 0, 0), verdict

    # A savepoint of the stopped query, written to S3, and a new query started from it.
    sp = f"s3a://{bucket}/savepoints/{uuid.uuid4().hex[:6]}.json"
    made = _cli("savepoint", "create", "--checkpoint", ck, "--out", sp, "-b", kafka.bootstrap,
                "--quiet-period", "2", "--yes", *_conf_flags(s3_server), env=_WRONG_ENV)
    assert made.returncode == 0, made.stdout + made.stderr
    shown_sp = _cli("savepoint", "show", sp, "--json", *defaults, env=_WRONG_ENV)
    assert json.loads(shown_sp.stdout)["origin"]["batch_id"] is not None, shown_sp.stderr
    more = [(f"id-{9_000_000 + i:07d}", f"value-more-{i}") for i in range(100)]
    kafka.produce(topics.source, more, transactional=True)
    topics.expected_ids += len(more)
    new_ck = f"s3a://{bucket}/q2-{uuid.uuid4().hex[:6]}"
    code, proc = run_pipeline(driver_processes, pipeline_args(
        kafka, topics, new_ck, "--savepoint", sp, *spark), timeout=300)
    assert code == 0, proc.tail()
    assert_exactly_once(kafka, topics, new_ck)
    assert kafka.open_transactions(sink_prefix(ck)) == []


@pytest.mark.timeout(900)
def test_two_drivers_on_one_s3_checkpoint_one_fails_and_the_output_stays_exact(
        kafka, s3_server, bucket, s3_env, driver_processes):
    topics = make_input(kafka, records=400, partitions=2, per_txn=100)
    ck = f"s3a://{bucket}/two-{uuid.uuid4().hex[:6]}"
    args = [*pipeline_args(kafka, topics, ck, "--max-offsets", "50", *_spark_args(s3_server)),
            "--master", "local[2]", "--timeout", "600"]
    args.remove("--until-done")
    # The second starts once the first committed a batch: a relaunched driver beside a live one.
    drivers = [driver_processes(*args)]
    wait_until(lambda: "BATCH " in drivers[0].output() or not drivers[0].alive(), 600,
               "the first driver's first batch")
    assert drivers[0].alive(), drivers[0].tail()
    drivers.append(driver_processes(*args))
    stop = threading.Event()
    fed = [0]

    def feed() -> None:
        while not stop.is_set() and fed[0] < 300:
            batch = [(f"id-{5_000_000 + 20 * fed[0] + i:07d}", "v") for i in range(20)]
            kafka.produce(topics.source, batch, transactional=True)
            fed[0] += 1
            stop.wait(0.5)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        ended = wait_until(lambda: [d for d in drivers if not d.alive()], 600,
                           "one of the two drivers to stop")
    finally:
        stop.set()
        feeder.join(60)
    topics.expected_ids += 20 * fed[0]
    for d in ended:  # failed as a second writer: the sink's records or Spark's own logs
        assert any(e in d.output() for e in CONCURRENT), d.tail()
    for d in drivers:
        if d.alive():
            os.kill(d.pid, signal.SIGINT)
            d.wait(120)
    code, proc = run_pipeline(driver_processes, pipeline_args(
        kafka, topics, ck, *_spark_args(s3_server)), timeout=300)
    assert code == 0, proc.tail()
    assert_exactly_once(kafka, topics, ck)
    print(f"two drivers on S3: {len(ended)} stopped as a second writer, {fed[0]} feeds")
