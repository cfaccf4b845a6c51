"""
Two whole brokers (L{KafkaServer}s in this process, over one L{FakeZooKeeper}
and L{MemoryReactorClock}s) whose views of C{/brokers/ids} differ -- a broker
that has not yet heard that another came back, or that wrongly believes it
gone: only one of them may act as a group's coordinator (issue 27).  With
the coordinator chosen by hashing over each broker's own view, both answered
FindCoordinator with themselves, both accepted JoinGroup, and the stale one's
OffsetCommit overwrote a newer commit.  Requests go straight to each broker's
L{KafkaApis}; no sockets.
"""

from __future__ import annotations

import gc
import json
import shutil
import tempfile
from typing import Any
from unittest import mock

from twisted.internet import defer
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from kafkatw.broker import server as server_module
from kafkatw.broker.group_coordinator import coordinator_for
from kafkatw.broker.server import KafkaServer
from kafkatw.broker.transaction_coordinator import offsets_partition_for
from kafkatw.config import BrokerConfig
from kafkatw.errors import ErrorCode
from kafkatw.protocol.messages import decode_response, encode_request, parse_request_header
from kafkatw.testing import FakeZooKeeper, FakeZooKeeperClient
from kafkatw.zookeeper.zk_data import group_coordinator_epoch_path


class TwoBrokersTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.zookeeper = FakeZooKeeper()
        self.observer = FakeZooKeeperClient(self.zookeeper)
        self.successResultOf(self.observer.start())
        for target, name, value in [
                (server_module, "ZooKeeperClient",
                 lambda connect, reactor, **kwargs: FakeZooKeeperClient(self.zookeeper, reactor=reactor)),
                (gc, "freeze", lambda: None)]:  # the broker freezes what its start built; not this process's
            patcher = mock.patch.object(target, name, value)
            patcher.start()
            self.addCleanup(patcher.stop)
        self.brokers = [self.start(0), self.start(1)]
        self.correlation = 0

    def start(self, broker_id: int) -> KafkaServer:
        log_dir = tempfile.mkdtemp(prefix="kafkatw-coordinators-")
        self.addCleanup(shutil.rmtree, log_dir, True)
        server = KafkaServer(BrokerConfig({
            "broker.id": broker_id, "log.dirs": log_dir, "listeners": "PLAINTEXT://127.0.0.1:0",
            "zookeeper.connect": "fake:2181", "log.cleaner.enable": "false",
            "group.initial.rebalance.delay.ms": 0, "offsets.commit.batch.interval.ms": 10,
        }), MemoryReactorClock())
        server.startService()
        self.successResultOf(server.ready)
        self.addCleanup(self.dispose, server)
        return server

    @staticmethod
    def dispose(server: KafkaServer) -> None:
        if server.log_manager is not None:
            server.log_manager.close()
        if server.zookeeper is not None and server.zookeeper.connected:
            server.zookeeper.stop()
        lock = getattr(server, "log_dir_lock", None)
        if lock is not None:
            lock.release()

    def call(self, server: KafkaServer, api_key: int, version: int, body: dict) -> Any:
        """Serve one request at C{server}, letting its clock run until it is answered."""
        self.correlation += 1
        frame = encode_request(api_key, version, self.correlation, "test", body)
        result = server.apis.handle(parse_request_header(frame), frame)
        if isinstance(result, defer.Deferred):
            answered: list = []
            result.addBoth(answered.append)
            for _ in range(20):
                if answered:
                    break
                server.reactor.advance(0.01)
            self.assertEqual(len(answered), 1, "no answer")
            result = answered[0]
        return decode_response(api_key, version, result)[1]

    def find_coordinator(self, server: KafkaServer, group: str) -> tuple[int, int]:
        response = self.call(server, 10, 3, {"key": group, "key_type": 0})
        return response.error_code, response.node_id

    def commit(self, server: KafkaServer, group: str, offset: int) -> int:
        response = self.call(server, 8, 8, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        return response.topics[0].partitions[0].error_code

    def join(self, server: KafkaServer, group: str) -> int:
        response = self.call(server, 11, 3, {
            "group_id": group, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]})
        return response.error_code

    def committed(self, group: str) -> int:
        data, _ = self.successResultOf(self.observer.get(f"/consumers/{group}/offsets/t/0"))
        return json.loads(data)["offset"]

    def believe_only_itself_alive(self, server: KafkaServer) -> None:
        """C{server}'s watch of C{/brokers/ids} tells it the other broker is gone (it is not)."""
        infos = self.successResultOf(defer.Deferred.fromCoroutine(server.registry._list_brokers(None, True)))
        server._brokers_changed({server.broker_id: infos[server.broker_id]})

    def test_divergent_views_of_the_live_brokers_make_one_coordinator(self) -> None:
        b0, b1 = self.brokers
        group = self.coordinated_group_with_an_offset()
        self.assertEqual(self.find_coordinator(b1, group), (ErrorCode.none, 0))

        self.believe_only_itself_alive(b1)
        # Broker 1 does not name itself (it names the holder, or none while it cannot reach it) ...
        self.assertIn(self.find_coordinator(b1, group), [(ErrorCode.none, 0), (ErrorCode.coordinator_not_available, -1)])
        self.assertEqual(self.find_coordinator(b0, group), (ErrorCode.none, 0))
        # ... and only that one acts: broker 1 takes no commit and no member of the group.
        self.assertEqual(self.commit(b1, group, 5), ErrorCode.not_coordinator)
        self.assertEqual(self.committed(group), 10)  # not moved back
        self.assertEqual(self.join(b1, group), ErrorCode.not_coordinator)
        self.assertEqual(self.join(b0, group), ErrorCode.none)

    def deposed_without_noticing(self, group: str) -> None:
        """Another claim of C{group}'s coordinator epoch happened; its holder has not heard of it yet."""
        _, partition = offsets_partition_for(group)
        path = group_coordinator_epoch_path(partition)
        data, _ = self.successResultOf(self.observer.get(path))
        self.successResultOf(self.observer.set(path, data))  # the epoch (the znode's version) moves on

    def delete_offsets(self, server: KafkaServer, group: str) -> tuple[int, list[int]]:
        response = self.call(server, 47, 0, {"group_id": group, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0}]}]})
        return response.error_code, [p.error_code for t in response.topics for p in t.partitions]

    def delete_group(self, server: KafkaServer, group: str) -> int:
        response = self.call(server, 42, 2, {"groups_names": [group]})
        return response.results[0].error_code

    def coordinated_group_with_an_offset(self) -> str:
        """Topic C{t} created; a group broker 0 coordinates (as both brokers agree), with offset 10 committed."""
        b0, _ = self.brokers
        t = self.call(b0, 19, 5, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                              "assignments": [], "configs": []}],
                                  "timeout_ms": 5000, "validate_only": False})
        self.assertEqual(t.topics[0].error_code, ErrorCode.none)
        for b in self.brokers:
            for _ in range(3):
                b.reactor.advance(0.01)
        group = next(g for g in (f"g{i}" for i in range(100)) if coordinator_for(g, [0, 1]) == 0)
        self.assertEqual(self.find_coordinator(b0, group), (ErrorCode.none, 0))
        self.assertEqual(self.commit(b0, group, 10), ErrorCode.none)
        return group

    def test_a_deposed_coordinator_deletes_no_offsets(self) -> None:
        """OffsetDelete and DeleteGroups are fenced by the coordinator epoch, as commits are."""
        b0, _ = self.brokers
        group = self.coordinated_group_with_an_offset()
        self.deposed_without_noticing(group)
        self.assertEqual(self.delete_offsets(b0, group)[0], ErrorCode.not_coordinator)
        self.assertEqual(self.committed(group), 10)
        self.assertEqual(self.delete_group(b0, group), ErrorCode.not_coordinator)
        self.assertEqual(self.committed(group), 10)

    def test_the_coordinator_deletes_offsets_and_groups(self) -> None:
        b0, _ = self.brokers
        group = self.coordinated_group_with_an_offset()
        self.assertEqual(self.delete_offsets(b0, group), (ErrorCode.none, [ErrorCode.none]))
        self.assertIsNone(self.successResultOf(self.observer.exists(f"/consumers/{group}/offsets/t/0")))
        self.assertIsNone(self.successResultOf(self.observer.exists(f"/consumers/{group}/offsets/t")))
        self.assertEqual(self.commit(b0, group, 12), ErrorCode.none)
        self.assertEqual(self.delete_group(b0, group), ErrorCode.none)
        self.assertIsNone(self.successResultOf(self.observer.exists(f"/consumers/{group}")))
