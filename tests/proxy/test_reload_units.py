"""Issue 45's parts without a running sidecar: which keys a reload changes and which wait
for a restart, Kafka's rules for a new server certificate, a dispatch's filters replaced,
the reloader's outcomes and metrics, the file watch, ``POST /-/reload`` and the verb's
exit codes. (tests/proxy/test_reload.py runs them all in a real ``ksidecar run``.)"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import trustme
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from protocol.headers import decode_request_header
from proxy.config import ConfigError, SidecarConfig, build_config
from proxy.config.changes import changed_keys, config_hash, in_force
from proxy.config.keys import KEYS, LIVE_KEYS, is_live
from proxy.control.http import route
from proxy.control.reload import ConfigSource, Reloader, ReloadMetrics, watch
from proxy.control.tls import ServerTls, check_certificate_change, listener_tls
from proxy.datapath.dispatch import Forward
from proxy.tools import reload_cli
from tests.proxy.test_dispatch import REGISTRY, Recorder, decide, dispatch, produce

BASE = {"listeners": "PLAINTEXT://127.0.0.1:9092", "sidecar.upstream": "127.0.0.1:19092"}


def config(**keys: str) -> SidecarConfig:
    return build_config({**BASE, **{k.replace("_", "."): v for k, v in keys.items()}})


# -- which keys, live or not ------------------------------------------------------------------


def test_every_live_key_is_a_key_and_the_families_follow_their_keys() -> None:
    assert {key.name for key in KEYS} >= LIVE_KEYS
    assert is_live("listener.name.external.ssl.keystore.location")
    assert not is_live("listener.name.external.max.connection.creation.rate.nope")
    assert is_live("filter.rate.limit")  # an operator filter's own key
    assert not is_live("tag.rack") and not is_live("observer.audit.dir") and not is_live("listeners")
    assert is_live("observer.audit.overflow") and is_live("observer.mine.block.max.ms")
    assert not is_live("observer.class.names") and not is_live("observer.mine.dir")


def test_changed_keys_compares_values_not_spelling_and_splits_live_from_restart() -> None:
    old = config(**{"connections.max.idle.ms": "600000", "policy.produce.max.records": "0", "tag.rack": "a"})
    new = build_config({**BASE, "listeners": "PLAINTEXT://127.0.0.1:9093", "connections.max.idle.ms": "0600000",
                        "policy.produce.max.records": "5", "tag.rack": "b", "filter.mine.limit": "3",
                        "listener.name.plaintext.max.connections": "10"})
    changes = changed_keys(old, new)
    assert changes.live == ("filter.mine.limit", "listener.name.plaintext.max.connections",
                            "policy.produce.max.records")
    assert changes.restart == ("listeners", "tag.rack")
    assert changed_keys(old, old).any is False


def test_in_force_keeps_the_restart_keys_of_the_configuration_serving() -> None:
    old = config(**{"tag.rack": "a"})
    new = build_config({**BASE, "listeners": "PLAINTEXT://127.0.0.1:9093", "policy.produce.max.records": "5",
                        "sidecar.workers": "3"})
    result = in_force(old, new, changed_keys(old, new))
    assert [str(e) for e in result.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert result["sidecar.workers"] == 0 and result.tags == {"rack": "a"}
    assert result["policy.produce.max.records"] == 5
    assert changed_keys(result, new).live == ()  # nothing live is left to apply


def test_the_hash_names_the_content_not_the_order() -> None:
    one = build_config({**BASE, "tag.a": "1", "tag.b": "2"})
    other = build_config({"tag.b": "2", **BASE, "tag.a": "1"})
    assert config_hash(one) == config_hash(other)
    assert config_hash(one) != config_hash(build_config({**BASE, "tag.a": "1", "tag.b": "3"}))
    assert len(config_hash(one)) == 16


# -- Kafka's rules for a new server certificate -------------------------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def tls(ca: trustme.CA, tmp: Path, name: str, *hosts: str, unit: str = "brokers", **keys: str) -> tuple[
        SidecarConfig, ServerTls]:
    path = tmp / f"{name}.pem"
    ca.issue_cert(*hosts, common_name="sidecar", organization_name="acme",
                  organization_unit_name=unit).private_key_and_cert_chain_pem.write_to_path(str(path))
    cfg = build_config({**BASE, "listeners": "SSL://127.0.0.1:9093", "ssl.keystore.location": str(path), **keys})
    server = listener_tls(cfg, "SSL")
    assert server is not None
    return cfg, server


def test_a_new_certificate_keeps_the_subject_and_every_alternative_name(ca: trustme.CA, tmp_path: Path) -> None:
    cfg, old = tls(ca, tmp_path, "old", "127.0.0.1", "broker-0.kafka")
    assert old.subject == "CN=sidecar,OU=brokers,O=acme"
    assert old.alt_names == {"IP:127.0.0.1", "DNS:broker-0.kafka"}
    _, more = tls(ca, tmp_path, "more", "127.0.0.1", "broker-0.kafka", "broker-0.example")
    check_certificate_change(cfg, "SSL", old, more)  # names may be added (Kafka: containsAll)
    assert more.serial != old.serial
    _, fewer = tls(ca, tmp_path, "fewer", "127.0.0.1")
    with pytest.raises(ConfigError, match=r"drops subject alternative name.*DNS:broker-0\.kafka.*ssl\.allow\.san\.changes"):
        check_certificate_change(cfg, "SSL", old, fewer)
    _, renamed = tls(ca, tmp_path, "renamed", "127.0.0.1", "broker-0.kafka", unit="others")
    with pytest.raises(ConfigError, match=r"subject 'CN=sidecar,OU=others,O=acme' differs.*ssl\.allow\.dn\.changes"):
        check_certificate_change(cfg, "SSL", old, renamed)
    allowing = build_config({**cfg.raw, "ssl.allow.dn.changes": "true",
                             "listener.name.ssl.ssl.allow.san.changes": "true"})
    check_certificate_change(allowing, "SSL", old, renamed)
    check_certificate_change(allowing, "SSL", old, fewer)


def test_cert_managers_combined_pem_key_first_then_the_chain_loads(ca: trustme.CA, tmp_path: Path) -> None:
    leaf = ca.issue_cert("127.0.0.1", common_name="sidecar")
    combined = tmp_path / "tls-combined.pem"
    combined.write_bytes(leaf.private_key_pem.bytes() + b"".join(pem.bytes() for pem in leaf.cert_chain_pems))
    cfg = build_config({**BASE, "listeners": "SSL://127.0.0.1:9093", "ssl.keystore.location": str(combined)})
    server = listener_tls(cfg, "SSL")
    assert server is not None and server.subject.startswith("CN=sidecar,")


def test_a_key_that_does_not_match_its_certificate_is_refused(ca: trustme.CA, tmp_path: Path) -> None:
    one, other = ca.issue_cert("127.0.0.1"), ca.issue_cert("127.0.0.1")
    mixed = tmp_path / "mixed.pem"
    mixed.write_bytes(one.private_key_pem.bytes() + other.cert_chain_pems[0].bytes())
    cfg = build_config({**BASE, "listeners": "SSL://127.0.0.1:9093", "ssl.keystore.location": str(mixed)})
    with pytest.raises(ConfigError, match="listener SSL: cannot load TLS material"):
        listener_tls(cfg, "SSL")


# -- a dispatch's filters, replaced -------------------------------------------------------------


def test_replaced_filters_see_the_next_request_and_the_fast_lane_forgets_its_verdicts() -> None:
    chain = dispatch()
    frame = produce("t", 1)
    header = decode_request_header(memoryview(frame)[4:], REGISTRY)
    assert chain.plain(header)  # known plain: no filter wants Produce
    produces = Recorder(frozenset({0}))
    chain.replace_filters([produces])
    assert not chain.plain(header)
    assert isinstance(decide(chain, frame), Forward) and produces.seen == [0]
    chain.replace_filters([])
    assert chain.plain(header)
    assert [type(f).__name__ for f in chain.filters] == ["UnparsedPolicy"]  # the built-ins stay


# -- the reloader -----------------------------------------------------------------------------


class Applied:
    """What serves, as far as the reloader sees it: records each configuration, or refuses."""

    def __init__(self) -> None:
        self.configs: list[SidecarConfig] = []
        self.refuse: str | None = None

    async def apply_reload(self, config: SidecarConfig) -> None:
        if self.refuse:
            raise ConfigError(self.refuse)
        self.configs.append(config)


def write(path: Path, **keys: str) -> None:
    scratch = path.with_suffix(".tmp")
    scratch.write_text("".join(f"{k}={v}\n" for k, v in {**BASE, **keys}.items()))
    os.replace(scratch, path)


def metrics(reloader: Reloader) -> dict[str, Any]:
    registry = CollectorRegistry()
    registry.register(ReloadMetrics(reloader))
    from prometheus_client import generate_latest
    return {(s.name + "".join(f",{k}={v}" for k, v in sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for s in family.samples}


async def test_a_reload_applies_what_validates_and_refuses_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.properties"
    write(path, **{"policy.produce.max.records": "0"})
    source = ConfigSource(str(path), {"tag.zone": "z1"})
    serving = Applied()
    reloader = Reloader(source, source.load(), serving)
    first_hash = config_hash(reloader.config)
    write(path, **{"policy.produce.max.records": "3", "sidecar.workers": "4"})
    outcome = await reloader.reload("SIGHUP")
    assert outcome.applied and outcome.live == ("policy.produce.max.records",)
    assert outcome.restart == ("sidecar.workers",)
    assert outcome.message() == ("reloaded (SIGHUP): policy.produce.max.records; these keys need a restart to take "
                                 "effect: sidecar.workers")
    assert serving.configs[-1]["policy.produce.max.records"] == 3 and serving.configs[-1]["sidecar.workers"] == 0
    assert serving.configs[-1].tags == {"zone": "z1"}  # the --set flags of the start still hold
    assert outcome.config_hash != first_hash
    seen = metrics(reloader)
    assert seen["ksidecar_config_reloads_total,result=success"] == 1
    assert seen["ksidecar_config_restart_pending_keys"] == 1
    assert seen[f"ksidecar_config_info,hash={outcome.config_hash}"] == 1

    write(path, **{"connections.max.idle.ms": "-5"})
    refused = await reloader.reload("ksidecar reload")
    assert not refused.applied and refused.config_hash == outcome.config_hash
    assert refused.error is not None and "connections.max.idle.ms='-5'" in refused.error
    assert json.loads(refused.to_json())["message"].startswith(
        "reload (ksidecar reload) failed, the configuration in force is unchanged: connections.max.idle.ms")
    write(path, **{"policy.produce.max.records": "9"})
    serving.refuse = "listener SSL: cannot load TLS material (no such file)"
    assert not (await reloader.reload("SIGHUP")).applied
    assert reloader.config["policy.produce.max.records"] == 3  # nothing changed
    seen = metrics(reloader)
    assert seen["ksidecar_config_reloads_total,result=failure"] == 2
    assert seen["ksidecar_config_last_reload_successful"] == 0
    path.unlink()
    gone = await reloader.reload("SIGHUP")
    assert not gone.applied and "cannot read config file" in (gone.error or "")
    write(path, **{"policy.produce.max.records": "7"})
    reloader.stop()  # the sidecar drains
    draining = await reloader.reload("SIGHUP")
    assert not draining.applied and draining.error == "the sidecar is draining" and len(serving.configs) == 1


async def test_the_watch_reloads_when_a_watched_file_changes_through_a_symlink_swap(
        tmp_path: Path, ca: trustme.CA, autojump_clock: trio.testing.MockClock) -> None:
    data = tmp_path / "..2026_1"
    data.mkdir()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(data / "tls.pem"))
    (tmp_path / "..data").symlink_to(data.name)
    (tmp_path / "tls.pem").symlink_to("..data/tls.pem")
    path = tmp_path / "sidecar.properties"
    write(path, **{"listeners": "SSL://127.0.0.1:9093", "ssl.keystore.location": str(tmp_path / "tls.pem"),
                   "sidecar.config.watch.ms": "100"})
    source = ConfigSource(str(path))
    reloader = Reloader(source, source.load(), Applied())
    assert source.watched(reloader.config) == (str(path), str(tmp_path / "tls.pem"))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch, reloader)
        await trio.sleep(1)
        assert reloader.successes == 0  # nothing changed
        fresh = tmp_path / "..2026_2"
        fresh.mkdir()
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(fresh / "tls.pem"))
        (tmp_path / "..data_tmp").symlink_to(fresh.name)
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
        await trio.sleep(1)
        assert reloader.successes == 1
        await trio.sleep(1)
        assert reloader.successes == 1  # once per change
        nursery.cancel_scope.cancel()


# -- POST /-/reload and the verb ----------------------------------------------------------------


class Probed:
    def __init__(self, hook: Any) -> None:
        self.reload_hook = hook
        self.metrics_registry = CollectorRegistry()

    def readiness(self) -> str | None:
        return None

    async def before_scrape(self) -> None:
        pass


async def test_post_reload_runs_the_hook_and_answers_its_outcome() -> None:
    triggers: list[str] = []

    async def hook(trigger: str) -> tuple[bool, bytes]:
        triggers.append(trigger)
        return len(triggers) == 1, b'{"applied": true}'

    answer = await route(Probed(hook), "POST", "/-/reload")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\nContent-Type: application/json") and triggers == ["ksidecar reload"]
    assert (await route(Probed(hook), "POST", "/-/reload")).startswith(b"HTTP/1.1 500 ")
    assert (await route(Probed(hook), "GET", "/-/reload")).startswith(b"HTTP/1.1 405 ")
    assert (await route(Probed(None), "POST", "/-/reload")).startswith(b"HTTP/1.1 404 ")
    assert (await route(Probed(hook), "POST", "/-/reload", local=False)).startswith(b"HTTP/1.1 403 ")
    assert (await route(Probed(hook), "POST", "/metrics")).startswith(b"HTTP/1.1 405 ")
    assert len(triggers) == 2


def test_the_verb_says_when_it_cannot_reach_the_sidecar(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = __import__("argparse").ArgumentParser()
    reload_cli.add_parser(parser.add_subparsers(dest="command"))
    stale = tmp_path / "ksidecar.pid"
    stale.write_text("not a pid\n")
    assert reload_cli.run(parser.parse_args(["reload", "--pid-file", str(stale)])) == 2
    assert "cannot signal the sidecar of" in capsys.readouterr().err
    properties = tmp_path / "s.properties"
    properties.write_text("sidecar.metrics.listener=\n")
    assert reload_cli.run(parser.parse_args(["reload", "--config", str(properties)])) == 2
    assert "no way to reach the sidecar" in capsys.readouterr().err
    properties.write_text("sidecar.metrics.listener=127.0.0.1:1\n")
    assert reload_cli.run(parser.parse_args(["reload", "--config", str(properties)])) == 2
    assert "cannot reach the sidecar's metrics listener 127.0.0.1:1" in capsys.readouterr().err
    properties.write_text("sidecar.metrics.listener=nowhere\n")
    assert reload_cli.run(parser.parse_args(["reload", "--config", str(properties)])) == 2
    assert "sidecar.metrics.listener='nowhere'" in capsys.readouterr().err


def test_zookeepers_tls_files_reach_the_next_connection_of_the_session(ca: trustme.CA, tmp_path: Path) -> None:
    from proxy.control.zk import ZooKeeper
    from proxy.control.zk_security import ZkSecurity

    for name in ("old", "new"):
        ca.issue_cert("ksidecar").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / f"{name}.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))

    def zk_config(keystore: str) -> SidecarConfig:
        return build_config({**BASE, "zookeeper.connect": "127.0.0.1:1", "zookeeper.ssl.client.enable": "true",
                             "zookeeper.ssl.keystore.location": str(tmp_path / keystore),
                             "zookeeper.ssl.truststore.location": str(tmp_path / "ca.pem")})

    zk = ZooKeeper("127.0.0.1:1", 10, ZkSecurity.from_values(zk_config("old.pem").values))
    assert zk.client.certfile == str(tmp_path / "old.pem")
    zk.use_tls(ZkSecurity.from_values(zk_config("new.pem").values))
    # kazoo reads these at each connection it opens (kazoo.protocol.connection).
    assert (zk.client.certfile, zk.client.keyfile, zk.client.ca) == (
        str(tmp_path / "new.pem"), str(tmp_path / "new.pem"), str(tmp_path / "ca.pem"))
    plain = ZooKeeper("127.0.0.1:1", 10)
    plain.use_tls(ZkSecurity.from_values(zk_config("new.pem").values))  # TLS on or off stays as started
    assert not plain.client.use_ssl and plain.client.certfile is None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.binary(max_size=400))
def test_whatever_the_file_holds_a_reload_applies_or_refuses_with_a_reason(tmp_path: Path, garbage: bytes) -> None:
    path = tmp_path / "sidecar.properties"
    write(path)
    source = ConfigSource(str(path))
    serving = Applied()
    reloader = Reloader(source, source.load(), serving)
    before = reloader.config
    path.write_bytes("".join(f"{k}={v}\n" for k, v in BASE.items()).encode() + garbage)
    outcome = trio.run(reloader.reload, "SIGHUP")
    if outcome.applied:
        assert serving.configs == [reloader.config]
    else:
        assert outcome.error and reloader.config is before and serving.configs == []
