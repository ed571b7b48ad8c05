"""The ``txkafka`` command line: a local broker, the demo, and (for operators) the sink's transactions."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence

Handler = Callable[[argparse.Namespace], int]
_COMMANDS: dict[str, Handler] = {}


def _broker_cluster(args: argparse.Namespace):
    from .embedded_kafka import EmbeddedKafka

    return EmbeddedKafka(
        args.name,
        nodes=getattr(args, "nodes", 1) or 1,
        transaction_version=getattr(args, "transaction_version", None),
        version=getattr(args, "kafka_version", None),
    )


def cmd_broker(args: argparse.Namespace) -> int:
    from .embedded_kafka import EmbeddedKafka, EmbeddedKafkaError

    if args.action == "start":
        try:
            cluster = _broker_cluster(args)
        except ValueError as e:  # a version that cannot run, or a feature it lacks
            print(f"error: {e}", file=sys.stderr)
            return 2
        try:
            bootstrap = cluster.start(timeout=args.timeout)
        except EmbeddedKafkaError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(bootstrap)
        return 0
    cluster = EmbeddedKafka(args.name)
    if args.action == "stop":
        cluster.destroy() if args.clean else cluster.stop()
        return 0
    if args.action == "status":
        st = cluster.status()
        print(json.dumps(st, indent=2))
        return 0 if cluster.is_running() else 3
    if args.action == "logs":
        for node in cluster.node_infos:
            print(cluster.log_tail(node, args.lines))
        return 0
    raise AssertionError(args.action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="txkafka", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("broker", help="run a local Apache Kafka (KRaft) from Maven Central jars")
    b.add_argument("action", choices=["start", "stop", "status", "logs"])
    b.add_argument("--name", default="default", help="cluster name (several can run at once)")
    b.add_argument("--nodes", type=int, choices=[1, 3], default=1)
    b.add_argument("--transaction-version", type=int, choices=[0, 1, 2], default=None,
                   help="KRaft feature transaction.version at format time (default: Kafka's; "
                        "Kafka 4.0+)")
    b.add_argument("--kafka-version", default=None, metavar="X.Y.Z",
                   help="Apache Kafka release to fetch and run (default: $TXKAFKA_KAFKA_VERSION, "
                        "else the newest release the test suite runs on)")
    b.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness")
    b.add_argument("--clean", action="store_true", help="with stop: also delete the data")
    b.add_argument("--lines", type=int, default=40, help="with logs: lines per node")
    b.set_defaults(func=cmd_broker)

    for register in _EXTENSIONS:
        register(sub)
    return p


# Sub-commands defined in other modules register themselves here (demo, transactions, verify...).
_EXTENSIONS: list[Callable[[argparse._SubParsersAction], None]] = []


def _load_extensions() -> None:
    import importlib

    if _EXTENSIONS:
        return  # main() may run more than once in a process (tests, embedding)
    for mod in ("txkafka.demo", "txkafka.operator_cli", "txkafka.savepoint", "txkafka.verify",
                "txkafka.devtools.bench", "txkafka.devtools.bench_endurance", "txkafka.pyspark_home", "txkafka.installed_pyspark"):
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
            continue
        _EXTENSIONS.append(m.register_cli)


def main(argv: Sequence[str] | None = None) -> int:
    _load_extensions()
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
