"""The Kafka side of txkafka's source and sink, without Spark: nothing here imports pyspark.

Four wings, each a package whose docstring says what it owns and what it may import:

- ``client/``: the Kafka protocol client (connections, security, metadata, fetch, produce,
  transactions, record batches, error codes, the ``kafka.*`` settings); knows neither Spark, the
  source nor the sink;
- ``source/``: the reader (options, offsets, planning, range reads);
- ``sink/``: the writer (options, task writers, the driver's commit protocol, its commit log);
- ``checkpoint/``: Spark's checkpoint as txkafka reads it, and savepoints.

The modules at this level are shared by all of them and import nothing but each other:
``errors`` (the typed errors), ``option_names`` (every option key the reader and the writer
accept), ``secrets_redaction`` and ``fault_injection`` (named crash points, inert unless armed).
The allowed import directions are docs/design.md's "Layout and import directions";
tests/test_import_directions.py holds every import to them.
"""
