"""One grammar for every txkafka command: the whole argparse tree is walked, so a command added
later is held to it too. Commands are sub-commands all the way down (no positional choices); every
option and command has help; every command that connects to Kafka takes -b/--bootstrap-servers and
--command-config (and reads the file: a malformed one stops it before anything starts, without its
text); every command that changes Kafka or a checkpoint is a dry run without --yes; every command
that reports takes --json; every command that reads a checkpoint takes spark-submit's
--conf spark.hadoop.fs.s3a.* and --properties-file; exit statuses are the table of txkafka/exit_codes.py; nobody spells
--bootstrap. The developer tooling (python -m txkafka.devtools) is held to the same rules."""

from __future__ import annotations

import argparse
import json

import pytest

from txkafka import demo, exit_codes, pipeline
from txkafka.cli import _load_extensions, build_parser, main, run
from txkafka.cli_options import CommandLineError, KafkaConnection, read_command_config
from txkafka.devtools import bench, bench_produce
from txkafka.devtools import cli as devtools_cli

# Each leaf command, by how it is typed. A new one must be put in one of the two sets.
CONNECTING = {"demo", "verify", "transactions list", "transactions abort", "savepoint create",
              "status"}
LOCAL = {"broker start", "broker stop", "broker status", "broker logs", "commit-log show",
         "commit-log resolve", "commit-log moved", "savepoint show", "pyspark-bytecode enable",
         "pyspark-bytecode disable", "pyspark-bytecode status", "pyspark-home", "registry start",
         "registry stop", "registry status"}
DEVELOPER = {"bench", "bench-endurance", "bench-formats"}
# bench-formats starts its own broker and registry: it takes no cluster settings.
DEVELOPER_CONNECTING = DEVELOPER - {"bench-formats"}
# ... and by what it does. A command that changes Kafka or a checkpoint takes --yes (a dry run
# without it); one that reports takes --json. `demo` writes only its own topics; `broker` and
# `pyspark-bytecode enable|disable` change the local machine, not a cluster or a checkpoint.
CHANGING = {"transactions abort", "commit-log resolve", "commit-log moved", "savepoint create"}
REPORTING = {"verify", "transactions list", "commit-log show", "savepoint create",
             "savepoint show", "broker status", "pyspark-bytecode status", "pyspark-home",
             "status", "registry status"}
B = "127.0.0.1:1"
SECRET = "hunter2-secret"


def _tree() -> argparse.ArgumentParser:
    _load_extensions()
    return build_parser()


