"""Differential tests against kafka-python 3.x, an independent implementation of the same specs.

kafka-python builds its message classes from its own copy of Kafka's JSON specs with its own
codecs (``kafka/protocol/api_message.py``, ``schemas/fields/``). For every API and version it
implements (it sets every minimum version to 0; we test the versions both sides parse):

* a random message built by kafka-python and encoded by it decodes, with ours, to the same
  field values;
* ours encodes a random message to bytes that kafka-python decodes to the same values
  (unknown tags included: kafka-python keeps them as ``_<tag>``).

Representation differences are mapped explicitly, nothing is skipped: kafka-python reads a zero
UUID as ``None``, some int32 bitfields as sets of bit numbers (``json_patch``), and an absent
tagged struct as ``None`` where we give the struct of its defaults. Two kafka-python
limitations shape the generated values: it reads the tagged section inside a tagged field's
value as empty (so those stay empty), and ApiVersionsResponse with an error is read as v0
(so its ErrorCode is 0 above v0).
"""

from __future__ import annotations

import importlib
import io
import pkgutil
import uuid
import warnings
from typing import Any

import construct as c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.apis import DEFAULT_REGISTRY
from protocol.headers import decode_request_header, encode_request_header
from protocol.primitives import UNKNOWN_TAGS_KEY
from protocol.schema import decode, encode, field_default
from protocol.spec import FieldSpec, MessageSpec
from tests.protocol.strategies import Mode, message_values, plain

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol as kp
    from kafka.protocol.api_header import RequestHeader as KpRequestHeader
    from kafka.protocol.api_header import ResponseHeader as KpResponseHeader
    from kafka.protocol.api_message import ApiMessage
    from kafka.protocol.schemas.fields.base import BaseField
    from kafka.protocol.schemas.fields.codecs import BitField

    for _module in pkgutil.walk_packages(kp.__path__, "kafka.protocol."):
        if ".old" not in _module.name and "generate_stubs" not in _module.name:
            importlib.import_module(_module.name)

INT32_MIN = -(1 << 31)
ZERO_UUID = uuid.UUID(int=0)


