"""
Unit tests of Kafka's ACL model (kafkatw.security.acl), its ZooKeeper layout
(kafkatw.zookeeper.registry) and the broker's authorizer kept in step by the
change notifications (kafkatw.broker.authorizer), on the fake ZooKeeper.
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial import unittest

from kafkatw.broker.authorizer import ACL_CHANGE_EXPIRATION_MS, ZkAclAuthorizer, authorizer_from_config
from kafkatw.config import BrokerConfig
from kafkatw.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclCache,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourceType,
    decode_acls,
    encode_acls,
    operations_bit_field,
    parse_super_users,
)
from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient
from kafkatw.zookeeper.acl_store import ZkAclStore
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import acl_path, decode_acl_change, encode_acl_change

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
O = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def allow(principal: str, op: AclOperation, host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, ALLOW)


def deny(principal: str, op: AclOperation, host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, DENY)


class NamesTests(unittest.TestCase):
    def test_kafka_codes_and_names(self) -> None:
        self.assertEqual((int(T), int(G), int(C), int(ResourceType.TRANSACTIONAL_ID)), (2, 3, 4, 5))
        self.assertEqual((int(PatternType.ANY), int(PatternType.MATCH), int(LIT), int(PRE)), (1, 2, 3, 4))
        self.assertEqual((int(O.ALL), int(O.READ), int(O.CLUSTER_ACTION), int(O.IDEMPOTENT_WRITE)), (2, 3, 9, 12))
        self.assertEqual((int(DENY), int(ALLOW)), (2, 3))
        self.assertEqual(O.CLUSTER_ACTION.kafka_name, "ClusterAction")
        self.assertEqual(ResourceType.TRANSACTIONAL_ID.kafka_name, "TransactionalId")
        self.assertIs(O.parse("describeconfigs"), O.DESCRIBE_CONFIGS)
        self.assertIs(O.parse("IdempotentWrite"), O.IDEMPOTENT_WRITE)
        self.assertRaises(InvalidAclError, O.parse, "Fly")

    def test_super_users_are_semicolon_separated(self) -> None:
        self.assertEqual(parse_super_users("User:admin; User:broker;"), {"User:admin", "User:broker"})

    def test_znode_value_is_kafkas_json(self) -> None:
        data = encode_acls([allow("User:alice", O.READ)])
        self.assertEqual(json.loads(data), {"version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]})
        self.assertEqual(decode_acls(data), {allow("User:alice", O.READ)})
        self.assertEqual(decode_acls(b""), frozenset())

    @given(st.lists(st.tuples(st.sampled_from(["User:a", "User:*", "User:b c"]), st.sampled_from(["*", "10.0.0.1"]),
                              st.sampled_from([o for o in O if o.value >= 2]), st.sampled_from([ALLOW, DENY]))))
    def test_znode_round_trip(self, entries: list) -> None:
        entries = frozenset(AccessControlEntry(*e) for e in entries)
        self.assertEqual(decode_acls(encode_acls(entries)), entries)

    def test_paths_and_change_notifications_are_kafkas(self) -> None:
        self.assertEqual(acl_path(ResourcePattern(T, "orders")), "/kafka-acl/Topic/orders")
        self.assertEqual(acl_path(ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", PRE)),
                         "/kafka-acl-extended/prefixed/TransactionalId/tx")
        self.assertEqual(encode_acl_change(ResourcePattern(T, "orders")), ("/kafka-acl-changes", b"TOPIC:orders"))
        store, value = encode_acl_change(ResourcePattern(G, "app-", PRE))
        self.assertEqual(store, "/kafka-acl-extended-changes")
        self.assertEqual(json.loads(value), {"version": 1, "resourceType": "GROUP", "name": "app-",
                                             "patternType": "PREFIXED"})
        self.assertEqual(decode_acl_change(store, value), ResourcePattern(G, "app-", PRE))
        # Kafka 1.x wrote the resource type as Topic:
        self.assertEqual(decode_acl_change("/kafka-acl-changes", b"Topic:a:b"), ResourcePattern(T, "a:b"))


class DecisionTests(unittest.TestCase):
    def cache(self, acls: dict, **kwargs: object) -> AclCache:
        cache = AclCache(**kwargs)  # type: ignore[arg-type]
        for pattern, entries in acls.items():
            cache.set(pattern, entries)
        return cache

    def test_literal(self) -> None:
        cache = self.cache({ResourcePattern(T, "t"): [allow("User:alice", O.READ)]})
        self.assertTrue(cache.authorize("User:alice", "1.2.3.4", O.READ, T, "t"))
        self.assertFalse(cache.authorize("User:bob", "1.2.3.4", O.READ, T, "t"))
        self.assertFalse(cache.authorize("User:alice", "1.2.3.4", O.WRITE, T, "t"))
        self.assertFalse(cache.authorize("User:alice", "1.2.3.4", O.READ, T, "t2"))

    def test_prefixed(self) -> None:
        cache = self.cache({ResourcePattern(T, "orders-", PRE): [allow("User:alice", O.WRITE)]})
        self.assertTrue(cache.authorize("User:alice", "h", O.WRITE, T, "orders-eu"))
        self.assertTrue(cache.authorize("User:alice", "h", O.WRITE, T, "orders-"))
        self.assertFalse(cache.authorize("User:alice", "h", O.WRITE, T, "orders"))
        self.assertFalse(cache.authorize("User:alice", "h", O.WRITE, G, "orders-eu"))

    def test_wildcards(self) -> None:
        cache = self.cache({ResourcePattern(T, "*"): [allow("User:*", O.DESCRIBE, "10.0.0.1")]})
        self.assertTrue(cache.authorize("User:anyone", "10.0.0.1", O.DESCRIBE, T, "whatever"))
        self.assertFalse(cache.authorize("User:anyone", "10.0.0.2", O.DESCRIBE, T, "whatever"))

    def test_deny_wins(self) -> None:
        cache = self.cache({ResourcePattern(T, "*"): [allow("User:alice", O.ALL)],
                            ResourcePattern(T, "secret-", PRE): [deny("User:*", O.READ)]})
        self.assertTrue(cache.authorize("User:alice", "h", O.READ, T, "public"))
        self.assertFalse(cache.authorize("User:alice", "h", O.READ, T, "secret-x"))
        self.assertTrue(cache.authorize("User:alice", "h", O.WRITE, T, "secret-x"))

    def test_deny_all_denies_every_operation(self) -> None:
        cache = self.cache({ResourcePattern(T, "t"): [allow("User:alice", O.READ), deny("User:alice", O.ALL)]})
        self.assertFalse(cache.authorize("User:alice", "h", O.READ, T, "t"))

    def test_implied_operations(self) -> None:
        for op in (O.READ, O.WRITE, O.DELETE, O.ALTER):
            cache = self.cache({ResourcePattern(T, "t"): [allow("User:a", op)]})
            self.assertTrue(cache.authorize("User:a", "h", O.DESCRIBE, T, "t"), op)
        cache = self.cache({ResourcePattern(T, "t"): [allow("User:a", O.CREATE)]})
        self.assertFalse(cache.authorize("User:a", "h", O.DESCRIBE, T, "t"))
        cache = self.cache({ResourcePattern(T, "t"): [allow("User:a", O.ALTER_CONFIGS)]})
        self.assertTrue(cache.authorize("User:a", "h", O.DESCRIBE_CONFIGS, T, "t"))
        # a Deny of Read does not deny Describe (Kafka denies only the operation asked or All)
        cache = self.cache({ResourcePattern(T, "t"): [allow("User:a", O.DESCRIBE), deny("User:a", O.READ)]})
        self.assertTrue(cache.authorize("User:a", "h", O.DESCRIBE, T, "t"))

    def test_super_users_and_allow_everyone(self) -> None:
        cache = self.cache({ResourcePattern(T, "t"): [deny("User:admin", O.ALL)]}, super_users={"User:admin"})
        self.assertTrue(cache.authorize("User:admin", "h", O.DELETE, T, "t"))
        self.assertFalse(cache.authorize("User:bob", "h", O.READ, T, "no-acls"))
        cache = self.cache({ResourcePattern(T, "t"): [allow("User:alice", O.READ)]},
                           allow_everyone_if_no_acl_found=True)
        self.assertTrue(cache.authorize("User:bob", "h", O.READ, T, "no-acls"))
        self.assertFalse(cache.authorize("User:bob", "h", O.READ, T, "t"))

    def test_decisions_are_forgotten_when_acls_change(self) -> None:
        cache = self.cache({})
        self.assertFalse(cache.authorize("User:a", "h", O.READ, T, "t"))
        cache.set(ResourcePattern(T, "t"), [allow("User:a", O.READ)])
        self.assertTrue(cache.authorize("User:a", "h", O.READ, T, "t"))
        cache.set(ResourcePattern(T, "t"), [])
        self.assertFalse(cache.authorize("User:a", "h", O.READ, T, "t"))
        self.assertEqual(cache.acls, {})

    def test_authorized_operations(self) -> None:
        cache = self.cache({ResourcePattern(T, "t"): [allow("User:a", O.READ)]})
        self.assertEqual(cache.authorized_operations("User:a", "h", T, "t"),
                         operations_bit_field([O.READ, O.DESCRIBE]))

    def test_authorize_any_topic(self) -> None:
        cache = self.cache({ResourcePattern(T, "logs-", PRE): [allow("User:p", O.WRITE)]})
        self.assertTrue(cache.authorize_any("User:p", "h", O.WRITE, T))
        self.assertFalse(cache.authorize_any("User:q", "h", O.WRITE, T))
        cache.set(ResourcePattern(T, "logs", PRE), [deny("User:p", O.WRITE)])
        self.assertFalse(cache.authorize_any("User:p", "h", O.WRITE, T))

    @given(name=st.text(alphabet="ab-", min_size=1, max_size=6), prefix=st.text(alphabet="ab-", min_size=1,
                                                                               max_size=4))
    def test_prefixed_matches_exactly_the_names_it_starts(self, name: str, prefix: str) -> None:
        cache = self.cache({ResourcePattern(T, prefix, PRE): [allow("User:a", O.READ)]})
        self.assertEqual(cache.authorize("User:a", "h", O.READ, T, name), name.startswith(prefix))

    @given(st.lists(st.tuples(st.sampled_from(["x", "xy", "*"]), st.sampled_from([LIT, PRE]),
                              st.sampled_from([ALLOW, DENY]), st.sampled_from([O.READ, O.ALL, O.WRITE])),
                    max_size=6))
    def test_deny_always_wins(self, acls: list) -> None:
        cache = AclCache()
        by_pattern: dict = {}
        for name, pattern_type, permission, op in acls:
            by_pattern.setdefault(ResourcePattern(T, name, pattern_type), set()).add(
                AccessControlEntry("User:a", "*", op, permission))
        for pattern, entries in by_pattern.items():
            cache.set(pattern, entries)
        matching = [e for p, es in by_pattern.items() for e in es
                    if (p.pattern_type == LIT and p.name in ("xy", "*")) or (p.pattern_type == PRE and "xy".startswith(p.name))]
        denied = any(e.permission_type == DENY and e.operation in (O.READ, O.ALL) for e in matching)
        allowed = any(e.permission_type == ALLOW and e.operation in (O.READ, O.ALL) for e in matching)
        self.assertEqual(cache.authorize("User:a", "h", O.READ, T, "xy"), allowed and not denied)


class FilterTests(unittest.TestCase):
    def test_filters(self) -> None:
        lit = ResourcePattern(T, "orders")
        pre = ResourcePattern(T, "ord", PRE)
        wild = ResourcePattern(T, "*")
        self.assertTrue(AclBindingFilter().matches_pattern(lit))
        self.assertTrue(AclBindingFilter(T, "orders", PatternType.ANY).matches_pattern(lit))
        self.assertFalse(AclBindingFilter(T, "orders", PatternType.ANY).matches_pattern(pre))
        match = AclBindingFilter(T, "orders", PatternType.MATCH)
        self.assertEqual([match.matches_pattern(p) for p in (lit, pre, wild)], [True, True, True])
        self.assertFalse(AclBindingFilter(G, None, PatternType.ANY).matches_pattern(lit))
        self.assertFalse(AclBindingFilter(T, "orders", PRE).matches_pattern(lit))
        entry = allow("User:a", O.READ)
        self.assertTrue(AclBindingFilter(principal="User:a").matches_entry(entry))
        self.assertFalse(AclBindingFilter(permission_type=DENY).matches_entry(entry))
        self.assertRaises(InvalidAclError, AclBindingFilter(operation=O.UNKNOWN).validate)

    def test_binding_validation(self) -> None:
        good = AclBinding(ResourcePattern(T, "t"), allow("User:a", O.READ))
        good.validate()
        for bad in (AclBinding(ResourcePattern(C, "other"), allow("User:a", O.ALTER)),
                    AclBinding(ResourcePattern(T, "t", PatternType.MATCH), allow("User:a", O.READ)),
                    AclBinding(ResourcePattern(ResourceType.ANY, "t"), allow("User:a", O.READ)),
                    AclBinding(ResourcePattern(G, "g"), allow("User:a", O.WRITE)),
                    AclBinding(ResourcePattern(T, "t"), allow("alice", O.READ)),
                    AclBinding(ResourcePattern(T, "t"), AccessControlEntry("User:a", "*", O.READ,
                                                                           AclPermissionType.ANY))):
            self.assertRaises(InvalidAclError, bad.validate)


class ZooKeeperAuthorizerTests(unittest.TestCase):
    """Two brokers' authorizers on one (fake) ZooKeeper."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_700_000_000)
        self.server = FakeZooKeeper(clock=None)
        self.server._now_ms = lambda: int(self.clock.seconds() * 1000)  # type: ignore[method-assign]
        self.brokers = []
        for _ in range(2):
            zk = FakeZooKeeperClient(self.server)
            self.successResultOf(zk.start())
            self.brokers.append(ZkAclAuthorizer(Registry(zk), now_ms=lambda: int(self.clock.seconds() * 1000)))
        self.zk = zk

    def start(self, authorizer: ZkAclAuthorizer) -> None:
        self.successResultOf(defer.Deferred.fromCoroutine(authorizer.start()))

    def test_a_tool_store_writes_what_the_brokers_follow(self) -> None:
        """L{ZkAclStore} (C{kafkatw acls --authorizer-properties}) writes, loads and deletes without a watch."""
        for a in self.brokers:
            self.start(a)
        store = ZkAclStore(Registry(self.zk))
        binding = AclBinding(ResourcePattern(T, "t"), allow("User:a", O.READ))
        self.assertEqual(self.successResultOf(defer.Deferred.fromCoroutine(store.create_acls([binding]))), [None])
        for a in self.brokers:
            self.assertTrue(a.authorize("User:a", "h", O.READ, T, "t"))
        again = ZkAclStore(Registry(self.zk))
        self.successResultOf(defer.Deferred.fromCoroutine(again.load()))
        self.assertEqual(again.describe_acls(AclBindingFilter()), {binding.pattern: [binding.entry]})
        [deleted] = self.successResultOf(defer.Deferred.fromCoroutine(again.delete_acls([AclBindingFilter()])))
        self.assertEqual(deleted, [binding])
        for a in self.brokers:
            self.assertFalse(a.authorize("User:a", "h", O.READ, T, "t"))

    def test_create_is_seen_by_every_broker(self) -> None:
        one, two = self.brokers
        for a in self.brokers:
            self.start(a)
        binding = AclBinding(ResourcePattern(T, "t"), allow("User:a", O.READ))
        prefixed = AclBinding(ResourcePattern(T, "p-", PRE), allow("User:a", O.WRITE))
        self.assertEqual(self.successResultOf(defer.Deferred.fromCoroutine(one.create_acls([binding, prefixed]))),
                         [None, None])
        for a in self.brokers:
            self.assertTrue(a.authorize("User:a", "h", O.READ, T, "t"))
            self.assertTrue(a.authorize("User:a", "h", O.WRITE, T, "p-1"))
        data, _ = self.successResultOf(self.zk.get("/kafka-acl/Topic/t"))
        self.assertEqual(decode_acls(data), {binding.entry})
        self.successResultOf(self.zk.get("/kafka-acl-extended/prefixed/Topic/p-"))
        self.assertEqual(self.successResultOf(self.zk.get_children("/kafka-acl-changes")), ["acl_changes_0000000000"])
        data, _ = self.successResultOf(self.zk.get("/kafka-acl-changes/acl_changes_0000000000"))
        self.assertEqual(data, b"TOPIC:t")

        deleted = self.successResultOf(defer.Deferred.fromCoroutine(
            two.delete_acls([AclBindingFilter(T, "t", LIT)])))
        self.assertEqual(deleted, [[binding]])
        for a in self.brokers:
            self.assertFalse(a.authorize("User:a", "h", O.READ, T, "t"))
        self.assertIsNone(self.successResultOf(self.zk.exists("/kafka-acl/Topic/t")))

    def test_start_loads_existing_acls(self) -> None:
        registry = self.brokers[0].registry
        self.successResultOf(registry.update_acls(ResourcePattern(G, "g"), lambda cur: cur | {allow("User:c", O.READ)}))
        second = self.brokers[1]
        self.start(second)
        self.assertTrue(second.authorize("User:c", "h", O.READ, G, "g"))
        self.assertEqual(second.describe_acls(AclBindingFilter()), {ResourcePattern(G, "g"): [allow("User:c", O.READ)]})

    def test_concurrent_writers_do_not_lose_updates(self) -> None:
        registry = self.brokers[0].registry
        pattern = ResourcePattern(T, "t")
        # A writer that read version 0 loses the race and re-reads.
        calls = []

        def racing(current: frozenset) -> frozenset:
            if not calls:
                calls.append(1)
                self.successResultOf(registry.update_acls(pattern, lambda c: c | {allow("User:x", O.READ)}))
            return current | {allow("User:y", O.READ)}

        self.successResultOf(registry.update_acls(pattern, lambda c: c | {allow("User:w", O.READ)}))
        self.successResultOf(registry.update_acls(pattern, racing))
        entries, _ = self.successResultOf(registry.get_acls(pattern))
        self.assertEqual({e.principal for e in entries}, {"User:w", "User:x", "User:y"})

    def test_old_notifications_are_purged(self) -> None:
        one = self.brokers[0]
        self.start(one)
        binding = AclBinding(ResourcePattern(T, "t"), allow("User:a", O.READ))
        self.successResultOf(defer.Deferred.fromCoroutine(one.create_acls([binding])))
        self.clock.advance(ACL_CHANGE_EXPIRATION_MS / 1000 + 1)
        self.successResultOf(defer.Deferred.fromCoroutine(one.create_acls([
            AclBinding(ResourcePattern(T, "u"), allow("User:a", O.READ))])))
        children = self.successResultOf(self.zk.get_children("/kafka-acl-changes"))
        self.assertEqual(children, ["acl_changes_0000000001"])

    def test_invalid_bindings_are_refused(self) -> None:
        one = self.brokers[0]
        self.start(one)
        results = self.successResultOf(defer.Deferred.fromCoroutine(one.create_acls([
            AclBinding(ResourcePattern(C, "not-the-cluster"), allow("User:a", O.ALTER))])))
        self.assertIsInstance(results[0], InvalidAclError)

    def test_config(self) -> None:
        self.assertIsNone(authorizer_from_config(BrokerConfig(), None))
        for name in ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                     "kafkatw.security.AclAuthorizer"):
            config = BrokerConfig({"authorizer.class.name": name, "super.users": "User:admin;User:broker",
                                   "allow.everyone.if.no.acl.found": "true"})
            authorizer = authorizer_from_config(config, None)
            self.assertEqual(authorizer.super_users, {"User:admin", "User:broker"})
            self.assertTrue(authorizer.allow_everyone_if_no_acl_found)
        self.assertRaises(ValueError, BrokerConfig, {"authorizer.class.name": "com.example.Other"})
