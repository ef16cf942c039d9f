"""``ksidecar share-groups``: its tables and argument checks (no network), and the whole
command against a real embedded sidecar (real Tansu, real ZooKeeper) with one
confluent-kafka ShareConsumer.

The consumer reads until it has some records, acknowledges them explicitly and commits,
then reads no more: the start offset of each share-partition must then be the first offset
it did not acknowledge, counted here by hand from what it read. Every expected output is
written out by hand (the member id, which the client makes up, is read from the output and
checked for its shape).
"""

from __future__ import annotations

import argparse
import re
import threading
from collections.abc import Callable

import pytest
import trio

from proxy.tools.cli import main
from proxy.tools.groups_cli import Broker, UsageError
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperServer
from proxy.tools.share_groups_cli import (
    ShareGroup,
    ShareMember,
    StartOffset,
    add_parser,
    assignment_text,
    check_arguments,
    members_table,
    offsets_table,
    parse_datetime,
    state_table,
)
from tests.proxy.conftest import StartSidecar
from tests.proxy.test_features import SAFE, update
from tests.proxy.test_share_groups import PARTITIONS, prepare, share_sidecar

COORDINATOR = Broker(node_id=7, host="127.0.0.1", port=19092)


# -- no network --------------------------------------------------------------------------------


def test_offsets_table_in_kafkas_columns() -> None:
    offsets = {("orders", 1): StartOffset(start_offset=40, leader_epoch=3, lag=2),
               ("orders", 0): StartOffset(start_offset=7, leader_epoch=None, lag=None),
               ("audit", 0): StartOffset(start_offset=None)}
    assert offsets_table("app", offsets) == (
        "GROUP TOPIC  PARTITION START-OFFSET LAG\n"
        "app   audit  0         -            -\n"
        "app   orders 0         7            -\n"
        "app   orders 1         40           2"
    )
    assert offsets_table("app", offsets, verbose=True) == (
        "GROUP TOPIC  PARTITION LEADER-EPOCH START-OFFSET LAG\n"
        "app   audit  0         -            -            -\n"
        "app   orders 0         -            7            -\n"
        "app   orders 1         3            40           2"
    )


def test_members_table_sorted_by_member_id() -> None:
    group = ShareGroup(group_id="app", state="Stable", coordinator=COORDINATOR, group_epoch=5, assignment_epoch=5,
                       members=(ShareMember(member_id="zz", client_id="c2", host="/10.0.0.2", member_epoch=5),
                                ShareMember(member_id="aa", client_id="c1", host="/10.0.0.1", member_epoch=4,
                                            partitions=(("orders", 2), ("audit", 0), ("orders", 0)))))
    assert members_table(group) == (
        "GROUP CONSUMER-ID HOST      CLIENT-ID #PARTITIONS ASSIGNMENT\n"
        "app   aa          /10.0.0.1 c1        3           audit:0;orders:0,2\n"
        "app   zz          /10.0.0.2 c2        0           -"
    )
    assert members_table(group, verbose=True).split("\n")[:2] == [
        "GROUP CONSUMER-ID HOST      CLIENT-ID #PARTITIONS MEMBER-EPOCH ASSIGNMENT",
        "app   aa          /10.0.0.1 c1        3           4            audit:0;orders:0,2",
    ]


def test_state_table() -> None:
    group = ShareGroup(group_id="app", state="Stable", coordinator=COORDINATOR, group_epoch=5, assignment_epoch=4,
                       members=(ShareMember(member_id="m", client_id="c", host="/h", member_epoch=5),))
    assert state_table(group) == (
        "GROUP COORDINATOR (ID)    STATE  #MEMBERS\n"
        "app   127.0.0.1:19092 (7) Stable 1"
    )
    assert state_table(group, verbose=True) == (
        "GROUP COORDINATOR (ID)    STATE  GROUP-EPOCH ASSIGNMENT-EPOCH #MEMBERS\n"
        "app   127.0.0.1:19092 (7) Stable 5           4                1"
    )


