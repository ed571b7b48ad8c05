"""Operator commands act on exactly the sink the operator named, and never print a secret.

A fake coordinator client stands in for Kafka (``TransactionClient`` is looked up when a command
runs), so these run without a broker.
"""

from __future__ import annotations

import json

import pytest

import txkafka.connector.sink.commit_log as scl
import txkafka.connector.client.transactions as tcm
import txkafka.cli_options as cli_options
from txkafka.cli_options import CommandLineError
from txkafka.cli import main
from txkafka.connector.errors import BrokersUnavailableError
from txkafka.connector.sink.committable import KafkaCommittable
from txkafka.connector.sink.commit_log import SinkCommitLog
from txkafka.connector.client.transactions import TransactionDescription, TransactionListing

B = "127.0.0.1:1"


class FakeClient:
    """Ongoing transactions by id; records what was aborted."""

    instances: list["FakeClient"] = []
    open_ids: list[str] = []

    def __init__(self, conf, **_kw):
        self.conf = conf
        self.aborted: list[str] = []
        FakeClient.instances.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def list_transactions(self, *, prefix=None, states=()):
        return [TransactionListing(t, 7, "Ongoing") for t in sorted(FakeClient.open_ids)
                if prefix is None or t.startswith(prefix)]

    def describe(self, ids, fresh=False):
        return {t: TransactionDescription(t, 0, "Ongoing", 60000, 1, 7, 0) for t in ids}

    def end_many(self, txns, commit, parallelism=8):
        assert not commit
        out = {}
        for tid, _pid, _ep in txns:
            self.aborted.append(tid)
            out[tid] = 0
        return out


@pytest.fixture
def fake(monkeypatch):
    FakeClient.instances = []
    FakeClient.open_ids = []
    monkeypatch.setattr(tcm, "TransactionClient", FakeClient)
    return FakeClient


def _committable(tid: str, partition: int, batch: int) -> KafkaCommittable:
    return KafkaCommittable(tid, 7, 0, partition, 0, batch, 10, {"out": [partition]})


def _sink_with_changed_prefix(tmp_path, decided: str):
    """A sink created with transactionalIdPrefix 'orders', later run with 'orders-v2'
    (the id stays, the option changes: python_datasource/kafka_writer.py); its log decided
    one transaction, ``decided`` being the id's tail after ``{prefix}-{sinkId}-``."""
    ck = tmp_path / "ck"
    log = SinkCommitLog(str(ck))
    sid = log.identity("orders").sink_id
    new = f"orders-v2-{sid}-"
    log.write_decision(3, 0, [_committable(f"{new}{decided}", 0, 3)], [0])
    log.write_outcome(3, 0, [_committable(f"{new}{decided}", 0, 3)], [])
    return ck, sid, new


