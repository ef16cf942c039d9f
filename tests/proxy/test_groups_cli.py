"""``ksidecar groups`` against a real embedded sidecar (real Tansu, real ZooKeeper).

A confluent-kafka consumer joins a classic group and commits chosen offsets, a second one
keeps a KIP-848 group alive; the command then lists, describes, refuses to reset the
active group, resets it once it is empty, and deletes it. Every expected output is
written out by hand (the member ids, which the coordinator makes up, are read from the
output and checked for their shape).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import trio

from proxy.tools.cli import main
from proxy.tools.groups_cli import consumer_assignment, parse_topic, table
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from tests.proxy.conftest import StartSidecar, sidecar_keys

RECORDS = {0: 10, 1: 20, 2: 30}
"""Records produced to each partition of the test topic."""

COMMITTED = {0: 4, 1: 20}
"""What the classic member commits (partition 2: nothing)."""

CLASSIC_MEMBER = re.compile(r"cli-test-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


# -- no network --------------------------------------------------------------------------------


def test_table_pads_each_column_to_its_widest_cell() -> None:
    assert table(["GROUP", "LAG"], [["a", 1], ["longer-name", 12345]]) == (
        "GROUP       LAG\n"
        "a           1\n"
        "longer-name 12345"
    )


def test_topic_specs() -> None:
    assert parse_topic("orders") == ("orders", None)
    assert parse_topic("orders:2,0,2") == ("orders", (0, 2))
    assert parse_topic("a:b:1") == ("a:b", (1,))


@pytest.mark.parametrize("spec", ["orders:x", "orders:", ":1", "orders:-1"])
def test_bad_topic_specs_are_usage_errors(spec: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["groups", "--bootstrap-server", "127.0.0.1:1", "reset-offsets", "--group", "g",
                 "--topic", spec, "--to-earliest"])
    assert code == 2  # checked before anything is asked of the cluster
    assert capsys.readouterr().err.startswith(f"ksidecar groups: --topic {spec!r}: ")


def test_unreachable_sidecar(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["groups", "--bootstrap-server", "127.0.0.1:1", "list"]) == 1
    assert capsys.readouterr().err == "Error: cannot connect to 127.0.0.1:1: [Errno 111] Connection refused\n"


def test_consumer_assignment_bytes() -> None:
    # ConsumerProtocolAssignment v0 by hand: version, [topic, [partitions]], user data (null).
    data = (b"\x00\x00" + b"\x00\x00\x00\x02"
            + b"\x00\x01b" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x03"
            + b"\x00\x01a" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x00"
            + b"\xff\xff\xff\xff")
    assert consumer_assignment(data) == (("a", 0), ("a", 1), ("b", 3))
    assert consumer_assignment(b"") == ()
    assert consumer_assignment(b"\x00\x00\x00") == ()  # truncated: nothing, no exception


# -- through a sidecar -------------------------------------------------------------------------


def produce(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, len(RECORDS), 1)])[topic].result(10)
    # One record per batch: Tansu 0.6.0 (memory engine) reports a partition's log end as
    # the last batch's base offset + 1, so a batch of 10 would show a log end of 1.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for partition, count in RECORDS.items():
        for i in range(count):
            producer.produce(topic, value=str(i).encode(), partition=partition)
            assert producer.flush(10) == 0


class Member(threading.Thread):
    """A confluent-kafka consumer that waits for its assignment, commits ``commit`` (if
    any), and polls until told to stop; ``close()`` leaves the group."""

    def __init__(self, bootstrap: str, group: str, topic: str, config: dict[str, Any],
                 commit: dict[int, int] | None = None) -> None:
        super().__init__(daemon=True)
        self.config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "earliest", **config}
        self.topic, self.commit = topic, commit
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        try:
            consumer = Consumer(self.config)
            consumer.subscribe([self.topic])
            try:
                while not self.stop.is_set():
                    consumer.poll(0.1)
                    if not self.ready.is_set() and len(consumer.assignment()) == len(RECORDS):
                        if self.commit:
                            consumer.commit(offsets=[TopicPartition(self.topic, p, o)
                                                     for p, o in self.commit.items()], asynchronous=False)
                        self.ready.set()
            finally:
                consumer.close()
        except BaseException as exc:  # reported by the test
            self.error = exc
            self.ready.set()


async def wait_for(predicate: Callable[[], bool], seconds: float) -> None:
    """Poll a cheap, non-blocking ``predicate`` (the sidecar runs in this trio run)."""
    with trio.fail_after(seconds):
        while not predicate():
            await trio.sleep(0.1)


@pytest.mark.integration
@pytest.mark.slow
async def test_groups_command_through_an_embedded_sidecar(
    start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sidecar = await start_sidecar(sidecar_keys(
        tansu.bootstrap, zookeeper_connect=f"{zookeeper.connect}{zk_path}", sidecar_coordinator="embedded",
        group_initial_rebalance_delay_ms="200", group_min_session_timeout_ms="1000",
        sidecar_coordinator_metadata_refresh_ms="500",
    ))
    port = sidecar.bound["PLAINTEXT"].port
    bootstrap = f"127.0.0.1:{port}"
    assert len(str(port)) == 5  # the hand-written widths below assume it (ephemeral ports)
    topic = f"cli-{uuid.uuid4().hex[:8]}"  # 12 characters, like every topic column below
    await trio.to_thread.run_sync(produce, bootstrap, topic)

    async def groups(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = await trio.to_thread.run_sync(lambda: main(["groups", "--bootstrap-server", bootstrap, *args]))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    classic = Member(bootstrap, "orders-app", topic, {"client.id": "cli-test",
                                                      "partition.assignment.strategy": "range"}, COMMITTED)
    kip848 = Member(bootstrap, "audit-app", topic, {"client.id": "kip-test", "group.protocol": "consumer"})
    members = [classic, kip848]
    try:
        for member in members:
            member.start()
        await wait_for(lambda: all(m.ready.is_set() for m in members), 60)
        for member in members:
            assert member.error is None, member.error
        # The KIP-848 member reconciles after its heartbeat: wait for the group to be Stable.
        with trio.fail_after(30):
            while "audit-app  consumer Stable" not in (await groups("list", "--type", "--state"))[1]:
                await trio.sleep(0.2)

        assert await groups("list") == (0, "audit-app\norders-app\n", "")
        assert await groups("list", "--state") == (0, (
            "GROUP      STATE\n"
            "audit-app  Stable\n"
            "orders-app Stable\n"), "")
        assert await groups("list", "--type", "consumer") == (0, (
            "GROUP     TYPE\n"
            "audit-app consumer\n"), "")
        assert await groups("list", "--state", "Empty") == (0, "GROUP STATE\n", "")

        code, out, err = await groups("describe", "--group", "orders-app")
        assert (code, err) == (0, "")
        (member_id,) = set(CLASSIC_MEMBER.findall(out))
        m = member_id
        assert out == (
            "\n"
            "GROUP      TOPIC        PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID                                   HOST       CLIENT-ID\n"
            f"orders-app {topic} 0         4              10             6   {m} /127.0.0.1 cli-test\n"
            f"orders-app {topic} 1         20             20             0   {m} /127.0.0.1 cli-test\n"
            f"orders-app {topic} 2         -              30             -   {m} /127.0.0.1 cli-test\n"
        )
        assert await groups("describe", "--group", "orders-app", "--members") == (0, (
            "\n"
            "GROUP      CONSUMER-ID                                   HOST       CLIENT-ID #PARTITIONS\n"
            f"orders-app {m} /127.0.0.1 cli-test  3\n"), "")
        assert await groups("describe", "--group", "orders-app", "--state") == (0, (
            "\n"
            "GROUP      COORDINATOR (ID)      ASSIGNMENT-STRATEGY STATE  #MEMBERS\n"
            f"orders-app {bootstrap} ({sidecar.broker_id}) range               Stable 1\n"), "")

        # The KIP-848 group: described by ConsumerGroupDescribe, its member id made by the client.
        code, out, err = await groups("describe", "--group", "audit-app", "--members", "--verbose")
        assert (code, err) == (0, "")
        lines = out.split("\n")
        k = lines[2].split()[1]
        width = max(len("CONSUMER-ID"), len(k))
        assert lines == [
            "",
            f"GROUP     {'CONSUMER-ID'.ljust(width)} HOST       CLIENT-ID #PARTITIONS ASSIGNMENT",
            f"audit-app {k.ljust(width)} /127.0.0.1 kip-test  3           {topic}(0,1,2)",
            "",
        ]
        assert await groups("describe", "--group", "audit-app", "--state") == (0, (
            "\n"
            "GROUP     COORDINATOR (ID)      ASSIGNMENT-STRATEGY STATE  #MEMBERS\n"
            f"audit-app {bootstrap} ({sidecar.broker_id}) uniform             Stable 1\n"), "")

        # Kafka's rule: no reset while the group has members; no delete either.
        assert await groups("reset-offsets", "--group", "orders-app", "--topic", topic, "--to-earliest",
                            "--execute") == (1, "", (
            "Error: Assignments can only be reset if the group 'orders-app' is inactive, but the "
            "current state is Stable.\n"))
        assert await groups("delete", "--group", "orders-app") == (1, "", (
            "Deletion of some consumer groups failed:\n"
            "* Group 'orders-app' could not be deleted due to: NON_EMPTY_GROUP (68): the group has "
            "active members\n"))

        classic.stop.set()
        await trio.to_thread.run_sync(classic.join, 30)
        assert classic.error is None, classic.error

        assert await groups("describe", "--group", "orders-app") == (0, (
            "\n"
            "Consumer group 'orders-app' has no active members.\n"
            "\n"
            "GROUP      TOPIC        PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID\n"
            f"orders-app {topic} 0         4              10             6   -           -    -\n"
            f"orders-app {topic} 1         20             20             0   -           -    -\n"), "")
        assert await groups("describe", "--group", "orders-app", "--members") == (
            0, "\nConsumer group 'orders-app' has no active members.\n", "")

        # A dry run changes nothing.
        assert await groups("reset-offsets", "--group", "orders-app", "--topic", topic, "--to-earliest",
                            "--dry-run") == (0, (
            "\n"
            "GROUP      TOPIC        PARTITION NEW-OFFSET\n"
            f"orders-app {topic} 0         0\n"
            f"orders-app {topic} 1         0\n"
            f"orders-app {topic} 2         0\n"), "")
        # Neither --dry-run nor --execute: a dry run, with a warning.
        assert await groups("reset-offsets", "--group", "orders-app", "--all-topics", "--to-latest") == (0, (
            "\n"
            "GROUP      TOPIC        PARTITION NEW-OFFSET\n"
            f"orders-app {topic} 0         10\n"
            f"orders-app {topic} 1         20\n"), (
            "Warning: no action is performed without --execute; add --dry-run to say that is what "
            "you want.\n"))
        # Partition 1 has 20 records: 25 is clamped to its log end.
        assert await groups("reset-offsets", "--group", "orders-app", "--topic", f"{topic}:1,2",
                            "--to-offset", "25", "--execute") == (0, (
            "\n"
            "GROUP      TOPIC        PARTITION NEW-OFFSET\n"
            f"orders-app {topic} 1         20\n"
            f"orders-app {topic} 2         25\n"), (
            f"Warning: new offset (25) is higher than the latest offset for {topic}-1; it will be set "
            "to 20.\n"))
        assert await groups("reset-offsets", "--group", "orders-app", "--topic", f"{topic}:0",
                            "--to-earliest", "--execute") == (0, (
            "\n"
            "GROUP      TOPIC        PARTITION NEW-OFFSET\n"
            f"orders-app {topic} 0         0\n"), "")
        assert await groups("describe", "--group", "orders-app") == (0, (
            "\n"
            "Consumer group 'orders-app' has no active members.\n"
            "\n"
            "GROUP      TOPIC        PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID\n"
            f"orders-app {topic} 0         0              10             10  -           -    -\n"
            f"orders-app {topic} 1         20             20             0   -           -    -\n"
            f"orders-app {topic} 2         25             30             5   -           -    -\n"), "")

        # Bad requests: clear errors, nothing changed.
        assert await groups("reset-offsets", "--group", "orders-app", "--topic", f"{topic}:7",
                            "--to-earliest", "--execute") == (1, "", (
            f"Error: topic '{topic}' has no partition 7 (it has 3)\n"))
        assert await groups("reset-offsets", "--group", "orders-app", "--topic", "no-such-topic",
                            "--to-earliest", "--execute") == (1, "", "Error: topic 'no-such-topic' does not exist\n")
        assert await groups("reset-offsets", "--group", "orders-app", "--topic", f"{topic}:x",
                            "--to-earliest", "--execute") == (2, "", (
            f"ksidecar groups: --topic '{topic}:x': partitions are numbers, as in {topic}:0,1,2\n"))

        # A reset of an unknown group creates it with those offsets (Kafka does the same).
        assert (await groups("reset-offsets", "--group", "new-app", "--topic", f"{topic}:2",
                             "--to-offset", "3", "--execute"))[0] == 0
        assert await groups("list", "--state") == (0, (
            "GROUP      STATE\n"
            "audit-app  Stable\n"
            "new-app    Empty\n"
            "orders-app Empty\n"), "")

        assert await groups("delete", "--group", "orders-app", "--group", "new-app") == (
            0, "Deletion of requested consumer groups ('orders-app', 'new-app') was successful.\n", "")
        assert await groups("describe", "--group", "orders-app") == (
            1, "", "Error: Consumer group 'orders-app' does not exist.\n")
        assert await groups("delete", "--group", "orders-app") == (1, "", (
            "Deletion of some consumer groups failed:\n"
            "* Group 'orders-app' could not be deleted due to: GROUP_ID_NOT_FOUND (69): the group "
            "does not exist\n"))
        assert await groups("list") == (0, "audit-app\n", "")
    finally:
        for member in members:
            member.stop.set()
        for member in members:
            await trio.to_thread.run_sync(member.join, 30)
    assert kip848.error is None, kip848.error

