import pytest

from txkafka.connector.client.protocol import ProtocolError, Reader, Writer, request_header


@pytest.mark.parametrize("flexible", [False, True])
def test_round_trip_every_type(flexible):
    w = Writer(flexible)
    w.int8(-3).int16(-300).int32(70000).int64(-(2**40)).boolean(True)
    w.string("héllo").string(None).bytes_(b"\x00\x01").bytes_(None)
    w.array([1, 2, 3], lambda ww, x: ww.int32(x)).tags()
    r = Reader(w.build(), flexible)
    assert (r.int8(), r.int16(), r.int32(), r.int64(), r.boolean()) == (-3, -300, 70000, -(2**40), True)
    assert (r.string(), r.string(), r.bytes_(), r.bytes_()) == ("héllo", None, b"\x00\x01", None)
    assert r.array(lambda rr: rr.int32()) == [1, 2, 3]
    r.tags()
    assert r.remaining() == 0


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 16383, 16384, 2**31 - 1])
def test_uvarint(value):
    r = Reader(Writer(True).uvarint(value).build(), True)
    assert r.uvarint() == value


def test_compact_string_length_is_plus_one():
    assert Writer(True).string("ab").build() == b"\x03ab"
    assert Writer(False).string("ab").build() == b"\x00\x02ab"


def test_tagged_fields_are_skipped():
    # two tags: tag 0 with 2 bytes, tag 5 with 1 byte, then an int16
    data = bytes([2, 0, 2, 0xAA, 0xBB, 5, 1, 0xCC]) + b"\x00\x07"
    r = Reader(data, True)
    r.tags()
    assert r.int16() == 7


def test_truncated_response_is_a_clear_error():
    with pytest.raises(ProtocolError, match="truncated"):
        Reader(b"\x00", False).int32()


def test_request_header_layouts():
    v1 = request_header(26, 2, 7, "c", flexible=False)
    assert v1 == b"\x00\x1a\x00\x02\x00\x00\x00\x07\x00\x01c"
    assert request_header(26, 2, 7, "c", flexible=True) == v1 + b"\x00"
