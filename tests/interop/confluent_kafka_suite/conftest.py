"""
confluent-kafka-python's own integration tests (KIP-848 consumer tests and
KIP-932 share-consumer tests, see README.md here) run against kafkatw.

Their files are kept unmodified; this module is everything that adapts them,
and is kafkatw's code:

  - C{tests.common}, which their tests import, is their C{common/__init__.py}
    here (aliased in C{sys.modules}: the repository's own C{tests} package
    has no C{common});
  - their C{kafka_cluster} fixture (their C{tests/integration/cluster_fixture.py},
    which starts Apache Kafka with trivup and a Schema Registry) is
    L{KafkatwCluster}: one real ZooKeeper and one kafkatw broker
    (L{kafkatw.testing.running_cluster}) with their broker settings
    (L{THEIRS}) and short group waits (L{FAST});
  - their consumer tests run with C{TEST_CONSUMER_GROUP_PROTOCOL=consumer}
    (KIP-848; set it to C{classic} to run them with the classic protocol);
  - C{kafka-configs.sh}, which two share-consumer tests call to set client
    quotas, is C{kafkatw configs} (it takes Kafka's flags), through
    C{KAFKA_HOME};
  - the tests that cannot apply to kafkatw are skipped with the reason
    (L{CANNOT_APPLY}); the slowest tests run only with
    C{KAFKATW_CONFLUENT_SUITE=full} (L{FULL_ONLY}), to keep the default run
    within its share of CI's time.

Run: C{./scripts/test.sh tests/interop/confluent_kafka_suite} (the default
selection) or C{KAFKATW_CONFLUENT_SUITE=full ./scripts/test.sh
tests/interop/confluent_kafka_suite} (all of them).
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import pathlib
import shutil
import sys
import tempfile
import time
from typing import Any
from uuid import uuid1

import pytest

HERE = pathlib.Path(__file__).resolve().parent

os.environ.setdefault("TEST_CONSUMER_GROUP_PROTOCOL", "consumer")


def _load_their_common() -> Any:
    """Their C{tests/common/__init__.py} (this directory's C{common/}) as C{tests.common}."""
    if "tests.common" in sys.modules:
        return sys.modules["tests.common"]
    spec = importlib.util.spec_from_file_location("tests.common", HERE / "common" / "__init__.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tests.common"] = module
    spec.loader.exec_module(module)
    return module


common = _load_their_common()

from confluent_kafka import DeserializingConsumer, Producer, SerializingProducer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kafkatw.config import BrokerConfig  # noqa: E402
from kafkatw.testing import running_cluster  # noqa: E402

#: Their broker settings (C{TestUtils.broker_conf()}: internal topics at RF 1, a 1 s acquisition lock
#: and the bound that allows it), less C{offsets.topic.replication.factor} (kafkatw keeps committed
#: offsets in ZooKeeper).
THEIRS = {
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.share.record.lock.duration.ms": "1000",
    "group.share.min.record.lock.duration.ms": "1000",
    # their broker's default (Kafka's since 4.1: 2000; kafkatw keeps 4.0's 200): with 200, records a member
    # acquired from partitions it then lost to a new member hold the partition's every lock until they expire
    # (test_commit_handles_high_volume_across_two_consumers: over 60 s instead of 4 s)
    "group.share.partition.max.record.locks": "2000",
}

#: Short group waits: a classic group's first assignment is not delayed by 3 s
#: (group.initial.rebalance.delay.ms), a KIP-848 or share member is told to heartbeat every 0.5 s
#: instead of 5 s, and one that vanished is removed after 10 s instead of 45 s; the internal topics
#: have few partitions, so they are created in a moment.  Measured: their rebalance and share tests
#: sampled (test_cooperative_rebalance_1 and _2, test_incremental_assign, test_three_consumers_no_overlap,
#: test_concurrent_consumers, test_close_releases_inflight_to_group, test_implicit_ack_no_redelivery)
#: take the same time with the broker's defaults -- librdkafka heartbeats at once when its assignment
#: changes, and their time is their own sleeps and windows -- so these only shorten the paths that
#: wait for a heartbeat or a session timeout.  What makes the suite fast is
#: L{KafkatwCluster.create_topic_and_wait_propogation} (theirs sleeps 1 s after each of its ~150
#: topics) and their own 1 s acquisition lock (L{THEIRS}; kafkatw's default is 30 s).
FAST = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": "10000",
    "group.share.heartbeat.interval.ms": "500",
    "group.share.session.timeout.ms": "10000",
    # the bounds a group config is checked within, merged with these defaults (Kafka's GroupConfig)
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.min.session.timeout.ms": "10000",
    "group.share.min.heartbeat.interval.ms": "500",
    "group.share.min.session.timeout.ms": "10000",
    "share.coordinator.state.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
}


