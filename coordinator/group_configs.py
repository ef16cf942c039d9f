"""GROUP-resource configs (KIP-848's and KIP-932's group configs), as Kafka 4.2 has them.

**Theory of operation.** A group's configs are *overrides*: a map of key to the string a
client set, stored as given (Kafka's ``ConfigRecord`` keeps the raw value). Everything
else is computed from the overrides and the broker-level ``group.*`` keys
(:class:`BrokerGroupSettings`, built by the shell from the sidecar's own configuration):

* :func:`alter_group_configs` answers one GROUP resource of an IncrementalAlterConfigs:
  the new overrides to store, or the error code and message Kafka answers with;
* :func:`describe_group_configs` answers one GROUP resource of a DescribeConfigs;
* :func:`effective_group_config` gives the values a coordinator uses for one group;
* :func:`encode_group_configs` / :func:`decode_group_configs` are the stored form,
  ``/config/groups/<group>`` (:func:`coordinator.paths.group_config_path`).

Nothing here does I/O or keeps state; the shell reads the overrides, calls a function,
and writes what it returns.

**Where each rule comes from** (Apache Kafka 4.2.1, commit ``18d5ecd9``):

* the keys, types, defaults and per-key ranges: ``GroupConfig.java`` (its ``ConfigDef``),
  the defaults' broker keys ``GroupCoordinatorConfig.java`` and
  ``modern/share/ShareGroupConfig.java``;
* the checks against the broker's min/max keys and their messages:
  ``GroupConfig.validateValues``, reached through ``GroupConfigManager.validate`` (which
  fills only the two ``consumer.*`` keys from the broker's values before checking; the
  other keys fall back to Kafka's built-in defaults there, see :data:`KEYS`);
* the request rules: ``ConfigAdminManager.preprocess`` (the broker: duplicate keys, null
  values), ``ControllerApis.handleIncrementalAlterConfigs`` and
  ``ConfigurationControlManager.incrementalAlterConfigResource`` / ``validateAlterConfig``
  (the controller: SET, DELETE, APPEND and SUBTRACT, the value size, what is written),
  ``ControllerConfigurationValidator`` (an empty group name);
* the description: ``ConfigHelper.describeConfigs`` and ``createGroupConfigEntry``,
  ``ConfigHelperUtils.createResponseConfig``;
* the effective values: ``GroupConfigManager.updateGroupConfig`` and
  ``GroupMetadataManager``'s ``consumerGroupSessionTimeoutMs(groupId)`` and siblings.

Where Kafka's answer depends on the iteration order of a Java hash map (which of several
unknown keys or APPEND keys an error names, the order of a description's entries), the
order is reproduced from Java's ``String.hashCode`` and table sizes (:func:`_java_order`):
exactly, but for two unknown keys in one hash slot of a resource with 12 or more keys,
whose order a resize of Kafka's intermediate ``ConcurrentHashMap`` may reverse.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import TypeVar

from coordinator.errors import Code
from protocol.errors import ErrorCode

#: ``INVALID_CONFIG`` (``Errors.java``, 40): every value a group config refuses.
INVALID_CONFIG = ErrorCode.INVALID_CONFIG

#: ``ConfigResource.Type.GROUP``: the resource type byte of a group's configs.
RESOURCE_TYPE_GROUP = 32

#: ``ConfigurationControlManager``: no stored value may be longer (in UTF-16 units).
MAX_VALUE_LENGTH = 32_767

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_NANOS = 1_000_000_000

T = TypeVar("T")


class ConfigType(IntEnum):
    """DescribeConfigs v3+ ``ConfigType`` (``DescribeConfigsResponse.ConfigType``)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """DescribeConfigs v1+ ``ConfigSource`` (``DescribeConfigsResponse.ConfigSource``).

    ``GROUP_CONFIG`` is the admin client's ``DYNAMIC_GROUP_CONFIG``."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class AlterOp(IntEnum):
    """IncrementalAlterConfigs ``ConfigOperation`` (``AlterConfigOp.OpType``)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


