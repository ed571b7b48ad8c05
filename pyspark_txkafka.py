"""Registration hook: Spark imports every top-level ``pyspark_*`` module that has a ``DefaultSource``
and registers it under its ``name()``, so ``format("txkafka")`` works right after ``pip install``."""

from txkafka.python_datasource.kafka_source_provider import TxKafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
