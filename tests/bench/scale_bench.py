"""What each place that grows with the cluster costs, at two sizes (sans-IO, one process).

    python -m tests.bench.scale_bench

Issue 30's audit: every place whose work could grow with the number of topics,
partitions, ACLs or groups, timed on the sidecar's own code at a size N and at 10 N, so
that the table shows what each is proportional to. Nothing here touches a socket: these
are the CPU costs the event loop pays (best of five calls, ``time.perf_counter``).

* Metadata: the broker-address rewrite (spliced) and the ACL narrowing to half the topics
  (``proxy.datapath.listing``), per topics × 10 partitions.
* The ACL decision of one Produce naming 1 topic, with 1,000 and 10,000 ACLs (literal and
  prefixed, other principals'), first decision and cached.
* OffsetFetch v8 (half its topics refused) and ListOffsets v7 requests checked by ACLs, per
  partitions named.
* The audit's and the Prometheus observer's reading of a Fetch answer, per partitions.
* The embedded coordinator's topic refresh: the Metadata answer read (names, ids, counts)
  and 200 regexes matched, per topics, on an unchanged cluster and on one where a topic
  comes and goes between refreshes.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from coordinator.topics import TopicsSnapshot
from observers.traffic import TopicNames, fetch_traffic
from protocol.apis import DEFAULT_REGISTRY as R
from protocol.schema import encode
from proxy.auth.acl.enforce import Enforcer, Forward
from proxy.auth.acl.evaluate import AclIndex, Authorizer, RequestFacts
from proxy.auth.acl.model import (
    AclBinding,
    AclEntry,
    Operation,
    PatternType,
    Permission,
    ResourcePattern,
    ResourceType,
)
from proxy.config.keys import HostPort
from proxy.control.topic_reader import TopicReader
from proxy.datapath.listing import ListingSplice
from proxy.datapath.rewrite import Rewriter
from tests.bench.runner import hidden_half
from tests.bench.workloads import CLUSTER_PREFIX

ME = "User:bench"


def best(call: Callable[[], Any], repeats: int = 5) -> float:
    """The fastest of ``repeats`` calls, in ms (after one warm-up call)."""
    call()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return min(times) * 1000


def metadata(topics: int, partitions: int) -> bytes:
    return encode(R.api(3).response, 12, {
        "ThrottleTimeMs": 0, "ClusterId": "c", "ControllerId": 1, "ClusterAuthorizedOperations": -2147483648,
        "Brokers": [{"NodeId": n, "Host": f"b{n}", "Port": 9092, "Rack": None} for n in (1, 2, 3)],
        "Topics": [{"ErrorCode": 0, "Name": f"{CLUSTER_PREFIX}-{t:05d}", "TopicId": uuid.UUID(int=t + 1), "IsInternal": False,
                    "TopicAuthorizedOperations": -2147483648,
                    "Partitions": [{"ErrorCode": 0, "PartitionIndex": p, "LeaderId": 1 + p % 3, "LeaderEpoch": 1,
                                    "ReplicaNodes": [1, 2, 3], "IsrNodes": [1, 2, 3], "OfflineReplicas": []}
                                   for p in range(partitions)]} for t in range(topics)]})  # fmt: skip


def authorizer(acls: int, hidden: tuple[str, ...] = ()) -> Authorizer:
    """``acls`` ACLs of other users (literal and prefixed topics), the bench principal
    allowed everything but topics prefixed ``hidden``."""
    def binding(name: str, principal: str, op: Operation, pattern: PatternType = PatternType.LITERAL,
                permission: Permission = Permission.ALLOW) -> AclBinding:
        return AclBinding(ResourcePattern(ResourceType.TOPIC, name, pattern), AclEntry(principal, "*", op, permission))
    bindings = [binding("*", ME, Operation.ALL)]
    bindings += [binding(prefix, ME, Operation.ALL, PatternType.PREFIXED, Permission.DENY) for prefix in hidden]
    bindings += [binding(f"team{i}-", f"User:u{i}", Operation.READ, (PatternType.LITERAL, PatternType.PREFIXED)[i % 2])
                 for i in range(acls - len(bindings))]  # fmt: skip
    return Authorizer(AclIndex(bindings))


def rows() -> list[tuple[str, str, float, float]]:
    out: list[tuple[str, str, float, float]] = []

    class Book:
        def lookup(self, node_id: int, host: str, port: int, listener: str) -> HostPort:
            return HostPort(f"sidecar-{node_id}", 19092)

    def pair(what: str, unit: str, at: Callable[[int], float], n: int) -> None:
        out.append((what, f"{unit} {n:,} / {10 * n:,}", at(n), at(10 * n)))

    api = R.api(3)
    def rewrite(n: int) -> float:
        body = metadata(n, 10)
        rewriter = Rewriter(Book(), "PLAINTEXT")
        return best(lambda: rewriter.rewrite(api, 12, body))

    pair("Metadata broker rewrite (spliced)", "topics x 10:", rewrite, 1000)

    def narrowing(n: int) -> float:
        body = metadata(n, 10)
        auth = authorizer(100, hidden=hidden_half(n))  # the upper half of the topics hidden
        facts = RequestFacts(principal=ME, host="h", api_key=3, api_version=12, topic_names={})
        enforcer = Enforcer(api, 12)
        request = encode(api.request, 12, {"Topics": None, "AllowAutoTopicCreation": False,
                                           "IncludeTopicAuthorizedOperations": False})
        action = enforcer.enforce(auth, facts, request).action
        assert isinstance(action, Forward) and action.patch is not None
        splice = ListingSplice(api, 12, "Topics")
        return best(lambda: splice.apply(action.patch, body))  # type: ignore[arg-type]

    pair("Metadata narrowed by ACLs", "topics x 10:", narrowing, 1000)

    def decision(n: int) -> float:
        auth = authorizer(n)
        produce = R.api(0)
        raw = encode(produce.request, 9, {"TransactionalId": None, "Acks": 1, "TimeoutMs": 500, "TopicData": [
            {"Name": "orders", "PartitionData": [{"Index": 0, "Records": b""}]}]})
        enforcer = Enforcer(produce, 9)
        facts = RequestFacts(principal=ME, host="h", api_key=0, api_version=9, topic_names={})
        return best(lambda: enforcer.enforce(auth, facts, raw), repeats=200)

    pair("ACL decision, one Produce of 1 topic (cached)", "ACLs:", decision, 1000)

    def offset_fetch(n: int) -> float:
        api8 = R.api(9)
        auth = authorizer(100, hidden=hidden_half(n // 10))
        topics = [{"Name": f"{CLUSTER_PREFIX}-{t:05d}", "PartitionIndexes": list(range(10))} for t in range(n // 10)]
        raw = encode(api8.request, 8, {"Groups": [{"GroupId": "g", "Topics": topics}], "RequireStable": False})
        facts = RequestFacts(principal=ME, host="h", api_key=9, api_version=8, topic_names={})
        enforcer = Enforcer(api8, 8)
        return best(lambda: enforcer.enforce(auth, facts, raw))

    pair("OffsetFetch v8 request checked, half refused", "partitions:", offset_fetch, 1000)

    def list_offsets(n: int) -> float:
        api2 = R.api(2)
        auth = authorizer(100)
        topics = [{"Name": f"t{t:05d}", "Partitions": [{"PartitionIndex": p, "CurrentLeaderEpoch": -1,
                                                        "Timestamp": -1} for p in range(10)]} for t in range(n // 10)]
        raw = encode(api2.request, 7, {"ReplicaId": -1, "IsolationLevel": 0, "Topics": topics})
        facts = RequestFacts(principal=ME, host="h", api_key=2, api_version=7, topic_names={})
        enforcer = Enforcer(api2, 7)
        return best(lambda: enforcer.enforce(auth, facts, raw))

    pair("ListOffsets v7 request checked, all allowed", "partitions:", list_offsets, 1000)

    def fetch(n: int) -> float:
        api1 = R.api(1)
        body = encode(api1.response, 12, {"ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0, "Responses": [
            {"Topic": f"t{t:05d}", "Partitions": [{"PartitionIndex": p, "ErrorCode": 0, "HighWatermark": 5,
                                                   "LastStableOffset": 5, "LogStartOffset": 0,
                                                   "AbortedTransactions": [], "PreferredReadReplica": -1,
                                                   "Records": b"x" * 100} for p in range(10)]}
            for t in range(n // 10)]})  # fmt: skip
        view = memoryview(body)
        return best(lambda: fetch_traffic(12, view, TopicNames()))

    pair("Audit / Prometheus reading of a Fetch answer", "partitions:", fetch, 1000)

    def refresh(n: int, changed: bool) -> float:
        reader = TopicReader(api.response)
        bodies = [metadata(n, 1), metadata(n + 1, 1) if changed else metadata(n, 1)]
        patterns = [re.compile(f"{CLUSTER_PREFIX}-{g:03d}.*") for g in range(200)]
        state: dict[str, Any] = {"at": 0, "snapshot": TopicsSnapshot()}

        def once() -> None:  # the shell's refresh: read, snapshot, inherit, every regex
            state["at"] ^= 1
            previous = state["snapshot"]
            snapshot = TopicsSnapshot.of(reader.read(12, bodies[state["at"]]), previous=previous)
            snapshot.inherit(previous)
            for pattern in patterns:
                snapshot.matching(pattern)
            state["snapshot"] = snapshot
        once()
        return best(once)

    pair("Coordinator refresh, 200 regexes, unchanged", "topics:", lambda n: refresh(n, False), 1000)
    pair("Coordinator refresh, 200 regexes, a topic added or removed", "topics:", lambda n: refresh(n, True), 1000)
    return out


def main() -> int:
    """Print the table (Markdown) for RESULTS.md."""
    print("| place | size (N / 10 N) | at N, ms | at 10 N, ms | 10 N / N |")
    print("|---|---|---:|---:|---:|")
    for what, size, small, large in rows():
        print(f"| {what} | {size} | {small:.3f} | {large:.3f} | {large / small if small else float('nan'):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
