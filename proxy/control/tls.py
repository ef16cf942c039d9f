"""TLS contexts for SSL listeners and for an SSL link to the broker.

Certificates are PEM files (``ssl.keystore.location`` holds the chain and the key,
``ssl.truststore.location`` the CAs), the form Python's ``ssl`` module reads directly.
On an SSL listener a client's certificate names the connection's principal through
``ssl.principal.mapping.rules`` (:func:`listener_principal_mapper`, :func:`tls_principal`).
A reload builds every listener's context anew (:func:`listener_tls`) and holds a new server
certificate to Kafka's rules for a changed keystore (:func:`check_certificate_change`).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from cryptography import x509

from proxy.auth.distinguished_name import CertificateError, subject_dn
from proxy.auth.principal_mapping import MappingRuleError, NoMatchingRule, PrincipalMapper
from proxy.config import ConfigError, SidecarConfig

_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True, kw_only=True)
class ServerTls:
    """One SSL listener's server context and the certificate it presents."""

    context: ssl.SSLContext
    #: The server certificate's subject, RFC 4514 (``CN=broker-0,O=Acme``).
    subject: str
    #: Its subject alternative names, as ``DNS:host`` / ``IP:1.2.3.4`` / ``URI:...``.
    alt_names: frozenset[str]
    #: Its serial number (what operators compare after a rotation).
    serial: int


def listener_tls(config: SidecarConfig, listener: str) -> ServerTls | None:
    """The server context of ``listener`` and its certificate if its protocol is
    SSL/SASL_SSL, else ``None``. Raises :class:`ConfigError` naming the listener when the
    files do not load or the key does not match the certificate."""
    context = listener_ssl_context(config, listener)
    if context is None:
        return None
    keystore = config.listener_value(listener, "ssl.keystore.location")
    try:
        with open(keystore, "rb") as pem:
            certificate = x509.load_pem_x509_certificate(pem.read())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"listener {listener}: cannot read the server certificate in {keystore} ({exc})") from None
    return ServerTls(context=context, subject=certificate.subject.rfc4514_string(),
                     alt_names=_alt_names(certificate), serial=certificate.serial_number)


def _alt_names(certificate: x509.Certificate) -> frozenset[str]:
    try:
        extension = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return frozenset()
    return frozenset(f"{_SAN_KINDS.get(type(name).__name__, type(name).__name__)}:{name.value}"
                     for name in extension.value)


_SAN_KINDS = {"DNSName": "DNS", "IPAddress": "IP", "UniformResourceIdentifier": "URI", "RFC822Name": "email"}


def check_certificate_change(config: SidecarConfig, listener: str, old: ServerTls, new: ServerTls) -> None:
    """Kafka's rules for a keystore changed on a running broker: the new certificate keeps
    the subject (unless ``ssl.allow.dn.changes``) and every subject alternative name of the
    old one (unless ``ssl.allow.san.changes``; new names may be added). Raises
    :class:`ConfigError` saying what differs."""
    if new.subject != old.subject and not config.listener_value(listener, "ssl.allow.dn.changes"):
        raise ConfigError(
            f"listener {listener}: the new server certificate's subject {new.subject!r} differs from the one in "
            f"force ({old.subject!r}); set ssl.allow.dn.changes=true to allow it")
    dropped = old.alt_names - new.alt_names
    if dropped and not config.listener_value(listener, "ssl.allow.san.changes"):
        raise ConfigError(
            f"listener {listener}: the new server certificate drops subject alternative name(s) "
            f"{', '.join(sorted(dropped))} of the one in force; set ssl.allow.san.changes=true to allow it")


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
