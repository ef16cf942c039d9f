"""GROUP-resource configs: every rule against Kafka 4.2.1's answer.

Expected values are written by hand from Kafka's source (``GroupConfig.java``,
``GroupCoordinatorConfig.java``, ``ShareGroupConfig.java``, ``ConfigAdminManager.scala``,
``ConfigurationControlManager.java``, ``ConfigHelper.scala``), and where Kafka's answer
rests on the JDK (``Integer.parseInt``, ``Duration.parse``, a ``HashMap``'s order) from
what Java 17 printed for the same input.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.group_configs import (
    DESCRIBE_ORDER,
    INVALID_CONFIG,
    KEYS,
    AlterOp,
    BrokerGroupSettings,
    ConfigOp,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    GroupConfigFormatError,
    alter_group_configs,
    decode_group_configs,
    describe_group_configs,
    effective_group_config,
    encode_group_configs,
    java_duration_nanos,
    legacy_alter_ops,
    validate_group_configs,
)
from coordinator.paths import group_config_path

INVALID_REQUEST = 42
UNKNOWN_SERVER_ERROR = -1
BROKER = BrokerGroupSettings()
SET, DELETE, APPEND, SUBTRACT = AlterOp.SET, AlterOp.DELETE, AlterOp.APPEND, AlterOp.SUBTRACT


def op(name: str, operation: int = SET, value: str | None = "1") -> ConfigOp:
    return ConfigOp(name=name, operation=operation, value=value)


def refusal(ops: list[ConfigOp], current: dict[str, str] | None = None, group: str = "g",
            broker: BrokerGroupSettings = BROKER) -> tuple[int, str | None]:
    result = alter_group_configs(group, current or {}, ops, broker)
    assert result.configs == (current or {}) and not result.changed
    return result.error_code, result.error_message


# -- the keys --------------------------------------------------------------------------


def test_the_keys_are_kafka_42s_in_definition_order() -> None:
    # GroupConfig's ConfigDef: name, type, default, Range.atLeast.
    assert [(k.name, k.type, k.default, k.at_least) for k in KEYS] == [
        ("consumer.session.timeout.ms", ConfigType.INT, 45000, 1),
        ("consumer.heartbeat.interval.ms", ConfigType.INT, 5000, 1),
        ("share.session.timeout.ms", ConfigType.INT, 45000, 1),
        ("share.heartbeat.interval.ms", ConfigType.INT, 5000, 1),
        ("share.record.lock.duration.ms", ConfigType.INT, 30000, 1000),
        ("share.auto.offset.reset", ConfigType.STRING, "latest", None),
        ("share.isolation.level", ConfigType.STRING, "read_uncommitted", None),
        ("streams.session.timeout.ms", ConfigType.INT, 45000, 1),
        ("streams.heartbeat.interval.ms", ConfigType.INT, 5000, 1),
        ("streams.num.standby.replicas", ConfigType.INT, 0, 0),
        ("streams.initial.rebalance.delay.ms", ConfigType.INT, 3000, 0),
    ]


def test_describe_order_is_a_java_hash_map_of_the_keys() -> None:
    # Java 17: new HashMap<>() with the 11 names put in definition order, keySet().
    assert DESCRIBE_ORDER == (
        "consumer.session.timeout.ms", "streams.heartbeat.interval.ms", "share.auto.offset.reset",
        "consumer.heartbeat.interval.ms", "share.record.lock.duration.ms",
        "streams.initial.rebalance.delay.ms", "share.session.timeout.ms", "share.heartbeat.interval.ms",
        "share.isolation.level", "streams.session.timeout.ms", "streams.num.standby.replicas")


@pytest.mark.parametrize("changes", [
    {"consumer_heartbeat_interval_ms": 45_000},            # above its maximum
    {"consumer_min_session_timeout_ms": 6_000, "consumer_session_timeout_ms": 10_000,
     "consumer_heartbeat_interval_ms": 12_000},            # not below the session timeout
    {"consumer_min_session_timeout_ms": 50_000},           # default below its minimum
    {"share_max_heartbeat_interval_ms": 4_000},            # default above its maximum
    {"share_min_record_lock_duration_ms": 999},            # ShareGroupConfig: between(1000, 30000)
    {"share_max_record_lock_duration_ms": 3_600_001},      # between(30000, 3600000)
    {"streams_num_standby_replicas": 3},                   # above group.streams.max.standby.replicas
    {"streams_initial_rebalance_delay_ms": -1},            # atLeast(0)
    {"streams_min_session_timeout_ms": 0},                 # atLeast(1)
])
def test_broker_settings_refuse_what_the_broker_refuses_at_startup(changes: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        BrokerGroupSettings(**changes)


# -- IncrementalAlterConfigs: what is stored --------------------------------------------


def test_set_stores_the_value_as_given() -> None:
    result = alter_group_configs("g", {}, [op("consumer.session.timeout.ms", SET, " 50000 ")], BROKER)
    assert (result.error_code, result.error_message) == (0, None)
    assert result.configs == {"consumer.session.timeout.ms": " 50000 "} and result.changed


def test_delete_removes_and_an_unchanged_value_writes_nothing() -> None:
    current = {"share.isolation.level": "read_committed", "share.auto.offset.reset": "earliest"}
    result = alter_group_configs("g", current, [op("share.isolation.level", DELETE, None)], BROKER)
    assert result.configs == {"share.auto.offset.reset": "earliest"} and result.changed
    same = alter_group_configs("g", current, [op("share.auto.offset.reset", SET, "earliest")], BROKER)
    assert same.error_code == 0 and same.configs == current and not same.changed


def test_delete_of_a_key_not_set_even_an_unknown_one_succeeds() -> None:
    # DELETE makes no record when nothing is stored; validation sees no unknown name.
    result = alter_group_configs("g", {}, [op("no.such.key", DELETE, None),
                                           op("share.session.timeout.ms", DELETE, "ignored")], BROKER)
    assert (result.error_code, result.configs, result.changed) == (0, {}, False)


def test_validate_only_checks_and_stores_nothing() -> None:
    ok = alter_group_configs("g", {}, [op("share.record.lock.duration.ms", SET, "20000")], BROKER,
                             validate_only=True)
    assert (ok.error_code, ok.configs, ok.changed) == (0, {}, False)
    bad = alter_group_configs("g", {}, [op("share.record.lock.duration.ms", SET, "10")], BROKER,
                              validate_only=True)
    assert bad.error_code == INVALID_CONFIG


def test_the_whole_result_is_validated_with_the_stored_overrides() -> None:
    # A stored heartbeat of 10000 and a new session of 10000: session must exceed it.
    broker = BrokerGroupSettings(consumer_min_session_timeout_ms=6_000)
    current = {"consumer.heartbeat.interval.ms": "10000"}
    assert refusal([op("consumer.session.timeout.ms", SET, "10000")], current, broker=broker) == (
        INVALID_CONFIG, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
    assert alter_group_configs("g", current, [op("consumer.session.timeout.ms", SET, "10001")],
                               broker).error_code == 0


def test_legacy_alter_configs_is_set_for_each_given_and_delete_for_the_rest() -> None:
    current = {"share.isolation.level": "read_committed", "share.auto.offset.reset": "earliest"}
    ops = legacy_alter_ops(current, [("share.auto.offset.reset", "latest")])
    assert ops == [op("share.auto.offset.reset", SET, "latest"), op("share.isolation.level", DELETE, None)]
    assert alter_group_configs("g", current, ops, BROKER).configs == {"share.auto.offset.reset": "latest"}


# -- IncrementalAlterConfigs: the request's own errors ------------------------------------


def test_duplicate_keys_come_first() -> None:
    # ConfigAdminManager.preprocess, before the null check.
    assert refusal([op("x", SET, None), op("x", DELETE, None)]) == (
        INVALID_REQUEST, "Error due to duplicate config keys")


def test_null_values_are_named_in_request_order() -> None:
    assert refusal([op("b", SET, None), op("share.isolation.level", DELETE, None),
                    op("a", APPEND, None)]) == (INVALID_REQUEST, "Null value not supported for : b, a")


def test_an_unknown_operation_is_an_invalid_request() -> None:
    # Deviation: Kafka's controller fails on it (UNKNOWN_SERVER_ERROR for every resource).
    assert refusal([op("share.isolation.level", 7, "read_committed")]) == (
        INVALID_REQUEST, "Unknown operations type 7")


@pytest.mark.parametrize("operation", [APPEND, SUBTRACT])
def test_list_operations_are_refused_on_every_key(operation: int) -> None:
    name = AlterOp(operation).name
    for key in ("consumer.session.timeout.ms", "no.such.key"):
        assert refusal([op(key, operation, "5")]) == (
            INVALID_CONFIG, f"Can't {name} to key {key} because its type is not LIST.")


def test_the_list_operation_named_is_the_first_in_the_controllers_hash_map() -> None:
    # Java 17, Kafka's altersByName HashMap: consumer.session.timeout.ms (slot 0) first;
    # two keys in one slot (9) in request order.
    assert refusal([op("share.isolation.level", APPEND), op("consumer.session.timeout.ms", APPEND)])[1] == (
        "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.")
    assert refusal([op("streams.initial.rebalance.delay.ms", APPEND),
                    op("consumer.heartbeat.interval.ms", SUBTRACT)])[1] == (
        "Can't APPEND to key streams.initial.rebalance.delay.ms because its type is not LIST.")
    # 13 ops: a table of 32 slots, where 25 (consumer.heartbeat...) follows 9 (streams...).
    fillers = [op(f"f{i}") for i in range(11)]
    ops = [op("consumer.heartbeat.interval.ms", APPEND), op("streams.initial.rebalance.delay.ms", APPEND)]
    assert refusal(ops + fillers)[1] == (
        "Can't APPEND to key streams.initial.rebalance.delay.ms because its type is not LIST.")
    assert refusal(ops + fillers[:10])[1] == (
        "Can't APPEND to key consumer.heartbeat.interval.ms because its type is not LIST.")
    # A list operation is refused before any value is looked at.
    assert refusal([op("zz", SET), op("consumer.session.timeout.ms", APPEND)])[1] == (
        "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.")


def test_values_longer_than_32767_utf16_units_are_refused() -> None:
    message = ("The configuration value cannot be added because it exceeds the maximum "
               "value size of 32767 bytes.")
    assert refusal([op("consumer.session.timeout.ms", SET, "1" * 32_768)]) == (INVALID_CONFIG, message)
    # 16,384 characters outside the BMP are 32,768 Java chars.
    assert refusal([op("share.auto.offset.reset", SET, "\U0001f600" * 16_384)]) == (INVALID_CONFIG, message)
    assert refusal([op("share.auto.offset.reset", SET, "x" * 32_767)])[1] != message


def test_an_empty_group_name_is_refused_after_the_list_and_size_checks() -> None:
    assert refusal([op("share.isolation.level", SET, "read_committed")], group="") == (
        INVALID_REQUEST, "Default group resources are not allowed.")
    assert refusal([op("share.isolation.level", APPEND)], group="")[0] == INVALID_CONFIG


# -- validation: names and values -------------------------------------------------------


def test_unknown_names_are_refused_before_any_value() -> None:
    assert refusal([op("consumer.session.timeout.ms", SET, "abc"), op("foo", SET, "1")]) == (
        INVALID_CONFIG, "Unknown group config name: foo")


def test_the_unknown_name_named_is_the_first_in_kafkas_hash_map() -> None:
    # "a".hashCode() 97 is slot 1, "b" 98 slot 2, "q" 113 slot 1 (Java 17 through Kafka's maps).
    assert refusal([op("b"), op("a")])[1] == "Unknown group config name: a"
    assert refusal([op("q"), op("a")])[1] == "Unknown group config name: q"
    assert refusal([op("a"), op("q")])[1] == "Unknown group config name: a"
    # Six overrides presize Kafka's Properties to 32 slots: f10 (slot 4) before f6 (16).
    known = [op(k) for k in ("share.isolation.level", "share.auto.offset.reset",
                             "share.session.timeout.ms", "share.heartbeat.interval.ms")]
    assert refusal([op("f6"), op("f10"), *known])[1] == "Unknown group config name: f10"
    assert refusal([op("f6"), op("f10"), *known[:3]])[1] == "Unknown group config name: f6"


def test_a_stored_unknown_name_fails_every_alter() -> None:
    assert refusal([op("share.isolation.level", SET, "read_committed")], {"later.key": "1"})[1] == (
        "Unknown group config name: later.key")


@pytest.mark.parametrize(("key", "value", "message"), [
    ("consumer.session.timeout.ms", "abc",
     "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ("consumer.session.timeout.ms", " 12x ",
     "Invalid value  12x  for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ("consumer.session.timeout.ms", "", "Invalid value  for configuration consumer.session.timeout.ms: "
                                        "Not a number of type INT"),
    ("consumer.session.timeout.ms", "2147483648", "Invalid value 2147483648 for configuration "
                                                  "consumer.session.timeout.ms: Not a number of type INT"),
    ("consumer.session.timeout.ms", "0x10", "Invalid value 0x10 for configuration "
                                            "consumer.session.timeout.ms: Not a number of type INT"),
    ("consumer.session.timeout.ms", "\u00a050000", "Invalid value \u00a050000 for configuration "
                                                   "consumer.session.timeout.ms: Not a number of type INT"),
    ("consumer.session.timeout.ms", "0",
     "Invalid value 0 for configuration consumer.session.timeout.ms: Value must be at least 1"),
    ("consumer.heartbeat.interval.ms", " -5",
     "Invalid value -5 for configuration consumer.heartbeat.interval.ms: Value must be at least 1"),
    ("share.record.lock.duration.ms", "999",
     "Invalid value 999 for configuration share.record.lock.duration.ms: Value must be at least 1000"),
    ("streams.num.standby.replicas", "-1",
     "Invalid value -1 for configuration streams.num.standby.replicas: Value must be at least 0"),
    ("streams.initial.rebalance.delay.ms", "-1",
     "Invalid value -1 for configuration streams.initial.rebalance.delay.ms: Value must be at least 0"),
    ("share.isolation.level", "READ_COMMITTED",
     "Invalid value READ_COMMITTED for configuration share.isolation.level: "
     "String must be one of: read_committed, read_uncommitted"),
    ("share.auto.offset.reset", " none ",
     "Invalid value none for configuration share.auto.offset.reset: Invalid value `none` for "
     "configuration share.auto.offset.reset. The value must be either 'earliest', 'latest' or of "
     "the format 'by_duration:<PnDTnHnMn.nS>'."),
])
def test_a_value_that_does_not_parse_gets_configdefs_message(key: str, value: str, message: str) -> None:
    assert refusal([op(key, SET, value)]) == (INVALID_CONFIG, message)


@pytest.mark.parametrize("value", ["+50000", "050000", "\t50000\n", "\u0665\u0660\u0660\u0660\u0660",
                                   "\uff15\uff10\uff10\uff10\uff10"])
def test_ints_parse_as_javas_integer_parse_int(value: str) -> None:
    # Java 17: Integer.parseInt(value.trim()) is 50000 for each (any script's digits).
    result = alter_group_configs("g", {}, [op("consumer.session.timeout.ms", SET, value)], BROKER)
    assert result.error_code == 0 and result.configs == {"consumer.session.timeout.ms": value}


def test_values_are_parsed_in_definition_order() -> None:
    assert refusal([op("share.session.timeout.ms", SET, "x"), op("consumer.heartbeat.interval.ms", SET, "y")])[1] == (
        "Invalid value y for configuration consumer.heartbeat.interval.ms: Not a number of type INT")


@pytest.mark.parametrize(("value", "ok"), [
    ("latest", True), ("earliest", True), ("Latest", False), ("none", False), ("by_duration", False),
    ("by_duration:", False), ("by_duration:PT1H", True), ("by_duration:P1DT1H1M1.5S", True),
    ("by_duration:-PT1H", False), ("by_duration:-PT0S", True), ("by_duration:-PT-5S", True),
    ("by_duration:PT-1.5S", False), ("by_duration:P1DT", False), ("by_duration:P1Dt", True),
    ("by_duration:pt5s", True), ("BY_DURATION:PT5S", False), (" by_duration:PT5S ", True),
])
def test_share_auto_offset_reset(value: str, ok: bool) -> None:
    result = alter_group_configs("g", {}, [op("share.auto.offset.reset", SET, value)], BROKER)
    assert (result.error_code == 0) is ok


@pytest.mark.parametrize(("text", "nanos"), [
    # Java 17's Duration.parse(text), in nanoseconds; None where it threw.
    ("PT0S", 0), ("-PT0S", 0), ("P1D", 86_400 * 10**9), ("P1DT", None), ("P1Dt", 86_400 * 10**9),
    ("Pt", None), ("P", None), ("PT1.S", 10**9), ("PT-1.5S", -1_500_000_000), ("-PT-5S", 5 * 10**9),
    ("pt5s", 5 * 10**9), ("PT1,5S", 1_500_000_000), ("P-1D", -86_400 * 10**9), ("PT1H-61M", -60 * 10**9),
    ("P106751991167300DT15H30M7S", (2**63 - 1) * 10**9), ("-P106751991167300DT15H30M7S", -(2**63 - 1) * 10**9),
    ("PT9223372036854775807S", (2**63 - 1) * 10**9), ("PT9223372036854775808S", None),
    ("-PT-9223372036854775808S", None), ("PT-9223372036854775808S", -(2**63) * 10**9),
    ("PT9223372036854775807.999999999S", (2**63 - 1) * 10**9 + 999_999_999), ("PT0.1234567891S", None),
    ("P+1D", 86_400 * 10**9), ("P1DT1H1M1.5S", 90_061_500_000_000), ("PT1\u017f", None),
    ("PT-9223372036854775808.5S", None), ("PT-9223372036854775807.5S", -(2**63 - 1) * 10**9 - 500_000_000),
    ("-PT9223372036854775807.5S", -(2**63 - 1) * 10**9 - 500_000_000),
])
def test_durations_parse_as_javas(text: str, nanos: int | None) -> None:
    assert java_duration_nanos(text) == nanos


@pytest.mark.parametrize("value", ["read_committed", "read_uncommitted", " read_committed "])
def test_share_isolation_level(value: str) -> None:
    assert alter_group_configs("g", {}, [op("share.isolation.level", SET, value)], BROKER).error_code == 0


# -- validation: the broker's bounds ----------------------------------------------------


@pytest.mark.parametrize(("key", "value", "message"), [
    ("consumer.heartbeat.interval.ms", "4999",
     "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ("consumer.heartbeat.interval.ms", "15001",
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ("consumer.session.timeout.ms", "44999",
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ("consumer.session.timeout.ms", "60001",
     "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
    ("share.heartbeat.interval.ms", "4999",
     "share.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
    ("share.heartbeat.interval.ms", "15001",
     "share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "44999",
     "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
    ("share.session.timeout.ms", "60001",
     "share.session.timeout.ms must be less than or equal to group.share.max.session.timeout.ms"),
    ("share.record.lock.duration.ms", "14999",
     "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ("share.record.lock.duration.ms", "60001",
     "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
    ("streams.heartbeat.interval.ms", "4999",
     "streams.heartbeat.interval.ms must be greater than or equal to group.streams.min.heartbeat.interval.ms"),
    ("streams.heartbeat.interval.ms", "15001",
     "streams.heartbeat.interval.ms must be less than or equal to group.streams.max.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "44999",
     "streams.session.timeout.ms must be greater than or equal to group.streams.min.session.timeout.ms"),
    ("streams.session.timeout.ms", "60001",
     "streams.session.timeout.ms must be less than or equal to group.streams.max.session.timeout.ms"),
    ("streams.num.standby.replicas", "3",
     "streams.num.standby.replicas must be less than or equal to group.streams.max.standby.replicas"),
])
def test_each_bound_of_the_broker(key: str, value: str, message: str) -> None:
    assert refusal([op(key, SET, value)]) == (INVALID_CONFIG, message)


@pytest.mark.parametrize(("key", "value"), [
    ("consumer.heartbeat.interval.ms", "5000"), ("consumer.heartbeat.interval.ms", "15000"),
    ("consumer.session.timeout.ms", "45000"), ("consumer.session.timeout.ms", "60000"),
    ("share.record.lock.duration.ms", "15000"), ("share.record.lock.duration.ms", "60000"),
    ("streams.num.standby.replicas", "2"), ("streams.initial.rebalance.delay.ms", "0"),
])
def test_the_bounds_are_inclusive(key: str, value: str) -> None:
    assert alter_group_configs("g", {}, [op(key, SET, value)], BROKER).error_code == 0


def test_heartbeat_bounds_are_checked_before_session_bounds() -> None:
    assert refusal([op("consumer.session.timeout.ms", SET, "1"), op("consumer.heartbeat.interval.ms", SET, "1")])[1] == (
        "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms")


@pytest.mark.parametrize("kind", ["consumer", "share", "streams"])
def test_the_session_timeout_must_exceed_the_heartbeat_interval(kind: str) -> None:
    broker = BrokerGroupSettings(**{f"{kind}_min_session_timeout_ms": 6_000})
    ops = [op(f"{kind}.session.timeout.ms", SET, "10000"), op(f"{kind}.heartbeat.interval.ms", SET, "10000")]
    assert refusal(ops, broker=broker) == (
        INVALID_CONFIG, f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms")


def test_consumer_keys_not_set_are_checked_with_the_brokers_values() -> None:
    # GroupConfigManager.validate adds extractConsumerGroupConfigMap: the broker's 8000 ms
    # session is not above a 9000 ms heartbeat (Kafka's built-in 45000 would be).
    broker = BrokerGroupSettings(consumer_min_session_timeout_ms=6_000, consumer_session_timeout_ms=8_000,
                                 consumer_min_heartbeat_interval_ms=1_000, consumer_heartbeat_interval_ms=2_000)
    assert refusal([op("consumer.heartbeat.interval.ms", SET, "9000")], broker=broker) == (
        INVALID_CONFIG, "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")


def test_share_keys_not_set_are_checked_with_kafkas_built_in_defaults() -> None:
    # Kafka 4.2: share.session.timeout.ms falls back to 45000 in validation, below a broker
    # minimum of 50000, so even an unrelated change is refused.
    broker = BrokerGroupSettings(share_min_session_timeout_ms=50_000, share_session_timeout_ms=55_000)
    assert refusal([op("consumer.session.timeout.ms", SET, "50000")], broker=broker) == (
        INVALID_CONFIG, "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms")


def test_validate_group_configs_checks_a_whole_map() -> None:
    assert validate_group_configs({"share.isolation.level": "read_committed"}, BROKER) is None
    assert validate_group_configs({"nope": "1"}, BROKER) == "Unknown group config name: nope"


# -- DescribeConfigs --------------------------------------------------------------------

DEFAULT_VALUES = {
    "consumer.session.timeout.ms": "45000", "consumer.heartbeat.interval.ms": "5000",
    "share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "5000",
    "share.record.lock.duration.ms": "30000", "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted", "streams.session.timeout.ms": "45000",
    "streams.heartbeat.interval.ms": "5000", "streams.num.standby.replicas": "0",
    "streams.initial.rebalance.delay.ms": "3000",
}


def test_describe_without_overrides() -> None:
    result = describe_group_configs("g", {}, BROKER)
    assert (result.error_code, result.error_message) == (0, None)
    assert [e.name for e in result.configs] == list(DESCRIBE_ORDER)
    for entry in result.configs:
        assert entry.value == DEFAULT_VALUES[entry.name]
        assert entry.config_source == ConfigSource.DEFAULT_CONFIG and int(entry.config_source) == 5
        assert (entry.read_only, entry.is_sensitive, entry.synonyms, entry.documentation) == (False, False, (), None)
        assert entry.config_type == (ConfigType.STRING if entry.name in (
            "share.auto.offset.reset", "share.isolation.level") else ConfigType.INT)


def test_describe_defaults_are_the_brokers_for_consumer_and_share_keys_only() -> None:
    broker = BrokerGroupSettings(consumer_session_timeout_ms=50_000, share_session_timeout_ms=50_000,
                                 share_record_lock_duration_ms=20_000, streams_session_timeout_ms=50_000,
                                 streams_initial_rebalance_delay_ms=1_000)
    values = {e.name: e.value for e in describe_group_configs("g", {}, broker).configs}
    assert values["consumer.session.timeout.ms"] == values["share.session.timeout.ms"] == "50000"
    assert values["share.record.lock.duration.ms"] == "20000"
    # extractGroupConfigMap has no streams keys: GroupConfig's own defaults show.
    assert values["streams.session.timeout.ms"] == "45000"
    assert values["streams.initial.rebalance.delay.ms"] == "3000"


def test_describe_an_override_with_synonyms() -> None:
    overrides = {"consumer.session.timeout.ms": " +50000 ", "share.isolation.level": " read_committed "}
    result = describe_group_configs("g", overrides, BROKER, include_synonyms=True)
    entries = {e.name: e for e in result.configs}
    session = entries["consumer.session.timeout.ms"]
    assert (session.value, session.config_source) == ("50000", ConfigSource.GROUP_CONFIG)
    assert int(ConfigSource.GROUP_CONFIG) == 8
    assert session.synonyms == (ConfigSynonym(name="consumer.session.timeout.ms", value="50000",
                                              source=ConfigSource.GROUP_CONFIG),)
    assert entries["share.isolation.level"].value == "read_committed"
    assert entries["share.heartbeat.interval.ms"].synonyms == (
        ConfigSynonym(name="share.heartbeat.interval.ms", value="5000", source=ConfigSource.DEFAULT_CONFIG),)


def test_describe_only_the_keys_asked() -> None:
    result = describe_group_configs("g", {}, BROKER, keys=["share.isolation.level", "no.such.key"])
    assert [e.name for e in result.configs] == ["share.isolation.level"]
    assert len(describe_group_configs("g", {}, BROKER, keys=[]).configs) == 11


def test_describe_with_documentation() -> None:
    docs = {e.name: e.documentation for e in describe_group_configs(
        "g", {}, BROKER, include_documentation=True).configs}
    assert docs["consumer.session.timeout.ms"] == (
        "The timeout to detect client failures when using the consumer group protocol.")
    assert docs["streams.heartbeat.interval.ms"] == "The heartbeat interval given to the members."
    assert docs["share.record.lock.duration.ms"] == (
        "The record acquisition lock duration in milliseconds for share groups.")
    assert str(docs["share.auto.offset.reset"]).startswith(
        "The strategy to initialize the share-partition start offset. <ul><li>earliest:")


def test_describe_refusals() -> None:
    empty = describe_group_configs("", {}, BROKER)
    assert (empty.error_code, empty.error_message, empty.configs) == (
        INVALID_REQUEST, "Group name must not be empty", ())
    # A stored value GroupConfig cannot parse: UNKNOWN_SERVER_ERROR, no message.
    corrupt = describe_group_configs("g", {"consumer.session.timeout.ms": "abc"}, BROKER)
    assert (corrupt.error_code, corrupt.error_message, corrupt.configs) == (UNKNOWN_SERVER_ERROR, None, ())


def test_describe_a_stored_key_this_version_does_not_know() -> None:
    first = describe_group_configs("g", {"later.key": "7"}, BROKER, include_synonyms=True).configs[0]
    assert (first.name, first.value, first.is_sensitive, first.config_type, first.config_source) == (
        "later.key", None, True, ConfigType.UNKNOWN, ConfigSource.GROUP_CONFIG)


# -- effective settings ----------------------------------------------------------------

CUSTOM = BrokerGroupSettings(consumer_session_timeout_ms=50_000, consumer_heartbeat_interval_ms=6_000,
                             share_record_lock_duration_ms=20_000, streams_session_timeout_ms=50_000)


def test_a_group_without_configs_uses_the_brokers_values() -> None:
    settings_ = effective_group_config(CUSTOM, None)
    assert (settings_.consumer_session_timeout_ms, settings_.consumer_heartbeat_interval_ms) == (50_000, 6_000)
    assert settings_.share_record_lock_duration_ms == 20_000
    assert settings_.streams_session_timeout_ms == 50_000
    assert (settings_.share_auto_offset_reset, settings_.share_isolation_level) == ("latest", "read_uncommitted")


def test_a_group_with_configs_uses_them_over_the_brokers() -> None:
    settings_ = effective_group_config(CUSTOM, {"consumer.session.timeout.ms": " 55000",
                                                "share.auto.offset.reset": "by_duration:PT1H"})
    assert (settings_.consumer_session_timeout_ms, settings_.consumer_heartbeat_interval_ms) == (55_000, 6_000)
    assert settings_.share_record_lock_duration_ms == 20_000
    assert settings_.share_auto_offset_reset == "by_duration:PT1H"
    # GroupConfig.fromProps(extractGroupConfigMap, ...): no broker value for streams keys.
    assert settings_.streams_session_timeout_ms == 45_000


def test_effective_refuses_a_stored_value_that_does_not_parse() -> None:
    with pytest.raises(ValueError, match="Not a number of type INT"):
        effective_group_config(BROKER, {"share.heartbeat.interval.ms": "soon"})


# -- the stored form -------------------------------------------------------------------


def test_stored_form() -> None:
    data = encode_group_configs({"share.isolation.level": "read_committed", "consumer.session.timeout.ms": "50000"})
    assert data == (b'{"config":{"consumer.session.timeout.ms":"50000",'
                    b'"share.isolation.level":"read_committed"},"version":1}')
    assert decode_group_configs(data) == {"consumer.session.timeout.ms": "50000",
                                          "share.isolation.level": "read_committed"}
    assert decode_group_configs(b'{"version":1,"config":{}}') == {} == decode_group_configs(b"")
    assert group_config_path("orders") == "/config/groups/orders"
    assert group_config_path("a/b") == "/config/groups/a%2Fb"


@pytest.mark.parametrize(("data", "says"), [
    (b"{", "not UTF-8 JSON"), (b"\xff", "not UTF-8 JSON"), (b"[" * 100_000, "not UTF-8 JSON"),
    (b"[]", "JSON object"), (b'{"version":2,"config":{}}', "version 2"),
    (b'{"version":true,"config":{}}', "version True"), (b'{"config":{}}', "version None"),
    (b'{"version":1}', '"config" object'), (b'{"version":1,"config":[]}', '"config" object'),
    (b'{"version":1,"config":{"b":1,"a":null}}', "non-string values for: a, b"),
])
def test_decode_refuses_what_is_not_kafkas_config_json(data: bytes, says: str) -> None:
    with pytest.raises(GroupConfigFormatError, match=says.replace("(", r"\(")):
        decode_group_configs(data)


# -- properties ------------------------------------------------------------------------

NAMES = st.sampled_from([k.name for k in KEYS]) | st.text(max_size=8)
VALUES = st.sampled_from(["1", "5000", "15000", "45000", "60000", " 50000 ", "x", "-1", "latest",
                          "earliest", "none", "by_duration:PT1H", "read_committed", ""]) | st.text(max_size=12)
OPS = st.builds(ConfigOp, name=NAMES, operation=st.sampled_from([0, 0, 0, 1, 2, 3, 9]),
                value=st.none() | VALUES)


@settings(max_examples=150, deadline=None)
@given(current=st.dictionaries(NAMES, VALUES, max_size=4), ops=st.lists(OPS, max_size=6),
       validate_only=st.booleans())
def test_alter_yields_a_valid_config_or_an_error(current: dict[str, str], ops: list[ConfigOp],
                                                  validate_only: bool) -> None:
    result = alter_group_configs("g", current, ops, BROKER, validate_only=validate_only)
    if result.error_code:
        assert result.error_code in (INVALID_CONFIG, INVALID_REQUEST) and result.error_message
        assert result.configs == current and not result.changed
        return
    assert result.error_message is None
    if result.changed:
        assert validate_group_configs(result.configs, BROKER) is None
        assert describe_group_configs("g", result.configs, BROKER).error_code == 0
        effective_group_config(BROKER, result.configs)
        assert decode_group_configs(encode_group_configs(result.configs)) == result.configs


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(NAMES, VALUES, max_size=6))
def test_alter_of_any_set_of_strings_never_raises(configs: dict[str, str]) -> None:
    ops = [op(name, SET, value) for name, value in configs.items()]
    result = alter_group_configs("g", {}, ops, BROKER)
    assert (result.error_code == 0) is (validate_group_configs(configs, BROKER) is None)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(), st.text()))
def test_stored_form_round_trips(configs: dict[str, str]) -> None:
    assert decode_group_configs(encode_group_configs(configs)) == configs


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64) | st.builds(lambda v: json.dumps(v).encode(), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)))
def test_decode_refuses_or_reads_never_crashes(data: bytes) -> None:
    try:
        configs = decode_group_configs(data)
    except GroupConfigFormatError:
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items())
