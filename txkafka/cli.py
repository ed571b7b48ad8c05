"""The txkafka command line: a local broker and Schema Registry, the demo, the output's
verification, and for operators a query's status, the sink's transactions, its commit log,
savepoints and the Python start-up aids. Commands that change Kafka or a checkpoint show what they
would do and change nothing without --yes; commands that report take --json."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence

from . import exit_codes
from .cli_options import (CommandLineError, CommandParser, add_json_flag, describe_commands,
                          description, local_server_actions)

def _broker_cluster(args: argparse.Namespace):
    from .embedded_kafka import EmbeddedKafka

    return EmbeddedKafka(
        args.name,
        nodes=getattr(args, "nodes", 1) or 1,
        transaction_version=getattr(args, "transaction_version", None),
        version=getattr(args, "kafka_version", None),
    )


def cmd_broker_start(args: argparse.Namespace) -> int:
    from .embedded_kafka import EmbeddedKafkaError

    try:
        cluster = _broker_cluster(args)
    except ValueError as e:  # a version that cannot run, or a feature it lacks
        raise CommandLineError(str(e)) from None
    try:
        bootstrap = cluster.start(timeout=args.timeout)
    except EmbeddedKafkaError as e:
        raise CommandLineError.unreadable(str(e)) from None
    print(bootstrap)
    return exit_codes.OK


def cmd_broker_stop(args: argparse.Namespace) -> int:
    from .embedded_kafka import EmbeddedKafka

    cluster = EmbeddedKafka(args.name)
    cluster.destroy() if args.clean else cluster.stop()
    return exit_codes.OK


def cmd_broker_status(args: argparse.Namespace) -> int:
    from .embedded_kafka import EmbeddedKafka

    cluster = EmbeddedKafka(args.name)
    st, running = cluster.status(), cluster.is_running()
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        print(f"cluster {st['name']}: {'running' if running else 'not running'}"
              + (f" at {st['bootstrap_servers']}" if running else "")
              + (f" (Kafka {st['kafka_version']})" if st.get("kafka_version") else ""))
        for n in st["nodes"]:
            print(f"  node {n['node_id']}: port {n['port']}, "
                  f"{'alive' if n['alive'] else 'down'} (pid {n['pid']})")
    return exit_codes.OK if running else exit_codes.NEEDS_OPERATOR


def cmd_broker_logs(args: argparse.Namespace) -> int:
    from .embedded_kafka import EmbeddedKafka

    cluster = EmbeddedKafka(args.name)
    for node in cluster.node_infos:
        print(cluster.log_tail(node, args.lines))
    return exit_codes.OK


def _register_broker(sub: argparse._SubParsersAction) -> None:
    bsub, named = local_server_actions(
        sub, "broker", "run a local Apache Kafka (KRaft) for development, from Maven Central's "
        "jars", "cluster")

    st = named(bsub.add_parser("start", help="start the local broker (or find it running) and "
                               "print its bootstrap servers"))
    st.add_argument("--nodes", type=int, choices=[1, 3], default=1, help="brokers: 1, or 3 for "
                    "replication factor 3")
    st.add_argument("--transaction-version", type=int, choices=[0, 1, 2], default=None,
                    help="KRaft feature transaction.version at format time: 0 the classic "
                         "protocol, 1 or 2 the newer ones (default: Kafka's; Kafka 4.0+)")
    st.add_argument("--kafka-version", default=None, metavar="X.Y.Z",
                    help="the Apache Kafka release to fetch and run (default: "
                         "$TXKAFKA_KAFKA_VERSION, else the newest release the test suite runs on)")
    st.add_argument("--timeout", type=float, default=180.0, metavar="SECONDS",
                    help="how long to wait until transactions work")
    st.set_defaults(func=cmd_broker_start)
    sp = named(bsub.add_parser("stop", help="stop the local broker (its data stays, unless "
                               "--clean)"))
    sp.add_argument("--clean", action="store_true", help="also delete its data")
    sp.set_defaults(func=cmd_broker_stop)
    ss = named(bsub.add_parser("status", help="print whether the local broker runs, where, and "
                               "each node (exit status 3 when not running)"))
    add_json_flag(ss, "the status")
    ss.set_defaults(func=cmd_broker_status)
    lg = named(bsub.add_parser("logs", help="print the tail of each node's log"))
    lg.add_argument("--lines", type=int, default=40, metavar="N", help="lines per node")
    lg.set_defaults(func=cmd_broker_logs)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = CommandParser(prog="txkafka", description=description(__doc__), epilog=exit_codes.epilog())
    p.add_argument("--version", action="version", version=f"txkafka {__version__}")
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    _register_broker(sub)
    for register in _EXTENSIONS:
        register(sub)
    describe_commands(p)
    return p


# Sub-commands defined in other modules register themselves here, in the order --help lists them
# (after `broker`). Developer tooling is not among them: `python -m txkafka.devtools`.
_USER_COMMANDS = ("txkafka.embedded_registry", "txkafka.demo", "txkafka.verify", "txkafka.operator_cli", "txkafka.savepoint",
                  "txkafka.installed_pyspark", "txkafka.pyspark_home", "txkafka.status")
_EXTENSIONS: list[Callable[[argparse._SubParsersAction], None]] = []


def _load_extensions() -> None:
    import importlib

    if _EXTENSIONS:
        return  # main() may run more than once in a process (tests, embedding)
    for mod in _USER_COMMANDS:
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise
            continue
        _EXTENSIONS.append(m.register_cli)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse and run one command; its exit status (txkafka/exit_codes.py). A command that cannot
    go on raises CommandLineError, which ``run`` turns into a message and a status."""
    _load_extensions()
    return dispatch(build_parser(), argv)


def dispatch(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    """Run the command ``argv`` names in ``parser`` (``set_defaults(func=...)``)."""
    args = parser.parse_args(argv)
    from .connector.errors import TxKafkaError

    try:
        return int(args.func(args) or 0)
    except TxKafkaError as e:
        # A typed error says what happened and what to do (an unreachable cluster, a denied ACL, a
        # file a newer txkafka wrote); a traceback would only bury it.
        raise CommandLineError(str(e), exit_codes.for_error(e)) from None


def run(argv: Sequence[str] | None = None,
        entry: Callable[[Sequence[str] | None], int] = main) -> int:
    """The ``txkafka`` program (and ``python -m txkafka.devtools``): ``entry``, with a stopped
    command's message on stderr and its status as the exit status."""
    try:
        return entry(argv)
    except CommandLineError as e:
        print(e.code, file=sys.stderr)
        return e.status


if __name__ == "__main__":
    raise SystemExit(run())
