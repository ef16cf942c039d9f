"""Kafka's ACL model: resource types, pattern types, operations, permissions, bindings, filters.

The codes are Kafka's wire codes (``org.apache.kafka.common.acl.AclOperation``,
``AclPermissionType``, ``org.apache.kafka.common.resource.ResourceType``, ``PatternType``),
so a CreateAcls body maps onto :class:`AclBinding` without a table. The names Kafka writes
to ZooKeeper and prints are PascalCase (``IdempotentWrite``, ``TransactionalId``); reading
a name accepts any case, with or without underscores, as Kafka's ``SecurityUtils`` does.

Two rules of Kafka's model live here because every part needs them:

* an ALLOW of Read, Write, Delete or Alter also allows Describe, and an ALLOW of
  AlterConfigs also allows DescribeConfigs (:func:`granting`); ALL grants everything.
  A DENY denies only its own operation (and ALL every operation): a DENY of Read does not
  take Describe away;
* filters (DescribeAcls, DeleteAcls) match as ``AclBindingFilter.matches`` does
  (:meth:`PatternFilter.matches`): ``ANY`` matches LITERAL and PREFIXED patterns by exact
  name, ``MATCH`` matches every pattern that would apply to the named resource.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Self

#: The one name the Cluster resource has.
CLUSTER_NAME = "kafka-cluster"
#: A LITERAL pattern with this name matches every resource of its type.
WILDCARD_RESOURCE = "*"
#: The principal that matches every principal.
WILDCARD_PRINCIPAL = "User:*"
#: The host that matches every host.
WILDCARD_HOST = "*"


def pascal(name: str) -> str:
    """``IDEMPOTENT_WRITE`` → ``IdempotentWrite`` (Kafka's ``SecurityUtils.toPascalCase``)."""
    return "".join(part[:1].upper() + part[1:].lower() for part in name.split("_"))


class _Named(IntEnum):
    """An enum with Kafka's PascalCase name and a lenient parser."""

    @property
    def pascal(self) -> str:
        """The name Kafka stores and prints (``Topic``, ``IdempotentWrite``)."""
        return pascal(self.name)

    @classmethod
    def parse(cls, text: str) -> Self:
        """The member named ``text`` in any case, underscores optional; UNKNOWN otherwise."""
        wanted = text.strip().replace("_", "").replace("-", "").upper()
        for member in cls:
            if member.name.replace("_", "") == wanted:
                return member
        return cls(0)

    @classmethod
    def of(cls, code: int) -> Self:
        """The member with wire code ``code``; UNKNOWN for a code Kafka does not define."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ResourceType(_Named):
    """``org.apache.kafka.common.resource.ResourceType`` (wire codes)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    """``org.apache.kafka.common.resource.PatternType``; ANY and MATCH only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(_Named):
    """``org.apache.kafka.common.acl.AclOperation``; ANY only in filters."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(_Named):
    """``org.apache.kafka.common.acl.AclPermissionType``; ANY only in filters."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The concrete values (what an ACL may hold).
RESOURCE_TYPES = frozenset(ResourceType) - {ResourceType.UNKNOWN, ResourceType.ANY}
PATTERN_TYPES = frozenset({PatternType.LITERAL, PatternType.PREFIXED})
OPERATIONS = frozenset(Operation) - {Operation.UNKNOWN, Operation.ANY}
PERMISSIONS = frozenset({Permission.ALLOW, Permission.DENY})

#: The operations each resource type has (``AclEntry.supportedOperations``); ALL too.
#: Kafka's brokers accept any operation on any type; ``kafka-acls.sh`` (and ours) refuse others.
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset({Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                                   Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                                   Operation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({Operation.READ, Operation.DESCRIBE, Operation.DELETE,
                                   Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                                     Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                                     Operation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Operation.DESCRIBE, Operation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Operation.DESCRIBE}),
    ResourceType.USER: frozenset({Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS}),
}

#: Operations whose ALLOW also allows the key (``AclAuthorizer.authorizeAction``).
_IMPLIED: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                                   Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


def granting(operation: Operation) -> frozenset[Operation]:
    """The ACL operations whose ALLOW allows ``operation``: itself, ALL, and the implying ones."""
    return _IMPLIED.get(operation, frozenset({operation})) | {Operation.ALL}


def denying(operation: Operation) -> frozenset[Operation]:
    """The ACL operations whose DENY denies ``operation``: itself and ALL (no implication)."""
    return frozenset({operation, Operation.ALL})


#: Kafka error codes for a refused resource (``AclEntry.authorizationError``).
AUTHORIZATION_ERRORS: dict[ResourceType, int] = {
    ResourceType.TOPIC: 29,             # TOPIC_AUTHORIZATION_FAILED
    ResourceType.GROUP: 30,             # GROUP_AUTHORIZATION_FAILED
    ResourceType.CLUSTER: 31,           # CLUSTER_AUTHORIZATION_FAILED
    ResourceType.TRANSACTIONAL_ID: 53,  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    ResourceType.DELEGATION_TOKEN: 65,  # DELEGATION_TOKEN_AUTHORIZATION_FAILED
    ResourceType.USER: 65,              # Kafka answers token requests about users with the token error
}


def parse_principal(text: str) -> str | None:
    """``Type:name`` as Kafka's ``SecurityUtils.parseKafkaPrincipal`` accepts it, or ``None``."""
    kind, sep, name = text.partition(":")
    if not sep or not kind:
        return None
    return f"{kind}:{name}"


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    """A resource an ACL applies to: type, name, LITERAL or PREFIXED."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        """True when this pattern covers the resource ``(resource_type, name)``."""
        if resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return self.name == name or self.name == WILDCARD_RESOURCE

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True, order=True)
class AclEntry:
    """Who (principal, host) may or may not (permission) do what (operation)."""

    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission.name})")


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: an entry on a resource pattern."""

    pattern: ResourcePattern
    entry: AclEntry


def invalid_binding(binding: AclBinding) -> str | None:
    """Why Kafka refuses to create ``binding`` (INVALID_REQUEST), or ``None``.

    The checks of ``AclApis.handleCreateAcls``, ``AclAuthorizer.validateAclBinding`` and
    the controller's ``AclControlManager.validateNewAcl``.
    """
    pattern, entry = binding.pattern, binding.entry
    if (pattern.resource_type not in RESOURCE_TYPES or pattern.pattern_type not in PATTERN_TYPES
            or entry.operation not in OPERATIONS or entry.permission not in PERMISSIONS):
        return "ACL binding contains unknown elements"
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not pattern.name:
        return "Invalid empty resource name"
    if "/" in pattern.name or pattern.name in (".", ".."):
        # The name is a znode name in ZooKeeper mode.
        return f"ACL binding contains invalid resource name: {pattern.name}"
    if parse_principal(entry.principal) is None:
        return f"Could not parse principal from `{entry.principal}`"
    return None


@dataclass(frozen=True, slots=True)
class PatternFilter:
    """``ResourcePatternFilter``: ``name`` ``None`` matches any name."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    def matches(self, pattern: ResourcePattern) -> bool:
        """``ResourcePatternFilter.matches``."""
        if self.resource_type not in (ResourceType.ANY, pattern.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, pattern.pattern_type):
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        # MATCH: every pattern that applies to the resource named by the filter.
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE

    @property
    def unknown(self) -> bool:
        """True when a field holds UNKNOWN (Kafka refuses such a filter)."""
        return self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN


@dataclass(frozen=True, slots=True)
class EntryFilter:
    """``AccessControlEntryFilter``: ``None`` and ANY match anything."""

    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, entry: AclEntry) -> bool:
        """``AccessControlEntryFilter.matches``."""
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (Operation.ANY, entry.operation)
                and self.permission in (Permission.ANY, entry.permission))

    @property
    def unknown(self) -> bool:
        """True when a field holds UNKNOWN."""
        return self.operation == Operation.UNKNOWN or self.permission == Permission.UNKNOWN


@dataclass(frozen=True, slots=True)
class BindingFilter:
    """``AclBindingFilter``: a pattern filter and an entry filter."""

    pattern: PatternFilter
    entry: EntryFilter

    def matches(self, binding: AclBinding) -> bool:
        """True when both halves match."""
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    @property
    def unknown(self) -> bool:
        """True when a field holds UNKNOWN (INVALID_REQUEST)."""
        return self.pattern.unknown or self.entry.unknown


#: The filter that matches every ACL.
ANY_BINDING = BindingFilter(PatternFilter(ResourceType.ANY, None, PatternType.ANY), EntryFilter())
