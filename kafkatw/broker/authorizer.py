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

CreateAcls and DeleteAcls write through
L{kafkatw.zookeeper.acl_store.ZkAclStore.create_acls} and
L{kafkatw.zookeeper.acl_store.ZkAclStore.delete_acls}; the writing broker
updates its own cache at once as well.

Source: KIP-11; Kafka's C{kafka.security.authorizer.AclAuthorizer} and
C{kafka.zk.ZkAclStore}.
"""

from __future__ import annotations

from typing import Any, Iterable

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from ..security.acl import ResourcePattern, parse_super_users
from ..zookeeper.acl_store import ZkAclStore

__all__ = ["ZkAclAuthorizer", "authorizer_from_config", "ACL_CHANGE_EXPIRATION_MS"]

_log = Logger()

#: How long a change notification is kept (Kafka's C{changeExpirationMs}, 15 minutes).
ACL_CHANGE_EXPIRATION_MS = 15 * 60 * 1000


class ZkAclAuthorizer(ZkAclStore):
    """
    L{ZkAclStore} kept in step with ZooKeeper: the ACLs other brokers (or
    tools) write take effect here through their change notifications.

    @param registry: the broker's L{kafkatw.zookeeper.registry.Registry}.
    @param now_ms: the wall clock (ms since the epoch), to purge old notifications.
    """

    def __init__(self, registry: Any, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 now_ms: Any = None) -> None:
        super().__init__(registry, super_users, allow_everyone_if_no_acl_found)
        self.now_ms = now_ms
        #: change store -> the notifications already processed.
        self._seen: dict[str, set[str]] = {}
        #: change store -> notification -> its creation time (ms), until purged.
        self._ctimes: dict[str, dict[str, int]] = {}
        self._tail: Deferred | None = None

    async def start(self) -> None:
        """Load every ACL, then follow the change notifications."""
        await self.load()
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

