"""Spark's streaming checkpoint as txkafka reads it, and savepoints.

Owns: the one reader of Spark's checkpoint layout (``spark_checkpoint``: ``metadata``,
``offsets/N``, ``commits/N``, on any pyarrow filesystem) and savepoints (``savepoint``: the file
format, the positions that match what an exactly-once sink's output holds, where a reader with
option ``savepoint`` starts, the ``startingOffsets`` that resumes after a logged batch).

May import: the shared modules of ``txkafka.connector`` and ``source`` (a position is the
reader's offset, a start is the reader's options). Never the client, the sink or pyspark.
"""
