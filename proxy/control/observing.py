"""The sidecar's side of observers (KIP-388): loading the hub and closing it on shutdown.

The hub itself (:mod:`observers.hub`) is synchronous and knows nothing of trio; this
module builds it from the configuration and runs its life cycle as a task of the
sidecar, so that whenever the sidecar stops — SIGTERM after draining, or a cancelled
test — the observers drain their queues and close (the audit writes its last files) in
a worker thread, without blocking the event loop.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import trio
from prometheus_client import CollectorRegistry

from observers.api import ObserverConfig
from observers.hub import ObserverError, ObserverHub
from protocol.apis import ApiRegistry
from proxy.config import ConfigError, SidecarConfig, observer_entries

#: Sidecar keys observers get as context.
CONTEXT_KEYS = ("sidecar.broker.metadata.api.key",)


def load_hub(
    config: SidecarConfig, apis: ApiRegistry, registry: CollectorRegistry, broker_id: int,
    feature_level: Callable[[str], int] | None = None,
    topic_name: Callable[[uuid.UUID], str | None] | None = None,
    *, worker: int = 0,
) -> ObserverHub | None:
    """The hub of the observers ``observer.class.names`` names; ``None`` for none.
    ``feature_level`` reads the fleet's finalized features (``ObserverConfig.feature_level``),
    ``topic_name`` the broker's name of a topic id (``ObserverConfig.topic_name``),
    ``worker`` is the index of the sidecar worker process the hub runs in
    (``ObserverConfig.worker``; 0 in a single-process sidecar)."""
    names: str = config["observer.class.names"]
    if not names.strip():
        return None
    observer_config = ObserverConfig(
        observer_entries(config),
        broker_id=broker_id,
        worker=worker,
        registry=registry,
        context={key: str(config[key]) for key in CONTEXT_KEYS},
        feature_level=feature_level,
        topic_name=topic_name,
    )
    try:
        return ObserverHub.load(names, observer_config, apis)
    except ObserverError as exc:
        raise ConfigError(str(exc)) from None


async def run_hub(hub: ObserverHub, close_timeout: float) -> None:
    """Start the observers' workers; when cancelled, let them drain and close."""
    hub.start()
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(hub.close, close_timeout)


# -- docs/observers.md -------------------------------------------------------------------

DOCS_BLOCKS = ("contract", "schema", "config")


def _block(name: str) -> str:
    import observers.api
    from observers.audit_schema import markdown_table
    from proxy.config import KEYS

    if name == "contract":
        return (observers.api.__doc__ or "").strip() + "\n"
    if name == "schema":
        return markdown_table()
    lines = ["| key | default | allowed | meaning |", "|---|---|---|---|"]
    for key in KEYS:
        if key.name.startswith("observer."):
            default = f"`{key.default}`" if key.default else "(empty)"
            lines.append(f"| `{key.name}` | {default} | {key.allowed or key.kind} | {key.doc} |")
    return "\n".join(lines) + "\n"


def refresh_docs(text: str) -> str:
    """``text`` (docs/observers.md) with its generated blocks rebuilt from the code."""
    for name in DOCS_BLOCKS:
        begin, end = f"<!-- generated:{name}:begin -->\n", f"<!-- generated:{name}:end -->"
        head, found, rest = text.partition(begin)
        if not found:
            raise ValueError(f"docs: no {begin.strip()} marker")
        _, found, tail = rest.partition(end)
        if not found:
            raise ValueError(f"docs: no {end} marker")
        text = head + begin + _block(name) + end + tail
    return text


def main(argv: list[str] | None = None) -> int:
    """``python -m proxy.control.observing docs/observers.md``: rebuild the generated blocks in place."""
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(prog="python -m proxy.control.observing")
    parser.add_argument("path", type=Path, help="docs/observers.md")
    path: Path = parser.parse_args(argv).path
    path.write_text(refresh_docs(path.read_text()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
