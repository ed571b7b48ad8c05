"""The exactly-once pipeline on a secured Kafka: SASL_SSL + SCRAM-SHA-512, StandardAuthorizer, ACLs.

Kafka -> txkafka -> Kafka in real Spark, with the reader and the writer as DIFFERENT principals that
hold only the ACLs of the recommended set (docs/operations-security.md):

- ``reader``: READ + DESCRIBE on the input topic, READ on its consumer group prefix (groupIdPrefix);
  for the verifier also READ on the output topic and the ``txkafka-verify-`` groups;
- ``writer``: WRITE + DESCRIBE on the output topic, WRITE + DESCRIBE on TransactionalId PREFIXED
  ``<transactionalIdPrefix>-``; nothing on the cluster.

What the tests prove:

- the pipeline is exactly once (read_committed verification of every id, order kept, aborted input
  transactions skipped) and leaves no open transaction of its prefix;
- a driver killed between two EndTxn calls of a batch recovers on restart over SASL_SSL: the
  decided batch is rolled forward by the driver-side transaction client, and the operator CLI
  (``txkafka transactions list -X ...``, ``commit-log show``) works against the secured cluster;
- each missing ACL (and a wrong password) fails the query with an error that names the missing
  permission and the resource (topic, transactional id prefix, consumer group) -- at query start
  where Kafka lets the driver find out -- and the output topic holds nothing;
- nothing captured during secured runs, a failing one included, holds a secret: DEBUG logs of every
  Python process (driver, Spark's data source runners, executors' workers) with librdkafka's own
  debug log routed through Python logging, Spark's JVM log at INFO, every exception, the sink's
  commit log and the whole checkpoint, and the operator CLI's output.

This module is also the driver program for the crash/recovery test (``python this_file.py SPEC``):
a separate process in its own session, so the fault injection can SIGKILL the whole driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parent.parent
if __name__ == "__main__":  # run as the driver program: make the repository importable
    sys.path.insert(0, str(REPO))

PROTO, MECH = "SASL_SSL", "SCRAM-SHA-512"
WRONG_PASSWORD = "wrongPwSecPipe7c1e9a"
QUERY_TIMEOUT_S = 150
# py4j logs every driver -> JVM command verbatim at DEBUG, option values included (any PySpark
# program; see docs/operations-security.md and test_py4j_debug_log_holds_option_values): the
# capture keeps py4j at INFO, everything else at DEBUG.
_SITECUSTOMIZE = '''\
import logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,
                    format="%(asctime)s pid=%(process)d %(name)s %(levelname)s %(message)s")
logging.getLogger("py4j").setLevel(logging.INFO)
'''


# ================================================================================ driver program


def _driver_main(spec_path: str) -> int:
    """Run the query of a JSON spec (a 0600 file: it holds the credentials) until the input's end
    offsets given in the spec are committed (PIPELINE-DONE). Then, if the spec has a ``failing``
    query, run it in the same session until it fails (FAILING-QUERY-FAILED); every exception is
    printed with its traceback, for the hygiene test to grep."""
    from txkafka.pipeline import _caught_up
    from txkafka.spark_session import session_builder

    spec = json.loads(Path(spec_path).read_text())
    spark = session_builder("txkafka-secure-pipeline", "local[2,4]",
                            {"spark.sql.streaming.stopTimeout": "30s"}).getOrCreate()
    # Spark's JVM log at INFO for everything that touches Kafka: the hygiene test greps this
    # capture for secrets. PySpark's default WARN is a console filter over a root logger already
    # at INFO, so setLogLevel("INFO") alone is a no-op (it only acts when the root level
    # changes): go through DEBUG to drop the filter, then settle at INFO.
    spark.sparkContext.setLogLevel("DEBUG")
    spark.sparkContext.setLogLevel("INFO")
    try:
        code = _run_until_done(spark, spec, _caught_up)
        if code == 0 and "failing" in spec:
            code = _run_until_failed(spark, spec["failing"])
        return code
    except Exception:  # noqa: BLE001 - printed whole: the hygiene test greps it
        print("PIPELINE-ERROR " + traceback.format_exc(), flush=True)
        return 4
    finally:
        spark.stop()


def _run_until_done(spark, spec: dict, caught_up) -> int:
    q = _start(spark, spec)
    print(f"PIPELINE-STARTED query={q.id}", flush=True)
    target = {int(p): off for p, off in spec["target"].items()}
    deadline = time.monotonic() + spec.get("timeout", 240)
    try:
        while time.monotonic() < deadline:
            if q.exception() is not None:
                print(f"PIPELINE-FAILED {q.exception()}", flush=True)
                return 2
            if caught_up(q, spec["src"], target):
                print("PIPELINE-DONE", flush=True)
                return 0
            time.sleep(0.3)
        print("PIPELINE-TIMEOUT", flush=True)
        return 3
    finally:
        q.stop()


def _run_until_failed(spark, spec: dict) -> int:
    q = _start(spark, spec)
    try:
        q.awaitTermination(spec.get("timeout", 120))
    except Exception as e:  # noqa: BLE001 - the expected failure
        print("FAILING-QUERY-FAILED " + "".join(traceback.format_exception(e)), flush=True)
        return 0
    finally:
        if q.isActive:
            q.stop()
    print("FAILING-QUERY-DID-NOT-FAIL", flush=True)
    return 5


def _start(spark, spec: dict):
    """The query: reader and writer each with their own principal's kafka.* options."""
    r = spark.readStream.format("txkafka").options(**spec["reader"])
    for k, v in spec.get("reader_extra", {}).items():
        r = r.option(k, v)
    src = r.load()
    w = (src.selectExpr(*spec.get("select", ["key", "value"])).writeStream.format("txkafka")
         .options(**spec["writer"]).option("checkpointLocation", spec["checkpoint"])
         .trigger(processingTime=f"{spec.get('trigger_ms', 300)} milliseconds"))
    for k, v in spec.get("writer_extra", {}).items():
        w = w.option(k, v)
    return w.start()


