"""upgrade_readiness: the release table against KIP-896, and the job over hand-built Parquet
(clients, breaking, old_software, matrix), every expected row written by hand."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from observers.audit_schema import AUDIT_SCHEMA, VERSION_KEY
from spark_jobs import kafka_releases, options, upgrade_readiness
from spark_jobs.kafka_releases import UnknownTarget

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SOFTWARE = ("client_software_name", "client_software_version")

# ---------------------------------------------------------------------------------------------
# The release table


@pytest.mark.parametrize(("api", "key", "low"), [
    # KIP-896 (as adopted for 4.0): Produce v0-v2, Fetch v0-v3, ListOffsets v0, OffsetCommit
    # v0-v1 and JoinGroup v0-v1 removed; Metadata v0-v3 kept after all (KAFKA-18648).
    ("Produce", 0, 3), ("Fetch", 1, 4), ("Metadata", 3, 0), ("OffsetCommit", 8, 2),
    ("ListOffsets", 2, 1), ("JoinGroup", 11, 2), ("OffsetFetch", 9, 1),
    ("FindCoordinator", 10, 0), ("CreateTopics", 19, 2), ("DeleteTopics", 20, 1),
])
def test_kafka_4_0_minimums_are_kip_896s(api: str, key: int, low: int) -> None:
    target = kafka_releases.release("4.0")

    assert target.names[key] == api
    assert target.versions[key][0] == low
    assert target.supports(key, low) and not (low and target.supports(key, low - 1))


def test_releases_by_hand() -> None:
    k39, k40, k41 = (kafka_releases.release(n) for n in ("3.9", "4.0", "4.1"))

    # 3.9 still serves everything from version 0, and the ZooKeeper-era LeaderAndIsr (4).
    assert k39.versions[0] == (0, 11) and k39.versions[1] == (0, 17) and 4 in k39.versions
    # 4.0: Produce 3-12, Fetch 4-17; LeaderAndIsr gone with ZooKeeper.
    assert k40.versions[0] == (3, 12) and k40.versions[1] == (4, 17) and 4 not in k40.versions
    # 4.1: Produce v13 and Fetch v18 (topic ids), JoinGroup v0-v1 back (KAFKA-19444).
    assert k41.versions[0] == (3, 13) and k41.versions[1] == (4, 18)
    assert k41.versions[11] == (0, 9)
    assert "4ae681446f18f9a6d7a59f317013ef82379a4ba4" in k40.source
    # 4.2 (at 4.2.1): ListOffsets v11, WriteTxnMarkers v2, ShareFetch/ShareAcknowledge v2;
    # 4.3 (at 4.3.1, the protocol pin): DescribeLogDirs v5 on top.
    k42, k43 = kafka_releases.release("4.2"), kafka_releases.release("4.3")
    assert k42.versions[2] == (1, 11) and k42.versions[27] == (1, 2)
    assert k42.versions[78] == k42.versions[79] == (1, 2) and k42.versions[35] == (1, 4)
    assert k43.versions[35] == (1, 5) and k43.versions[2] == (1, 11)
    assert "4.3.1 (26b251a451ce941d3d7a55e6487bcb7f16b5ad48)" in k43.source
    assert kafka_releases.release_names() == ["3.9", "4.0", "4.1", "4.2", "4.3"]


def test_spec_comments_are_stripped_outside_strings() -> None:
    text = '{"a": "http://x", // a comment with "quotes"\n "b": "q\\"//", "c": "3-12" // end\n}'

    assert json.loads(kafka_releases.strip_comments(text)) == {"a": "http://x", "b": 'q"//', "c": "3-12"}
    assert kafka_releases.parse_range("3-12") == (3, 12)
    assert kafka_releases.parse_range("0") == (0, 0)
    assert kafka_releases.parse_range("none") is None


def test_a_profile_is_a_target(tmp_path: Path) -> None:
    profile = tmp_path / "vendor.json"
    profile.write_text(json.dumps({"0": [3, 8], "18": [0, 3], "10000": [0, 0]}))

    target = kafka_releases.resolve(str(profile))

    assert target.versions == {0: (3, 8), 18: (0, 3), 10000: (0, 0)}
    assert target.names[0] == "Produce" and 10000 not in target.names
    assert target.supports(0, 8) and not target.supports(0, 9) and not target.supports(1, 12)


@pytest.mark.parametrize("text", ['{"0": [5, 3]}', '{"0": 3}', "[]", "{", '{"x": [0, 1]}'])
def test_a_bad_profile_is_refused(tmp_path: Path, text: str) -> None:
    profile = tmp_path / "bad.json"
    profile.write_text(text)
    with pytest.raises(UnknownTarget, match=r"bad\.json"):
        kafka_releases.resolve(str(profile))


def test_an_unknown_target_names_the_releases() -> None:
    with pytest.raises(UnknownTarget, match=r"3\.9, 4\.0, 4\.1, 4\.2, 4\.3"):
        kafka_releases.resolve("5.0")


@pytest.mark.parametrize(("name", "version", "minimum"), [
    ("librdkafka", "2.6.1", "librdkafka=2.10"),
    ("LibRdKafka", "2.6.1", "librdkafka=2.10"),   # names compare without case
    ("kafka-python", "2.0.2", "kafka-python=2.1"),
    ("kafka-python", "v2.0.2", "kafka-python=2.0.3"),
])
def test_older_software(name: str, version: str, minimum: str) -> None:
    wanted = options.parse_minimum(minimum)
    assert upgrade_readiness.older_than(name, version, [wanted]) == minimum


@pytest.mark.parametrize(("name", "version"), [
    ("librdkafka", "2.10.0"), ("librdkafka", "2.10"), ("librdkafka", "2.10.0-RC1"),
    ("confluent-kafka-python", "2.6.0-rdkafka-2.6.0"), (None, None), ("librdkafka", "dev"),
])
def test_not_older_software(name: str | None, version: str | None) -> None:
    assert upgrade_readiness.older_than(name, version, [("librdkafka", "2.10")]) is None


# ---------------------------------------------------------------------------------------------
# The job over hand-built Parquet

_ids = count(1)
ALICE, BOB, CAROL = "User:alice", "User:bob", "User:carol"
NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
         11: "JoinGroup", 10000: "Vendor"}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def req(api_key: int, version: int, time: str, who: tuple[str | None, str, str],
        software: tuple[str, str] | None = None, partitions: int = 1) -> list[dict[str, Any]]:
    """The audit rows of one request (a Produce/Fetch one row per partition)."""
    client_id, principal, host = who
    request_id = next(_ids)
    base: dict[str, Any] = {name: None for name in AUDIT_SCHEMA.names}
    base.update({
        "time": at(time), "sidecar_broker_id": 1, "listener": "PLAINTEXT",
        "client_host": host, "client_port": 40000 + request_id % 7, "principal": principal,
        "client_id": client_id, "api_key": api_key, "api_name": NAMES[api_key],
        "api_version": version, "correlation_id": request_id, "request_id": request_id,
        "first_row": True, "error_code": 0, "request_bytes": 80, "response_bytes": 40,
        "latency_us": 500, "upstream_latency_us": 400, "local": False,
        "client_software_name": software[0] if software else None,
        "client_software_version": software[1] if software else None,
    })
    if api_key in (0, 1):
        return [{**base, "first_row": p == 0, "topic": "t", "partition": p, "bytes": 10,
                 "records": 1} for p in range(partitions)]
    return [base]


def write(root: Path, hour: str, rows: list[dict[str, Any]], *, software: bool = True) -> None:
    """One audit file: the current schema with the software columns, or (``software``
    false) a version 2 file, which has neither them nor a version above 2."""
    fields = list(AUDIT_SCHEMA)
    for name in SOFTWARE:
        if name not in AUDIT_SCHEMA.names:
            fields.append(pa.field(name, pa.string()))
    version = AUDIT_SCHEMA.metadata[VERSION_KEY.encode()].decode()
    if not software:
        fields = [f for f in fields if f.name not in SOFTWARE]
        version = "2"
    schema = pa.schema(fields, metadata={VERSION_KEY: version})
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in fields} for r in rows], schema)
    directory = root / f"dt={hour[:10]}" / f"hour={hour[11:13]}"
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, directory / f"part-{next(_ids)}.parquet")


LEGACY = ("legacy", ALICE, "10.0.0.1")           # kafka-python at 0.10.1: ApiVersions v0
JAVA = ("svc", BOB, "10.0.0.2")
MODERN = ("c", CAROL, "10.0.0.3")
OLD_FILE = ("old-file", ALICE, "10.0.0.4")
JAVA_SW = ("apache-kafka-java", "3.9.0")
RDKAFKA_SW = ("librdkafka", "2.6.1")


@pytest.fixture
def audit(tmp_path: Path) -> Path:
    root = tmp_path / "audit"
    write(root, "2026-03-01 10", [
        *req(0, 2, "2026-03-01 10:00", LEGACY, partitions=2),  # one request, two rows
        *req(11, 1, "2026-03-01 10:05", LEGACY),
        *req(3, 1, "2026-03-01 10:06", LEGACY),
        *req(8, 2, "2026-03-01 10:07", LEGACY),
        *req(0, 2, "2026-03-01 10:30", LEGACY),
        *req(0, 11, "2026-03-01 10:10", JAVA, JAVA_SW),
        *req(2, 0, "2026-03-01 10:11", JAVA, JAVA_SW),
        *req(10000, 0, "2026-03-01 10:12", JAVA, JAVA_SW),
        *req(0, 9, "2026-03-01 10:20", MODERN, RDKAFKA_SW),
        *req(3, 12, "2026-03-01 10:21", MODERN, RDKAFKA_SW),
    ])
    write(root, "2026-03-01 11", [
        *req(1, 3, "2026-03-01 11:00", LEGACY),
        *req(1, 13, "2026-03-01 11:01", MODERN, RDKAFKA_SW),
        *req(1, 17, "2026-03-01 11:02", JAVA, JAVA_SW),
    ])
    write(root, "2026-03-01 11", [*req(0, 3, "2026-03-01 11:30", OLD_FILE)], software=False)
    return root


def run(spark: SparkSession, audit: Path, out: Path, *extra: str) -> dict[str, list[dict[str, Any]]]:
    parser = options.job_parser("", options.add_upgrade_readiness)
    args: argparse.Namespace = parser.parse_args(["--audit", str(audit), "--out", str(out), *extra])
    upgrade_readiness.run(spark, args)
    return {name: [{k: utc(v) for k, v in row.items()} for row in pq.read_table(out / name).to_pylist()]
            for name in ("clients", "breaking", "old_software", "matrix", "target")}


def utc(value: Any) -> Any:
    """Spark's timestamps read back naive, in UTC (the session's zone)."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def test_clients_that_would_break_on_4_0(spark: SparkSession, audit: Path, tmp_path: Path) -> None:
    out = run(spark, audit, tmp_path / "out", "--target", "4.0",
              "--min-software", "librdkafka=2.10", "--min-software", "apache-kafka-java=3.9")

    # By hand, from KIP-896: the legacy client's Produce v2 (min 3), Fetch v3 (min 4) and
    # JoinGroup v1 (min 2) are gone in 4.0, its Metadata v1 and OffsetCommit v2 are not.
    # The Java client's ListOffsets v0 (min 1) is gone, the vendor key 10000 never served.
    legacy = {"software_name": None, "software_version": None, "client_id": "legacy",
              "principal": ALICE, "client_host": "10.0.0.1"}
    java = {"software_name": "apache-kafka-java", "software_version": "3.9.0",
            "client_id": "svc", "principal": BOB, "client_host": "10.0.0.2"}
    assert out["breaking"] == [
        {**java, "api_key": 2, "api_name": "ListOffsets", "versions": [0], "target_min": 1,
         "target_max": 10, "first_seen": at("2026-03-01 10:11"),
         "last_seen": at("2026-03-01 10:11"), "requests": 1},
        {**java, "api_key": 10000, "api_name": "Vendor", "versions": [0], "target_min": None,
         "target_max": None, "first_seen": at("2026-03-01 10:12"),
         "last_seen": at("2026-03-01 10:12"), "requests": 1},
        {**legacy, "api_key": 0, "api_name": "Produce", "versions": [2], "target_min": 3,
         "target_max": 12, "first_seen": at("2026-03-01 10:00"),
         "last_seen": at("2026-03-01 10:30"), "requests": 2},
        {**legacy, "api_key": 1, "api_name": "Fetch", "versions": [3], "target_min": 4,
         "target_max": 17, "first_seen": at("2026-03-01 11:00"),
         "last_seen": at("2026-03-01 11:00"), "requests": 1},
        {**legacy, "api_key": 11, "api_name": "JoinGroup", "versions": [1], "target_min": 2,
         "target_max": 9, "first_seen": at("2026-03-01 10:05"),
         "last_seen": at("2026-03-01 10:05"), "requests": 1},
    ]

    clients = {(c["client_id"], c["software_name"], c["software_version"]):
               (c["requests"], c["unsupported_requests"], c["first_seen"], c["last_seen"])
               for c in out["clients"]}
    assert clients == {
        ("legacy", None, None): (6, 4, at("2026-03-01 10:00"), at("2026-03-01 11:00")),
        ("svc", "apache-kafka-java", "3.9.0"): (4, 2, at("2026-03-01 10:10"), at("2026-03-01 11:02")),
        ("c", "librdkafka", "2.6.1"): (3, 0, at("2026-03-01 10:20"), at("2026-03-01 11:01")),
        # From a schema version 2 file: no software columns, read as unknown.
        ("old-file", None, None): (1, 0, at("2026-03-01 11:30"), at("2026-03-01 11:30")),
    }
    assert [c["client_id"] for c in out["clients"]][:2] == ["legacy", "svc"]  # breaking first

    assert out["old_software"] == [
        {"software_name": "librdkafka", "software_version": "2.6.1", "client_id": "c",
         "principal": CAROL, "client_host": "10.0.0.3", "minimum": "librdkafka=2.10",
         "first_seen": at("2026-03-01 10:20"), "last_seen": at("2026-03-01 11:01"), "requests": 3},
    ]

    # Unknown software is split by client.id; known software is not.
    matrix = {(m["software_name"], m["client_id"], m["api_name"], m["api_version"]):
              (m["requests"], m["clients"], m["supported"]) for m in out["matrix"]}
    assert matrix == {
        (None, "legacy", "Produce", 2): (2, 1, False), (None, "old-file", "Produce", 3): (1, 1, True),
        (None, "legacy", "JoinGroup", 1): (1, 1, False), (None, "legacy", "Metadata", 1): (1, 1, True),
        (None, "legacy", "OffsetCommit", 2): (1, 1, True), (None, "legacy", "Fetch", 3): (1, 1, False),
        ("apache-kafka-java", None, "Produce", 11): (1, 1, True),
        ("apache-kafka-java", None, "ListOffsets", 0): (1, 1, False),
        ("apache-kafka-java", None, "Vendor", 0): (1, 1, False),
        ("apache-kafka-java", None, "Fetch", 17): (1, 1, True),
        ("librdkafka", None, "Produce", 9): (1, 1, True),
        ("librdkafka", None, "Metadata", 12): (1, 1, True),
        ("librdkafka", None, "Fetch", 13): (1, 1, True),
    }
    target = {t["api_key"]: (t["api_name"], t["min_version"], t["max_version"]) for t in out["target"]}
    assert target[0] == ("Produce", 3, 12) and {t["target"] for t in out["target"]} == {"Kafka 4.0"}


