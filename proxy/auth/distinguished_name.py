"""A certificate's subject as Kafka sees it: Java's ``X500Principal.getName()``, sans-IO.

Kafka's SSL principal is built from ``SSLSession.getPeerPrincipal().getName()``: the
subject in the RFC 2253 form of ``sun.security.x509.X500Name.getRFC2253Name()``. The mapping
rules (:mod:`proxy.auth.principal_mapping`) are regular expressions over that exact string,
so it has to be reproduced character for character, not approximated:

* RDNs from the *last* of the DER sequence to the first (``CN=alice,OU=eng,O=Acme`` for a
  certificate whose subject was written O, OU, CN), joined by ``,``; the values of a
  multi-valued RDN joined by ``+`` in the order the DER SET holds them.
* Keywords only for the nine attribute types RFC 2253 names (``CN C L ST O OU STREET DC
  UID``); any other type (``emailAddress``, ``serialNumber``, ``title``...) is written as its
  dotted OID, and its value as ``#`` followed by the lowercase hex of the value's whole DER
  encoding (tag and length included): ``1.2.840.113549.1.9.1=#1611...``.
* A value of a non-string ASN.1 type is written in hex the same way.
* Escaping (Java's ``AVA.toRFC2253String``, not plain RFC 4514): each of ``, = + < > # ; " \\``
  anywhere in the value gets a backslash; NUL becomes ``\\00``; leading and trailing spaces
  (and carriage returns) get a backslash; every other character, non-ASCII included, is
  written as it is.

Why not Python's ``ssl.getpeercert()``: its nested tuples lose the ASN.1 string type and the
raw bytes the OID-typed attributes need. Why not ``cryptography``'s
``Name.rfc4514_string()``: it is RFC 4514 (different escaping, other keywords such as
``emailAddress``). So this module reads the DER of the certificate
(``getpeercert(binary_form=True)``) itself: a certificate is a few nested TLVs.
"""

from __future__ import annotations

__all__ = ["CertificateError", "name_dn", "subject_dn"]


class CertificateError(ValueError):
    """The certificate's DER cannot be read as far as its subject (the peer's fault)."""


#: Attribute types RFC 2253 gives a keyword (Java's ``AVAKeyword`` with rfc2253Compliant).
_KEYWORDS = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}

#: DER string tags Java writes as text (``AVA.isDerString(value, false)``) and how it
#: decodes them (``DerValue.getAsString``). UniversalString is not among them: hex.
_STRING_TAGS = {
    0x0C: "utf-8",  # UTF8String
    0x13: "ascii",  # PrintableString
    0x14: "latin-1",  # T61String (Java reads it as ISO-8859-1)
    0x16: "ascii",  # IA5String
    0x1B: "ascii",  # GeneralString
    0x1E: "utf-16-be",  # BMPString
}

#: Characters Java escapes with a backslash wherever they are (RFC 2253's set, plus ``=``
#: and ``#`` anywhere, which RFC 2253 allows).
_ESCAPED = frozenset(',=+<>#;"\\')

_SEQUENCE, _SET, _OID, _CONTEXT_0 = 0x30, 0x31, 0x06, 0xA0


def _tlv(data: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """The TLV at ``pos``: ``(tag, content start, content end)``, bounded by ``end``."""
    if pos + 2 > end:
        raise CertificateError("truncated DER")
    tag = data[pos]
    if tag & 0x1F == 0x1F:
        raise CertificateError("high-tag-number DER form in a name")
    length = data[pos + 1]
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 4 or pos + count > end:
            raise CertificateError("bad DER length")
        length = int.from_bytes(data[pos : pos + count], "big")
        pos += count
    if pos + length > end:
        raise CertificateError("DER value runs past its container")
    return tag, pos, pos + length


def _expect(data: bytes, pos: int, end: int, tag: int) -> tuple[int, int]:
    found, start, stop = _tlv(data, pos, end)
    if found != tag:
        raise CertificateError(f"expected DER tag 0x{tag:02x}, found 0x{found:02x}")
    return start, stop


def _oid(content: bytes) -> str:
    if not content:
        raise CertificateError("empty OID")
    arcs: list[int] = []
    value = 0
    for byte in content:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if content[-1] & 0x80:
        raise CertificateError("truncated OID")
    first = min(arcs[0] // 40, 2)
    return ".".join(str(a) for a in [first, arcs[0] - 40 * first, *arcs[1:]])


def _escape(text: str) -> str:
    out: list[str] = []
    for char in text:
        if char in _ESCAPED:
            out.append("\\" + char)
        elif char == "\0":
            out.append("\\00")
        else:
            out.append(char)
    chars = "".join(out)
    # Leading and trailing blanks of the escaped text (Java looks for ' ' and '\r').
    lead = 0
    while lead < len(chars) and chars[lead] in " \r":
        lead += 1
    trail = len(chars) - 1
    while trail >= 0 and chars[trail] in " \r":
        trail -= 1
    return "".join("\\" + c if i < lead or i > trail else c for i, c in enumerate(chars))


def _attribute(data: bytes, start: int, end: int) -> str:
    """One AttributeTypeAndValue (the SEQUENCE's content) as ``type=value``."""
    oid_start, oid_end = _expect(data, start, end, _OID)
    oid = _oid(data[oid_start:oid_end])
    tag, value_start, value_end = _tlv(data, oid_end, end)
    if value_end != end:
        raise CertificateError("trailing bytes after an attribute value")
    keyword = _KEYWORDS.get(oid)
    encoding = _STRING_TAGS.get(tag)
    if keyword is None or encoding is None:
        return f"{keyword or oid}=#{data[oid_end:value_end].hex()}"
    return f"{keyword}={_escape(data[value_start:value_end].decode(encoding, errors='replace'))}"


def name_dn(der: bytes) -> str:
    """The RFC 2253 string (Java's) of a DER-encoded X.501 ``Name``."""
    start, end = _expect(der, 0, len(der), _SEQUENCE)
    rdns: list[str] = []
    pos = start
    while pos < end:
        set_start, set_end = _expect(der, pos, end, _SET)
        values: list[str] = []
        inner = set_start
        while inner < set_end:
            seq_start, seq_end = _expect(der, inner, set_end, _SEQUENCE)
            values.append(_attribute(der, seq_start, seq_end))
            inner = seq_end
        if not values:
            raise CertificateError("empty RDN")
        rdns.append("+".join(values))
        pos = set_end
    return ",".join(reversed(rdns))


def subject_dn(certificate: bytes) -> str:
    """The subject of a DER X.509 certificate, as Java's ``X500Principal.getName()``.

    Raises :class:`CertificateError` when the DER does not read as far as the subject.
    """
    cert_start, cert_end = _expect(certificate, 0, len(certificate), _SEQUENCE)
    tbs_start, tbs_end = _expect(certificate, cert_start, cert_end, _SEQUENCE)
    pos = tbs_start
    tag, _, stop = _tlv(certificate, pos, tbs_end)
    if tag == _CONTEXT_0:  # [0] version
        pos = stop
    # serialNumber, signature, issuer, validity, then the subject.
    for _ in range(4):
        _, _, pos = _tlv(certificate, pos, tbs_end)
    tag, _, subject_end = _tlv(certificate, pos, tbs_end)
    if tag != _SEQUENCE:
        raise CertificateError("the certificate's subject is not a Name")
    return name_dn(certificate[pos:subject_end])

