"""keyFormat/valueFormat on the Spark side: the reader schemas resolved from the registry when the
query starts, and the Spark schema of the decoded columns (from their Arrow types)."""

from __future__ import annotations

from typing import Optional

from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type
from pyspark.sql.types import StructField, StructType

from txkafka.connector.errors import KafkaConfigError
from txkafka.connector.serde.batches import ColumnPlan, DecodePlan, EncodePlan, decoded_schema, \
    resolve_reader_schema, resolve_writer_schema
from txkafka.connector.serde.options import FormatOptions
from txkafka.connector.source.options import SourceOptions
from txkafka.connector.source.range_reader import arrow_schema


def decode_plan(options: SourceOptions) -> Optional[DecodePlan]:
    """The reader schemas of the formatted columns (latest, or pinned version or id), or None."""
    formats = options.formats
    if formats is None:
        return None
    topic = options.single_topic
    plans = {c.column: ColumnPlan(c, resolve_reader_schema(formats, c, topic))
             for c in formats.columns()}
    return DecodePlan(formats, plans.get("key"), plans.get("value"))


def spark_schema(base: StructType, include_headers: bool,
                 plan: Optional[DecodePlan]) -> StructType:
    """``base`` (the binary record schema) with the decoded columns' Spark types."""
    if plan is None:
        return base
    arrow = decoded_schema(arrow_schema(include_headers), plan)
    known = {f.name: f for f in base.fields}

    def field(f) -> StructField:
        decoded = f.name not in known or (f.name in ("key", "value")
                                          and getattr(plan, f.name) is not None)
        return StructField(f.name, from_arrow_type(f.type), True) if decoded else known[f.name]

    return StructType([field(f) for f in arrow])


def encode_plan(formats: Optional[FormatOptions], schema: StructType,
                topic: Optional[str]) -> Optional[EncodePlan]:
    """The schemas the writer encodes key and/or value with (registered here, on the driver,
    when auto.register.schemas asks), or None without formats."""
    if formats is None:
        return None
    fields = {f.name.lower(): f for f in schema.fields}
    plans: dict[str, ColumnPlan] = {}
    for col in formats.columns():
        f = fields.get(col.column)
        if f is None or not isinstance(f.dataType, StructType):
            got = "no such column" if f is None else f"a {f.dataType.simpleString()} column"
            raise KafkaConfigError(
                f"option '{col.column}Format' {col.format} encodes a struct column "
                f"'{col.column}', but the DataFrame has {got}; build it with "
                f"struct(...).alias('{col.column}')")
        # A timestamp column's Arrow type needs a zone; any names the same derived schema
        # (instants), and the written batches bring their own.
        arrow_type = to_arrow_type(f.dataType, timezone="UTC")
        plans[col.column] = ColumnPlan(col, resolve_writer_schema(formats, col, topic, arrow_type))
    return EncodePlan(plans.get("key"), plans.get("value"))
