"""``ksidecar audit readiness``: which clients would break on a target Kafka, as terminal tables.

    ksidecar audit readiness --audit DIR [--target 4.0 | PROFILE.json]
        [--min-software NAME=VERSION ...] [--since T] [--until T] [--sidecars 1,2] [--out DIR]
    ksidecar audit profile --bootstrap-server HOST:PORT [--out PROFILE.json]

Runs the ``upgrade_readiness`` job (:mod:`spark_jobs.upgrade_readiness`) in a local Spark
session, as ``ksidecar audit report`` runs every job, into ``--out`` (default: a temporary
directory, removed afterwards), then prints what the report's readiness section shows: the
clients that used API versions the target does not serve, the clients older than a
``--min-software``, the API versions seen per client software, and the client software
inventory. Spark, pyarrow and the report's formatting are imported only when the command
runs: declaring it (every ``ksidecar`` start) loads none of them.

``ksidecar audit profile`` captures a target the release table lacks: it asks the broker
(or sidecar) at ``--bootstrap-server`` for its ApiVersions (v3) and writes what it
advertises as a profile, ``{"<api key>": [min, max], ...}``, for ``--target``. A broker
advertises what it serves, with one known exception: Kafka 4.0 lists Produce from 0 but
refuses versions 0-2 (KAFKA-18659), which the release table says.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from spark_jobs import options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


#: The ``ksidecar audit`` subcommands this module serves (:func:`main`).
COMMANDS = ("readiness", "profile")


def add_parser(jobs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``readiness`` and ``profile`` under ``ksidecar audit``."""
    capture_parser = jobs.add_parser(
        "profile", help="capture a broker's ApiVersions as a readiness --target profile",
        description="Ask --bootstrap-server for its ApiVersions and write the API versions it "
        "advertises as a JSON profile for 'ksidecar audit readiness --target FILE'.",
    )
    capture_parser.add_argument("--bootstrap-server", required=True, help="the target broker, host:port")
    capture_parser.add_argument("--out", help="the profile file to write (default: standard output)")
    p = jobs.add_parser(
        "readiness", help="which clients would break on a target Kafka (upgrade_readiness)",
        description="Run the upgrade_readiness job over --audit and print the clients that "
        "used API versions the target does not serve; see docs/spark_jobs.md.",
    )
    p.add_argument("--audit", required=True, help="audit directory or URI (Hive partitions dt=/hour=)")
    p.add_argument("--out", help="keep the job's tables here (default: a temporary directory)")
    p.add_argument("--since", type=options.parse_time, help="first time included (ISO 8601)")
    p.add_argument("--until", type=options.parse_time, help="first time excluded (ISO 8601)")
    p.add_argument("--sidecars", type=options.parse_ids,
                   help="only requests seen by these sidecars (comma-separated broker ids)")
    options.add_upgrade_readiness(p)


def main(args: argparse.Namespace) -> int:
    """Run the parsed ``ksidecar audit`` subcommand (one of :data:`COMMANDS`)."""
    if args.audit_command == "profile":
        return run_profile(args)
    return run(args)


def capture(bootstrap: str) -> dict[str, list[int]]:
    """What the broker at ``bootstrap`` advertises: API key (as text) → ``[min, max]``."""
    from proxy.tools.admin_client import AdminClient

    with AdminClient(bootstrap) as client:
        answer = client.call(18, 3, {"ClientSoftwareName": "ksidecar-cli",
                                     "ClientSoftwareVersion": "0"})
    if answer.ErrorCode:
        from proxy.tools.admin_client import AdminError

        raise AdminError(f"ApiVersions answered error {answer.ErrorCode}")
    return {str(k.ApiKey): [k.MinVersion, k.MaxVersion]
            for k in sorted(answer.ApiKeys, key=lambda k: k.ApiKey)}


