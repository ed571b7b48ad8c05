"""The developer tooling's command line, apart from the user's: python -m txkafka.devtools
bench|bench-endurance|bench-formats, from a clone of the repository (the wheel does not ship
txkafka.devtools). Its commands parse, report and exit like txkafka's."""

from __future__ import annotations

import argparse
from typing import Sequence

from .. import exit_codes
from ..cli import dispatch
from ..cli_options import CommandParser, describe_commands, description

PROG = "python -m txkafka.devtools"


def build_parser() -> argparse.ArgumentParser:
    from . import bench, bench_endurance, bench_formats

    p = CommandParser(prog=PROG, description=description(__doc__), epilog=exit_codes.epilog())
    sub = p.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    for module in (bench, bench_endurance, bench_formats):
        module.register_cli(sub)
    describe_commands(p)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(build_parser(), argv)
