"""What every txkafka command line shares: the Kafka connection options (``-b``,
``--command-config``, ``-X``) read once into a ``KafkaConnection``, an S3 checkpoint's settings as
spark-submit takes them (``--conf spark.hadoop.fs.s3a.*``, ``--properties-file``) read once into
the checkpoint package's ``S3Settings``, the help format (each option's default shown), and the
error a command line that cannot be acted on stops with.

The client settings are a query's ``kafka.*`` options without the prefix, so they go through the
same translation (connector/client/config.py): the properties file Kafka's own tools take
(``sasl.jaas.config``, JKS or PEM trust stores...) works as it is. Their values are never printed.
"""

from __future__ import annotations

import argparse
import textwrap
from dataclasses import dataclass, field
from typing import Callable, Mapping

from . import exit_codes
from .connector.checkpoint.object_store import (SPARK_S3A_PREFIX, SPARK_S3A_SETTINGS, S3Settings,
                                                s3_option_of_spark_setting)
from .connector.client.config import check_client_config, kafka_client_config
from .connector.errors import KafkaConfigError
from .connector.option_names import KAFKA_PREFIX
from .connector.secrets_redaction import redact_text


class CommandLineError(SystemExit):
    """A command that cannot go on: ``txkafka``'s entry point (``cli.run``) prints the message to
    stderr and exits with ``status`` (txkafka/exit_codes.py; by default a usage error)."""

    def __init__(self, message: str, status: int = exit_codes.USAGE) -> None:
        super().__init__(f"error: {message}")
        self.status = status

    @classmethod
    def needs_operator(cls, message: str) -> "CommandLineError":
        """A refusal an operator resolves (a copied checkpoint, a live query)."""
        return cls(message, exit_codes.NEEDS_OPERATOR)

    @classmethod
    def unreadable(cls, message: str) -> "CommandLineError":
        """A checkpoint or file that cannot be read, a cluster that cannot be reached."""
        return cls(message, exit_codes.UNREACHABLE)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; after each option's help its default, unless the help states it
    (``(default: ...)``) or there is none worth showing (a flag, an unset option)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("(default" in text or not action.option_strings or action.nargs == 0
                or default in (None, "", [], argparse.SUPPRESS)):
            return text
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
        return f"{text} (default: {str(shown).replace('%', '%%')})"


class CommandParser(argparse.ArgumentParser):
    """txkafka's parsers: sub-command parsers are made of the same class (argparse's
    ``add_subparsers`` uses its parser's type), so every level formats its help alike."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


def add_yes_flag(parser: argparse.ArgumentParser, what: str) -> None:
    """``--yes``, the same on every command that changes Kafka or a checkpoint: without it the
    command shows what it would do and changes nothing."""
    parser.add_argument("--yes", action="store_true",
                        help=f"really {what} (without it: a dry run that prints what it would do "
                             "and changes nothing)")


def local_server_actions(sub: argparse._SubParsersAction, command: str, help: str,
                         what: str) -> tuple[argparse._SubParsersAction, Callable]:
    """A local development server's command (``broker``, ``registry``): its actions' sub-parsers,
    and the function that adds ``--name`` (several servers side by side) to an action."""
    actions = sub.add_parser(command, help=help).add_subparsers(
        dest="action", required=True, title="actions", metavar="ACTION")

    def named(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument("--name", default="default", help=f"{what} name, so several can run at "
                       "once")
        return p

    return actions, named


def add_checkpoint_option(parser: argparse.ArgumentParser, *, required: bool = True,
                          note: str = "") -> None:
    """``--checkpoint DIR``, the same on every command that reads a query's checkpoint: Spark's
    checkpointLocation, a path or a URI (``note`` says what this command does with it)."""
    parser.add_argument("--checkpoint", required=required, metavar="DIR",
                        help="the query's checkpointLocation, a path or a URI (s3a://, hdfs://, "
                             "...)" + (f": {note}" if note else ""))


def add_transactional_id_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--transactional-id ID`` (repeatable), as Kafka's kafka-transactions.sh spells it; ``--id``
    is the older spelling, kept working for existing scripts but left out of --help, so the help
    shows one grammar (verify's ``--id`` is where a record's id is)."""
    parser.add_argument("--transactional-id", action="append", metavar="ID", dest="id",
                        help=f"only this transactional id (repeatable; default: {what})")
    parser.add_argument("--id", action="append", metavar="ID", dest="id",
                        help=argparse.SUPPRESS)


def description(doc: str) -> str:
    """A program's docstring as its --help shows it: one paragraph, wrapped for 80 columns."""
    return textwrap.fill(" ".join(doc.split()), 79)


