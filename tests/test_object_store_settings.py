"""The sink's S3 settings: Hadoop's fs.s3a.* options, the AWS environment, and their errors.
(The store's behaviour is tested against a real S3 server: integration_tests/test_s3_checkpoints.py.)"""

from __future__ import annotations

import sys

import pytest

from txkafka.connector.checkpoint.object_store import S3Settings, s3_options
from txkafka.connector.errors import CheckpointStoreError, KafkaConfigError
from txkafka.connector.sink.options import SinkConfig

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t"}


def test_options_win_over_the_environment_and_spark_hadoop_names_are_accepted():
    env = {"AWS_ENDPOINT_URL": "http://env:1", "AWS_REGION": "eu-west-1"}
    s = S3Settings.from_options({"FS.S3A.ENDPOINT": "http://opt:2", "fs.s3a.access.key": "AK",
                                 "spark.hadoop.fs.s3a.secret.key": "SK",
                                 "fs.s3a.path.style.access": "true"}, environ=env)
    assert (s.endpoint, s.region, s.access_key, s.secret_key, s.path_style) == (
        "http://opt:2", "eu-west-1", "AK", "SK", True)
    assert "SK" not in repr(s) and "AK" not in repr(s)


def test_the_environment_is_used_without_options_s3_specific_endpoint_first():
    s = S3Settings.from_options({}, environ={"AWS_ENDPOINT_URL": "http://a:1",
                                             "AWS_ENDPOINT_URL_S3": "http://b:2"})
    assert s.endpoint == "http://b:2" and s.endpoint_from == "environment variable AWS_ENDPOINT_URL_S3"
    assert s.access_key is None and s.given
    assert not S3Settings.from_options({}, environ={}).given


def test_a_bare_host_is_https_as_in_hadoop():
    assert S3Settings.from_options({"fs.s3a.endpoint": "s3.example:443"}, environ={}).endpoint \
        == "https://s3.example:443"


@pytest.mark.parametrize("options, match", [
    ({"fs.s3a.access.key": "AK"}, "'fs.s3a.access.key' is set without 'fs.s3a.secret.key'"),
    ({"fs.s3a.secret.key": "SK"}, "'fs.s3a.secret.key' is set without 'fs.s3a.access.key'"),
    ({"fs.s3a.path.style.access": "yes"}, "must be true or false"),
    ({"fs.s3a.endpoint": "ftp://x"}, "must be an http:// or https:// URL"),
])
def test_bad_settings_fail_naming_the_option(options, match):
    with pytest.raises(KafkaConfigError, match=match):
        S3Settings.from_options(options, environ={})


def test_the_writer_accepts_the_fs_s3a_options_for_an_s3_checkpoint():
    cfg = SinkConfig.from_options({**BASE, "checkpointLocation": "s3a://bkt/ck",
                                   "fs.s3a.endpoint": "http://127.0.0.1:1",
                                   "fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK"},
                                  streaming=True)
    assert cfg.s3 is not None and cfg.s3.endpoint == "http://127.0.0.1:1"
    assert "SK" not in repr(cfg)
    local = SinkConfig.from_options({**BASE, "checkpointLocation": "/tmp/ck"}, streaming=True)
    assert local.s3 is None


def test_a_missing_botocore_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "botocore", None)
    monkeypatch.setitem(sys.modules, "botocore.session", None)
    with pytest.raises(CheckpointStoreError, match=r"pip install 'txkafka\[s3\]'"):
        S3Settings.from_options({}, environ={}).client()


def test_s3_options_copies_the_sessions_spark_hadoop_fs_s3a_settings():
    class Conf:
        def __init__(self, values: dict[str, str]) -> None:
            self.values = values

        def get(self, key: str, default=None):
            return self.values.get(key, default)

    class Session:
        conf = Conf({"spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:1",
                     "spark.hadoop.fs.s3a.secret.key": "SK", "spark.hadoop.fs.s3a.access.key": "AK",
                     "spark.hadoop.fs.s3a.connection.maximum": "10"})

    assert s3_options(Session()) == {"fs.s3a.endpoint": "http://127.0.0.1:1",
                                     "fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK"}
