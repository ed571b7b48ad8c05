"""`txkafka --help` lists the user's commands, in order, and the exit statuses; the developer
tooling has its own program (`python -m txkafka.devtools`), which parses alike."""

from __future__ import annotations

import re
import subprocess
import sys

from txkafka.cli import _load_extensions, build_parser
from txkafka.devtools import cli as devtools_cli

USER = ["broker", "registry", "demo", "verify", "transactions", "commit-log", "savepoint",
        "pyspark-bytecode", "pyspark-home", "status"]
DEVELOPER = ["bench", "bench-endurance", "bench-formats"]


def _listed(text: str) -> list[str]:
    return re.findall(r"^ {4}(\S+)(?: |$)", text, re.M)


def test_help_lists_the_users_commands_and_the_exit_statuses():
    _load_extensions()
    text = build_parser().format_help()
    commands, _, after = text.partition("\nexit status:\n")
    assert after, text
    assert _listed(commands) == USER, text
    assert "developer" not in text and "bench" not in text


def test_the_developer_tooling_is_its_own_program():
    text = devtools_cli.build_parser().format_help()
    assert text.startswith(f"usage: {devtools_cli.PROG} ")
    assert _listed(text.partition("\nexit status:\n")[0]) == DEVELOPER, text
    for argv in (["bench", "--repeats", "1"], ["bench-endurance", "--minutes", "1"]):
        args = devtools_cli.build_parser().parse_args(argv)
        assert args.command == argv[0] and callable(args.func), argv
    shown = subprocess.run([sys.executable, "-m", "txkafka.devtools", "--help"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "bench-endurance" in shown.stdout, shown.stderr


def test_each_action_names_its_meaning():
    """`txkafka broker --help` lists start, stop, status, logs, each with what it does."""
    _load_extensions()
    parser = build_parser()
    for command in ("broker", "pyspark-bytecode", "transactions", "commit-log", "savepoint"):
        sub = next(a for a in parser._actions if hasattr(a, "choices") and a.choices
                   and command in a.choices).choices[command]
        text = sub.format_help()
        actions = next(a for a in sub._actions if a.choices).choices
        for action in actions:
            assert re.search(rf"^ {{4}}{action}\s+\S", text, re.M), (command, action, text)