def describe_commands(parser: argparse.ArgumentParser) -> None:
    """Each command's ``--help`` starts with the line the list of commands above it shows, so
    ``txkafka broker start --help`` says what it does, as ``txkafka broker --help`` does."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, child in action.choices.items():
                if child.description is None and helps.get(name):
                    child.description = textwrap.fill(
                        helps[name][:1].upper() + helps[name][1:] + ".", 79)
                describe_commands(child)


def add_json_flag(parser: argparse.ArgumentParser, what: str = "the report") -> None:
    """``--json``, the same on every command that reports."""
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def add_kafka_options(parser: argparse.ArgumentParser, *, required: bool = True,
                      cluster: str = "the Kafka cluster") -> None:
    """``-b/--bootstrap-servers``, ``--command-config`` and ``-X``, in a group of their own.

    ``required=False``: a command that starts a local broker without ``-b`` (then the client
    settings are refused, see ``KafkaConnection.optional_from_args``)."""
    if not required and "(default" not in cluster:
        cluster += " (default: a local broker started for the run)"
    g = parser.add_argument_group("Kafka connection")
    g.add_argument("-b", "--bootstrap-servers", required=required, metavar="HOST:PORT[,...]",
                   help=cluster)
    g.add_argument("--command-config", metavar="FILE",
                   help="client properties file, as Kafka's own tools take it (key=value lines: "
                        "security.protocol, sasl.*, ssl.*; Java or librdkafka names): keeps "
                        "secrets off the command line and out of process lists")
    g.add_argument("-X", "--conf", action="append", metavar="KEY=VALUE",
                   help="one client setting, after --command-config's (repeatable); its value "
                        "shows in process lists, so secrets belong in --command-config")


@dataclass(frozen=True)
class KafkaConnection:
    """A command's Kafka cluster and client settings, read and checked once."""

    bootstrap: str
    # --command-config's then -X's, names as given; -b wins over a bootstrap.servers among them
    settings: Mapping[str, str] = field(repr=False)
    client_conf: Mapping[str, str] = field(repr=False)  # the librdkafka config of the clients

    @classmethod
    def create(cls, bootstrap: str, settings: Mapping[str, str]) -> "KafkaConnection":
        """Checked and translated as a query's ``kafka.*`` options are; -b's servers win."""
        settings = dict(settings)
        try:
            conf = kafka_client_config({f"{KAFKA_PREFIX}{k}": v for k, v in
                                        {**settings, "bootstrap.servers": bootstrap}.items()})
            check_client_config(conf, "any")  # before the command acts, not at its first client
        except KafkaConfigError as e:
            raise CommandLineError(
                f"client settings (-X / --command-config; the names below without the 'kafka.' "
                f"prefix): {redact_text(str(e), settings)}") from None
        return cls(bootstrap, settings, conf)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "KafkaConnection":
        """The connection of a command whose ``-b`` is required."""
        conn = cls.optional_from_args(args)
        if conn is None:
            raise CommandLineError("give --bootstrap-servers HOST:PORT (the Kafka cluster)")
        return conn

    @classmethod
    def optional_from_args(cls, args: argparse.Namespace) -> "KafkaConnection | None":
        """None without ``-b`` (the command starts a local broker: ``create(its servers, {})``);
        client settings without ``-b`` are refused then, before anything starts."""
        settings: dict[str, str] = {}
        path = getattr(args, "command_config", None)
        if path:
            settings.update(read_command_config(path))
        store = _takes_checkpoint_store(args)
        for n, item in enumerate(getattr(args, "conf", None) or [], 1):
            k, sep, v = item.partition("=")
            if not sep or not k.strip():
                # Not echoed: "sasl.password:secret" would print the secret.
                raise CommandLineError(f"-X setting number {n} is not key=value")
            if store and k.strip().startswith(_SPARK):
                continue  # the checkpoint's (checkpoint_store_from_args); no Kafka name is spark.*
            settings[k.strip()] = v.strip()
        bootstrap = getattr(args, "bootstrap_servers", None)
        if bootstrap:
            return cls.create(bootstrap, settings)
        if settings:
            raise CommandLineError(
                "--command-config and -X need --bootstrap-servers: they are settings for a "
                "cluster of yours, and the local broker started without -b takes none")
        return None

    @property
    def query_options(self) -> dict[str, str]:
        """The same cluster and settings as a query's ``kafka.*`` options (untranslated: a query
        translates them itself, and Spark's built-in connector takes Java names as they are)."""
        return {f"{KAFKA_PREFIX}{k}": v for k, v in
                {**self.settings, "bootstrap.servers": self.bootstrap}.items()}


_SPARK = "spark."
_STORE_GROUP = "S3 checkpoint (Spark's settings, as spark-submit takes them)"


