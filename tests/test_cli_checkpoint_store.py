"""An S3 checkpoint's settings on the command line, as spark-submit takes them: ``--conf
spark.hadoop.fs.s3a.*`` and ``--properties-file`` (spark-defaults.conf), mapped to the same
S3Settings as the writer's fs.s3a.* options; refusals name the key or line, never a value."""

from __future__ import annotations

import argparse

import pytest

from txkafka import exit_codes
from txkafka.cli import run
from txkafka.cli_options import (CommandLineError, KafkaConnection, add_checkpoint_store_options,
                                 add_kafka_options, checkpoint_store_from_args,
                                 read_spark_properties)
from txkafka.connector.checkpoint.object_store import S3Settings, s3_option_of_spark_setting

SECRET = "hunter2-s3-secret"


def _parse(argv: list[str], kafka: bool = False) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    if kafka:
        add_kafka_options(p, required=False)
    add_checkpoint_store_options(p)
    return p.parse_args(argv)


def test_spark_names_map_to_the_writer_options():
    assert s3_option_of_spark_setting("spark.hadoop.fs.s3a.endpoint") == "fs.s3a.endpoint"
    assert s3_option_of_spark_setting(" Spark.Hadoop.FS.S3A.Access.Key") == "fs.s3a.access.key"
    assert s3_option_of_spark_setting("fs.s3a.endpoint") is None  # Spark's spelling only
    assert s3_option_of_spark_setting("spark.hadoop.fs.s3a.impl") is None


def test_conf_gives_the_same_settings_as_the_writer_options():
    args = _parse(["--conf", "spark.hadoop.fs.s3a.endpoint=http://127.0.0.1:8333",
                   "--conf", "spark.hadoop.fs.s3a.access.key=AK",
                   "--conf", f"spark.hadoop.fs.s3a.secret.key={SECRET}",
                   "--conf", "spark.hadoop.fs.s3a.path.style.access=true",
                   "--conf", "spark.hadoop.fs.s3a.endpoint.region=eu-west-1"])
    got = checkpoint_store_from_args(args)
    assert got == S3Settings.from_options({
        "fs.s3a.endpoint": "http://127.0.0.1:8333", "fs.s3a.access.key": "AK",
        "fs.s3a.secret.key": SECRET, "fs.s3a.path.style.access": "true",
        "fs.s3a.endpoint.region": "eu-west-1"})
    assert got.endpoint_from == "option 'fs.s3a.endpoint'" and SECRET not in repr(got)


def test_nothing_given_leaves_the_aws_environment_to_the_checkpoint_package():
    assert checkpoint_store_from_args(_parse([])) is None


def test_a_properties_file_in_spark_defaults_syntax_other_lines_ignored(tmp_path):
    props = tmp_path / "spark-defaults.conf"
    props.write_text(
        "# Spark's own\n"
        "spark.master                      yarn\n"
        "spark.sql.shuffle.partitions=8\n"
        "spark.hadoop.fs.s3a.impl org.apache.hadoop.fs.s3a.S3AFileSystem\n"
        "spark.hadoop.fs.s3a.endpoint      http://store:9000\n"
        "spark.hadoop.fs.s3a.access.key=AK\n"
        f"spark.hadoop.fs.s3a.secret.key : {SECRET}  \n"
        "spark.hadoop.fs.s3a.path.style.access \\\n    true\n")
    assert read_spark_properties(str(props))["spark.master"] == "yarn"
    got = checkpoint_store_from_args(_parse(["--properties-file", str(props)]))
    assert (got.endpoint, got.access_key, got.secret_key, got.path_style) == (
        "http://store:9000", "AK", SECRET, True)
    # --conf wins over the file, as in spark-submit
    got = checkpoint_store_from_args(_parse([
        "--properties-file", str(props), "--conf", "spark.hadoop.fs.s3a.endpoint=http://other:1"]))
    assert got.endpoint == "http://other:1" and got.secret_key == SECRET


def test_an_unreadable_properties_file_is_named(tmp_path):
    with pytest.raises(CommandLineError, match="--properties-file .*nope.conf: cannot read it"):
        checkpoint_store_from_args(_parse(["--properties-file", str(tmp_path / "nope.conf")]))


@pytest.mark.parametrize("item, match", [
    (f"spark.sql.shuffle.partitions={SECRET}", "--conf spark.sql.shuffle.partitions: not a setting"),
    (f"spark.hadoop.fs.s3a.aws.credentials.provider={SECRET}",
     "--conf spark.hadoop.fs.s3a.aws.credentials.provider: not a setting"),
    (f"fs.s3a.endpoint={SECRET}", "--conf fs.s3a.endpoint: not a setting"),
    (f"spark.hadoop.fs.s3a.secret.key:{SECRET}", "--conf setting number 1 is not key=value"),
])
def test_a_conf_the_command_cannot_use_is_refused_naming_the_key_not_the_value(item, match):
    with pytest.raises(CommandLineError, match=match) as e:
        checkpoint_store_from_args(_parse(["--conf", item]))
    assert SECRET not in str(e.value.code) and e.value.status == exit_codes.USAGE


def test_one_key_without_the_other_is_refused_without_the_secret():
    with pytest.raises(CommandLineError, match="S3 checkpoint settings .*fs.s3a.secret.key' is set "
                       "without 'fs.s3a.access.key'") as e:
        checkpoint_store_from_args(_parse(["--conf", f"spark.hadoop.fs.s3a.secret.key={SECRET}"]))
    assert SECRET not in str(e.value.code)


def test_a_shared_conf_splits_spark_keys_from_kafka_client_settings():
    args = _parse(["-b", "127.0.0.1:1", "--conf", "client.id=ops", "-X", "socket.timeout.ms=1000",
                   "--conf", "spark.hadoop.fs.s3a.endpoint=http://store:9000"], kafka=True)
    conn = KafkaConnection.from_args(args)
    assert conn.settings == {"client.id": "ops", "socket.timeout.ms": "1000"}
    assert checkpoint_store_from_args(args).endpoint == "http://store:9000"
    bad = _parse(["-b", "127.0.0.1:1", "--conf", "spark.executor.memory=1g"], kafka=True)
    with pytest.raises(CommandLineError, match="or a Kafka client setting"):
        checkpoint_store_from_args(bad)


def test_the_commands_pass_the_settings_to_the_checkpoint(monkeypatch, tmp_path):
    """commit-log show opens its checkpoint with the command line's settings, not only the
    environment's (the S3 server is exercised by the S3 integration test)."""
    import txkafka.operator_cli as ops

    seen = []

    class Log:
        root = "bucket/ck/txkafka"

        def __init__(self, location, s3=None):
            seen.append((location, s3))

        def existing_identity(self):
            return None

    monkeypatch.setattr(ops, "SinkCommitLog", Log)
    code = run(["commit-log", "show", "--checkpoint", "s3a://bucket/ck",
                "--conf", "spark.hadoop.fs.s3a.endpoint=http://store:9000"])
    assert code == exit_codes.UNREACHABLE
    assert seen and seen[0][1].endpoint == "http://store:9000"
    assert run(["commit-log", "show", "--checkpoint", "s3a://bucket/ck",
                "--conf", "spark.master=local"]) == exit_codes.USAGE
