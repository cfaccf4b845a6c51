"""
kafkatw's Kafka clients (guide: docs/clients.md; design: docs/design.md, Clients).

The public API, pinned by C{tests/unit/test_exports.py}:

  - Twisted (everything takes the reactor as its first argument):
    L{KafkaClient} (metadata and broker connections, shareable),
    L{Producer} (L{Producer.send} fires with a L{RecordMetadata}; with a
    C{transactional_id}, transactions whose consumer-group side is a
    L{GroupMetadata}),
    L{Consumer} (L{Consumer.poll} fires with L{ConsumerRecord}s; partitions
    assigned by hand, or with a C{group_id} by a consumer group coordinated by
    a broker, Kafka's classic protocol: L{Consumer.subscribe}, told of
    rebalances through a L{ConsumerRebalanceListener}),
    L{ShareConsumer} (a share group member, KIP-932: L{ShareConsumer.poll}
    fires with L{ShareRecord}s carrying their delivery count, each
    acknowledged with an L{AcknowledgeType}),
    L{ZookeeperConsumerGroup} (the paper's ZooKeeper-coordinated consumer
    group, section 3.2) and L{AdminClient}
    (topics, partitions, configs, offsets, the controller's requests), with
    its L{NewTopic} and L{NewPartitions}.
  - Blocking, for code without a reactor (scripts, Spark executors):
    L{BlockingProducer}, L{BlockingConsumer}, L{BlockingAdminClient} and
    L{BlockingZookeeperConsumerGroup}.
  - L{SecurityConfig}: every client's C{security=} (TLS and SASL; docs/security.md).
  - The exceptions the clients' docstrings promise beyond L{kafkatw.errors}
    (whose L{kafkatw.errors.KafkaError} subclasses carry a broker's error
    codes): L{BrokerConnectionError}, L{RequestTimedOutError},
    L{UnsupportedApiError}, L{AuthenticationFailedError}, L{TLSConfigError},
    L{KafkaTimeoutError}, L{ProducerClosedError},
    L{IllegalTransactionStateError}, L{NoOffsetForPartitionError},
    L{LogTruncationError}, L{ConsumerClosedError},
    L{ConsumerRebalanceFailedError}, L{CommitFailedError},
    L{GroupClosedError} and L{WrongProcessError} (a blocking client used in
    a forked child).

The blocking classes (and L{WrongProcessError}) are imported on first access:
their module imports crochet and registers an C{os.register_at_fork} handler,
which an application that only uses the Twisted clients need not pay for.
Importing them never installs C{twisted.internet.reactor} nor starts a thread;
the first blocking client I{made} in a process starts that process's private
reactor thread (L{kafkatw.client.blocking}).

Everything else in the submodules (C{client}, C{connection}, C{producer},
C{consumer}, C{blocking}, …) is implementation and may change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..security.tls import TLSConfigError
from .admin import AdminClient, NewPartitions, NewTopic
from .client import KafkaClient
from .connection import BrokerConnectionError, RequestTimedOutError, UnsupportedApiError
from .consumer import Consumer, ConsumerClosedError, ConsumerRecord, LogTruncationError, NoOffsetForPartitionError
from .consumer_coordinator import ConsumerRebalanceListener
from .producer import KafkaTimeoutError, Producer, ProducerClosedError, RecordMetadata
from .sasl import AuthenticationFailedError
from .security import SecurityConfig
from .share_consumer import AcknowledgeType, ShareConsumer, ShareRecord
from .transaction_manager import GroupMetadata, IllegalTransactionStateError
from .zookeeper_group import (
    CommitFailedError,
    ConsumerRebalanceFailedError,
    GroupClosedError,
    ZookeeperConsumerGroup,
)

if TYPE_CHECKING:  # pragma: no cover
    from .blocking import BlockingAdminClient, BlockingConsumer, BlockingProducer, WrongProcessError
    from .blocking_group import BlockingZookeeperConsumerGroup

__all__ = [
    "KafkaClient",
    "Producer",
    "RecordMetadata",
    "GroupMetadata",
    "Consumer",
    "ConsumerRecord",
    "ZookeeperConsumerGroup",
    "ConsumerRebalanceListener",
    "ShareConsumer",
    "ShareRecord",
    "AcknowledgeType",
    "AdminClient",
    "NewTopic",
    "NewPartitions",
    "BlockingProducer",
    "BlockingConsumer",
    "BlockingAdminClient",
    "BlockingZookeeperConsumerGroup",
    "SecurityConfig",
    # exceptions (the broker's error codes are kafkatw.errors')
    "BrokerConnectionError",
    "RequestTimedOutError",
    "UnsupportedApiError",
    "AuthenticationFailedError",
    "TLSConfigError",
    "KafkaTimeoutError",
    "ProducerClosedError",
    "IllegalTransactionStateError",
    "NoOffsetForPartitionError",
    "LogTruncationError",
    "ConsumerClosedError",
    "ConsumerRebalanceFailedError",
    "CommitFailedError",
    "GroupClosedError",
    "WrongProcessError",
]

#: Names imported on first access: name -> submodule.
_LAZY = {
    "BlockingProducer": "blocking",
    "BlockingConsumer": "blocking",
    "BlockingAdminClient": "blocking",
    "BlockingZookeeperConsumerGroup": "blocking_group",
    "WrongProcessError": "blocking",
}


def __getattr__(name: str) -> Any:
    """
    Import a blocking class (or L{WrongProcessError}) on first access (PEP 562) and cache it here.

    @raise AttributeError: C{name} is not part of this package.
    """
    submodule = _LAZY.get(name)
    if submodule is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{submodule}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