def test_assignment_text() -> None:
    assert assignment_text([("b", 3), ("a", 1), ("b", 0)]) == "a:1;b:0,3"
    assert assignment_text([]) == "-"


def test_datetimes_as_kafka_reads_them() -> None:
    assert parse_datetime("2024-05-06T07:08:09.123") == 1714979289123  # no zone: UTC
    assert parse_datetime("2024-05-06T07:08:09.123Z") == 1714979289123
    assert parse_datetime("2024-05-06T09:08:09.123+02:00") == 1714979289123
    assert parse_datetime("2024-05-06T09:08:09.123+0200") == 1714979289123
    for bad in ("2024-05-06", "yesterday", "2024-13-01T00:00:00.000"):
        with pytest.raises(UsageError, match=re.escape("expected YYYY-MM-DDThh:mm:ss.sss")):
            parse_datetime(bad)


BAD_USAGE = [
    (["--describe"], "--describe needs --group or --all-groups"),
    (["--describe", "--group", "g", "--all-groups"], "--describe takes --group or --all-groups, not both"),
    (["--describe", "--group", "g", "--members", "--state"],
     "--describe takes at most one of --offsets, --members, --state (got --members, --state)"),
    (["--describe", "--group", "g", "--state", "Stable"], "--describe --state takes no value"),
    (["--list", "--state", "Stable,Rebalancing"],
     "--state 'Stable,Rebalancing': unknown state Rebalancing; share groups are Empty, Stable, Dead"),
    (["--list", "--group", "g"], "--group goes with --describe, --delete, --reset-offsets or --delete-offsets only"),
    (["--list", "--members"], "--members goes with --describe only"),
    (["--delete", "--topic", "t", "--group", "g"], "--topic goes with --reset-offsets or --delete-offsets only"),
    (["--delete"], "--delete needs --group or --all-groups"),
    (["--describe", "--all-groups", "--execute"], "--execute goes with --reset-offsets only"),
    (["--delete-offsets", "--group", "g"], "--delete-offsets needs --topic (repeatable)"),
    (["--delete-offsets", "--group", "g", "--topic", "t:0"],
     "--delete-offsets works on whole topics, not partitions ('t:0')"),
    (["--delete-offsets", "--group", "g", "--group", "h", "--topic", "t"],
     "--delete-offsets works on one group: name it with one --group"),
    (["--reset-offsets", "--topic", "t", "--to-earliest", "--execute"],
     "--reset-offsets works on one group: name it with one --group"),
    (["--reset-offsets", "--group", "g", "--to-earliest", "--execute"],
     "--reset-offsets takes --topic or --all-topics (one of them)"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--all-topics", "--to-earliest", "--execute"],
     "--reset-offsets takes --topic or --all-topics (one of them)"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--execute"],
     "--reset-offsets takes one of --to-earliest, --to-latest, --to-offset, --to-datetime"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--to-offset", "3", "--execute"],
     "--reset-offsets takes one of --to-earliest, --to-latest, --to-offset, --to-datetime"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest"],
     "--reset-offsets takes --dry-run or --execute (one of them)"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--dry-run", "--execute"],
     "--reset-offsets takes --dry-run or --execute (one of them)"),
    (["--reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest", "--dry-run"],
     "--topic 't:x': partitions are numbers, as in t:0,1,2"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "2024-05-06", "--dry-run"],
     "--to-datetime '2024-05-06': expected YYYY-MM-DDThh:mm:ss.sss, optionally with a zone (Z, +hh:mm)"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_USAGE)
