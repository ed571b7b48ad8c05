"""txkafka: exactly-once Kafka source and sink for Spark Structured Streaming.

``spark.readStream.format("txkafka")`` and ``df.writeStream.format("txkafka")`` work after
``pip install txkafka``: Spark finds the top-level module ``pyspark_txkafka`` by itself.
"""

__version__ = "0.2.0"  # the package version: pyproject.toml reads it, `txkafka --version` prints it
FORMAT_NAME = "txkafka"
