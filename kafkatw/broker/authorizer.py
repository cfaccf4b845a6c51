"""
The broker's authorizer: Kafka's ZooKeeper ACL authorizer (C{AclAuthorizer}).

Selected by C{authorizer.class.name} (L{kafkatw.security.acl.AUTHORIZER_CLASS_NAMES});
left empty, the broker authorizes nothing, as Kafka does without an authorizer.

At start the broker reads every ACL from ZooKeeper
(L{kafkatw.zookeeper.registry.Registry.list_acls}) into an
L{kafkatw.security.acl.AclCache}, then watches the two change stores
(C{/kafka-acl-changes}, C{/kafka-acl-extended-changes}): each new sequential
notification names one resource pattern, whose znode it re-reads, so an ACL
created through any broker (or straight in ZooKeeper by C{kafkatw acls
--authorizer-properties zookeeper.connect=...}) takes effect on every broker
without a restart.  Notifications older than 15 minutes are deleted, as
Kafka's C{ZkNodeChangeNotificationListener} does (its
C{changeExpirationMs}).

CreateAcls and DeleteAcls write through L{ZkAclAuthorizer.create_acls} and
L{ZkAclAuthorizer.delete_acls}; the writing broker updates its own cache at
once as well.

Source: KIP-11; Kafka's C{kafka.security.authorizer.AclAuthorizer} and
C{kafka.zk.ZkAclStore}.
"""

from __future__ import annotations

from typing import Any, Iterable

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from ..security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclCache,
    InvalidAclError,
    ResourcePattern,
    parse_super_users,
)

__all__ = ["ZkAclAuthorizer", "authorizer_from_config", "ACL_CHANGE_EXPIRATION_MS"]

_log = Logger()

#: How long a change notification is kept (Kafka's C{changeExpirationMs}, 15 minutes).
ACL_CHANGE_EXPIRATION_MS = 15 * 60 * 1000


class ZkAclAuthorizer(AclCache):
    """
    L{AclCache} kept in step with ZooKeeper.

    @param registry: the broker's L{kafkatw.zookeeper.registry.Registry}.
    @param now_ms: the wall clock (ms since the epoch), to purge old notifications.
    """

    def __init__(self, registry: Any, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 now_ms: Any = None) -> None:
        super().__init__(super_users, allow_everyone_if_no_acl_found)
        self.registry = registry
        self.now_ms = now_ms
        #: change store -> the notifications already processed.
        self._seen: dict[str, set[str]] = {}
        #: change store -> notification -> its creation time (ms), until purged.
        self._ctimes: dict[str, dict[str, int]] = {}
        self._tail: Deferred | None = None

    async def start(self) -> None:
        """Load every ACL, then follow the change notifications."""
        for pattern, entries in (await self.registry.list_acls()).items():
            self.set(pattern, entries)
        _log.info("authorizer loaded {count} ACL resource patterns from ZooKeeper", count=len(self.acls))
        await self.registry.watch_acl_changes(self._changes)

    def _changes(self, store: str, children: list[str]) -> None:
        seen = self._seen.setdefault(store, set())
        new = [c for c in children if c not in seen]
        seen.intersection_update(children)
        seen.update(new)
        if new:
            self._chain(self._process(store, sorted(new)))

    def _chain(self, coroutine: Any) -> None:
        """Process notifications one batch after another, so an older read never overwrites a newer."""
        def run(_: Any) -> Deferred:
            d = Deferred.fromCoroutine(coroutine)
            return d.addErrback(lambda f: _log.failure("processing ACL change notifications failed", f))

        if self._tail is None:
            self._tail = run(None)
        else:
            self._tail = self._tail.addCallback(run)

    async def _process(self, store: str, children: list[str]) -> None:
        """Re-read the patterns C{children} name, then purge this store's expired notifications."""
        patterns: dict[ResourcePattern, None] = {}
        ctimes = self._ctimes.setdefault(store, {})
        for child in children:
            found = await self.registry.get_acl_change(store, child)
            if found is None:
                continue
            pattern, ctimes[child] = found
            patterns[pattern] = None
        for pattern in patterns:
            entries, _version = await self.registry.get_acls(pattern)
            self.set(pattern, entries)
            _log.info("ACLs of {pattern}: {count} entries", pattern=str(pattern), count=len(entries))
        if self.now_ms is not None:
            cutoff = self.now_ms() - ACL_CHANGE_EXPIRATION_MS
            for child, ctime_ms in sorted(ctimes.items()):
                if ctime_ms < cutoff:
                    del ctimes[child]
                    await self.registry.delete_acl_change(store, child)

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


def authorizer_from_config(config: Any, registry: Any, now_ms: Any = None) -> ZkAclAuthorizer | None:
    """
    The authorizer C{authorizer.class.name} selects (one of
    L{AUTHORIZER_CLASS_NAMES}, checked when the config is parsed), or C{None}
    when it is empty.
    """
    if not config["authorizer.class.name"]:
        return None
    return ZkAclAuthorizer(registry, parse_super_users(config["super.users"]),
                           config["allow.everyone.if.no.acl.found"], now_ms=now_ms)

