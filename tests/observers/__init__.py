"""Tests of observers/: the hub, the audit observer and its Parquet sink, the Prometheus observer."""
