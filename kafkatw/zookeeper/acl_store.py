"""
Kafka's ACLs in ZooKeeper, read and written (Kafka's C{ZkAclStore} and the
create/delete/describe of C{AclAuthorizer}): L{ZkAclStore} is an
L{kafkatw.security.acl.AclCache} whose changes are conditional writes of the
resource patterns' znodes (L{kafkatw.zookeeper.registry.Registry.update_acls}),
each with its change notification.

The broker's authorizer (L{kafkatw.broker.authorizer.ZkAclAuthorizer}) adds
following the change notifications of the other brokers;
C{kafkatw acls --authorizer-properties zookeeper.connect=...} and
L{kafkatw.testing.create_acls_in_zookeeper} use the store as it is, on a
session of their own.

Source: KIP-11; Kafka's C{kafka.security.authorizer.AclAuthorizer} and
C{kafka.zk.ZkAclStore}.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclCache,
    InvalidAclError,
    ResourcePattern,
)

__all__ = ["ZkAclStore"]


class ZkAclStore(AclCache):
    """
    L{AclCache} written through to ZooKeeper.

    @param registry: a L{kafkatw.zookeeper.registry.Registry}.
    """

    def __init__(self, registry: Any, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        super().__init__(super_users, allow_everyone_if_no_acl_found)
        self.registry = registry

    async def load(self) -> None:
        """Read every ACL from ZooKeeper into the cache."""
        for pattern, entries in (await self.registry.list_acls()).items():
            self.set(pattern, entries)

    # -- CreateAcls / DeleteAcls ---------------------------------------------------------------

    async def create_acls(self, bindings: list[AclBinding]) -> list[Exception | None]:
        """
        Add C{bindings}, one conditional write per resource pattern.

        @return: per binding C{None} or the error (L{InvalidAclError} for a
            binding Kafka refuses, a ZooKeeper error).
        """
        results: list[Exception | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for index, binding in enumerate(bindings):
            try:
                binding.validate()
            except InvalidAclError as e:
                results[index] = e
                continue
            by_pattern.setdefault(binding.pattern, []).append(index)
        for pattern, indexes in by_pattern.items():
            adding = frozenset(bindings[i].entry for i in indexes)
            try:
                _old, new = await self.registry.update_acls(pattern, lambda current: current | adding)
            except Exception as e:  # noqa: BLE001 -- reported per binding, as Kafka does
                for i in indexes:
                    results[i] = e
                continue
            self.set(pattern, new)
        return results

    async def delete_acls(self, filters: list[AclBindingFilter]) -> list[list[AclBinding] | Exception]:
        """
        Remove every ACL each filter matches.

        @return: per filter the bindings deleted, or the error.
        """
        results: list[list[AclBinding] | Exception] = []
        for acl_filter in filters:
            try:
                acl_filter.validate()
            except InvalidAclError as e:
                results.append(e)
                continue
            deleted: list[AclBinding] = []
            try:
                for pattern in [p for p in list(self.acls) if acl_filter.matches_pattern(p)]:
                    removed: list[AccessControlEntry] = []

                    def change(current: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
                        removed[:] = [e for e in current if acl_filter.matches_entry(e)]
                        return current.difference(removed)

                    _old, new = await self.registry.update_acls(pattern, change)
                    self.set(pattern, new)
                    deleted.extend(AclBinding(pattern, e) for e in removed)
            except Exception as e:  # noqa: BLE001
                results.append(e)
                continue
            results.append(deleted)
        return results

    def describe_acls(self, acl_filter: AclBindingFilter) -> dict[ResourcePattern, list[AccessControlEntry]]:
        """The cached ACLs C{acl_filter} matches, by pattern."""
        out: dict[ResourcePattern, list[AccessControlEntry]] = {}
        for pattern, entries in self.acls.items():
            if acl_filter.matches_pattern(pattern):
                matched = sorted((e for e in entries if acl_filter.matches_entry(e)), key=str)
                if matched:
                    out[pattern] = matched
        return out
