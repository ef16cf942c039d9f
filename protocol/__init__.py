"""Sans-IO Kafka wire protocol: framing, headers, declarative schemas, record batches.

Nothing in this package performs I/O, reads a clock or imports trio: it takes bytes and
returns values (or raises a :class:`protocol.errors.ProtocolError` carrying the Kafka
error code to answer with).
"""