@pytest.mark.parametrize("decided,orphan", [
    ("a1b2c3-1-0-0", "a1b2c3-0-1-0"),  # {run}-{parity}-{partition}-{attempt}: what the sink writes
    ("0-0", "1-0"),                    # the older {partition}-{attempt} shape
])
def test_checkpoint_finds_the_transactions_of_the_current_prefix(tmp_path, fake, capsys,
                                                                  decided, orphan):
    ck, sid, new = _sink_with_changed_prefix(tmp_path, decided)
    fake.open_ids = [f"{new}{orphan}"]  # an orphan of the renamed sink
    assert main(["transactions", "list", "-b", B, "--checkpoint", str(ck), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["transactional_id"] for r in rows] == [f"{new}{orphan}"]
    assert main(["transactions", "abort", "-b", B, "--checkpoint", str(ck), "--yes"]) == 0
    assert fake.instances[-1].aborted == [f"{new}{orphan}"]


def test_checkpoint_never_acts_on_another_sink_that_shares_the_prefix_text(tmp_path, fake):
    ck = tmp_path / "ck"
    sid = SinkCommitLog(str(ck)).identity("a").sink_id
    mine, other = f"a-{sid}-0-0", f"a-{sid}-x-0123abcd-0-0"  # other sink: prefix 'a-<sid>-x'
    fake.open_ids = [mine, other]
    assert main(["transactions", "abort", "-b", B, "--checkpoint", str(ck), "--yes"]) == 0
    assert fake.instances[-1].aborted == [mine]


def test_abort_refuses_an_id_of_another_sink(tmp_path, fake):
    ck = tmp_path / "ck"
    sid = SinkCommitLog(str(ck)).identity("a").sink_id
    fake.open_ids = [f"a-{sid}-0-0", "b-0123abcd-0-0"]
    with pytest.raises(SystemExit) as exc:
        main(["transactions", "abort", "-b", B, "--checkpoint", str(ck),
              "--transactional-id", "b-0123abcd-0-0", "--yes"])
    assert "b-0123abcd-0-0" in str(exc.value.code)
    assert fake.instances == [] or fake.instances[-1].aborted == []


def test_abort_says_which_named_ids_are_not_open(tmp_path, fake, capsys):
    ck = tmp_path / "ck"
    sid = SinkCommitLog(str(ck)).identity("a").sink_id
    fake.open_ids = [f"a-{sid}-0-0"]
    code = main(["transactions", "abort", "-b", B, "--checkpoint", str(ck),
                 "--transactional-id", f"a-{sid}-9-0", "--yes"])
    assert code == 1
    assert f"a-{sid}-9-0" in capsys.readouterr().err
    assert fake.instances[-1].aborted == []


def test_dry_run_by_prefix_alone_names_every_flag_needed(fake, capsys):
    fake.open_ids = ["txkafka-1a2b3c4d-0-0"]
    assert main(["transactions", "abort", "-b", B, "--prefix", "txkafka-1a2b3c4d-"]) == 0
    assert "--yes --force" in capsys.readouterr().out


def test_abort_has_no_json_flag_it_would_ignore(fake):
    with pytest.raises(SystemExit) as exc:
        main(["transactions", "abort", "-b", B, "--prefix", "p-", "--json"])
    assert exc.value.code == 2  # argparse: unrecognized argument


@pytest.mark.parametrize("args", [["-X", "security.protocol"], ["-X", "=SASL_SSL"],
                                  ["-X", "sasl.password:hunter2-secret"]])
def test_a_setting_without_key_or_value_is_refused(fake, args):
    # before: skipped silently ("-X security.protocol" made the client PLAINTEXT)
    with pytest.raises(SystemExit) as exc:
        main(["transactions", "list", "-b", B, "--prefix", "p-", *args])
    assert "key=value" in str(exc.value.code) and "hunter2" not in str(exc.value.code)
    assert fake.instances == []


def test_command_config_line_without_equals_is_refused_without_its_value(tmp_path, fake):
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.password: hunter2-secret\n")
    with pytest.raises(SystemExit) as exc:
        main(["transactions", "list", "-b", B, "--prefix", "p-", "--command-config", str(props)])
    message = str(exc.value.code)
    assert "line 2" in message and "hunter2" not in message
    assert fake.instances == []


def test_command_config_takes_kafka_tools_java_properties(tmp_path, fake, monkeypatch):
    # The admin.properties of kafka-acls.sh / kafka-transactions.sh: Java names, translated as a
    # query's kafka.* options are. (The CA file is not there: librdkafka's check is the next test's.)
    monkeypatch.setattr(cli_options, "check_client_config", lambda conf, client: None)
    props = tmp_path / "admin.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="admin" password="hunter2-secret";\n'
        "ssl.truststore.type=PEM\nssl.truststore.location=/etc/kafka/ca.pem\n")
    assert main(["transactions", "list", "-b", B, "--prefix", "p-", "--command-config",
                 str(props)]) == 0
    conf = fake.instances[0].conf
    assert conf["sasl.username"] == "admin" and conf["sasl.password"] == "hunter2-secret"
    assert conf["ssl.ca.location"] == "/etc/kafka/ca.pem" and "sasl.jaas.config" not in conf


