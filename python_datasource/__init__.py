"""Thin adapters from PySpark's Python Data Source API to the Kafka core in txkafka.connector.

May import: pyspark, ``txkafka.connector`` and its wings, and the ``txkafka`` package root
(``FORMAT_NAME``). Never the command line or the developer tooling.
"""
