"""Kafka's SCRAM credential text, as ``/config/users/<user>`` holds it (ZooKeeper mode).

A user's znode is Kafka's dynamic-config JSON; each SCRAM mechanism is one config entry::

    {"version":1,"config":{"SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=4096"}}

(``ScramCredentialUtils.credentialToString`` / ``credentialFromString``). Other entries of
the same znode (user quotas such as ``producer_byte_rate``) are left as they are.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from proxy.auth.sasl.scram import MECHANISMS, ScramCredential

_FIELDS = ("salt", "stored_key", "server_key", "iterations")


class CredentialFormatError(ValueError):
    """A credential string that is not Kafka's ``salt=…,stored_key=…,server_key=…,iterations=N``."""


def format_credential(credential: ScramCredential) -> str:
    """Kafka's text for one credential."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return (
        f"salt={b64(credential.salt)},stored_key={b64(credential.stored_key)},"
        f"server_key={b64(credential.server_key)},iterations={credential.iterations}"
    )


def parse_credential(text: str) -> ScramCredential:
    """Read Kafka's text for one credential (exactly the four fields, in any order)."""
    values: dict[str, str] = {}
    for token in text.split(","):
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise CredentialFormatError("credential fields must be key=value")
        values[key] = value
    if len(values) != 4 or set(values) != set(_FIELDS):
        raise CredentialFormatError(f"credential must hold exactly {', '.join(_FIELDS)}")
    try:
        return ScramCredential(
            base64.b64decode(values["salt"], validate=True),
            base64.b64decode(values["stored_key"], validate=True),
            base64.b64decode(values["server_key"], validate=True),
            int(values["iterations"]),
        )
    except (binascii.Error, ValueError):
        raise CredentialFormatError("credential holds bad base64 or a bad iteration count") from None


def scram_credentials(config: Mapping[str, str]) -> dict[str, ScramCredential]:
    """``{mechanism: credential}`` from a user's config map; unreadable entries are skipped."""
    result: dict[str, ScramCredential] = {}
    for name in MECHANISMS:
        text = config.get(name)
        if text is None:
            continue
        try:
            result[name] = parse_credential(text)
        except CredentialFormatError:
            continue
    return result
