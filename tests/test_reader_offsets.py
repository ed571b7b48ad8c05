"""Offsets as Spark stores them: one canonical JSON text per offset, parsed back from string keys."""

import json

import pytest

from txkafka.connector.errors import KafkaConfigError
from txkafka.connector.source.offsets import (
    batch_start_of,
    describe_offsets,
    from_offset_json,
    to_offset_json,
)


def test_canonical_order_sorted_topics_numeric_partitions():
    offsets = {("b", 10): 5, ("a", 2): 7, ("b", 2): 1, ("a", 0): 3}
    text = json.dumps(to_offset_json(offsets))
    assert text == '{"a": {"0": 3, "2": 7}, "b": {"2": 1, "10": 5}}'


def test_equal_offsets_serialise_identically_whatever_the_insertion_order():
    one = {("t", 1): 5, ("t", 0): 2, ("s", 3): 9}
    two = dict(reversed(list(one.items())))
    assert json.dumps(to_offset_json(one)) == json.dumps(to_offset_json(two))


def test_round_trip_through_spark_text():
    offsets = {("orders", 0): 0, ("orders", 11): 123456789012, ("pay.v1", 3): 42}
    # Spark hands back what json.loads makes of the stored text: string partition keys.
    back = from_offset_json(json.loads(json.dumps(to_offset_json(offsets))))
    assert back == offsets
    assert json.dumps(to_offset_json(back)) == json.dumps(to_offset_json(offsets))


def test_batch_0_end_carries_its_start_last_and_positions_ignore_it():
    end = to_offset_json({("t", 1): 9, ("a", 0): 4}, batch_start={("t", 1): 2, ("a", 0): 0})
    text = json.dumps(end)
    assert text == ('{"a": {"0": 4}, "t": {"1": 9}, '
                    '"txkafka:start": {"a": {"0": 0}, "t": {"1": 2}}}')
    back = json.loads(text)
    assert from_offset_json(back) == {("t", 1): 9, ("a", 0): 4}
    assert batch_start_of(back) == {("t", 1): 2, ("a", 0): 0}
    assert batch_start_of(json.loads(json.dumps(to_offset_json({("t", 1): 9})))) is None
    assert batch_start_of(None) is None


def test_parse_accepts_int_keys_and_empty():
    assert from_offset_json({"t": {0: 4}}) == {("t", 0): 4}
    assert from_offset_json({}) == {} and from_offset_json(None) == {}


@pytest.mark.parametrize("bad", [{"t": 5}, {"t": {"x": 1}}, {"t": {"0": "many"}}, [1, 2]])
def test_foreign_offsets_rejected(bad):
    with pytest.raises(KafkaConfigError, match="not a txkafka offset"):
        from_offset_json(bad)


def test_describe_is_short():
    text = describe_offsets({("t", p): p for p in range(30)}, limit=3)
    assert text == "t-0@0, t-1@1, t-2@2 (+27 more)"