# -- the broker-level keys -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class BrokerGroupSettings:
    """The broker-level ``group.*`` keys that group configs fall back to and are bounded by.

    Each field is the Kafka key without its ``group.`` prefix, dots as underscores
    (``consumer_session_timeout_ms`` is ``group.consumer.session.timeout.ms``), with
    Kafka's default. The shell builds one from the sidecar's configuration; the checks
    below are the broker's own at startup (``GroupCoordinatorConfig``, ``ShareGroupConfig``).
    """

    consumer_session_timeout_ms: int = 45_000
    consumer_min_session_timeout_ms: int = 45_000
    consumer_max_session_timeout_ms: int = 60_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_min_heartbeat_interval_ms: int = 5_000
    consumer_max_heartbeat_interval_ms: int = 15_000
    share_session_timeout_ms: int = 45_000
    share_min_session_timeout_ms: int = 45_000
    share_max_session_timeout_ms: int = 60_000
    share_heartbeat_interval_ms: int = 5_000
    share_min_heartbeat_interval_ms: int = 5_000
    share_max_heartbeat_interval_ms: int = 15_000
    share_record_lock_duration_ms: int = 30_000
    share_min_record_lock_duration_ms: int = 15_000
    share_max_record_lock_duration_ms: int = 60_000
    streams_session_timeout_ms: int = 45_000
    streams_min_session_timeout_ms: int = 45_000
    streams_max_session_timeout_ms: int = 60_000
    streams_heartbeat_interval_ms: int = 5_000
    streams_min_heartbeat_interval_ms: int = 5_000
    streams_max_heartbeat_interval_ms: int = 15_000
    streams_num_standby_replicas: int = 0
    streams_max_standby_replicas: int = 2
    streams_initial_rebalance_delay_ms: int = 3_000

    def __post_init__(self) -> None:
        for f in fields(self):
            value, key = getattr(self, f.name), "group." + f.name.replace("_", ".")
            low, high = _BROKER_RANGES.get(f.name, (1, _INT32_MAX))
            if not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{key} must be an integer in [{low}, {high}]")
        for kind, what in (("consumer", "heartbeat_interval_ms"), ("consumer", "session_timeout_ms"),
                           ("share", "heartbeat_interval_ms"), ("share", "session_timeout_ms"),
                           ("share", "record_lock_duration_ms"), ("streams", "heartbeat_interval_ms"),
                           ("streams", "session_timeout_ms")):
            low, value, high = (getattr(self, f"{kind}_{m}{what}") for m in ("min_", "", "max_"))
            if not low <= value <= high:
                name = what.replace("_", ".")
                raise ValueError(f"group.{kind}.{name} must lie within group.{kind}.min.{name} "
                                 f"and group.{kind}.max.{name}")
        for kind in ("consumer", "share", "streams"):
            if getattr(self, f"{kind}_heartbeat_interval_ms") >= getattr(self, f"{kind}_session_timeout_ms"):
                raise ValueError(f"group.{kind}.heartbeat.interval.ms must be less than "
                                 f"group.{kind}.session.timeout.ms")
        if self.streams_num_standby_replicas > self.streams_max_standby_replicas:
            raise ValueError("group.streams.num.standby.replicas must be less than or equal to "
                             "group.streams.max.standby.replicas")


#: The ``ConfigDef`` ranges of the broker keys that are not ``atLeast(1)``.
_BROKER_RANGES = {
    "share_record_lock_duration_ms": (1000, 3_600_000),
    "share_min_record_lock_duration_ms": (1000, 30_000),
    "share_max_record_lock_duration_ms": (30_000, 3_600_000),
    "streams_num_standby_replicas": (0, _INT32_MAX),
    "streams_max_standby_replicas": (0, _INT32_MAX),
    "streams_initial_rebalance_delay_ms": (0, _INT32_MAX),
}


# -- the keys --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupConfigKey:
    """One group config key, as ``GroupConfig``'s ``ConfigDef`` defines it."""

    name: str
    type: ConfigType
    #: Kafka's built-in default (the ``ConfigDef`` default).
    default: int | str
    #: The ``BrokerGroupSettings`` field a group without this override uses, if any.
    broker: str | None
    #: ``Range.atLeast`` of the ``ConfigDef`` (ints only).
    at_least: int | None
    documentation: str
    #: Whether ``GroupConfigManager.validate`` fills it from the broker's value before
    #: checking (only the two consumer keys in 4.2); the others are checked against the
    #: built-in default when not overridden.
    validated_with_broker_value: bool = False
    #: Whether a described or effective value falls back to the broker's value (the keys
    #: of ``GroupCoordinatorConfig.extractGroupConfigMap``: consumer and share keys).
    described_with_broker_value: bool = False


