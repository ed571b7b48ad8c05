"""txkafka: exactly-once Kafka source and sink for Spark Structured Streaming.

``spark.readStream.format("txkafka")`` and ``df.writeStream.format("txkafka")`` work after
``pip install txkafka``: Spark finds the top-level module ``pyspark_txkafka`` by itself.

This package holds the user's command line (``txkafka``: ``cli`` and the modules of its commands)
and what it runs on (the embedded broker, plain Kafka chores, the demo's pipeline driver, the
SparkSession builder); the product is in ``txkafka.connector`` and ``txkafka.python_datasource``,
developer tooling in ``txkafka.devtools``, which nothing here imports.
"""

__version__ = "0.1.0"
FORMAT_NAME = "txkafka"