def test_on_3_9_nobody_breaks_but_the_vendor_key(spark: SparkSession, audit: Path, tmp_path: Path) -> None:
    out = run(spark, audit, tmp_path / "out", "--target", "3.9")

    assert [(b["client_id"], b["api_name"], b["versions"]) for b in out["breaking"]] == [
        ("svc", "Vendor", [0])]
    assert out["old_software"] == []


def test_a_profile_target(spark: SparkSession, audit: Path, tmp_path: Path) -> None:
    profile = tmp_path / "broker.json"
    # A broker that serves Produce 0-9 and Fetch 0-12 and nothing else the clients used.
    profile.write_text(json.dumps({"0": [0, 9], "1": [0, 12], "3": [0, 12], "8": [0, 9],
                                   "11": [0, 9], "2": [0, 9], "10000": [0, 0]}))

    out = run(spark, audit, tmp_path / "out", "--target", str(profile))

    assert sorted((b["client_id"], b["api_name"], b["versions"], b["target_max"])
                  for b in out["breaking"]) == [
        ("c", "Fetch", [13], 12), ("svc", "Fetch", [17], 12), ("svc", "Produce", [11], 9)]


def test_an_empty_range_writes_empty_tables(spark: SparkSession, audit: Path, tmp_path: Path) -> None:
    out = run(spark, audit, tmp_path / "out", "--since", "2030-01-01")

    assert out["clients"] == out["breaking"] == out["matrix"] == []
    assert len(out["target"]) > 50


