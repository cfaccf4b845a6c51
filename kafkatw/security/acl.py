"""
Kafka's ACL model and its authorization rules, sans-IO.

An ACL binding is a I{resource pattern} (resource type, name, pattern type)
and an I{access control entry} (principal, host, operation, permission).  The
codes are Kafka's wire codes (C{org.apache.kafka.common.resource.ResourceType},
C{PatternType}, C{acl.AclOperation}, C{acl.AclPermissionType}); the names are
those Kafka's ZooKeeper authorizer writes (C{SecurityUtils.resourceTypeName},
C{operationName}, C{permissionTypeName}): C{Topic}, C{Group}, C{Cluster},
C{TransactionalId}; C{Read}, C{ClusterAction}, C{IdempotentWrite}; C{Allow},
C{Deny}.

L{AclCache} holds every ACL of a cluster and decides (Kafka's
C{AclAuthorizer.authorize}, KIP-11, KIP-290):

  1. a principal in C{super.users} may do anything;
  2. the ACLs that apply to a resource are those of its literal name, of the
     literal wildcard C{*}, and of every prefixed pattern its name starts with;
  3. none apply: allowed only with C{allow.everyone.if.no.acl.found=true};
  4. a matching C{Deny} (principal or C{User:*}; host or C{*}; the operation
     or C{All}) wins;
  5. else a matching C{Allow} is needed, where C{Describe} is implied by
     C{Read}, C{Write}, C{Delete} and C{Alter}, and C{DescribeConfigs} by
     C{AlterConfigs}.

Decisions are cached per (principal, host, operation, resource type, name)
until the ACLs change, so a hot path pays one dict lookup.

Source: KIP-11 (authorization interface), KIP-290 (prefixed ACLs), KIP-679
(idempotent producers without C{IdempotentWrite}); Kafka's C{AclAuthorizer}.
"""

from __future__ import annotations

import enum
import json
from typing import Iterable, NamedTuple

__all__ = [
    "ResourceType", "PatternType", "AclOperation", "AclPermissionType",
    "ResourcePattern", "AccessControlEntry", "AclBinding", "AclBindingFilter",
    "AclCache", "InvalidAclError", "CLUSTER_NAME", "WILDCARD", "WILDCARD_PRINCIPAL",
    "AUTHORIZER_CLASS_NAMES", "parse_super_users", "encode_acls", "decode_acls",
    "supported_operations", "operations_bit_field", "OPERATIONS_NOT_REQUESTED",
]

#: The name of the one C{Cluster} resource.
CLUSTER_NAME = "kafka-cluster"
#: The literal name that matches every resource of its type.
WILDCARD = "*"
#: The principal that matches every principal.
WILDCARD_PRINCIPAL = "User:*"
#: C{authorized_operations} of a response when the client did not ask (Int.MinValue).
OPERATIONS_NOT_REQUESTED = -2147483648

#: C{authorizer.class.name} values that select L{kafkatw.broker.authorizer.ZkAclAuthorizer}:
#: Kafka's ZooKeeper authorizer under its 2.4+ and its older name, and kafkatw's.
AUTHORIZER_CLASS_NAMES = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "kafkatw.security.AclAuthorizer",
})


class InvalidAclError(ValueError):
    """A binding or filter Kafka would refuse (C{INVALID_REQUEST})."""


class _Named(enum.IntEnum):
    """An enum whose members have Kafka's camel-case name (C{ClusterAction})."""

    @property
    def kafka_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def parse(cls, text: str) -> "_Named":
        """By Kafka's name in any case, with or without underscores (C{cluster-action} too)."""
        wanted = text.replace("_", "").replace("-", "").lower()
        for member in cls:
            if member.name.replace("_", "").lower() == wanted:
                return member
        raise InvalidAclError(f"unknown {cls.__name__} {text!r}")


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
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


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The resource types kafkatw authorizes.
_CONCRETE_TYPES = frozenset({ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                             ResourceType.TRANSACTIONAL_ID, ResourceType.DELEGATION_TOKEN})

