"""
ZooKeeper coordination (DESIGN.md D5, D6): the kazoo bridge, the embedded
server, and Kafka's registries.
"""

from kafkatw.zookeeper.bridge import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    ZnodeStat,
    ZooKeeperClient,
    ZooKeeperError,
    ZooKeeperUnavailableError,
    parse_connect_string,
)
from kafkatw.zookeeper.embedded import EmbeddedZooKeeperService, find_free_port
from kafkatw.zookeeper.registry import BrokerIdInUseError, Registry, assign_replicas
from kafkatw.zookeeper.zk_data import BrokerInfo, PartitionState, TopicAssignment

__all__ = [
    "BadVersionError",
    "NodeExistsError",
    "NoNodeError",
    "NotEmptyError",
    "ZnodeStat",
    "ZooKeeperClient",
    "ZooKeeperError",
    "ZooKeeperUnavailableError",
    "parse_connect_string",
    "EmbeddedZooKeeperService",
    "find_free_port",
    "BrokerIdInUseError",
    "BrokerInfo",
    "PartitionState",
    "Registry",
    "TopicAssignment",
    "assign_replicas",
]