def _subcommands(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield action


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = list(_subcommands(parser))
    if not subs:
        yield " ".join(path), parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _leaves(child, (*path, name))


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield " ".join(path) or "txkafka", parser
    for action in _subcommands(parser):
        for name, child in action.choices.items():
            yield from _parsers(child, (*path, name))


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def test_every_command_is_classified():
    assert {name for name, _ in _leaves(_tree())} == CONNECTING | LOCAL
    assert {name for name, _ in _leaves(devtools_cli.build_parser())} == DEVELOPER
    assert CHANGING | REPORTING <= CONNECTING | LOCAL


def _all_leaves():
    yield from _leaves(_tree())
    yield from _leaves(devtools_cli.build_parser())


def test_one_grammar_sub_commands_not_positional_choices():
    """`txkafka broker start`, not `txkafka broker {start,stop}`: a command's words are parsers,
    so each has its own help and options, and no option means "only with start"."""
    wrong = [f"{name}: {a.dest} {sorted(a.choices)}"
             for name, parser in _parsers(_tree())
             for a in parser._actions
             if not a.option_strings and a.choices and not isinstance(a, argparse._SubParsersAction)]
    assert not wrong, wrong


def test_the_developer_tooling_is_not_a_user_command():
    names = {name.split()[0] for name, _ in _leaves(_tree())}
    assert not names & DEVELOPER
    with pytest.raises(SystemExit) as exc:
        main(["bench"])
    assert exc.value.code == exit_codes.USAGE


@pytest.mark.parametrize("name", sorted(CONNECTING | LOCAL | DEVELOPER))
def test_yes_exactly_on_the_commands_that_change_kafka_or_a_checkpoint(name):
    opts = _options(dict(_all_leaves())[name])
    if name in CHANGING:
        assert opts["--yes"].nargs == 0 and "dry run" in opts["--yes"].help, name
    else:
        assert "--yes" not in opts, f"{name} takes --yes: put it in CHANGING (and test its dry run)"


@pytest.mark.parametrize("name", sorted(CONNECTING | LOCAL))
def test_json_exactly_on_the_commands_that_report(name):
    opts = _options(dict(_all_leaves())[name])
    if name in REPORTING:
        assert opts["--json"].nargs == 0, name
    else:
        assert "--json" not in opts, f"{name} takes --json: put it in REPORTING"


def test_help_states_the_exit_statuses():
    text = _tree().format_help()
    for code, meaning in exit_codes.MEANINGS.items():
        assert f"  {code}  {meaning.split()[0]}" in text, (code, text)
    assert len(set(exit_codes.MEANINGS)) == len(exit_codes.MEANINGS) == 5


# ---- exit statuses, through the program's entry point (message on stderr, status as exit code)

def test_a_usage_error_is_2_and_only_argparse_and_bad_values_give_it(capsys):
    with pytest.raises(SystemExit) as exc:
        run(["transactions", "list", "--no-such-option"])
    assert exc.value.code == exit_codes.USAGE
    assert run(["transactions", "list", "-b", B, "-X", "novalue"]) == exit_codes.USAGE
    assert "key=value" in capsys.readouterr().err


def test_an_unreadable_checkpoint_is_4(tmp_path, capsys):
    for argv in (["commit-log", "show", "--checkpoint", str(tmp_path)],
                 ["commit-log", "moved", "--checkpoint", str(tmp_path)],
                 ["savepoint", "show", str(tmp_path / "nope.json")]):
        assert run(argv) == exit_codes.UNREACHABLE, argv
        assert capsys.readouterr().err.startswith("error: "), argv


def test_an_unreachable_cluster_is_4(capsys):
    code = run(["transactions", "list", "-b", "127.0.0.1:1", "--prefix", "p-",
                "-X", "socket.timeout.ms=1000"])
    assert code == exit_codes.UNREACHABLE, capsys.readouterr().err


def test_a_broker_that_does_not_run_is_3(capsys):
    name = "grammar-test-never-started"
    assert run(["broker", "status", "--name", name]) == exit_codes.NEEDS_OPERATOR
    assert "not running" in capsys.readouterr().out
    assert run(["broker", "status", "--name", name, "--json"]) == exit_codes.NEEDS_OPERATOR
    assert json.loads(capsys.readouterr().out)["name"] == name


def test_typed_errors_map_to_the_table():
    from txkafka.connector import errors

    expected = {errors.KafkaConfigError("x"): exit_codes.USAGE,
                errors.UnsupportedBrokerError("x"): exit_codes.UNREACHABLE,
                errors.BrokersUnavailableError("x"): exit_codes.UNREACHABLE,
                errors.KafkaAuthorizationError("x"): exit_codes.UNREACHABLE,
                errors.CommitLogError("x"): exit_codes.UNREACHABLE,
                errors.CheckpointMovedError("x"): exit_codes.NEEDS_OPERATOR,
                errors.TransactionOutcomeUnknownError("x"): exit_codes.NEEDS_OPERATOR,
                errors.SavepointError("x"): exit_codes.NEEDS_OPERATOR}
    assert {type(e).__name__: exit_codes.for_error(e) for e in expected} == {
        type(e).__name__: c for e, c in expected.items()}


def test_every_option_and_every_command_has_help():
    missing = []
    for name, parser in [*_parsers(_tree()), *_parsers(devtools_cli.build_parser())]:
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            if isinstance(action, argparse._SubParsersAction):
                helped = {a.dest for a in action._choices_actions if a.help}
                missing += [f"{name} {c}" for c in action.choices if c not in helped]
            elif not action.help or (action.help == argparse.SUPPRESS
                                     and not _visible_alias(parser, action)):
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, f"no help text: {missing}"


def _visible_alias(parser: argparse.ArgumentParser, hidden: argparse.Action) -> bool:
    """An older spelling may be left out of --help only while a shown option sets the same value."""
    return any(a is not hidden and a.dest == hidden.dest and a.help not in (None, argparse.SUPPRESS)
               for a in parser._actions)


def test_an_older_spelling_still_works_but_is_not_shown():
    text = dict(_leaves(_tree()))["transactions abort"].format_help()
    assert "--transactional-id ID" in text and "--id" not in text


def test_version(capsys):
    from txkafka import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"txkafka {__version__}\n"


def test_defaults_are_shown_in_the_help():
    text = dict(_leaves(_tree()))["verify"].format_help()
    assert "(default: 2000)" in text and "(default: key)" in text
    assert "(default: None)" not in text and "(default: False)" not in text


@pytest.mark.parametrize("name", sorted(CONNECTING | DEVELOPER_CONNECTING))
def test_connecting_commands_take_bootstrap_servers_and_command_config(name):
    opts = _options(dict(_all_leaves())[name])
    assert opts.get("-b") is opts.get("--bootstrap-servers") is not None, name
    assert opts["-b"].dest == "bootstrap_servers"
    assert opts["--command-config"].dest == "command_config" and opts["--command-config"].nargs is None


# Commands that read a checkpoint or a savepoint file, which may be on S3.
READS_CHECKPOINT = {"transactions list", "transactions abort", "commit-log show",
                    "commit-log resolve", "commit-log moved", "savepoint create", "savepoint show",
                    "status", "verify"}


@pytest.mark.parametrize("name", sorted(CONNECTING | LOCAL))
def test_every_checkpoint_command_takes_spark_submits_s3a_flags(name):
    """--conf spark.hadoop.fs.s3a.KEY=VALUE and --properties-file, as spark-submit takes them."""
    opts = _options(dict(_all_leaves())[name])
    if "--checkpoint" in opts:
        assert name in READS_CHECKPOINT, f"{name} takes --checkpoint: put it in READS_CHECKPOINT"
    if name in READS_CHECKPOINT:
        assert opts["--properties-file"].dest == "properties_file", name
        assert opts["--conf"].dest == "conf" and opts["--conf"].nargs is None, name
        assert "spark.hadoop.fs.s3a." in opts["--conf"].help, name
    else:
        assert "--properties-file" not in opts, name


def test_one_spelling_per_option_whatever_the_command():
    """The same thing has the same flag, metavar and help everywhere: --checkpoint DIR, the
    query's checkpointLocation (plus what the command does with it); -X is --conf on every
    command that takes --conf (spark.* keys the checkpoint's, others a Kafka client's); a
    transactional id is --transactional-id ID, as kafka-transactions.sh spells it (--id, its older
    spelling, still works there), while verify's --id is where a record's id is."""
    wrong = []
    for name, parser in _leaves(_tree()):
        opts = _options(parser)
        ck = opts.get("--checkpoint")
        if ck is not None and (ck.metavar != "DIR" or not ck.help.startswith(
                "the query's checkpointLocation, a path or a URI")):
            wrong.append(f"{name} --checkpoint: {ck.metavar} {ck.help!r}")
        if "--conf" in opts and opts.get("-X") is not opts["--conf"]:
            wrong.append(f"{name}: --conf without -X")
        tid = opts.get("--transactional-id")
        if "--id" in opts and tid is None and opts["--id"].metavar != "WHERE":
            wrong.append(f"{name} --id: a transactional id is --transactional-id")
        if tid is not None and (tid.metavar, tid.dest) != ("ID", opts["--id"].dest):
            wrong.append(f"{name} --transactional-id: {tid.metavar} {tid.dest}")
    assert not wrong, wrong


def test_every_command_s_help_starts_with_what_it_does():
    """`txkafka broker start --help` opens with the line `txkafka broker --help` lists for it;
    each such line starts with a verb, in lower case, in plain text (no markup)."""
    wrong = []
    for program in (_tree(), devtools_cli.build_parser()):
        for name, parser in _parsers(program):
            for action in _subcommands(parser):
                for choice in action._choices_actions:
                    child = action.choices[choice.dest]
                    text = choice.help
                    if not text[:1].islower() or "`" in text or text.endswith("."):
                        wrong.append(f"{name} {choice.dest}: {text!r}")
                    wrong += [f"{name} {choice.dest} {a.option_strings}: markup in {a.help!r}"
                              for a in child._actions if "`" in (a.help or "")]
                    opens = " ".join((child.description or "").split()).rstrip(".")
                    if opens[:1].lower() + opens[1:] != text:
                        wrong.append(f"{name} {choice.dest}: --help opens {child.description!r}")
    assert not wrong, wrong


def test_status_help_gives_its_own_exit_statuses(capsys):
    text = dict(_leaves(_tree()))["status"].format_help()
    for code in exit_codes.MEANINGS:
        assert f"\n  {code}  " in text, text


def test_json_is_a_flag_and_nobody_spells_bootstrap():
    programs = [*_parsers(_tree()), *_parsers(devtools_cli.build_parser()),
                ("python -m txkafka.pipeline", pipeline.parser()),
                ("python -m txkafka.devtools.bench_produce", bench_produce.parser())]
    wrong = []
    for name, parser in programs:
        opts = _options(parser)
        if "--json" in opts and opts["--json"].nargs != 0:
            wrong.append(f"{name}: --json takes a value")
        if "--bootstrap" in opts:
            wrong.append(f"{name}: --bootstrap")
        if "--bootstrap-servers" in opts and opts.get("-b") is not opts["--bootstrap-servers"]:
            wrong.append(f"{name}: --bootstrap-servers without -b")
    assert not wrong, wrong


# ---- each connecting command really reads --command-config, before anything starts

COMMAND_LINES = {
    "demo": ["demo"],
    "verify": ["verify", "--input", "a", "--output", "b"],
    "transactions list": ["transactions", "list", "--prefix", "p-"],
    "transactions abort": ["transactions", "abort", "--prefix", "p-"],
    "savepoint create": ["savepoint", "create", "--checkpoint", "ck", "--out", "sp.json"],
    "bench": ["bench"],
    "bench-endurance": ["bench-endurance"],
    "status": ["status", "--checkpoint", "ck"],
}


def _main_of(name: str):
    return devtools_cli.main if name in DEVELOPER else main


def test_every_connecting_command_has_a_command_line_here():
    assert set(COMMAND_LINES) == CONNECTING | DEVELOPER_CONNECTING


@pytest.mark.parametrize("name", sorted(CONNECTING | DEVELOPER_CONNECTING))
def test_a_malformed_command_config_stops_the_command_naming_the_line_not_the_secret(
        name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # bench writes its --out folder before it starts anything
    props = tmp_path / "client.properties"
    props.write_text(f"security.protocol=SASL_SSL\nsasl.password: {SECRET}\n")
    with pytest.raises(SystemExit) as exc:
        _main_of(name)([*COMMAND_LINES[name], "-b", B, "--command-config", str(props)])
    message = str(exc.value.code)
    assert "--command-config" in message and "line 2" in message, message
    assert SECRET not in message


@pytest.mark.parametrize("name", ["demo", "bench", "bench-endurance"])
def test_settings_without_a_cluster_are_refused_before_a_broker_starts(name, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\n")
    with pytest.raises(CommandLineError, match="need --bootstrap-servers"):
        _main_of(name)([*COMMAND_LINES[name], "--command-config", str(props)])


# ---- the properties file and the settings it gives

def test_properties_file_syntax_of_kafkas_own_tools(tmp_path):
    props = tmp_path / "admin.properties"
    props.write_text(
        "# comment\n! another\n\n"
        "security.protocol = SASL_SSL  \n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="admin" \\\n    password="{SECRET}";\n'
        "ssl.truststore.location=C:\\\\certs\\\\ca.pem\n"
        "client.id=caf\\u00e9\n")
    assert read_command_config(str(props)) == {
        "security.protocol": "SASL_SSL",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                            f'username="admin" password="{SECRET}";',
        "ssl.truststore.location": "C:\\certs\\ca.pem",
        "client.id": "café"}


def test_a_missing_command_config_is_named(tmp_path):
    with pytest.raises(CommandLineError, match="cannot read it"):
        read_command_config(str(tmp_path / "nope.properties"))


def _java_properties(tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                     f'required username="writer" password="{SECRET}";\n')
    return props


def test_connection_translates_settings_for_clients_and_keeps_them_for_queries(tmp_path):
    args = argparse.Namespace(bootstrap_servers=B, command_config=str(_java_properties(tmp_path)),
                              conf=["client.id=cli", "bootstrap.servers=elsewhere:9"])
    conn = KafkaConnection.from_args(args)
    assert conn.client_conf["sasl.username"] == "writer"
    assert conn.client_conf["sasl.password"] == SECRET
    assert conn.client_conf["bootstrap.servers"] == B  # -b wins
    assert conn.query_options["kafka.sasl.jaas.config"].endswith(f'password="{SECRET}";')
    assert conn.query_options["kafka.client.id"] == "cli"
    assert SECRET not in repr(conn)


def test_a_setting_the_clients_cannot_take_is_refused_without_its_value():
    args = argparse.Namespace(bootstrap_servers=B, command_config=None,
                              conf=[f"ssl.truststore.password={SECRET}"])
    with pytest.raises(CommandLineError) as exc:
        KafkaConnection.from_args(args)
    assert "ssl.truststore.password" in str(exc.value.code)
    assert SECRET not in str(exc.value.code)


def test_verify_reads_with_the_settings_and_prints_json_with_the_flag(tmp_path, monkeypatch,
                                                                       capsys):
    import txkafka.verify as verify_mod

    seen = []

    def scan(conf, topic, *a, **kw):
        seen.append(conf)
        return iter(())

    monkeypatch.setattr(verify_mod, "scan_topic", scan)
    out = tmp_path / "report.json"
    code = main(["verify", "-b", B, "--command-config", str(_java_properties(tmp_path)),
                 "--input", "a", "--output", "b", "--allow-empty", "--json",
                 "--json-out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and json.loads(printed) == json.loads(out.read_text())
    assert seen and all(c["sasl.username"] == "writer" and c["sasl.password"] == SECRET
                        for c in seen)


class _Stop(Exception):
    pass


def test_demo_gives_its_clients_the_settings_and_the_pipeline_only_the_file(tmp_path,
                                                                            monkeypatch):
    confs, pipelines = [], []

    class Admin:
        def list_topics(self, timeout):
            return argparse.Namespace(brokers={1: None})

    monkeypatch.setattr(demo.kafka_admin, "admin", lambda conf: confs.append(conf) or Admin())
    monkeypatch.setattr(demo.kafka_admin, "create_topic",
                        lambda conf, *a, **kw: confs.append(conf))
    monkeypatch.setattr(demo, "_produce_input",
                        lambda conf, *a: confs.append(conf) or (100, 20))

    def run_pipeline(args, log_path):
        pipelines.append(args)
        raise _Stop

    monkeypatch.setattr(demo, "_run_pipeline", run_pipeline)
    props = _java_properties(tmp_path)
    with pytest.raises(_Stop):
        main(["demo", "-b", B, "--command-config", str(props), "-X", "client.id=demo"])
    assert len(confs) == 4 and all(c["sasl.password"] == SECRET and c["client.id"] == "demo"
                                   for c in confs)
    (args,) = pipelines
    assert args[args.index("-b") + 1] == B
    assert args[args.index("--command-config") + 1] == str(props)
    assert args[args.index("--kafka-conf") + 1] == "client.id=demo"
    assert not any(SECRET in a for a in args)


def test_pipeline_reads_the_file_and_its_own_settings(tmp_path):
    args = pipeline.parser().parse_args(
        ["-b", B, "--input", "i", "--output", "o", "--checkpoint", "ck",
         "--command-config", str(_java_properties(tmp_path)), "--kafka-conf", "client.id=p"])
    conf = pipeline.client_settings(args)
    assert (conf["sasl.username"], conf["client.id"]) == ("writer", "p")
    assert "bootstrap.servers" not in conf and args.bootstrap == B


def test_bench_clients_and_queries_get_the_settings(tmp_path, monkeypatch):
    monkeypatch.setattr(bench.kafka_admin, "admin", lambda conf: None)
    ns = devtools_cli.build_parser().parse_args(["bench", "-b", B, "--command-config",
                                                 str(_java_properties(tmp_path))])
    k = bench.BenchKafka(KafkaConnection.from_args(ns))
    assert k.conf["sasl.password"] == SECRET and k.conf["bootstrap.servers"] == B
    assert k.options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert k.options["kafka.bootstrap.servers"] == B


# ---- every command that changes Kafka or a checkpoint: without --yes it changes nothing

def _files(root) -> dict:
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _dry_savepoint_create(tmp_path, monkeypatch):
    import txkafka.connector.client.transactions as tcm
    from tests.test_savepoint import StableFake, _spark
    from tests.test_sink_core import _committer, _decide_then_crash

    ck, fake = tmp_path / "ck", StableFake()
    fake.close = lambda: None
    _committer(ck, fake)
    _spark(ck, 4, '{"t":{"0":5}}')
    _spark(ck, 5, '{"t":{"0":9}}', committed=False)
    _decide_then_crash(ck, fake, 5, [0, 1])
    monkeypatch.setattr(tcm, "TransactionClient", lambda conf, **kw: fake)
    argv = ["savepoint", "create", "--checkpoint", str(ck), "--out", str(tmp_path / "sp.json"),
            "-b", B, "--quiet-period", "0"]
    return ck, lambda: repr(sorted(fake.txns.items())), argv


def _dry_transactions_abort(tmp_path, monkeypatch):
    from tests.test_operator_cli_safety import FakeClient, _sink_with_changed_prefix
    import txkafka.connector.client.transactions as tcm

    FakeClient.instances, FakeClient.open_ids = [], []
    monkeypatch.setattr(tcm, "TransactionClient", FakeClient)
    ck, _sid, new = _sink_with_changed_prefix(tmp_path, "a1b2c3-1-0-0")
    FakeClient.open_ids = [f"{new}a1b2c3-0-1-0"]  # an orphan of the sink
    return ck, lambda: repr([t for c in FakeClient.instances for t in c.aborted]), [
        "transactions", "abort", "-b", B, "--checkpoint", str(ck)]


def _dry_commit_log_resolve(tmp_path, monkeypatch):
    from tests.test_commit_log_resolve import _stopped

    _stopped(tmp_path)
    return tmp_path, lambda: "", ["commit-log", "resolve", "--checkpoint", str(tmp_path),
                                  "--batch", "5", "--lost"]


def _dry_commit_log_moved(tmp_path, monkeypatch):
    import shutil

    from tests.test_checkpoint_place import _started

    old, new = tmp_path.resolve() / "old", tmp_path.resolve() / "new"
    _started(old)
    shutil.move(old, new)
    return new, lambda: "", ["commit-log", "moved", "--checkpoint", str(new)]


DRY_RUNS = {"savepoint create": _dry_savepoint_create,
            "transactions abort": _dry_transactions_abort,
            "commit-log resolve": _dry_commit_log_resolve,
            "commit-log moved": _dry_commit_log_moved}


def test_every_changing_command_has_a_dry_run_here():
    assert set(DRY_RUNS) == CHANGING


@pytest.mark.parametrize("name", sorted(CHANGING))
def test_without_yes_a_command_changes_nothing_and_says_what_it_would_do(
        name, tmp_path, monkeypatch, capsys):
    ck, kafka_state, argv = DRY_RUNS[name](tmp_path, monkeypatch)
    capsys.readouterr()
    files, kafka = _files(ck), kafka_state()
    assert run(argv) == exit_codes.OK
    out = capsys.readouterr().out
    assert "would " in out and "--yes" in out, out
    assert _files(ck) == files and kafka_state() == kafka
    assert run([*argv, "--yes"]) == exit_codes.OK, capsys.readouterr().err
    assert _files(ck) != files or kafka_state() != kafka  # --yes did act


def test_the_savepoint_dry_run_names_what_it_would_commit_abort_and_write(tmp_path, monkeypatch,
                                                                          capsys):
    ck, _state, argv = _dry_savepoint_create(tmp_path, monkeypatch)
    capsys.readouterr()
    assert run([*argv, "--json"]) == exit_codes.OK
    plan = json.loads(capsys.readouterr().out)
    assert plan["dry_run"] and plan["roll_forward_batch"] == 5
    assert plan["positions_after_batch"] == 5 and len(plan["would_commit"]) == 2
    assert plan["would_abort"] == [] and not (tmp_path / "sp.json").exists()
