"""``ssl.principal.mapping.rules``: Kafka's SslPrincipalMapper, case by case.

The examples are Kafka's own (``SslPrincipalMapperTest`` and the ``ssl.principal.mapping.rules``
documentation), the expected values written out by hand.
"""

from __future__ import annotations

import pytest

from proxy.auth.principal_mapping import MappingRuleError, NoMatchingRule, PrincipalMapper


def test_kafkas_documented_examples() -> None:
    mapper = PrincipalMapper.parse(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
        "DEFAULT"
    )
    assert mapper.name("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "serviceuser"
    assert mapper.name("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "adminuser@admin"
    assert mapper.name("O=Acme,CN=Alice.B") == "alice.b"  # the third rule, lower-cased
    assert mapper.name("OU=nothing,O=here") == "OU=nothing,O=here"  # DEFAULT


def test_kafkas_mapper_test() -> None:
    mapper = PrincipalMapper.parse(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


def test_the_issues_example() -> None:
    mapper = PrincipalMapper.parse("RULE:^CN=([^,]+),OU=eng,O=Acme$/$1/")
    assert mapper.name("CN=alice,OU=eng,O=Acme") == "alice"
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=bob,OU=ops,O=Acme"):
        mapper.name("CN=bob,OU=ops,O=Acme")


def test_first_matching_rule_wins_and_no_rules_match_nothing() -> None:
    mapper = PrincipalMapper.parse("RULE:^CN=(.*)$/first-$1/,RULE:^CN=(.*)$/second-$1/")
    assert mapper.name("CN=x") == "first-x"
    with pytest.raises(NoMatchingRule):
        PrincipalMapper.parse("").name("CN=x")
    assert PrincipalMapper.parse("DEFAULT").name("CN=x,O=y") == "CN=x,O=y"


def test_escaped_comma_in_the_subject() -> None:
    """Kafka's testCommaWithWhitespace: the pattern itself holds a comma."""
    mapper = PrincipalMapper.parse(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_kafkas_valid_rules(rules: str) -> None:
    PrincipalMapper.parse(rules)


@pytest.mark.parametrize("rules", [
    "default",
    "DEFAUL",
    "DEFAULT/L",
    "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_kafkas_invalid_rules(rules: str) -> None:
    with pytest.raises(MappingRuleError, match="invalid rule"):
        PrincipalMapper.parse(rules)


@pytest.mark.parametrize(("rules", "message"), [
    ("RULE:^CN=(.*$/$1/", "does not compile"),
    ("RULE:^CN=(.*)$/$/", "group index is missing"),
    ("RULE:^CN=(.*)$/$x/", "illegal group reference"),
    ("RULE:^CN=(.*)$/${who}/", "no group named"),
    ("RULE:^CN=.*$/$1/", "no group 1"),  # no groups: Kafka does not escape, Java fails
])
def test_rules_that_cannot_work_refuse_to_start(rules: str, message: str) -> None:
    with pytest.raises(MappingRuleError, match=message):
        PrincipalMapper.parse(rules)


@pytest.mark.parametrize(("expected", "rules"), [
    ("[]", ""),
    ("[DEFAULT]", "DEFAULT"),
    ("[RULE:/]", "RULE://"),
    ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"),
    ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    ("[]", ",   , , ,      , , ,   "),
    ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    (r"[RULE:\/\\\(\)\n\t/\/\/]", r"RULE:\/\\\(\)\n\t/\/\//"),
    (r"[RULE:\**\/+/*/L, RULE:\/*\**/**]", r"RULE:\**\/+/*/L,RULE:\/*\**/**/"),
    (r"[RULE:,RULE:,/,RULE:,\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_kafkas_rule_splitting(expected: str, rules: str) -> None:
    """Kafka's testRulesSplitting, compared through the same toString()."""
    assert str(PrincipalMapper.parse(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_replacement_is_javas() -> None:
    # $n past the groups is literal (Kafka escapes it); $12 with one group is $1 then "2".
    assert PrincipalMapper.parse("RULE:^CN=(.*)$/$1@$4/").name("CN=x") == "x@$4"
    assert PrincipalMapper.parse("RULE:^CN=(.*)$/$12/").name("CN=x") == "x2"
    assert PrincipalMapper.parse(r"RULE:^CN=(.*)$/\$1-$1/").name("CN=x") == "$1-x"
    # A group that took no part expands to nothing; $0 is the whole match.
    assert PrincipalMapper.parse("RULE:^CN=(a)?(.*)$/[$1|$2]/").name("CN=b") == "[|b]"
    assert PrincipalMapper.parse("RULE:^CN=(.*)$/<$0>/").name("CN=x") == "<CN=x>"
    # replaceAll, not a single replacement: a lazy pattern matches whole but replaces each piece.
    assert PrincipalMapper.parse("RULE:(.*?)/[$1]/").name("abc") == "[]a[]b[]c[]"
    # A slash is written \/ in a rule.
    assert PrincipalMapper.parse(r"RULE:^CN=(.*)$/team\/$1/U").name("CN=x") == "TEAM/X"


# -- the sidecar's use of it: parsed at start, per listener, SSL only ------------------------


def test_bad_rules_refuse_to_start_naming_the_key() -> None:
    from proxy.config import ConfigError
    from proxy.config.keys import build_config
    from proxy.control.tls import listener_principal_mapper

    base = {"listeners": "SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0", "sidecar.upstream": "127.0.0.1:9"}
    with pytest.raises(ConfigError, match=r"^ssl\.principal\.mapping\.rules='DEFAULT/L': invalid rule"):
        listener_principal_mapper(build_config(base | {"ssl.principal.mapping.rules": "DEFAULT/L"}), "SSL")
    per_listener = base | {"listener.name.ssl.ssl.principal.mapping.rules": "RULE:(/$1/"}
    with pytest.raises(ConfigError, match=r"^listener\.name\.ssl\.ssl\.principal\.mapping\.rules="):
        listener_principal_mapper(build_config(per_listener), "SSL")
    config = build_config(per_listener | {"listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=(.*)$/$1/"})
    mapper = listener_principal_mapper(config, "SSL")
    assert mapper is not None and mapper.name("CN=x") == "x"
    assert listener_principal_mapper(config, "SASL_SSL") is None  # the SASL login decides there


def test_tls_principal() -> None:
    from cryptography.hazmat.primitives import serialization

    from proxy.control.tls import PrincipalMappingFailed, tls_principal
    from tests.auth.test_distinguished_name import certificate

    der = certificate().public_bytes(serialization.Encoding.DER)  # CN=alice,OU=eng,O=Acme
    assert tls_principal(der, PrincipalMapper.parse("RULE:^CN=([^,]+),OU=eng,O=Acme$/$1/")) == "User:alice"
    assert tls_principal(der, PrincipalMapper.parse("DEFAULT")) == "User:CN=alice,OU=eng,O=Acme"
    assert tls_principal(None, PrincipalMapper.parse("")) is None  # no certificate: anonymous
    with pytest.raises(PrincipalMappingFailed, match="No rules apply to CN=alice,OU=eng,O=Acme"):
        tls_principal(der, PrincipalMapper.parse("RULE:^CN=bob.*$/bob/"))
    with pytest.raises(PrincipalMappingFailed):
        tls_principal(der[:40], PrincipalMapper.parse("DEFAULT"))