@pytest.mark.parametrize("settings,named", [
    (["no.such.setting=1"], "'kafka.no.such.setting'"),
    (["security.protocol=SASL_SSLX"], "'kafka.security.protocol'"),
    (["security.protocol=SSL", "ssl.ca.location=/nonexistent/ca.pem"], "ssl.ca.location"),
])
def test_a_setting_librdkafka_refuses_stops_the_command_before_it_connects(fake, settings, named):
    with pytest.raises(CommandLineError, match="librdkafka rejected") as exc:
        main(["transactions", "list", "-b", B, "--prefix", "p-",
              *[a for s in settings for a in ("-X", s)]])
    assert named in str(exc.value.code)
    assert fake.instances == []


def test_settings_of_either_client_kind_pass_the_command_lines_check(fake):
    assert main(["transactions", "list", "-b", B, "--prefix", "p-", "-X", "acks=all",
                 "-X", "isolation.level=read_committed"]) == 0
    assert len(fake.instances) == 1


def test_a_typed_error_is_one_line_on_stderr_not_a_traceback(fake, monkeypatch):
    def unreachable(self, **_kw):
        raise BrokersUnavailableError("no broker answered (bootstrap servers, then brokers seen "
                                      "since): cannot connect to broker h:1")
    monkeypatch.setattr(FakeClient, "list_transactions", unreachable)
    with pytest.raises(SystemExit) as exc:
        main(["transactions", "list", "-b", B, "--prefix", "p-"])
    assert exc.value.code == "error: no broker answered (bootstrap servers, then brokers seen " \
                             "since): cannot connect to broker h:1"  # status 1, as documented


def test_a_setting_librdkafka_cannot_take_is_refused_naming_it(fake):
    with pytest.raises(SystemExit) as exc:
        main(["transactions", "list", "-b", B, "--prefix", "p-", "-X",
              "ssl.truststore.password=hunter2-secret"])
    message = str(exc.value.code)
    assert "ssl.truststore.password" in message and "hunter2" not in message
    assert fake.instances == []


@pytest.mark.parametrize("command", [
    ["transactions", "list", "-b", B],
    ["commit-log", "show"],
    ["commit-log", "resolve", "--batch", "1", "--lost"],
])
def test_checkpoint_uri_credentials_never_printed(tmp_path, monkeypatch, command):
    import pyarrow.fs as pafs

    from txkafka.connector.checkpoint import spark_checkpoint

    real = spark_checkpoint.checkpoint_filesystem

    def local(location, **kw):  # an s3:// URI with inline keys, served from local disk
        if location.startswith("s3://"):
            return pafs.LocalFileSystem(), str(tmp_path / "bucket" / "ck")
        return real(location, **kw)

    monkeypatch.setattr(spark_checkpoint, "checkpoint_filesystem", local)
    uri = "s3://AKIAEXAMPLE:wJalrXUtnFEMI-SECRET@bucket/ck?session_token=TOKEN-SECRET"
    with pytest.raises(SystemExit) as exc:
        main([*command, "--checkpoint", uri])
    message = str(exc.value.code)
    assert "no txkafka sink there" in message
    assert "SECRET" not in message and "AKIAEXAMPLE" not in message


def test_dry_run_fails_too_when_a_named_id_is_not_open(tmp_path, fake, capsys):
    """The exit status does not depend on --yes: a named id that is not open is an error either
    way (a dry run used to exit 0 when another named id was open)."""
    ck = tmp_path / "ck"
    sid = SinkCommitLog(str(ck)).identity("a").sink_id
    fake.open_ids = [f"a-{sid}-0-0"]
    code = main(["transactions", "abort", "-b", B, "--checkpoint", str(ck),
                 "--transactional-id", f"a-{sid}-0-0", "--id", f"a-{sid}-9-0"])
    assert code == 1
    out = capsys.readouterr()
    assert f"a-{sid}-9-0" in out.err and "would abort 1" in out.out
    assert fake.instances[-1].aborted == []
