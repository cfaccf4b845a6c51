"""
Tests for L{kafkatw.zookeeper.registry} against L{kafkatw.testing.FakeZooKeeperClient},
and for the fake itself.
"""

import json
import random
import uuid

from twisted.internet import defer
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient
from kafkatw.zookeeper.bridge import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    ZooKeeperUnavailableError,
    parse_connect_string,
)
from kafkatw.zookeeper.registry import (BrokerIdInUseError, ControllerMovedError, PartitionStateWrite, Registry,
                                       assign_replicas)
from kafkatw.zookeeper.zk_data import TopicAssignment, encode_topic, topic_id_from_string, topic_id_to_string


def started(server=None, **kwargs):
    client = FakeZooKeeperClient(server or FakeZooKeeper(), **kwargs)
    client.start()
    return client


class ConnectStringTests(SynchronousTestCase):
    def test_default_chroot(self):
        self.assertEqual(parse_connect_string("127.0.0.1:2181"), ("127.0.0.1:2181", "/kafkatw"))

    def test_chroot_in_string_wins(self):
        self.assertEqual(parse_connect_string("a:1,b:2/kafka/x/"), ("a:1,b:2", "/kafka/x"))

    def test_root_chroot(self):
        self.assertEqual(parse_connect_string("a:1/"), ("a:1", "/"))

    def test_bad(self):
        self.assertRaises(ValueError, parse_connect_string, "")
        self.assertRaises(ValueError, parse_connect_string, "host")
        self.assertRaises(ValueError, parse_connect_string, "host:port")


class FakeClientTests(SynchronousTestCase):
    def test_chroot_created_and_honoured(self):
        server = FakeZooKeeper()
        client = started(server)
        self.successResultOf(client.create("/a", b"x"))
        root = started(server, chroot="/")
        self.assertEqual(self.successResultOf(root.get_children("/kafkatw")), ["a"])
        self.assertEqual(self.successResultOf(root.get("/kafkatw/a"))[0], b"x")

    def test_errors(self):
        client = started()
        self.failureResultOf(client.create("/a/b"), NoNodeError)
        self.successResultOf(client.create("/a/b", makepath=True))
        self.failureResultOf(client.create("/a/b"), NodeExistsError)
        self.failureResultOf(client.delete("/a"), NotEmptyError)
        self.failureResultOf(client.get("/nope"), NoNodeError)
        self.assertIsNone(self.successResultOf(client.exists("/nope")))
        self.failureResultOf(client.set("/a", b"1", version=5), BadVersionError)
        stat = self.successResultOf(client.set("/a", b"1", version=0))
        self.assertEqual(stat.version, 1)
        self.successResultOf(client.delete("/a", recursive=True))
        self.assertIsNone(self.successResultOf(client.exists("/a")))

    def test_sequence(self):
        client = started()
        self.successResultOf(client.ensure_path("/q"))
        self.assertEqual(self.successResultOf(client.create("/q/n-", sequence=True)), "/q/n-0000000000")
        self.assertEqual(self.successResultOf(client.create("/q/n-", sequence=True)), "/q/n-0000000001")

    def test_not_connected(self):
        client = FakeZooKeeperClient()
        self.failureResultOf(client.get("/"), ZooKeeperUnavailableError)
        client.available = False
        self.failureResultOf(client.start(), ZooKeeperUnavailableError)

    def test_watches_and_ephemerals(self):
        server = FakeZooKeeper()
        a, b = started(server), started(server)
        children, data = [], []
        watch = self.successResultOf(b.watch_children("/eph", children.append))
        self.successResultOf(b.watch_data("/eph/1", data.append))
        self.assertEqual((children, data), ([[]], [None]))
        self.successResultOf(a.create("/eph/1", b"v", ephemeral=True, makepath=True))
        self.assertEqual(children[-1], ["1"])
        self.assertEqual(data[-1], b"v")
        stat = self.successResultOf(a.get("/eph/1"))[1]
        self.assertEqual(stat.ephemeralOwner, a.session_id)
        a.expire_session()
        self.assertEqual(children[-1], [])
        self.assertEqual(data[-1], None)
        watch.cancel()
        self.successResultOf(a.create("/eph/2"))
        self.assertEqual(children[-1], [])

    def test_watch_through_clock(self):
        clock = Clock()
        server = FakeZooKeeper(clock)
        client = started(server)
        seen = []
        self.successResultOf(client.watch_data("/x", seen.append))
        self.successResultOf(client.create("/x", b"1"))
        self.assertEqual(seen, [None])
        clock.advance(0)
        self.assertEqual(seen, [None, b"1"])

    def test_session_states(self):
        client = FakeZooKeeperClient()
        states, sessions = [], []
        client.add_state_listener(states.append)
        client.on_new_session(lambda: sessions.append(client.session_id))
        client.start()
        first = client.session_id
        client.disconnect()
        client.reconnect()
        client.expire_session()
        client.stop()
        self.assertEqual(states, ["CONNECTED", "SUSPENDED", "CONNECTED", "LOST", "CONNECTED", "LOST"])
        self.assertEqual(len(sessions), 1)
        self.assertNotEqual(sessions[0], first)

    def test_stop_deletes_ephemerals(self):
        server = FakeZooKeeper()
        a, b = started(server), started(server)
        self.successResultOf(a.create("/e", ephemeral=True))
        self.successResultOf(a.stop())
        self.assertIsNone(self.successResultOf(b.exists("/e")))


