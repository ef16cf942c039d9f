"""Least privilege: the smallest ACL set per principal that allows the traffic the audit saw,
and every request the sidecar's ACLs refused (or would have, in shadow mode).

    python -m spark_jobs.least_privilege --audit PATH --out PATH [--prefix-min N] [--enforced]
        [--auto-create] [--since T] [--until T] [--sidecars 1,2]

What a principal needs comes from two places in the audit:

* its **denials** (schema version 3, ``sidecar.authorizer=acls``): the first row of every
  request the ACLs refused in whole or part names exactly which (resource type, name,
  operation) it needed and lacked. In shadow mode (``sidecar.authorizer.mode=shadow``)
  nothing was refused, so these are what enforcement would have broken: the primary input.
  Denials recorded in enforce mode were refused for real, and are proposed only with
  ``--enforced`` (by default they are someone being kept out, not traffic to allow);
* its **served traffic**: what was allowed needs the same operations. The audit names a
  resource only on Produce and Fetch rows (the topic of each partition), so
  :data:`SERVED` maps those APIs to the operation Kafka's request-to-ACL table
  (``KafkaApis``) asks of the topic; a partition answered with an authorization error was
  not served. Groups and transactional ids are named by denials only.

Metadata's auto-creation check (Create on the Cluster, else on each topic named, when
``AllowAutoTopicCreation`` is set) refuses nothing: a refusal only turns auto-creation off,
and Kafka asks it only of topics that do not exist. Those denials (:data:`SOFT`) are left
out of the proposal unless ``--auto-create`` is given.

The proposal, per principal (:func:`propose`): every (resource type, name, operation)
needed, an operation dropped where another needed on the same resource implies it (Read,
Write, Delete and Alter imply Describe; AlterConfigs implies DescribeConfigs, as Kafka's
authorizer does); with ``--prefix-min N``, names of one resource type and operation sharing
a prefix that ends in ``-`` or ``.`` collapse into one PREFIXED ACL when at least N do (the
longest such prefix first, so the grant stays as narrow as it can be), and literal ACLs a
proposed prefix already allows are dropped. Every ACL allows, from any host.

Writes under ``--out``:

``denied`` — one row per principal, resource and operation the ACLs refused, per mode:
``principal``, ``resource_type``, ``resource_name``, ``operation``, ``mode``
(``enforce``/``shadow``), ``apis`` (the API names of those requests), ``requests``,
``first_seen``, ``last_seen``. Most requests first.

``acls`` — the proposal: ``principal``, ``resource_type``, ``pattern_type`` (``LITERAL`` or
``PREFIXED``), ``name``, ``operation``, ``names`` (the names seen that it covers),
``requests`` (that needed it), ``ksidecar_command`` and ``kafka_acls_command`` (the command
lines that add it, ``$BOOTSTRAP`` standing for a listener where the caller may administer
ACLs). Sorted by principal, resource type, name, operation.

``acls.sh`` and ``kafka-acls.sh`` — the same commands as two shell scripts.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs import common, options

#: API name → the resource type and operation Kafka checks of the topic an audit row names
#: (KafkaApis: handleProduceRequest, handleFetchRequest). The only APIs whose rows name one.
SERVED: dict[str, tuple[str, str]] = {
    "Produce": ("Topic", "Write"),
    "Fetch": ("Topic", "Read"),
}

#: (API name, resource type, operation) denials that refuse nothing the client asked for:
#: Metadata's auto-creation check only turns auto-creation off (module docstring).
SOFT: frozenset[tuple[str, str, str]] = frozenset({
    ("Metadata", "Topic", "Create"),
    ("Metadata", "Cluster", "Create"),
})

#: Kafka's authorization errors: a row answered with one was not served.
AUTHORIZATION_ERRORS = (29, 30, 31, 53)  # TOPIC_, GROUP_, CLUSTER_, TRANSACTIONAL_ID_AUTHORIZATION_FAILED

#: Operation → the operations it implies on the same resource (Kafka's AclAuthorizer).
IMPLIES: dict[str, frozenset[str]] = {
    "Read": frozenset({"Describe"}),
    "Write": frozenset({"Describe"}),
    "Delete": frozenset({"Describe"}),
    "Alter": frozenset({"Describe"}),
    "AlterConfigs": frozenset({"DescribeConfigs"}),
}

#: Characters a collapsed prefix ends with (``orders-``, ``metrics.``).
PREFIX_ENDS = "-."

#: The resource types whose names may collapse into prefixes (a Cluster has one name).
PREFIXABLE = frozenset({"Topic", "Group", "TransactionalId"})

DENIED_COLUMNS = ("principal", "resource_type", "resource_name", "operation", "mode", "apis",
                  "requests", "first_seen", "last_seen")
ACL_COLUMNS = ("principal", "resource_type", "pattern_type", "name", "operation", "names",
               "requests", "ksidecar_command", "kafka_acls_command")
ACL_SCHEMA = ("principal string, resource_type string, pattern_type string, name string, "
              "operation string, names array<string>, requests long, ksidecar_command string, "
              "kafka_acls_command string")


def extract(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The audit rows in the requested range (common options)."""
    return common.extract_audit(spark, args)


