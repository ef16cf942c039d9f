"""SCRAM (RFC 5802, RFC 7677) as Kafka speaks it: the server side and the credential math.

Theory of operation. A client proves it knows ``SaltedPassword = PBKDF2(H, password, salt,
i)`` without sending it. The server stores only ``StoredKey = H(HMAC(SaltedPassword,
"Client Key"))`` and ``ServerKey = HMAC(SaltedPassword, "Server Key")`` (Kafka's
``/config/users/<user>``). Two rounds:

1. client-first ``n,[a=authzid],n=<user>,r=<cnonce>[,ext]`` → server-first
   ``r=<cnonce><snonce>,s=<salt b64>,i=<iterations>``;
2. client-final ``c=<b64 gs2 header>,r=<nonce>[,ext],p=<proof b64>`` → server-final
   ``v=<signature b64>``. The proof is ``ClientKey XOR HMAC(StoredKey, AuthMessage)``;
   hashing the recovered ClientKey must give StoredKey.

Kafka's habits kept here: passwords are UTF-8 without SASLprep (``ScramFormatter``); only
the ``n`` gs2 flag (no channel binding); an authorization id must equal the user name;
iterations between 4096 and 16384; the ``tokenauth`` extension (delegation tokens) is not
supported and fails the login. Unlike Kafka, an unknown user is not refused at the first
round: the server answers with a salt derived from the name and a secret, and fails the
proof, so a client cannot tell an unknown user from a wrong password (RFC 5802 §9).

The nonce in the client-final message (``nonce_check``). RFC 5802 §5.1 requires it to be
exactly the server-first nonce (client nonce + server nonce); ``"strict"`` enforces that, as
Kafka 4.0 and later do (``ScramSaslServer.java`` line 150 at 4.1.0, commit 13f70256: ``equals``).
``"kafka"``, the default, is Kafka 3.9's rule (line 152 at 3.9.0, commit cc53a632:
``clientFinalMessage.nonce().endsWith(serverFirstMessage.nonce())``; Kafka 3.8 and older had
no check at all): the nonce must *end with* the server-first nonce. Old librdkafka (Debian's
2.0.2, kcat) sends its own nonce and then the whole server-first nonce, so the client nonce
appears twice; the proof is still computed over the message as sent, so it verifies. A login
that passed only thanks to that rule lists ``"scram-nonce-suffix"`` in :attr:`ScramServer.deviations`
for the shell to count. The cost: the nonce no longer pins the final message to this exchange
byte for byte; the proof, keyed by the user's secret over the whole AuthMessage (which holds
this exchange's server nonce), still does (docs/authentication.md).

Every failure is :class:`~proxy.auth.sasl.errors.AuthenticationFailed`, with a message that
names no secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from proxy.auth.sasl.errors import AuthenticationFailed

#: How the client-final nonce is checked (see the module docstring).
NonceCheck = Literal["kafka", "strict"]
NONCE_CHECKS: tuple[str, ...] = get_args(NonceCheck)
#: The deviation a lenient nonce check lets through (a name for metrics and logs).
NONCE_SUFFIX = "scram-nonce-suffix"

#: Kafka's defaults and bounds (``ScramMechanism``, ``ScramControlManager``).
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
#: Longest client token read (Kafka bounds SASL receives at 512 KiB; SCRAM needs far less).
MAX_TOKEN = 8192


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """A SCRAM variant: its SASL name, hash and Kafka's type id (DescribeUserScramCredentials)."""

    name: str
    hash_name: str
    type_id: int

    @property
    def digest_size(self) -> int:
        """Bytes in one hash (and in a proof or signature)."""
        return hashlib.new(self.hash_name).digest_size

    def hash(self, data: bytes) -> bytes:
        """H(data)."""
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        """HMAC(key, data)."""
        return hmac.digest(key, data, self.hash_name)


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
#: Only for RFC 5802's test vector: neither Kafka nor the sidecar offers it.
SCRAM_SHA_1 = ScramMechanism("SCRAM-SHA-1", "sha1", 0)

#: The mechanisms Kafka (and the sidecar) support, by SASL name and by Kafka type id.
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_TYPE = {m.type_id: m for m in MECHANISMS.values()}