_AUTO_OFFSET_RESET_DOC = (
    "The strategy to initialize the share-partition start offset. "
    "<ul><li>earliest: automatically reset the offset to the earliest offset</li>"
    "<li>latest: automatically reset the offset to the latest offset</li>"
    "<li>by_duration:&lt;duration&gt;: automatically reset the offset to a configured duration "
    "from the current timestamp. &lt;duration&gt; must be specified in ISO8601 format "
    "(PnDTnHnMn.nS). Negative duration is not allowed.</li>"
    "<li>anything else: throw exception to the share consumer.</li></ul>")
_ISOLATION_DOC = (
    "Controls how to read records written transactionally. If set to \"read_committed\", the "
    "share group will only deliver transactional records which have been committed. If set to "
    "\"read_uncommitted\", the share group will return all messages, even transactional messages "
    "which have been aborted. Non-transactional records will be returned unconditionally in "
    "either mode.")

#: Kafka 4.2's group config keys in ``GroupConfig``'s definition order (the order values
#: are parsed in, so the order value errors are found in). 4.3 adds
#: ``consumer.assignment.interval.ms``, ``share.assignment.interval.ms``,
#: ``share.delivery.count.limit`` and ``share.partition.max.record.locks`` (KIP-1240).
KEYS: tuple[GroupConfigKey, ...] = (
    GroupConfigKey(name="consumer.session.timeout.ms", type=ConfigType.INT, default=45_000,
                   broker="consumer_session_timeout_ms", at_least=1,
                   documentation="The timeout to detect client failures when using the consumer group protocol.",
                   validated_with_broker_value=True, described_with_broker_value=True),
    GroupConfigKey(name="consumer.heartbeat.interval.ms", type=ConfigType.INT, default=5_000,
                   broker="consumer_heartbeat_interval_ms", at_least=1,
                   documentation="The heartbeat interval given to the members of a consumer group.",
                   validated_with_broker_value=True, described_with_broker_value=True),
    GroupConfigKey(name="share.session.timeout.ms", type=ConfigType.INT, default=45_000,
                   broker="share_session_timeout_ms", at_least=1,
                   documentation="The timeout to detect client failures when using the share group protocol.",
                   described_with_broker_value=True),
    GroupConfigKey(name="share.heartbeat.interval.ms", type=ConfigType.INT, default=5_000,
                   broker="share_heartbeat_interval_ms", at_least=1,
                   documentation="The heartbeat interval given to the members of a share group.",
                   described_with_broker_value=True),
    GroupConfigKey(name="share.record.lock.duration.ms", type=ConfigType.INT, default=30_000,
                   broker="share_record_lock_duration_ms", at_least=1000,
                   documentation="The record acquisition lock duration in milliseconds for share groups.",
                   described_with_broker_value=True),
    GroupConfigKey(name="share.auto.offset.reset", type=ConfigType.STRING, default="latest",
                   broker=None, at_least=None, documentation=_AUTO_OFFSET_RESET_DOC),
    GroupConfigKey(name="share.isolation.level", type=ConfigType.STRING, default="read_uncommitted",
                   broker=None, at_least=None, documentation=_ISOLATION_DOC),
    GroupConfigKey(name="streams.session.timeout.ms", type=ConfigType.INT, default=45_000,
                   broker="streams_session_timeout_ms", at_least=1,
                   documentation="The timeout to detect client failures when using the streams group protocol."),
    GroupConfigKey(name="streams.heartbeat.interval.ms", type=ConfigType.INT, default=5_000,
                   broker="streams_heartbeat_interval_ms", at_least=1,
                   documentation="The heartbeat interval given to the members."),
    GroupConfigKey(name="streams.num.standby.replicas", type=ConfigType.INT, default=0,
                   broker="streams_num_standby_replicas", at_least=0,
                   documentation="The number of standby replicas for each task."),
    GroupConfigKey(name="streams.initial.rebalance.delay.ms", type=ConfigType.INT, default=3_000,
                   broker="streams_initial_rebalance_delay_ms", at_least=0,
                   documentation="The amount of time the group coordinator will wait for more streams "
                                 "clients to join a new group before performing the first rebalance. "
                                 "A longer delay means potentially fewer rebalances."),
)

KEYS_BY_NAME: dict[str, GroupConfigKey] = {k.name: k for k in KEYS}
_OPERATIONS = frozenset(int(op) for op in AlterOp)

#: ``share.isolation.level``'s values (``ValidString.in``: case-sensitive).
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")