def _request_key() -> Column:
    return F.struct(*common.REQUEST_KEY)


def denials(df: DataFrame) -> DataFrame:
    """One row per denial of a request: ``principal``, ``api_name``, ``time``, the request
    key, ``resource_type``, ``resource_name``, ``operation``, ``mode``."""
    return (
        df.where(F.col("first_row") & F.col("denials").isNotNull())
        .select("principal", "api_name", "time", *common.REQUEST_KEY,
                F.explode("denials").alias("d"))
        .select("principal", "api_name", "time", *common.REQUEST_KEY, "d.resource_type",
                "d.resource_name", "d.operation", "d.mode")
    )


def transform_denied(df: DataFrame) -> DataFrame:
    """The ``denied`` table (module docstring)."""
    return (
        denials(df)
        .groupBy("principal", "resource_type", "resource_name", "operation", "mode")
        .agg(
            F.array_sort(F.collect_set("api_name")).alias("apis"),
            F.count_distinct(_request_key()).alias("requests"),
            F.min("time").alias("first_seen"),
            F.max("time").alias("last_seen"),
        )
        .select(*DENIED_COLUMNS)
    )


def transform_needed(df: DataFrame, *, enforced: bool = False, auto_create: bool = False) -> DataFrame:
    """What each principal needed: ``principal``, ``resource_type``, ``resource_name``,
    ``operation``, ``requests`` (distinct requests that needed it), from its denials (shadow
    mode; enforce mode too with ``enforced``; :data:`SOFT` ones only with ``auto_create``)
    and its served Produce and Fetch rows (:data:`SERVED`)."""
    refused = denials(df)
    if not enforced:
        refused = refused.where(F.col("mode") == "shadow")
    if not auto_create:
        soft = F.lit(False)
        for api, rtype, operation in sorted(SOFT):
            soft = soft | ((F.col("api_name") == api) & (F.col("resource_type") == rtype)
                           & (F.col("operation") == operation))
        refused = refused.where(~soft)
    served_type = F.lit(None).cast("string")
    served_operation = F.lit(None).cast("string")
    for api, (rtype, operation) in SERVED.items():
        served_type = F.when(F.col("api_name") == api, F.lit(rtype)).otherwise(served_type)
        served_operation = F.when(F.col("api_name") == api, F.lit(operation)).otherwise(served_operation)
    served = (
        df.where(F.col("api_name").isin(list(SERVED)) & F.col("topic").isNotNull()
                 & F.col("topic_partitions").isNull()
                 & (F.col("error_code").isNull() | ~F.col("error_code").isin(list(AUTHORIZATION_ERRORS))))
        .select("principal", *common.REQUEST_KEY, served_type.alias("resource_type"),
                F.col("topic").alias("resource_name"), served_operation.alias("operation"))
    )
    keys = ["principal", "resource_type", "resource_name", "operation"]
    both = refused.select(*keys, *common.REQUEST_KEY).unionByName(served.select(*keys, *common.REQUEST_KEY))
    return both.groupBy(*keys).agg(F.count_distinct(_request_key()).alias("requests"))