if __name__ == "__main__":
    sys.exit(_driver_main(sys.argv[1]))


# ======================================================================================== the tests

from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType  # noqa: E402

from integration_tests.kafka_helpers import unique  # noqa: E402
from integration_tests.pipeline_helpers import PipelineTopics, make_input  # noqa: E402
from integration_tests.secure_kafka import SecureKafka, allow  # noqa: E402
from txkafka.connector.fault_injection import ENV_VAR  # noqa: E402
from txkafka.connector.sink.commit_log import SinkCommitLog  # noqa: E402
from txkafka.kafka_admin import VERIFY_GROUP_PREFIX  # noqa: E402
from txkafka.verify import verify  # noqa: E402

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


class Setup:
    """One test's topics, prefixes and principals' options (every name unique: ACLs accumulate
    on the session's cluster, so no test may ride on another's grants)."""

    def __init__(self, sk: SecureKafka, records: int, per_txn: int | None) -> None:
        self.sk = sk
        admin = sk.admin_target
        if per_txn:  # transactions of unique ids, every fourth aborted (pipeline_helpers)
            self.topics = make_input(admin, records=records, partitions=3, out_partitions=3,
                                     per_txn=per_txn)
        else:  # plain records in one partition: one task (and its retries) per batch
            self.topics = PipelineTopics(admin.create_topic(), admin.create_topic(), records)
            admin.produce(self.topics.source, [(f"id-{i:07d}", f"value-{i}")
                                               for i in range(records)])
        self.src, self.dst = self.topics.source, self.topics.sink
        self.prefix = unique("secetl")          # transactionalIdPrefix
        self.groups = unique("secsrc")          # groupIdPrefix of the reader

    def grant(self, *, topic_read: bool = True, topic_describe: bool = True, group: bool = True,
              topic_write: bool = True, txn: bool = True, txn_write: bool = True,
              writer_topic: bool = True, verifier: bool = False) -> None:
        sk = self.sk
        if topic_describe:
            sk.grant_reader("reader", self.src, f"{self.groups}-" if group else None,
                            read=topic_read)
        elif group:
            sk.create_acls([allow("reader", ResourceType.GROUP, f"{self.groups}-",
                                  AclOperation.READ, ResourcePatternType.PREFIXED)])
        txn_prefix = f"{self.prefix}-" if txn and txn_write else None
        # The exactly-once sink reads the brokers' transaction partition verification at start.
        sk.grant_describe_configs("writer")
        if writer_topic:
            sk.grant_writer("writer", self.dst, txn_prefix, topic_write=topic_write)
        elif txn_prefix:
            sk.grant_writer("writer", unique("unused-topic"), txn_prefix)  # the ids, not the topic
        if txn and not txn_write:
            sk.create_acls([allow("writer", ResourceType.TRANSACTIONAL_ID, f"{self.prefix}-",
                                  AclOperation.DESCRIBE, ResourcePatternType.PREFIXED)])
        if verifier:  # txkafka.verify reads both topics as the reader (groups txkafka-verify-*)
            sk.grant_reader("reader", self.dst, VERIFY_GROUP_PREFIX)

    def reader_options(self, **override: str) -> dict[str, str]:
        return {**self.sk.kafka_options("reader", PROTO, MECH), "subscribe": self.src,
                "startingOffsets": "earliest", "groupIdPrefix": self.groups,
                "maxOffsetsPerTrigger": "400", "kafkaConsumer.pollTimeoutMs": "30000", **override}

    def writer_options(self, **override: str) -> dict[str, str]:
        return {**self.sk.kafka_options("writer", PROTO, MECH), "topic": self.dst,
                "transactionalIdPrefix": self.prefix, **override}

    def spec(self, checkpoint: str, **kw) -> dict:
        return {"reader": self.reader_options(), "writer": self.writer_options(),
                "checkpoint": checkpoint, "src": self.src, **kw}

    def target(self) -> dict[int, int]:
        return self.sk.admin_target.end_offsets(self.src)

    def assert_exactly_once(self) -> None:
        conf = self.sk.client_config("reader", PROTO, MECH)  # the verifier is least-privileged too
        rep = verify(conf, self.src, self.dst)
        assert rep.expected == self.topics.expected_ids, rep.text()
        assert rep.ok, rep.text()
        self.assert_nothing_open()

    def assert_nothing_open(self) -> None:
        # As the writer: ListTransactions answers with the ids the principal may DESCRIBE.
        writer = self.sk.target("writer", PROTO, MECH)
        assert writer.open_transactions(f"{self.prefix}-") == []
        assert self.sk.admin_target.open_transactions(f"{self.prefix}-") == []


