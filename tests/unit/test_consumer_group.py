"""
Unit tests of KIP-848 consumer groups on the broker
(L{kafkatw.broker.consumer_group}, L{kafkatw.broker.current_assignment_builder},
L{kafkatw.broker.consumer_group_apis}):

  - a state machine of members heartbeating in any order, revoking late or at
    once, joining, leaving, being fenced, while topics grow: no partition is
    ever owned by two members at once as their heartbeats tell it, and once
    every member heartbeats promptly each converges to its target and the
    group is Stable with every partition owned once;
  - a group whose coordinator moves away is forgotten; its members rejoin;
    an answer handing out partitions waits for ZooKeeper to confirm the
    coordinator epoch (a deposed coordinator answers NOT_COORDINATOR);
  - ConsumerGroupHeartbeat and ConsumerGroupDescribe through a broker's real
    L{KafkaApis} on a L{MemoryReactorClock}: request validation, fencing,
    static members, regex subscriptions, session and rebalance timeouts,
    OffsetCommit v9 member epochs, OffsetDelete of subscribed topics,
    DeleteGroups, an empty group changing protocol, a classic JoinGroup
    refused while the consumer group has members, ListGroups;
  - group configs (IncrementalAlterConfigs, DescribeConfigs, resource type
    GROUP) and their use by the coordinator;
  - OffsetFetch v8 (several groups) and v9 (member epochs).
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.broker.consumer_group import ConsumerGroupCoordinator, HeartbeatRequest
from kafkatw.broker.group_coordinator import Fence, GroupCoordinator, OffsetStore, coordinator_for
from kafkatw.config import BrokerConfig
from kafkatw.errors import ErrorCode
from kafkatw.zookeeper.registry import FencedError

from .test_broker import BrokerHarness

E = ErrorCode
MACHINE_SETTINGS = settings(max_examples=100, stateful_step_count=50, deadline=None,
                            suppress_health_check=[HealthCheck.too_slow],
                            phases=[phase for phase in Phase if phase is not Phase.explain])
TOPIC_A, TOPIC_B = uuid.UUID(int=1), uuid.UUID(int=2)


def coordinators(clock: Any, topics: dict[str, tuple[uuid.UUID, int]], **config: Any
                 ) -> tuple[GroupCoordinator, ConsumerGroupCoordinator]:
    broker_config = BrokerConfig({"broker.id": 0, **config})
    classic = GroupCoordinator(0, broker_config, clock, lambda: [0], offsets=None)
    return classic, ConsumerGroupCoordinator(classic, broker_config, clock, lambda: topics)


class Client:
    """What a member's consumer knows: its epoch, the partitions it owns and the last assignment it got."""

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.epoch = 0
        self.owned: set[tuple[uuid.UUID, int]] = set()
        self.latest: set[tuple[uuid.UUID, int]] | None = None

    def owned_field(self) -> tuple:
        by_topic: dict[uuid.UUID, list[int]] = {}
        for t, p in sorted(self.owned):
            by_topic.setdefault(t, []).append(p)
        return tuple((t, tuple(ps)) for t, ps in by_topic.items())


