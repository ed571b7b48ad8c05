"""Throwaway audit probe (auditC): a broker that joins the cluster after the first check."""
import pytest
from tests.test_sink_start_checks import fake_cluster, _query, _new_process, OK, V, M  # noqa: F401
from txkafka.connector.errors import UnsupportedBrokerError
from txkafka.connector.sink.start_checks import validate_at_start


def test_a_broker_that_joins_later_with_verification_off_is_refused(fake_cluster, monkeypatch, tmp_path):
    cfg, log = _query(tmp_path)
    validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)  # brokers 1-3 all fine
    fake_cluster.answers[4] = {V: "false", M: "900000"}  # a new broker id joins, unsafe
    _new_process(monkeypatch)  # a restarted driver
    with pytest.raises(UnsupportedBrokerError, match="broker 4"):
        validate_at_start(cfg, None, timeout_s=0.5, commit_log=log)
