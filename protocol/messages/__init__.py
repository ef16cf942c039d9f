"""The Kafka message table, generated from Kafka's JSON message specs.

Everything here is data in the types of :mod:`protocol.spec`; the table itself lives in
:mod:`protocol.messages.generated`, written by ``python -m protocol.codegen`` (never edit it
by hand). ``REQUESTS``/``RESPONSES`` are keyed by API key, ``HEADERS`` and ``DATA`` (the
consumer protocol payloads) by message name.
"""

from protocol.messages.generated import DATA, HEADERS, MESSAGES, REQUESTS, RESPONSES

__all__ = ["DATA", "HEADERS", "MESSAGES", "REQUESTS", "RESPONSES"]