@dataclass(frozen=True, slots=True, repr=False)
class ScramCredential:
    """What a server keeps for one user and mechanism: never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations}, <keys hidden>)"


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    """``Hi(password, salt, i)``: PBKDF2 with HMAC-H (password as UTF-8, as Kafka does)."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def credential_from_salted(
    mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """The stored credential from a salted password (what AlterUserScramCredentials sends)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(
        salt, mechanism.hash(client_key), mechanism.hmac(salted, b"Server Key"), iterations
    )


def derive_credential(
    mechanism: ScramMechanism,
    password: str,
    iterations: int = DEFAULT_ITERATIONS,
    salt: bytes | None = None,
) -> ScramCredential:
    """A new credential for ``password`` (a random salt unless one is given)."""
    salt = secrets.token_bytes(24) if salt is None else salt
    return credential_from_salted(
        mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations
    )


# -- message parsing -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClientFirst:
    """A parsed client-first message."""

    gs2_header: str
    username: str
    nonce: str
    bare: str
    extensions: dict[str, str]


@dataclass(frozen=True, slots=True)
class ClientFinal:
    """A parsed client-final message."""

    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str


def _text(token: bytes, what: str) -> str:
    if len(token) > MAX_TOKEN:
        raise AuthenticationFailed(f"SCRAM {what} message longer than {MAX_TOKEN} bytes")
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed(f"SCRAM {what} message is not UTF-8") from None


def _attributes(parts: list[str], what: str) -> list[tuple[str, str]]:
    # RFC 5802 attributes are one letter; Kafka's extensions may be longer (ALPHA+).
    result: list[tuple[str, str]] = []
    for part in parts:
        name, sep, value = part.partition("=")
        if not sep or not name or not (name.isascii() and name.isalpha()):
            raise AuthenticationFailed(f"SCRAM {what} message has a malformed attribute")
        result.append((name, value))
    return result


def decode_saslname(value: str) -> str:
    """Undo RFC 5802's escaping of ``,`` (``=2C``) and ``=`` (``=3D``) in a user name."""
    out: list[str] = []
    i = 0
    while i < len(value):
        char = value[i]
        if char == ",":
            raise AuthenticationFailed("SCRAM user name holds an unescaped ','")
        if char == "=":
            escape = value[i : i + 3]
            if escape == "=2C":
                out.append(",")
            elif escape == "=3D":
                out.append("=")
            else:
                raise AuthenticationFailed("SCRAM user name holds a bad '=' escape")
            i += 3
            continue
        out.append(char)
        i += 1
    return "".join(out)