_O = AclOperation
#: Kafka's C{AclEntry.supportedOperations}: what ACLs of each type may name (and the
#: operations of C{authorized_operations} bit sets).
_SUPPORTED: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                                   _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({_O.READ, _O.DESCRIBE, _O.DELETE}),
    ResourceType.CLUSTER: frozenset({_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                                     _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({_O.DESCRIBE, _O.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({_O.DESCRIBE}),
}

#: Operations whose Allow implies another's (Kafka's C{AclAuthorizer.allowAclExists}).
_IMPLIED_BY: dict[AclOperation, tuple[AclOperation, ...]] = {
    _O.DESCRIBE: (_O.DESCRIBE, _O.READ, _O.WRITE, _O.DELETE, _O.ALTER),
    _O.DESCRIBE_CONFIGS: (_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
}


def supported_operations(resource_type: ResourceType) -> frozenset[AclOperation]:
    """The operations ACLs on C{resource_type} may name (Kafka's C{AclEntry.supportedOperations})."""
    return _SUPPORTED.get(resource_type, frozenset())


def operations_bit_field(operations: Iterable[AclOperation]) -> int:
    """Kafka's C{Utils.to32BitField}: bit I{code} set for each operation."""
    field = 0
    for op in operations:
        field |= 1 << int(op)
    return field


class ResourcePattern(NamedTuple):
    """A resource type, a name and how the name matches (L{PatternType.LITERAL} or C{PREFIXED})."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, " \
               f"patternType={self.pattern_type.name})"


class AccessControlEntry(NamedTuple):
    """C{principal} (C{User:alice}) from C{host} (C{*}: any) may (or may not) do C{operation}."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, " \
               f"permissionType={self.permission_type.name})"


class AclBinding(NamedTuple):
    pattern: ResourcePattern
    entry: AccessControlEntry

    def validate(self) -> None:
        """
        Kafka's checks of a binding to create.

        @raise InvalidAclError: an indefinite type, pattern, operation or
            permission, a cluster resource not named C{kafka-cluster}, an
            operation the resource type does not have, a malformed principal.
        """
        pattern, entry = self.pattern, self.entry
        if pattern.resource_type not in _CONCRETE_TYPES:
            raise InvalidAclError(f"invalid resource type {pattern.resource_type.name}")
        if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(f"invalid pattern type {pattern.pattern_type.name}")
        if not pattern.name:
            raise InvalidAclError("an empty resource name")
        if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
            raise InvalidAclError(f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise InvalidAclError(f"invalid permission type {entry.permission_type.name}")
        if entry.operation != AclOperation.ALL and entry.operation not in supported_operations(pattern.resource_type):
            raise InvalidAclError(f"operation {entry.operation.kafka_name} is not supported by "
                                  f"{pattern.resource_type.kafka_name} resources")
        kind, sep, name = entry.principal.partition(":")
        if not sep or not kind or not name:
            raise InvalidAclError(f"invalid principal {entry.principal!r} (expected Type:name, e.g. User:alice)")
        if not entry.host:
            raise InvalidAclError("an empty host (use * for any host)")


class AclBindingFilter(NamedTuple):
    """
    What DescribeAcls and DeleteAcls select: C{None} names, principals and
    hosts match anything, as do C{ANY} types, operations and permissions;
    pattern type C{ANY} matches patterns of either type with the exact name,
    C{MATCH} the patterns that would apply to the named resource.
    """

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def validate(self) -> None:
        """@raise InvalidAclError: an C{UNKNOWN} field (Kafka's C{findIndefiniteField})."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission_type):
            if value.name == "UNKNOWN":
                raise InvalidAclError(f"the filter has an unknown {type(value).__name__}")

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        """Kafka's C{ResourcePatternFilter.matches}."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD
        return self.name.startswith(pattern.name)

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        """Kafka's C{AccessControlEntryFilter.matches}."""
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (AclOperation.ANY, entry.operation)
                and self.permission_type in (AclPermissionType.ANY, entry.permission_type))

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


def parse_super_users(value: str) -> frozenset[str]:
    """C{super.users}: principals separated by semicolons, as Kafka writes them (C{User:admin;User:broker})."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


# --- the ZooKeeper encoding ------------------------------------------------------------------


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """
    The value of an ACL znode (Kafka's C{AclEntry.toJsonCompatibleMap})::

        {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}
    """
    acls = [{"principal": e.principal, "permissionType": e.permission_type.kafka_name,
             "operation": e.operation.kafka_name, "host": e.host}
            for e in sorted(entries, key=lambda e: (e.principal, e.host, int(e.operation), int(e.permission_type)))]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def decode_acls(data: bytes | None) -> frozenset[AccessControlEntry]:
    """The entries of an ACL znode's value (empty for an empty or missing value)."""
    if not data:
        return frozenset()
    body = json.loads(data)
    return frozenset(
        AccessControlEntry(a["principal"], a["host"], AclOperation.parse(a["operation"]),  # type: ignore[arg-type]
                           AclPermissionType.parse(a["permissionType"]))  # type: ignore[arg-type]
        for a in body.get("acls") or ())


# --- the cache and the decision ------------------------------------------------------------------

_DECISIONS_MAX = 100_000


class AclCache:
    """
    Every ACL of the cluster, and Kafka's decision over them (module docstring).

    @param super_users: principals allowed everything (L{parse_super_users}).
    @param allow_everyone_if_no_acl_found: C{allow.everyone.if.no.acl.found}.
    """

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        #: pattern -> its entries (never empty).
        self.acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        #: (resource type, prefix) -> entries, the prefixed patterns only.
        self._prefixed: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
        self._prefix_lengths: dict[ResourceType, set[int]] = {}
        self._decisions: dict[tuple, bool] = {}

    # -- updates --

    def set(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Replace the entries of C{pattern} (none: remove it); forgets cached decisions."""
        entries = frozenset(entries)
        if entries:
            self.acls[pattern] = entries
        else:
            self.acls.pop(pattern, None)
        if pattern.pattern_type == PatternType.PREFIXED:
            key = (pattern.resource_type, pattern.name)
            if entries:
                self._prefixed[key] = entries
            else:
                self._prefixed.pop(key, None)
            self._prefix_lengths[pattern.resource_type] = {
                len(name) for (rt, name) in self._prefixed if rt == pattern.resource_type}
        self._decisions.clear()

    def bindings(self) -> list[AclBinding]:
        return [AclBinding(p, e) for p, entries in self.acls.items() for e in entries]

    # -- decisions --

    def matching(self, resource_type: ResourceType, name: str) -> list[frozenset[AccessControlEntry]]:
        """The entry sets that apply to the resource C{(resource_type, name)}."""
        found = []
        acls = self.acls
        for key in (ResourcePattern(resource_type, name), ResourcePattern(resource_type, WILDCARD)):
            entries = acls.get(key)
            if entries:
                found.append(entries)
        if name == WILDCARD:
            found = found[:1]
        lengths = self._prefix_lengths.get(resource_type)
        if lengths:
            prefixed = self._prefixed
            for length in lengths:
                if length <= len(name):
                    entries = prefixed.get((resource_type, name[:length]))
                    if entries:
                        found.append(entries)
        return found

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """Whether C{principal} connecting from C{host} may do C{operation} on the resource."""
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            if len(self._decisions) >= _DECISIONS_MAX:
                self._decisions.clear()
            self._decisions[key] = decision
        return decision

    def _decide(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                name: str) -> bool:
        if principal in self.super_users:
            return True
        matching = self.matching(resource_type, name)
        if not matching:
            return self.allow_everyone_if_no_acl_found
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)
        deny_ops = (operation, AclOperation.ALL)
        allow_ops = _IMPLIED_BY.get(operation, (operation,)) + (AclOperation.ALL,)
        allowed = False
        for entries in matching:
            for e in entries:
                if e.principal not in principals or e.host not in hosts:
                    continue
                if e.permission_type == AclPermissionType.DENY:
                    if e.operation in deny_ops:
                        return False
                elif e.operation in allow_ops:
                    allowed = True
        return allowed

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str) -> int:
        """The bit set of L{supported_operations} C{principal} may do on the resource."""
        return operations_bit_field(op for op in supported_operations(resource_type)
                                    if self.authorize(principal, host, op, resource_type, name))

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """
        Whether C{principal} may do C{operation} on I{some} resource of the
        type (Kafka's C{authorizeByResourceType}, KIP-679: an idempotent
        producer with Write on any topic needs no C{IdempotentWrite}): an
        Allow on a pattern that no Deny of the same principal covers.
        """
        if principal in self.super_users:
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD)
        ops = (operation, AclOperation.ALL)
        allows: list[ResourcePattern] = []
        denies: list[ResourcePattern] = []
        any_of_type = False
        for pattern, entries in self.acls.items():
            if pattern.resource_type != resource_type:
                continue
            any_of_type = True
            for e in entries:
                if e.principal in principals and e.host in hosts and e.operation in ops:
                    (denies if e.permission_type == AclPermissionType.DENY else allows).append(pattern)
        if not any_of_type:
            return self.allow_everyone_if_no_acl_found
        if ResourcePattern(resource_type, WILDCARD) in denies:
            return False

        def denied(allow: ResourcePattern) -> bool:
            for deny in denies:
                if deny.pattern_type == PatternType.PREFIXED and allow.name.startswith(deny.name):
                    return True
                if deny.pattern_type == PatternType.LITERAL and allow.pattern_type == PatternType.LITERAL \
                        and deny.name == allow.name:
                    return True
            return False

        return any(not denied(allow) for allow in allows)
