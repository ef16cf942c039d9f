"""Consumer groups spread over a fleet of sidecars (issue 16), all real and separate:

three ``ksidecar run`` processes (broker ids 1, 2, 3) with the embedded coordinator, in front
of one Tansu broker, sharing a three-server ZooKeeper ensemble; confluent-kafka consumers.
One module fixture starts it all once.

Every sidecar maps the broker's node id to itself (``sidecar.address.mapping=static``): with
one broker behind three sidecars, the broker's address a client holds is that of whichever
sidecar answered its latest Metadata (librdkafka asks any connection it has, the
coordinator's included). Each sidecar's Metadata also names the three sidecars as nodes 1-3,
the coordinators FindCoordinator names (docs/coordinator.md). Consumers bootstrap through
sidecar 1; the sidecars that are stopped or killed are the others. A client may therefore lose its fetch connection along with the
coordinator; the times measured include finding the broker again.

Expected owners come from :func:`coordinator.placement.owner`, whose answers are checked
by hand (sha256sum) in tests/coordinator/test_placement.py.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from coordinator.paths import escape
from coordinator.placement import owner
from proxy.tools.rig.ports import free_port
from proxy.tools.rig.sidecar import SidecarServer, start_sidecar
from proxy.tools.rig.tansu import TansuServer
from proxy.tools.rig.zookeeper import ZooKeeperEnsemble, start_ensemble
from tests.faults.support import call, connect

pytestmark = [pytest.mark.integration, pytest.mark.slow]

IDS = (1, 2, 3)
TOPIC_PARTITIONS = 6
NOT_COORDINATOR = 16
#: The sidecars' ZooKeeper session, and the consumers' group session (ms).
ZK_SESSION_MS = 4000
GROUP_SESSION_MS = 10000


@dataclass
class Fleet:
    """The running fleet: the ensemble, the broker, a sidecar per id."""

    work: Path
    ensemble: ZooKeeperEnsemble
    tansu: TansuServer
    chroot: str
    broker_node: int
    ports: dict[int, int]
    sidecars: dict[int, SidecarServer] = field(default_factory=dict)

    def keys(self, node: int) -> dict[str, str]:
        port = self.ports[node]
        return {
            "broker.id": str(node),
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "zookeeper.connect": self.ensemble.connect_string(self.chroot),
            "zookeeper.session.timeout.ms": str(ZK_SESSION_MS),
            "sidecar.coordinator": "embedded",
            "sidecar.address.mapping": "static",
            "sidecar.address.map": f"{self.broker_node}=127.0.0.1:{port}",
            "group.initial.rebalance.delay.ms": "200",
            "group.min.session.timeout.ms": "1000",
            "sidecar.coordinator.metadata.refresh.ms": "1000",
            "sidecar.shutdown.drain.ms": "3000",
            "group.consumer.session.timeout.ms": str(GROUP_SESSION_MS),
            "group.consumer.heartbeat.interval.ms": "1000",
        }

    def start(self, node: int) -> SidecarServer:
        server = start_sidecar(self.work, self.tansu.bootstrap, name=f"sidecar-{node}", keys=self.keys(node))
        self.sidecars[node] = server
        return server

    def bootstrap(self, node: int = 1) -> str:
        return f"127.0.0.1:{self.ports[node]}"

    def zk(self) -> KazooClient:
        client = KazooClient(hosts=self.ensemble.connect_string(self.chroot), timeout=10.0)
        client.start(timeout=10.0)
        return client

    def live(self) -> list[int]:
        return sorted(n for n, s in self.sidecars.items() if s.process.running)


def broker_node_id(bootstrap: str) -> int:
    from confluent_kafka.admin import AdminClient

    brokers = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).brokers
    (node,) = brokers
    return int(node)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, tansu: TansuServer) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("fleet")
    ensemble = start_ensemble(work)
    try:
        chroot = f"/fleet-{uuid.uuid4().hex[:8]}"
        setup = KazooClient(hosts=ensemble.connect, timeout=10.0)
        setup.start(timeout=10.0)
        setup.ensure_path(chroot)
        setup.stop()
        setup.close()
        running = Fleet(work=work, ensemble=ensemble, tansu=tansu, chroot=chroot,
                        broker_node=broker_node_id(tansu.bootstrap),
                        ports={n: free_port() for n in IDS})
        try:
            for node in IDS:
                running.start(node)
            wait_until(lambda: registered(running) == list(IDS), 15, "all three sidecars registered")
            wait_until(lambda: all(sees(s, len(IDS)) for s in running.sidecars.values()), 15,
                       "every sidecar sees the other two")
            yield running
        finally:
            for server in running.sidecars.values():
                server.stop()
    finally:
        ensemble.stop()


def sees(server: SidecarServer, count: int) -> bool:
    """Whether the sidecar's own fleet view holds ``count`` live sidecars (its /metrics)."""
    return f"ksidecar_coordinator_fleet_sidecars {float(count)}" in server.scrape()


