"""A long-lived client (the stream reader's) recovers from a transient TLS/SASL error."""

from concurrent.futures import TimeoutError as FutureTimeout

import pytest
from confluent_kafka import KafkaError

from txkafka.connector.client.librdkafka_errors import SecurityErrorProbe, wait_checking_security
from txkafka.connector.errors import KafkaAuthenticationError


class _Client:
    def poll(self, _timeout):
        return 0


def _slow_then(answer, slow: int):
    calls = {"n": 0}

    def call(_t):
        calls["n"] += 1
        if calls["n"] <= slow:
            raise FutureTimeout()
        return answer
    return call


def test_a_transient_ssl_error_does_not_fail_later_calls():
    probe = SecurityErrorProbe({"security.protocol": "SSL"})
    probe.on_error(KafkaError(KafkaError._SSL, "SSL handshake failed: Disconnected"))
    assert probe.security_error is not None
    # The broker is back: the next call answers at once and the failure is forgotten ...
    assert wait_checking_security(_slow_then("md", 0), timeout_s=5, client=_Client(),
                                  probe=probe, action="listing topics") == "md"
    assert probe.security_error is None
    # ... so a later call that needs more than one slice does not report the old failure.
    assert wait_checking_security(_slow_then("md2", 2), timeout_s=5, client=_Client(),
                                  probe=probe, action="listing topics", slice_s=0.01) == "md2"


def test_a_current_ssl_error_still_fails_fast():
    probe = SecurityErrorProbe({"security.protocol": "SSL"})
    probe.on_error(KafkaError(KafkaError._SSL, "certificate verify failed"))
    with pytest.raises(KafkaAuthenticationError):
        wait_checking_security(_slow_then("never", 10**6), timeout_s=5, client=_Client(),
                               probe=probe, action="listing topics", slice_s=0.01)