def test_bad_usage_is_refused_before_any_request(argv: list[str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    # Port 1 refuses connections: a check that came after connecting would show as exit code 1.
    assert main(["share-groups", "--bootstrap-server", "127.0.0.1:1", *argv]) == 2
    assert capsys.readouterr() == ("", f"ksidecar share-groups: {message}\n")


@pytest.mark.parametrize("argv", [[], ["--list", "--describe"]])
def test_exactly_one_action(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["share-groups", "--bootstrap-server", "127.0.0.1:1", *argv])
    assert exited.value.code == 2
    assert "--list | --describe | --delete | --reset-offsets | --delete-offsets" in capsys.readouterr().err


def test_unreachable_sidecar(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["share-groups", "--bootstrap-server", "127.0.0.1:1", "--list"]) == 1
    assert capsys.readouterr() == ("", "Error: cannot connect to 127.0.0.1:1: [Errno 111] Connection refused\n")


def test_valid_arguments_are_parsed() -> None:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["share-groups", "--bootstrap-server", "h:1", "--reset-offsets", "--group", "g",
                              "--topic", "t:1,0", "--topic", "u", "--to-datetime", "1970-01-01T00:00:01.500",
                              "--dry-run"])
    check_arguments(args)
    assert (args.topic_specs, args.timestamp) == ([("t", (0, 1)), ("u", None)], 1500)
    args = parser.parse_args(["share-groups", "--bootstrap-server", "h:1", "--list", "--state", "stable, empty"])
    check_arguments(args)
    assert args.states == ["stable", "empty"]  # ListGroups matches states case-insensitively


# -- through a sidecar -------------------------------------------------------------------------

RECORDS_PER_PARTITION = 20
MEMBER_ID = re.compile(r"[A-Za-z0-9+/_-]{22}")  # a UUID in base64 (librdkafka: not URL-safe)


def produce(bootstrap: str, topic: str, per_partition: int, first: int = 0) -> None:
    """``per_partition`` records to each partition, one per batch (Tansu 0.6.0's memory
    engine reports a log end of the last batch's base offset + 1)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(first, first + per_partition):
        for partition in range(PARTITIONS):
            producer.produce(topic, value=str(i).encode(), partition=partition)
            assert producer.flush(10) == 0


class Holder(threading.Thread):
    """One ShareConsumer (explicit acknowledgement): polls until a poll gives records,
    accepts them all and commits, then polls no more and holds its membership until told
    to stop. ``acknowledged``: ``(partition, offset)`` of every record it accepted."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.done = threading.Event()
        self.stop = threading.Event()
        self.acknowledged: list[tuple[int, int]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import AcknowledgeType, ShareConsumer

        try:
            consumer = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                      "client.id": "share-cli-test", "share.acknowledgement.mode": "explicit",
                                      "max.poll.records": 7})
            consumer.subscribe([self.topic])
            try:
                while not self.acknowledged and not self.stop.is_set():
                    read: list[tuple[int, int]] = []
                    for message in consumer.poll(0.5):
                        partition, offset = message.partition(), message.offset()
                        if message.error() or partition is None or offset is None:
                            raise RuntimeError(f"poll gave {message.error() or 'a record without a position'}")
                        consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                        read.append((partition, offset))
                    if read:
                        refused = {tp.partition: error for tp, error in consumer.commit_sync(10).items() if error}
                        if refused:
                            raise RuntimeError(f"the acknowledgements were refused: {refused}")
                        self.acknowledged = read
                self.done.set()
                self.stop.wait()
            finally:
                consumer.close()
        except BaseException as exc:  # reported by the test
            self.error = exc
            self.done.set()


def first_unacknowledged(acknowledged: list[tuple[int, int]]) -> dict[int, int]:
    """Per partition, the first offset not acknowledged: the start offset Kafka defines."""
    out = {}
    for partition in range(PARTITIONS):
        done = {o for p, o in acknowledged if p == partition}
        start = 0
        while start in done:
            start += 1
        out[partition] = start
    return out


async def wait_for(predicate: Callable[[], bool], seconds: float) -> None:
    with trio.fail_after(seconds):
        while not predicate():
            await trio.sleep(0.1)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.xdist_group("share-groups")