def registered(fleet: Fleet) -> list[int]:
    client = fleet.zk()
    try:
        return sorted(int(c) for c in client.get_children("/brokers/ids"))
    finally:
        client.stop()
        client.close()


def wait_until(check: Any, timeout: float, what: str) -> float:
    """Poll ``check`` until true; the seconds it took."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - began


def find(port: int, groups: list[str], version: int = 4) -> dict[str, tuple[int, str, int, int]]:
    """FindCoordinator through the sidecar on ``port``: key -> (node, host, port, error)."""
    with connect(port) as sock:
        if version >= 4:
            answer: Any = call(sock, 10, version, {"KeyType": 0, "CoordinatorKeys": groups})
            return {c.Key: (c.NodeId, c.Host, c.Port, c.ErrorCode) for c in answer.Coordinators}
        out = {}
        for group in groups:
            one: Any = call(sock, 10, version, {"Key": group, "KeyType": 0})
            out[group] = (one.NodeId, one.Host, one.Port, one.ErrorCode)
        return out


def groups_owned_by(node: int, live: list[int], count: int, prefix: str) -> list[str]:
    out: list[str] = []
    i = 0
    while len(out) < count:
        name = f"{prefix}-{i}"
        if owner(name, live) == node:
            out.append(name)
        i += 1
    return out


def test_groups_spread_and_every_sidecar_names_the_same_coordinator(fleet: Fleet) -> None:
    groups = [f"spread-{i}" for i in range(30)]
    answers = {node: find(fleet.ports[node], groups) for node in IDS}
    expected = {g: owner(g, IDS) for g in groups}
    for node in IDS:
        assert {g: a[0] for g, a in answers[node].items()} == expected, f"through sidecar {node}"
        for g, (owner_id, host, port, error) in answers[node].items():
            assert (host, port, error) == ("127.0.0.1", fleet.ports[owner_id], 0), g
    # FindCoordinator v3 (one key per request) through each sidecar agrees too.
    for node in IDS:
        single = find(fleet.ports[node], groups[:5], version=3)
        assert {g: a[0] for g, a in single.items()} == {g: expected[g] for g in groups[:5]}
    # The coordinators named are among the brokers Metadata names, as Kafka's always are
    # (librdkafka forgets a node its latest Metadata leaves out, coordinator included): the
    # broker behind the fleet is no sidecar's id here, so each sidecar adds all three.
    for node in IDS:
        with connect(fleet.ports[node]) as sock:
            metadata: Any = call(sock, 3, 12, {"Topics": [], "AllowAutoTopicCreation": False,
                                               "IncludeTopicAuthorizedOperations": False})
        named = {b.NodeId: (b.Host, b.Port) for b in metadata.Brokers}
        assert named == {fleet.broker_node: ("127.0.0.1", fleet.ports[node]),
                         **{n: ("127.0.0.1", fleet.ports[n]) for n in IDS}}, f"through sidecar {node}"
    spread = {n: sum(1 for g in groups if expected[g] == n) for n in IDS}
    print(f"\nspread of 30 groups over sidecars 1/2/3: {spread}")
    assert all(count >= 5 for count in spread.values()), spread  # about a third each


def test_a_sidecar_that_does_not_own_a_group_answers_not_coordinator(fleet: Fleet) -> None:
    (group,) = groups_owned_by(2, list(IDS), 1, "elsewhere")
    with connect(fleet.ports[3]) as sock:
        beat: Any = call(sock, 12, 4, {"GroupId": group, "GenerationId": 1, "MemberId": "m",
                                       "GroupInstanceId": None})
        assert beat.ErrorCode == NOT_COORDINATOR
        joined: Any = call(sock, 11, 5, {
            "GroupId": group, "SessionTimeoutMs": 10000, "RebalanceTimeoutMs": 10000, "MemberId": "",
            "GroupInstanceId": None, "ProtocolType": "consumer",
            "Protocols": [{"Name": "range", "Metadata": b""}]})
        assert joined.ErrorCode == NOT_COORDINATOR


def test_the_owner_holds_a_new_groups_first_request_until_it_has_claimed_it(fleet: Fleet) -> None:
    """No FindCoordinator first (that would start the claim early): the JoinGroup itself
    makes the owner claim the group, and is answered as usual, not LOAD_IN_PROGRESS."""
    live = fleet.live()
    (group,) = groups_owned_by(3, live, 1, f"fresh-{uuid.uuid4().hex[:6]}")
    assert claim_holder(fleet, group) is None
    with connect(fleet.ports[3]) as sock:
        joined: Any = call(sock, 11, 5, {
            "GroupId": group, "SessionTimeoutMs": 10000, "RebalanceTimeoutMs": 10000, "MemberId": "",
            "GroupInstanceId": None, "ProtocolType": "consumer",
            "Protocols": [{"Name": "range", "Metadata": b""}]})
    assert joined.ErrorCode == 79  # MEMBER_ID_REQUIRED: served
    assert claim_holder(fleet, group) == 3


# -- consumers ---------------------------------------------------------------------------------


class Member(threading.Thread):
    """A confluent-kafka consumer that commits synchronously after every poll and logs
    what it was assigned and which offsets the coordinator acknowledged."""

    def __init__(self, bootstrap: str, group: str, topic: str, extra: dict[str, str] | None = None) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.extra = extra or {}
        self.stop = threading.Event()
        self.error: BaseException | None = None
        #: (time, "assign" | "revoke", partitions)
        self.events: list[tuple[float, str, tuple[int, ...]]] = []
        #: (time, partition -> next offset) of every commit the coordinator acknowledged.
        self.acks: list[tuple[float, dict[int, int]]] = []
        self.failed_commits = 0
        self.consumed = 0

    def run(self) -> None:
        try:
            self._consume()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def _consume(self) -> None:
        from confluent_kafka import Consumer, KafkaException

        def on_assign(_: Any, parts: list[Any]) -> None:
            self.events.append((time.monotonic(), "assign", tuple(sorted(p.partition for p in parts))))

        def on_revoke(_: Any, parts: list[Any]) -> None:
            self.events.append((time.monotonic(), "revoke", tuple(sorted(p.partition for p in parts))))

        # socket.timeout.ms: a frozen sidecar (SIGSTOP) answers nothing; 5 s, not 60 s, until
        # the client gives such a request up and looks for the coordinator again.
        config: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "group.id": self.group,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "socket.timeout.ms": 5000}
        if self.extra.get("group.protocol") != "consumer":  # KIP-848: the coordinator sets these
            config.update({"session.timeout.ms": GROUP_SESSION_MS, "heartbeat.interval.ms": 1000,
                           "partition.assignment.strategy": "range"})
        consumer = Consumer({**config, **self.extra})
        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self.stop.is_set():
                records = consumer.consume(100, 0.2)
                if not records:
                    continue
                self.consumed += len(records)
                try:
                    done = consumer.commit(asynchronous=False)
                except KafkaException:
                    self.failed_commits += 1
                    continue
                acked = {tp.partition: tp.offset for tp in done or [] if tp.error is None and tp.offset >= 0}
                if acked:
                    self.acks.append((time.monotonic(), acked))
        finally:
            _revoke_then_close(consumer)

    def acked_by(self, when: float) -> dict[int, int]:
        """The highest acknowledged offset per partition up to ``when``."""
        out: dict[int, int] = {}
        for at, acked in self.acks:
            if at <= when:
                for p, offset in acked.items():
                    out[p] = max(out.get(p, -1), offset)
        return out

    def last_ack(self) -> float:
        return self.acks[-1][0] if self.acks else 0.0


class KafkaPythonMember(Member):
    """The same with kafka-python: a synchronous commit of what each poll returned."""

    def _consume(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer
        from kafka.errors import KafkaError

        member = self

        class Log(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                member.events.append((time.monotonic(), "revoke", tuple(sorted(p.partition for p in revoked))))

            def on_partitions_assigned(self, assigned: Any) -> None:
                member.events.append((time.monotonic(), "assign", tuple(sorted(p.partition for p in assigned))))

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 session_timeout_ms=GROUP_SESSION_MS, heartbeat_interval_ms=1000,
                                 request_timeout_ms=GROUP_SESSION_MS + 5000)
        consumer.subscribe([self.topic], listener=Log())
        try:
            while not self.stop.is_set():
                batch = consumer.poll(timeout_ms=200, max_records=100)
                if not batch:
                    continue
                self.consumed += sum(len(rs) for rs in batch.values())
                ends = {tp.partition: rs[-1].offset + 1 for tp, rs in batch.items() if rs}
                try:
                    consumer.commit()
                except KafkaError:
                    self.failed_commits += 1
                    continue
                self.acks.append((time.monotonic(), ends))
        finally:
            consumer.close()


def _revoke_then_close(consumer: Any) -> None:
    """Unsubscribe and let the revocation run in ``consume`` (as in any rebalance), then
    close. Seen once (confluent-kafka 2.16, a coordinator that had just moved back): a
    ``close()`` that had to revoke ran the rebalance callback, whose ``assign(NULL)`` waited
    for a reply that never came while holding the GIL, and the whole test process hung
    beyond pytest-timeout's reach. With nothing left to revoke, ``close()`` does not call it."""
    from confluent_kafka import KafkaException

    try:
        consumer.unsubscribe()
        deadline = time.monotonic() + 5
        while consumer.assignment() and time.monotonic() < deadline:
            consumer.consume(10, 0.1)
    except (KafkaException, RuntimeError):
        pass  # close() below as before
    consumer.close()


