"""TLS contexts for SSL listeners and for an SSL link to the broker.

Certificates are PEM files (``ssl.keystore.location`` holds the chain and the key,
``ssl.truststore.location`` the CAs), the form Python's ``ssl`` module reads directly.
On an SSL listener a client's certificate names the connection's principal through
``ssl.principal.mapping.rules`` (:func:`listener_principal_mapper`, :func:`tls_principal`).
"""

from __future__ import annotations

import ssl

from proxy.auth.distinguished_name import CertificateError, subject_dn
from proxy.auth.principal_mapping import MappingRuleError, NoMatchingRule, PrincipalMapper
from proxy.config import ConfigError, SidecarConfig

_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def listener_ssl_context(config: SidecarConfig, listener: str) -> ssl.SSLContext | None:
    """The server context of ``listener`` if its protocol is SSL/SASL_SSL, else ``None``."""
    if config.security_protocol(listener) not in ("SSL", "SASL_SSL"):
        return None
    keystore = config.listener_value(listener, "ssl.keystore.location")
    if not keystore:
        raise ConfigError(
            f"listener {listener} uses {config.security_protocol(listener)} but "
            f"ssl.keystore.location (or listener.name.{listener.lower()}.ssl.keystore.location) is empty"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    password = config.listener_value(listener, "ssl.key.password") or None
    try:
        context.load_cert_chain(keystore, password=password)
        auth = config.listener_value(listener, "ssl.client.auth")
        context.verify_mode = _CLIENT_AUTH[auth]
        truststore = config.listener_value(listener, "ssl.truststore.location")
        if truststore:
            context.load_verify_locations(truststore)
        elif auth != "none":
            raise ConfigError(f"ssl.client.auth={auth} on {listener} needs ssl.truststore.location")
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"listener {listener}: cannot load TLS material ({exc})") from None
    return context


def listener_principal_mapper(config: SidecarConfig, listener: str) -> PrincipalMapper | None:
    """The mapping rules of ``listener`` if its protocol is SSL, else ``None``.

    On SASL_SSL the SASL login names the principal (as in Kafka), so no rules apply there.
    Raises :class:`ConfigError` naming the key when a rule does not parse.
    """
    if config.security_protocol(listener) != "SSL":
        return None
    rules = config.listener_value(listener, "ssl.principal.mapping.rules")
    try:
        return PrincipalMapper.parse(rules)
    except MappingRuleError as exc:
        key = "ssl.principal.mapping.rules"
        if key in config.listener_overrides.get(listener, {}):
            key = f"listener.name.{listener.lower()}.{key}"
        raise ConfigError(f"{key}={rules!r}: {exc}") from None


class PrincipalMappingFailed(Exception):
    """A client certificate that names no principal: its connection fails authentication."""


def tls_principal(der: bytes | None, mapper: PrincipalMapper) -> str | None:
    """``User:<mapped subject>`` of the client's certificate (DER); ``None`` when it sent none.

    Kafka's ``DefaultKafkaPrincipalBuilder``: a client without a certificate is
    ``User:ANONYMOUS`` (``None`` here); a subject no rule maps raises
    :class:`PrincipalMappingFailed`, and so does a certificate whose subject cannot be read.
    """
    if not der:
        return None
    try:
        dn = subject_dn(der)
        return f"User:{mapper.name(dn)}"
    except (CertificateError, NoMatchingRule) as exc:
        raise PrincipalMappingFailed(str(exc)) from None


def upstream_ssl_context(config: SidecarConfig) -> ssl.SSLContext | None:
    """The client context for the broker link, or ``None`` for plaintext."""
    if config["sidecar.upstream.security.protocol"] != "ssl":
        return None
    context = ssl.create_default_context()
    truststore = config["sidecar.upstream.ssl.truststore.location"]
    try:
        if truststore:
            context.load_verify_locations(truststore)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"sidecar.upstream.ssl.truststore.location={truststore!r}: {exc}") from None
    context.check_hostname = config["sidecar.upstream.ssl.endpoint.identification.enabled"]
    return context
