"""TLS contexts for SSL listeners and for an SSL link to the broker.

Certificates are PEM files (``ssl.keystore.location`` holds the chain and the key,
``ssl.truststore.location`` the CAs), the form Python's ``ssl`` module reads directly.
"""

from __future__ import annotations

import ssl

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
