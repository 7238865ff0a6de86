"""Exactly-once Kafka → lakehouse ingestion on PySpark."""

__version__ = "0.1.0"
