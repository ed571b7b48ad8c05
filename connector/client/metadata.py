"""Metadata requests (v9-12) on a :class:`BrokerConnection`: the brokers, and partition leaders.

Why: the driver's transaction client needs the live brokers (to reach coordinators when the
bootstrap ones are down), the executors' own fetch a partition's leader, and the wire producer the
leaders and partition count of the topics it writes; one request shape and one parser serve all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .connection import ApiRange, BrokerConnection
from .protocol import Reader, Writer

METADATA = 3
METADATA_API = ApiRange(METADATA, "Metadata", 9, 12)


@dataclass
class ClusterMetadata:
    brokers: dict[int, tuple[str, int]]    # node id -> (host, port), in the answer's order
    leaders: dict[tuple[str, int], int]    # (topic, partition) -> leader node, error-free ones
    partitions: dict[str, int] = field(default_factory=dict)    # topic -> partition count
    topic_errors: dict[str, int] = field(default_factory=dict)  # topic -> error code, if any


def request_metadata(conn: BrokerConnection, topics: list[str]) -> ClusterMetadata:
    """Ask ``conn`` for the brokers and the partitions of ``topics`` (none: brokers only)."""
    v = conn.version_for(*METADATA_API.spec)

    def topic(w: Writer, name: str) -> None:
        if v >= 10:
            w.int64(0).int64(0)  # topic id: unknown, the name says which
        w.string(name).tags()

    w = Writer(True).array(topics, topic).boolean(False)  # no auto-creation
    if v <= 10:
        w.boolean(False)  # include_cluster_authorized_operations
    w.boolean(False).tags()
    r = conn.request(METADATA, v, w.build(), flexible=True)
    conn.throttle(r.int32())

    def broker(rr: Reader) -> tuple[int, str, int]:
        node, host, port = rr.int32(), rr.string() or "", rr.int32()
        rr.string()  # rack
        rr.tags()
        return node, host, port

    brokers = {node: (host, port) for node, host, port in r.array(broker)}
    r.string()  # cluster id
    r.int32()   # controller
    leaders: dict[tuple[str, int], int] = {}
    counts: dict[str, int] = {}
    topic_errors: dict[str, int] = {}

    def topic_md(rr: Reader) -> None:
        err = rr.int16()
        name = rr.string() or ""
        if err:
            topic_errors[name] = err
        if v >= 10:
            rr.int64()
            rr.int64()
        rr.boolean()  # internal

        def part(p: Reader) -> None:
            err, index, node = p.int16(), p.int32(), p.int32()
            p.int32()  # leader epoch
            for _ in range(3):  # replicas, in-sync replicas, offline replicas
                p.array(lambda x: x.int32())
            p.tags()
            if err == 0:
                leaders[(name, index)] = node

        counts[name] = len(rr.array(part))
        rr.int32()  # topic authorized operations
        rr.tags()

    r.array(topic_md)
    return ClusterMetadata(brokers, leaders, counts, topic_errors)
