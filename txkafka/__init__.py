"""txkafka: exactly-once Kafka source and sink for Spark Structured Streaming.

``spark.readStream.format("txkafka")`` and ``df.writeStream.format("txkafka")`` work after
``pip install txkafka``: Spark finds the top-level module ``pyspark_txkafka`` by itself.
"""

__version__ = "0.1.0"
FORMAT_NAME = "txkafka"