class ReconciliationMachine(RuleBasedStateMachine):
    """
    Members of one group subscribed to one or two topics.  A member applies
    the assignment it was sent either at once or at a later heartbeat
    (C{apply}); until then it reports what it owned.  What a member owns is
    what its consumer would read: the invariant is that no two own one
    partition.
    """

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.topics = {"a": (TOPIC_A, 3), "b": (TOPIC_B, 2)}
        self.classic, self.coordinator = coordinators(self.clock, self.topics)
        self.clients: dict[str, Client] = {}
        self.next_id = 0

    def heartbeat(self, client: Client, apply: bool, full: bool = False) -> None:
        if apply and client.latest is not None:
            client.owned = set(client.latest)
        joining = client.epoch == 0
        answer = self.coordinator.heartbeat(HeartbeatRequest(
            "g", client.member_id, client.epoch,
            rebalance_timeout_ms=60000 if joining or full else -1,
            subscribed_topic_names=("a", "b") if joining or full else None,
            owned=() if joining else client.owned_field()))
        if answer["error_code"]:
            assert answer["error_code"] in (E.fenced_member_epoch, E.unknown_member_id), answer
            client.owned, client.latest, client.epoch = set(), None, 0  # gives everything up and rejoins
            return
        client.epoch = answer["member_epoch"]
        if answer["assignment"] is not None:
            client.latest = {(tp["topic_id"], p) for tp in answer["assignment"]["topic_partitions"]
                             for p in tp["partitions"]}
            # a consumer revokes at once what it lost; it only adds once it applies the assignment
            client.owned &= client.latest
            if apply:
                client.owned = set(client.latest)

    @rule()
    def join(self) -> None:
        self.next_id += 1
        client = self.clients[f"m{self.next_id}"] = Client(f"m{self.next_id}")
        self.heartbeat(client, apply=True)

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), apply=st.booleans(), full=st.booleans())
    def heartbeat_one(self, data: st.DataObject, apply: bool, full: bool) -> None:
        client = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        self.heartbeat(client, apply, full)

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        client = self.clients.pop(data.draw(st.sampled_from(sorted(self.clients))))
        answer = self.coordinator.heartbeat(HeartbeatRequest("g", client.member_id, -1))
        assert answer["error_code"] in (0, E.unknown_member_id), answer

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def stale_epoch(self, data: st.DataObject) -> None:
        """A heartbeat from the future is fenced; the member rejoins from nothing."""
        client = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        if client.epoch > 0:
            client.epoch += 5
            self.heartbeat(client, apply=False)
            assert client.epoch == 0 and not client.owned

    @rule(topic=st.sampled_from(["a", "b"]))
    def grow(self, topic: str) -> None:
        topic_id, count = self.topics[topic]
        self.topics[topic] = (topic_id, min(count + 1, 8))

    @invariant()
    def no_partition_owned_twice(self) -> None:
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for client in self.clients.values():
            for tp in client.owned:
                assert tp not in seen, f"{tp} owned by {seen.get(tp)} and {client.member_id}"
                seen[tp] = client.member_id

    def teardown(self) -> None:
        # every member heartbeats promptly: each converges to its target
        for _ in range(2 * len(self.clients) + 4):
            for client in list(self.clients.values()):
                self.heartbeat(client, apply=True)
            self.no_partition_owned_twice()
        group = self.coordinator.groups.get("g")
        if not self.clients or group is None:
            return
        assert group.state.value == "Stable", group.state
        wanted = {(t, p) for t, count in self.topics.values() for p in range(count)}
        owned = [tp for c in self.clients.values() for tp in c.owned]
        assert sorted(owned) == sorted(wanted), (owned, wanted)
        for client in self.clients.values():
            target = {(t, p) for t, ps in group.target[client.member_id].items() for p in ps}
            assert client.owned == target
            assert client.epoch == group.assignment_epoch


class ReconciliationTests(SynchronousTestCase):
    def test_no_partition_owned_twice_and_convergence(self) -> None:
        run_state_machine_as_test(ReconciliationMachine, settings=MACHINE_SETTINGS)

    test_no_partition_owned_twice_and_convergence.is_hypothesis_test = True  # type: ignore[attr-defined]


class PlacementTests(SynchronousTestCase):
    def test_a_group_that_moves_away_is_forgotten(self) -> None:
        """
        Another broker takes the group over: this one answers NOT_COORDINATOR and
        forgets it; when the group comes back, its members are unknown and rejoin.
        """
        clock, live = Clock(), [0]
        broker_config = BrokerConfig({"broker.id": 0})
        classic = GroupCoordinator(0, broker_config, clock, lambda: list(live), offsets=None)
        coordinator = ConsumerGroupCoordinator(classic, broker_config, clock, lambda: {"a": (TOPIC_A, 2)})
        group = next(g for g in (f"g{i}" for i in range(1000)) if coordinator_for(g, [0, 1]) == 1)
        join = HeartbeatRequest(group, "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("a",), owned=())
        self.assertEqual(coordinator.heartbeat(join)["member_epoch"], 1)
        live.append(1)
        classic.brokers_changed()
        self.assertNotIn(group, coordinator.groups)
        again = HeartbeatRequest(group, "m", 1, owned=((TOPIC_A, (0, 1)),))
        self.assertEqual(coordinator.heartbeat(again)["error_code"], E.not_coordinator)
        live.remove(1)
        classic.brokers_changed()
        self.assertEqual(coordinator.heartbeat(again)["error_code"], E.unknown_member_id)
        self.assertEqual(coordinator.heartbeat(join)["error_code"], E.none)


class FencedPlacement:
    """A placement where this broker holds every group under one coordinator epoch (a ZooKeeper fence)."""

    fenced = Fence("/group_coordinator/epochs/0", 3)

    def coordinator(self, group_id: str) -> int:
        return 0

    def fence(self, group_id: str) -> Fence:
        return self.fenced

    acting = fence


class ConfirmingRegistry:
    """What OffsetStore.confirm asks of the registry: whether the fence still holds (C{holds})."""

    def __init__(self) -> None:
        self.holds = True
        self.checks = 0

    def set_committed_offsets(self, offsets: dict, path: str, version: int) -> Any:
        self.checks += 1
        return defer.succeed(None) if self.holds else defer.fail(FencedError(path))


class FencedHeartbeatTests(SynchronousTestCase):
    def test_partitions_are_handed_out_only_under_a_confirmed_epoch(self) -> None:
        """
        An answer granting partitions waits for ZooKeeper to confirm the coordinator epoch;
        a deposed coordinator answers NOT_COORDINATOR instead.
        """
        clock = Clock()
        registry = ConfirmingRegistry()
        broker_config = BrokerConfig({"broker.id": 0})
        classic = GroupCoordinator(0, broker_config, clock, lambda: [0], OffsetStore(registry, clock))
        classic.placement = FencedPlacement()
        coordinator = ConsumerGroupCoordinator(classic, broker_config, clock, lambda: {"a": (TOPIC_A, 2)})
        join = HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("a",), owned=())
        d = coordinator.confirmed_heartbeat(join)
        self.assertNoResult(d)
        clock.advance(0.01)
        self.assertEqual(self.successResultOf(d)["member_epoch"], 1)
        self.assertEqual(registry.checks, 1)
        # nothing new granted: answered from memory
        again = HeartbeatRequest("g", "m", 1, owned=((TOPIC_A, (0, 1)),))
        self.assertEqual(self.successResultOf(coordinator.confirmed_heartbeat(again))["error_code"], 0)
        self.assertEqual(registry.checks, 1)
        # deposed: a new member's grant is refused
        registry.holds = False
        coordinator.heartbeat(HeartbeatRequest("g", "m", -1))
        d = coordinator.confirmed_heartbeat(HeartbeatRequest("g", "n", 0, rebalance_timeout_ms=1000,
                                                             subscribed_topic_names=("a",), owned=()))
        clock.advance(0.01)
        self.assertEqual(self.successResultOf(d)["error_code"], E.not_coordinator)


