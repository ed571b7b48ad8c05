"""The ``txkafka`` data source: Spark asks it for readers and writers; it hands out thin adapters.

Like Spark's KafkaSourceProvider, this is only a dispatcher: option parsing and validation live in
the typed configs of txkafka.connector, so errors surface when the query starts.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from txkafka import FORMAT_NAME


class TxKafkaDataSource(DataSource):
    """Kafka source and exactly-once sink; option names follow Spark's ``kafka`` format."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        from .kafka_reader import source_schema

        return source_schema(self.options)

    def reader(self, schema: StructType):
        from .kafka_reader import KafkaBatchReader

        return KafkaBatchReader(self.options, schema)

    def streamReader(self, schema: StructType):
        from .kafka_reader import KafkaMicroBatchStream

        return KafkaMicroBatchStream(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool):
        from .kafka_writer import KafkaBatchWrite

        return KafkaBatchWrite(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .kafka_writer import KafkaStreamingWrite

        return KafkaStreamingWrite(self.options, schema, overwrite)