def _assert_no_secret(text: str, secrets: list[str], where: str) -> None:
    # Never `assert s not in text`: pytest would print the secret on failure.
    leaked = sorted({f"{s[:6]}..." for s in secrets if s in text})
    assert not leaked, f"secret(s) {leaked} found in {where}"


def _secrets(sk: SecureKafka) -> list[str]:
    return [*sk.secret_values(), WRONG_PASSWORD]


def _shown(text: str, sk: SecureKafka) -> str:
    """``text`` for an assertion message: a failing assertion must not print a leaked secret."""
    for secret in _secrets(sk):
        text = text.replace(secret, "[SECRET]")
    return text


# ------------------------------------------------------------------------------- exactly once


@pytest.mark.parametrize("producer", ["librdkafka", "txkafka"])
def test_exactly_once_with_separate_least_privileged_principals(spark, secure_kafka, tmp_path,
                                                                producer):
    s = Setup(secure_kafka, records=900, per_txn=225)  # 5 transactions, the 4th aborted
    s.grant(verifier=True)
    ck = str(tmp_path / "ck")
    spec = s.spec(ck)
    q = _start(spark, {**spec, "reader": s.reader_options(maxOffsetsPerTrigger="600"),
                       "writer": {**spec["writer"], "producer": producer}})
    try:
        q.processAllAvailable()
        progress = [p["numInputRows"] for p in q.recentProgress]
    finally:
        q.stop()
    assert sum(progress) == s.topics.expected_ids  # aborted input transactions never read
    assert len([n for n in progress if n]) >= 2, progress  # several batches, several commits
    s.assert_exactly_once()
    log = SinkCommitLog(ck)
    committed = [c.transactional_id for b in log.batch_ids()
                 for c in log.batch_state(b).last.decision]
    assert committed and all(t.startswith(f"{s.prefix}-") for t in committed)
    assert all(log.batch_state(b).complete for b in log.batch_ids())


