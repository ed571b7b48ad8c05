"""The reader: what ``spark.readStream.format("txkafka")`` does on the Kafka side.

Owns: the reader's options parsed once (``options``), its offsets in Spark's Kafka JSON
(``offsets``), the driver's look-ups of partitions and offsets (``offset_reader``), the plan of a
trigger (``range_planner``: admission control, offset ranges, data loss), the executors' read of
one range into Arrow (``range_reader``: through the client's ``fetcher`` or librdkafka's
consumer), and committed offsets published to a consumer group for monitoring
(``group_offsets``).

May import: the shared modules of ``txkafka.connector`` and ``client``. Never the sink, the
checkpoint package or pyspark.
"""
