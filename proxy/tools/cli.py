"""The ``ksidecar`` command.

``ksidecar run --config sidecar.properties [--set key=value ...]`` runs a sidecar (SIGHUP,
``ksidecar reload`` or a changed file reloads it: :mod:`proxy.control.reload`);
``ksidecar reload`` asks a running one to reload (:mod:`proxy.tools.reload_cli`);
``ksidecar demo`` runs the end-to-end demo; ``ksidecar audit report --audit PATH --out DIR``
runs the PySpark audit jobs and writes an HTML report (see :mod:`spark_jobs.report`);
``ksidecar audit readiness --audit PATH --target 4.0`` prints which clients would break on a
target Kafka, ``ksidecar audit profile`` captures a broker's ApiVersions as a target
(:mod:`proxy.tools.readiness`);
``ksidecar quotas`` describes and alters client quotas over the wire, shaped like
kafka-configs.sh: per-IP connection rates, user and client-id byte rates
(:mod:`proxy.tools.quotas_cli`); ``ksidecar groups`` lists, describes and deletes consumer
groups and resets their offsets over the wire (:mod:`proxy.tools.groups_cli`); ``ksidecar
acls`` adds, removes and lists ACLs over the wire, shaped like kafka-acls.sh
(:mod:`proxy.tools.acls_cli`); ``ksidecar users`` adds, deletes and lists SASL users
(:mod:`proxy.tools.users_cli`); ``ksidecar zookeeper secure|unsecure`` sets the ACLs of an
existing ZooKeeper tree (:mod:`proxy.tools.zookeeper_cli`).
Exit codes: 0 on a clean stop (SIGTERM/SIGINT after a complete drain), 2 for a
configuration error (the message names the key), 3 when the drain abandoned requests (its
deadline passed, or a second signal came), 1 for anything else.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import trio
from prometheus_client import CollectorRegistry

from coordinator.features import IncompatibleFeatures
from proxy.config import ConfigError, SidecarConfig
from proxy.config.properties import PropertiesError
from proxy.control.garbage import collect_fully_on_a_clock, keep_out_of_collections
from proxy.control.http import ReloadHook
from proxy.control.metrics_page import ENV, flush_on_a_clock
from proxy.control.reload import ConfigSource, Reloader, ReloadMetrics, watch
from proxy.tools import (
    acls_cli,
    demo,
    features_cli,
    groups_cli,
    quotas_cli,
    readiness,
    reload_cli,
    share_groups_cli,
    users_cli,
    zookeeper_cli,
)
from spark_jobs import options as audit_options

log = logging.getLogger("ksidecar")

#: Exit code when requests were abandoned at shutdown (drain deadline or second signal).
EXIT_ABANDONED = 3


def _parse_set(items: list[str]) -> dict[str, str]:
    result: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected key=value")
        result[key.strip()] = value
    return result


class Serving(Protocol):
    """A sidecar as ``ksidecar run`` runs it: one process, or a supervisor of workers."""

    async def serve(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; report started once listening."""
        ...

    async def drain(self) -> int:
        """Stop accepting and reading, answer what was read; the count abandoned."""
        ...

    async def stop(self) -> int:
        """Stop at once; the count of requests abandoned."""
        ...

    async def apply_reload(self, config: SidecarConfig) -> None:
        """Put a reloaded configuration in force, or change nothing (ConfigError)."""
        ...

    reload_hook: ReloadHook | None

    @property
    def own_registry(self) -> CollectorRegistry:
        """Where the process's own collectors go."""
        ...


