"""Debian's kcat (librdkafka 2.0.2) logs in through a SASL-terminating sidecar, produces and consumes.

That librdkafka sends SaslHandshake v1 then SaslAuthenticate v0, and its SCRAM client-final
message carries the client nonce twice (``r=<client nonce><server-first nonce>``, fixed in
librdkafka 2.6.1): it logs in only because the sidecar's default nonce check is Kafka 3.9's
suffix rule (tests/auth/test_scram_nonce.py replays the exchange; docs/authentication.md).
kcat comes from Debian's ``kcat`` package, which ``scripts/test`` installs (``ensure_kcat``).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
import trio

from proxy.tools.rig.tansu import TansuServer
from tests.auth.conftest import USERS, StartSasl, new_topic
from tests.proxy.wire import sample

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("kcat") is None, reason="kcat not installed (scripts/test installs it)"
    ),
]

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
RECORDS = [(f"k{i}", f"value-{i}" * (1 + i)) for i in range(5)]


def kcat(
    bootstrap: str, mechanism: str, user: str, password: str, *args: str, stdin: str = ""
) -> str:
    """Run kcat against ``bootstrap`` as ``user``; its stdout (raises with stderr on failure)."""
    command = [
        "kcat", "-b", bootstrap,
        "-X", "security.protocol=SASL_PLAINTEXT",
        "-X", f"sasl.mechanism={mechanism}",
        "-X", f"sasl.username={user}",
        "-X", f"sasl.password={password}",
        *args,
    ]  # fmt: skip
    result = subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    return result.stdout


def produce_and_consume(
    bootstrap: str, mechanism: str, user: str, password: str, topic: str
) -> list[tuple[str, str]]:
    lines = "".join(f"{key}:{value}\n" for key, value in RECORDS)
    kcat(bootstrap, mechanism, user, password, "-P", "-t", topic, "-p", "0", "-K:", stdin=lines)
    out = kcat(
        bootstrap, mechanism, user, password,
        "-C", "-t", topic, "-p", "0", "-o", "beginning", "-c", str(len(RECORDS)), "-e", "-f", "%k:%s\\n",
    )  # fmt: skip
    got: list[tuple[str, str]] = []
    for line in out.splitlines():
        key, _, value = line.partition(":")
        got.append((key, value))
    return got


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_kcat_logs_in_produces_and_consumes(
    mechanism: str, sasl_sidecar: StartSasl, tansu: TansuServer
) -> None:
    rig = await sasl_sidecar()
    topic = await new_topic(tansu)
    user = "alice"
    with trio.fail_after(150):
        got = await trio.to_thread.run_sync(
            produce_and_consume, rig.bootstrap, mechanism, user, USERS[user], topic
        )
    assert got == RECORDS
    listener = "SASL_PLAINTEXT"
    # One producer and one consumer connection at least, none refused.
    assert sample(rig.sidecar, "ksidecar_sasl_authentications_total",
                  listener=listener, mechanism=mechanism, result="success") >= 2  # fmt: skip
    assert sample(rig.sidecar, "ksidecar_sasl_authentications_total",
                  listener=listener, mechanism=mechanism, result="failure") == 0  # fmt: skip
    # The doubled client nonce is counted as a lenient login for SCRAM; PLAIN has none.
    lenient = sample(rig.sidecar, "ksidecar_sasl_lenient_logins_total", listener=listener,
                     mechanism=mechanism, deviation="scram-nonce-suffix")
    assert (lenient >= 2) if mechanism.startswith("SCRAM") else lenient == 0


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256"])
async def test_kcat_scram_is_refused_when_the_nonce_check_is_strict(
    mechanism: str, sasl_sidecar: StartSasl, tansu: TansuServer
) -> None:
    rig = await sasl_sidecar(sidecar_sasl_scram_nonce_check="strict")

    def attempt() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kcat", "-b", rig.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
             "-X", f"sasl.mechanism={mechanism}", "-X", "sasl.username=alice",
             "-X", f"sasl.password={USERS['alice']}", "-L", "-m", "5"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    with trio.fail_after(90):
        result = await trio.to_thread.run_sync(attempt)
    assert result.returncode != 0
    assert sample(rig.sidecar, "ksidecar_sasl_authentications_total", listener="SASL_PLAINTEXT",
                  mechanism=mechanism, result="failure") >= 1  # fmt: skip


async def test_kcat_wrong_password_fails(sasl_sidecar: StartSasl, tansu: TansuServer) -> None:
    rig = await sasl_sidecar()

    def attempt() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["kcat", "-b", rig.bootstrap, "-X", "security.protocol=SASL_PLAINTEXT",
             "-X", "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=alice",
             "-X", "sasl.password=wrong", "-L", "-m", "5"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    with trio.fail_after(90):
        result = await trio.to_thread.run_sync(attempt)
    assert result.returncode != 0
    assert "Authentication failed" in result.stderr or "authentication" in result.stderr.lower()
