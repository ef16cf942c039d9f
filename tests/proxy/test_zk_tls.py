"""TLS to ZooKeeper (``zookeeper.ssl.*``): the keys, their refusals, and the kazoo client they
make (no ZooKeeper; the connection over TLS to a real ensemble is in
tests/cluster/test_deployed_shape.py). Certificates come from trustme."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, make_digest_acl_credential

from proxy.config.keys import ConfigError, build_config
from proxy.control.zk_security import SecureKazooClient, ZkSecurity, ZkTlsClient, _same, acls_for
from proxy.tools.zookeeper_cli import security_from_file

BASE = {"listeners": "PLAINTEXT://127.0.0.1:0", "sidecar.upstream": "127.0.0.1:9092",
        "zookeeper.connect": "127.0.0.1:2182/k"}
SECRET = "k3ystore-s3cret"


@pytest.fixture(scope="module")
def pems(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA bundle, a plain keystore (key + chain in one PEM) and an encrypted one."""
    d = tmp_path_factory.mktemp("zk-tls")
    ca = trustme.CA()
    leaf = ca.issue_cert("ksidecar-client@example.org")
    paths = {"ca": d / "ca.pem", "keystore": d / "client.pem", "encrypted": d / "client-enc.pem",
             "garbage": d / "garbage.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    leaf.private_key_and_cert_chain_pem.write_to_path(str(paths["keystore"]))
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(SECRET.encode()))
    paths["encrypted"].write_bytes(encrypted + b"".join(b.bytes() for b in leaf.cert_chain_pems))
    paths["garbage"].write_text("not a certificate\n")
    return paths


def tls_keys(pems: dict[str, Path], **extra: str) -> dict[str, str]:
    return {**BASE, "zookeeper.ssl.client.enable": "true",
            "zookeeper.ssl.truststore.location": str(pems["ca"]),
            "zookeeper.ssl.keystore.location": str(pems["encrypted"]),
            "zookeeper.ssl.keystore.password": SECRET, **extra}


def test_the_keys_make_a_tls_client_with_the_stores_and_no_secret_shown(pems: dict[str, Path]) -> None:
    config = build_config(tls_keys(pems, **{"zookeeper.set.acl": "true", "zookeeper.digest.username": "sidecar",
                                            "zookeeper.digest.password": "pw"}))
    security = ZkSecurity.from_values(config.values)
    assert security.tls == ZkTlsClient(keystore=str(pems["encrypted"]), keystore_password=SECRET,
                                       truststore=str(pems["ca"]), check_hostname=True)
    assert SECRET not in repr(security) and SECRET not in security.describe()
    assert security.describe() == ("digest user 'sidecar'; zookeeper.set.acl=true; "
                                   "TLS on with a client certificate")
    client = security.client("127.0.0.1:2182", timeout=5.0)
    assert isinstance(client, SecureKazooClient)  # the ACL choice still applies over TLS
    assert (client.use_ssl, client.verify_certs, client.check_hostname) == (True, True, True)
    assert (client.ca, client.certfile, client.keyfile) == (str(pems["ca"]),) + (str(pems["encrypted"]),) * 2
    assert client.keyfile_password == SECRET
    assert ZkTlsClient(keystore="k.pem").kazoo_kwargs()["keyfile_password"] == ""  # never a prompt


def test_without_a_client_certificate_or_truststore_and_without_hostname_checks(pems: dict[str, Path]) -> None:
    config = build_config({**BASE, "zookeeper.ssl.client.enable": "true",
                           "zookeeper.ssl.endpoint.identification.enable": "false"})
    security = ZkSecurity.from_values(config.values)
    client = security.client("127.0.0.1:2182", timeout=5.0)
    assert (client.use_ssl, client.verify_certs, client.check_hostname) == (True, True, False)
    assert (client.ca, client.certfile, client.keyfile, client.keyfile_password) == (None, None, None, None)
    assert security.describe() == "no identity; zookeeper.set.acl=false; TLS on"


