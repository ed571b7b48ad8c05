"""Thin adapters from PySpark's Python Data Source API to the Kafka core in txkafka.connector."""
