"""
Config change notifications: how every broker learns of a changed entity
config, as Kafka's ZooKeeper mode does it (C{ZkNodeChangeNotificationListener}
and C{ConfigChangeListener} under C{DynamicConfigManager})::

    /config/topics/<topic>             {"version":1,"config":{"retention.ms":"1000"}}
    /config/brokers/<id>               per-broker dynamic configs
    /config/brokers/<default>          cluster-wide dynamic broker defaults
    /config/users/<user>, /config/clients/<client-id>
    /config/changes/config_change_0000000042
                                       {"version":2,"entity_path":"topics/<topic>"}

A writer replaces the entity's znode, then creates a persistent sequential
notification naming it (L{kafkatw.zookeeper.registry.Registry.change_entity_config}).
Each broker keeps a child watch on C{/config/changes}; on every change it
handles, in sequence order, the notifications newer than the last one it
handled: it re-reads the named entity's znode and hands the whole config to
the callbacks registered for that entity type (L{ConfigChangeListener.on_entity_change}).
Notifications older than 15 minutes (Kafka's C{changeExpirationMs}) are
deleted by whichever broker handles a change after that.

At start every notification present is handled once (re-reading an entity is
harmless), as Kafka's listener does on C{init}.

The broker that wrote a config (AlterConfigs, IncrementalAlterConfigs) does
not wait for the watch to tell it of its own notification: once the write
succeeded it reads C{/config/changes} itself and handles every notification
up to its own before answering (L{ConfigChangeListener.catch_up}), so that
what it answers next (DescribeConfigs) and what it does (its logs' configs)
already follow the write (Kafka's ZooKeeper mode answers a topic's
DescribeConfigs from its znode, so from what AlterConfigs wrote).
ZooKeeper answers one session's requests in order, so that listing holds the
notification just written.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from .bridge import NoNodeError, ZooKeeperError
from .registry import CONFIG_CHANGE_PREFIX, CONFIG_CHANGES_PATH

__all__ = ["ConfigChangeListener", "CHANGE_EXPIRATION_MS", "parse_entity_path"]

_log = Logger()

#: Kafka's ZkNodeChangeNotificationListener.changeExpirationMs: 15 minutes.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000


def parse_entity_path(data: bytes) -> tuple[str, str]:
    """
    C{(entity_type, entity_name)} of a notification: version 2's
    C{entity_path} (C{"topics/t"} -> C{("topics", "t")};
    C{"users/u/clients/c"} -> C{("users", "u/clients/c")}), or version 1's
    C{entity_type} and C{entity_name} (older Kafka tools), as Kafka's
    C{ConfigChangedNotificationHandler} reads both.

    @raise ValueError: neither.
    """
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("version") == 2 and "/" in str(body.get("entity_path", "")):
        entity_type, _, name = body["entity_path"].partition("/")
        return entity_type, name
    if isinstance(body, dict) and body.get("version") == 1 and body.get("entity_type") in ("topics", "clients") \
            and body.get("entity_name"):
        return body["entity_type"], str(body["entity_name"])
    raise ValueError(f"not a config change notification: {data!r}")


class ConfigChangeListener:
    """
    One broker's follower of C{/config/changes}.

    @param registry: a L{kafkatw.zookeeper.registry.Registry}.
    @param reactor: C{IReactorTime}.
    @param now_ms: the wall clock (ms since the epoch), compared with the
        znodes' ctime (the broker's C{milliseconds}); by default the
        reactor's C{seconds()} (a test's C{Clock}, shared with its ZooKeeper model).
    @param expiration_ms: age after which a handled notification is deleted.
    @ivar last_change: the sequence number of the last notification handled (-1: none).
    """

    def __init__(self, registry: Any, reactor: Any, expiration_ms: int = CHANGE_EXPIRATION_MS,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.registry = registry
        self.reactor = reactor
        self.now_ms = now_ms or (lambda: int(reactor.seconds() * 1000))
        self.expiration_ms = expiration_ms
        self.last_change = -1
        self._callbacks: dict[str, list[Callable[[str, dict[str, str]], object]]] = {}
        self._pending: list[str] | None = None
        self._running: Deferred | None = None
        self._watch: Any = None

    def on_entity_change(self, entity_type: str, callback: Callable[[str, dict[str, str]], object]) -> None:
        """
        Call C{callback(entity_name, config)} with the entity's whole config
        (C{{key: value}} strings, {} once deleted) after each notification
        about an entity of C{entity_type} (C{topics}, C{brokers}, C{users},
        C{clients}).  An exception in a callback is logged and does not stop
        the others.
        """
        self._callbacks.setdefault(entity_type, []).append(callback)

    def catch_up(self) -> Deferred:
        """
        Handle every notification in C{/config/changes} now, without waiting
        for the watch: called by the broker after it wrote a config, before
        it answers the alter.  A notification already handled is not handled
        again (L{last_change}); the watch's later call finds nothing new.

        @return: a Deferred that fires with C{None} once they are handled;
            it never fails (a ZooKeeper error is logged, and the watch
            handles the notifications later).
        """
        return Deferred.fromCoroutine(self._catch_up())

    async def _catch_up(self) -> None:
        try:
            children = await self.registry.client.get_children(CONFIG_CHANGES_PATH)
        except ZooKeeperError as e:
            _log.warn("config change notifications not read after a config write ({error}); "
                      "the watch handles them", error=e)
            return
        self._children_changed(children)
        await self.idle()

    def start(self) -> Deferred:
        """
        Watch C{/config/changes}; fires once the notifications present are
        queued for handling (see L{idle}).
        """
        d = self.registry.client.watch_children(CONFIG_CHANGES_PATH, self._children_changed)

        def watching(watch: Any) -> None:
            self._watch = watch

        return d.addCallback(watching)

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def idle(self) -> Deferred:
        """A Deferred that fires once the notifications seen so far are handled."""
        if self._running is None:
            return Deferred.fromCoroutine(_nothing())
        d: Deferred = Deferred()
        self._running.addBoth(lambda result: (d.callback(None), result)[1])
        return d

    def _children_changed(self, children: list[str]) -> None:
        self._pending = list(children)
        if self._running is None:
            running = Deferred.fromCoroutine(self._handle_pending())
            # (it may have finished already: the fake ZooKeeper answers at once)
            self._running = None if running.called else running

    async def _handle_pending(self) -> None:
        try:
            while self._pending is not None:
                children, self._pending = self._pending, None
                try:
                    await self._handle(children)
                except ZooKeeperError as e:
                    _log.warn("config change notifications not handled ({error}); retried at the next change",
                              error=e)
                except Exception:
                    _log.failure("handling config change notifications failed")
        finally:
            self._running = None

    async def _handle(self, children: list[str]) -> None:
        client = self.registry.client
        changes = sorted((int(name[len(CONFIG_CHANGE_PREFIX):]), name) for name in children
                         if name.startswith(CONFIG_CHANGE_PREFIX) and name[len(CONFIG_CHANGE_PREFIX):].isdigit())
        expired_before = self.now_ms() - self.expiration_ms
        for sequence, name in changes:
            path = f"{CONFIG_CHANGES_PATH}/{name}"
            if sequence > self.last_change:
                try:
                    data, stat = await client.get(path)
                except NoNodeError:
                    continue  # purged meanwhile by another broker
                try:
                    entity_type, entity_name = parse_entity_path(data)
                except ValueError as e:
                    _log.warn("ignoring config change notification {name}: {error}", name=name, error=e)
                else:
                    config = await self.registry.get_entity_config(entity_type, entity_name)
                    self._notify(entity_type, entity_name, config)
                self.last_change = sequence
            else:
                stat = await client.exists(path)
            if stat is not None and stat.ctime < expired_before:
                try:
                    await client.delete(path)
                except NoNodeError:
                    pass

    def _notify(self, entity_type: str, entity_name: str, config: dict[str, str]) -> None:
        for callback in self._callbacks.get(entity_type, []):
            try:
                callback(entity_name, config)
            except Exception:
                _log.failure("applying the config of {entity_type}/{entity_name} failed",
                             entity_type=entity_type, entity_name=entity_name)


async def _nothing() -> None:
    return None