def _run_to_the_end_exactly_once(spark, s: Setup, ck: str, reader: dict, writer: dict,
                                 secrets: Callable[[], list[str]]) -> None:
    """Run the query over all the input in several batches; exactly once, every batch complete in
    the sink's commit log, and none of ``secrets()`` (asked after the run, so tokens issued during
    it count) anywhere in the checkpoint."""
    q = _start(spark, {**s.spec(ck), "reader": reader, "writer": writer})
    try:
        q.processAllAvailable()
        progress = [p["numInputRows"] for p in q.recentProgress]
    finally:
        q.stop()
    assert sum(progress) == s.topics.expected_ids
    assert len([n for n in progress if n]) >= 2, progress
    s.assert_exactly_once()
    log = SinkCommitLog(ck)
    assert all(log.batch_state(b).complete for b in log.batch_ids())
    text = "".join(p.read_text(errors="replace") for p in Path(ck).rglob("*") if p.is_file())
    _assert_no_secret(text, secrets(), "the checkpoint")


@pytest.mark.parametrize("stores", ["pkcs12", "jks"])
def test_exactly_once_over_mutual_tls_with_java_style_stores(spark, secure_kafka, tmp_path,
                                                             stores):
    """The SSL listener, where the client certificate is the principal, with the options a query
    moved over from Spark's kafka format carries: a PKCS#12 keystore with a PEM trust store
    (ssl.truststore.type=PEM), or JKS key and trust stores made by keytool (ssl.key.password
    differing from the store's). The tasks' producers (txkafka's own, the default) and the
    driver's commit client must present the same identity."""
    s = Setup(secure_kafka, records=600, per_txn=150)
    s.grant(verifier=True)
    sk = secure_kafka
    transport = ("kafka.sasl", "kafka.ssl", "kafka.security", "kafka.bootstrap")
    reader = {k: v for k, v in s.reader_options(maxOffsetsPerTrigger="250").items()
              if not k.startswith(transport)}
    reader.update(sk.kafka_options("reader", "SSL", keystore=stores, java_truststore=True))
    writer = {k: v for k, v in s.writer_options().items() if not k.startswith(transport)}
    writer.update(sk.kafka_options("writer", "SSL", keystore=stores, java_truststore=True))
    assert "kafka.ssl.keystore.location" in writer and "kafka.ssl.ca.location" not in writer
    _run_to_the_end_exactly_once(spark, s, str(tmp_path / "ck"), reader, writer,
                                 lambda: _secrets(sk))


def test_exactly_once_with_the_writer_on_oauthbearer_oidc(spark, secure_kafka, tmp_path):
    """The writer on SASL_SSL + OAUTHBEARER with OIDC client credentials (librdkafka's options:
    sasl.oauthbearer.method=oidc, client id and secret, token endpoint, scope): the tasks'
    producers (txkafka's own, the default) and the driver's commit client each get a token for
    User:writer from the token endpoint; the reader stays on SCRAM. Exactly once, nothing left
    open, no client secret or token in the commit log."""
    s = Setup(secure_kafka, records=600, per_txn=150)
    s.grant(verifier=True)
    sk = secure_kafka
    transport = ("kafka.sasl", "kafka.ssl", "kafka.security", "kafka.bootstrap")
    writer = {k: v for k, v in s.writer_options().items() if not k.startswith(transport)}
    writer.update(sk.kafka_options("writer", "SASL_SSL", "OAUTHBEARER", oidc=True))
    assert writer["kafka.sasl.oauthbearer.method"] == "oidc" and "kafka.sasl.password" not in writer
    fetched = sk.token_endpoint.requests.get("writer", 0)
    _run_to_the_end_exactly_once(spark, s, str(tmp_path / "ck"),
                                 s.reader_options(maxOffsetsPerTrigger="250"), writer,
                                 lambda: [*_secrets(sk), *sk.token_endpoint.issued])
    # The driver's commit client and the tasks' producers all asked the endpoint.
    assert sk.token_endpoint.requests.get("writer", 0) - fetched >= 2