def broker_settings() -> dict[str, str]:
    """L{THEIRS} and L{FAST}, less any key this build of kafkatw does not have (a broker refuses those)."""
    return {key: value for key, value in {**THEIRS, **FAST}.items() if BrokerConfig.knows(key)}

#: Their tests that cannot apply to kafkatw: node id (relative to this directory) -> why.
CANNOT_APPLY: dict[str, str] = {
    "consumer/test_consumer_upgrade_downgrade.py::test_consumer_upgrade_downgrade":
        "kafkatw does not serve KIP-848's online migration between the classic and the consumer protocol "
        "(Kafka's group.consumer.migration.policy=bidirectional): a consumer-protocol member joining a classic "
        "group is answered GROUP_ID_NOT_FOUND, as Kafka's policy disabled answers (docs/consumer-groups.md); "
        "this test moves one group from one protocol to the other and back while members are in it",
}

#: Their tests run only with KAFKATW_CONFLUENT_SUITE=full (the default run keeps within its ~4 minutes of CI):
#: node id -> why: the slowest, with their time on kafkatw (one broker, a loaded 2-core machine), and one
#: that depends on thread scheduling.
FULL_ONLY: dict[str, str] = {
    "share_consumer/test_share_consumer_commit.py::test_sync_commit_releases_gil":
        "0.5 s, but it needs the OS to run a thread waiting for the GIL within the few ms of one commit's round "
        "trip: on a loaded 2-core machine it failed 4 runs of 11 (0 increments)",
    "share_consumer/test_share_consumer_callbacks.py::test_throttle_cb_emits_cleared_zero_event":
        "25 s: a consumer_byte_rate quota of 1 KB/s throttles until it clears",
    "share_consumer/test_share_consumer_ack.py::test_delivery_attempt_limit_archives_record":
        "14 s: five deliveries, each after a 1 s lock expiry",
    "share_consumer/test_share_consumer.py::test_blocking_poll_longer_than_max_poll_interval_does_not_falsely_trip":
        "14 s: polls past max.poll.interval.ms",
    "share_consumer/test_share_consumer.py::test_max_poll_interval_exceeded_then_rejoins":
        "13 s: waits out max.poll.interval.ms",
    "share_consumer/test_share_consumer_commit.py::test_explicit_commit_async_accept_persists":
        "12 s: an 8 s window of no redelivery",
    "share_consumer/test_share_consumer_commit.py::test_implicit_commit_async_persists":
        "11 s: an 8 s window of no redelivery",
    "share_consumer/test_share_consumer_commit.py::test_commit_async_spans_multiple_topics":
        "11 s: an 8 s window of no redelivery",
    "share_consumer/test_share_consumer_commit.py::test_committed_releases_archive_at_delivery_limit":
        "11 s: five deliveries and a window of no redelivery",
    "share_consumer/test_share_consumer_commit.py::test_redelivery_increments_delivery_count_and_commits":
        "9 s: lock expiries and a window of no redelivery",
    "share_consumer/test_share_consumer_commit.py::test_commit_async_then_immediate_close_persists":
        "8 s: an 8 s window of no redelivery",
    "share_consumer/test_share_consumer_commit.py::test_commit_async_inside_with_block":
        "8 s: an 8 s window of no redelivery",
    "share_consumer/test_share_consumer_commit.py::test_explicit_commit_async_reject_archives":
        "8 s: an 8 s window of no redelivery",
    "share_consumer/test_share_consumer.py::test_two_groups_earliest_vs_latest":
        "8 s: fixed waits for records that must not come",
    "share_consumer/test_share_consumer.py::test_records_before_join_not_delivered":
        "8 s: fixed waits for records that must not come",
    "share_consumer/test_share_consumer_ack.py::test_implicit_mode_autocommits_on_next_poll":
        "8 s: a window of no redelivery",
}