#: ``GroupConfig.validateValues``' bounds, in its order: (key, the broker key bounding it,
#: its :class:`BrokerGroupSettings` field, whether it is the lower bound).
_BOUNDS: tuple[tuple[str, str, str, bool], ...] = tuple(
    (f"{kind}.{what}", f"group.{kind}.{m}.{what}", f"{kind}_{m}_{what.replace('.', '_')}", m == "min")
    for kind, what in (("consumer", "heartbeat.interval.ms"), ("consumer", "session.timeout.ms"),
                       ("share", "heartbeat.interval.ms"), ("share", "session.timeout.ms"),
                       ("share", "record.lock.duration.ms"), ("streams", "heartbeat.interval.ms"),
                       ("streams", "session.timeout.ms"))
    for m in ("min", "max"))
_STANDBY_BOUND = ("streams.num.standby.replicas", "group.streams.max.standby.replicas",
                  "streams_max_standby_replicas", False)


# -- outcomes --------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigOp:
    """One ``AlterableConfig`` of an IncrementalAlterConfigs resource, as it came.

    ``operation`` is the raw ``ConfigOperation`` byte (:class:`AlterOp` when known)."""

    name: str
    operation: int
    value: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class AlterResult:
    """The answer to one GROUP resource of an IncrementalAlterConfigs.

    ``error_code`` 0 with ``error_message`` ``None`` is success. ``configs`` is the group's
    overrides from now on: the new ones, or the current ones after an error or a
    ``validate_only`` request; ``changed`` says whether they must be written."""

    error_code: int = 0
    error_message: str | None = None
    configs: Mapping[str, str] = field(default_factory=dict)
    changed: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigSynonym:
    """One ``DescribeConfigsSynonym``."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, kw_only=True, slots=True)
class ConfigEntry:
    """One ``DescribeConfigsResourceResult``: a key, its value and where the value is from."""

    name: str
    value: str | None
    read_only: bool
    config_source: ConfigSource
    is_sensitive: bool
    synonyms: tuple[ConfigSynonym, ...]
    config_type: ConfigType
    documentation: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class DescribeResult:
    """The answer to one GROUP resource of a DescribeConfigs (``configs`` empty on error)."""

    error_code: int = 0
    error_message: str | None = None
    configs: tuple[ConfigEntry, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class EffectiveGroupConfig:
    """The values a coordinator uses for one group, one field per group config key."""

    consumer_session_timeout_ms: int
    consumer_heartbeat_interval_ms: int
    share_session_timeout_ms: int
    share_heartbeat_interval_ms: int
    share_record_lock_duration_ms: int
    #: ``latest``, ``earliest`` or ``by_duration:<ISO-8601 duration>``.
    share_auto_offset_reset: str
    #: ``read_committed`` or ``read_uncommitted``.
    share_isolation_level: str
    streams_session_timeout_ms: int
    streams_heartbeat_interval_ms: int
    streams_num_standby_replicas: int
    streams_initial_rebalance_delay_ms: int


class _Refused(Exception):
    """A resource's answer is an error (internal: turned into a result)."""

    def __init__(self, code: int, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- IncrementalAlterConfigs -----------------------------------------------------------


def alter_group_configs(group_id: str, current: Mapping[str, str], ops: Sequence[ConfigOp],
                        broker: BrokerGroupSettings, *, validate_only: bool = False) -> AlterResult:
    """Apply one GROUP resource of an IncrementalAlterConfigs to a group's overrides.

    The checks come in Kafka's order: the broker's (duplicate keys, then null values:
    INVALID_REQUEST), then the controller's (APPEND or SUBTRACT on any group key, none
    being a list: INVALID_CONFIG; a value over 32,767 UTF-16 units: INVALID_CONFIG; an
    empty group name: INVALID_REQUEST; then :func:`validate_group_configs` on the whole
    result). A ``ConfigOperation`` byte Kafka does not know is INVALID_REQUEST here
    (Kafka's controller fails on it, answering UNKNOWN_SERVER_ERROR for the whole request).
    A DELETE of a key not set, even a key no group has, succeeds, as in Kafka.
    """
    before = dict(current)
    try:
        after, written = _apply(group_id, before, ops)
        _validate(before, after, written, broker)
    except _Refused as refused:
        return AlterResult(error_code=refused.code, error_message=refused.message, configs=before)
    if validate_only or not written:
        return AlterResult(configs=before)
    return AlterResult(configs=after, changed=True)


def _apply(group_id: str, before: dict[str, str], ops: Sequence[ConfigOp]) -> tuple[dict[str, str], list[str]]:
    """The overrides after ``ops`` and the keys that changed, in the controller's order."""
    names = [op.name for op in ops]
    if len(set(names)) != len(names):
        raise _Refused(Code.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [op.name for op in ops if op.operation != AlterOp.DELETE and op.value is None]
    if nulls:
        raise _Refused(Code.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
    for op in ops:
        if op.operation not in _OPERATIONS:
            raise _Refused(Code.INVALID_REQUEST, f"Unknown operations type {op.operation}")
    after = dict(before)
    written: list[str] = []
    # The controller walks the ops in its HashMap's order: the first list operation met
    # is the one its error names; a key is written only when its value changes.
    for op in _java_order(ops, lambda o: o.name, _hash_map_capacity(len(ops))):
        if op.operation in (AlterOp.APPEND, AlterOp.SUBTRACT):
            raise _Refused(INVALID_CONFIG, f"Can't {AlterOp(op.operation).name} to key {op.name} "
                                           "because its type is not LIST.")
        new = op.value if op.operation == AlterOp.SET else None
        if new != before.get(op.name):
            written.append(op.name)
            if new is None:
                del after[op.name]
            else:
                after[op.name] = new
    if any(_utf16_length(after[n]) > MAX_VALUE_LENGTH for n in written if n in after):
        raise _Refused(INVALID_CONFIG, "The configuration value cannot be added because it exceeds "
                                       f"the maximum value size of {MAX_VALUE_LENGTH} bytes.")
    if group_id == "":
        raise _Refused(Code.INVALID_REQUEST, "Default group resources are not allowed.")
    return after, written


def legacy_alter_ops(current: Mapping[str, str], configs: Sequence[tuple[str, str | None]]) -> list[ConfigOp]:
    """A legacy AlterConfigs resource (every key given, the others removed) as the
    IncrementalAlterConfigs ops Kafka gives the same answer to: a SET for each key given
    (duplicates and nulls refused alike), a DELETE for each override not given."""
    given = {name for name, _ in configs}
    return ([ConfigOp(name=name, operation=AlterOp.SET, value=value) for name, value in configs]
            + [ConfigOp(name=name, operation=AlterOp.DELETE, value=None) for name in current if name not in given])


def validate_group_configs(configs: Mapping[str, str], broker: BrokerGroupSettings) -> str | None:
    """Kafka's check of a group's whole overrides (``GroupConfigManager.validate``):
    ``None`` if they pass, else the INVALID_CONFIG message. Unknown names first, then each
    value's type and range in definition order, then the broker's min/max bounds and the
    session-above-heartbeat rules in ``GroupConfig.validateValues``' order."""
    try:
        _validate({}, dict(configs), list(configs), broker)
    except _Refused as refused:
        return refused.message
    return None


def _validate(before: Mapping[str, str], after: Mapping[str, str], written: Sequence[str],
              broker: BrokerGroupSettings) -> None:
    unknown = [n for n in after if n not in KEYS_BY_NAME]
    if unknown:
        # GroupConfig.validateNames walks a Properties (a ConcurrentHashMap): the stored
        # keys went in first, then the changed ones in the controller's order.
        inserted = [n for n in before if n in after] + [n for n in written if n not in before]
        table = _properties_capacity(len(after))
        first = _java_order([n for n in inserted if n in unknown], str, table)[0]
        raise _Refused(INVALID_CONFIG, f"Unknown group config name: {first}")
    # GroupConfigManager.validate fills only the two consumer keys from the broker.
    ints, _ = _values(after, broker, lambda key: key.validated_with_broker_value)
    for name, bound_key, bound_field, lower in (*_BOUNDS, _STANDBY_BOUND):
        value, bound = ints[name], getattr(broker, bound_field)
        if value < bound if lower else value > bound:
            relation = "greater than or equal to" if lower else "less than or equal to"
            raise _Refused(INVALID_CONFIG, f"{name} must be {relation} {bound_key}")
    for kind in ("consumer", "share", "streams"):
        if ints[f"{kind}.session.timeout.ms"] <= ints[f"{kind}.heartbeat.interval.ms"]:
            raise _Refused(INVALID_CONFIG, f"{kind}.session.timeout.ms must be greater than "
                                           f"{kind}.heartbeat.interval.ms")


def _values(overrides: Mapping[str, str], broker: BrokerGroupSettings,
            from_broker: Callable[[GroupConfigKey], bool]) -> tuple[dict[str, int], dict[str, str]]:
    """Every key's value, parsed as ``ConfigDef.parse`` does in definition order: the
    override, else the broker's value where ``from_broker`` says so, else the built-in
    default. Raises :class:`_Refused` on the first value that does not parse."""
    ints: dict[str, int] = {}
    strings: dict[str, str] = {}
    for key in KEYS:
        if key.name in overrides:
            value = _parse(key, overrides[key.name])
        elif key.broker is not None and from_broker(key):
            value = getattr(broker, key.broker)
        else:
            value = key.default
        if isinstance(value, int):
            ints[key.name] = value
        else:
            strings[key.name] = value
    return ints, strings


def _parse(key: GroupConfigKey, raw: str) -> int | str:
    """``ConfigDef.parseValue``: trimmed and typed, then the key's validator, with
    ``ConfigException``'s message (the raw value on a parse error, the parsed one after)."""
    trimmed = _java_trim(raw)
    if key.type is ConfigType.INT:
        number = _java_parse_int(trimmed)
        if number is None:
            raise _Refused(INVALID_CONFIG, f"Invalid value {raw} for configuration {key.name}: "
                                           "Not a number of type INT")
        if key.at_least is not None and number < key.at_least:
            raise _Refused(INVALID_CONFIG, f"Invalid value {number} for configuration {key.name}: "
                                           f"Value must be at least {key.at_least}")
        return number
    if key.name == "share.isolation.level" and trimmed not in ISOLATION_LEVELS:
        raise _Refused(INVALID_CONFIG, f"Invalid value {trimmed} for configuration {key.name}: "
                                       "String must be one of: " + ", ".join(ISOLATION_LEVELS))
    if key.name == "share.auto.offset.reset" and not valid_auto_offset_reset(trimmed):
        raise _Refused(INVALID_CONFIG, f"Invalid value {trimmed} for configuration {key.name}: "
                                       f"Invalid value `{trimmed}` for configuration {key.name}. The value "
                                       "must be either 'earliest', 'latest' or of the format "
                                       "'by_duration:<PnDTnHnMn.nS>'.")
    return trimmed


def valid_auto_offset_reset(value: str) -> bool:
    """Whether ``ShareGroupAutoOffsetResetStrategy.fromString`` takes ``value``:
    ``earliest``, ``latest`` or ``by_duration:`` and a non-negative ISO-8601 duration
    (``java.time.Duration.parse``); case-sensitive, ``none`` refused."""
    if value in ("earliest", "latest"):
        return True
    if not value.startswith("by_duration:"):
        return False
    nanos = java_duration_nanos(value[len("by_duration:"):])
    return nanos is not None and nanos >= 0


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?"
    r"(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?", re.IGNORECASE | re.ASCII)


def java_duration_nanos(text: str) -> int | None:
    """``java.time.Duration.parse(text)`` in nanoseconds, or ``None`` where Java throws
    (no match, a bare ``T``, no part at all, a ``long`` overflow)."""
    m = _DURATION.fullmatch(text)
    if m is None or m.group(3) == "T":  # Java's bare-T test is case-sensitive
        return None
    days, hours, minutes, seconds, fraction = m.group(2, 4, 5, 6, 7)
    if days is None and hours is None and minutes is None and seconds is None:
        return None
    total = 0
    # addExact(days, addExact(hours, addExact(minutes, seconds))), each multiplyExact'd.
    for part, unit in ((seconds, 1), (minutes, 60), (hours, 3_600), (days, 86_400)):
        n = int(part) if part is not None else 0
        total += n * unit
        if not (_INT64_MIN <= n <= _INT64_MAX and _INT64_MIN <= n * unit <= _INT64_MAX
                and _INT64_MIN <= total <= _INT64_MAX):
            return None
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    if seconds is not None and seconds.startswith("-"):
        nanos = -nanos
    secs = total + nanos // _NANOS  # Duration.ofSeconds(seconds, nanoAdjustment)
    if not _INT64_MIN <= secs <= _INT64_MAX:
        return None
    value = secs * _NANOS + nanos % _NANOS
    if m.group(1) == "-":  # negated(): the whole seconds, truncated, must fit a long
        value = -value
        whole = abs(value) // _NANOS * (1 if value >= 0 else -1)
        if not _INT64_MIN <= whole <= _INT64_MAX or (value < whole * _NANOS and whole - 1 < _INT64_MIN):
            return None
    return value


# -- DescribeConfigs -------------------------------------------------------------------


def describe_group_configs(group_id: str, overrides: Mapping[str, str], broker: BrokerGroupSettings, *,
                           keys: Iterable[str] | None = None, include_synonyms: bool = False,
                           include_documentation: bool = False) -> DescribeResult:
    """Describe one GROUP resource as Kafka's ``ConfigHelper`` does.

    Every key (or those named in ``keys``, Kafka's ``ConfigurationKeys``: ``None`` or
    empty is all, unknown names are left out), in Kafka's order (:data:`DESCRIBE_ORDER`).
    An overridden key has source GROUP_CONFIG (8); the others DEFAULT_CONFIG (5), with
    the broker's value for the consumer and share keys and Kafka's built-in default for
    the others (``extractGroupConfigMap`` has no streams keys). Synonyms, when asked, are
    the entry itself. Never sensitive or read-only. A stored key this version does not
    know comes first, as Kafka lists an unknown original: sensitive, no value, UNKNOWN type.
    """
    if group_id == "":
        return DescribeResult(error_code=Code.INVALID_REQUEST, error_message="Group name must not be empty")
    wanted = set(keys) if keys is not None else set()
    try:
        ints, strings = _values(overrides, broker, lambda key: key.described_with_broker_value)
    except _Refused:
        # A stored value GroupConfig cannot parse: ApiError.fromThrowable of a
        # ConfigException is UNKNOWN_SERVER_ERROR without a message.
        return DescribeResult(error_code=Code.UNKNOWN_SERVER_ERROR)
    shown = {**{n: str(v) for n, v in ints.items()}, **strings}
    entries: list[ConfigEntry] = []
    for name in sorted(n for n in overrides if n not in KEYS_BY_NAME) + list(DESCRIBE_ORDER):
        if wanted and name not in wanted:
            continue
        key = KEYS_BY_NAME.get(name)
        value = shown[name] if key is not None else None
        source = ConfigSource.GROUP_CONFIG if name in overrides else ConfigSource.DEFAULT_CONFIG
        entries.append(ConfigEntry(
            name=name, value=value, read_only=False, config_source=source, is_sensitive=key is None,
            synonyms=(ConfigSynonym(name=name, value=value, source=source),) if include_synonyms else (),
            config_type=key.type if key is not None else ConfigType.UNKNOWN,
            documentation=key.documentation if include_documentation and key is not None else None))
    return DescribeResult(configs=tuple(entries))


# -- effective settings ----------------------------------------------------------------


def effective_group_config(broker: BrokerGroupSettings, overrides: Mapping[str, str] | None) -> EffectiveGroupConfig:
    """The values a coordinator uses for one group (``GroupMetadataManager``'s
    ``consumerGroupSessionTimeoutMs(groupId)`` and siblings).

    ``None``: the group has no stored configs, and every value is the broker's (Kafka's
    default for the two share strings). Otherwise Kafka's ``GroupConfig`` of the overrides:
    an override wins, a consumer or share key falls back to the broker's value, a streams
    key to Kafka's built-in default. Raises ``ValueError`` on a stored value that does not
    parse (stored values were validated when written).
    """
    try:
        ints, strings = _values(overrides or {}, broker,
                                lambda key: overrides is None or key.described_with_broker_value)
    except _Refused as refused:
        raise ValueError(refused.message) from None
    return EffectiveGroupConfig(
        consumer_session_timeout_ms=ints["consumer.session.timeout.ms"],
        consumer_heartbeat_interval_ms=ints["consumer.heartbeat.interval.ms"],
        share_session_timeout_ms=ints["share.session.timeout.ms"],
        share_heartbeat_interval_ms=ints["share.heartbeat.interval.ms"],
        share_record_lock_duration_ms=ints["share.record.lock.duration.ms"],
        share_auto_offset_reset=strings["share.auto.offset.reset"],
        share_isolation_level=strings["share.isolation.level"],
        streams_session_timeout_ms=ints["streams.session.timeout.ms"],
        streams_heartbeat_interval_ms=ints["streams.heartbeat.interval.ms"],
        streams_num_standby_replicas=ints["streams.num.standby.replicas"],
        streams_initial_rebalance_delay_ms=ints["streams.initial.rebalance.delay.ms"])


# -- the stored form -------------------------------------------------------------------


class GroupConfigFormatError(ValueError):
    """A ``/config/groups/<group>`` znode that is not Kafka's dynamic-config JSON."""


#: The ``version`` of the stored JSON (Kafka's dynamic-config znodes).
STORED_VERSION = 1


def encode_group_configs(overrides: Mapping[str, str]) -> bytes:
    """The znode's bytes: ``{"version":1,"config":{...}}``, keys sorted, ASCII-escaped JSON."""
    return json.dumps({"version": STORED_VERSION, "config": dict(overrides)},
                      sort_keys=True, separators=(",", ":")).encode("ascii")


def decode_group_configs(data: bytes) -> dict[str, str]:
    """The overrides a znode holds; empty bytes (a znode made without data) hold none.

    Raises :class:`GroupConfigFormatError` on anything else that is not a JSON object
    with ``"version": 1`` and a ``"config"`` object of strings."""
    if not data:
        return {}
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise GroupConfigFormatError(f"group config znode is not UTF-8 JSON: {e}") from None
    if not isinstance(body, dict):
        raise GroupConfigFormatError("group config znode does not hold a JSON object")
    version = body.get("version")
    if type(version) is not int or version != STORED_VERSION:
        raise GroupConfigFormatError(f"group config znode has version {version!r}, expected {STORED_VERSION}")
    config = body.get("config")
    if not isinstance(config, dict):
        raise GroupConfigFormatError("group config znode has no \"config\" object")
    bad = sorted(k for k, v in config.items() if not isinstance(v, str))
    if bad:
        raise GroupConfigFormatError(f"group config znode has non-string values for: {', '.join(bad)}")
    return dict(config)


# -- Java's behaviour, where Kafka's answer depends on it ------------------------------


def _java_trim(s: str) -> str:
    """``String.trim``: strips every character up to U+0020 at both ends."""
    start, end = 0, len(s)
    while start < end and s[start] <= " ":
        start += 1
    while end > start and s[end - 1] <= " ":
        end -= 1
    return s[start:end]


def _java_parse_int(s: str) -> int | None:
    """``Integer.parseInt(s)``: a sign, then decimal digits of any script (Java's
    ``Character.digit`` on BMP characters), within 32 bits; ``None`` where Java throws."""
    digits = s[1:] if s[:1] in ("+", "-") else s
    if not digits:
        return None
    n = 0
    for c in digits:
        d = unicodedata.decimal(c, None) if c <= "\uffff" else None
        if d is None:
            return None
        n = n * 10 + d
    n = -n if s[0] == "-" else n
    return n if _INT32_MIN <= n <= _INT32_MAX else None


def _utf16_length(s: str) -> int:
    """``String.length()``: UTF-16 code units."""
    return len(s) + sum(1 for c in s if c > "\uffff")


def _java_hash(s: str) -> int:
    """``String.hashCode`` (over UTF-16 units, unsigned), spread as ``HashMap.hash`` does."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _hash_map_capacity(size: int) -> int:
    """A ``java.util.HashMap``'s table after ``size`` puts (resized past 3/4 full)."""
    capacity = 16
    while size > capacity * 3 // 4:
        capacity *= 2
    return capacity


def _properties_capacity(put_all: int) -> int:
    """The table of ``GroupConfigManager.validate``'s ``Properties`` (a
    ``ConcurrentHashMap`` of 16 slots holding two keys) after ``putAll`` of ``put_all``
    entries: its presize doubles the table until 3/4 of it holds ``tableSizeFor(1.5n + 1)``
    (the entries then never reach 3/4 of it)."""
    capacity = 16
    want = 1 << (put_all + (put_all >> 1)).bit_length()
    while want > capacity - (capacity >> 2):
        capacity *= 2
    return capacity


def _java_order(items: Iterable[T], name: Callable[[T], str], capacity: int) -> list[T]:
    """``items`` in the iteration order of a Java hash map of ``capacity`` slots they were
    put into in this order: by slot, ties in order of insertion."""
    listed = list(items)
    ranked = sorted((_java_hash(name(item)) & (capacity - 1), i) for i, item in enumerate(listed))
    return [listed[i] for _, i in ranked]


#: The 11 keys in the order Kafka describes them: ``AbstractConfig.nonInternalValues()``,
#: a ``HashMap`` of 16 slots.
DESCRIBE_ORDER: tuple[str, ...] = tuple(_java_order([k.name for k in KEYS], str, 16))
