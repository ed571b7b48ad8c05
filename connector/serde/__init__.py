"""Record key and value formats: Confluent's Schema Registry wire format with Avro, Protobuf and
JSON Schema payloads, decoded into and encoded from Arrow column-wise.

Owns: the codecs (one module per format), the wire header (magic byte 0, 4-byte big-endian
schema id), the registry client wrapper and its schema cache, and the typed format options.
May import: numpy, pyarrow, the format libraries, ``connector.errors``, and the client's
column helpers (varints, Arrow from numpy, in ``connector.client``); never pyspark, never
the source or the sink (they call in here, not the other way round).

Every codec has the shape of :class:`Codec`: it turns payloads (the bytes after the 5-byte wire
header) into one Arrow array of the reader schema's type, and back, a whole column at a time:
no per-row Python where a vectorised path exists. Bad rows are reported, never raised one by one,
so the caller applies the user's mode (FAILFAST raises naming topic, partition and offset;
PERMISSIVE keeps null plus the raw bytes and the error).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa


@dataclass
class DecodeResult:
    """Decoded values, one per payload (null where decoding failed), and what failed where."""

    values: pa.Array
    errors: dict[int, str] = field(default_factory=dict)  # row index -> what was wrong


@dataclass
class EncodeResult:
    """Encoded payloads (without the wire header), one per value (null where it did not fit)."""

    payloads: pa.BinaryArray
    errors: dict[int, str] = field(default_factory=dict)  # row index -> what did not fit


class Codec(Protocol):
    """One format for one (writer schema, reader schema) pair."""

    arrow_type: pa.DataType  # the reader schema's Arrow type (Spark-compatible: see each module)

    def decode(self, payloads: pa.BinaryArray) -> DecodeResult: ...

    def encode(self, values: pa.Array) -> EncodeResult: ...
