"""The jobs' command-line options, in one place and without pyspark.

Each job's ``main`` builds its parser from these; ``ksidecar audit report`` (in
:mod:`proxy.tools.cli`) adds :func:`add_report` to its own subcommand, which is why this module
imports argparse and nothing else: declaring the command must not load Spark.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime

DEFAULT_ACCURACY = 10_000
"""``percentile_approx`` accuracy: rank error at most 1/accuracy of a group's size."""

AddArguments = Callable[[argparse.ArgumentParser], None]


def parse_time(text: str) -> datetime:
    """An ISO 8601 time (``2026-01-31``, ``2026-01-31T14:00``, ``…+02:00``); naive means UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def parse_ids(text: str) -> list[int]:
    """A comma-separated list of broker ids, e.g. ``1,2,3``."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of ids") from None


def parse_names(text: str) -> list[str]:
    """A comma-separated list of names (topics), blanks dropped."""
    return [part.strip() for part in text.split(",") if part.strip()]


def add_common(p: argparse.ArgumentParser) -> None:
    """What every job takes: ``--audit``, ``--out``, ``--since``, ``--until``, ``--sidecars``."""
    p.add_argument("--audit", required=True,
                   help="audit directory or URI (Hive partitions dt=/hour=)")
    p.add_argument("--out", required=True, help="output directory or URI (its tables are replaced)")
    p.add_argument("--since", type=parse_time, help="first time included (ISO 8601, UTC if naive)")
    p.add_argument("--until", type=parse_time, help="first time excluded (ISO 8601, UTC if naive)")
    p.add_argument("--sidecars", type=parse_ids,
                   help="only requests seen by these sidecars (comma-separated broker ids)")


def add_nothing(_: argparse.ArgumentParser) -> None:
    """For jobs that take only the common options."""


def add_unused_topics(p: argparse.ArgumentParser) -> None:
    """``unused_topics``: ``--days``, ``--as-of``, ``--topics``, ``--inventory``."""
    p.add_argument("--days", type=int, default=7, help="idle days that make a topic unused (7)")
    p.add_argument("--as-of", type=parse_time,
                   help="the time idleness is measured at (default --until, else now)")
    p.add_argument("--topics", type=parse_names, help="comma-separated topics for the inventory")
    p.add_argument("--inventory", help="text file of topics (one a line) for the inventory")


def add_latency_slo(p: argparse.ArgumentParser) -> None:
    """``latency_slo``: ``--slo-ms``, ``--accuracy``."""
    p.add_argument("--slo-ms", type=float, default=100.0, help="latency objective in ms (100)")
    p.add_argument("--accuracy", type=int, default=DEFAULT_ACCURACY,
                   help=f"percentile_approx accuracy ({DEFAULT_ACCURACY}); rank error 1/accuracy")


def add_completeness(p: argparse.ArgumentParser, *, mirror_required: bool = True) -> None:
    """``completeness``: ``--mirror``, ``--window-minutes``, ``--mirror-prefix``."""
    p.add_argument("--mirror", required=mirror_required,
                   help="the mirror cluster's audit directory or URI"
                   + ("" if mirror_required else " (without it, completeness is skipped)"))
    p.add_argument("--window-minutes", type=int, default=60, help="window length (60)")
    p.add_argument("--mirror-prefix", default="",
                   help="prefix of mirrored topic names on the mirror, stripped before comparing")


def parse_minimum(text: str) -> tuple[str, str]:
    """``NAME=VERSION``: the oldest client software version an operator accepts."""
    name, sep, version = text.partition("=")
    if not sep or not name.strip() or not version.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VERSION, e.g. librdkafka=2.0.0")
    return name.strip(), version.strip()


def add_upgrade_readiness(p: argparse.ArgumentParser) -> None:
    """``upgrade_readiness``: ``--target``, ``--min-software`` (repeatable)."""
    from spark_jobs.kafka_releases import release_names  # the table: standard library only

    releases = release_names()
    p.add_argument("--target", default=releases[-1],
                   help=f"a Kafka release from the table ({', '.join(releases)}; default "
                   f"{releases[-1]}) or a JSON profile file of api key -> [min, max]")
    p.add_argument("--min-software", type=parse_minimum, action="append", default=[],
                   metavar="NAME=VERSION",
                   help="list clients whose software NAME is older than VERSION (repeatable)")


def positive(text: str) -> int:
    """A whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return value


def add_least_privilege(p: argparse.ArgumentParser) -> None:
    """``least_privilege``: ``--prefix-min``, ``--enforced``, ``--auto-create``."""
    p.add_argument("--prefix-min", type=positive, metavar="N",
                   help="collapse names sharing a prefix ending in '-' or '.' into one PREFIXED "
                   "ACL when at least N do (default: literal ACLs only)")
    p.add_argument("--enforced", action="store_true",
                   help="also propose what enforce mode refused (default: shadow-mode denials "
                   "and served traffic only)")
    p.add_argument("--auto-create", action="store_true",
                   help="also propose Create for Metadata's topic auto-creation")


def add_report(p: argparse.ArgumentParser) -> None:
    """Every job's options at once, for the report that runs them all (``--mirror`` optional)."""
    add_common(p)
    add_unused_topics(p)
    add_latency_slo(p)
    add_completeness(p, mirror_required=False)
    add_upgrade_readiness(p)
    add_least_privilege(p)


def job_parser(description: str, add: AddArguments) -> argparse.ArgumentParser:
    """A job's parser: the common options and the job's own."""
    p = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common(p)
    add(p)
    return p


def add_audit_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """``ksidecar audit report …``: the report's options under the ``ksidecar`` command;
    returns the ``audit`` subcommands, for the commands declared elsewhere
    (:mod:`proxy.tools.readiness`)."""
    audit = sub.add_parser("audit", help="PySpark jobs over the audit Parquet (the spark extra)")
    jobs = audit.add_subparsers(dest="audit_command", required=True)
    add_report(jobs.add_parser(
        "report", help="run every audit job and write an HTML report",
        description="Run every audit job (spark_jobs) over --audit and write DIR/index.html "
        "with charts and tables; see docs/spark_jobs.md.",
    ))
    return jobs