# ----------------------------------------------------------------------- missing ACLs, passwords


# name -> (grants withheld, reader option overrides, writer option overrides, fails at start,
#          exception class, texts the error must contain ({src}, {dst}, {prefix}, {groups}))
CASES = {
    "writer-no-topic-write": (
        {"topic_write": False}, {}, {}, True, "KafkaAuthorizationError",
        ["checking the sink's topic at start", "not authorized on topic '{dst}'",
         "lacks WRITE", "--operation WRITE --operation DESCRIBE --topic {dst}"]),
    "writer-no-topic-acl": (
        {"writer_topic": False}, {}, {}, True, "KafkaAuthorizationError",
        ["not authorized on topic '{dst}'", "may not DESCRIBE it",
         "--operation WRITE --operation DESCRIBE --topic {dst}"]),
    "writer-no-transactional-id-acl": (
        {"txn": False}, {}, {}, True, "KafkaAuthorizationError",
        ["TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "TransactionalId '{prefix}-txkafka-acl-check'",
         "--transactional-id {prefix}- --resource-pattern-type prefixed"]),
    # DESCRIBE passes the start check (WRITE cannot be checked without acting): the tasks'
    # InitProducerId is refused, and the error names the id.
    "writer-transactional-id-describe-only": (
        {"txn_write": False}, {}, {}, False, "KafkaAuthorizationError",
        ["starting transaction {prefix}-", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
         "not authorized for transactional id '{prefix}-", "WRITE and DESCRIBE"]),
    "reader-no-topic-read": (
        {"topic_read": False}, {}, {}, True, "KafkaAuthorizationError",
        ["checking the reader's permissions at start", "not authorized on topic '{src}'",
         "lacks READ", "--operation READ --operation DESCRIBE --topic {src}"]),
    "reader-no-topic-describe": (
        {"topic_describe": False}, {}, {}, True, "KafkaAuthorizationError",
        ["not authorized on topic '{src}'", "may not DESCRIBE it",
         "--operation READ --operation DESCRIBE --topic {src}"]),
    "reader-no-group-acl": (
        {"group": False}, {}, {}, True, "KafkaAuthorizationError",
        ["not authorized on consumer group '{groups}-", "GROUP_AUTHORIZATION_FAILED",
         "--group {groups}- --resource-pattern-type prefixed"]),
    # Where the driver cannot know the topic (a pattern; a topic column), the task's error says it.
    "reader-pattern-no-topic-read": (
        {"topic_read": False}, {"subscribe": None, "subscribePattern": "{src}"}, {}, False,
        "KafkaAuthorizationError",
        ["reading topic '{src}' partition", "TOPIC_AUTHORIZATION_FAILED",
         "READ and DESCRIBE on Topic:{src}"]),
    # (txkafka's own producer, the default: AddPartitionsToTxn is refused, the topic named)
    "writer-topic-column-no-topic-write": (
        {"topic_write": False}, {}, {"topic": None}, False, "KafkaAuthorizationError",
        ["adding '{dst}' to transaction {prefix}-", "not authorized on topic '{dst}'",
         "TOPIC_AUTHORIZATION_FAILED", "WRITE and DESCRIBE on Topic:{dst}"]),
    # (librdkafka purges the records; the task asks the broker what the principal lacks)
    "writer-topic-column-no-topic-write-librdkafka": (
        {"topic_write": False}, {}, {"topic": None, "producer": "librdkafka"}, False,
        "KafkaAuthorizationError",
        ["purged the transaction's records", "not authorized on topic '{dst}'", "lacks WRITE"]),
    "reader-wrong-password": (
        {}, {"kafka.sasl.password": WRONG_PASSWORD}, {}, True, "KafkaAuthenticationError",
        ["SASL SCRAM-SHA-512 authentication of user 'reader' failed",
         "Check kafka.sasl.mechanism, kafka.sasl.username and kafka.sasl.password"]),
    "writer-wrong-password": (
        {}, {}, {"kafka.sasl.password": WRONG_PASSWORD}, True, "KafkaAuthenticationError",
        ["SASL SCRAM-SHA-512 authentication of user 'writer' failed",
         "Check kafka.sasl.mechanism, kafka.sasl.username and kafka.sasl.password"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_missing_permission_fails_clearly_and_commits_nothing(spark, secure_kafka, tmp_path, case):
    withheld, reader_over, writer_over, at_start, exc_name, needles = CASES[case]
    s = Setup(secure_kafka, records=200, per_txn=None)
    s.grant(**withheld)
    names = {"src": s.src, "dst": s.dst, "prefix": s.prefix, "groups": s.groups}
    spec = s.spec(str(tmp_path / "ck"))
    for side, over in (("reader", reader_over), ("writer", writer_over)):
        for k, v in over.items():
            if v is None:
                spec[side].pop(k)
            else:
                spec[side][k] = v.format(**names)
    if spec["writer"].get("topic") is None:
        spec["select"] = ["key", "value", f"'{s.dst}' AS topic"]

    q = _start(spark, spec)
    started = time.monotonic()
    try:
        try:
            finished = q.awaitTermination(QUERY_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - StreamingQueryException: what the user sees
            error = f"{e}\n{''.join(traceback.format_exception(e))}"
        else:
            pytest.fail(f"{case}: the query did not fail within {QUERY_TIMEOUT_S}s "
                        f"(terminated={finished}, progress={q.recentProgress[-1:]})")
        rows = [p["numInputRows"] for p in q.recentProgress]
    finally:
        if q.isActive:
            q.stop()
    elapsed = time.monotonic() - started

    _assert_no_secret(error, _secrets(secure_kafka), f"the {case} error")
    shown = _shown(error[-3000:], secure_kafka)
    assert f"txkafka.connector.errors.{exc_name}" in error, shown
    for needle in needles:
        assert needle.format(**names) in error, f"{needle!r} not in:\n{shown}"
    if at_start:  # no batch read anything: the query stopped while planning its first batch
        assert not any(rows), f"{case}: rows were read before the failure: {rows} ({elapsed:.0f}s)"
    # Nothing of a partial batch is visible, nothing even written, no transaction left open.
    assert s.sk.admin_target.read_all(s.dst) == []
    assert s.sk.admin_target.read_all(s.dst, isolation="read_uncommitted") == []
    assert s.sk.admin_target.open_transactions(f"{s.prefix}-") == []


# ----------------------------------------------- crash/recovery + secret hygiene (driver process)


def _txkafka_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "txkafka", *args], capture_output=True,
                          text=True, timeout=120, cwd=REPO)


def _properties(sk: SecureKafka, path: Path, user: str) -> str:
    """``user``'s client settings as the --command-config file of the txkafka commands."""
    path.write_text("".join(f"{k}={v}\n" for k, v in
                            sk.client_config(user, PROTO, MECH).items() if k != "bootstrap.servers"))
    path.chmod(0o600)
    return str(path)


def _write_spec(path: Path, spec: dict) -> str:
    path.write_text(json.dumps(spec))
    path.chmod(0o600)  # it holds the credentials, like a secret store would
    return str(path)


def _files_under(root: Path) -> str:
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out.append(f"== {p.relative_to(root)}\n{p.read_bytes().decode('utf-8', 'replace')}")
    return "\n".join(out)


def test_driver_crash_recovery_and_no_secret_anywhere(secure_kafka, driver_processes, tmp_path):
    sk = secure_kafka
    s = Setup(sk, records=1000, per_txn=250)
    s.grant(verifier=True)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    # Every Python process of the driver (the JVM's data source runners and executor workers
    # inherit this environment) logs at DEBUG to stderr, which the driver's log captures with the
    # JVM's own log (raised to INFO by _driver_main) and the program's output.
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    ck = tmp_path / "ck"
    debug = {"kafka.debug": "security,conf"}  # librdkafka's debug log, routed to Python logging
    # A transaction timeout longer than the restart takes here (a loaded CI machine can take a
    # minute), so the restart really rolls the decided transactions forward.
    spec = s.spec(str(ck), target=s.target(), timeout=240,
                  reader={**s.reader_options(maxOffsetsPerTrigger="500"), **debug},
                  writer={**s.writer_options(), **debug, "kafka.transaction.timeout.ms": "300000"})
    me = str(Path(__file__).resolve())
    captured: list[tuple[str, str]] = []

    # 1. The driver dies between the first and the second EndTxn of batch 2.
    marker = tmp_path / "kill.marker"
    kill = f"point=between_endtxn,batch=2,action=kill,once={marker}"
    proc = driver_processes(me, _write_spec(tmp_path / "crash.json", spec),
                            env={**env, ENV_VAR: kill})  # this driver and its workers only
    code = proc.wait(300)
    captured.append(("crashed driver", proc.output()))
    assert marker.exists() and code == -9, _shown(proc.tail(), sk)
    state = SinkCommitLog(str(ck)).latest()
    assert state.batch_id == 2 and state.pending is not None  # decided, partly committed

    # 2. The operator CLI over SASL_SSL (-X settings, or the same in a --command-config file):
    #    the decided batch's open transactions.
    xargs = [a for k, v in sk.client_config("writer", PROTO, MECH).items()
             if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    conn = ["-b", sk.bootstrap(PROTO), "--checkpoint", str(ck), *xargs]
    by_file = ["-b", sk.bootstrap(PROTO), "--checkpoint", str(ck), "--command-config",
               _properties(sk, tmp_path / "writer.properties", "writer")]
    calls = [["transactions", "list", *by_file, "--json"], ["transactions", "list", *conn],
             ["transactions", "abort", *conn, "--yes"],
             ["commit-log", "show", "--checkpoint", str(ck)]]
    with ThreadPoolExecutor(len(calls)) as pool:
        done = list(pool.map(lambda a: _txkafka_cli(*a), calls))
    # (the command lines hold the password: only what the CLI printed is captured)
    captured += [(f"txkafka {a[0]} {a[1]}", f"{p.stdout}\n{p.stderr}") for a, p in zip(calls, done)]
    # abort refuses the decided batch's transactions: exit status 3, an operator's call
    assert [p.returncode for p in done] == [0, 0, 3, 0], _shown(str([p.stderr[-2000:]
                                                                      for p in done]), sk)
    rows = json.loads(done[0].stdout)
    assert rows and all(r["decided_pending_commit"] for r in rows), _shown(done[0].stdout, sk)
    assert all(r["transactional_id"].startswith(f"{s.prefix}-") for r in rows)
    assert "[DECIDED: will be committed on restart]" in done[1].stdout
    assert "refusing to abort" in done[2].stderr and "decided, not finished" in done[3].stdout

    # 3. Restart: the decided batch is rolled forward over SASL_SSL before anything else runs;
    #    then, in the same driver, a query whose reader has a wrong password fails.
    spec["failing"] = {**spec, "checkpoint": str(tmp_path / "ck-bad"),
                       "reader": {**spec["reader"], "kafka.sasl.password": WRONG_PASSWORD}}
    proc = driver_processes(me, _write_spec(tmp_path / "restart.json", spec), env=env)
    code = proc.wait(300)
    restarted = proc.output()
    captured.append(("restarted driver", restarted))
    assert code == 0 and "PIPELINE-DONE" in restarted, _shown(proc.tail(), sk)
    assert "rolling forward batch 2" in restarted
    s.assert_exactly_once()
    # txkafka verify as the reader, its settings in a --command-config file: the same verdict.
    checked = _txkafka_cli("verify", "-b", sk.bootstrap(PROTO), "--input", s.src, "--output",
                           s.dst, "--command-config",
                           _properties(sk, tmp_path / "reader.properties", "reader"), "--json")
    captured.append(("txkafka verify", f"{checked.stdout}\n{checked.stderr}"))
    assert checked.returncode == 0, _shown(checked.stdout + checked.stderr, sk)
    report = json.loads(checked.stdout)
    assert report["ok"] and report["expected"] == s.topics.expected_ids, report
    rounds = SinkCommitLog(str(ck)).batch_state(2).rounds
    assert len(rounds) == 1 and not rounds[0].lost, rounds  # committed by recovery, none lost
    failed = restarted[restarted.index("PIPELINE-DONE"):]
    assert "FAILING-QUERY-FAILED" in failed, _shown(proc.tail(), sk)
    assert "KafkaAuthenticationError: fetching topic metadata: SASL SCRAM-SHA-512 " \
           "authentication of user 'reader' failed" in failed

    captured.append(("checkpoint", _files_under(ck)))
    captured.append(("failed query's checkpoint", _files_under(tmp_path / "ck-bad")))
    everything = "\n".join(f"##### {name}\n{text}" for name, text in captured)

    # The capture is real: DEBUG logs of the Python processes, librdkafka's debug log (its config
    # dump lists the secrets, redacted), the JVM's errors, the sink's commit log records.
    assert " DEBUG " in restarted and "txkafka.connector.sink.committer WARNING" in restarted
    assert "txkafka.librdkafka DEBUG" in everything
    assert "sasl.password = [redacted]" in everything
    assert "ERROR MicroBatchExecution" in failed  # Spark's own log of the failed query
    # Spark's JVM log really is at INFO, in both driver runs (not PySpark's default WARN).
    for name, text in captured:
        if name.endswith(" driver"):
            assert "INFO MicroBatchExecution: " in text, name
    assert "txkafka-sink/log/" in everything and ".decision.json" in everything
    for name, text in captured:
        _assert_no_secret(text, _secrets(sk), name)


def test_py4j_debug_log_holds_option_values(spark, caplog):
    """Why the capture above keeps py4j at INFO: py4j's DEBUG log ("Command to send: ...") holds
    every .option() value verbatim, in any PySpark program. docs/operations-security.md says so."""
    value = "notARealPw" + unique("x")
    with caplog.at_level("DEBUG", logger="py4j"):
        spark.readStream.format("txkafka").option("kafka.sasl.password", value)
    assert any(value in r.getMessage() for r in caplog.records if r.name.startswith("py4j"))


def test_spark_hides_every_secret_option_in_plans(spark):
    """A batch write's logical plan (the SQL tab and the event log with
    spark.sql.ui.explainMode=extended) lists the writer's options with Spark's redaction, which
    by default keeps a PEM private key and sasl.oauthbearer.config: txkafka's session sets
    spark.sql.redaction.options.regex to its rule (docs/operations-security.md)."""
    secrets = {"kafka.ssl.keystore.key": "-----BEGIN PRIVATE KEY-----\nMIIEvQplanKey\n"
                                         "-----END PRIVATE KEY-----",
               "kafka.ssl.key.pem": "MIIEvQplanPem", "kafka.sasl.oauthbearer.config":
                   "principal=writer extension_t=planExt42", "kafka.sasl.password": "planPw42"}
    jvm = spark._jvm
    options = jvm.java.util.HashMap()
    for k, v in {**secrets, "topic": "out", "kafka.bootstrap.servers": "h:9092"}.items():
        options.put(k, v)
    # What TreeNode.argString does with an options map (Spark's redactMapString).
    shown = spark._jsparkSession.sessionState().conf().redactOptions(
        jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(options)).toString()
    assert "topic -> out" in shown and "h:9092" in shown
    _assert_no_secret(shown, ["MIIEvQplanKey", "MIIEvQplanPem", "planExt42", "planPw42"],
                      "Spark's rendering of the writer's options")