def _kafka_python_classes() -> dict[tuple[int, str], Any]:
    found: dict[tuple[int, str], Any] = {}
    stack = list(ApiMessage.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None and getattr(cls, "_json", None):
            found[(cls.API_KEY, cls.type)] = cls
    return found


KP_CLASSES = _kafka_python_classes()


def _cases() -> list[Any]:
    cases = []
    for (key, kind), cls in sorted(KP_CLASSES.items()):
        api = DEFAULT_REGISTRY.api(key)
        spec = api.request if kind == "request" else api.response
        assert api.versions.hi is not None
        for version in range(api.versions.lo, min(api.versions.hi, cls.max_version) + 1):
            cases.append(pytest.param(spec, cls, version, id=f"{spec.name}-v{version}"))
    return cases


CASES = _cases()
EXAMPLES = max(3, settings().max_examples // 33)
KP_MODE = Mode(unknown=False, inner_tags=False)
#: Ours -> kafka-python: kafka-python keeps unknown tags, except inside tagged values.
OURS_MODE = Mode(unknown=True, inner_tags=False)


# --------------------------------------------------------------------------- mapping


def _pairs(kp_struct: Any, fields: tuple[FieldSpec, ...]) -> list[tuple[Any, FieldSpec]]:
    """kafka-python's fields matched to ours by name (bitfields, which json_patch renames, in order).

    kafka-python's specs are Kafka 4.3's, ours 4.1's: fields that only versions after 4.1's
    newest have (WriteTxnMarkers ``TransactionVersion`` v2+, ...) are left out; the cases
    stop at our newest version, so kafka-python never writes them. Names, not positions:
    fields of disjoint versions may be declared in another order (DescribeConfigs v0's
    ``IsDefault``, put back from Kafka 3.9's spec).
    """
    theirs = kp_struct._fields or ()
    by_name = {kpf.name: kpf for kpf in theirs if kpf.type_str != "bitfield"}
    bitfields = [kpf for kpf in theirs if kpf.type_str == "bitfield"]
    pairs = []
    for ours in fields:
        kpf = by_name.get(BaseField.underscore_name(ours.name))
        if kpf is None:
            assert bitfields, (kp_struct.name, ours.name)
            kpf = bitfields.pop(0)
        pairs.append((kpf, ours))
    assert not bitfields, (kp_struct.name, [f.name for f in fields])
    return pairs


def _is_bitfield(kpf: Any) -> bool:
    return getattr(kpf, "_type_str", None) == "bitfield"


def to_kafka_python(kp_struct: Any, fields: tuple[FieldSpec, ...], value: Any, version: int) -> Any:
    """Our container as an instance of kafka-python's data class for ``kp_struct``."""
    kwargs: dict[str, Any] = {}
    for kpf, ours in _pairs(kp_struct, fields):
        if not ours.present_in(version):
            continue
        kwargs[kpf.name] = _to_kp_value(kpf, ours, value[ours.name], version)
    for tag, raw in value.get(UNKNOWN_TAGS_KEY, ()):
        kwargs[f"_{tag}"] = raw
    return kp_struct.data_class(version=version, **kwargs)


def _to_kp_value(kpf: Any, ours: FieldSpec, value: Any, version: int) -> Any:
    if ours.is_struct:
        if value is None:
            return None
        if ours.is_array:
            return [to_kafka_python(kpf.array_of, ours.fields, v, version) for v in value]
        if ours.tagged_in(version) and plain(value) == plain(field_default(ours, version)):
            return None  # kafka-python's default for a tagged struct
        return to_kafka_python(kpf, ours.fields, value, version)
    if _is_bitfield(kpf):
        return BitField.from_32_bit_field(value & 0xFFFFFFFF)
    return value


def from_kafka_python(obj: Any, kp_struct: Any, fields: tuple[FieldSpec, ...], version: int) -> Any:
    """A kafka-python data object in our plain form (for comparison with :func:`plain`)."""
    out: dict[str, Any] = {}
    for kpf, ours in _pairs(kp_struct, fields):
        if ours.present_in(version):
            out[ours.name] = _from_kp_value(getattr(obj, kpf.name), kpf, ours, version)
    unknown = getattr(obj, "unknown_tags", None)
    if unknown:
        out[UNKNOWN_TAGS_KEY] = sorted([int(k[1:]), bytes(v)] for k, v in unknown.items())
    return out


def _from_kp_value(value: Any, kpf: Any, ours: FieldSpec, version: int) -> Any:
    if ours.is_struct:
        if value is None:
            if ours.tagged_in(version) and version not in ours.nullable:
                return plain(field_default(ours, version))
            return None
        if ours.is_array:
            return [from_kafka_python(v, kpf.array_of, ours.fields, version) for v in value]
        return from_kafka_python(value, kpf, ours.fields, version)
    if _is_bitfield(kpf):
        if value is None:
            return INT32_MIN
        bits = BitField.to_32_bit_field(value)
        return bits - (1 << 32) if bits & 0x80000000 else bits
    if ours.element_type == "uuid" and value is None:
        return ZERO_UUID
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, list):
        return [bytes(v) if isinstance(v, memoryview) else v for v in value]
    return value


def _kafka_python_compatible(spec: MessageSpec, version: int, value: c.Container) -> c.Container:
    if spec.name == "ApiVersionsResponse" and version > 0:
        value = c.Container(value)
        value["ErrorCode"] = 0  # kafka-python reads an errored response as v0
    return value


# --------------------------------------------------------------------------- tests


def test_kafka_python_implements_the_core_apis() -> None:
    keys = {key for key, _kind in KP_CLASSES}
    assert {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 36} <= keys
    assert len(CASES) > 400


@pytest.mark.parametrize(("spec", "cls", "version"), CASES)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_kafka_python_encodes_we_decode(
    spec: MessageSpec, cls: Any, version: int, data: st.DataObject
) -> None:
    value = _kafka_python_compatible(
        spec, version, data.draw(message_values(spec, version, KP_MODE))
    )
    message = to_kafka_python(cls._struct, spec.fields, value, version)
    wire = message.encode(version=version)
    assert plain(decode(spec, version, wire)) == plain(value)


@pytest.mark.parametrize(("spec", "cls", "version"), CASES)
@settings(max_examples=EXAMPLES)
@given(data=st.data())
def test_we_encode_kafka_python_decodes(
    spec: MessageSpec, cls: Any, version: int, data: st.DataObject
) -> None:
    value = _kafka_python_compatible(
        spec, version, data.draw(message_values(spec, version, OURS_MODE))
    )
    wire = encode(spec, version, value)
    theirs = cls.decode(wire, version=version)
    assert from_kafka_python(theirs, cls._struct, spec.fields, version) == plain(value)


@settings(max_examples=50)
@given(
    api_version=st.integers(0, 0x7FFF),
    correlation_id=st.integers(-(1 << 31), (1 << 31) - 1),
    client_id=st.none() | st.text(max_size=20),
    flexible=st.booleans(),
)
def test_request_header_matches_kafka_python(
    api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> None:
    # Metadata: v9+ is flexible (header v2), v0-8 is not (header v1).
    version = (9 if flexible else 1) if api_version > 12 else api_version
    header_version = 2 if version >= 9 else 1
    theirs = KpRequestHeader(
        request_api_key=3,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    ).encode(flexible=header_version == 2)
    ours = encode_request_header(3, version, correlation_id, client_id, header_version)
    assert ours == theirs
    decoded = decode_request_header(theirs + b"body")
    assert (decoded.correlation_id, decoded.client_id, decoded.size) == (
        correlation_id,
        client_id,
        len(theirs),
    )
    back = KpRequestHeader.decode(io.BytesIO(ours), flexible=header_version == 2)
    assert (back.correlation_id, back.client_id) == (correlation_id, client_id)


@settings(max_examples=20)
@given(correlation_id=st.integers(-(1 << 31), (1 << 31) - 1), flexible=st.booleans())
def test_response_header_matches_kafka_python(correlation_id: int, flexible: bool) -> None:
    from protocol.headers import decode_response_header, encode_response_header

    theirs = KpResponseHeader(correlation_id=correlation_id).encode(flexible=flexible)
    assert encode_response_header(correlation_id, int(flexible)) == theirs
    assert decode_response_header(theirs, int(flexible)) == (correlation_id, len(theirs))