@dataclass(frozen=True, slots=True, kw_only=True, order=True)
class Acl:
    """One proposed ALLOW ACL (from any host)."""

    principal: str
    resource_type: str
    name: str
    operation: str
    #: ``LITERAL`` or ``PREFIXED``.
    pattern_type: str = "LITERAL"
    #: The names seen that it covers (its own for a literal).
    names: tuple[str, ...] = field(default=(), compare=False)
    #: Requests that needed it.
    requests: int = field(default=0, compare=False)

    def covers(self, resource_type: str, name: str) -> bool:
        """True when this ACL's pattern matches the resource."""
        if resource_type != self.resource_type:
            return False
        return name.startswith(self.name) if self.pattern_type == "PREFIXED" else name == self.name

    def allows(self, operation: str) -> bool:
        """True when this ACL's operation is ``operation`` or implies it."""
        return operation == self.operation or self.operation == "All" \
            or operation in IMPLIES.get(self.operation, frozenset())


Need = tuple[str, str, str, str, int]
"""``(principal, resource type, name, operation, requests)``"""


def collapse(names: Iterable[str], minimum: int) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """Prefixes (each with the names it covers) and the names left literal: repeatedly, the
    longest prefix ending in one of :data:`PREFIX_ENDS` that at least ``minimum`` of the
    names left share (of two as long, the one covering more, then the first in order)."""
    left = set(names)
    prefixes: list[tuple[str, list[str]]] = []
    while True:
        shared: dict[str, list[str]] = {}
        for name in left:
            for i, char in enumerate(name):
                if char in PREFIX_ENDS:
                    shared.setdefault(name[: i + 1], []).append(name)
        candidates = [(p, covered) for p, covered in shared.items() if len(covered) >= minimum]
        if not candidates:
            return prefixes, sorted(left)
        prefix, covered = min(candidates, key=lambda c: (-len(c[0]), -len(c[1]), c[0]))
        prefixes.append((prefix, sorted(covered)))
        left -= set(covered)


def propose(needed: Iterable[Need], prefix_min: int | None = None) -> list[Acl]:
    """The smallest ACL set per principal that allows ``needed`` (module docstring)."""
    by_resource: dict[tuple[str, str, str], dict[str, int]] = {}
    for principal, rtype, name, operation, requests in needed:
        ops = by_resource.setdefault((principal, rtype, name), {})
        ops[operation] = ops.get(operation, 0) + requests
    by_operation: dict[tuple[str, str, str], dict[str, int]] = {}
    for (principal, rtype, name), ops in by_resource.items():
        for operation, requests in ops.items():
            implied = any(operation in IMPLIES.get(other, frozenset()) or other == "All"
                          for other in ops if other != operation)
            if not implied:
                names = by_operation.setdefault((principal, rtype, operation), {})
                names[name] = names.get(name, 0) + requests
    acls: list[Acl] = []
    for (principal, rtype, operation), names in by_operation.items():
        literal = sorted(names)
        if prefix_min is not None and rtype in PREFIXABLE:
            prefixes, literal = collapse(names, prefix_min)
            acls += [Acl(principal=principal, resource_type=rtype, name=prefix, operation=operation,
                         pattern_type="PREFIXED", names=tuple(covered),
                         requests=sum(names[n] for n in covered)) for prefix, covered in prefixes]
        acls += [Acl(principal=principal, resource_type=rtype, name=n, operation=operation,
                     names=(n,), requests=names[n]) for n in literal]
    prefixed = [a for a in acls if a.pattern_type == "PREFIXED"]
    kept = [
        a for a in acls
        if a.pattern_type == "PREFIXED" or not any(
            p.principal == a.principal and p.covers(a.resource_type, a.name) and p.allows(a.operation)
            for p in prefixed)
    ]
    return sorted(kept)


