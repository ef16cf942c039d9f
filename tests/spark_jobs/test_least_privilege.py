"""least_privilege: denied requests per principal and resource, and the smallest ACL set that
allows the traffic seen. Expectations are written by hand from the rows given."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from observers.audit_schema import AUDIT_SCHEMA
from spark_jobs import least_privilege
from spark_jobs.least_privilege import Acl, collapse, command, propose
from tests.spark_jobs.rows import (
    ALICE,
    BOB,
    CAROL,
    FETCH,
    FIND_COORDINATOR,
    JOIN_GROUP,
    METADATA,
    OFFSET_COMMIT,
    PRODUCE,
    at,
    frame,
    request,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def lit(principal: str, rtype: str, name: str, operation: str, requests: int = 1) -> Acl:
    return Acl(principal=principal, resource_type=rtype, name=name, operation=operation, names=(name,),
               requests=requests)


def pre(principal: str, rtype: str, name: str, operation: str, names: tuple[str, ...]) -> Acl:
    return Acl(principal=principal, resource_type=rtype, name=name, operation=operation,
               pattern_type="PREFIXED", names=names)


# -- the proposal, pure ------------------------------------------------------------------------


def test_an_operation_implied_by_another_on_the_same_resource_is_dropped() -> None:
    needed = [
        (BOB, "Topic", "orders-eu", "Describe", 4), (BOB, "Topic", "orders-eu", "Write", 3),
        (BOB, "Topic", "clicks", "Describe", 1),  # nothing implies it: stays
        (BOB, "Group", "billing", "Describe", 1), (BOB, "Group", "billing", "Read", 2),
        (BOB, "Topic", "cfg", "DescribeConfigs", 1), (BOB, "Topic", "cfg", "AlterConfigs", 1),
        (BOB, "Cluster", "kafka-cluster", "IdempotentWrite", 1),
        (ALICE, "Topic", "orders-eu", "Describe", 1),  # another principal: her own
    ]
    got = propose(needed)
    assert got == [
        lit(ALICE, "Topic", "orders-eu", "Describe"),
        lit(BOB, "Cluster", "kafka-cluster", "IdempotentWrite"),
        lit(BOB, "Group", "billing", "Read"),
        lit(BOB, "Topic", "cfg", "AlterConfigs"),
        lit(BOB, "Topic", "clicks", "Describe"),
        lit(BOB, "Topic", "orders-eu", "Write"),
    ]
    assert [a.requests for a in got] == [1, 1, 2, 1, 1, 3]


def test_prefixes_collapse_only_when_asked_and_at_least_n_share_one() -> None:
    needed = [(BOB, "Topic", name, "Write", 1) for name in ("orders-eu", "orders-us", "orders-asia", "clicks")]
    assert propose(needed) == sorted(lit(BOB, "Topic", n, "Write") for n in
                                     ("orders-eu", "orders-us", "orders-asia", "clicks"))
    assert propose(needed, prefix_min=3) == [
        lit(BOB, "Topic", "clicks", "Write"),
        pre(BOB, "Topic", "orders-", "Write", ("orders-asia", "orders-eu", "orders-us")),
    ]
    # Four do not share one prefix: nothing collapses.
    assert propose(needed, prefix_min=4) == propose(needed)


def test_the_longest_shared_prefix_wins_and_covers_literals_it_allows() -> None:
    needed = [
        *((BOB, "Topic", n, "Read", 1) for n in ("metrics.eu.cpu", "metrics.eu.mem", "metrics.us.cpu")),
        (BOB, "Topic", "metrics.eu.disk", "Describe", 1),  # Read on the prefix allows it
        (BOB, "Topic", "metrics.us.mem", "Write", 1),  # another operation: kept
        (BOB, "Cluster", "kafka-cluster", "Create", 1),  # never a prefix
    ]
    assert propose(needed, prefix_min=2) == [
        lit(BOB, "Cluster", "kafka-cluster", "Create"),
        pre(BOB, "Topic", "metrics.eu.", "Read", ("metrics.eu.cpu", "metrics.eu.mem")),
        lit(BOB, "Topic", "metrics.us.cpu", "Read"),
        lit(BOB, "Topic", "metrics.us.mem", "Write"),
    ]


def test_collapse_by_hand() -> None:
    assert collapse(["a-1", "a-2", "b.x-1", "b.x-2", "b.y", "c"], 2) == (
        [("b.x-", ["b.x-1", "b.x-2"]), ("a-", ["a-1", "a-2"])], ["b.y", "c"])
    assert collapse(["a-1", "a-2", "b.x-1", "b.x-2", "b.y", "c"], 3) == (
        [("b.", ["b.x-1", "b.x-2", "b.y"])], ["a-1", "a-2", "c"])
    assert collapse(["x", "y"], 1) == ([], ["x", "y"])  # no '-' or '.': nothing to share


def test_commands_for_both_tools() -> None:
    orders = pre(BOB, "Topic", "orders-", "Write", ("orders-eu",))
    assert command(orders, "ksidecar acls") == (
        'ksidecar acls --bootstrap-server "$BOOTSTRAP" --add --allow-principal User:bob --operation Write '
        "--topic orders- --resource-pattern-type prefixed")
    assert command(lit(BOB, "Group", "my group", "Read"), "kafka-acls.sh") == (
        'kafka-acls.sh --bootstrap-server "$BOOTSTRAP" --add --allow-principal User:bob --operation Read '
        "--group 'my group'")
    assert command(lit(BOB, "Cluster", "kafka-cluster", "IdempotentWrite"), "ksidecar acls") == (
        'ksidecar acls --bootstrap-server "$BOOTSTRAP" --add --allow-principal User:bob '
        "--operation IdempotentWrite --cluster")
    assert command(lit(BOB, "DelegationToken", "t", "Describe"), "ksidecar acls").startswith(
        "# ksidecar acls has no --delegation-token: ")


# -- the Spark part ------------------------------------------------------------------------------

SHADOW_WORKLOAD = (
    # bob's producer: Metadata (Describe, and the auto-creation check), then Produce.
    ("2026-03-01 10:00", METADATA, None, [("Topic", "orders-eu", "Describe", "shadow"),
                                          ("Topic", "orders-eu", "Create", "shadow")]),
    ("2026-03-01 10:01", PRODUCE, [("orders-eu", 0, 10, 1), ("orders-eu", 1, 10, 1)],
     [("Topic", "orders-eu", "Write", "shadow")]),
    ("2026-03-01 10:05", PRODUCE, [("orders-eu", 0, 10, 1)], [("Topic", "orders-eu", "Write", "shadow")]),
    # bob's consumer.
    ("2026-03-01 10:02", FIND_COORDINATOR, None, [("Group", "billing", "Describe", "shadow")]),
    ("2026-03-01 10:03", JOIN_GROUP, None, [("Group", "billing", "Read", "shadow")]),
    ("2026-03-01 10:04", FETCH, [("orders-eu", 0, 20, 2)], [("Topic", "orders-eu", "Read", "shadow")]),
    ("2026-03-01 10:06", OFFSET_COMMIT, None, [("Group", "billing", "Read", "shadow"),
                                               ("Topic", "orders-eu", "Read", "shadow")]),
)


def workload(spark: SparkSession) -> Any:
    return frame(
        spark,
        *(request(api, time, parts, principal=BOB, denials=d) for time, api, parts, d in SHADOW_WORKLOAD),
        # alice was allowed: her served Produce and Fetch rows say what she needs.
        request(PRODUCE, "2026-03-01 11:00", [("orders-us", 0, 10, 1)], principal=ALICE),
        request(FETCH, "2026-03-01 11:01", [("orders-us", 0, 10, 1), ("orders-asia", 0, 0, 0)], principal=ALICE),
        # carol was refused for real (enforce): in the denied table, proposed only with --enforced.
        request(PRODUCE, "2026-03-01 12:00", [("payments", 0, 10, 1)], principal=CAROL, error_code=29,
                denials=[("Topic", "payments", "Write", "enforce")]),
        request(METADATA, "2026-03-01 09:00", inventory={"payments": 1}, principal=CAROL),  # not a need
    )


def test_the_denied_table_by_hand(spark: SparkSession) -> None:
    got = {(r["principal"], r["resource_type"], r["resource_name"], r["operation"], r["mode"]):
           (r["apis"], r["requests"], r["first_seen"], r["last_seen"])
           for r in least_privilege.transform_denied(workload(spark)).collect()}
    def t(text: str) -> datetime:  # collected timestamps are naive, in the session's UTC
        return at(text).replace(tzinfo=None)

    assert got == {
        (BOB, "Topic", "orders-eu", "Describe", "shadow"): (["Metadata"], 1, t("2026-03-01 10:00"), t("2026-03-01 10:00")),
        (BOB, "Topic", "orders-eu", "Create", "shadow"): (["Metadata"], 1, t("2026-03-01 10:00"), t("2026-03-01 10:00")),
        (BOB, "Topic", "orders-eu", "Write", "shadow"): (["Produce"], 2, t("2026-03-01 10:01"), t("2026-03-01 10:05")),
        (BOB, "Group", "billing", "Describe", "shadow"): (["FindCoordinator"], 1, t("2026-03-01 10:02"), t("2026-03-01 10:02")),
        (BOB, "Group", "billing", "Read", "shadow"): (["JoinGroup", "OffsetCommit"], 2, t("2026-03-01 10:03"), t("2026-03-01 10:06")),
        (BOB, "Topic", "orders-eu", "Read", "shadow"): (["Fetch", "OffsetCommit"], 2, t("2026-03-01 10:04"), t("2026-03-01 10:06")),
        (CAROL, "Topic", "payments", "Write", "enforce"): (["Produce"], 1, t("2026-03-01 12:00"), t("2026-03-01 12:00")),
    }


def needed(spark: SparkSession, **flags: bool) -> dict[tuple[str, str, str, str], int]:
    rows = least_privilege.transform_needed(workload(spark), **flags).collect()
    return {(r["principal"], r["resource_type"], r["resource_name"], r["operation"]): r["requests"] for r in rows}


def test_needs_from_shadow_denials_and_served_traffic(spark: SparkSession) -> None:
    assert needed(spark) == {
        (BOB, "Topic", "orders-eu", "Describe"): 1,
        (BOB, "Topic", "orders-eu", "Write"): 2,  # denied and served: the same two requests
        (BOB, "Group", "billing", "Describe"): 1,
        (BOB, "Group", "billing", "Read"): 2,
        (BOB, "Topic", "orders-eu", "Read"): 2,  # the Fetch, the OffsetCommit
        (ALICE, "Topic", "orders-us", "Write"): 1,
        (ALICE, "Topic", "orders-us", "Read"): 1,
        (ALICE, "Topic", "orders-asia", "Read"): 1,
    }
    both = needed(spark, enforced=True, auto_create=True)
    assert set(both) - set(needed(spark)) == {(BOB, "Topic", "orders-eu", "Create"), (CAROL, "Topic", "payments", "Write")}


def test_the_proposal_for_the_workload(spark: SparkSession) -> None:
    acls = least_privilege.transform_acls(spark, least_privilege.transform_needed(workload(spark)), 2)
    got = [(r["principal"], r["resource_type"], r["pattern_type"], r["name"], r["operation"], r["names"], r["requests"])
           for r in acls.orderBy("principal", "resource_type", "name", "operation").collect()]
    assert got == [
        (ALICE, "Topic", "PREFIXED", "orders-", "Read", ["orders-asia", "orders-us"], 2),
        (ALICE, "Topic", "LITERAL", "orders-us", "Write", ["orders-us"], 1),
        (BOB, "Group", "LITERAL", "billing", "Read", ["billing"], 2),
        (BOB, "Topic", "LITERAL", "orders-eu", "Read", ["orders-eu"], 2),
        (BOB, "Topic", "LITERAL", "orders-eu", "Write", ["orders-eu"], 2),
    ]


def test_the_command_line_writes_tables_and_scripts(spark: SparkSession, tmp_path: Path) -> None:
    audit, out = tmp_path / "audit", tmp_path / "out"
    rows = [r for batch in (
        request(PRODUCE, "2026-03-01 10:01", [("orders-eu", 0, 10, 1)], principal=BOB,
                denials=[("Topic", "orders-eu", "Write", "shadow")]),
        request(JOIN_GROUP, "2026-03-01 10:03", None, principal=BOB, denials=[("Group", "billing", "Read", "shadow")]),
    ) for r in batch]
    directory = audit / "dt=2026-03-01" / "hour=10"
    directory.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=AUDIT_SCHEMA), directory / "part-1-1.parquet")
    args = least_privilege.options.job_parser("", least_privilege.options.add_least_privilege).parse_args(
        ["--audit", str(audit), "--out", str(out)])
    least_privilege.run(spark, args)
    acls = pq.read_table(out / "acls").to_pylist()
    assert [(a["resource_type"], a["name"], a["operation"]) for a in acls] == [
        ("Group", "billing", "Read"), ("Topic", "orders-eu", "Write")]
    assert (out / "acls.sh").read_text() == least_privilege.SCRIPT_HEAD + (
        'ksidecar acls --bootstrap-server "$BOOTSTRAP" --add --allow-principal User:bob --operation Read --group billing\n'
        'ksidecar acls --bootstrap-server "$BOOTSTRAP" --add --allow-principal User:bob --operation Write --topic orders-eu\n')
    assert "kafka-acls.sh --bootstrap-server" in (out / "kafka-acls.sh").read_text()
    denied = pq.read_table(out / "denied").to_pylist()
    assert [(d["resource_name"], d["operation"], d["requests"]) for d in denied] == [
        ("billing", "Read", 1), ("orders-eu", "Write", 1)]
    assert denied[0]["first_seen"].replace(tzinfo=UTC) == datetime(2026, 3, 1, 10, 3, tzinfo=UTC)


def test_prefix_min_must_be_positive() -> None:
    parser = least_privilege.options.job_parser("", least_privilege.options.add_least_privilege)
    with pytest.raises(SystemExit):
        parser.parse_args(["--audit", "a", "--out", "o", "--prefix-min", "0"])


def test_the_report_section_lists_denials_and_proposals(spark: SparkSession, tmp_path: Path) -> None:
    from spark_jobs import report
    from tests.spark_jobs.report_check import parse, summary

    out = tmp_path / "out"
    df = workload(spark)
    least_privilege.load(spark, least_privilege.transform_denied(df),
                         least_privilege.transform_acls(spark, least_privilege.transform_needed(df), None),
                         str(out / "data" / "least_privilege"))
    page = parse(report.render(out, export=False))
    denied = page.tables["denied"]
    assert denied[0] == ["principal", "resource", "operation", "mode", "APIs", "requests", "first seen", "last seen"]
    assert ["User:carol", "Topic payments", "Write", "refused", "Produce", "1", "2026-03-01 12:00",
            "2026-03-01 12:00"] in denied
    assert ["User:bob", "Group billing", "Read", "shadow (served)", "JoinGroup, OffsetCommit", "2",
            "2026-03-01 10:03", "2026-03-01 10:06"] in denied
    assert len(denied) == 1 + 7
    proposed = page.tables["proposed-acls"]
    assert [r[:5] for r in proposed[1:]] == [
        [ALICE, "Topic", "literal", "orders-asia", "Read"], [ALICE, "Topic", "literal", "orders-us", "Read"],
        [ALICE, "Topic", "literal", "orders-us", "Write"], [BOB, "Group", "literal", "billing", "Read"],
        [BOB, "Topic", "literal", "orders-eu", "Read"], [BOB, "Topic", "literal", "orders-eu", "Write"],
    ]
    assert proposed[-1][-1] == ('ksidecar acls --bootstrap-server "$BOOTSTRAP" --add --allow-principal User:bob '
                                "--operation Write --topic orders-eu")
    assert summary(page, "denials (refused / shadow)") == "1 / 9"  # 1+1+2+1+2+2 shadow


def test_the_report_says_when_nothing_was_denied(spark: SparkSession, tmp_path: Path) -> None:
    from spark_jobs import report
    from tests.spark_jobs.report_check import parse

    out = tmp_path / "out"
    df = frame(spark, request(METADATA, "2026-03-01 10:00", principal=BOB))
    least_privilege.load(spark, least_privilege.transform_denied(df),
                         least_privilege.transform_acls(spark, least_privilege.transform_needed(df), None),
                         str(out / "data" / "least_privilege"))
    page = parse(report.render(out, export=False))
    assert {"denied", "proposed-acls"} <= page.empty
    assert any(t.startswith("Nothing was denied") for t in page.text)
