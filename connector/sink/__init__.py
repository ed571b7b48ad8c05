"""The writer: what ``df.writeStream.format("txkafka")`` does on the Kafka side, exactly once.

Owns: the sink's options parsed once (``options``), the task side (``task_writer`` on librdkafka's
producer, ``task_writer_txkafka`` on the client's own ``producer``; what a task read,
``partition_input``; what it hands the driver, ``committable``), the driver side (``committer``:
validate, decide, commit, recover), the sink's durable decisions under the checkpoint
(``commit_log``), the checks when a query starts (``start_checks``), the sweeps of late attempts'
transactions (``late_transactions``) and the transactional ids (``transactional_ids``).

May import: the shared modules of ``txkafka.connector``, ``client`` and ``checkpoint`` (Spark's
offsets log, which the sink compares with its own log). Never the source (what it needs of the
source's offsets comes through ``checkpoint``) or pyspark.
"""
