"""The txkafka command line: a local broker, the demo, the output's verification,
and for operators the sink's transactions, its commit log, savepoints and the
Python start-up aids; the developer tooling's commands (benchmarks) after them."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence

from .cli_options import CommandParser

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
    from . import __version__

    p = CommandParser(prog="txkafka", description=__doc__)
    p.add_argument("--version", action="version", version=f"txkafka {__version__}")
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    b = sub.add_parser("broker", help="run a local Apache Kafka (KRaft) from Maven Central jars")
    b.add_argument("action", choices=["start", "stop", "status", "logs"],
                   help="start (prints the bootstrap servers), stop, status (exit status 3 when "
                        "not running) or logs (each node's log tail)")
    b.add_argument("--name", default="default", help="cluster name, so several can run at once")
    b.add_argument("--nodes", type=int, choices=[1, 3], default=1, help="with start: brokers")
    b.add_argument("--transaction-version", type=int, choices=[0, 1, 2], default=None,
                   help="with start: KRaft feature transaction.version at format time (default: "
                        "Kafka's; Kafka 4.0+)")
    b.add_argument("--kafka-version", default=None, metavar="X.Y.Z",
                   help="with start: Apache Kafka release to fetch and run (default: "
                        "$TXKAFKA_KAFKA_VERSION, else the newest release the test suite runs on)")
    b.add_argument("--timeout", type=float, default=180.0, metavar="SECONDS",
                   help="with start: how long to wait for readiness")
    b.add_argument("--clean", action="store_true", help="with stop: also delete the data")
    b.add_argument("--lines", type=int, default=40, metavar="N", help="with logs: lines per node")
    b.set_defaults(func=cmd_broker)

    for register in _EXTENSIONS:
        register(sub)
    developer = _DeveloperCommands(sub)
    for register in _DEVELOPER_EXTENSIONS:
        register(developer)
    if developer.listed:
        developer.list_in(p.add_argument_group("developer commands"))
    return p


class _DeveloperCommands:
    """What the developer tooling's ``register_cli`` adds its sub-commands through: they parse like
    the user's, but ``--help`` lists them after the user's commands, under their own heading."""

    def __init__(self, sub: argparse._SubParsersAction) -> None:
        self.sub = sub
        self.listed: list[tuple[str, str]] = []

    def add_parser(self, name: str, **kwargs) -> argparse.ArgumentParser:
        # without its help, argparse leaves the command out of the user's list
        self.listed.append((name, kwargs.pop("help", None) or ""))
        return self.sub.add_parser(name, **kwargs)

    def list_in(self, group: argparse._ArgumentGroup) -> None:
        """One help line per command, as argparse lists the user's (indented as they are, in the
        same column); help-only entries: they are not among the parser's arguments."""
        for name, text in self.listed:
            group._group_actions.append(
                argparse.Action([], argparse.SUPPRESS, help=text, metavar=f"  {name}"))


# Sub-commands defined in other modules register themselves here, the user's in the order --help
# lists them (after `broker`), then the developer tooling's.
_USER_COMMANDS = ("txkafka.embedded_registry",
                  "txkafka.demo", "txkafka.verify", "txkafka.operator_cli", "txkafka.savepoint",
                  "txkafka.installed_pyspark", "txkafka.pyspark_home")
_DEVELOPER_COMMANDS = ("txkafka.devtools.bench", "txkafka.devtools.bench_endurance",
                       "txkafka.devtools.bench_formats")
_EXTENSIONS: list[Callable[[argparse._SubParsersAction], None]] = []
_DEVELOPER_EXTENSIONS: list[Callable[[_DeveloperCommands], None]] = []


def _load_extensions() -> None:
    import importlib

    if _EXTENSIONS:
        return  # main() may run more than once in a process (tests, embedding)
    for mods, into in ((_USER_COMMANDS, _EXTENSIONS), (_DEVELOPER_COMMANDS, _DEVELOPER_EXTENSIONS)):
        for mod in mods:
            try:
                m = importlib.import_module(mod)
            except ModuleNotFoundError as e:
                if e.name != mod:
                    raise
                continue
            into.append(m.register_cli)


def main(argv: Sequence[str] | None = None) -> int:
    _load_extensions()
    args = build_parser().parse_args(argv)
    from .connector.errors import TxKafkaError

    try:
        return int(args.func(args) or 0)
    except TxKafkaError as e:
        # A typed error says what happened and what to do (an unreachable cluster, a denied ACL, a
        # file a newer txkafka wrote); a traceback would only bury it.
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    raise SystemExit(main())
