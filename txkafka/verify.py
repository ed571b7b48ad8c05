"""``txkafka verify``: check a pipeline's output against its input for duplicates, gaps and order.

Both topics are read with read_committed consumers from the start to their last stable offsets.
Each record must carry a unique id (its key, a header, or its value); the verifier reports how many
ids were expected, found, duplicated, missing and unexpected, plus order violations: within one
output partition, records that came from the same input partition must keep their input order.
The exit code is non-zero on any duplicate or missing record, so it can gate a deployment.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Iterator

_quiet = logging.getLogger("txkafka.verify.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False

IdExtractor = Callable[[object], bytes | None]


@dataclass
class VerifyReport:
    input_topic: str
    output_topic: str
    expected: int = 0
    found: int = 0
    distinct_found: int = 0
    duplicates: int = 0
    missing: int = 0
    unexpected: int = 0
    order_violations: int = 0
    input_partitions: int = 0
    output_partitions: int = 0
    seconds: float = 0.0
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.duplicates == 0 and self.missing == 0 and self.unexpected == 0 and \
            self.order_violations == 0

    def text(self) -> str:
        verdict = "EXACTLY ONCE" if self.ok else "FAILED"
        lines = [
            f"txkafka verify: {self.input_topic} -> {self.output_topic}: {verdict}",
            f"  expected ids       {self.expected}",
            f"  found records      {self.found} ({self.distinct_found} distinct ids)",
            f"  duplicates         {self.duplicates}",
            f"  missing            {self.missing}",
            f"  unexpected         {self.unexpected}",
            f"  order violations   {self.order_violations}",
        ]
        for kind, ex in self.examples.items():
            if ex:
                lines.append(f"  e.g. {kind}: {', '.join(ex)}")
        return "\n".join(lines)


def id_extractor(spec: str) -> IdExtractor:
    """``key``, ``value`` or ``header:NAME``."""
    if spec == "key":
        return lambda m: m.key()
    if spec == "value":
        return lambda m: m.value()
    if spec.startswith("header:"):
        name = spec.split(":", 1)[1]

        def from_header(m) -> bytes | None:
            for k, v in m.headers() or ():
                if k == name:
                    return v
            return None

        return from_header
    raise ValueError(f"--id must be key, value or header:NAME, got {spec!r}")


def scan_topic(conf: dict, topic: str, timeout_s: float = 120.0) -> Iterator[object]:
    """Every committed record of ``topic``, partition by partition up to the last stable offset."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    c = Consumer({**conf, "group.id": f"txkafka-verify-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "isolation.level": "read_committed", "logger": _quiet})
    try:
        md = c.list_topics(topic, timeout=30)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            raise SystemExit(f"error: topic {topic!r} not found ({t.error if t else 'no metadata'})")
        parts = sorted(t.partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        pending = set(parts)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{topic}: partitions {sorted(pending)} did not reach their end in "
                    f"{timeout_s:.0f}s (an open transaction blocks read_committed readers)"
                )
            for m in c.consume(5000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                        continue
                    raise KafkaException(err)
                yield m
    finally:
        c.close()


def verify(conf: dict, input_topic: str, output_topic: str, *, id_in: str = "key",
           id_out: str = "key", check_order: bool = True,
           input_records: Iterable | None = None) -> VerifyReport:
    started = time.monotonic()
    rep = VerifyReport(input_topic, output_topic)
    get_in, get_out = id_extractor(id_in), id_extractor(id_out)
    origin: dict[bytes, tuple[int, int]] = {}
    in_parts: set[int] = set()
    for m in (input_records if input_records is not None else scan_topic(conf, input_topic)):
        rid = get_in(m)
        if rid is None:
            continue
        origin.setdefault(rid, (m.partition(), m.offset()))
        in_parts.add(m.partition())
    rep.expected = len(origin)
    rep.input_partitions = len(in_parts)

    counts: Counter[bytes] = Counter()
    last_seen: dict[tuple[int, int], int] = {}  # (output partition, input partition) -> offset
    out_parts: set[int] = set()
    order_examples: list[str] = []
    for m in scan_topic(conf, output_topic):
        rid = get_out(m)
        if rid is None:
            continue
        counts[rid] += 1
        out_parts.add(m.partition())
        src = origin.get(rid)
        if check_order and src is not None and counts[rid] == 1:
            key = (m.partition(), src[0])
            prev = last_seen.get(key)
            if prev is not None and src[1] < prev:
                rep.order_violations += 1
                if len(order_examples) < 5:
                    order_examples.append(_show(rid))
            last_seen[key] = src[1] if prev is None else max(prev, src[1])
    rep.found = sum(counts.values())
    rep.distinct_found = len(counts)
    dups = [rid for rid, n in counts.items() if n > 1]
    rep.duplicates = sum(counts[rid] - 1 for rid in dups)
    missing = [rid for rid in origin if rid not in counts]
    unexpected = [rid for rid in counts if rid not in origin]
    rep.missing, rep.unexpected = len(missing), len(unexpected)
    rep.output_partitions = len(out_parts)
    rep.examples = {
        "duplicates": [_show(r) for r in dups[:5]],
        "missing": [_show(r) for r in missing[:5]],
        "unexpected": [_show(r) for r in unexpected[:5]],
        "order": order_examples,
    }
    rep.seconds = round(time.monotonic() - started, 3)
    return rep


def _show(rid: bytes) -> str:
    try:
        return rid.decode()
    except (UnicodeDecodeError, AttributeError):
        return repr(rid)


def cmd_verify(args: argparse.Namespace) -> int:
    conf = {"bootstrap.servers": args.bootstrap_servers}
    for item in args.conf or []:
        k, _, v = item.partition("=")
        conf[k] = v
    rep = verify(conf, args.input, args.output, id_in=args.id_in or args.id,
                 id_out=args.id_out or args.id, check_order=not args.no_order)
    if args.json:
        payload = {**asdict(rep), "ok": rep.ok}
        if args.json == "-":
            print(json.dumps(payload, indent=2))
        else:
            with open(args.json, "w") as fh:
                json.dump(payload, fh, indent=2)
    if args.json != "-":
        print(rep.text())
    return 0 if rep.ok else 1


def register_cli(sub) -> None:
    p = sub.add_parser("verify", help="check an output topic holds each input record exactly once")
    p.add_argument("--bootstrap-servers", "-b", required=True)
    p.add_argument("--input", required=True, help="input topic")
    p.add_argument("--output", required=True, help="output topic")
    p.add_argument("--id", default="key", help="where the unique id is: key, value or header:NAME")
    p.add_argument("--id-in", help="id location in the input, if it differs")
    p.add_argument("--id-out", help="id location in the output, if it differs")
    p.add_argument("--no-order", action="store_true", help="skip the per-partition order check")
    p.add_argument("--json", help="write the report as JSON to this file ('-' for stdout)")
    p.add_argument("--conf", "-X", action="append",
                   help="extra librdkafka setting key=value (security settings)")
    p.set_defaults(func=cmd_verify)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    register_cli(ap.add_subparsers(dest="command", required=True))
    a = ap.parse_args()
    sys.exit(a.func(a))