def encode_saslname(name: str) -> str:
    """RFC 5802's escaping of a user name (``=`` first, then ``,``)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def _printable(value: str) -> bool:
    return bool(value) and all("\x21" <= ch <= "\x7e" and ch != "," for ch in value)


def parse_client_first(token: bytes) -> ClientFirst:
    """Read a client-first message; :class:`AuthenticationFailed` if it is not one Kafka accepts."""
    text = _text(token, "client-first")
    parts = text.split(",")
    if len(parts) < 4 or parts[0] != "n":
        raise AuthenticationFailed("SCRAM client-first message must start with 'n,' (no channel binding)")
    authzid = ""
    if parts[1]:
        if not parts[1].startswith("a="):
            raise AuthenticationFailed("SCRAM client-first message has a malformed gs2 header")
        authzid = decode_saslname(parts[1][2:])
    attrs = _attributes(parts[2:], "client-first")
    if attrs[0][0] == "m":
        raise AuthenticationFailed("SCRAM mandatory extensions are not supported")
    if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
        raise AuthenticationFailed("SCRAM client-first message must carry n= then r=")
    username = decode_saslname(attrs[0][1])
    nonce = attrs[1][1]
    if not username:
        raise AuthenticationFailed("SCRAM user name is empty")
    if not _printable(nonce):
        raise AuthenticationFailed("SCRAM client nonce is empty or not printable")
    if authzid and authzid != username:
        raise AuthenticationFailed("SCRAM authorization id differs from the user name")
    extensions = dict(attrs[2:])
    return ClientFirst(f"{parts[0]},{parts[1]},", username, nonce, ",".join(parts[2:]), extensions)


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise AuthenticationFailed(f"SCRAM {what} is not base64") from None


def parse_client_final(token: bytes) -> ClientFinal:
    """Read a client-final message (the proof must be the last attribute)."""
    text = _text(token, "client-final")
    head, sep, proof = text.rpartition(",p=")
    if not sep:
        raise AuthenticationFailed("SCRAM client-final message carries no proof")
    attrs = _attributes(head.split(","), "client-final")
    if len(attrs) < 2 or attrs[0][0] != "c" or attrs[1][0] != "r":
        raise AuthenticationFailed("SCRAM client-final message must carry c= then r=")
    return ClientFinal(_b64(attrs[0][1], "channel binding"), attrs[1][1], _b64(proof, "proof"), head)


# -- the server ------------------------------------------------------------------------

#: Keys the fake salts of unknown users (per process: only consistency within one matters).
_FAKE_SECRET = secrets.token_bytes(32)

CredentialLookup = Callable[[str], "ScramCredential | None"]


class ScramServer:
    """One SCRAM exchange, server side: :meth:`receive` a client token, get the answer.

    ``lookup`` returns the user's credential for this mechanism or ``None``; ``nonce``
    fixes the server nonce (tests with RFC vectors), else a random one is drawn.
    ``nonce_check`` is ``"kafka"`` (Kafka 3.9's suffix rule, the default) or ``"strict"``
    (RFC 5802, Kafka 4.x). After a successful login, :attr:`deviations` names what the
    login needed beyond RFC 5802 (``("scram-nonce-suffix",)`` or ``()``).
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: CredentialLookup,
        *,
        nonce: str | None = None,
        nonce_check: NonceCheck = "kafka",
    ) -> None:
        if nonce_check not in NONCE_CHECKS:
            raise ValueError(f"nonce_check must be one of {NONCE_CHECKS}, not {nonce_check!r}")
        self.mechanism = mechanism
        self.nonce_check = nonce_check
        self.deviations: tuple[str, ...] = ()
        self._lookup = lookup
        self._server_nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self._known = False
        self.username: str | None = None
        self.complete = False
        self._failed = False

    def receive(self, token: bytes) -> bytes:
        """The answer to one client token; raises :class:`AuthenticationFailed` (then final)."""
        if self._failed or self.complete:
            raise AuthenticationFailed("SCRAM exchange already ended")
        try:
            if self._first is None:
                return self._on_first(token)
            return self._on_final(token)
        except AuthenticationFailed:
            self._failed = True
            self._forget()
            raise

    def _on_first(self, token: bytes) -> bytes:
        first = parse_client_first(token)
        if first.extensions.get("tokenauth", "").lower() == "true":
            raise AuthenticationFailed("SCRAM delegation tokens are not supported")
        credential = self._lookup(first.username)
        self._known = credential is not None and MIN_ITERATIONS <= credential.iterations <= MAX_ITERATIONS
        if credential is None or not self._known:
            credential = self._fake(first.username)
        self._first, self._credential = first, credential
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={first.nonce}{self._server_nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode("ascii")

    def _on_final(self, token: bytes) -> bytes:
        first, credential = self._first, self._credential
        assert first is not None and credential is not None
        final = parse_client_final(token)
        if final.channel_binding != first.gs2_header.encode("utf-8"):
            raise AuthenticationFailed("SCRAM channel binding does not match the gs2 header")
        expected = first.nonce + self._server_nonce
        deviations: tuple[str, ...] = ()
        if final.nonce != expected:
            if self.nonce_check == "strict" or not final.nonce.endswith(expected):
                raise AuthenticationFailed("SCRAM nonce does not match")
            deviations = (NONCE_SUFFIX,)
        if len(final.proof) != self.mechanism.digest_size:
            raise AuthenticationFailed("SCRAM proof has the wrong length")
        auth_message = f"{first.bare},{self._server_first},{final.without_proof}".encode()
        signature = self.mechanism.hmac(credential.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(final.proof, signature, strict=True))
        valid = hmac.compare_digest(self.mechanism.hash(client_key), credential.stored_key)
        if not (valid and self._known):
            raise AuthenticationFailed("SCRAM proof does not verify")
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        self.username = first.username
        self.deviations = deviations
        self.complete = True
        self._forget()
        return b"v=" + base64.b64encode(server_signature)

    def _fake(self, username: str) -> ScramCredential:
        # Same shape as a real answer, stable per name: the proof then fails like a wrong password.
        salt = self.mechanism.hmac(_FAKE_SECRET, username.encode("utf-8"))[:24]
        return ScramCredential(salt, secrets.token_bytes(self.mechanism.digest_size), b"", DEFAULT_ITERATIONS)

    def _forget(self) -> None:
        self._credential = None


class ScramClient:
    """The client side (the control connection's login, and tests): :meth:`first`, then
    :meth:`respond` to each server message (``None`` once the server's signature checks)."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str, *, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._password = password
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24)
        self._bare = f"n={encode_saslname(username)},r={self._nonce}"
        self._expected_signature: bytes | None = None

    def first(self) -> bytes:
        """The client-first message."""
        return f"n,,{self._bare}".encode()

    def respond(self, server_message: bytes) -> bytes | None:
        """The client-final message for server-first; ``None`` after a valid server-final."""
        if self._expected_signature is not None:
            expected = b"v=" + base64.b64encode(self._expected_signature)
            if not hmac.compare_digest(server_message, expected):
                raise AuthenticationFailed("SCRAM server signature does not verify")
            return None
        text = _text(server_message, "server-first")
        attrs = dict(_attributes(text.split(","), "server-first"))
        nonce, salt_text, count = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or not count.isdigit():
            raise AuthenticationFailed("SCRAM server-first message is malformed")
        salted = salted_password(self.mechanism, self._password, _b64(salt_text, "salt"), int(count))
        self._password = ""
        client_key = self.mechanism.hmac(salted, b"Client Key")
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        signature = self.mechanism.hmac(self.mechanism.hash(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._expected_signature = self.mechanism.hmac(self.mechanism.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode()