#: Resource type → (kafka-acls.sh option, takes a name). DelegationToken and User have
#: kafka-acls.sh options that ``ksidecar acls`` does not take (:data:`KSIDECAR_TYPES`).
RESOURCE_OPTIONS: dict[str, tuple[str, bool]] = {
    "Topic": ("--topic", True),
    "Group": ("--group", True),
    "Cluster": ("--cluster", False),
    "TransactionalId": ("--transactional-id", True),
    "DelegationToken": ("--delegation-token", True),
    "User": ("--user-principal", True),
}
KSIDECAR_TYPES = frozenset({"Topic", "Group", "Cluster", "TransactionalId"})


def command(acl: Acl, tool: str) -> str:
    """The command line that adds ``acl``: ``tool`` is ``ksidecar acls`` or ``kafka-acls.sh``
    (``$BOOTSTRAP`` left for the shell); ``# …`` when ``ksidecar acls`` cannot say it."""
    option, named = RESOURCE_OPTIONS.get(acl.resource_type, (f"--{acl.resource_type.lower()}", True))
    words = [tool, '--bootstrap-server "$BOOTSTRAP"', "--add",
             "--allow-principal", shlex.quote(acl.principal), "--operation", acl.operation, option]
    if named:
        words.append(shlex.quote(acl.name))
    if acl.pattern_type == "PREFIXED":
        words += ["--resource-pattern-type", "prefixed"]
    line = " ".join(words)
    if tool == "ksidecar acls" and acl.resource_type not in KSIDECAR_TYPES:
        return f"# ksidecar acls has no {option}: {line}"
    return line


def transform_acls(spark: SparkSession, needed: DataFrame, prefix_min: int | None) -> DataFrame:
    """The ``acls`` table: :func:`propose` over ``needed`` (small: one row per principal
    and resource used, gathered on the driver)."""
    rows = [(r["principal"], r["resource_type"], r["resource_name"], r["operation"], r["requests"])
            for r in needed.collect()]
    return spark.createDataFrame(
        [(a.principal, a.resource_type, a.pattern_type, a.name, a.operation, list(a.names), a.requests,
          command(a, "ksidecar acls"), command(a, "kafka-acls.sh"))
         for a in propose(rows, prefix_min)],
        ACL_SCHEMA,
    )


SCRIPT_HEAD = """#!/bin/sh
# The least-privilege ACLs spark_jobs.least_privilege proposed from the audit.
# BOOTSTRAP: a listener where the caller may administer ACLs (docs/authorization.md).
set -e
BOOTSTRAP="${BOOTSTRAP:?set BOOTSTRAP=host:port}"
"""


def script(commands: Sequence[str]) -> str:
    """A shell script running ``commands`` in order."""
    return SCRIPT_HEAD + "".join(f"{c}\n" for c in commands)


def write_text(spark: SparkSession, uri: str, text: str) -> None:
    """Write ``text`` as the file ``uri`` (replaced), through Hadoop's FileSystem."""
    jvm, conf = common.hadoop(spark)
    path = jvm.org.apache.hadoop.fs.Path(uri)
    stream = path.getFileSystem(conf).create(path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def load(spark: SparkSession, denied: DataFrame, acls: DataFrame, out: str) -> None:
    """Write ``denied``, ``acls`` and the two scripts under ``out``."""
    common.write_table(denied, common.join_uri(out, "denied"),
                       [F.desc("requests"), "principal", "resource_type", "resource_name", "operation", "mode"])
    order = ["principal", "resource_type", "name", "operation"]
    common.write_table(acls, common.join_uri(out, "acls"), order)
    proposed = acls.orderBy(*order).select("ksidecar_command", "kafka_acls_command").collect()
    write_text(spark, common.join_uri(out, "acls.sh"), script([r[0] for r in proposed]))
    write_text(spark, common.join_uri(out, "kafka-acls.sh"), script([r[1] for r in proposed]))


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Extract, transform and load with parsed options."""
    df = extract(spark, args)
    needed = transform_needed(df, enforced=args.enforced, auto_create=args.auto_create)
    load(spark, transform_denied(df), transform_acls(spark, needed, args.prefix_min), args.out)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    return common.job_main(__doc__ or "", options.add_least_privilege, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
