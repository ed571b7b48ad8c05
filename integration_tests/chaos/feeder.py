"""A transactional producer that feeds the pipeline's input while the pipeline runs and crashes.

Why concurrent: a restart must replay exactly the logged offsets while new data keeps arriving, and
the reader must skip aborted records and transaction markers at every batch boundary. Some
transactions are aborted on purpose (their records must never reach the output or a count).

Modes:
- ``map``: each committed record's key is a unique id (``<tag>-<seq>``); aborted ones carry
  ``aborted-<tag>-<seq>``, so a leak shows as an unexpected id.
- ``aggregate``: keys are group keys, each written ``repeats`` times in successive committed
  transactions (so a group's records straddle micro-batches and event-time windows); aborted
  transactions carry the same group keys, so a leak shows as a count above the input's.

Record timestamps (event time) follow a logical clock, ``step_ms`` per transaction, in production
order: the windowed aggregation's watermark then never makes a record late. Stopping an aggregate
feeder writes one last record far ahead in event time, so the watermark closes every real window.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaException

from integration_tests.kafka_helpers import QUIET, KafkaTarget

log = logging.getLogger(__name__)


@dataclass
class FeederStats:
    transactions_committed: int = 0
    transactions_aborted: int = 0        # aborted on purpose
    transactions_failed: int = 0         # aborted because the broker refused (counted by reading back)
    records_committed: int = 0
    records_aborted: int = 0
    errors: list[str] = field(default_factory=list)


class InputFeeder:
    """Produce transactions to ``topic`` on a background thread until ``stop()``."""

    def __init__(self, kafka: KafkaTarget, topic: str, mode: str, tag: str, *,
                 records_per_txn: int = 60, interval_s: float = 0.2, abort_ratio: float = 0.2,
                 repeats: int = 3, seed: int = 0, step_ms: int = 200,
                 flush_ahead_ms: int = 60_000) -> None:
        if mode not in ("map", "aggregate"):
            raise ValueError(f"mode must be map or aggregate, got {mode!r}")
        self.kafka = kafka
        self.topic = topic
        self.mode = mode
        self.tag = tag
        self.records_per_txn = records_per_txn
        self.interval_s = interval_s
        self.abort_ratio = abort_ratio
        self.repeats = repeats
        self.rng = random.Random(seed)
        self.stats = FeederStats()
        self._seq = 0
        self.step_ms = step_ms
        self.flush_ahead_ms = flush_ahead_ms
        self.base_ms = int(time.time() * 1000) // 10_000 * 10_000
        self._txn = 0              # transactions begun: the event-time clock
        self._block = 0            # aggregate: the next block of groups to start
        self._stop = threading.Event()
        self._running = threading.Event()  # cleared while paused
        self._running.set()
        self._idle = threading.Event()     # set while paused and between transactions
        self._thread: threading.Thread | None = None
        self._producer = None

    # ------------------------------------------------------------------ records

    def _group(self, block: int, i: int) -> str:
        return f"{self.tag}-g{block:06d}-{i:03d}"

    def _block_size(self) -> int:
        return max(1, self.records_per_txn // self.repeats)

    def _records(self, aborted: bool) -> list[tuple[str, str]]:
        """The next transaction's (key, value) pairs; values are unique record ids."""
        out = []
        if self.mode == "map":
            for _ in range(self.records_per_txn):
                self._seq += 1
                key = f"{'aborted-' if aborted else ''}{self.tag}-{self._seq:09d}"
                out.append((key, f"v{self._seq}"))
            return out
        # aggregate: occurrence r of the groups of block (current - r), r = 0..repeats-1
        n = self._block_size()
        for r in range(self.repeats):
            block = self._block - r
            if block < 0:
                continue
            for i in range(n):
                self._seq += 1
                out.append((self._group(block, i), f"{'aborted-' if aborted else ''}r{self._seq}"))
        if not aborted:
            self._block += 1
        return out

    def _closing_records(self) -> list[list[tuple[str, str]]]:
        """Aggregate: the transactions that give the last blocks all their occurrences."""
        txns = []
        n = self._block_size()
        for step in range(1, self.repeats):
            recs = []
            for r in range(step, self.repeats):
                block = self._block - 1 - (r - step)
                if block < 0:
                    continue
                for i in range(n):
                    self._seq += 1
                    recs.append((self._group(block, i), f"r{self._seq}"))
            if recs:
                txns.append(recs)
        return txns

    # ----------------------------------------------------------------- producing

    def _new_producer(self):
        p = self.kafka.producer(f"chaos-feeder-{self.tag}", **{
            "transaction.timeout.ms": 60000, "message.timeout.ms": 55000,
            "enable.idempotence": True, "logger": QUIET})
        p.init_transactions(120)
        return p

    def _transaction(self, records: list[tuple[str, str]], abort: bool) -> bool:
        """One transaction; True if it committed. Broker trouble aborts it (counted as failed)."""
        if self._producer is None:
            self._producer = self._new_producer()
        p = self._producer
        ts = self.base_ms + self._txn * self.step_ms
        self._txn += 1
        try:
            p.begin_transaction()
            for key, value in records:
                while True:
                    try:
                        p.produce(self.topic, value.encode(), key.encode(), timestamp=ts)
                        break
                    except BufferError:
                        p.poll(0.05)
            if abort:
                p.flush(60)  # really write the aborted records (and the abort marker)
                p.abort_transaction(60)
                self.stats.transactions_aborted += 1
                self.stats.records_aborted += len(records)
                return False
            self._commit(p)
            self.stats.transactions_committed += 1
            self.stats.records_committed += len(records)
            return True
        except KafkaException as e:
            err = e.args[0]
            self.stats.transactions_failed += 1
            if len(self.stats.errors) < 20:
                self.stats.errors.append(str(err))
            if not err.fatal() and err.txn_requires_abort():
                try:
                    p.abort_transaction(60)
                    return False
                except KafkaException:
                    pass
            # Fatal (or the abort failed): a new producer with the same id fences this one and
            # aborts whatever it left open.
            self._producer = None
            return False

    @staticmethod
    def _commit(p) -> None:
        deadline = time.monotonic() + 120
        while True:
            try:
                p.commit_transaction(60)
                return
            except KafkaException as e:
                if e.args[0].retriable() and time.monotonic() < deadline:
                    time.sleep(0.5)
                    continue
                raise

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._running.is_set():
                self._idle.set()
                self._running.wait(0.2)
                continue
            self._idle.clear()
            abort = self.rng.random() < self.abort_ratio
            # A failed commit still advances the blocks: its groups just have fewer occurrences,
            # and the verifier counts what the input topic really holds.
            self._transaction(self._records(abort), abort)
            self._stop.wait(self.interval_s)

    def pause(self, timeout: float = 120.0) -> None:
        """Stop feeding until ``resume()``; returns once no transaction is under way (so the
        input's last stable offsets no longer move)."""
        self._running.clear()
        if self._thread is None or not self._thread.is_alive():
            return
        if not self._idle.wait(timeout):
            raise AssertionError(f"the input feeder did not pause within {timeout}s: "
                                 f"{self.stats.errors[-3:]}")

    def resume(self) -> None:
        self._idle.clear()
        self._running.set()

    def start(self) -> "InputFeeder":
        self._thread = threading.Thread(target=self._run, name=f"feeder-{self.tag}", daemon=True)
        self._thread.start()
        return self

    @property
    def stopped(self) -> bool:
        """stop() was called: the feeder adds nothing more by itself."""
        return self._stop.is_set()

    def produce_now(self, transactions: int) -> None:
        """Feed synchronously (before a campaign starts, or without the thread)."""
        for _ in range(transactions):
            abort = self.rng.random() < self.abort_ratio
            self._transaction(self._records(abort), abort)

    def stop(self, timeout: float = 180.0) -> FeederStats:
        """Stop feeding; in aggregate mode, complete every started group first."""
        self._stop.set()
        self._running.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise AssertionError(f"the input feeder did not stop within {timeout}s: "
                                     f"{self.stats.errors[-3:]}")
        if self.mode == "aggregate":
            for recs in self._closing_records():
                for _attempt in range(5):
                    if self._transaction(recs, abort=False):
                        break
            # Far ahead in event time: the watermark passes every window written above.
            self._txn += self.flush_ahead_ms // self.step_ms
            for _attempt in range(5):
                if self._transaction([(f"{self.tag}-flush", "flush")], abort=False):
                    break
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None
        return self.stats