class KafkatwCluster:
    """
    Their C{KafkaClusterFixture} (C{tests/integration/cluster_fixture.py} of
    confluent-kafka-python), with the methods their consumer and
    share-consumer tests call, bound to kafkatw brokers.

    @param bootstrap: C{"host:port[,host:port]"} of the brokers.
    """

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._admin: AdminClient | None = None
        self._producer: SerializingProducer | None = None

    def client_conf(self, conf: dict | None = None) -> dict:
        client_conf = {"bootstrap.servers": self.bootstrap}
        if conf is not None:
            client_conf.update(conf)
        return client_conf

    @staticmethod
    def _topic_conf(conf: dict | None = None) -> dict:
        topic_conf = {"num_partitions": 1, "replication_factor": 1}
        if conf is not None:
            topic_conf.update(conf)
        return topic_conf

    def cimpl_producer(self, conf: dict | None = None) -> Producer:
        return Producer(self.client_conf(conf))

    def producer(self, conf: dict | None = None, key_serializer: Any = None,
                 value_serializer: Any = None) -> SerializingProducer:
        client_conf = self.client_conf(conf)
        if key_serializer is not None:
            client_conf["key.serializer"] = key_serializer
        if value_serializer is not None:
            client_conf["value.serializer"] = value_serializer
        return SerializingProducer(client_conf)

    def _consumer_conf(self, conf: dict | None) -> dict:
        consumer_conf = self.client_conf({"group.id": str(uuid1()), "auto.offset.reset": "earliest"})
        if conf is not None:
            consumer_conf.update(conf)
        return consumer_conf

    def cimpl_consumer(self, conf: dict | None = None) -> Any:
        return common.TestConsumer(self._consumer_conf(conf))

    def consumer(self, conf: dict | None = None, key_deserializer: Any = None,
                 value_deserializer: Any = None) -> DeserializingConsumer:
        consumer_conf = self._consumer_conf(conf)
        if key_deserializer is not None:
            consumer_conf["key.deserializer"] = key_deserializer
        if value_deserializer is not None:
            consumer_conf["value.deserializer"] = value_deserializer
        return TestDeserializingConsumer(consumer_conf)

    def _share_consumer_conf(self, conf: dict | None = None) -> dict:
        """Their share-consumer config: the group's C{share.auto.offset.reset} set (default earliest) first."""
        share_conf = self.client_conf({"group.id": str(uuid1())})
        if conf is not None:
            share_conf.update(conf)
        reset = share_conf.pop("auto.offset.reset", "earliest")
        resource = ConfigResource(ResourceType.GROUP, share_conf["group.id"], incremental_configs=[
            ConfigEntry("share.auto.offset.reset", reset, incremental_operation=AlterConfigOpType.SET)])
        for future in self.admin().incremental_alter_configs([resource]).values():
            future.result()
        return share_conf

    def share_consumer(self, conf: dict | None = None) -> Any:
        return common.TestShareConsumer(self._share_consumer_conf(conf))

    def deserializing_share_consumer(self, conf: dict | None = None, key_deserializer: Any = None,
                                     value_deserializer: Any = None) -> Any:
        share_conf = self._share_consumer_conf(conf)
        if key_deserializer is not None:
            share_conf["key.deserializer"] = key_deserializer
        if value_deserializer is not None:
            share_conf["value.deserializer"] = value_deserializer
        return common.TestDeserializingShareConsumer(share_conf)

    def admin(self, conf: dict | None = None) -> AdminClient:
        if conf:
            return AdminClient(self.client_conf(conf))
        if self._admin is None:
            self._admin = AdminClient(self.client_conf())
        return self._admin

    def create_topic(self, prefix: str, conf: dict | None = None, **create_topic_kwargs: Any) -> str:
        name = prefix + "-" + str(uuid1())
        futures = self.admin().create_topics([NewTopic(name, **self._topic_conf(conf))], **create_topic_kwargs)
        futures[name].result()
        return name

    def delete_topic(self, topic: str) -> None:
        try:
            self.admin().delete_topics([topic])[topic].result()
        except Exception as e:
            print(f"Failed to delete topic {topic}: {e}")

    def create_topic_and_wait_propogation(self, prefix: str, conf: dict | None = None,
                                          **create_topic_kwargs: Any) -> str:
        """
        Theirs sleeps 1 s after the creation ("FIXME: find a better way");
        this waits until the metadata shows a leader for every partition
        (at most 30 s).
        """
        name = self.create_topic(prefix, conf, **create_topic_kwargs)
        partitions = self._topic_conf(conf)["num_partitions"]
        deadline = time.monotonic() + 30.0
        while True:
            topic = self.admin().list_topics(name, timeout=10).topics.get(name)
            if (topic is not None and topic.error is None and len(topic.partitions) == partitions
                    and all(p.leader >= 0 for p in topic.partitions.values())):
                return name
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {name} has no leader for every partition after 30 s")
            time.sleep(0.05)

    def seed_topic(self, topic: str, value_source: Any = None, key_source: Any = None,
                   header_source: Any = None) -> None:
        """Theirs, with C{linger.ms} 5 instead of 500 (the records are the same, sooner)."""
        if self._producer is None:
            self._producer = self.producer(self.client_conf({"linger.ms": 5}))
        if value_source is None:
            value_source = [f"test-data{i}" for i in range(0, 100)]
        if key_source is None:
            key_source = [None]
        num_keys = len(key_source)
        num_headers = len(header_source) if header_source else 0
        for i, value in enumerate(value_source):
            while True:
                try:
                    if header_source is not None:
                        self._producer.produce(topic, value=value, key=key_source[i % num_keys],
                                               headers=header_source[i % (num_headers + 1)])
                    else:
                        self._producer.produce(topic, value=value, key=key_source[i % num_keys])
                    break
                except BufferError:
                    self._producer.poll(0.1)
            self._producer.poll(0.0)
        self._producer.flush()