# ---------------------------------------------------------------------------------------------
# The report section


def test_the_report_section_lists_them_and_renders_in_chromium(
    spark: SparkSession, audit: Path, tmp_path: Path
) -> None:
    from spark_jobs import report
    from tests.spark_jobs.browser import chromium, launch, load
    from tests.spark_jobs.report_check import parse, summary

    out = tmp_path / "report"
    run(spark, audit, out / "data" / "upgrade_readiness", "--target", "4.0",
        "--min-software", "librdkafka=2.10")

    index = report.render(out, title="readiness")
    page = parse(index)

    assert summary(page, "clients that would break on Kafka 4.0") == "2 of 4"
    assert page.tables["readiness-breaking"][1:] == [
        ["apache-kafka-java 3.9.0", "svc", BOB, "10.0.0.2", "ListOffsets (2)", "0", "1–10",
         "2026-03-01 10:11", "2026-03-01 10:11", "1"],
        ["apache-kafka-java 3.9.0", "svc", BOB, "10.0.0.2", "Vendor (10000)", "0", "not served",
         "2026-03-01 10:12", "2026-03-01 10:12", "1"],
        ["unknown software", "legacy", ALICE, "10.0.0.1", "Produce (0)", "2", "3–12",
         "2026-03-01 10:00", "2026-03-01 10:30", "2"],
        ["unknown software", "legacy", ALICE, "10.0.0.1", "Fetch (1)", "3", "4–17",
         "2026-03-01 11:00", "2026-03-01 11:00", "1"],
        ["unknown software", "legacy", ALICE, "10.0.0.1", "JoinGroup (11)", "1", "2–9",
         "2026-03-01 10:05", "2026-03-01 10:05", "1"],
    ]
    assert [row[:2] for row in page.tables["readiness-old"][1:]] == [["librdkafka 2.6.1", "c"]]
    assert len(page.tables["readiness-clients"]) == 1 + 4
    matrix = page.specs["readiness_matrix"]
    cells = {(c["software"], c["api"]): (c["versions"], c["status"])
             for c in matrix["data"]["values"]}
    assert cells[("unknown software (legacy)", "Produce (0)")] == ("2", "breaks")
    assert cells[("unknown software (old-file)", "Produce (0)")] == ("3", "served")
    assert cells[("librdkafka 2.6.1", "Fetch (1)")] == ("13", "served")

    found = chromium()
    if found is None:
        pytest.skip("chromium is not installed (scripts/test installs it: ensure_chromium)")
    with launch(found) as browser:
        visit = load(browser, index, shots={"readiness": "document.getElementById('readiness')"
                                                         ".scrollIntoView()"})
    assert visit.errors == [] and visit.requests == []
    assert visit.values["charts"] == len(page.specs)


