"""The monitoring figures without a broker: lag from offsets (Spark's meanings), the sink's
figures from its commit log (driven by the in-memory coordinator of the sink's unit tests), the
listener on progress events, and ``txkafka status``'s verdicts and exit statuses.

(Against Apache Kafka and Spark: integration_tests/test_monitoring.py.)
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from tests.spark_checkpoint_files import write_commits, write_metadata, write_offsets
from tests.test_sink_core import FakeCoordinator, _committer, _results
from txkafka.cli import main
from txkafka.connector.client.error_codes import INVALID_PRODUCER_ID_MAPPING
from txkafka.connector.sink.committable import KafkaCommittable, TaskResult
from txkafka.connector.sink.figures import FiguresReader
from txkafka.connector.source.lag import Lag, lag_between, progress_lag
from txkafka.monitoring import TxKafkaListener


def test_lag_has_spark_s_names_and_meanings():
    lag = lag_between({("a", 0): 10, ("a", 1): 20}, {("a", 0): 15, ("a", 1): 20, ("a", 2): 3})
    assert lag.partitions == {("a", 0): 5, ("a", 1): 0, ("a", 2): 3}  # a new partition from 0
    assert (lag.total, lag.max, lag.min, lag.avg) == (8, 5, 0, 8 / 3)
    assert lag.metrics() == {"avgOffsetsBehindLatest": str(8 / 3), "maxOffsetsBehindLatest": "5",
                             "minOffsetsBehindLatest": "0"}
    assert Lag({}).metrics() == {}  # Spark's source reports nothing then either
    # A latest offset read before the end was planned is not "ahead".
    assert lag_between({("a", 0): 10}, {("a", 0): 7}).total == 0


def test_progress_lag_reads_txkafka_s_offsets_and_skips_other_sources():
    end = json.dumps({"txkafka:start": {"t": {"0": 0}}, "t": {"0": 40, "1": 50}})
    assert progress_lag(end, '{"t":{"0":100,"1":50}}').partitions == {("t", 0): 60, ("t", 1): 0}
    assert progress_lag({"t": {"0": 1}}, {"t": {"0": 4}}).total == 3
    assert progress_lag('{"logOffset":3}', '{"logOffset":5}') is None  # a file source
    assert progress_lag("None", "None") is None and progress_lag(end, None) is None


def _with_bytes(results: list[TaskResult], size: int) -> list[TaskResult]:
    return [TaskResult(r.partition_id, r.attempt, r.batch_id, KafkaCommittable(
        **{**r.committable.to_json(), "byte_count": size}), r.record_count) for r in results]


def test_the_sink_figures_come_from_its_records(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    orphan = _results(ids, fake, 1, [0], attempt=1)[0].committable  # a speculative loser
    committer.commit(1, _with_bytes(_results(ids, fake, 1, [0, 1]), 70))
    assert fake.txns[orphan.transactional_id]["state"] == "CompleteAbort"
    committer.commit(2, [TaskResult(0, 0, 2, None, 0)])  # nothing to write: an empty batch
    committer.commit(3, _results(ids, fake, 3, [0]))     # a task of an older txkafka: no bytes
    figures = {f.batch_id: f for f in FiguresReader(log).newest()}
    one = figures[1]
    assert (one.status, one.committed, one.records, one.bytes, one.aborted) == (
        "complete", 2, 10, 140, 1)
    assert one.commit_ms is not None and one.completed_ms is not None
    # The orphan was swept after batch 1's outcome: the sink's next record carries it, for batch 1.
    assert (figures[2].status, figures[2].aborted, figures[2].records) == ("empty", 0, 0)
    assert figures[2].carried == {"aborted": 1, "late_swept": 0}
    assert FiguresReader(log).newest(1)[0].aborted == 0  # batch 3's own: none carried yet
    assert figures[3].bytes is None and figures[3].records == 5


def _progress(qid: str, batch: int, end: dict, latest: dict, name: str = "orders"):
    src = SimpleNamespace(endOffset=json.dumps(end), latestOffset=json.dumps(latest))
    return SimpleNamespace(progress=SimpleNamespace(
        id=qid, runId="run-1", name=name, batchId=batch, timestamp="2026-12-07T04:00:00.000Z",
        sources=[src]))


def test_the_listener_keeps_the_newest_figures_and_exports_them(tmp_path):
    fake = FakeCoordinator()
    committer, ids, _log = _committer(tmp_path, fake)
    write_metadata(tmp_path, "q-1")
    committer.commit(0, _with_bytes(_results(ids, fake, 0, [0, 1]), 30))
    listener = TxKafkaListener([str(tmp_path)])
    listener.onQueryProgress(_progress("q-1", 0, {"t": {"0": 5, "1": 5}}, {"t": {"0": 9, "1": 5}}))
    listener.onQueryProgress(_progress("q-1", 1, {"t": {"0": 9, "1": 5}}, {"t": {"0": 9, "1": 5}}))
    fig = listener.figures("orders")
    assert fig is listener.figures("q-1") and fig.lag_history == [4, 0]
    assert fig.totals["committed"] == 2 and fig.totals["bytes"] == 60  # batch 0 counted once
    text = listener.prometheus_text()
    for line in ('txkafka_source_offsets_behind_latest{partition="0",query="orders",topic="t"} 0.0',
                 'txkafka_source_max_offsets_behind_latest{query="orders"} 0.0',
                 'txkafka_sink_transactions_committed_total{query="orders"} 2.0',
                 'txkafka_sink_records_total{query="orders"} 10.0',
                 'txkafka_sink_bytes_total{query="orders"} 60.0',
                 'txkafka_sink_last_batch_id{query="orders"} 0.0'):
        assert line in text, text
    # A progress event it cannot read is logged, never raised into Spark.
    listener.onQueryProgress(SimpleNamespace(progress=None))


def _checkpoint_with_a_sink(tmp_path):
    fake = FakeCoordinator()
    committer, ids, log = _committer(tmp_path, fake)
    write_metadata(tmp_path, "q-1")
    log.record_place(exclusive=True)  # as the query's first start does
    write_offsets(tmp_path, 0, '{"t":{"0":5}}')
    committer.commit(0, _results(ids, fake, 0, [0]))
    write_commits(tmp_path, 0)
    return fake, committer, ids, log


def test_status_without_a_cluster_shows_the_checkpoint_and_exits_healthy(tmp_path, capsys):
    _checkpoint_with_a_sink(tmp_path)
    assert main(["status", "--checkpoint", str(tmp_path), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert (s["state"], s["committed_batch"], s["query_id"], s["lag"]) == ("HEALTHY", 0, "q-1", None)
    assert [b["batch_id"] for b in s["sink_batches"]] == [0] and s["needs_operator"] == []
    assert main(["status", "--checkpoint", str(tmp_path)]) == 0
    screen = capsys.readouterr().out
    assert "state: HEALTHY" in screen and "needs an operator: nothing" in screen


def test_status_exit_statuses_a_script_can_tell_apart(tmp_path, capsys):
    fake, committer, ids, log = _checkpoint_with_a_sink(tmp_path)
    # A decided batch whose outcome Kafka could not tell: an operator must answer.
    results = _results(ids, fake, 1, [0])
    fake.forgotten[results[0].committable.transactional_id] = INVALID_PRODUCER_ID_MAPPING
    with pytest.raises(Exception, match="unknown"):
        committer.commit(1, results)
    assert main(["status", "--checkpoint", str(tmp_path), "--json"]) == 3
    s = json.loads(capsys.readouterr().out)
    assert s["state"] == "NEEDS AN OPERATOR" and "commit-log resolve" in s["needs_operator"][0]
    assert main(["status", "--checkpoint", str(tmp_path / "nothing-here")]) == 4
    assert "no Spark checkpoint there" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["status"])
    assert usage.value.code == 2


def test_status_says_when_the_checkpoint_was_moved(tmp_path, capsys):
    _checkpoint_with_a_sink(tmp_path / "a")
    (tmp_path / "a").rename(tmp_path / "b")
    assert main(["status", "--checkpoint", str(tmp_path / "b")]) == 3
    assert "commit-log moved" in capsys.readouterr().out