class TestDeserializingConsumer(DeserializingConsumer):
    """Their C{tests.common.schema_registry.TestDeserializingConsumer} (that module needs avro)."""

    __test__ = False

    def __init__(self, conf: dict | None = None, **kwargs: Any) -> None:
        common.TestUtils.update_conf_group_protocol(conf)
        common.TestUtils.remove_forbidden_conf_group_protocol_consumer(conf)
        super().__init__(conf, **kwargs)


def _kafka_configs_home(base: str) -> str:
    """A C{KAFKA_HOME} whose C{bin/kafka-configs.sh} is C{kafkatw configs} (same flags)."""
    home = pathlib.Path(base) / "kafka-home"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "kafka-configs.sh"
    kafkatw = pathlib.Path(sys.executable).parent / "kafkatw"
    script.write_text(f'#!/bin/sh\nexec "{kafkatw}" configs "$@"\n')
    script.chmod(0o755)
    return str(home)


class _Shared:
    """The one cluster of this directory's tests: started by the first, stopped after the last."""

    stack: contextlib.ExitStack | None = None
    cluster: KafkatwCluster | None = None

    @classmethod
    def start(cls) -> KafkatwCluster:
        if cls.cluster is None:
            with contextlib.ExitStack() as stack:
                base = tempfile.mkdtemp(prefix="kafkatw-confluent-suite-")
                stack.callback(shutil.rmtree, base, True)
                previous_home = os.environ.get("KAFKA_HOME")
                os.environ["KAFKA_HOME"] = _kafka_configs_home(base)
                stack.callback(_restore_environment, "KAFKA_HOME", previous_home)
                brokers = stack.enter_context(running_cluster(1, broker_settings()))
                cls.cluster = KafkatwCluster(",".join(b.bootstrap for b in brokers))
                cls.stack = stack.pop_all()
        return cls.cluster

    @classmethod
    def stop(cls) -> None:
        stack, cls.stack, cls.cluster = cls.stack, None, None
        if stack is not None:
            _release_clients()
            stack.close()


def _release_clients() -> None:
    """
    The tests' clients they did not close: gone before their broker is, else
    each librdkafka handle left (and its threads) reconnects to the stopped
    broker for the rest of the run, and takes and frees descriptors under
    every later test.  Some are held only by a finished test's frames, kept
    by an exception's traceback that something outside the collector keeps
    (C{test_callback_exception_propagates_from_poll}'s sentinel, whose
    callback the share consumer holds): such exceptions lose their tracebacks.
    """
    gc.collect()
    for error in [o for o in gc.get_objects() if isinstance(o, BaseException)]:
        tb = error.__traceback__
        while tb is not None:
            if HERE in pathlib.Path(tb.tb_frame.f_code.co_filename).parents:
                error.__traceback__ = None
                break
            tb = tb.tb_next
    gc.collect()


def _restore_environment(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


@pytest.fixture(scope="module")
def kafka_cluster() -> KafkatwCluster:
    """
    One ZooKeeper and one kafkatw broker for all the tests here (their
    cluster is one broker too), started by the first test that asks and
    stopped once the run leaves this directory (L{pytest_runtest_teardown}).
    """
    return _Shared.start()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    # after the item's own teardown (their module fixture still lists topics on the cluster)
    result = yield
    if nextitem is None or HERE not in pathlib.Path(str(nextitem.path)).parents:
        _Shared.stop()
    return result


def pytest_sessionfinish(session: pytest.Session) -> None:
    _Shared.stop()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    full = os.environ.get("KAFKATW_CONFLUENT_SUITE") == "full"
    for item in items:
        path = pathlib.Path(str(item.path))
        if HERE not in path.parents:
            continue
        node = f"{path.relative_to(HERE)}::{item.name}"
        base = node.split("[", 1)[0]
        if base in CANNOT_APPLY:
            item.add_marker(pytest.mark.skip(reason=f"cannot apply to kafkatw: {CANNOT_APPLY[base]}"))
            continue
        if not full and base in FULL_ONLY:
            item.add_marker(pytest.mark.skip(reason=f"KAFKATW_CONFLUENT_SUITE=full only: {FULL_ONLY[base]}"))