def test_no_client_would_break_and_not_enough_data(
    spark: SparkSession, audit: Path, tmp_path: Path
) -> None:
    from spark_jobs import report
    from tests.spark_jobs.report_check import parse

    texts = {}
    # 10:20-10:25 holds only the librdkafka client's Produce v9 and Metadata v12: 4.0 serves both.
    for name, extra in (("none", ["--target", "4.0", "--since", "2026-03-01T10:20",
                                  "--until", "2026-03-01T10:25"]),
                        ("empty", ["--since", "2030-01-01"])):
        out = tmp_path / name
        run(spark, audit, out / "data" / "upgrade_readiness", *extra)
        page = parse(report.render(out))
        texts[name] = " ".join(page.text)
        assert ("readiness_matrix" in page.specs) == (name == "none")
        assert "readiness-breaking" in page.empty
    assert "No client would break on Kafka 4.0" in texts["none"]
    assert "Not enough data: the audit read has no requests" in texts["empty"]


# ---------------------------------------------------------------------------------------------
# ksidecar audit readiness


def test_the_command_prints_the_same_tables(
    spark: SparkSession, audit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from proxy.tools import cli, readiness

    printed = io.StringIO()
    run_here = readiness.run
    # The command as parsed by ``ksidecar``, run in the tests' session, printed to a buffer.
    monkeypatch.setattr(readiness, "run", lambda args: run_here(args, spark, printed))

    assert cli.main(["audit", "readiness", "--audit", str(audit), "--target", "4.0",
                     "--min-software", "librdkafka=2.10"]) == 0

    lines = printed.getvalue().splitlines()
    assert lines[1] == "Clients that would break on Kafka 4.0: 2 of 4"
    rows = [line.split("  ") for line in lines]
    cells = [[c.strip() for c in row if c.strip()] for row in rows]
    assert ["unknown software", "legacy", ALICE, "10.0.0.1", "Produce (0)", "2", "3–12",
            "2026-03-01 10:00:00", "2026-03-01 10:30:00", "2"] in cells
    assert ["apache-kafka-java 3.9.0", "svc", BOB, "10.0.0.2", "Vendor (10000)", "0", "not served",
            "2026-03-01 10:12:00", "2026-03-01 10:12:00", "1"] in cells
    assert ["librdkafka 2.6.1", "c", CAROL, "10.0.0.3", "librdkafka=2.10", "2026-03-01 10:20:00",
            "2026-03-01 11:01:00", "3"] in cells
    assert ["unknown software (legacy)", "Produce (0)", "2", "2", "2"] in cells
    assert ["unknown software (old-file)", "Produce (0)", "3", "-", "1"] in cells


def test_the_command_refuses_an_unknown_target(capsys: pytest.CaptureFixture[str]) -> None:
    from proxy.tools import cli

    assert cli.main(["audit", "readiness", "--audit", "/nowhere", "--target", "9.9"]) == 2
    assert "not a release in the table (3.9, 4.0, 4.1, 4.2, 4.3)" in capsys.readouterr().err