async def test_share_groups_command_through_an_embedded_sidecar(
        start_sidecar: StartSidecar, tansu: TansuServer, zookeeper: ZooKeeperServer, zk_path: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    sidecar, bootstrap = await share_sidecar(start_sidecar, tansu, zookeeper, zk_path)
    assert len(bootstrap) == len("127.0.0.1:12345")  # the hand-written widths below assume it
    coordinator = f"{bootstrap} ({sidecar.broker_id})"
    suffix = zk_path[-8:]
    topic, group = f"queue-{suffix}", f"sg-{suffix}"  # 14 and 11 characters, as the columns below
    await trio.to_thread.run_sync(lambda: prepare(bootstrap, topic, group, records=0))
    await trio.to_thread.run_sync(produce, bootstrap, topic, RECORDS_PER_PARTITION)

    async def share_groups(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = await trio.to_thread.run_sync(
            lambda: main(["share-groups", "--bootstrap-server", bootstrap, *args]))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    def offsets(rows: dict[int, tuple[int, int]]) -> str:
        return "\n" + "GROUP       TOPIC          PARTITION START-OFFSET LAG\n" + "".join(
            f"{group} {topic} {p}         {start:<12} {lag}\n" for p, (start, lag) in sorted(rows.items()))

    holder = Holder(bootstrap, group, topic)
    holder.start()
    try:
        await wait_for(holder.done.is_set, 20)
        assert holder.error is None, holder.error
        # Five more records to each partition: the log end is 25 everywhere, and at least
        # those are neither acquired nor acknowledged.
        await trio.to_thread.run_sync(produce, bootstrap, topic, 5, RECORDS_PER_PARTITION)
        end = RECORDS_PER_PARTITION + 5
        start = first_unacknowledged(holder.acknowledged)
        beyond = {p: sum(1 for q, o in holder.acknowledged if q == p and o > start[p]) for p in start}
        by_hand = {p: (start[p], end - start[p] - beyond[p]) for p in start}

        assert await share_groups("--list") == (0, f"{group}\n", "")
        assert await share_groups("--list", "--state") == (0, f"GROUP       STATE\n{group} Stable\n", "")
        assert await share_groups("--list", "--state", "Empty,Dead") == (0, "GROUP STATE\n", "")

        code, out, err = await share_groups("--describe", "--group", group, "--members")
        assert (code, err) == (0, "")
        member = out.split("\n")[2].split()[1]
        assert MEMBER_ID.fullmatch(member), member
        assert out == (
            "\n"
            "GROUP       CONSUMER-ID            HOST       CLIENT-ID      #PARTITIONS ASSIGNMENT\n"
            f"{group} {member} /127.0.0.1 share-cli-test 3           {topic}:0,1,2\n")
        assert await share_groups("--describe", "--all-groups", "--state") == (0, (
            "\n"
            "GROUP       COORDINATOR (ID)      STATE  #MEMBERS\n"
            f"{group} {coordinator} Stable 1\n"), "")
        # The start offset of each share-partition: its first offset not acknowledged.
        assert await share_groups("--describe", "--group", group) == (0, offsets(by_hand), "")

        # Kafka's rule: neither offsets nor the group change while it has a member.
        assert await share_groups("--reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                                  "--execute") == (1, "", (
            f"Error: Share group '{group}' is not empty (state Stable, 1 member(s)): its offsets can be "
            "reset only without members.\n"))
        assert await share_groups("--delete-offsets", "--group", group, "--topic", topic) == (1, "", (
            f"Error: DeleteShareGroupOffsets of '{group}': NON_EMPTY_GROUP (68): The group is not empty.\n"))
        assert await share_groups("--delete", "--group", group) == (1, "", (
            "Deletion of some share groups failed:\n"
            f"* Group '{group}' could not be deleted due to: NON_EMPTY_GROUP (68): the group has active "
            "members\n"))
    finally:
        holder.stop.set()
        await trio.to_thread.run_sync(holder.join, 20)
    assert holder.error is None, holder.error

    with trio.fail_after(10):  # the member's leave is a heartbeat of its own
        while (await share_groups("--list", "--state"))[1] != f"GROUP       STATE\n{group} Empty\n":
            await trio.sleep(0.2)
    assert await share_groups("--describe", "--group", group, "--members") == (
        0, f"\nShare group '{group}' has no active members.\n", "")
    code, out, err = await share_groups("--describe", "--group", group, "--state", "--verbose")
    assert (code, err) == (0, "")
    # The epochs depend on how many heartbeats the member's joining and leaving took.
    group_epoch, assignment_epoch = (int(e) for e in out.split("\n")[4].split()[4:6])
    assert group_epoch >= assignment_epoch >= 1
    assert out == (
        f"\nShare group '{group}' has no active members.\n"
        "\n"
        "GROUP       COORDINATOR (ID)      STATE GROUP-EPOCH ASSIGNMENT-EPOCH #MEMBERS\n"
        f"{group} {coordinator} Empty {group_epoch:<11} {assignment_epoch:<16} 0\n")
    # What was acknowledged stays so; what the member held went back.
    assert await share_groups("--describe", "--group", group) == (0, offsets(by_hand), "")

    # A dry run changes nothing; --to-offset is clamped to the log's end.
    assert await share_groups("--reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                              "--dry-run") == (0, (
        "\n"
        "GROUP       TOPIC          PARTITION NEW-OFFSET\n"
        f"{group} {topic} 0         0\n"
        f"{group} {topic} 1         0\n"
        f"{group} {topic} 2         0\n"), "")
    assert await share_groups("--describe", "--group", group) == (0, offsets(by_hand), "")
    assert await share_groups("--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--to-offset", "30",
                              "--execute") == (0, (
        "\n"
        "GROUP       TOPIC          PARTITION NEW-OFFSET\n"
        f"{group} {topic} 1         25\n"), (
        f"Warning: new offset (30) is higher than the latest offset for {topic}-1; it will be set to 25.\n"))
    assert await share_groups("--describe", "--group", group) == (0, offsets({**by_hand, 1: (25, 0)}), "")
    assert await share_groups("--reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                              "--execute") == (0, (
        "\n"
        "GROUP       TOPIC          PARTITION NEW-OFFSET\n"
        f"{group} {topic} 0         0\n"
        f"{group} {topic} 1         0\n"
        f"{group} {topic} 2         0\n"), "")
    assert await share_groups("--describe", "--group", group) == (0, offsets({p: (0, end) for p in start}), "")

    assert await share_groups("--delete-offsets", "--group", group, "--topic", topic, "--topic", "no-such") == (1, (
        "\n"
        "TOPIC          STATUS\n"
        "no-such        Error: UNKNOWN_TOPIC_OR_PARTITION (3): This server does not host this topic-partition.\n"
        f"{topic} Successful\n"), "")
    assert await share_groups("--describe", "--group", group) == (
        0, f"\nShare group '{group}' has no offset information.\n", "")

    assert await share_groups("--delete", "--group", group, "--group", "no-such") == (1, (
        f"Deletion of requested share groups ('{group}') was successful.\n"), (
        "Deletion of some share groups failed:\n"
        "* Group 'no-such' could not be deleted due to: no share group has this name\n"))
    assert await share_groups("--list") == (0, "", "")
    assert await share_groups("--describe", "--group", group) == (
        1, "", f"Error: Share group '{group}' does not exist.\n")

    # With share.version below 1 the share APIs are not served: the tool says what to do.
    answer = await trio.to_thread.run_sync(update, sidecar, 2, ("share.version", 0, SAFE))
    assert answer.ErrorCode == 0, answer
    assert await share_groups("--describe", "--group", group) == (1, "", (
        f"Error: {bootstrap} serves ShareGroupDescribe not at all; this tool needs v1-v1 (share groups need "
        "share.version at level 1: ksidecar features --bootstrap-server HOST:PORT upgrade --feature "
        "share.version=1)\n"))
