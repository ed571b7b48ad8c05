"""Kafka wire-protocol primitives: just enough encoding to speak the transaction APIs.

Why: confluent-kafka exposes no EndTxn, DescribeTransactions or ListTransactions, and the sink's driver
must end transactions that executors opened. Field layouts follow the public message definitions in
apache/kafka ``clients/src/main/resources/common/message/*.json``.
"""

from __future__ import annotations

import struct
from typing import Callable, TypeVar

T = TypeVar("T")

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class Writer:
    """Builds a request body; ``flexible`` selects compact encodings (KIP-482)."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.parts: list[bytes] = []

    def int8(self, v: int) -> "Writer":
        self.parts.append(_I8.pack(v))
        return self

    def int16(self, v: int) -> "Writer":
        self.parts.append(_I16.pack(v))
        return self

    def int32(self, v: int) -> "Writer":
        self.parts.append(_I32.pack(v))
        return self

    def int64(self, v: int) -> "Writer":
        self.parts.append(_I64.pack(v))
        return self

    def boolean(self, v: bool) -> "Writer":
        return self.int8(1 if v else 0)

    def uvarint(self, v: int) -> "Writer":
        out = bytearray()
        while True:
            b = v & 0x7F
            v >>= 7
            if v:
                out.append(b | 0x80)
            else:
                out.append(b)
                break
        self.parts.append(bytes(out))
        return self

    def string(self, s: str | None) -> "Writer":
        if s is None:
            return self.uvarint(0) if self.flexible else self.int16(-1)
        raw = s.encode("utf-8")
        if self.flexible:
            self.uvarint(len(raw) + 1)
        else:
            self.int16(len(raw))
        self.parts.append(raw)
        return self

    def bytes_(self, b: bytes | None) -> "Writer":
        if b is None:
            return self.uvarint(0) if self.flexible else self.int32(-1)
        if self.flexible:
            self.uvarint(len(b) + 1)
        else:
            self.int32(len(b))
        self.parts.append(b)
        return self

    def array(self, items: list[T], each: Callable[["Writer", T], object]) -> "Writer":
        if self.flexible:
            self.uvarint(len(items) + 1)
        else:
            self.int32(len(items))
        for item in items:
            each(self, item)
        return self

    def tags(self) -> "Writer":
        """Empty tagged-field section (flexible versions only)."""
        if self.flexible:
            self.uvarint(0)
        return self

    def build(self) -> bytes:
        return b"".join(self.parts)

    def pieces(self) -> list[bytes]:
        """The body unjoined (a request with large byte fields: the connection joins it once)."""
        return self.parts


class ProtocolError(ValueError):
    """A response did not parse: a truncated frame or an unexpected layout."""


class Reader:
    """Parses a response body."""

    def __init__(self, data: bytes | bytearray, flexible: bool) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError(f"truncated response: need {n} bytes at {self.pos}/{len(self.data)}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int8(self) -> int:
        return _I8.unpack(self._take(1))[0]

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _I64.unpack(self._take(8))[0]

    def boolean(self) -> bool:
        return self.int8() != 0

    def uvarint(self) -> int:
        shift = 0
        value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise ProtocolError("varint too long")

    def string(self) -> str | None:
        if self.flexible:
            n = self.uvarint() - 1
        else:
            n = self.int16()
        if n < 0:
            return None
        return bytes(self._take(n)).decode("utf-8")

    def view(self, n: int) -> memoryview:
        """The next ``n`` bytes without a copy (a Fetch response's record set)."""
        return self._take(n)

    def bytes_(self) -> bytes | None:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            return None
        return bytes(self._take(n))

    def array(self, each: Callable[["Reader"], T]) -> list[T]:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            return []
        return [each(self) for _ in range(n)]

    def tags(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def remaining(self) -> int:
        return len(self.data) - self.pos


def request_header(api_key: int, version: int, correlation_id: int, client_id: str,
                   flexible: bool) -> bytes:
    """Request header v1 (non-flexible) or v2 (flexible: adds an empty tag section)."""
    w = Writer(flexible=False)
    w.int16(api_key).int16(version).int32(correlation_id).string(client_id)
    if flexible:
        w.flexible = True
        w.tags()
    return w.build()