class BrokerRegistrationTests(SynchronousTestCase):
    def test_json(self):
        client = started()
        registry = Registry(client)
        self.successResultOf(registry.register_broker(1, "h1", 9092))
        data, stat = self.successResultOf(client.get("/brokers/ids/1"))
        body = json.loads(data)
        timestamp = body.pop("timestamp")
        self.assertTrue(timestamp.isdigit())
        self.assertEqual(
            body,
            {
                "version": 5,
                "host": "h1",
                "port": 9092,
                "endpoints": ["PLAINTEXT://h1:9092"],
                "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
                "jmx_port": -1,
                "features": {},
            },
        )
        self.assertEqual(stat.ephemeralOwner, client.session_id)

    def test_list_and_rack(self):
        server = FakeZooKeeper()
        r1, r2 = Registry(started(server)), Registry(started(server))
        self.successResultOf(r1.register_broker(2, "h2", 9093, rack="r1"))
        self.successResultOf(r2.register_broker(1, "h1", 9092))
        self.assertEqual(
            self.successResultOf(r1.list_brokers()), {1: ("h1", 9092, None), 2: ("h2", 9093, "r1")}
        )
        self.assertEqual(json.loads(self.successResultOf(r1.client.get("/brokers/ids/2"))[0])["rack"], "r1")

    def test_id_taken(self):
        server = FakeZooKeeper()
        r1, r2 = Registry(started(server)), Registry(started(server))
        self.successResultOf(r1.register_broker(1, "h1", 9092))
        failure = self.failureResultOf(r2.register_broker(1, "h2", 9092), BrokerIdInUseError)
        self.assertIn("broker.id 1", str(failure.value))
        # same session again is fine
        self.successResultOf(r1.register_broker(1, "h1", 9092))

    def test_holder_expires_between_create_and_read(self):
        """
        A restarted broker's create finds its crashed predecessor's node, whose
        session expires before the node is read: it creates the node again
        instead of failing with C{NoNodeError}.
        """
        server = FakeZooKeeper()
        crashed, restarted = started(server), started(server)
        self.successResultOf(Registry(crashed).register_broker(1, "h1", 9092))
        create = restarted.create
        creates = []

        def create_then_expire(*args, **kwargs):
            d = create(*args, **kwargs)
            creates.append(args[0])
            if len(creates) == 1:
                self.successResultOf(crashed.stop())  # its ephemeral node goes
            return d

        restarted.create = create_then_expire
        stat = self.successResultOf(Registry(restarted).register_broker(1, "h2", 9092))
        self.assertEqual(stat.ephemeralOwner, restarted.session_id)
        self.assertEqual(json.loads(self.successResultOf(restarted.get("/brokers/ids/1"))[0])["host"], "h2")
        self.assertEqual(creates, ["/brokers/ids/1", "/brokers/ids/1"])

    def test_watch_brokers_and_reregister(self):
        server = FakeZooKeeper()
        c1, c2 = started(server), started(server)
        r1, r2 = Registry(c1), Registry(c2)
        seen = []
        self.successResultOf(r2.watch_brokers(seen.append))
        self.successResultOf(r1.register_broker(1, "h1", 9092))
        self.assertEqual(seen[-1], {1: ("h1", 9092, None)})
        c1.expire_session()
        # gone, then back in the new session
        self.assertIn({}, seen)
        self.assertEqual(seen[-1], {1: ("h1", 9092, None)})
        stat = self.successResultOf(c2.get("/brokers/ids/1"))[1]
        self.assertEqual(stat.ephemeralOwner, c1.session_id)
        self.successResultOf(r1.deregister_broker(1))
        self.assertEqual(seen[-1], {})


    def test_a_reregistration_whose_connection_drops_registers_again_once_connected(self):
        """
        The connection drops under the re-registration in a new session (the
        session lives on): it registers again once connected, as Kafka's
        C{registerBroker} retries until connected; the broker stayed out of
        C{/brokers/ids} for good (the cluster simulation, seed 428).
        """
        clock = Clock()
        server = FakeZooKeeper(clock=clock)
        client, other = started(server), started(server)
        client.on_new_session(client.partition)  # cut as soon as the new session opens: before the registry's call
        registry = Registry(client)
        self.successResultOf(registry.register_broker(1, "h1", 9092))
        client.expire_session()
        clock.advance(client.session_timeout_ms * 2 / 3 / 1000)  # the client notices: ConnectionLoss, SUSPENDED
        self.failureResultOf(other.get("/brokers/ids/1"), NoNodeError)
        client.heal()  # CONNECTED, the same session
        stat = self.successResultOf(other.get("/brokers/ids/1"))[1]
        self.assertEqual(stat.ephemeralOwner, client.session_id)
        self.assertEqual(self.flushLoggedErrors(), [])


    def test_a_reregistration_failing_after_the_connection_is_back_registers_again_at_once(self):
        """
        The simulation's seed 146128 (C{--brokers 2 --no-disk-model
        --transactions --groups --faults 14 --window 45 --link-faults 4
        --start-zookeeper-drops 2}): the re-registration's C{ConnectionLoss}
        came after the client had connected again; waiting for the next
        C{CONNECTED} state, which never came, left the broker out of
        C{/brokers/ids} for good, and no partition it alone could lead was led.
        """
        server = FakeZooKeeper()
        client, other = started(server), started(server)
        registry = Registry(client)
        self.successResultOf(registry.register_broker(1, "h1", 9092))
        create, failures = client.create, [ZooKeeperUnavailableError("ConnectionLoss (answered late)")]

        def late_failure(*args, **kwargs):
            if failures:
                return defer.fail(failures.pop())
            return create(*args, **kwargs)

        client.create = late_failure
        client.expire_session()  # a new session: re-registered, and that create fails while connected
        self.assertEqual(failures, [])
        self.assertTrue(client.connected)
        stat = self.successResultOf(other.get("/brokers/ids/1"))[1]
        self.assertEqual(stat.ephemeralOwner, client.session_id)

