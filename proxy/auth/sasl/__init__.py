"""SASL at the sidecar (sans-IO): mechanisms, credential formats and the session rules.

* :mod:`proxy.auth.sasl.scram` — RFC 5802 / RFC 7677 SCRAM server and the credential math;
* :mod:`proxy.auth.sasl.plain` — RFC 4616 PLAIN server;
* :mod:`proxy.auth.sasl.oauthbearer` — RFC 7628 OAUTHBEARER server (Kafka's exchange), and
  :mod:`proxy.auth.sasl.jwt_token`, the JWT check against a provider's keys (PyJWT);
* :mod:`proxy.auth.sasl.credentials` — Kafka's SCRAM credential text in ``/config/users/<user>``;
* :mod:`proxy.auth.sasl.password_file` — the PLAIN users file (salted PBKDF2 hashes);
* :mod:`proxy.auth.sasl.session` — one connection's authentication state: what may pass when,
  handshake, tokens, session lifetime and re-authentication (KIP-368);
* :mod:`proxy.auth.sasl.passthrough` — the principal read from an exchange a broker performs.

Nothing here does I/O or reads a clock: the trio shell (``proxy/handlers/sasl.py``) feeds
bytes and ``now`` in and sends what comes out.
"""
