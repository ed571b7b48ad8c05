"""One grammar for every txkafka command: the whole argparse tree is walked, so a command added
later is held to it too. Every option and command has help; every command that connects to Kafka
takes -b/--bootstrap-servers and --command-config (and reads the file: a malformed one stops it
before anything starts, without its text); --json is a flag; nobody spells --bootstrap."""

from __future__ import annotations

import argparse
import json

import pytest

from txkafka import demo, pipeline
from txkafka.cli import _load_extensions, build_parser, main
from txkafka.cli_options import CommandLineError, KafkaConnection, read_command_config
from txkafka.devtools import bench, bench_produce

# Each leaf command, by how it is typed. A new one must be put in one of the two sets.
CONNECTING = {"demo", "verify", "transactions list", "transactions abort", "savepoint create",
              "bench", "bench-endurance"}
LOCAL = {"broker", "commit-log show", "commit-log resolve", "commit-log moved", "savepoint show",
         "pyspark-bytecode", "pyspark-home", "registry", "bench-formats"}
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


def test_every_option_and_every_command_has_help():
    missing = []
    for name, parser in _parsers(_tree()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            if isinstance(action, argparse._SubParsersAction):
                # a command's help line: argparse's own, or the developer commands' heading's
                helped = {a.dest for a in action._choices_actions if a.help}
                helped |= {a.metavar.strip() for g in parser._action_groups
                           for a in g._group_actions if a.help and a not in parser._actions
                           and a.metavar}
                missing += [f"{name} {c}" for c in action.choices if c not in helped]
            elif not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, f"no help text: {missing}"


def test_version(capsys):
    from txkafka import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"txkafka {__version__}\n"


def test_defaults_are_shown_in_the_help():
    text = dict(_leaves(_tree()))["verify"].format_help()
    assert "(default: 2000)" in text and "(default: key)" in text
    assert "(default: None)" not in text and "(default: False)" not in text


@pytest.mark.parametrize("name", sorted(CONNECTING))
def test_connecting_commands_take_bootstrap_servers_and_command_config(name):
    opts = _options(dict(_leaves(_tree()))[name])
    assert opts.get("-b") is opts.get("--bootstrap-servers") is not None, name
    assert opts["-b"].dest == "bootstrap_servers"
    assert opts["--command-config"].dest == "command_config" and opts["--command-config"].nargs is None


def test_json_is_a_flag_and_nobody_spells_bootstrap():
    programs = [*_parsers(_tree()), ("python -m txkafka.pipeline", pipeline.parser()),
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
}


def test_every_connecting_command_has_a_command_line_here():
    assert set(COMMAND_LINES) == CONNECTING


@pytest.mark.parametrize("name", sorted(CONNECTING))
def test_a_malformed_command_config_stops_the_command_naming_the_line_not_the_secret(
        name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # bench writes its --out folder before it starts anything
    props = tmp_path / "client.properties"
    props.write_text(f"security.protocol=SASL_SSL\nsasl.password: {SECRET}\n")
    with pytest.raises(SystemExit) as exc:
        main([*COMMAND_LINES[name], "-b", B, "--command-config", str(props)])
    message = str(exc.value.code)
    assert "--command-config" in message and "line 2" in message, message
    assert SECRET not in message


@pytest.mark.parametrize("name", ["demo", "bench", "bench-endurance"])
def test_settings_without_a_cluster_are_refused_before_a_broker_starts(name, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\n")
    with pytest.raises(CommandLineError, match="need --bootstrap-servers"):
        main([*COMMAND_LINES[name], "--command-config", str(props)])


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
    ns = _tree().parse_args(["bench", "-b", B, "--command-config",
                                    str(_java_properties(tmp_path))])
    k = bench.BenchKafka(KafkaConnection.from_args(ns))
    assert k.conf["sasl.password"] == SECRET and k.conf["bootstrap.servers"] == B
    assert k.options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert k.options["kafka.bootstrap.servers"] == B