class ConnectedAgainTests(SynchronousTestCase):
    def test_fires_at_once_when_connected_else_at_the_next_connection(self):
        from kafkatw.zookeeper.bridge import connected_again

        client = started()
        self.successResultOf(connected_again(client))
        client.disconnect()
        waiting = connected_again(client)
        self.assertNoResult(waiting)
        client.reconnect()
        self.successResultOf(waiting)

class TopicTests(SynchronousTestCase):
    def setUp(self):
        self.client = started()
        self.registry = Registry(self.client)

    def test_create_get(self):
        tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
        created = self.successResultOf(
            self.registry.create_topic("t", {0: [1, 2], 1: [2, 1]}, {"retention.ms": "1000"}, topic_id=tid)
        )
        self.assertEqual(created, TopicAssignment("t", tid, {0: [1, 2], 1: [2, 1]}))
        data, _ = self.successResultOf(self.client.get("/brokers/topics/t"))
        self.assertEqual(
            data,
            b'{"version":3,"partitions":{"0":[1,2],"1":[2,1]},"adding_replicas":{},'
            b'"removing_replicas":{},"topic_id":"EjRWeBI0VngSNFZ4EjRWeA"}',
        )
        config, _ = self.successResultOf(self.client.get("/config/topics/t"))
        self.assertEqual(json.loads(config), {"version": 1, "config": {"retention.ms": "1000"}})
        self.assertEqual(self.successResultOf(self.registry.get_topic("t")), created)
        self.assertEqual(self.successResultOf(self.registry.get_topic_config("t")), {"retention.ms": "1000"})
        self.assertEqual(self.successResultOf(self.registry.list_topics()), ["t"])

    def test_topic_id_string(self):
        tid = uuid.uuid4()
        text = topic_id_to_string(tid)
        self.assertEqual(len(text), 22)
        self.assertEqual(topic_id_from_string(text), tid)

    def test_exists(self):
        self.successResultOf(self.registry.create_topic("t", {0: [1]}, {}))
        self.failureResultOf(self.registry.create_topic("t", {0: [1]}, {}), TopicAlreadyExistsError)

    def test_unknown(self):
        self.failureResultOf(self.registry.get_topic("nope"), UnknownTopicOrPartitionError)
        self.failureResultOf(self.registry.delete_topic("nope"), UnknownTopicOrPartitionError)
        self.assertEqual(self.successResultOf(self.registry.list_topics()), [])
        self.assertEqual(self.successResultOf(self.registry.get_topic_config("nope")), {})

    def test_config_update(self):
        self.successResultOf(self.registry.create_topic("t", {0: [1]}, {}))
        self.successResultOf(self.registry.set_topic_config("t", {"cleanup.policy": "compact"}))
        self.assertEqual(self.successResultOf(self.registry.get_topic_config("t")), {"cleanup.policy": "compact"})

    def test_delete_and_watch(self):
        names, assignments = [], []
        self.successResultOf(self.registry.watch_topics(names.append))
        self.successResultOf(self.registry.watch_topic("t", assignments.append))
        self.assertEqual((names, assignments), ([[]], [None]))
        created = self.successResultOf(self.registry.create_topic("t", {0: [1]}, {"a": "b"}))
        self.successResultOf(self.registry.set_partition_state("t", 0, 1, 0, [1]))
        self.assertEqual(names[-1], ["t"])
        self.assertEqual(assignments[-1], created)
        self.successResultOf(self.registry.delete_topic("t"))
        self.assertEqual(names[-1], [])
        self.assertIsNone(assignments[-1])
        self.assertIsNone(self.successResultOf(self.client.exists("/config/topics/t")))
        self.assertIsNone(self.successResultOf(self.registry.get_partition_state("t", 0)))

    def test_partition_state(self):
        self.successResultOf(self.registry.create_topic("t", {0: [1, 2]}, {}))
        self.assertIsNone(self.successResultOf(self.registry.get_partition_state("t", 0)))
        version = self.successResultOf(self.registry.set_partition_state("t", 0, 1, 0, [1, 2]))
        data, _ = self.successResultOf(self.client.get("/brokers/topics/t/partitions/0/state"))
        self.assertEqual(
            json.loads(data), {"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1, 2]}
        )
        state = self.successResultOf(self.registry.get_partition_state("t", 0))
        self.assertEqual((state.leader, state.leader_epoch, state.isr, state.zk_version), (1, 0, [1, 2], version))
        self.successResultOf(self.registry.set_partition_state("t", 0, 2, 1, [2], expected_version=version))
        self.failureResultOf(
            self.registry.set_partition_state("t", 0, 1, 2, [1], expected_version=version), BadVersionError
        )


    def test_a_conditional_or_fenced_write_does_not_bring_back_a_deleted_state(self):
        """Issue 27: the controller's write racing a topic deletion fails instead of re-creating the state."""
        self.successResultOf(self.registry.create_topic("t", {0: [1, 2]}, {}))
        version = self.successResultOf(self.registry.set_partition_state("t", 0, 1, 0, [1, 2]))
        self.assertEqual(version, 0)
        self.successResultOf(self.client.delete("/brokers/topics/t/partitions/0/state"))
        self.failureResultOf(
            self.registry.set_partition_state("t", 0, 2, 1, [2], expected_version=version), BadVersionError
        )
        self.assertIsNone(self.successResultOf(self.registry.get_partition_state("t", 0)))
        self.successResultOf(self.client.create("/controller_epoch", b"1", makepath=True))
        self.failureResultOf(
            self.registry.set_partition_states([PartitionStateWrite("t", 0, 2, 1, [2], -1)], 1, 0), BadVersionError
        )
        self.assertIsNone(self.successResultOf(self.registry.get_partition_state("t", 0)))
        # the unconditional write of a new partition's first state still creates it
        self.assertEqual(self.successResultOf(self.registry.set_partition_state("t", 0, 1, 0, [1, 2])), 0)

class AssignReplicasTests(SynchronousTestCase):
    def test_kafka_vector(self):
        """Kafka's AdminTest.testReplicaAssignment: 5 brokers, 10 partitions, rf 3, start 0."""
        expected = {
            0: [0, 1, 2],
            1: [1, 2, 3],
            2: [2, 3, 4],
            3: [3, 4, 0],
            4: [4, 0, 1],
            5: [0, 2, 3],
            6: [1, 3, 4],
            7: [2, 4, 0],
            8: [3, 0, 1],
            9: [4, 1, 2],
        }
        self.assertEqual(assign_replicas(10, 3, [4, 3, 2, 1, 0], start_index=0), expected)

    def test_single_broker(self):
        self.assertEqual(assign_replicas(3, 1, [7], start_index=0), {0: [7], 1: [7], 2: [7]})

    def test_random_start_is_balanced(self):
        result = assign_replicas(6, 2, [1, 2, 3], random=random.Random(4))
        leaders = [r[0] for r in result.values()]
        self.assertEqual(sorted(leaders), [1, 1, 2, 2, 3, 3])
        for replicas in result.values():
            self.assertEqual(len(set(replicas)), 2)

    def test_errors(self):
        self.assertRaises(InvalidReplicationFactorError, assign_replicas, 1, 3, [1, 2])
        self.assertRaises(InvalidReplicationFactorError, assign_replicas, 1, 0, [1, 2])
        self.assertRaises(InvalidPartitionsError, assign_replicas, 0, 1, [1, 2])


class ProducerIdBlockTests(SynchronousTestCase):
    def test_blocks_never_overlap(self):
        server = FakeZooKeeper()
        r1, r2 = Registry(started(server)), Registry(started(server))
        blocks = []
        for _ in range(5):
            blocks.append(self.successResultOf(r1.allocate_producer_id_block(1, 1000)))
            blocks.append(self.successResultOf(r2.allocate_producer_id_block(2, 1000)))
        self.assertEqual(blocks[0], (0, 999))
        self.assertEqual(blocks[1], (1000, 1999))
        ids = [i for start, end in blocks for i in range(start, end + 1)]
        self.assertEqual(len(ids), len(set(ids)))
        body = json.loads(self.successResultOf(r1.client.get("/latest_producer_id_block"))[0])
        self.assertEqual(body, {"version": 1, "broker": 2, "block_start": "9000", "block_end": "9999"})

    def test_retry_on_conflict(self):
        """A writer that sneaks in between read and conditional write makes the allocator retry."""
        server = FakeZooKeeper()
        c1, c2 = started(server), started(server)
        r1, r2 = Registry(c1), Registry(c2)
        self.successResultOf(r1.allocate_producer_id_block(1, 10))
        original_get = c1.get
        raced = []

        def racing_get(path):
            d = original_get(path)
            if not raced:
                raced.append(self.successResultOf(r2.allocate_producer_id_block(2, 10)))
            return d

        c1.get = racing_get
        self.assertEqual(raced, [])
        block = self.successResultOf(r1.allocate_producer_id_block(1, 10))
        self.assertEqual(raced, [(10, 19)])
        self.assertEqual(block, (20, 29))


class ControllerTests(SynchronousTestCase):
    def test_election(self):
        server = FakeZooKeeper()
        c1, c2 = started(server), started(server)
        r1, r2 = Registry(c1), Registry(c2)
        seen = []
        self.successResultOf(r2.watch_controller(seen.append))
        self.assertTrue(self.successResultOf(r1.elect_controller(1)))
        self.assertFalse(self.successResultOf(r2.elect_controller(2)))
        self.assertTrue(self.successResultOf(r1.elect_controller(1)))
        self.assertEqual(self.successResultOf(r1.get_controller_epoch()), 1)
        body = json.loads(self.successResultOf(c1.get("/controller"))[0])
        self.assertEqual((body["version"], body["brokerid"]), (1, 1))
        c1.expire_session()
        self.assertIsNone(seen[-1])
        self.assertTrue(self.successResultOf(r2.elect_controller(2)))
        self.assertEqual(seen, [None, 1, None, 2])
        self.assertEqual(self.successResultOf(c1.get("/controller_epoch"))[0], b"2")


class PartitionStatesBatchTests(SynchronousTestCase):
    """Issue 32: L{Registry.set_partition_states}, many partitions' fenced, conditional writes in one multi."""

    def setUp(self):
        self.client = started()
        self.registry = Registry(self.client)
        self.successResultOf(self.registry.create_topic("t", {p: [1, 2] for p in range(4)}, {}))
        self.versions = [self.successResultOf(self.registry.set_partition_state("t", p, 1, 0, [1, 2]))
                         for p in range(4)]
        self.successResultOf(self.client.create("/controller_epoch", b"3"))
        self.fence_version = 0

    def writes(self, versions=None):
        """Partitions 0-3 elect broker 2 at epoch 1 (ELR of partition 0: [1])."""
        return [PartitionStateWrite("t", p, 2, 1, [2], v, [1] if p == 0 else None)
                for p, v in enumerate(self.versions if versions is None else versions)]

    def states(self):
        return [self.successResultOf(self.registry.get_partition_state("t", p)) for p in range(4)]

    def test_the_eligible_leader_replicas_carry_the_zxid_they_were_last_in_the_isr(self):
        """
        C{"eligible_leader_replica_isr_zxids"} beside C{"eligible_leader_replicas"};
        a state without it (an older writer's) reads as not known (-1).
        """
        self.successResultOf(self.registry.set_partition_state("t", 0, 2, 1, [2], 3, elr=[1, 3],
                                                               elr_isr_zxids=[7, 11]))
        self.successResultOf(self.registry.set_partition_state("t", 1, 2, 1, [2], 3, elr=[1]))
        first, second = self.states()[:2]
        self.assertEqual((first.elr, first.elr_isr_zxids), ([1, 3], [7, 11]))
        self.assertEqual([first.elr_isr_zxid(b) for b in (1, 3, 2)], [7, 11, -1])
        self.assertEqual((second.elr, second.elr_isr_zxid(1)), ([1], -1))
        self.successResultOf(self.client.set("/brokers/topics/t/partitions/1/state",
                                             b'{"version":1,"leader":2,"leader_epoch":1,"controller_epoch":3,'
                                             b'"isr":[2],"eligible_leader_replicas":[1]}'))
        older = self.states()[1]
        self.assertEqual((older.elr, older.elr_isr_zxids, older.elr_isr_zxid(1)), ([1], [], -1))

    def test_a_state_that_keeps_its_leader_epoch_carries_the_zxid_the_epoch_began_at(self):
        """
        C{"leader_epoch_zxid"}, written by a state that keeps an epoch (a
        leader's ISR change, or the controller's); a state without it began
        its epoch itself: its own C{mzxid} (also the reading of an older writer's state).
        """
        self.successResultOf(self.registry.set_partition_state("t", 0, 2, 1, [2, 1], 3))
        elected = self.states()[0]
        self.assertEqual((elected.leader_epoch_zxid, elected.epoch_start_zxid), (-1, elected.mzxid))
        self.successResultOf(self.registry.set_partition_state("t", 0, 2, 1, [2], 3,
                                                               leader_epoch_zxid=elected.epoch_start_zxid))
        shrunk = self.states()[0]
        self.assertGreater(shrunk.mzxid, elected.mzxid)
        self.assertEqual(shrunk.epoch_start_zxid, elected.mzxid)
        [written] = self.successResultOf(self.registry.set_partition_states(
            [PartitionStateWrite("t", 0, 2, 1, [2, 1], shrunk.zk_version, leader_epoch_zxid=shrunk.epoch_start_zxid)],
            3, self.fence_version))
        expanded = self.states()[0]
        self.assertEqual((expanded.mzxid, expanded.epoch_start_zxid), (written.mzxid, elected.mzxid))

    def test_the_isr_members_carry_the_zxid_they_joined_at(self):
        """
        C{"isr_zxids"} beside C{"isr"}: -1 (or no key, an older writer's) is
        the state's own C{mzxid}; a member not in the ISR has its state's.
        """
        self.successResultOf(self.registry.set_partition_state("t", 0, 2, 1, [2, 1, 3], 3, isr_zxids=[7, -1, 11]))
        self.successResultOf(self.registry.set_partition_state("t", 1, 2, 1, [2, 1], 3))
        first, second = self.states()[:2]
        self.assertEqual(first.isr_zxids, [7, -1, 11])
        self.assertEqual([first.isr_join_zxid(b) for b in (2, 1, 3)], [7, first.mzxid, 11])
        self.assertEqual((second.isr_zxids, second.isr_join_zxid(1)), ([], second.mzxid))
        [written] = self.successResultOf(self.registry.set_partition_states(
            [PartitionStateWrite("t", 0, 2, 1, [2], first.zk_version, isr_zxids=[-1])], 3, self.fence_version))
        self.assertEqual(self.states()[0].isr_zxids, [])  # nothing known to carry: not written
        self.assertEqual(self.states()[0].isr_join_zxid(2), written.mzxid)

    def test_every_state_written_at_once(self):
        written = self.successResultOf(self.registry.set_partition_states(self.writes(), 3, self.fence_version))
        versions = [w.version for w in written]
        self.assertEqual(versions, [v + 1 for v in self.versions])
        states = self.states()
        self.assertEqual([(s.leader, s.leader_epoch, s.isr, s.controller_epoch, s.zk_version) for s in states],
                         [(2, 1, [2], 3, v + 1) for v in self.versions])
        self.assertEqual([s.elr for s in states], [[1], [], [], []])
        # one transaction: one zxid, the one each state reads back with
        self.assertEqual([w.mzxid for w in written], [s.mzxid for s in states])
        self.assertEqual(len({w.mzxid for w in written}), 1)
        self.assertGreater(written[0].mzxid, 0)
        # the same bytes as one partition's write
        data, _ = self.successResultOf(self.client.get("/brokers/topics/t/partitions/1/state"))
        self.successResultOf(self.registry.set_partition_state("t", 3, 2, 1, [2], 3, expected_version=versions[3]))
        self.assertEqual(self.successResultOf(self.client.get("/brokers/topics/t/partitions/3/state"))[0], data)
        self.assertEqual(self.successResultOf(self.registry.set_partition_states([], 3, self.fence_version)), [])

    def test_a_stale_version_in_the_middle_writes_nothing(self):
        # the leader of partition 2 changes its ISR after the controller read it
        self.successResultOf(self.registry.set_partition_state("t", 2, 1, 0, [1], expected_version=self.versions[2]))
        before = self.states()
        failure = self.failureResultOf(self.registry.set_partition_states(self.writes(), 3, self.fence_version),
                                       BadVersionError)
        self.assertEqual(failure.value.op_index, 2)
        self.assertIn("/brokers/topics/t/partitions/2/state changed", str(failure.value))
        self.assertNotIn("/controller_epoch", str(failure.value))
        self.assertEqual(self.states(), before)

    def test_a_deleted_state_writes_nothing_and_is_not_brought_back(self):
        self.successResultOf(self.client.delete("/brokers/topics/t/partitions/3/state"))
        before = self.states()
        failure = self.failureResultOf(self.registry.set_partition_states(self.writes(), 3, self.fence_version),
                                       BadVersionError)
        self.assertEqual(failure.value.op_index, 3)
        self.assertIn("was deleted", str(failure.value))
        self.assertEqual(self.states(), before)
        self.assertIsNone(before[3])

    def test_a_deposed_controller_writes_nothing(self):
        before = self.states()
        self.successResultOf(self.client.set("/controller_epoch", b"4"))  # another controller was elected
        failure = self.failureResultOf(self.registry.set_partition_states(self.writes(), 3, self.fence_version),
                                       ControllerMovedError)
        self.assertIsNone(failure.value.op_index)
        self.assertIn("/controller_epoch", str(failure.value))
        self.assertEqual(self.states(), before)
        self.successResultOf(self.client.delete("/controller_epoch"))
        failure = self.failureResultOf(self.registry.set_partition_states(self.writes(), 3, self.fence_version),
                                       ControllerMovedError)
        self.assertIn("/controller_epoch", str(failure.value))
        self.assertEqual(self.states(), before)

    def test_a_deposed_controllers_lone_write_is_told_by_its_type(self):
        """
        A write of one partition fenced by a changed or deleted
        C{/controller_epoch}: L{ControllerMovedError}; a lost race on the state
        of a topic named C{controller_epoch}: a plain L{BadVersionError}.
        """
        self.successResultOf(self.registry.create_topic("controller_epoch", {0: [1]}))
        version = self.successResultOf(self.registry.set_partition_state("controller_epoch", 0, 1, 0, [1]))

        def write(expected_version):
            return self.registry.set_partition_states(
                [PartitionStateWrite("controller_epoch", 0, 1, 1, [1], expected_version)], 3, self.fence_version)

        failure = self.failureResultOf(write(version + 1), BadVersionError)
        self.assertNotIsInstance(failure.value, ControllerMovedError)
        self.successResultOf(self.client.set("/controller_epoch", b"4"))
        self.failureResultOf(write(version), ControllerMovedError)
        self.successResultOf(self.client.delete("/controller_epoch"))
        self.failureResultOf(write(version), ControllerMovedError)
        self.assertEqual(self.successResultOf(self.registry.get_partition_state("controller_epoch", 0)).zk_version,
                         version)


class FakeMatchesRealTests(SynchronousTestCase):
    def test_same_public_methods(self):
        """The fake offers every public method of the real client, with the same parameters."""
        import inspect

        from kafkatw.zookeeper.bridge import ZooKeeperClient

        for name, member in inspect.getmembers(ZooKeeperClient):
            if name.startswith("_"):
                continue
            fake = getattr(FakeZooKeeperClient, name, None)
            self.assertIsNotNone(fake, name)
            if inspect.isfunction(member):
                self.assertEqual(
                    list(inspect.signature(member).parameters), list(inspect.signature(fake).parameters), name
                )


class TopicAssignmentUpdateTests(SynchronousTestCase):
    def test_concurrent_change_is_reapplied_not_lost(self):
        registry = Registry(started())
        self.successResultOf(registry.create_topic("t", {0: [1, 2]}))
        calls = []

        def grow(current):
            calls.append(dict(current.partitions))
            if len(calls) == 1:
                # another writer (a reassignment) changes the topic between our read and write
                other = TopicAssignment("t", current.topic_id, {0: [2, 3, 1]}, {0: [3]}, {0: [1]})
                self.successResultOf(registry.client.set(
                    "/brokers/topics/t", encode_topic(other.topic_id, other.partitions,
                                                               other.adding_replicas, other.removing_replicas)))
            return TopicAssignment("t", current.topic_id, {**current.partitions, 1: [1, 2]},
                                   current.adding_replicas, current.removing_replicas)

        self.successResultOf(registry.update_topic_assignment("t", grow))
        self.assertEqual(len(calls), 2)
        topic = self.successResultOf(registry.get_topic("t"))
        self.assertEqual(topic.partitions, {0: [2, 3, 1], 1: [1, 2]})  # both changes kept
        self.assertEqual((topic.adding_replicas, topic.removing_replicas), ({0: [3]}, {0: [1]}))

    def test_fenced_by_the_controller_epoch(self):
        registry = Registry(started())
        self.successResultOf(registry.create_topic("t", {0: [1]}))
        self.assertTrue(self.successResultOf(registry.elect_controller(1)))
        _, fence = registry.controller_epoch
        self.successResultOf(registry.client.set("/controller_epoch", b"9"))  # another controller since
        failure = self.failureResultOf(registry.update_topic_assignment(
            "t", lambda current: TopicAssignment("t", current.topic_id, {0: [2]}), fence), ControllerMovedError)
        self.assertIn("/controller_epoch", str(failure.value))
        self.assertEqual(self.successResultOf(registry.get_topic("t")).partitions, {0: [1]})


class WatchReadRetryTests(SynchronousTestCase):
    """
    A read after a watch notification that finds ZooKeeper unavailable (the
    connection dropped, or the session closing at shutdown) is no failure: it
    runs again for the same notification once the session is connected, so
    the change is not lost (a group coordinator's holders read while its
    session closed was logged as a critical failure at every clean stop).
    """

    def test_a_read_that_finds_zookeeper_unavailable_runs_again_once_connected(self):
        client = started()
        registry = Registry(client)
        reads: list[str] = []
        seen: list[str] = []

        async def fetch(value: str) -> str:
            reads.append(value)
            if len(reads) == 1:
                raise ZooKeeperUnavailableError("ConnectionLoss")
            return value.upper()

        on_change = registry._chain(fetch, seen.append)
        client.disconnect()
        on_change("a")
        self.assertEqual((reads, seen), (["a"], []))
        self.assertEqual(self.flushLoggedErrors(), [])
        client.reconnect()
        self.assertEqual((reads, seen), (["a", "a"], ["A"]))
        client.disconnect()
        client.reconnect()  # the retry was once: no more reads
        self.assertEqual(reads, ["a", "a"])


class AclChangeWatchTests(SynchronousTestCase):
    def test_a_lost_connection_fails_the_watch_with_its_own_error(self):
        """
        The broker's start-up step (C{KafkaServer._zookeeper_step}) makes a
        step again on L{ZooKeeperUnavailableError}; the two stores' watches
        must fail with it, not with Twisted's C{FirstError} wrapping it (which
        failed the start with a traceback).
        """
        client = started()
        registry = Registry(client)
        client.disconnect()
        failure = self.failureResultOf(registry.watch_acl_changes(lambda store, children: None))
        failure.trap(ZooKeeperUnavailableError)
        client.reconnect()
        seen: list[str] = []
        self.assertEqual(len(self.successResultOf(registry.watch_acl_changes(lambda store, _: seen.append(store)))), 2)
        self.assertEqual(len(seen), 2)
