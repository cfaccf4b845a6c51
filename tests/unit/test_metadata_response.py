"""
Metadata responses spliced from cached per-topic bytes
(L{kafkatw.broker.metadata_response}, L{KafkaApis._metadata_response}) are the
bytes kio writes for the whole response (L{KafkaApis._metadata_body} with
L{KafkaApis._metadata_operations}, through C{_respond}), for every version,
after any sequence of changes of what the entries are made of: topics,
partition states, live brokers and their listeners, this broker's replica
roles, errors, unknown topic ids, authorized operations.  A state machine
(hypothesis) changes the cluster and compares both encodings after each step.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from twisted.internet.testing import MemoryReactorClock
from twisted.trial import unittest

from kafkatw.broker.admin import AdminManager
from kafkatw.broker.apis import KafkaApis
from kafkatw.broker.metadata_cache import BrokerEndpoint, MetadataCache, TopicMetadata
from kafkatw.broker.metadata_response import metadata_response_encoder
from kafkatw.broker.request_context import ConnectionContext, RequestContext
from kafkatw.config import BrokerConfig
from kafkatw.errors import ErrorCode
from kafkatw.protocol.messages import decode_request, decode_response, encode_request, parse_request_header
from kafkatw.security.acl import ResourceType
from kafkatw.testing import FakeZooKeeperClient
from kafkatw.zookeeper.registry import Registry
from kafkatw.zookeeper.zk_data import PartitionState

BROKER_ID = 0
BROKERS = range(4)
TOPICS = ["a", "b", "c-1", "d.x"]
LISTENERS = ["PLAINTEXT", "EXTERNAL"]


class _Replica:
    """What L{KafkaApis._serving_as_leader} reads of a hosted partition."""

    def __init__(self, is_leader: bool, leader_epoch: int) -> None:
        self.is_leader = is_leader
        self.leader_epoch = leader_epoch


class _ReplicaManager:
    """The hosted partitions and the role listeners of a L{kafkatw.broker.replica_manager.ReplicaManager}."""

    def __init__(self) -> None:
        self.partitions: dict[tuple[str, int], _Replica] = {}
        self.leadership_listeners: list = []

    def set_role(self, topic: str, partition: int, replica: _Replica | None) -> None:
        if replica is None:
            self.partitions.pop((topic, partition), None)
        else:
            self.partitions[(topic, partition)] = replica
        for listener in list(self.leadership_listeners):
            listener(topic, partition, "leader" if replica is not None and replica.is_leader else "follower",
                     None if replica is None else replica.leader_epoch)


class _Authorizer:
    """Allows by a fixed rule of the topic name; operations likewise (never Kafka's: just different per topic)."""

    def authorize(self, principal: str, host: str, operation: Any, resource_type: Any, name: str) -> bool:
        return resource_type != ResourceType.TOPIC or not (name or "").startswith("c")

    def authorized_operations(self, principal: str, host: str, resource_type: Any, name: str) -> int:
        return 8 + len(name or "")


def _apis(replica_manager: Any) -> KafkaApis:
    config = BrokerConfig({"broker.id": BROKER_ID, "log.dirs": "/nonexistent-kafkatw-test",
                           "auto.create.topics.enable": "false"})
    zookeeper = FakeZooKeeperClient()
    zookeeper.start()
    metadata = MetadataCache(BROKER_ID, "cluster-x")
    return KafkaApis(config, replica_manager, metadata, AdminManager(config, Registry(zookeeper), metadata),
                     MemoryReactorClock())


def _request_body(version: int, names: list[str] | None, ids: list[uuid.UUID], include_ops: bool,
                  include_cluster_ops: bool) -> dict:
    if names is None:
        topics = None if version >= 1 else []
    else:
        topics = [{"name": n, "topic_id": None} for n in names] + [{"name": None, "topic_id": i} for i in ids]
    return {"topics": topics, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": include_ops,
            "include_cluster_authorized_operations": include_cluster_ops}


def both(apis: KafkaApis, version: int, body: dict, listener: str = "PLAINTEXT") -> tuple[bytes, bytes]:
    """C{(served, plain)}: what L{KafkaApis.handle} answers, and kio's encoding of the plain values."""
    frame = encode_request(3, version, 7, "test", body)
    header = parse_request_header(frame)
    connection = ConnectionContext(listener_name=listener)
    served = apis.handle(header, frame, connection)
    request = decode_request(frame, header)
    context = RequestContext(header, connection)
    if request.topics is None or (version == 0 and not request.topics):
        names = sorted(apis.metadata.topics)
        if apis.authorizer is not None:
            names = [n for n in names if n[0] != "c"]
        plain_body = apis._metadata_body(names, {}, listener)
    else:
        names, unknown = apis.metadata_topic_names(request.topics)
        errors = {}
        for name in names:
            if apis.authorizer is not None and name[0] == "c":
                errors[name] = ErrorCode.topic_authorization_failed
        plain_body = apis._metadata_body(names, errors, listener)
        plain_body["topics"].extend(unknown)
    plain = apis._respond(context, apis._metadata_operations(context, request, plain_body))
    return served, plain


class MetadataMachine(RuleBasedStateMachine):
    """Change the cluster; after each step every version's response is kio's."""

    @initialize(authorized=st.booleans())
    def start(self, authorized: bool) -> None:
        self.replica_manager = _ReplicaManager()
        self.apis = _apis(self.replica_manager)
        self.metadata = self.apis.metadata
        if authorized:
            self.apis.authorizer = _Authorizer()
        self.epochs: dict[tuple[str, int], int] = {}
        self.topic_ids = {name: uuid.uuid4() for name in TOPICS}

    @rule(brokers=st.sets(st.sampled_from(BROKERS)), external=st.sets(st.sampled_from(BROKERS)),
          rack=st.booleans(), this_one=st.booleans())
    def brokers(self, brokers: set[int], external: set[int], rack: bool, this_one: bool) -> None:
        if this_one:
            brokers.add(BROKER_ID)
        self.metadata.set_brokers({b: BrokerEndpoint(
            b, "127.0.0.1", 9092 + b, "r1" if rack and b % 2 else None,
            (("PLAINTEXT", "127.0.0.1", 9092 + b), *((("EXTERNAL", f"host{b}", 19092),) if b in external else ())))
            for b in brokers})

    @rule(name=st.sampled_from(TOPICS), count=st.integers(1, 4), with_states=st.booleans(), data=st.data())
    def topic(self, name: str, count: int, with_states: bool, data: st.DataObject) -> None:
        """A topic created or changed; with its partitions' states, as the controller writes them."""
        replicas = {p: data.draw(st.lists(st.sampled_from(BROKERS), min_size=1, max_size=3, unique=True))
                    for p in range(count)}
        self.metadata.set_topic(TopicMetadata(name, self.topic_ids[name], replicas))
        if with_states:
            for partition in replicas:
                self.set_state(name, partition, data)

    def set_state(self, name: str, partition: int, data: st.DataObject) -> None:
        replicas = self.metadata.topics[name].partitions[partition]
        leader = data.draw(st.sampled_from([-1, *replicas]))
        isr = data.draw(st.lists(st.sampled_from(replicas), unique=True))
        epoch = self.epochs[(name, partition)] = self.epochs.get((name, partition), 0) + data.draw(st.integers(0, 1))
        self.metadata.set_partition_state(name, partition, PartitionState(leader, epoch, isr))

    @rule(name=st.sampled_from(TOPICS))
    def remove(self, name: str) -> None:
        self.metadata.remove_topic(name)

    @rule(data=st.data())
    def state(self, data: st.DataObject) -> None:
        if not self.metadata.topics:
            return
        name = data.draw(st.sampled_from(sorted(self.metadata.topics)))
        meta = self.metadata.topics[name]
        partition = data.draw(st.sampled_from(sorted(meta.partitions)))
        if data.draw(st.integers(0, 5)) == 0:
            self.metadata.set_partition_state(name, partition, None)
        else:
            self.set_state(name, partition, data)

    @rule(data=st.data())
    def role(self, data: st.DataObject) -> None:
        """
        This broker's replica starts or stops leading (or is dropped), as
        the replica manager tells; mostly one whose state names it leader.
        """
        named = sorted(key for key, state in self.metadata.partition_states.items() if state.leader == BROKER_ID)
        keys = named or sorted((name, p) for name, meta in self.metadata.topics.items() for p in meta.partitions)
        if not keys:
            return
        name, partition = data.draw(st.sampled_from(keys))
        state = self.metadata.partition_states.get((name, partition))
        epoch = 0 if state is None else state.leader_epoch
        replica = data.draw(st.none() | st.builds(_Replica, st.booleans(), st.integers(epoch - 1, epoch + 1)))
        self.replica_manager.set_role(name, partition, replica)

    @invariant()
    def byte_identical(self) -> None:
        """A full Metadata (at one version per step, in turn) and a named one, on either listener."""
        if not hasattr(self, "apis"):
            return
        self.step = getattr(self, "step", -1) + 1
        version = self.step % 13
        for listener in LISTENERS:
            for names, v in ((None, version), (["a", "zz", "c-1", "b", "a"], 12 - version)):
                ids = [uuid.uuid4(), self.topic_ids["b"]] if v >= 12 and names else []
                include_ops = v >= 8 and self.step % 2 == 0
                body = _request_body(v, names, ids, include_ops, v in (8, 9, 10) and include_ops)
                served, plain = both(self.apis, v, body, listener)
                assert served == plain, (v, listener, names, include_ops)


class MetadataStateMachineTests(unittest.SynchronousTestCase):
    def test_served_bytes_are_kios_over_generated_cluster_states(self) -> None:
        """
        Over generated sequences of broker, listener, topic, partition-state,
        role and ACL changes, every Metadata response served from the cached
        topic entries is byte for byte kio's plain encoding.
        """
        run_state_machine_as_test(MetadataMachine, settings=settings(max_examples=100, stateful_step_count=20,
                                                                     deadline=None))


class MetadataResponseTests(unittest.TestCase):
    def test_a_full_metadata_is_cached_bytes_until_a_state_changes(self) -> None:
        """
        The second full Metadata encodes no topic again; a changed partition
        state re-encodes its topic only, and the answer names the new leader.
        """
        replica_manager = _ReplicaManager()
        apis = _apis(replica_manager)
        apis.metadata.set_brokers({b: BrokerEndpoint(b, "127.0.0.1", 9092 + b) for b in (0, 1, 2)})
        for t in range(20):
            name = f"t{t}"
            apis.metadata.set_topic(TopicMetadata(name, uuid.uuid4(), {p: [1, 2, 0] for p in range(50)}))
            for p in range(50):
                apis.metadata.set_partition_state(name, p, PartitionState(1, 0, [1, 2, 0]))
        body = _request_body(12, None, [], False, False)
        served, plain = both(apis, 12, body)
        self.assertEqual(served, plain)
        encoder = metadata_response_encoder(12)
        encoded = []
        real_topic = encoder.topic
        self.patch(encoder, "topic", lambda entry: encoded.append(entry["name"]) or real_topic(entry))
        self.assertEqual(both(apis, 12, body)[0], served)
        self.assertEqual(encoded, [])
        apis.metadata.set_partition_state("t3", 7, PartitionState(2, 1, [2, 0]))
        served, plain = both(apis, 12, body)
        self.assertEqual(served, plain)
        self.assertEqual(encoded, ["t3"])
        [p] = [p for t in decode_response(3, 12, served)[1].topics if t.name == "t3"
               for p in t.partitions if p.partition_index == 7]
        self.assertEqual((p.leader_id, p.leader_epoch, list(p.isr_nodes)), (2, 1, [2, 0]))
        # a broker leaving: every leader it held is -1, every topic encoded again
        apis.metadata.set_brokers({b: BrokerEndpoint(b, "127.0.0.1", 9092 + b) for b in (0, 2)})
        encoded.clear()
        served, plain = both(apis, 12, body)
        self.assertEqual(served, plain)
        self.assertEqual(sorted(encoded), sorted(f"t{t}" for t in range(20)))
        # an endpoint change (same brokers) leaves the topics as they are
        encoded.clear()
        apis.metadata.set_brokers({b: BrokerEndpoint(b, "localhost", 9192 + b) for b in (0, 2)})
        served, plain = both(apis, 12, body)
        self.assertEqual((served, encoded), (plain, []))

    def test_a_replica_that_starts_leading_is_named_leader_at_once(self) -> None:
        """
        The state names this broker leader before its replica leads (leader
        -1 meanwhile); the replica manager's role change drops the cached
        entry.
        """
        replica_manager = _ReplicaManager()
        apis = _apis(replica_manager)
        apis.metadata.set_brokers({0: BrokerEndpoint(0, "127.0.0.1", 9092)})
        apis.metadata.set_topic(TopicMetadata("t", uuid.uuid4(), {0: [0]}))
        apis.metadata.set_partition_state("t", 0, PartitionState(0, 3, [0]))
        body = _request_body(12, None, [], False, False)

        def leader() -> int:
            served, plain = both(apis, 12, body)
            self.assertEqual(served, plain)
            return decode_response(3, 12, served)[1].topics[0].partitions[0].leader_id

        self.assertEqual(leader(), -1)
        replica_manager.set_role("t", 0, _Replica(True, 3))
        self.assertEqual(leader(), 0)
        replica_manager.set_role("t", 0, None)
        self.assertEqual(leader(), -1)

    def test_splice_refuses_a_frame_without_an_empty_topics_array(self) -> None:
        encoder = metadata_response_encoder(1)
        with self.assertRaises(ValueError):
            encoder.splice(b"\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x01", [], 0)
