"""
C{kafkatw topics} against a real ZooKeeper and three kafkatw brokers:
C{--create --replication-factor 3}, Kafka's C{--describe} lines,
C{--alter --partitions}, the C{--under-replicated-partitions},
C{--unavailable-partitions} and C{--under-min-isr-partitions} reports after
brokers are SIGKILLed, and the admin client following a leader that moved.
"""

from __future__ import annotations


from click.testing import CliRunner
from twisted.trial import unittest

from kafkatw.cli.main import main as cli_main
from kafkatw.cli.topics import format_topic_id
from kafkatw.client import NewTopic
from kafkatw.client.blocking import BlockingAdminClient, BlockingProducer
from kafkatw.testing import running_cluster, wait_for

OVERRIDES = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "zookeeper.session.timeout.ms": "3000",
}




def cli(*args: str):
    return CliRunner().invoke(cli_main, ["topics", *args])


def partitions(admin: BlockingAdminClient, topic: str) -> list:
    try:
        return admin.describe_topics([topic])[topic].partitions
    except Exception:
        return []


def line(topic: str, p) -> str:
    leader = p.leader if p.leader >= 0 else "none"
    return (f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {leader}\t"
            f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")


class TopicsToolTests(unittest.TestCase):
    timeout = 240

    def test_create_describe_alter(self) -> None:
        """
        A topic with three replicas is created, described with Kafka's lines
        (its non-default configs included), grown with --alter; a count that
        would not grow it fails with Kafka's message.
        """
        with running_cluster(3, overrides=OVERRIDES) as cluster:
            bootstrap = ",".join(b.bootstrap for b in cluster)
            result = cli("--bootstrap-server", bootstrap, "--create", "--topic", "t", "--partitions", "2",
                         "--replication-factor", "3", "--config", "min.insync.replicas=2")
            self.assertEqual((result.exit_code, result.output), (0, "Created topic t.\n"))
            with BlockingAdminClient(bootstrap) as admin:
                wait_for(lambda: all(sorted(p.isr) == [0, 1, 2] for p in partitions(admin, "t")) and
                         len(partitions(admin, "t")) == 2, what="a full ISR")
                topic = admin.describe_topics(["t"])["t"]
            self.assertEqual([len(p.replicas) for p in topic.partitions], [3, 3])
            result = cli("--bootstrap-server", bootstrap, "--describe", "--topic", "t")
            self.assertEqual(result.exit_code, 0, result.output)
            self.assertEqual(result.output.splitlines(), [
                f"Topic: t\tTopicId: {format_topic_id(topic.topic_id)}\tPartitionCount: 2\tReplicationFactor: 3\t"
                f"Configs: min.insync.replicas=2",
                *(line("t", p) for p in topic.partitions)])
            for flag in ("--under-replicated-partitions", "--under-min-isr-partitions", "--unavailable-partitions",
                         "--at-min-isr-partitions"):
                result = cli("--bootstrap-server", bootstrap, "--describe", flag)
                self.assertEqual((result.exit_code, result.output), (0, ""), flag)
            result = cli("--bootstrap-server", bootstrap, "--describe", "--topics-with-overrides", "--exclude-internal")
            self.assertEqual(result.output.splitlines(), [
                f"Topic: t\tTopicId: {format_topic_id(topic.topic_id)}\tPartitionCount: 2\tReplicationFactor: 3\t"
                f"Configs: min.insync.replicas=2"])

            result = cli("--bootstrap-server", bootstrap, "--alter", "--topic", "t", "--partitions", "4")
            self.assertEqual((result.exit_code, result.output), (0, ""))
            with BlockingAdminClient(bootstrap) as admin:
                grown = wait_for(lambda: len(partitions(admin, "t")) == 4 and partitions(admin, "t"),
                                 what="four partitions")
            self.assertEqual([len(p.replicas) for p in grown], [3, 3, 3, 3])
            result = cli("--bootstrap-server", bootstrap, "--alter", "--topic", "t", "--partitions", "3")
            self.assertEqual((result.exit_code, result.output), (1, "Error while executing topic command : Topic "
                             "currently has 4 partitions, which is higher than the requested 3.\n"))
            result = cli("--bootstrap-server", bootstrap, "--alter", "--topic", "t", "--partitions", "4")
            self.assertEqual((result.exit_code, result.output),
                             (1, "Error while executing topic command : Topic already has 4 partitions.\n"))
            result = cli("--bootstrap-server", bootstrap, "--alter", "--topic", "nope", "--partitions", "4")
            self.assertEqual((result.exit_code, result.output),
                             (1, "Error while executing topic command : Topic 'nope' does not exist as expected\n"))
            result = cli("--bootstrap-server", bootstrap, "--create", "--topic", "big", "--replication-factor", "4")
            self.assertEqual((result.exit_code, result.output), (1, "Error while executing topic command : "
                             "Replication factor: 4 larger than available brokers: 3.\n"))

    def test_reports_after_brokers_die(self) -> None:
        """
        SIGKILL the leader of an RF=3 topic (min.insync.replicas=2) and the
        only replica of an RF=1 topic: an admin client made before follows the
        new leader; --under-replicated-partitions shows the RF=3 partition,
        --unavailable-partitions the leaderless one; after a second kill the
        RF=3 partition is also under its min ISR.
        """
        with running_cluster(3, overrides=OVERRIDES) as cluster:
            bootstrap = ",".join(b.bootstrap for b in cluster)
            result = cli("--bootstrap-server", bootstrap, "--create", "--topic", "rf3", "--partitions", "1",
                         "--replication-factor", "3", "--config", "min.insync.replicas=2")
            self.assertEqual(result.exit_code, 0, result.output)
            admin = BlockingAdminClient(bootstrap, default_api_timeout_ms=30000)
            self.addCleanup(admin.close)
            wait_for(lambda: [sorted(p.isr) for p in partitions(admin, "rf3")] == [[0, 1, 2]], what="a full ISR")
            leader = partitions(admin, "rf3")[0].leader
            self.assertEqual(admin.create_topics([NewTopic("solo", replica_assignment={0: [leader]})]),
                             {"solo": None})
            wait_for(lambda: [p.leader for p in partitions(admin, "solo")] == [leader], what="solo's leader")
            self.assertEqual(admin.list_offsets({("rf3", 0): -1})[("rf3", 0)].offset, 0)

            cluster[leader].kill()
            # the same client, its leader connection lost: it finds the new leader
            self.assertEqual(admin.list_offsets({("rf3", 0): -1})[("rf3", 0)].offset, 0)
            moved = wait_for(lambda: [p for p in partitions(admin, "rf3") if p.leader not in (-1, leader)
                                      and leader not in p.isr], what="a new leader and a smaller ISR")
            self.assertEqual(len(moved[0].isr), 2)
            others = ",".join(b.bootstrap for i, b in enumerate(cluster) if i != leader)
            dead_first = f"{cluster[leader].bootstrap},{others}"

            result = cli("--bootstrap-server", dead_first, "--describe", "--under-replicated-partitions")
            self.assertEqual((result.exit_code, result.output.splitlines()), (0, [line("rf3", moved[0])]))
            solo = wait_for(lambda: [p for p in partitions(admin, "solo") if p.leader == -1], what="solo offline")
            result = cli("--bootstrap-server", dead_first, "--describe", "--unavailable-partitions")
            self.assertEqual((result.exit_code, result.output.splitlines()), (0, [line("solo", solo[0])]))
            self.assertIn("Leader: none", result.output)
            result = cli("--bootstrap-server", others, "--describe", "--under-min-isr-partitions")
            self.assertEqual((result.exit_code, result.output.splitlines()), (0, [line("solo", solo[0])]))
            # rf3's ISR is down to its min.insync.replicas (2)
            result = cli("--bootstrap-server", others, "--describe", "--at-min-isr-partitions", "--topic", "rf3")
            self.assertEqual((result.exit_code, result.output.splitlines()), (0, [line("rf3", moved[0])]))

            second = next(i for i in moved[0].isr if i != moved[0].leader)
            cluster[second].kill()
            # the leader drops a follower that stays behind its log end for replica.lag.time.max.ms:
            # give it a log end to stay behind
            with BlockingProducer(cluster[moved[0].leader].bootstrap, acks=1) as producer:
                producer.send_and_wait("rf3", b"after the second kill", partition=0, timeout_s=30)
            shrunk = wait_for(lambda: [p for p in partitions(admin, "rf3") if len(p.isr) == 1 and p.leader >= 0],
                              what="an ISR of one")
            survivor = cluster[shrunk[0].leader].bootstrap
            result = cli("--bootstrap-server", survivor, "--describe", "--under-min-isr-partitions")
            self.assertEqual((result.exit_code, sorted(result.output.splitlines())),
                             (0, sorted([line("rf3", shrunk[0]), line("solo", partitions(admin, "solo")[0])])))
