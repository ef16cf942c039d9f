"""Tests of the PySpark audit jobs, on a real local SparkSession."""