class Producer(threading.Thread):
    """Keeps records flowing (about 300 a second over the partitions) so commits move."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.stop = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer as Kafka

        producer = Kafka({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        i = 0
        while not self.stop.is_set():
            producer.produce(self.topic, value=str(i).encode(), partition=i % TOPIC_PARTITIONS)
            producer.poll(0)
            i += 1
            if i % 30 == 0:
                time.sleep(0.1)
        producer.flush(10)


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures need the handle
    admin.create_topics([NewTopic(topic, TOPIC_PARTITIONS, 1)])[topic].result(10)


def stored_offsets(fleet: Fleet, group: str, topic: str) -> dict[int, int]:
    client = fleet.zk()
    try:
        base = f"/consumers/{escape(group)}/offsets/{escape(topic)}"
        out = {}
        for child in client.get_children(base):
            raw, _ = client.get(f"{base}/{child}")
            out[int(child)] = int(json.loads(raw)["offset"])
        return out
    finally:
        client.stop()
        client.close()


def claim_holder(fleet: Fleet, group: str) -> int | None:
    client = fleet.zk()
    try:
        raw, _ = client.get(f"/coordinators/groups/{escape(group)}/owner")
        return int(json.loads(raw)["broker_id"])
    except Exception:
        return None
    finally:
        client.stop()
        client.close()


def no_overlap(members: list[Member]) -> None:
    """No partition held by two members of one group at once (from their own logs)."""
    spans: list[tuple[int, float, float, int]] = []  # partition, from, to, member
    for index, m in enumerate(members):
        held: dict[int, float] = {}
        for at, kind, parts in m.events:
            for p in parts:
                if kind == "assign":
                    held[p] = at
                elif p in held:
                    spans.append((p, held.pop(p), at, index))
        spans += [(p, since, float("inf"), index) for p, since in held.items()]
    for a in spans:
        for b in spans:
            if a[0] == b[0] and a[3] < b[3]:
                assert a[2] <= b[1] or b[2] <= a[1], f"partition {a[0]} held twice: {a} {b}"


@dataclass
class Groups:
    topic: str
    members: dict[str, list[Member]]
    producer: Producer

    def all(self) -> list[Member]:
        return [m for ms in self.members.values() for m in ms]

    def stop(self) -> None:
        for m in self.all():
            m.stop.set()
        self.producer.stop.set()
        for m in self.all():
            m.join(30)
        self.producer.join(30)


def start_groups(fleet: Fleet, names: list[str], per_group: int = 2,
                 extra: dict[str, dict[str, str]] | None = None,
                 kinds: dict[str, type[Member]] | None = None) -> Groups:
    topic = f"fleet-{uuid.uuid4().hex[:8]}"
    create_topic(fleet.bootstrap(), topic)
    producer = Producer(fleet.bootstrap(), topic)
    producer.start()
    members = {g: [(kinds or {}).get(g, Member)(fleet.bootstrap(), g, topic, (extra or {}).get(g))
                   for _ in range(per_group)] for g in names}
    running = Groups(topic=topic, members=members, producer=producer)
    for m in running.all():
        m.start()

    def settled() -> bool:
        now = time.monotonic()
        return all(m.acks and now - m.last_ack() < 1.0 for m in running.all()) and all(
            sorted(p for m in ms for p in current(m)) == list(range(TOPIC_PARTITIONS))
            for ms in members.values())

    try:
        wait_until(settled, 90, "every member assigned and committing")
    except AssertionError as exc:
        now = time.monotonic()
        states = "; ".join(
            f"{g}/{type(m).__name__}: held {current(m)}, {len(m.acks)} acks (last {now - m.last_ack():.1f} s "
            f"ago), {m.failed_commits} failed, consumed {m.consumed}, error {m.error!r}"
            for g, ms in members.items() for m in ms)
        running.stop()
        raise AssertionError(f"{exc}: {states}") from None
    return running


def current(member: Member) -> tuple[int, ...]:
    held: set[int] = set()
    for _, kind, parts in member.events:
        held = held | set(parts) if kind == "assign" else held - set(parts)
    return tuple(sorted(held))


def committing_since(groups: Groups, since: float) -> bool:
    """Every group has an acknowledged commit after ``since`` and all its partitions held."""
    for ms in groups.members.values():
        if not any(at > since for m in ms for at, _ in m.acks):
            return False
        if sorted(p for m in ms for p in current(m)) != list(range(TOPIC_PARTITIONS)):
            return False
    return True


def test_sigterm_of_an_owner_hands_its_groups_over_without_a_rebalance(fleet: Fleet) -> None:
    live = fleet.live()
    names = groups_owned_by(2, live, 2, "graceful")
    groups = start_groups(fleet, names)
    try:
        assert [claim_holder(fleet, g) for g in names] == [2, 2]
        events_before = {id(m): len(m.events) for m in groups.all()}
        signalled = time.monotonic()
        os.kill(fleet.sidecars[2].process.pid or 0, signal.SIGTERM)
        fleet.sidecars[2].process.stop()  # waits for the exit
        exited = time.monotonic()
        stable = wait_until(lambda: committing_since(groups, exited), 30, "commits after the hand-over")
        print(f"\ngraceful hand-over (SIGTERM): sidecar 2 exited {exited - signalled:.2f} s after the "
              f"signal; every group committing to its new owner {stable:.2f} s after that")
        rest = [n for n in live if n != 2]
        assert [claim_holder(fleet, g) for g in names] == [owner(g, rest) for g in names]
        # No member was revoked or assigned anything: the groups did not rebalance.
        assert {id(m): len(m.events) for m in groups.all()} == events_before
        assert stable < GROUP_SESSION_MS / 1000
    finally:
        groups.stop()
        fleet.start(2)
        wait_until(lambda: registered(fleet) == list(IDS), 15, "sidecar 2 back")
        wait_until(lambda: all(sees(s, len(IDS)) for s in fleet.sidecars.values()), 15, "views agree")
    for m in groups.all():
        assert m.error is None, m.error
    for g in names:
        stored = stored_offsets(fleet, g, groups.topic)
        for m in groups.members[g]:
            for p, offset in m.acked_by(time.monotonic()).items():
                assert stored[p] >= offset, (g, p)


def test_sigkill_of_an_owner_loses_no_acknowledged_offset(fleet: Fleet) -> None:
    live = fleet.live()
    victim = 3
    names = groups_owned_by(victim, live, 4, "failover")
    # confluent-kafka: two classic groups and one KIP-848 group (ConsumerGroupHeartbeat,
    # served by the sidecar); kafka-python: one classic group.
    groups = start_groups(fleet, names, extra={names[2]: {"group.protocol": "consumer"}},
                          kinds={names[3]: KafkaPythonMember})
    try:
        assert [claim_holder(fleet, g) for g in names] == [victim] * 4
        time.sleep(1.0)  # a few more commits
        killed_at = time.monotonic()
        pid = fleet.sidecars[victim].process.pid
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)
        acked_before = {(g, id(m)): m.acked_by(killed_at) for g, ms in groups.members.items() for m in ms}
        stable = wait_until(lambda: committing_since(groups, killed_at), 60, "every group committing again")
        claimed = wait_until(lambda: all(claim_holder(fleet, g) not in (None, victim) for g in names), 10,
                             "claims moved")
        print(f"\nfailover (SIGKILL of sidecar {victim}, ZooKeeper session {ZK_SESSION_MS} ms, group "
              f"session {GROUP_SESSION_MS} ms): every group stable and committing again after "
              f"{stable:.2f} s; failed commits meanwhile: {sum(m.failed_commits for m in groups.all())}")
        assert stable <= (ZK_SESSION_MS + GROUP_SESSION_MS) / 1000
        assert claimed < 10
        rest = [n for n in live if n != victim]
        assert [claim_holder(fleet, g) for g in names] == [owner(g, rest) for g in names]
    finally:
        groups.stop()
        fleet.sidecars[victim].process.stop()
        fleet.start(victim)
        wait_until(lambda: registered(fleet) == list(IDS), 15, f"sidecar {victim} back")
        wait_until(lambda: all(sees(s, len(IDS)) for s in fleet.sidecars.values()), 15, "views agree")
    for m in groups.all():
        assert m.error is None, m.error
    for g, ms in groups.members.items():
        stored = stored_offsets(fleet, g, groups.topic)
        for m in ms:
            for p, offset in acked_before[(g, id(m))].items():
                assert stored.get(p, -1) >= offset, (g, p, stored.get(p), offset)
        no_overlap(ms)


def test_a_frozen_owner_whose_session_expired_is_fenced_and_its_groups_come_back(fleet: Fleet) -> None:
    """SIGSTOP an owner for longer than its ZooKeeper session: the session expires (its
    claims and registration go), the others take its groups over. On SIGCONT it finds its
    session LOST, drops every group at once (it must not serve them from memory), registers
    again on a new session and, once the placement gives them back, claims them again from
    the others. No acknowledged offset is lost on the way."""
    live = fleet.live()
    victim = 3
    names = groups_owned_by(victim, live, 2, "frozen")
    groups = start_groups(fleet, names)
    pid = fleet.sidecars[victim].process.pid
    assert pid is not None
    try:
        assert [claim_holder(fleet, g) for g in names] == [victim] * 2
        logged = len(fleet.sidecars[victim].log_path.read_text())
        stopped_at = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        acked_before = {(g, id(m)): m.acked_by(stopped_at) for g, ms in groups.members.items() for m in ms}
        rest = [n for n in live if n != victim]
        wait_until(lambda: registered(fleet) == rest, 3 * ZK_SESSION_MS / 1000, "the frozen session expired")
        moved = wait_until(lambda: [claim_holder(fleet, g) for g in names] == [owner(g, rest) for g in names],
                           10, "claims taken over")
        moved_at = time.monotonic()
        taken_over = wait_until(lambda: committing_since(groups, moved_at), 60, "commits to the new owners")
        os.kill(pid, signal.SIGCONT)
        resumed_at = time.monotonic()
        wait_until(lambda: registered(fleet) == live, 20, "the thawed sidecar registered again")
        wait_until(lambda: [claim_holder(fleet, g) for g in names] == [victim] * 2, 20, "claims back")
        claimed_at = time.monotonic()
        back = wait_until(lambda: committing_since(groups, claimed_at), 60, "commits again")
        log = fleet.sidecars[victim].log_path.read_text()[logged:]
        assert "ZooKeeper session lost" in log
        print(f"\nfrozen owner (SIGSTOP > ZooKeeper session): claims moved {moved:.2f} s after the "
              f"expiry was seen, commits to the new owners {taken_over:.2f} s later; after SIGCONT the "
              f"groups came back and commits resumed {time.monotonic() - resumed_at:.2f} s later "
              f"({back:.2f} s after the claims)")
    finally:
        os.kill(pid, signal.SIGCONT)
        groups.stop()
    for m in groups.all():
        assert m.error is None, m.error
    for g, ms in groups.members.items():
        stored = stored_offsets(fleet, g, groups.topic)
        for m in ms:
            for p, offset in acked_before[(g, id(m))].items():
                assert stored.get(p, -1) >= offset, (g, p, stored.get(p), offset)
            for p, offset in m.acked_by(time.monotonic()).items():
                assert stored.get(p, -1) >= offset, (g, p, stored.get(p), offset)


def test_all_zookeeper_servers_down_past_the_session_then_back(fleet: Fleet) -> None:
    """The whole ensemble stopped for longer than the sidecars' session timeout, then
    started again. ZooKeeper keeps sessions across its restart (their timeouts start over
    once a leader is elected), so the sidecars find their sessions and claims still there:
    meanwhile (SUSPENDED) commits are refused and heartbeats answered from memory; afterwards
    commits resume and no acknowledged offset is lost. (A group may still rebalance: a
    librdkafka member whose commits fail looks for its coordinator again and can stop
    heartbeating past its own session timeout; seen once with an 11 s outage.)"""
    live = fleet.live()
    names = groups_owned_by(1, live, 1, "outage") + groups_owned_by(3, live, 1, "outage")
    groups = start_groups(fleet, names)
    try:
        stopped_at = time.monotonic()
        for index in range(fleet.ensemble.size):
            fleet.ensemble.stop_server(index)
        acked_before = {(g, id(m)): m.acked_by(stopped_at) for g, ms in groups.members.items() for m in ms}
        time.sleep(ZK_SESSION_MS / 1000 + 2)
        failed_during = sum(m.failed_commits for m in groups.all())
        for index in range(fleet.ensemble.size):
            fleet.ensemble.start_server(index, wait=False)
        fleet.ensemble.wait_serving()
        back_at = time.monotonic()
        resumed = wait_until(lambda: committing_since(groups, back_at), 60, "commits after the outage")
        print(f"\nZooKeeper ensemble down {back_at - stopped_at:.1f} s: commits refused meanwhile "
              f"({failed_during} failed), resumed {resumed:.2f} s after the quorum was back")
        assert [claim_holder(fleet, g) for g in names] == [1, 3]  # the same sessions, the same claims
    finally:
        groups.stop()
    for m in groups.all():
        assert m.error is None, m.error
    for g, ms in groups.members.items():
        stored = stored_offsets(fleet, g, groups.topic)
        for m in ms:
            for p, offset in acked_before[(g, id(m))].items():
                assert stored.get(p, -1) >= offset, (g, p, stored.get(p), offset)
            # Nor was anything acknowledged during the outage that ZooKeeper does not hold.
            for p, offset in m.acked_by(time.monotonic()).items():
                assert stored.get(p, -1) >= offset, (g, p, stored.get(p), offset)


def test_one_zookeeper_server_down_changes_nothing_for_clients(fleet: Fleet) -> None:
    live = fleet.live()
    names = groups_owned_by(1, live, 1, "quorum") + groups_owned_by(2, live, 1, "quorum")
    groups = start_groups(fleet, names)
    try:
        events_before = {id(m): len(m.events) for m in groups.all()}
        leader = fleet.ensemble.leader()
        assert leader is not None
        stopped_at = time.monotonic()
        fleet.ensemble.stop_server(leader, kill=True)
        wait_until(lambda: committing_since(groups, stopped_at + 2), 30, "commits with two servers")
        fleet.ensemble.start_server(leader)
        back_at = time.monotonic()
        wait_until(lambda: committing_since(groups, back_at), 30, "commits with three servers again")
        assert {id(m): len(m.events) for m in groups.all()} == events_before
    finally:
        groups.stop()
    for m in groups.all():
        assert m.error is None, m.error
