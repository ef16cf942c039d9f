"""``ksidecar reload``: ask a running sidecar to read its configuration again.

    ksidecar reload --config sidecar.properties     # the sidecar started with this file
    ksidecar reload --metrics-listener 127.0.0.1:9404
    ksidecar reload --pid-file /run/ksidecar.pid

With a metrics listener (``sidecar.metrics.listener``, read from ``--config`` when not
given), it sends ``POST /-/reload`` and prints what the reload did; with only a pid file
(``sidecar.pid.file``), it sends SIGHUP and says where the outcome is (the log, and
``ksidecar_config_reloads_total``). The file is read only for those two keys, so a file
that does not validate can still be reloaded (the sidecar then says why it refused it).

Exit codes: 0 applied; 3 applied, but some changed keys wait for a restart (named); 1 not
applied (nothing changed; the message says why); 2 the sidecar could not be asked.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
from typing import Any

from proxy.config import ConfigError, env_overrides, parse_hostport
from proxy.config.properties import PropertiesError, read_properties

#: Exit code when the reload applied but some changed keys need a restart.
EXIT_RESTART_NEEDED = 3
#: How long the reload may take (a supervisor waits for each worker).
TIMEOUT = 70.0


def add_parser(sub: Any) -> None:
    """Register the ``reload`` subcommand on the main parser."""
    p = sub.add_parser("reload", help="reload a running sidecar's configuration (TLS files, filters, "
                                      "policy, limits) without a restart")
    p.add_argument("--config", "-c", help="the .properties file the sidecar runs with (for its "
                                          "sidecar.metrics.listener and sidecar.pid.file)")
    p.add_argument("--metrics-listener", metavar="HOST:PORT", help="the sidecar's metrics listener")
    p.add_argument("--pid-file", help="the sidecar's pid file: send it SIGHUP")


def run(args: argparse.Namespace) -> int:
    """Ask the sidecar; print the outcome; the exit code."""
    try:
        metrics, pid_file = _where(args)
    except (ConfigError, PropertiesError) as exc:
        print(f"ksidecar reload: {exc}", file=sys.stderr)
        return 2
    if metrics:
        return _post(metrics)
    if pid_file:
        return _signal(pid_file)
    print("ksidecar reload: no way to reach the sidecar: give --metrics-listener or --pid-file, or --config "
          "naming a file with sidecar.metrics.listener or sidecar.pid.file", file=sys.stderr)
    return 2


def _where(args: argparse.Namespace) -> tuple[str, str]:
    metrics: str = args.metrics_listener or ""
    pid_file: str = args.pid_file or ""
    if args.config and not (metrics or pid_file):
        raw = read_properties(args.config)
        raw.update(env_overrides(os.environ))
        metrics = raw.get("sidecar.metrics.listener", "127.0.0.1:9404").strip()
        pid_file = raw.get("sidecar.pid.file", "").strip()
    if metrics:
        parse_hostport("sidecar.metrics.listener", metrics)  # a clear error for a bad value
    return metrics, pid_file


def _post(metrics: str) -> int:
    address = parse_hostport("sidecar.metrics.listener", metrics)
    host = address.host.strip("[]")
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # a wildcard: this host
    request = (f"POST /-/reload HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\n"
               "Connection: close\r\n\r\n").encode()
    try:
        with socket.create_connection((host, address.port), timeout=TIMEOUT) as conn:
            conn.sendall(request)
            data = b""
            while chunk := conn.recv(65536):
                data += chunk
    except OSError as exc:
        print(f"ksidecar reload: cannot reach the sidecar's metrics listener {metrics}: {exc}", file=sys.stderr)
        return 2
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode("latin-1")
    try:
        outcome = json.loads(body)
    except ValueError:
        print(f"ksidecar reload: {metrics} answered {status!r}: {body.decode('latin-1').strip()}", file=sys.stderr)
        return 2
    print(outcome["message"])
    if not outcome["applied"]:
        return 1
    return EXIT_RESTART_NEEDED if outcome["restart"] else 0


def _signal(pid_file: str) -> int:
    try:
        with open(pid_file) as handle:
            pid = int(handle.read().strip())
        os.kill(pid, signal.SIGHUP)
    except (OSError, ValueError) as exc:
        print(f"ksidecar reload: cannot signal the sidecar of {pid_file}: {exc}", file=sys.stderr)
        return 2
    print(f"sent SIGHUP to pid {pid}: the outcome is in its log and in ksidecar_config_reloads_total")
    return 0