def prepare(config: SidecarConfig) -> Callable[[], Serving]:
    """What must happen before trio starts; what builds the sidecar once it runs.

    The worker count is ``sidecar.workers``, or for 0 what :mod:`proxy.control.cpus`
    decides from the CPUs the sidecar is given; it is logged, with why. One worker: one
    process. More: a supervisor of that many workers; prometheus_client's multiprocess
    directory is made for them, and the workers' fork server is forked now, while this
    process has imported the sidecar and runs no thread (:mod:`proxy.control.forks`).
    """
    from proxy.control.cpus import resolve_workers
    from proxy.control.server import Sidecar
    from proxy.control.supervisor import Supervisor

    count, why = resolve_workers(config["sidecar.workers"])
    log.info("%s", why)
    if count == 1:
        return lambda: Sidecar(config)
    from proxy.control.forks import ForkServer
    from proxy.control.metrics_page import enable_multiprocess

    directory = Path(tempfile.mkdtemp(prefix="ksidecar-metrics-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    enable_multiprocess(directory)  # before any metric object exists, and before the fork server
    forks = ForkServer.fork(config)
    return lambda: Supervisor(config, count, directory, forks)


async def run_sidecar(config: SidecarConfig, build: Callable[[], Serving],
                      source: ConfigSource | None = None) -> int:
    """Serve until SIGTERM or SIGINT, then drain; the number of requests abandoned.

    A second signal during the drain stops at once; what was still unanswered then is
    abandoned (counted in the log and in the exit code). SIGHUP, ``POST /-/reload`` and a
    changed file reload the configuration from ``source`` (:mod:`proxy.control.reload`).
    """
    abandoned = 0
    sidecar = build()
    reloader = Reloader(source or ConfigSource(None), config, sidecar)
    sidecar.own_registry.register(ReloadMetrics(reloader))

    async def reload_hook(trigger: str) -> tuple[bool, bytes]:
        outcome = await reloader.reload(trigger)
        return outcome.applied, outcome.to_json()

    sidecar.reload_hook = reload_hook
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(sidecar.serve)
            keep_out_of_collections()
            nursery.start_soon(collect_fully_on_a_clock)
            nursery.start_soon(watch, reloader)
            if os.environ.get(ENV):  # several processes: the supervisor's own changes too
                nursery.start_soon(flush_on_a_clock)
            async for signum in signals:
                if signum == signal.SIGHUP:
                    log.info("received SIGHUP: reloading the configuration")
                    nursery.start_soon(reloader.reload, "SIGHUP")
                    continue
                log.info("received %s: draining (up to %d ms; a second signal stops at once)",
                         signal.Signals(signum).name, reloader.config["sidecar.shutdown.drain.ms"])
                reloader.stop()
                break
            drained: list[int] = []
            async with trio.open_nursery() as drain:

                async def run_drain() -> None:
                    drained.append(await sidecar.drain())
                    drain.cancel_scope.cancel()

                async def second_signal() -> None:
                    async for signum in signals:
                        if signum == signal.SIGHUP:
                            log.info("received SIGHUP while draining: not reloading")
                            continue
                        log.warning("received %s again: stopping now", signal.Signals(signum).name)
                        drain.cancel_scope.cancel()
                        return

                drain.start_soon(run_drain)
                drain.start_soon(second_signal)
            abandoned = drained[0] if drained else await sidecar.stop()
            nursery.cancel_scope.cancel()
    if abandoned:
        log.error("stopped; %d request(s) read from clients were abandoned unanswered", abandoned)
    else:
        log.info("stopped")
    return abandoned


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ksidecar`` console script."""
    parser = argparse.ArgumentParser(prog="ksidecar", description="Kafka-protocol sidecar")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a sidecar")
    run.add_argument("--config", "-c", help="a .properties file (see docs/configuration.md)")
    run.add_argument("--set", "-s", action="append", default=[], metavar="KEY=VALUE",
                     help="override one key (repeatable)")
    demo.add_arguments(sub.add_parser("demo", help="run the end-to-end demo on loopback"))
    quotas_cli.add_parser(sub)
    groups_cli.add_parser(sub)
    share_groups_cli.add_parser(sub)
    acls_cli.add_parser(sub)
    features_cli.add_parser(sub)
    users_cli.add_parser(sub)
    zookeeper_cli.add_parser(sub)
    readiness.add_parser(audit_options.add_audit_command(sub))
    reload_cli.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "quotas":
        return quotas_cli.run(args)
    if args.command == "groups":
        return groups_cli.run(args)
    if args.command == "share-groups":
        return share_groups_cli.run(args)
    if args.command == "acls":
        return acls_cli.run(args)
    if args.command == "features":
        return features_cli.run(args)
    if args.command == "users":
        return users_cli.run(args)
    if args.command == "zookeeper":
        return zookeeper_cli.run(args)
    if args.command == "reload":
        return reload_cli.run(args)
    if args.command == "audit" and args.audit_command in readiness.COMMANDS:
        return readiness.main(args)
    if args.command == "audit":
        from spark_jobs import report  # loads pyspark: only for this command

        return report.main_from_args(args)
    if args.command == "demo":
        return demo.main_from_args(args)
    try:
        source = ConfigSource(args.config, _parse_set(args.set))
        config = source.load()
    except (ConfigError, PropertiesError) as exc:
        print(f"ksidecar: configuration error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=config["sidecar.log.level"].upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from proxy.control.forks import ForkServerGone

    try:
        with _pid_file(config["sidecar.pid.file"]):
            abandoned = trio.run(run_sidecar, config, prepare(config), source)
    except ConfigError as exc:
        print(f"ksidecar: configuration error: {exc}", file=sys.stderr)
        return 2
    except BaseExceptionGroup as group:  # the finalized features exclude this release (KIP-584),
        # or what the broker said makes the configuration unusable (a shadowed API key)
        gone, group_left = group.split(ForkServerGone)
        if gone is not None and group_left is None:
            log.critical("%s", _first(gone))
            return 1
        incompatible, rest = group.split((IncompatibleFeatures, ConfigError))
        if incompatible is None or rest is not None:
            raise
        print(f"ksidecar: cannot start: {_first(incompatible)}", file=sys.stderr)
        return 2
    except IncompatibleFeatures as exc:
        print(f"ksidecar: cannot start: {exc}", file=sys.stderr)
        return 2
    except ForkServerGone as exc:
        log.critical("%s", exc)
        return 1
    return EXIT_ABANDONED if abandoned else 0


@contextlib.contextmanager
def _pid_file(path: str) -> Iterator[None]:
    """``sidecar.pid.file``: this process's id while it runs (nothing when empty)."""
    if not path:
        yield
        return
    try:
        Path(path).write_text(f"{os.getpid()}\n")
    except OSError as exc:
        raise ConfigError(f"sidecar.pid.file={path!r}: cannot write it ({exc.strerror})") from None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            Path(path).unlink()


def _first(error: BaseException) -> BaseException:
    """The first error a (nested) group holds: nested nurseries nest their groups."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
