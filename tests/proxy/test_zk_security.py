"""``zookeeper.set.acl``: the ACL each path is created with, and the identity's keys (no ZooKeeper).

The expected ACLs are written by hand from Kafka's rules (``ZkData.defaultAcls``: the creator
may do everything, anyone may read, except under ``/config/users``, ``/config/brokers`` and
``/delegation_token/tokens``) and issue 35's two changes: ``/kafka-acl*`` is never
world-readable, and ``/consumers`` is not left open.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.security import ACL, Id

from proxy.config.keys import ConfigError, build_config
from proxy.control.zk_security import ZkSecurity, acls_for
from proxy.tools.zookeeper_cli import security_from_file

OWNER = ACL(31, Id("auth", ""))
READ = ACL(1, Id("world", "anyone"))

OWNER_ONLY = [
    "/config/users", "/config/users/alice", "/config/brokers/1",
    "/delegation_token/tokens", "/delegation_token/tokens/t1",
    "/kafka-acl", "/kafka-acl/Topic/orders", "/kafka-acl-changes/acl_changes_0000000003",
    "/kafka-acl-extended", "/kafka-acl-extended/prefixed/Topic/ord",
    "/kafka-acl-extended-changes/acl_changes_0000000000",
]
OWNER_AND_READERS = [
    "/", "/ksidecar", "/config", "/config/ips", "/config/ips/127.0.0.1", "/config/changes",
    "/config/usersettings", "/brokers", "/brokers/ids", "/brokers/ids/111", "/feature",
    "/consumers", "/consumers/g/offsets/t/0", "/coordinators", "/coordinators/groups/g",
    "/delegation_token", "/kafka-aclx",
]


@pytest.mark.parametrize("path", OWNER_ONLY)
def test_credentials_and_acls_are_the_owners_alone(path: str) -> None:
    assert acls_for(path) == [OWNER]


@pytest.mark.parametrize("path", OWNER_AND_READERS)
def test_everything_else_is_owned_and_world_readable(path: str) -> None:
    assert acls_for(path) == [OWNER, READ]


BASE = {"listeners": "PLAINTEXT://127.0.0.1:0", "sidecar.upstream": "127.0.0.1:9092",
        "zookeeper.connect": "127.0.0.1:2181/k"}


@pytest.mark.parametrize(("keys", "message"), [
    ({"zookeeper.set.acl": "true"}, "zookeeper.set.acl=true needs the sidecars' ZooKeeper identity"),
    ({"zookeeper.digest.username": "side:car", "zookeeper.digest.password": "pw"},
     "zookeeper.digest.username='side:car': cannot contain ':'"),
    ({"zookeeper.digest.username": "sidecar"},
     "zookeeper.digest.username is set but zookeeper.digest.password is empty"),
])
def test_identity_keys_refused(keys: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config({**BASE, **keys})


def test_identity_from_the_keys_and_the_password_never_shown() -> None:
    config = build_config({**BASE, "zookeeper.set.acl": "true", "zookeeper.digest.username": "sidecar",
                           "zookeeper.digest.password": "s3cret-pw"})
    security = ZkSecurity.from_values(config.values)
    assert (security.set_acl, security.username) == (True, "sidecar")
    assert security.auth_data == [("digest", "sidecar:s3cret-pw")]
    assert "s3cret-pw" not in repr(security)
    assert ZkSecurity().auth_data == []


def test_cli_identity_file_reads_only_the_zookeeper_keys(tmp_path: Path) -> None:
    # The sidecar's own file will do: other keys (even ones that would not validate) are ignored.
    conf = tmp_path / "sidecar.properties"
    conf.write_text("listeners=nonsense\nzookeeper.set.acl=true\nzookeeper.digest.username=sidecar\n"
                    "zookeeper.digest.password=${ZK_PW}\n")
    security = security_from_file(str(conf), {"ZK_PW": "from-env"})
    assert security == ZkSecurity(set_acl=True, username="sidecar", password="from-env")
    assert security_from_file(None, {"KSIDECAR_ZOOKEEPER_DIGEST_USERNAME": "u",
                                     "KSIDECAR_ZOOKEEPER_DIGEST_PASSWORD": "p"}) == \
        ZkSecurity(set_acl=False, username="u", password="p")
    conf.write_text("zookeeper.set.acl=true\n")
    with pytest.raises(ConfigError, match="needs the sidecars' ZooKeeper identity"):
        security_from_file(str(conf), {})