def run_profile(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``ksidecar audit profile``: write the profile; exit code 0, or 1 if the broker
    could not be asked."""
    import json
    import sys

    from proxy.tools.admin_client import AdminError

    try:
        profile = capture(args.bootstrap_server)
    except AdminError as exc:
        print(f"ksidecar audit profile: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(profile, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"ksidecar audit profile: {len(profile)} API keys from {args.bootstrap_server} "
              f"written to {args.out}", file=out or sys.stdout)
    else:
        (out or sys.stdout).write(text)
    return 0


def run(args: argparse.Namespace, spark: SparkSession | None = None, out: TextIO | None = None) -> int:
    """Run the job with ``args`` (in ``spark``, else the active session, else one started
    and stopped here) and print its tables to ``out`` (stdout); exit code 0, or 2 when the
    target is neither a release in the table nor a profile file."""
    import sys

    from spark_jobs.kafka_releases import UnknownTarget, resolve

    stream = out or sys.stdout
    try:
        resolve(args.target)
    except UnknownTarget as exc:
        print(f"ksidecar audit readiness: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ksidecar-readiness-") as scratch:
        tables = Path(args.out) if args.out else Path(scratch)
        _run_job(argparse.Namespace(**{**vars(args), "out": str(tables)}), spark)
        stream.write(render(tables))
    return 0


def _run_job(args: argparse.Namespace, spark: SparkSession | None) -> None:
    from pyspark.sql import SparkSession

    from spark_jobs import common, upgrade_readiness

    given = spark or SparkSession.getActiveSession()
    session = given if given is not None else common.session("ksidecar-upgrade-readiness")
    try:
        upgrade_readiness.run(session, args)
    finally:
        if given is None:
            session.stop()


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart, a rule under the headers."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def render(tables: Path) -> str:
    """The job's tables under ``tables`` as text for the terminal."""
    import pyarrow.parquet as pq

    from spark_jobs.report import matrix_label, served_label, software_label, versions_label

    def read(name: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = pq.read_table(tables / name).to_pylist()
        return rows

    def when(value: Any) -> str:
        return "-" if value is None else f"{value:%Y-%m-%d %H:%M:%S}"

    def text(value: Any) -> str:
        return "-" if value is None else str(value)

    def who(r: dict[str, Any]) -> list[str]:
        return [software_label(r["software_name"], r["software_version"]), text(r["client_id"]),
                text(r["principal"]), text(r["client_host"])]

    clients, breaking, old = read("clients"), read("breaking"), read("old_software")
    matrix, target_rows = read("matrix"), read("target")
    target = target_rows[0]["target"] if target_rows else "the target"
    source = target_rows[0]["source"] if target_rows else ""
    at_risk = sum(1 for c in clients if c["unsupported_requests"])
    parts = [f"Target: {target} ({source})\n",
             f"Clients that would break on {target}: {at_risk} of {len(clients)}\n\n"]
    if not clients:
        parts.append("Not enough data: the audit read has no requests.\n")
        return "".join(parts)
    who_headers = ["software", "client.id", "principal", "source IP"]
    if breaking:
        parts.append(table(
            [*who_headers, "API", "versions used", "target serves", "first seen", "last seen",
             "requests"],
            [[*who(r), f"{r['api_name']} ({r['api_key']})", versions_label(r["versions"]),
              served_label(r["target_min"], r["target_max"]), when(r["first_seen"]),
              when(r["last_seen"]), str(r["requests"])] for r in breaking]))
    else:
        parts.append(f"No client would break on {target}: every request used a version it serves.\n")
    if old:
        parts.append("\nClient software older than the minimum:\n")
        parts.append(table(
            [*who_headers, "minimum", "first seen", "last seen", "requests"],
            [[*who(r), text(r["minimum"]), when(r["first_seen"]), when(r["last_seen"]),
              str(r["requests"])] for r in old]))
    per_cell: dict[tuple[str, str, int], tuple[list[int], list[int], int]] = {}
    for r in matrix:
        key = (matrix_label(r), f"{r['api_name']} ({r['api_key']})", r["api_key"])
        seen, refused, requests = per_cell.get(key, ([], [], 0))
        per_cell[key] = ([*seen, r["api_version"]],
                         refused + ([] if r["supported"] else [r["api_version"]]),
                         requests + r["requests"])
    parts.append("\nAPI versions seen per client software:\n")
    parts.append(table(
        ["software", "API", "versions seen", f"not served by {target}", "requests"],
        [[software, api, versions_label(seen), versions_label(refused) or "-", str(requests)]
         for (software, api, _), (seen, refused, requests)
         in sorted(per_cell.items(), key=lambda item: (item[0][0], item[0][2]))]))
    parts.append("\nClient software inventory:\n")
    parts.append(table(
        [*who_headers, "first seen", "last seen", "requests", "refused by target"],
        [[*who(r), when(r["first_seen"]), when(r["last_seen"]), str(r["requests"]),
          str(r["unsupported_requests"])] for r in clients]))
    return "".join(parts)