class ConsumerGroupApiTests(SynchronousTestCase):
    """Through a broker's real KafkaApis (ConsumerGroupHeartbeat v1, ConsumerGroupDescribe v1)."""

    def setUp(self) -> None:
        self.harness = BrokerHarness(self, **{"group.consumer.session.timeout.ms": 45000})
        self.harness.create_topic("t", 4)
        self.harness.create_topic("other", 2)
        self.harness.create_topic("logs-1", 1)
        self.harness.create_topic("logs-2", 1)
        self.topic_id = self.harness.metadata.topics["t"].topic_id
        brokers = list(self.harness.metadata.brokers) or [0]
        ours = (g for g in (f"g{i}" for i in range(1000)) if coordinator_for(g, brokers) == 0)
        self.group, self.other_group = next(ours), next(ours)

    def heartbeat(self, member: str, epoch: int, owned: list[int] | None = None, join: bool = False,
                  **fields: Any) -> Any:
        body: dict[str, Any] = {"group_id": self.group, "member_id": member, "member_epoch": epoch,
                                "rebalance_timeout": 30000 if join else -1,
                                "subscribed_topic_names": ["t"] if join else None,
                                "topic_partitions": None if owned is None else
                                ([{"topic_id": self.topic_id, "partitions": owned}] if owned else [])}
        body.update(fields)
        return self.harness.call(68, 1, body)

    @staticmethod
    def partitions(response: Any) -> list[int] | None:
        if response.assignment is None:
            return None
        return sorted(p for tp in response.assignment.topic_partitions for p in tp.partitions)

    def test_join_split_and_incremental_handover(self) -> None:
        a = self.heartbeat("a", 0, [], join=True)
        self.assertEqual((a.error_code, a.member_epoch, self.partitions(a)), (E.none, 1, [0, 1, 2, 3]))
        self.assertEqual(a.heartbeat_interval.total_seconds(), 5.0)
        b = self.heartbeat("b", 0, [], join=True)
        # b is at the new epoch but its partitions are still a's: none yet
        self.assertEqual((b.member_epoch, self.partitions(b)), (2, []))
        a = self.heartbeat("a", 1, [0, 1, 2, 3])
        self.assertEqual((a.member_epoch, len(self.partitions(a))), (1, 2))  # revoke two, stay at epoch 1
        kept = self.partitions(a)
        self.assertEqual(self.partitions(self.heartbeat("b", 2, [])), None)  # nothing released yet
        a = self.heartbeat("a", 1, kept)
        self.assertEqual(a.member_epoch, 2)
        b = self.heartbeat("b", 2, [])
        self.assertEqual(sorted(self.partitions(b) + kept), [0, 1, 2, 3])
        described = self.harness.call(69, 1, {"group_ids": [self.group], "include_authorized_operations": False})
        group = described.groups[0]
        self.assertEqual((group.error_code, group.group_state, group.group_epoch, group.assignor_name),
                         (E.none, "Stable", 2, "uniform"))
        self.assertEqual(sorted(m.member_id for m in group.members), ["a", "b"])
        self.assertEqual({m.member_type for m in group.members}, {1})
        self.assertEqual(group.members[0].assignment.topic_partitions[0].topic_name, "t")

    def test_invalid_requests(self) -> None:
        self.assertEqual(self.heartbeat("", 0, [], join=True).error_code, E.invalid_request)
        self.assertEqual(self.heartbeat("a", 0, []).error_code, E.invalid_request)  # no rebalance timeout
        self.assertEqual(self.heartbeat("a", 0, [1], join=True).error_code, E.invalid_request)  # owns at join
        self.assertEqual(self.heartbeat("a", -2, None).error_code, E.invalid_request)  # no instance id
        self.assertEqual(self.heartbeat("a", 0, [], join=True, server_assignor="sticky").error_code,
                         E.unsupported_assignor)
        self.assertEqual(self.heartbeat("a", 0, [], join=True, subscribed_topic_names=None,
                                        subscribed_topic_regex="(").error_code, E.invalid_regular_expression)
        self.assertEqual(self.heartbeat("a", 3, None).error_code, E.unknown_member_id)

    def test_fenced_member_epoch(self) -> None:
        self.heartbeat("a", 0, [], join=True)
        self.assertEqual(self.heartbeat("a", 5, None).error_code, E.fenced_member_epoch)
        self.heartbeat("b", 0, [], join=True)  # epoch 2
        a = self.heartbeat("a", 1, [0, 1, 2, 3])
        self.heartbeat("a", 1, self.partitions(a))  # a reaches epoch 2
        kept = self.partitions(a)
        # the answer with epoch 2 was lost: epoch 1 with a subset of its partitions is accepted
        self.assertEqual(self.heartbeat("a", 1, kept).member_epoch, 2)
        self.assertEqual(self.heartbeat("a", 1, [0, 1, 2, 3]).error_code, E.fenced_member_epoch)
        # a rejoins at epoch 0 after being fenced
        self.assertEqual(self.heartbeat("a", 0, [], join=True).error_code, E.none)

    def test_leave_gives_partitions_to_the_others(self) -> None:
        self.heartbeat("a", 0, [], join=True)
        self.heartbeat("b", 0, [], join=True)
        a = self.heartbeat("a", 1, [0, 1, 2, 3])
        a = self.heartbeat("a", 1, self.partitions(a))
        self.heartbeat("b", 2, [])
        left = self.heartbeat("a", -1, None)
        self.assertEqual((left.error_code, left.member_epoch), (E.none, -1))
        b = self.heartbeat("b", 2, [])
        self.assertEqual((b.member_epoch, self.partitions(b)), (3, [0, 1, 2, 3]))

    def test_session_timeout_removes_a_member(self) -> None:
        self.heartbeat("a", 0, [], join=True)
        self.heartbeat("b", 0, [], join=True)
        clock = self.harness.clock
        epoch, owned = 2, []
        for _ in range(10):
            clock.advance(5)
            b = self.heartbeat("b", epoch, owned)
            epoch, owned = b.member_epoch, self.partitions(b) if b.assignment is not None else owned
        # a sent nothing for 45 s: gone; b got everything
        self.assertEqual(self.heartbeat("a", 1, None).error_code, E.unknown_member_id)
        self.assertEqual((epoch, owned), (3, [0, 1, 2, 3]))

    def test_rebalance_timeout_fences_a_member_that_does_not_revoke(self) -> None:
        self.heartbeat("a", 0, [], join=True)
        self.heartbeat("b", 0, [], join=True, rebalance_timeout=20000)
        self.heartbeat("a", 1, [0, 1, 2, 3])  # a must revoke two partitions within 30 s
        for _ in range(7):
            self.harness.clock.advance(5)
            self.heartbeat("a", 1, [0, 1, 2, 3])  # still owns them
            self.heartbeat("b", 2, [])
        self.assertEqual(self.heartbeat("a", 1, [0, 1, 2, 3]).error_code, E.unknown_member_id)

    def test_static_member_leaves_and_rejoins_with_its_partitions(self) -> None:
        a = self.heartbeat("a", 0, [], join=True, instance_id="i-a")
        self.assertEqual(self.partitions(a), [0, 1, 2, 3])
        # another process with the same instance id while a is there
        self.assertEqual(self.heartbeat("a2", 0, [], join=True, instance_id="i-a").error_code,
                         E.unreleased_instance_id)
        left = self.heartbeat("a", -2, None, instance_id="i-a")
        self.assertEqual((left.error_code, left.member_epoch), (E.none, -2))
        back = self.heartbeat("a2", 0, [], join=True, instance_id="i-a")
        self.assertEqual((back.error_code, back.member_epoch, self.partitions(back)), (E.none, 1, [0, 1, 2, 3]))
        self.assertEqual(self.heartbeat("a", 1, None).error_code, E.unknown_member_id)

    def test_regex_subscription(self) -> None:
        body = {"subscribed_topic_names": None, "subscribed_topic_regex": "logs-.*"}
        r = self.heartbeat("a", 0, [], join=True, **body)
        names = {self.harness.metadata.topics[n].topic_id: n for n in self.harness.metadata.topics}
        self.assertEqual(sorted(names[tp.topic_id] for tp in r.assignment.topic_partitions), ["logs-1", "logs-2"])
        self.harness.create_topic("logs-3", 1)
        r = self.heartbeat("a", 1, None)
        self.assertEqual(r.member_epoch, 2)
        self.assertEqual(sorted(names.get(tp.topic_id, "logs-3") for tp in r.assignment.topic_partitions),
                         ["logs-1", "logs-2", "logs-3"])

    def test_group_max_size(self) -> None:
        harness = BrokerHarness(self, **{"group.consumer.max.size": 1})
        harness.create_topic("t", 1)
        body = {"group_id": self.group, "member_epoch": 0, "rebalance_timeout": 1000,
                "subscribed_topic_names": ["t"], "topic_partitions": []}
        self.assertEqual(harness.call(68, 1, {**body, "member_id": "a"}).error_code, E.none)
        self.assertEqual(harness.call(68, 1, {**body, "member_id": "b"}).error_code, E.group_max_size_reached)

    def commit(self, member: str, epoch: int, version: int = 9) -> int:
        result = self.harness.request(8, version, {
            "group_id": self.group, "generation_id_or_member_epoch": epoch, "member_id": member,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5}]}]})
        self.harness.clock.advance(1)  # the offset store's batch is written
        if hasattr(result, "addCallback"):
            result = self.successResultOf(result)
        return self.harness.decode(8, version, result).topics[0].partitions[0].error_code

    def test_offset_commit_checks_the_member_epoch(self) -> None:
        self.assertEqual(self.commit("", -1), E.none)  # a standalone commit (an admin tool): no members yet
        self.heartbeat("a", 0, [], join=True)
        self.assertEqual(self.commit("a", 0), E.stale_member_epoch)
        self.assertEqual(self.commit("nobody", 1), E.unknown_member_id)
        self.assertEqual(self.commit("a", 1), E.none)

    def test_standalone_commit_refused_while_the_group_has_members(self) -> None:
        """Kafka's ConsumerGroup.validateOffsetCommit: epoch -1 commits only to an empty group."""
        self.heartbeat("a", 0, [], join=True)
        self.assertEqual(self.commit("", -1), E.unknown_member_id)
        self.assertEqual(self.commit("a", -1), E.stale_member_epoch)
        self.heartbeat("a", -1, None)  # a leaves: the group is empty
        self.assertEqual(self.commit("", -1), E.none)

    def test_offset_commit_before_v9_from_a_consumer_member(self) -> None:
        """A KIP-848 member must commit with OffsetCommit v9+ (Kafka: UNSUPPORTED_VERSION)."""
        self.heartbeat("a", 0, [], join=True)
        self.assertEqual(self.commit("a", 1, version=8), E.unsupported_version)
        self.assertEqual(self.commit("nobody", 1, version=8), E.unknown_member_id)
        self.assertEqual(self.commit("a", 1, version=9), E.none)

    def test_full_heartbeat_with_a_regex_gets_the_assignment(self) -> None:
        """Kafka's isFullRequest: rebalance timeout, owned partitions and a regex (no names) is a full request."""
        regex = {"subscribed_topic_names": None, "subscribed_topic_regex": "t"}
        self.heartbeat("a", 0, [], join=True, **regex)
        r = self.heartbeat("a", 1, [0, 1, 2, 3], rebalance_timeout=30000, **regex)
        self.assertEqual((r.error_code, self.partitions(r)), (E.none, [0, 1, 2, 3]))
        r = self.heartbeat("a", 1, [0, 1, 2, 3])  # not a full request, nothing changed: no assignment
        self.assertEqual(self.partitions(r), None)

    def test_group_ids_are_one_namespace_with_share_groups(self) -> None:
        """A share group's id: ConsumerGroupHeartbeat GROUP_ID_NOT_FOUND, JoinGroup INCONSISTENT_GROUP_PROTOCOL."""
        share = self.harness.call(76, 1, {"group_id": self.group, "member_id": "s", "member_epoch": 0,
                                          "rack_id": None, "subscribed_topic_names": ["t"]})
        self.assertEqual(share.error_code, E.none)
        r = self.heartbeat("a", 0, [], join=True)
        self.assertEqual((r.error_code, r.error_message), (E.group_id_not_found,
                                                           f"Group {self.group} is not a consumer group."))
        self.assertEqual(self.classic_join().error_code, E.inconsistent_group_protocol)
        # and the other way: a consumer group's id (even once empty) is not a share group's
        self.group = self.other_group
        self.assertEqual(self.heartbeat("b", 0, [], join=True).error_code, E.none)
        self.heartbeat("b", -1, None)
        share = self.harness.call(76, 1, {"group_id": self.other_group, "member_id": "s", "member_epoch": 0,
                                          "rack_id": None, "subscribed_topic_names": ["t"]})
        self.assertEqual(share.error_code, E.group_id_not_found)

    def test_describe_unknown_and_classic_groups(self) -> None:
        self.harness.call(11, 5, {
            "group_id": self.other_group, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
        described = self.harness.call(69, 1, {"group_ids": [self.group, self.other_group],
                                              "include_authorized_operations": False})
        self.assertEqual([(g.error_code, g.error_message) for g in described.groups], [
            (E.group_id_not_found, f"Group {self.group} not found."),
            (E.group_id_not_found, f"Group {self.other_group} is not a consumer group.")])

    def test_delete_group(self) -> None:
        self.heartbeat("a", 0, [], join=True)

        def delete() -> int:
            result = self.harness.request(42, 2, {"groups_names": [self.group]})
            self.harness.clock.advance(1)
            if hasattr(result, "addCallback"):
                result = self.successResultOf(result)
            return self.harness.decode(42, 2, result).results[0].error_code

        self.assertEqual(delete(), E.non_empty_group)
        self.heartbeat("a", -1, None)
        self.assertEqual(delete(), E.none)
        self.assertNotIn(self.group, self.harness.apis.consumer_group_coordinator.groups)

    def test_offset_delete_refuses_subscribed_topics(self) -> None:
        self.assertEqual(self.commit("", -1), E.none)
        self.heartbeat("a", 0, [], join=True, subscribed_topic_names=None, subscribed_topic_regex="t|logs-1")
        result = self.harness.request(47, 0, {"group_id": self.group, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0}]},
            {"name": "other", "partitions": [{"partition_index": 0}]}]})
        self.harness.clock.advance(1)
        if hasattr(result, "addCallback"):
            result = self.successResultOf(result)
        response = self.harness.decode(47, 0, result)
        self.assertEqual((response.error_code, {t.name: t.partitions[0].error_code for t in response.topics}),
                         (E.none, {"t": E.group_subscribed_to_topic, "other": E.none}))

    def classic_join(self, member_id: str = "") -> Any:
        result = self.harness.request(11, 5, {
            "group_id": self.group, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": member_id,
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
        self.harness.clock.advance(5)  # group.initial.rebalance.delay.ms
        if hasattr(result, "addCallback"):
            result = self.successResultOf(result)
        return self.harness.decode(11, 5, result)

    def test_an_empty_group_changes_protocol(self) -> None:
        """Kafka 4 converts an empty group either way: classic -> consumer -> classic, commits following."""
        first = self.classic_join()
        self.assertEqual(first.error_code, E.member_id_required)
        joined = self.classic_join(first.member_id)
        self.assertEqual(joined.error_code, E.none)
        # a classic group with a member: a consumer heartbeat is refused
        self.assertEqual(self.heartbeat("a", 0, [], join=True).error_code, E.group_id_not_found)
        left = self.harness.call(13, 3, {"group_id": self.group,
                                         "members": [{"member_id": joined.member_id, "group_instance_id": None}]})
        self.assertEqual(left.error_code, E.none)
        self.assertEqual(self.heartbeat("a", 0, [], join=True).error_code, E.none)
        self.assertEqual(self.commit("a", 1), E.none)
        self.heartbeat("a", -1, None)
        first = self.classic_join()
        joined = self.classic_join(first.member_id)
        self.assertEqual(joined.error_code, E.none)
        self.assertNotIn(self.group, self.harness.apis.consumer_group_coordinator.groups)

    def test_classic_join_refused_while_consumer_members(self) -> None:
        self.heartbeat("a", 0, [], join=True)
        joined = self.harness.call(11, 5, {
            "group_id": self.group, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
        self.assertEqual(joined.error_code, E.inconsistent_group_protocol)
        listed = self.harness.call(16, 4, {"states_filter": []})
        if hasattr(listed, "result"):
            listed = self.successResultOf(listed)
        self.assertIn((self.group, "consumer"), [(g.group_id, g.protocol_type) for g in listed.groups])


class GroupConfigTests(SynchronousTestCase):
    """IncrementalAlterConfigs and DescribeConfigs on resource type GROUP (32), read by the coordinator."""

    def setUp(self) -> None:
        # a 1 s heartbeat interval below Kafka's bound (group.consumer.min.heartbeat.interval.ms 5000)
        self.harness = BrokerHarness(self, **{"group.consumer.min.heartbeat.interval.ms": 1000})
        self.harness.create_topic("t", 2)

    def alter(self, group: str, *configs: tuple[str, int, str | None]) -> Any:
        result = self.harness.request(44, 1, {"resources": [{
            "resource_type": 32, "resource_name": group,
            "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in configs]}],
            "validate_only": False})
        self.harness.clock.advance(0)
        if hasattr(result, "addCallback"):
            result = self.successResultOf(result)
        return self.harness.decode(44, 1, result).responses[0]

    def describe(self, group: str) -> dict[str, tuple[str, int]]:
        response = self.harness.call(32, 4, {"resources": [{"resource_type": 32, "resource_name": group,
                                                             "configuration_keys": None}],
                                             "include_synonyms": False, "include_documentation": False})
        return {c.name: (c.value, c.config_source) for c in response.results[0].configs}

    def test_set_describe_and_delete(self) -> None:
        described = self.describe("g")
        self.assertEqual(described["consumer.session.timeout.ms"], ("45000", 5))
        self.assertEqual(described["share.record.lock.duration.ms"], ("30000", 5))
        response = self.alter("g", ("consumer.heartbeat.interval.ms", 0, "1000"),
                              ("share.auto.offset.reset", 0, "earliest"), ("share.delivery.count.limit", 0, "3"),
                              ("share.isolation.level", 0, "read_committed"),
                              ("share.record.lock.duration.ms", 0, "15000"))
        self.assertEqual(response.error_code, E.none)
        described = self.describe("g")
        self.assertEqual(described["consumer.heartbeat.interval.ms"], ("1000", 8))
        self.assertEqual(described["share.auto.offset.reset"], ("earliest", 8))
        self.assertEqual(self.harness.apis.group_configs.group_config("g"), {
            "consumer.heartbeat.interval.ms": "1000", "share.auto.offset.reset": "earliest",
            "share.delivery.count.limit": "3", "share.isolation.level": "read_committed",
            "share.record.lock.duration.ms": "15000"})
        self.assertEqual(self.harness.apis.group_configs.value("g", "share.session.timeout.ms"), "45000")
        # the coordinator's heartbeat answers carry the group's interval
        brokers = list(self.harness.metadata.brokers) or [0]
        group = next(g for g in (f"g{i}" for i in range(1000)) if coordinator_for(g, brokers) == 0)
        self.alter(group, ("consumer.heartbeat.interval.ms", 0, "1000"))
        r = self.harness.call(68, 1, {"group_id": group, "member_id": "a", "member_epoch": 0, "rebalance_timeout": 1000,
                                      "subscribed_topic_names": ["t"], "topic_partitions": []})
        self.assertEqual(r.heartbeat_interval.total_seconds(), 1.0)
        self.assertEqual(self.alter("g", ("consumer.heartbeat.interval.ms", 1, None)).error_code, E.none)
        self.assertEqual(self.describe("g")["consumer.heartbeat.interval.ms"], ("5000", 5))
        # stored in ZooKeeper for the other brokers
        stored = self.successResultOf(self.harness.registry.get_entity_config("groups", "g"))
        self.assertEqual(stored["share.delivery.count.limit"], "3")

    def test_invalid_configs(self) -> None:
        self.assertEqual(self.alter("g", ("no.such", 0, "1")).error_code, E.invalid_config)
        self.assertEqual(self.alter("g", ("share.delivery.count.limit", 0, "11")).error_code, E.invalid_config)
        self.assertEqual(self.alter("g", ("share.isolation.level", 0, "dirty")).error_code, E.invalid_config)
        self.assertEqual(self.alter("g", ("consumer.session.timeout.ms", 0, "1000"),
                                    ("consumer.heartbeat.interval.ms", 0, "2000")).error_code, E.invalid_config)
        self.assertEqual(self.harness.apis.group_configs.group_config("g"), {})

    def test_bounds_and_broker_defaults(self) -> None:
        """Kafka's GroupConfig.validateValues: the overrides merged with the broker's defaults, within its bounds."""
        def refused(*configs: tuple[str, int, str | None]) -> tuple[int, str | None]:
            response = self.alter("g", *configs)
            return response.error_code, response.error_message

        # one override checked against the broker's default of the other (heartbeat 5000)
        self.assertEqual(refused(("consumer.session.timeout.ms", 0, "4000")), (
            E.invalid_config, "consumer.session.timeout.ms must be greater than or equal to "
            "group.consumer.min.session.timeout.ms"))
        for configs, message in (
                ([("consumer.session.timeout.ms", 0, "60001")],
                 "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
                ([("consumer.heartbeat.interval.ms", 0, "999")], "consumer.heartbeat.interval.ms must be greater "
                 "than or equal to group.consumer.min.heartbeat.interval.ms"),
                ([("consumer.heartbeat.interval.ms", 0, "15001")], "consumer.heartbeat.interval.ms must be less "
                 "than or equal to group.consumer.max.heartbeat.interval.ms"),
                ([("share.session.timeout.ms", 0, "44999")], "share.session.timeout.ms must be greater than or "
                 "equal to group.share.min.session.timeout.ms"),
                ([("share.heartbeat.interval.ms", 0, "4999")], "share.heartbeat.interval.ms must be greater than or "
                 "equal to group.share.min.heartbeat.interval.ms"),
                ([("share.record.lock.duration.ms", 0, "14999")], "share.record.lock.duration.ms must be greater "
                 "than or equal to group.share.min.record.lock.duration.ms"),
                ([("share.record.lock.duration.ms", 0, "60001")], "share.record.lock.duration.ms must be less than "
                 "or equal to group.share.max.record.lock.duration.ms")):
            self.assertEqual(refused(*configs), (E.invalid_config, message))
        self.assertEqual(self.harness.apis.group_configs.group_config("g"), {})
        self.assertEqual(refused(("consumer.session.timeout.ms", 0, "60000"), ("share.record.lock.duration.ms", 0,
                                                                                "60000")), (E.none, None))

    def test_session_not_above_the_broker_heartbeat(self) -> None:
        """consumer.session.timeout.ms alone must exceed the broker's group.consumer.heartbeat.interval.ms."""
        harness = BrokerHarness(self, **{"group.consumer.min.session.timeout.ms": 1000,
                                         "group.consumer.heartbeat.interval.ms": 5000})
        self.harness = harness
        self.assertEqual(self.alter("g", ("consumer.session.timeout.ms", 0, "5000")).error_message,
                         "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms")
        self.assertEqual(self.alter("g", ("consumer.session.timeout.ms", 0, "5001")).error_code, E.none)

    def test_validate_without_a_broker_config_uses_kafka_defaults(self) -> None:
        from kafkatw.broker.group_config import InvalidGroupConfig, validate_group_config

        with self.assertRaises(InvalidGroupConfig):
            validate_group_config({"consumer.session.timeout.ms": "1000"})  # below 45000, below the 5 s heartbeat
        validate_group_config({"consumer.session.timeout.ms": "50000", "share.delivery.count.limit": "3"})


class OffsetFetchGroupsTests(SynchronousTestCase):
    """OffsetFetch v8 (several groups) and v9 (a KIP-848 member's epoch)."""

    def setUp(self) -> None:
        self.harness = BrokerHarness(self)
        self.harness.create_topic("t", 2)
        brokers = list(self.harness.metadata.brokers) or [0]
        ours = (g for g in (f"g{i}" for i in range(1000)) if coordinator_for(g, brokers) == 0)
        self.group, self.other = next(ours), next(ours)
        for group, offset in ((self.group, 5), (self.other, 7)):
            d = self.harness.request(8, 9, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                            "topics": [{"name": "t", "partitions": [
                                                {"partition_index": 0, "committed_offset": offset}]}]})
            self.harness.clock.advance(1)
            self.successResultOf(d)

    def fetch(self, version: int, groups: list[dict]) -> Any:
        d = self.harness.request(9, version, {"groups": groups, "require_stable": False})
        self.harness.clock.advance(0)
        return self.harness.decode(9, version, self.successResultOf(d))

    def test_several_groups(self) -> None:
        response = self.fetch(8, [{"group_id": self.group, "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
                                  {"group_id": self.other, "topics": None}])
        answered = {g.group_id: (g.error_code, [(t.name, p.partition_index, p.committed_offset)
                                                for t in g.topics for p in t.partitions]) for g in response.groups}
        self.assertEqual(answered, {self.group: (E.none, [("t", 0, 5), ("t", 1, -1)]),
                                    self.other: (E.none, [("t", 0, 7)])})

    def test_member_epoch(self) -> None:
        self.harness.call(68, 1, {"group_id": self.group, "member_id": "a", "member_epoch": 0,
                                  "rebalance_timeout": 1000, "subscribed_topic_names": ["t"], "topic_partitions": []})
        topics = [{"name": "t", "partition_indexes": [0]}]
        codes = [self.fetch(9, [{"group_id": self.group, "member_id": member, "member_epoch": epoch,
                                 "topics": topics}]).groups[0].error_code
                 for member, epoch in (("a", 1), ("a", 0), ("b", 1), (None, -1))]
        self.assertEqual(codes, [E.none, E.stale_member_epoch, E.unknown_member_id, E.none])

    def test_member_epoch_needs_both_id_and_epoch_absent_to_skip_the_check(self) -> None:
        """Kafka's validateOffsetFetch: only a fetch with no member id and a negative epoch skips the check."""
        self.harness.call(68, 1, {"group_id": self.group, "member_id": "a", "member_epoch": 0,
                                  "rebalance_timeout": 1000, "subscribed_topic_names": ["t"], "topic_partitions": []})
        topics = [{"name": "t", "partition_indexes": [0]}]
        codes = [self.fetch(9, [{"group_id": self.group, "member_id": member, "member_epoch": epoch,
                                 "topics": topics}]).groups[0].error_code
                 for member, epoch in (("a", -1), (None, 1))]
        self.assertEqual(codes, [E.stale_member_epoch, E.unknown_member_id])
