"""`txkafka --help` lists the user's commands first and the developer tooling's after them, under
their own heading; commands of both kinds parse alike."""

from __future__ import annotations

import re

from txkafka.cli import _load_extensions, build_parser

USER = ["broker", "registry", "demo", "verify", "transactions", "commit-log", "savepoint", "pyspark-bytecode",
        "pyspark-home"]
DEVELOPER = ["bench", "bench-endurance", "bench-formats"]


def _listed(text: str) -> list[str]:
    return re.findall(r"^ {4}(\S+)(?: |$)", text, re.M)


def test_help_lists_the_users_commands_then_the_developer_tooling():
    _load_extensions()
    text = build_parser().format_help()
    users, heading, developers = text.partition("\ndeveloper commands:\n")
    assert heading, text
    assert _listed(users) == USER, text
    assert _listed(developers) == DEVELOPER, text


def test_developer_commands_parse_like_the_users():
    _load_extensions()
    parser = build_parser()
    for argv in (["bench", "--repeats", "1"], ["bench-endurance", "--minutes", "1"],
                 ["verify", "-b", "h:1", "--input", "a", "--output", "b"]):
        args = parser.parse_args(argv)
        assert args.command == argv[0] and callable(args.func), argv
