"""``ksidecar quotas`` for user and client-id quotas, with kafka-configs.sh's options and output.

The unit tests read the command line and build requests without a network; the bodies are
encoded with our schemas and read back with kafka-python's request classes (an
implementation independent of ours). The end-to-end test runs the command against a real
sidecar in front of Tansu (which serves no client quotas, so the sidecar answers them) with
a real ZooKeeper, and reads Kafka's znodes back with kazoo. Expected values are written by
hand.
"""

from __future__ import annotations

import argparse
import io
from functools import partial
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from protocol.apis import DEFAULT_REGISTRY
from protocol.schema import encode
from proxy.tools import quotas_cli
from proxy.tools.cli import main
from proxy.tools.quotas_cli import Part
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.proxy.conftest import StartSidecar, sidecar_keys
from tests.proxy.test_quota_admin import read_znode

NOWHERE = "127.0.0.1:9"  # never reached: these commands stop at their usage


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ksidecar")
    quotas_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["quotas", "--bootstrap-server", NOWHERE, *argv])


def parts(*argv: str) -> list[Part]:
    return quotas_cli.entity_parts(parse(*argv))


@pytest.mark.parametrize(("argv", "expected"), [
    # Each --entity-name or --entity-default goes with the --entity-type in its position.
    (["--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-name", "p1"],
     [Part("users", 0, "alice"), Part("clients", 0, "p1")]),
    (["--entity-type", "clients", "--entity-default", "--entity-type", "users", "--entity-name", "alice"],
     [Part("clients", 1), Part("users", 0, "alice")]),
    (["--entity-type", "users", "--entity-default", "--entity-type", "clients"],
     [Part("users", 1), Part("clients", 2)]),
    # Kafka pairs by position, not by adjacency: the one name goes with the first type.
    (["--entity-type", "users", "--entity-type", "clients", "--entity-name", "p1"],
     [Part("users", 0, "p1"), Part("clients", 2)]),
    (["--entity-type", "users"], [Part("users", 2)]),
    (["--entity-type", "ips", "--entity-name", "10.0.0.1"], [Part("ips", 0, "10.0.0.1")]),
    # The short forms, in Kafka's order: client, user, ip, then the defaults.
    (["--user", "alice"], [Part("users", 0, "alice")]),
    (["--user", "alice", "--client", "p1"], [Part("clients", 0, "p1"), Part("users", 0, "alice")]),
    (["--user-defaults", "--client", "p1"], [Part("clients", 0, "p1"), Part("users", 1)]),
    (["--client-defaults"], [Part("clients", 1)]),
    (["--ip", "10.0.0.1"], [Part("ips", 0, "10.0.0.1")]),
    (["--ip-defaults"], [Part("ips", 1)]),
    ([], []),
])
def test_entities_pair_types_with_names_as_kafka_configs_does(argv: list[str], expected: list[Part]) -> None:
    assert parts("describe", *argv) == expected


def kp_describe(body: dict[str, Any]) -> tuple[list[tuple[str, int, str | None]], bool]:
    data = encode(DEFAULT_REGISTRY.api(48).request, 1, body)
    request = DescribeClientQuotasRequest[1].decode(io.BytesIO(data))
    return [(c.entity_type, c.match_type, c.match) for c in request.components], request.strict


def test_describe_requests() -> None:
    build = quotas_cli.describe_request
    # Users and clients: strict, as kafka-configs.sh asks (ClientQuotaFilter.containsOnly).
    assert kp_describe(build(parts("describe", "--entity-type", "users", "--entity-name", "alice",
                                   "--entity-type", "clients", "--entity-default"))) == (
        [("user", 0, "alice"), ("client-id", 1, None)], True)
    assert kp_describe(build(parts("describe", "--entity-type", "clients"))) == ([("client-id", 2, None)], True)
    assert kp_describe(build(parts("describe", "--user-defaults"))) == ([("user", 1, None)], True)
    # IPs as before: not strict; no entity at all lists everything.
    assert kp_describe(build(parts("describe", "--ip", "10.1.2.3"))) == ([("ip", 0, "10.1.2.3")], False)
    assert kp_describe(build(parts("describe", "--ip-defaults"))) == ([("ip", 1, None)], False)
    assert kp_describe(build(parts("describe"))) == ([], False)