def test_tls_off_by_default_and_the_stores_ignored_then(pems: dict[str, Path]) -> None:
    # As Kafka: the zookeeper.ssl.* keys mean nothing without zookeeper.ssl.client.enable.
    config = build_config({**BASE, "zookeeper.ssl.keystore.location": "/nonexistent.pem"})
    security = ZkSecurity.from_values(config.values)
    assert security.tls is None
    assert security.client("127.0.0.1:2181").use_ssl is False


@pytest.mark.parametrize(("extra", "message"), [
    ({"zookeeper.ssl.keystore.type": "JKS"}, r"only PEM stores are read \(convert: `keytool"),
    ({"zookeeper.ssl.truststore.type": "pkcs12"}, "only PEM stores are read"),
    ({"zookeeper.ssl.keystore.type": "BKS"}, "must be PEM"),
    ({"zookeeper.ssl.keystore.password": "wrong-one"}, "cannot load a private key and its certificate"),
    ({"zookeeper.ssl.keystore.password": ""}, "cannot load a private key and its certificate"),
    ({"zookeeper.ssl.keystore.location": "/nonexistent/client.pem"},
     "keystore.location='/nonexistent/client.pem': cannot load .*No such file"),
    ({"zookeeper.ssl.truststore.location": "GARBAGE"}, "cannot read CA certificates"),
    ({"zookeeper.ssl.keystore.location": "", "zookeeper.ssl.keystore.password": "x"},
     "keystore.password is set but zookeeper.ssl.keystore.location is empty"),
])
def test_stores_that_do_not_load_stop_the_start_naming_the_key_never_the_password(
        pems: dict[str, Path], extra: dict[str, str], message: str) -> None:
    if extra.get("zookeeper.ssl.truststore.location") == "GARBAGE":
        extra = {"zookeeper.ssl.truststore.location": str(pems["garbage"])}
    with pytest.raises(ConfigError, match=message) as caught:
        build_config(tls_keys(pems, **extra))
    assert SECRET not in str(caught.value) and "wrong-one" not in str(caught.value)


def test_pem_type_is_accepted_in_any_case(pems: dict[str, Path]) -> None:
    config = build_config(tls_keys(pems, **{"zookeeper.ssl.keystore.type": "pem",
                                            "zookeeper.ssl.truststore.type": "PEM"}))
    assert config.values["zookeeper.ssl.keystore.type"] == "PEM"


def test_cli_file_reads_the_tls_keys_and_the_environment(pems: dict[str, Path], tmp_path: Path) -> None:
    conf = tmp_path / "sidecar.properties"
    conf.write_text(f"listeners=nonsense\nzookeeper.ssl.client.enable=true\n"
                    f"zookeeper.ssl.truststore.location={pems['ca']}\n"
                    f"zookeeper.ssl.keystore.location={pems['encrypted']}\n")
    security = security_from_file(str(conf), {"KSIDECAR_ZOOKEEPER_SSL_KEYSTORE_PASSWORD": SECRET})
    assert security.tls == ZkTlsClient(keystore=str(pems["encrypted"]), keystore_password=SECRET,
                                       truststore=str(pems["ca"]))
    with pytest.raises(ConfigError, match="cannot load a private key"):
        security_from_file(str(conf), {})


def test_secure_tree_compares_past_the_x509_id_a_client_certificate_adds() -> None:
    # Over TLS with a client certificate ZooKeeper adds the session's x509 id to CREATOR_ALL:
    # a secured node must still count as secured, and the digest entry must still be there.
    client = SimpleNamespace(auth_data=[("digest", "sidecar:pw")])
    digest = ACL(31, Id("digest", make_digest_acl_credential("sidecar", "pw")))
    x509 = ACL(31, Id("x509", "CN=ksidecar-1,O=Acme"))
    world = ACL(1, Id("world", "anyone"))
    assert _same([x509, digest, world], acls_for("/brokers/ids/1"), client)
    assert _same([x509, digest], acls_for("/config/users/alice"), client)
    assert not _same([x509], acls_for("/config/users/alice"), client)
    assert not _same([x509, digest, world], acls_for("/config/users/alice"), client)
    assert not _same([x509, *OPEN_ACL_UNSAFE], list(OPEN_ACL_UNSAFE), client)
