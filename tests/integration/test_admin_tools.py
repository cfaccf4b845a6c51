"""
The controller tools against real brokers: C{kafkatw leader-election}
(preferred and unclean) and C{kafkatw reassign-partitions} (a partition moved
onto a newly started broker while an acks=all producer writes to it).

The tools run as subprocesses (C{python -m kafkatw.cli.main}), as an
operator runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from twisted.trial import unittest

from kafkatw.testing import BrokerProcess, running_cluster
from tests.integration.test_replication import consume_all, create_topic, partition_info, segment_bytes, wait_for

_OVERRIDES = {
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "zookeeper.session.timeout.ms": "3000",
    "auto.leader.rebalance.enable": "false",
}


def kafkatw(*args: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkatw.cli.main", *args], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=timeout_s)


def create_assigned_topic(bootstrap: str, topic: str, assignment: list[list[int]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)])
    futures[topic].result(20)


class LeaderElectionToolTests(unittest.TestCase):
    timeout = 240

    def test_preferred_election_returns_leadership(self) -> None:
        """
        The preferred leader is stopped (controlled shutdown) and restarted;
        with C{auto.leader.rebalance.enable=false} it stays a follower until
        C{leader-election --election-type PREFERRED} moves leadership back.
        """
        with running_cluster(3, overrides=_OVERRIDES) as cluster:
            bootstrap = ",".join(b.bootstrap for b in cluster)
            create_topic(bootstrap, "pref", rf=3)
            wait_for(lambda: (partition_info(bootstrap, "pref") or (-1, [], []))[2] == [0, 1, 2], what="a full ISR")
            leader, replicas, _ = partition_info(bootstrap, "pref")
            self.assertEqual(leader, replicas[0])
            cluster[leader].stop()
            wait_for(lambda: (partition_info(bootstrap, "pref") or (-1,))[0] not in (-1, leader),
                     what="leadership to move")
            cluster[leader].start()
            wait_for(lambda: leader in (partition_info(bootstrap, "pref") or (-1, [], []))[2],
                     what="the restarted preferred leader back in the ISR")
            self.assertNotEqual(partition_info(bootstrap, "pref")[0], leader)

            result = kafkatw("leader-election", "--bootstrap-server", bootstrap, "--election-type", "PREFERRED",
                             "--all-topic-partitions")
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            self.assertIn("Successfully completed leader election (PREFERRED) for partitions pref-0",
                          result.stdout)
            wait_for(lambda: (partition_info(bootstrap, "pref") or (-1,))[0] == leader,
                     what="the preferred replica leading again")

            again = kafkatw("leader-election", "--bootstrap-server", bootstrap, "--election-type", "preferred",
                            "--topic", "pref", "--partition", "0")
            self.assertEqual(again.returncode, 0, again.stdout + again.stderr)
            self.assertEqual(again.stdout.strip(), "Valid replica already elected for partitions pref-0")

    def test_unclean_election_elects_live_out_of_sync_replica(self) -> None:
        """
        The ISR shrinks to the leader, then the leader dies: with
        C{unclean.leader.election.enable=false} the partition stays offline
        even when the out-of-sync replica comes back; C{--election-type
        UNCLEAN} elects it, and a preferred election there fails.
        """
        with running_cluster(3, overrides=_OVERRIDES) as cluster:
            bootstrap = ",".join(b.bootstrap for b in cluster)
            create_assigned_topic(bootstrap, "uncl", [[0, 1]])
            wait_for(lambda: (partition_info(bootstrap, "uncl") or (-1, [], []))[2] == [0, 1], what="a full ISR")
            cluster[1].kill()
            survivor = cluster[2].bootstrap
            wait_for(lambda: (partition_info(survivor, "uncl") or (-1, [], []))[2] == [0], what="ISR of the leader")
            producer = Producer({"bootstrap.servers": cluster[0].bootstrap, "acks": 1})
            producer.produce("uncl", b"only on broker 0", partition=0)
            self.assertEqual(producer.flush(20), 0)
            cluster[0].kill()
            wait_for(lambda: (partition_info(survivor, "uncl") or (0,))[0] == -1, what="the partition offline")
            cluster[1].start()
            live = ",".join(cluster[i].bootstrap for i in (1, 2))
            # Broker 2 is the controller now.  Once it knows broker 1 is back, the
            # preferred election below is a controller event queued after the one
            # that handled broker 1's return: when it answers, that one has run.
            wait_for(lambda: 1 in AdminClient({"bootstrap.servers": survivor}).list_topics(timeout=5).brokers,
                     what="the controller to see broker 1 again")
            preferred = kafkatw("leader-election", "--bootstrap-server", live, "--election-type", "PREFERRED",
                                "--topic", "uncl", "--partition", "0")
            self.assertEqual(preferred.returncode, 1, preferred.stdout + preferred.stderr)
            self.assertIn("Error completing leader election (PREFERRED) for partition: uncl-0: "
                          "PREFERRED_LEADER_NOT_AVAILABLE", preferred.stdout)
            self.assertIn("1 replica(s) could not be elected", preferred.stderr)
            info = partition_info(survivor, "uncl")
            self.assertEqual(info[0], -1, info)  # no unclean election by itself

            result = kafkatw("leader-election", "--bootstrap-server", live, "--election-type", "UNCLEAN",
                             "--topic", "uncl", "--partition", "0")
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            self.assertEqual(result.stdout.strip(), "Successfully completed leader election (UNCLEAN) for partitions"
                                                    " uncl-0")
            info = wait_for(lambda: (partition_info(live, "uncl") or (-1,))[0] == 1 and partition_info(live, "uncl"),
                            what="broker 1 leading")
            self.assertEqual(info[2], [1])


class ReassignPartitionsToolTests(unittest.TestCase):
    timeout = 300

    def test_reassignment_onto_new_broker_under_load(self) -> None:
        """
        A partition on brokers {0, 1} is moved to {1, 2}, 2 being a broker
        started for it, while an acks=all producer writes: every acknowledged
        record is read back once and in order, broker 0 deletes its copy and
        broker 2's log is byte for byte broker 1's.
        """
        with running_cluster(2, overrides=_OVERRIDES) as cluster:
            bootstrap = ",".join(b.bootstrap for b in cluster)
            create_assigned_topic(bootstrap, "moving", [[0, 1]])
            wait_for(lambda: (partition_info(bootstrap, "moving") or (-1, [], []))[2] == [0, 1], what="a full ISR")

            acked: dict[int, bytes] = {}
            errors: list = []
            stop = threading.Event()
            total = 30000

            def produce() -> None:
                producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                     "linger.ms": 5, "message.timeout.ms": 60000})

                def delivered(err, message) -> None:
                    if err is not None:
                        errors.append(err)
                    else:
                        acked[message.offset()] = message.value()

                deadline = time.monotonic() + 60
                for i in range(total):
                    if stop.is_set() or time.monotonic() > deadline:
                        break
                    producer.produce("moving", f"record-{i:06d}".encode() + b"x" * 100, partition=0,
                                     on_delivery=delivered)
                    producer.poll(0)
                    if i % 100 == 0:
                        time.sleep(0.05)  # about 2,000 records/s for 15 s: the copy runs while records arrive
                producer.flush(60)

            writer = threading.Thread(target=produce, name="acks-all-producer")
            writer.start()
            try:
                wait_for(lambda: len(acked) > 2000, what="records before the new broker starts")
                new = BrokerProcess(2, cluster[0].zookeeper_connect, cluster[0].log_dir, _OVERRIDES).start()
                cluster.append(new)
                wait_for(lambda: partition_info(bootstrap, "moving") is not None, what="metadata")

                topics_file = os.path.join(cluster[0].log_dir, "topics.json")
                with open(topics_file, "w") as f:
                    json.dump({"version": 1, "topics": [{"topic": "moving"}]}, f)
                generated = kafkatw("reassign-partitions", "--bootstrap-server", bootstrap, "--generate",
                                    "--topics-to-move-json-file", topics_file, "--broker-list", "1,2")
                self.assertEqual(generated.returncode, 0, generated.stdout + generated.stderr)
                lines = generated.stdout.splitlines()
                self.assertEqual(lines[0], "Current partition replica assignment")
                self.assertEqual(json.loads(lines[1]), {"version": 1, "partitions": [
                    {"topic": "moving", "partition": 0, "replicas": [0, 1], "log_dirs": ["any", "any"]}]})
                self.assertEqual(lines[3], "Proposed partition reassignment configuration")
                proposed = json.loads(lines[4])["partitions"]
                self.assertEqual(sorted(proposed[0]["replicas"]), [1, 2])

                plan = os.path.join(cluster[0].log_dir, "plan.json")
                with open(plan, "w") as f:
                    json.dump({"version": 1, "partitions": [{"topic": "moving", "partition": 0,
                                                             "replicas": [1, 2]}]}, f)
                executed = kafkatw("reassign-partitions", "--bootstrap-server", bootstrap, "--execute",
                                   "--reassignment-json-file", plan, "--throttle", "50000000")
                self.assertEqual(executed.returncode, 0, executed.stdout + executed.stderr)
                self.assertIn('Current partition replica assignment\n\n{"version":1,"partitions":[{"topic":"moving",'
                              '"partition":0,"replicas":[0,1],"log_dirs":["any","any"]}]}\n\nSave this to use as the'
                              ' --reassignment-json-file option during rollback', executed.stdout)
                self.assertIn("Successfully started partition reassignment for moving-0", executed.stdout)
                self.assertIn("The inter-broker throttle limit was set to 50000000 B/s", executed.stdout)
                self.assertTrue(writer.is_alive(), "the producer finished before the reassignment started")
                # the new replica's broker follows the throttle from /config/brokers/2
                wait_for(lambda: "replication throttle: 50000000 bytes/s" in cluster[2].log_text(),
                         what="broker 2 to apply the throttle")
                verified_lines: list[str] = []

                def completed() -> bool:
                    verified = kafkatw("reassign-partitions", "--bootstrap-server", bootstrap, "--verify",
                                       "--reassignment-json-file", plan)
                    self.assertEqual(verified.returncode, 0, verified.stdout + verified.stderr)
                    self.assertEqual(verified.stdout.splitlines()[0], "Status of partition reassignment:")
                    verified_lines[:] = verified.stdout.splitlines()
                    return "Reassignment of partition moving-0 is completed." in verified.stdout

                wait_for(completed, timeout_s=90, what="the reassignment to complete", interval_s=1.0)
                self.assertIn("Clearing broker-level throttles on brokers 0,1,2", verified_lines)
                wait_for(lambda: "replication throttle lifted" in cluster[2].log_text(),
                         what="broker 2 to lift the throttle")
            except BaseException:
                stop.set()
                raise
            finally:
                writer.join(120)
            self.assertEqual(errors, [])
            self.assertGreater(len(acked), 2000)
            info = partition_info(bootstrap, "moving")
            self.assertEqual(sorted(info[1]), [1, 2])
            self.assertIn(info[0], (1, 2))

            records = consume_all(bootstrap, "moving", 0, max(acked) + 1)
            self.assertEqual([offset for offset, _ in records], list(range(len(records))))
            values = [value for _, value in records]
            self.assertEqual(len(values), len(set(values)))  # once
            self.assertEqual(values, sorted(values))  # in order
            for offset, value in acked.items():
                self.assertEqual(records[offset][1], value)

            wait_for(lambda: not os.path.exists(os.path.join(cluster[0].data_dir, "moving-0")),
                     what="broker 0 to delete its replica")
            wait_for(lambda: segment_bytes(cluster, 1, "moving", 0) == segment_bytes(cluster, 2, "moving", 0),
                     what="identical logs on brokers 1 and 2")
            self.assertGreater(len(segment_bytes(cluster, 2, "moving", 0)), 0)
