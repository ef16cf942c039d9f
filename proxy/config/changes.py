"""What a reload changes: the keys that differ between two configurations, which of them
apply live and which wait for a restart, and the configuration then in force.

Pure functions over :class:`~proxy.config.keys.SidecarConfig` (no I/O): the reload's shell
(:mod:`proxy.control.reload`) reads the files, and each process applies what this decides.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from proxy.config.keys import KEYS, SidecarConfig, build_config, is_live


@dataclass(frozen=True, kw_only=True)
class Changes:
    """The keys that differ between the configuration in force and a new one."""

    #: Changed keys a reload applies, sorted.
    live: tuple[str, ...]
    #: Changed keys that need a restart, sorted (the configuration in force keeps their old values).
    restart: tuple[str, ...]

    @property
    def any(self) -> bool:
        """True when some key differs."""
        return bool(self.live or self.restart)


def changed_keys(old: SidecarConfig, new: SidecarConfig) -> Changes:
    """The keys whose values differ: fixed keys by their parsed values (``8`` and ``08`` are
    the same), open-ended ones (``listener.name.*``, ``tag.*``, ``observer.*``, ``filter.*``)
    by their text."""
    names = {key.name for key in KEYS if old.values[key.name] != new.values[key.name]}
    names.update(_family_changes(_families(old.raw), _families(new.raw)))
    return Changes(live=tuple(sorted(n for n in names if is_live(n))),
                   restart=tuple(sorted(n for n in names if not is_live(n))))


def in_force(old: SidecarConfig, new: SidecarConfig, changes: Changes) -> SidecarConfig:
    """The configuration a reload leaves in force: ``new``, except that every key needing a
    restart keeps its value in ``old`` (:func:`changed_keys`).

    Raises :class:`~proxy.config.keys.ConfigError` if that mix does not validate (a live
    key whose new value only makes sense with a restart key's new value)."""
    if not changes.restart:
        return new
    raw = dict(new.raw)
    for name in changes.restart:
        if name in old.raw:
            raw[name] = old.raw[name]
        else:
            raw.pop(name, None)
    return build_config(raw)


def config_hash(config: SidecarConfig) -> str:
    """A short stable digest of ``config``'s keys and values (its ``raw`` form, passwords
    included but never shown): equal for equal configurations, whatever their order."""
    digest = hashlib.sha256()
    for name, value in sorted(config.raw.items()):
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(value.encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16]


_FAMILIES = ("listener.name.", "tag.", "observer.", "filter.")


def _families(raw: Mapping[str, str]) -> dict[str, str]:
    fixed = {key.name for key in KEYS}
    return {k: v.strip() for k, v in raw.items() if k.startswith(_FAMILIES) and k not in fixed}


def _family_changes(old: Mapping[str, str], new: Mapping[str, str]) -> set[str]:
    return {name for name in old.keys() | new.keys() if old.get(name) != new.get(name)}