def alter_body(*argv: str) -> dict[str, Any]:
    args = parse("alter", *argv)
    entity = quotas_cli.entity_parts(args)
    ops = quotas_cli.alter_ops(entity, quotas_cli.parse_add_config(args.add_config),
                               quotas_cli.parse_delete_config(args.delete_config))
    return quotas_cli.alter_request(entity, ops)


def kp_alter(body: dict[str, Any]) -> list[tuple[list[tuple[str, str | None]], list[tuple[str, float, bool]]]]:
    data = encode(DEFAULT_REGISTRY.api(49).request, 1, body)
    request = AlterClientQuotasRequest[1].decode(io.BytesIO(data))
    assert request.validate_only is False
    return [([(e.entity_type, e.entity_name) for e in entry.entity], [(o.key, o.value, o.remove) for o in entry.ops])
            for entry in request.entries]


def test_alter_requests() -> None:
    assert kp_alter(alter_body("--entity-type", "users", "--entity-name", "alice",
                               "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")) == [
        ([("user", "alice")], [("producer_byte_rate", 1048576.0, False), ("consumer_byte_rate", 2097152.0, False)])]
    # Clients named first still send the user first; the default is a null name.
    assert kp_alter(alter_body("--entity-type", "clients", "--entity-name", "p1", "--entity-type", "users",
                               "--entity-default", "--add-config", " producer_byte_rate = 10 ",
                               "--delete-config", "consumer_byte_rate,request_percentage")) == [
        ([("user", None), ("client-id", "p1")],
         [("producer_byte_rate", 10.0, False), ("consumer_byte_rate", 0.0, True), ("request_percentage", 0.0, True)])]
    assert kp_alter(alter_body("--entity-type", "clients", "--entity-default", "--delete-config", "producer_byte_rate")) == [
        ([("client-id", None)], [("producer_byte_rate", 0.0, True)])]
    # The keys the sidecar refuses go out: its answer says why.
    assert kp_alter(alter_body("--user", "alice", "--add-config", "request_percentage=50.5")) == [
        ([("user", "alice")], [("request_percentage", 50.5, False)])]
    # Repeated --add-config and --delete-config add up; a key set twice keeps the last value.
    assert kp_alter(alter_body("--client", "p1", "--add-config", "producer_byte_rate=1", "--add-config",
                               "producer_byte_rate=2e3", "--delete-config", "consumer_byte_rate",
                               "--delete-config", "consumer_byte_rate")) == [
        ([("client-id", "p1")], [("producer_byte_rate", 2000.0, False), ("consumer_byte_rate", 0.0, True)])]
    assert kp_alter(alter_body("--ip-defaults", "--add-config", "connection_creation_rate=30")) == [
        ([("ip", None)], [("connection_creation_rate", 30.0, False)])]


