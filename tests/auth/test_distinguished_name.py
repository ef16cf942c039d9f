"""A certificate's subject in Java's RFC 2253 form (``X500Principal.getName()``).

Names are built here byte by byte (a DER TLV helper) or with the ``cryptography`` package;
every expected string is written out by hand from Java's rules.
"""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from proxy.auth.distinguished_name import CertificateError, name_dn, subject_dn

CN, OU, ORG, C, SERIAL = b"\x55\x04\x03", b"\x55\x04\x0b", b"\x55\x04\x0a", b"\x55\x04\x06", b"\x55\x04\x05"
DC = bytes.fromhex("0992268993f22c640119")  # 0.9.2342.19200300.100.1.25
EMAIL = bytes.fromhex("2a864886f70d010901")  # 1.2.840.113549.1.9.1
UTF8, PRINTABLE, IA5, BMP, INTEGER = 0x0C, 0x13, 0x16, 0x1E, 0x02


def tlv(tag: int, content: bytes) -> bytes:
    length = len(content)
    head = bytes([length]) if length < 128 else bytes([0x81, length])
    return bytes([tag]) + head + content


def ava(oid: bytes, value: bytes, tag: int = UTF8) -> bytes:
    return tlv(0x30, tlv(0x06, oid) + tlv(tag, value))


def name(*rdns: bytes | tuple[bytes, ...]) -> bytes:
    """A Name from RDNs in DER order; a tuple is one multi-valued RDN."""
    sets = b"".join(tlv(0x31, b"".join(r) if isinstance(r, tuple) else r) for r in rdns)
    return tlv(0x30, sets)


def test_order_is_reversed_from_the_der_sequence() -> None:
    der = name(ava(C, b"US", PRINTABLE), ava(ORG, b"Acme"), ava(OU, b"eng"), ava(CN, b"alice"))
    assert name_dn(der) == "CN=alice,OU=eng,O=Acme,C=US"


@pytest.mark.parametrize(("value", "expected"), [
    ("a,b+c", r"CN=a\,b\+c"),
    ('q"<x>;y', r'CN=q\"\<x\>\;y'),
    ("x=y#z", r"CN=x\=y\#z"),  # Java escapes = and # anywhere
    (r"back\slash", r"CN=back\\slash"),
    (" lead", r"CN=\ lead"),
    ("trail  ", "CN=trail\\ \\ "),
    ("in side", "CN=in side"),
    ("nul\0x", r"CN=nul\00x"),
    ("Zoë 東京", "CN=Zoë 東京"),  # non-ASCII as it is, not \c3\ab
])
def test_escaping(value: str, expected: str) -> None:
    assert name_dn(name(ava(CN, value.encode()))) == expected


def test_string_types() -> None:
    assert name_dn(name(ava(CN, "é".encode("utf-16-be"), BMP))) == "CN=é"
    assert name_dn(name(ava(CN, b"ia5", IA5))) == "CN=ia5"
    assert name_dn(name(ava(DC, b"example", IA5), ava(CN, b"x"))) == "CN=x,DC=example"


def test_types_without_an_rfc2253_keyword_are_oids_with_hex_values() -> None:
    # emailAddress (IA5 "a@b"): 16 03 61 40 62; serialNumber (Printable "42"): 13 02 34 32.
    der = name(ava(CN, b"alice"), ava(EMAIL, b"a@b", IA5), ava(SERIAL, b"42", PRINTABLE))
    assert name_dn(der) == "2.5.4.5=#13023432,1.2.840.113549.1.9.1=#1603614062,CN=alice"
    # A keyword type whose value is not a string: hex too.
    assert name_dn(name(ava(CN, b"\x07", INTEGER))) == "CN=#020107"


def test_multi_valued_rdn_keeps_the_sets_order() -> None:
    assert name_dn(name(ava(ORG, b"Acme"), (ava(CN, b"x"), ava(OU, b"y")))) == "CN=x+OU=y,O=Acme"


def test_empty_name_and_long_lengths() -> None:
    assert name_dn(name()) == ""
    assert name_dn(name(ava(CN, b"a" * 200))) == "CN=" + "a" * 200


@pytest.mark.parametrize("der", [b"", b"\x30", b"\x30\x05\x31\x03", b"\x31\x00", b"\x30\x02\x31\x00"])
def test_broken_der_is_refused(der: bytes) -> None:
    with pytest.raises(CertificateError):
        name_dn(der)


def certificate() -> x509.Certificate:
    """A self-signed certificate whose subject was written O=Acme, OU=eng, CN=alice."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
        x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
    ])
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test CA, Inc.")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    return cert


def test_subject_of_a_real_certificate() -> None:
    der = certificate().public_bytes(serialization.Encoding.DER)
    assert subject_dn(der) == "CN=alice,OU=eng,O=Acme"
    with pytest.raises(CertificateError):
        subject_dn(der[:40])
