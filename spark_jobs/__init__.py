"""PySpark jobs over the audit Parquet written by :mod:`observers.audit`."""