@pytest.mark.parametrize(("argv", "message"), [
    (["alter", "--add-config", "producer_byte_rate=1"], "alter needs an entity: --entity-type users|clients|ips"),
    (["alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"],
     "alter needs --entity-name or --entity-default with each --entity-type"),
    (["alter", "--entity-type", "users", "--entity-name", "a", "--entity-type", "clients",
      "--add-config", "producer_byte_rate=1"], "alter needs --entity-name or --entity-default with each --entity-type"),
    (["describe", "--entity-type", "topics"], "--entity-type: 'topics' is not an entity type here"),
    (["describe", "--entity-type", "users", "--entity-type", "users"], "duplicate entity type(s): users"),
    (["describe", "--user", "a", "--user-defaults"], "duplicate entity type(s): users"),
    (["describe", "--entity-type", "users", "--entity-type", "ips"], "only 'users' and 'clients' entity types"),
    (["describe", "--ip", "10.0.0.1", "--client", "p1"], "only 'users' and 'clients' entity types"),
    (["describe", "--entity-type", "users", "--client", "p1"], "--entity-type, --entity-name and --entity-default do not mix"),
    (["describe", "--entity-name", "alice"], "more --entity-name/--entity-default than --entity-type"),
    (["describe", "--entity-type", "users", "--entity-name", ""], "an empty entity name"),
    (["alter", "--user", "alice"], "alter needs --add-config or --delete-config"),
    (["alter", "--user", "alice", "--add-config", "producer_byte_rate"], '--add-config: \'producer_byte_rate\': all configs'),
    (["alter", "--user", "alice", "--add-config", "producer_byte_rate=1,"], "--add-config: '': all configs"),
    (["alter", "--user", "alice", "--add-config", "producer_byte_rate=fast"],
     "--add-config: cannot parse quota configuration value for producer_byte_rate: fast"),
    (["alter", "--user", "alice", "--add-config", "producer_byte_rate=1_000"], "cannot parse quota configuration value"),
    (["alter", "--user", "alice", "--add-config", "producer_byte_rate=inf"], "cannot parse quota configuration value"),
    (["alter", "--user", "alice", "--add-config", "SCRAM-SHA-256=x"],
     "--add-config: 'SCRAM-SHA-256' is not a user or client-id quota"),
    (["alter", "--client", "p1", "--add-config", "connection_creation_rate=5"],
     "--add-config: 'connection_creation_rate' is not a user or client-id quota"),
    (["alter", "--user", "alice", "--delete-config", "producer_byte_rate,,consumer_byte_rate"],
     "--delete-config: an empty key"),
    (["alter", "--user", "alice", "--delete-config", "connection_creation_rate"],
     "--delete-config: 'connection_creation_rate' is not a user or client-id quota"),
    (["alter", "--ip", "10.0.0.1", "--add-config", "producer_byte_rate=1"], "--add-config takes connection_creation_rate=N"),
    (["alter", "--ip", "10.0.0.1", "--add-config", "connection_creation_rate=x"], "'x' is not a number"),
    (["alter", "--entity-type", "ips", "--entity-default", "--delete-config", "producer_byte_rate"],
     "--delete-config takes connection_creation_rate"),
])
def test_bad_usage_exits_2_naming_the_option(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quotas", "--bootstrap-server", NOWHERE, *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("ksidecar quotas: ") and captured.err.count("\n") == 1
    assert message in captured.err


@pytest.mark.parametrize(("value", "text"), [
    (1048576.0, "1048576.0"), (2097152.0, "2097152.0"), (0.5, "0.5"), (50.25, "50.25"), (0.001, "0.001"),
    (9999999.0, "9999999.0"), (1e7, "1.0E7"), (10485760.0, "1.048576E7"), (0.00015, "1.5E-4"),
    (9.223372036854776e18, "9.223372036854776E18"), (0.0, "0.0"),
])
def test_values_print_as_javas_double_to_string(value: float, text: str) -> None:
    assert quotas_cli.java_double_text(value) == text


def test_describe_and_completed_lines() -> None:
    line = quotas_cli.describe_line
    assert line([("user", "alice"), ("client-id", "p1")], [("producer_byte_rate", 1048576.0)]) == (
        "Quota configs for user-principal 'alice', client-id 'p1' are producer_byte_rate=1048576.0")
    # The user always comes first, whatever order the answer has.
    assert line([("client-id", None), ("user", None)], [("consumer_byte_rate", 2e7), ("producer_byte_rate", 1.0)]) == (
        "Quota configs for the default user-principal, the default client-id are "
        "consumer_byte_rate=2.0E7, producer_byte_rate=1.0")
    assert line([("client-id", "p1")], [("request_percentage", 12.5)]) == (
        "Quota configs for client-id 'p1' are request_percentage=12.5")
    assert line([("ip", "10.1.2.3")], [("connection_creation_rate", 100.0)]) == (
        "Quota configs for ip '10.1.2.3' are connection_creation_rate=100")
    assert line([("ip", None)], [("connection_creation_rate", 30.0)]) == (
        "Quota configs for the default IP are connection_creation_rate=30")

    done = quotas_cli.completed_line
    assert done([Part("users", 0, "alice"), Part("clients", 0, "p1")]) == "Completed updating config for user alice."
    assert done([Part("clients", 0, "p1"), Part("users", 0, "alice")]) == "Completed updating config for client p1."
    assert done([Part("users", 1)]) == "Completed updating default config for users in the cluster."
    assert done([Part("clients", 1)]) == "Completed updating default config for clients in the cluster."
    assert done([Part("ips", 0, "10.1.2.3")]) == "Completed updating config for ip '10.1.2.3'."
    assert done([Part("ips", 1)]) == "Completed updating config for the default IP."


class FakeSidecar:
    """Stands in for :class:`AdminClient`: records each call, answers from a list."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[int, int, dict[str, Any]]] = []

    def __call__(self, bootstrap: str) -> FakeSidecar:
        return self

    def __enter__(self) -> FakeSidecar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.calls.append((api_key, version, body))
        return self.answers.pop(0)


def described(*entries: tuple[list[tuple[str, str | None]], list[tuple[str, float]]],
              error: int = 0, message: str | None = None) -> Any:
    return SimpleNamespace(ErrorCode=error, ErrorMessage=message, Entries=[
        SimpleNamespace(Entity=[SimpleNamespace(EntityType=t, EntityName=n) for t, n in entity],
                        Values=[SimpleNamespace(Key=k, Value=v) for k, v in values])
        for entity, values in entries])


def altered(error: int = 0, message: str | None = None) -> Any:
    return SimpleNamespace(Entries=[SimpleNamespace(ErrorCode=error, ErrorMessage=message)])


def run_with(fake: FakeSidecar, monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    monkeypatch.setattr(quotas_cli, "AdminClient", fake)
    return main(["quotas", "--bootstrap-server", NOWHERE, *argv])


def test_describe_prints_each_entity_and_the_sidecars_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeSidecar([described(([("user", "alice"), ("client-id", None)], [("producer_byte_rate", 1024.0)]),
                                  ([("user", "alice"), ("client-id", "p1")], [("consumer_byte_rate", 2048.0),
                                                                               ("producer_byte_rate", 1e9)]))])
    assert run_with(fake, monkeypatch, "describe", "--entity-type", "users", "--entity-name", "alice",
                    "--entity-type", "clients") == 0
    assert capsys.readouterr().out == (
        "Quota configs for user-principal 'alice', the default client-id are producer_byte_rate=1024.0\n"
        "Quota configs for user-principal 'alice', client-id 'p1' are consumer_byte_rate=2048.0, "
        "producer_byte_rate=1.0E9\n")
    assert fake.calls == [(48, 1, {"Components": [{"EntityType": "user", "MatchType": 0, "Match": "alice"},
                                                  {"EntityType": "client-id", "MatchType": 2, "Match": None}],
                                   "Strict": True})]

    # Nothing matched: kafka-configs.sh prints nothing for users and clients.
    assert run_with(FakeSidecar([described()]), monkeypatch, "describe", "--client", "p9") == 0
    assert capsys.readouterr().out == ""
    assert run_with(FakeSidecar([described()]), monkeypatch, "describe") == 0
    assert capsys.readouterr().out == "No quotas.\n"
    assert run_with(FakeSidecar([described()]), monkeypatch, "describe", "--ip-defaults") == 0
    assert capsys.readouterr().out == "No per-IP quotas.\n"

    refusal = described(error=35, message="Unsupported entity type group")
    assert run_with(FakeSidecar([refusal]), monkeypatch, "describe", "--user", "alice") == 1
    assert capsys.readouterr().err == "ksidecar quotas: error 35: Unsupported entity type group\n"


def test_alter_prints_the_sidecars_refusal(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    reason = "request_percentage is not enforced by the sidecar"
    fake = FakeSidecar([altered(42, reason)])
    assert run_with(fake, monkeypatch, "alter", "--user", "alice", "--add-config", "request_percentage=50") == 1
    assert capsys.readouterr().err == f"ksidecar quotas: refused (42): {reason}\n"
    assert [call[0] for call in fake.calls] == [49]


def test_deleting_a_key_the_entity_lacks_is_refused_before_altering(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # kafka-configs.sh reads the entity (strictly) first: "Invalid config(s): ...", exit 1.
    fake = FakeSidecar([described(([("client-id", None)], [("producer_byte_rate", 5.0)]))])
    assert run_with(fake, monkeypatch, "alter", "--client-defaults",
                    "--delete-config", "consumer_byte_rate,producer_byte_rate,request_percentage") == 1
    assert capsys.readouterr().err == "ksidecar quotas: Invalid config(s): consumer_byte_rate,request_percentage\n"
    assert fake.calls == [(48, 1, {"Components": [{"EntityType": "client-id", "MatchType": 1, "Match": None}],
                                   "Strict": True})]

    fake = FakeSidecar([described(([("client-id", None)], [("producer_byte_rate", 5.0)])), altered()])
    assert run_with(fake, monkeypatch, "alter", "--client-defaults", "--delete-config", "producer_byte_rate") == 0
    assert capsys.readouterr().out == "Completed updating default config for clients in the cluster.\n"
    assert [call[0] for call in fake.calls] == [48, 49]

    # Per-IP quotas keep their behaviour: no read first.
    fake = FakeSidecar([altered()])
    assert run_with(fake, monkeypatch, "alter", "--ip", "10.0.0.1", "--delete-config", "connection_creation_rate") == 0
    assert capsys.readouterr().out == "Completed updating config for ip '10.0.0.1'.\n"
    assert [call[0] for call in fake.calls] == [49]


@pytest.mark.integration
async def test_user_and_client_quotas_from_the_command_line(
    start_sidecar: StartSidecar, zookeeper: ZooKeeperServer, zk_path: str, tansu: TansuServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    connect = zookeeper.connect_string(zk_path)
    sidecar = await start_sidecar(sidecar_keys(tansu.bootstrap, zookeeper_connect=connect))
    with trio.fail_after(20):  # auto: the sidecar enforces once it has seen Tansu lacks the API
        while not sidecar.client_quotas.enforcing:
            await trio.sleep(0.05)
    bootstrap = f"127.0.0.1:{sidecar.bound['PLAINTEXT'].port}"

    async def cli(*args: str) -> int:
        return await trio.to_thread.run_sync(partial(main, ["quotas", "--bootstrap-server", bootstrap, *args]))

    async def alter(*args: str) -> str:
        capsys.readouterr()
        assert await cli("alter", *args) == 0, capsys.readouterr().err
        return capsys.readouterr().out

    async def describe(*args: str, expect: str) -> None:
        """Describe until the sidecar's ZooKeeper watch has delivered what was altered."""
        out = ""
        with trio.move_on_after(10):
            while True:
                capsys.readouterr()
                assert await cli("describe", *args) == 0, capsys.readouterr().err
                out = capsys.readouterr().out
                if out == expect:
                    return
                await trio.sleep(0.05)
        assert out == expect

    async def znode(path: str) -> dict[str, object] | None:
        return await trio.to_thread.run_sync(read_znode, connect, path)

    assert await alter("--entity-type", "users", "--entity-name", "alice",
                       "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152") == (
        "Completed updating config for user alice.\n")
    assert await alter("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                       "--entity-name", "p1", "--add-config", "producer_byte_rate=524288") == (
        "Completed updating config for user alice.\n")
    assert await alter("--client-defaults", "--add-config", "consumer_byte_rate=100000") == (
        "Completed updating default config for clients in the cluster.\n")
    assert await alter("--entity-type", "clients", "--entity-name", "p1", "--add-config", "producer_byte_rate=10485760") == (
        "Completed updating config for client p1.\n")
    assert await alter("--user-defaults", "--add-config", "producer_byte_rate=2048") == (
        "Completed updating default config for users in the cluster.\n")
    assert await alter("--user", "bob@EXAMPLE.COM", "--add-config", "consumer_byte_rate=4096") == (
        "Completed updating config for user bob@EXAMPLE.COM.\n")
    assert await alter("--ip", "10.1.2.3", "--add-config", "connection_creation_rate=100") == (
        "Completed updating config for ip '10.1.2.3'.\n")

    # Kafka's znodes, Kafka's JSON; names sanitized as Kafka's Sanitizer does.
    assert await znode("/config/users/alice") == {
        "version": 1, "config": {"producer_byte_rate": "1048576", "consumer_byte_rate": "2097152"}}
    assert await znode("/config/users/alice/clients/p1") == {"version": 1, "config": {"producer_byte_rate": "524288"}}
    assert await znode("/config/clients/<default>") == {"version": 1, "config": {"consumer_byte_rate": "100000"}}
    assert await znode("/config/clients/p1") == {"version": 1, "config": {"producer_byte_rate": "10485760"}}
    assert await znode("/config/users/<default>") == {"version": 1, "config": {"producer_byte_rate": "2048"}}
    assert await znode("/config/users/bob%40EXAMPLE.COM") == {"version": 1, "config": {"consumer_byte_rate": "4096"}}

    await describe("--entity-type", "users", "--entity-name", "alice", expect=(
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0\n"))
    await describe("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", expect=(
        "Quota configs for user-principal 'alice', client-id 'p1' are producer_byte_rate=524288.0\n"))
    await describe("--user", "alice", "--client", "p1", expect=(
        "Quota configs for user-principal 'alice', client-id 'p1' are producer_byte_rate=524288.0\n"))
    await describe("--entity-type", "clients", expect=(
        "Quota configs for the default client-id are consumer_byte_rate=100000.0\n"
        "Quota configs for client-id 'p1' are producer_byte_rate=1.048576E7\n"))
    await describe("--entity-type", "users", expect=(
        "Quota configs for the default user-principal are producer_byte_rate=2048.0\n"
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0\n"
        "Quota configs for user-principal 'bob@EXAMPLE.COM' are consumer_byte_rate=4096.0\n"))
    await describe("--client-defaults", expect="Quota configs for the default client-id are consumer_byte_rate=100000.0\n")
    await describe("--user", "carol", expect="")
    await describe(expect=(
        "Quota configs for the default client-id are consumer_byte_rate=100000.0\n"
        "Quota configs for client-id 'p1' are producer_byte_rate=1.048576E7\n"
        "Quota configs for the default user-principal are producer_byte_rate=2048.0\n"
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0\n"
        "Quota configs for user-principal 'alice', client-id 'p1' are producer_byte_rate=524288.0\n"
        "Quota configs for user-principal 'bob@EXAMPLE.COM' are consumer_byte_rate=4096.0\n"
        "Quota configs for ip '10.1.2.3' are connection_creation_rate=100\n"))

    # Removing: the client-id entity's last quota takes its znode; a user's znode stays.
    assert await alter("--entity-type", "clients", "--entity-default", "--delete-config", "consumer_byte_rate") == (
        "Completed updating default config for clients in the cluster.\n")
    assert await znode("/config/clients/<default>") is None
    assert await alter("--user", "alice", "--delete-config", "consumer_byte_rate") == (
        "Completed updating config for user alice.\n")
    assert await znode("/config/users/alice") == {"version": 1, "config": {"producer_byte_rate": "1048576"}}
    await describe("--entity-type", "clients", expect=(
        "Quota configs for client-id 'p1' are producer_byte_rate=1.048576E7\n"))
    await describe("--user", "alice", expect="Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0\n")

    # Refusals: a key the entity lacks (checked first, as kafka-configs.sh does), the key
    # the sidecar does not enforce (its reason), a value Kafka refuses (its message).
    capsys.readouterr()
    assert await cli("alter", "--user", "alice", "--delete-config", "consumer_byte_rate") == 1
    assert capsys.readouterr().err == "ksidecar quotas: Invalid config(s): consumer_byte_rate\n"
    assert await cli("alter", "--user", "alice", "--add-config", "request_percentage=50") == 1
    err = capsys.readouterr().err
    assert err.startswith("ksidecar quotas: refused (42): request_percentage is not enforced by the sidecar"), err
    # controller_mutation_rate is enforced here (KIP-599): set, stored as Kafka stores a
    # DOUBLE key, and removed again.
    assert await alter("--client", "p1", "--add-config", "controller_mutation_rate=10") == (
        "Completed updating config for client p1.\n")
    assert await znode("/config/clients/p1") == {"version": 1, "config": {
        "producer_byte_rate": "10485760", "controller_mutation_rate": "10.0"}}
    assert await alter("--client", "p1", "--delete-config", "controller_mutation_rate") == (
        "Completed updating config for client p1.\n")
    assert await cli("alter", "--client", "p1", "--add-config", "producer_byte_rate=0") == 1
    assert capsys.readouterr().err == "ksidecar quotas: refused (42): Quota producer_byte_rate must be greater than 0\n"
    assert await cli("alter", "--client", "p1", "--add-config", "producer_byte_rate=1.5") == 1
    assert capsys.readouterr().err == "ksidecar quotas: refused (42): producer_byte_rate cannot be a fractional value.\n"
    assert await znode("/config/clients/p1") == {"version": 1, "config": {"producer_byte_rate": "10485760"}}
    assert await znode("/config/users/alice") == {"version": 1, "config": {"producer_byte_rate": "1048576"}}