def add_checkpoint_store_options(parser: argparse.ArgumentParser) -> None:
    """``--conf spark.hadoop.fs.s3a.KEY=VALUE`` and ``--properties-file FILE``, on every command
    that reads a checkpoint: the endpoint and credentials a Spark user already gives Spark's s3a.
    A command with ``-X/--conf`` (Kafka settings, added first) shares that ``--conf``: a
    ``spark.*`` key is the checkpoint's, any other a Kafka client setting."""
    g = parser.add_argument_group(_STORE_GROUP, textwrap.fill(
        "What the command's own access to an S3 checkpoint uses; what is unset comes from the "
        "AWS environment variables and credential chain. A value on the command line shows in "
        "process lists: keys belong in the file.", 76))
    names = ", ".join(n[len(SPARK_S3A_PREFIX):] for n in SPARK_S3A_SETTINGS)
    store_help = f"spark.hadoop.fs.s3a.NAME=VALUE, NAME one of: {names}"
    kafka_conf = parser._option_string_actions.get("--conf")
    if kafka_conf is None:
        # -X as on the commands that connect: one flag, whatever the command.
        g.add_argument("-X", "--conf", action="append", metavar="KEY=VALUE",
                       help=f"one setting, after --properties-file's (repeatable): {store_help}")
    else:
        kafka_conf.help = (f"{kafka_conf.help}. With a spark.* KEY: an S3 checkpoint's "
                           f"setting, {store_help}")
    g.add_argument("--properties-file", metavar="FILE",
                   help="Spark properties file (spark-defaults.conf syntax: 'key value' or "
                        "key=value lines, # comments): its spark.hadoop.fs.s3a.* settings of the "
                        "names --conf takes are read, every other line is ignored")


def _takes_checkpoint_store(args: argparse.Namespace) -> bool:
    return hasattr(args, "properties_file")


def checkpoint_store_from_args(args: argparse.Namespace) -> S3Settings | None:
    """The S3 settings of ``--properties-file`` then ``--conf spark.hadoop.fs.s3a.*``, checked
    once; None when neither gives one (the checkpoint package reads the AWS environment then).

    A ``--conf`` the command cannot use is refused (a Spark user who types it expects it to act);
    a properties file's other lines are ignored (spark-defaults.conf holds many)."""
    given: dict[str, str] = {}
    path = getattr(args, "properties_file", None)
    if path:
        for key, value in read_spark_properties(path).items():
            name = s3_option_of_spark_setting(key)
            if name:
                given[name] = value
    kafka_too = hasattr(args, "bootstrap_servers")
    for n, item in enumerate(getattr(args, "conf", None) or [], 1):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CommandLineError(f"--conf setting number {n} is not key=value")
        if kafka_too and not key.startswith(_SPARK):
            continue  # a Kafka client setting (KafkaConnection)
        name = s3_option_of_spark_setting(key)
        if name is None:
            accepted = ", ".join(SPARK_S3A_SETTINGS)
            raise CommandLineError(
                f"--conf {key}: not a setting this command uses. It takes an S3 checkpoint's "
                f"{accepted}" + ("" if not kafka_too else ", or a Kafka client setting (-X)")
                + "; other Spark settings do not apply to it")
        given[name] = value.strip()
    if not given:
        return None
    try:
        return S3Settings.from_options(given)
    except KafkaConfigError as e:
        raise CommandLineError(
            "S3 checkpoint settings (--conf / --properties-file; the names below without the "
            f"'spark.hadoop.' prefix): {e}") from None


def _read_text(path: str, flag: str) -> str:
    """A settings file's UTF-8 text; a file that cannot be read is a usage error naming ``flag``."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) else "not UTF-8 text"
        raise CommandLineError(f"{flag} {path}: cannot read it ({reason})") from None


def read_spark_properties(path: str) -> dict[str, str]:
    """A Spark properties file (spark-defaults.conf: Java properties, where a key ends at the
    first ``=``, ``:`` or blank), values trimmed as Spark trims them. Never echoes a line."""
    out: dict[str, str] = {}
    for _number, line in _logical_lines(_read_text(path, "--properties-file")):
        end = 0
        while end < len(line) and not (line[end] in "=:" or line[end].isspace()):
            end += 2 if line[end] == "\\" else 1
        key, rest = line[:end], line[end:].lstrip()
        if rest[:1] in ("=", ":"):
            rest = rest[1:]
        out[_unescape(key)] = _unescape(rest).strip()
    return out


def read_command_config(path: str) -> dict[str, str]:
    """The settings of a Java properties file (``java.util.Properties`` syntax: ``#`` and ``!``
    comments, a line ending in a backslash continues on the next, backslash escapes), UTF-8.

    One difference: the separator must be ``=``. Java also splits at ``:`` or a space, so a line
    without ``=`` is refused (naming its number, never its text: it may hold a secret) rather than
    guessed at."""
    out: dict[str, str] = {}
    for number, line in _logical_lines(_read_text(path, "--command-config")):
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key or any(c.isspace() or c == ":" for c in key):
            raise CommandLineError(
                f"--command-config {path} line {number}: not a key=value line (one setting a "
                "line, e.g. security.protocol=SASL_SSL)")
        # Stripped like Kafka's own configs (ConfigDef trims every string and password value).
        out[_unescape(key)] = _unescape(value).strip()
    return out


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(number of its first line, text) of each setting line, continuations joined."""
    lines = text.splitlines()
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        number, line = i + 1, lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        out.append((number, line[:-1] if _continues(line) else line))
    return out


def _continues(line: str) -> bool:
    """An odd number of trailing backslashes: the last one joins the next line."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c != "\\" or i + 1 == len(s):
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u" and len(s) >= i + 6:
            try:
                out.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
                continue
            except ValueError:
                pass
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)
