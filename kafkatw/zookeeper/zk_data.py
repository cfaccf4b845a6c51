"""
Kafka's C{ZkData} for kafkatw: where each znode lives, and the bytes it holds.

The registries are laid out as Kafka 0.8-2.x lays them out (DESIGN.md D6),
under the client's chroot (default C{/kafkatw}); the operations on them are
L{kafkatw.zookeeper.registry.Registry} (Kafka's C{KafkaZkClient})::

    /brokers/ids/<id>                          ephemeral  broker registration (JSON v5)
    /brokers/topics/<topic>                    persistent partition -> replicas (JSON v3, topic_id)
    /brokers/topics/<topic>/partitions/<p>/state  persistent leader, leader_epoch, isr
    /config/topics/<topic>                     persistent topic config overrides
    /config/brokers/<id> and /config/brokers/<default>  dynamic broker configs
    /config/users/<user>                       persistent SCRAM credentials (never passwords) and quotas
    /config/users/<user>/clients/<client-id>   persistent client quotas (kafkatw/broker/quota_manager.py)
    /config/clients/<client-id>                persistent client quotas
    /config/changes/config_change_NNNNNNNNNN   persistent sequential change notifications
    /controller                                ephemeral  controller's broker id
    /controller_epoch                          persistent controller epoch (decimal)
    /log_dir_event_notification/log_dir_event_<seq>  persistent a broker's log dir failed (JSON v1, KIP-112)
    /latest_producer_id_block                  persistent last producer-id block handed out
    /consumers/<group>/offsets/<topic>/<p>     persistent committed offset (JSON v1, see below)
    /group_coordinator/candidates/<id>         ephemeral  a broker taking part in group coordinator elections
    /group_coordinator/holders/<n>             ephemeral  coordinator of the groups of __consumer_offsets-<n> (JSON v1)
    /group_coordinator/epochs/<n>              persistent its coordinator epoch (decimal) = the znode's version
    /kafka-acl/<ResourceType>/<name>           persistent literal ACLs (JSON v1, see below)
    /kafka-acl-extended/prefixed/<ResourceType>/<name>  persistent prefixed ACLs (JSON v1)
    /kafka-acl-changes/acl_changes_<seq>       persistent literal ACL change: C{TOPIC:<name>}
    /kafka-acl-extended-changes/acl_changes_<seq>  persistent prefixed ACL change (JSON v1)

ACLs are where Kafka's ZooKeeper authorizer keeps them (C{kafka.zk.ZkAclStore},
KIP-290), one znode per resource pattern; C{<ResourceType>} is C{Topic},
C{Group}, C{Cluster} or C{TransactionalId} and the value lists its entries::

    {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}

It is rewritten conditionally on the version read (L{kafkatw.zookeeper.registry.Registry.update_acls}), then
a sequential change node names the pattern -- C{TOPIC:orders} for a literal
one, C{{"version":1,"resourceType":"TOPIC","name":"orders-","patternType":"PREFIXED"}}
for a prefixed one -- and every broker re-reads that pattern (L{kafkatw.zookeeper.registry.Registry.watch_acl_changes}).

A committed offset (L{encode_committed_offset}) is the I{next offset to
consume}, as both Kafka's OffsetCommit and the paper's consumers mean it::

    {"version":1,"offset":42,"leader_epoch":-1,"metadata":"","commit_timestamp":1700000000000}

Readers also accept Kafka 0.8's bare decimal (C{42}).  A group id is one path
component: L{group_path} percent-encodes it (C{/} and other unsafe characters;
C{my-group} stays C{my-group}).

Committed offsets are written fenced (L{kafkatw.zookeeper.registry.Registry.set_committed_offsets}): one
multi that checks the version of the writer's C{/group_coordinator/epochs/<n>}
and sets every offset of the batch, so a deposed group coordinator writes
nothing (docs/consumer-groups.md, "Which broker coordinates a group").  A
holder is::

    {"version":1,"brokerid":1,"coordinator_epoch":7,"timestamp":"1700000000000"}

The JSON is byte-for-byte the shape Kafka's C{kafka.zk.ZkData} writes (Kafka 3.0
source): e.g. a broker::

    {"version":5,"host":"h","port":9092,"endpoints":["PLAINTEXT://h:9092"],
     "listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"jmx_port":-1,
     "features":{},"timestamp":"1700000000000"}     (+ "rack":"r" when set)

(kafkatw adds C{"offline_log_dirs":{"/var/lib/kafkatw/b":{"orders":[0,2]}}} while
some of its log dirs are offline: L{kafkatw.zookeeper.registry.Registry.set_offline_log_dirs})

and a topic (C{topic_id} is the Kafka C{Uuid} string: URL-safe base64 of the 16
bytes, unpadded)::

    {"version":3,"partitions":{"0":[1,2]},"adding_replicas":{},"removing_replicas":{},
     "topic_id":"..."}
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from kafkatw.security.acl import PatternType, ResourcePattern, ResourceType

__all__ = [
    "BROKER_IDS_PATH",
    "TOPICS_PATH",
    "CONFIG_TOPICS_PATH",
    "CONFIG_BROKERS_PATH",
    "CONFIG_USERS_PATH",
    "DEFAULT_BROKER_ENTITY",
    "CONFIG_CHANGES_PATH",
    "CONFIG_CHANGE_PREFIX",
    "CONTROLLER_PATH",
    "CONTROLLER_EPOCH_PATH",
    "PRODUCER_ID_BLOCK_PATH",
    "CONSUMERS_PATH",
    "LOG_DIR_EVENT_NOTIFICATION_PATH",
    "LOG_DIR_EVENT_PREFIX",
    "LOG_DIR_FAILURE_EVENT",
    "GROUP_COORDINATOR_PATH",
    "GROUP_COORDINATOR_CANDIDATES_PATH",
    "GROUP_COORDINATOR_HOLDERS_PATH",
    "GROUP_COORDINATOR_EPOCHS_PATH",
    "LITERAL_ACL_PATH",
    "PREFIXED_ACL_PATH",
    "LITERAL_ACL_CHANGES_PATH",
    "EXTENDED_ACL_CHANGES_PATH",
    "ACL_CHANGE_PATHS",
    "ACL_CHANGE_PREFIX",
    "BrokerInfo",
    "BrokerRegistration",
    "TopicAssignment",
    "PartitionState",
    "GroupCoordinatorHolder",
    "CommittedOffset",
    "encode_broker",
    "decode_broker",
    "decode_offline_replicas",
    "encode_topic",
    "decode_topic",
    "topic_id_to_string",
    "topic_id_from_string",
    "partition_state_path",
    "encode_partition_state",
    "decode_partition_state",
    "user_entity_name",
    "encode_config",
    "decode_config",
    "encode_config_change",
    "encode_log_dir_event",
    "encode_producer_id_block",
    "encode_controller",
    "decode_controller",
    "group_path",
    "group_from_path_component",
    "consumer_offset_path",
    "encode_committed_offset",
    "decode_committed_offset",
    "group_coordinator_holder_path",
    "group_coordinator_epoch_path",
    "encode_group_coordinator_holder",
    "acl_path",
    "encode_acl_change",
    "decode_acl_change",
]

BROKER_IDS_PATH = "/brokers/ids"
TOPICS_PATH = "/brokers/topics"
CONFIG_TOPICS_PATH = "/config/topics"
CONFIG_BROKERS_PATH = "/config/brokers"
CONFIG_USERS_PATH = "/config/users"
#: The entity name of the cluster-wide broker config (Kafka's ConfigEntityName.Default).
DEFAULT_BROKER_ENTITY = "<default>"
#: Sequential config change notifications (Kafka's ConfigEntityChangeNotificationZNode).
CONFIG_CHANGES_PATH = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
CONTROLLER_PATH = "/controller"
CONTROLLER_EPOCH_PATH = "/controller_epoch"
PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
CONSUMERS_PATH = "/consumers"
#: Kafka's C{LogDirEventNotificationZNode}: a broker whose log dir failed
#: creates C{log_dir_event_<sequence>} holding C{{"version":1,"broker":<id>,"event":1}}
#: (KIP-112); the controller reads and deletes it.
LOG_DIR_EVENT_NOTIFICATION_PATH = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
#: Kafka's C{LogDirEventNotificationHandler.LogDirFailureEvent}
LOG_DIR_FAILURE_EVENT = 1
#: Group coordinator elections (L{kafkatw.zookeeper.registry.Registry.claim_group_coordinator}).
GROUP_COORDINATOR_PATH = "/group_coordinator"
GROUP_COORDINATOR_CANDIDATES_PATH = f"{GROUP_COORDINATOR_PATH}/candidates"
GROUP_COORDINATOR_HOLDERS_PATH = f"{GROUP_COORDINATOR_PATH}/holders"
GROUP_COORDINATOR_EPOCHS_PATH = f"{GROUP_COORDINATOR_PATH}/epochs"
LITERAL_ACL_PATH = "/kafka-acl"
PREFIXED_ACL_PATH = "/kafka-acl-extended/prefixed"
LITERAL_ACL_CHANGES_PATH = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES_PATH = "/kafka-acl-extended-changes"
#: The change-notification paths, literal first.
ACL_CHANGE_PATHS = (LITERAL_ACL_CHANGES_PATH, EXTENDED_ACL_CHANGES_PATH)
ACL_CHANGE_PREFIX = "acl_changes_"


@dataclass(frozen=True)
class BrokerInfo:
    """
    A registered broker: its PLAINTEXT endpoint (else its first), its rack,
    and every listener's endpoint.

    @ivar endpoints: C{(listener name, host, port)} per listener; empty means
        the one C{PLAINTEXT} listener at C{host:port}.
    @ivar protocol_map: C{(listener name, security protocol)} pairs.
    """

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()
    protocol_map: tuple[tuple[str, str], ...] = ()
    #: the broker's process started after an unclean shutdown (KIP-966's
    #: unclean-shutdown registration): its logs may have lost what was not flushed.
    unclean_shutdown: bool = False
    #: kafkatw's addition: the port of the broker's HTTP port (C{metrics.port}:
    #: C{/metrics}, the console); C{None} when it has none.
    metrics_port: int | None = None
    #: kafkatw's addition: the host other brokers reach that HTTP port at
    #: (from C{metrics.bind.address}); C{None} in registrations written
    #: without it (kafkatw before it, Kafka), where it was bound on 127.0.0.1.
    metrics_host: str | None = None

    def address(self, listener: str) -> tuple[str, int] | None:
        """The C{(host, port)} of C{listener}, or C{None} when the broker has no such listener."""
        if not self.endpoints:
            return (self.host, self.port) if listener == "PLAINTEXT" else None
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True)
class TopicAssignment:
    """A topic's id and its partition -> replica broker ids (first is preferred leader)."""

    name: str
    topic_id: uuid.UUID
    partitions: dict[int, list[int]] = field(default_factory=dict)
    #: partition -> replicas being added / removed by an ongoing reassignment (KIP-455).
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)
    #: the znode version it was read at (-1: not read from ZooKeeper).
    zk_version: int = field(default=-1, compare=False)


@dataclass(frozen=True)
class BrokerRegistration:
    """
    A registration of C{/brokers/ids/<id>} as the controller reads it.

    @ivar broker_epoch: the znode's C{czxid} (KIP-380): it grows with every
        registration, so a broker that restarted, or registered again in a
        new session, has a larger one.
    @ivar offline_replicas: the partitions whose replicas are in failed log dirs (KIP-112).
    @ivar unclean_shutdown: the process started after an unclean shutdown
        (L{encode_broker}).
    @ivar unclean_shutdown_epoch: with C{unclean_shutdown}, the broker epoch
        of the process's first registration, when this one is a later one (a
        new session's); else -1 (the restart is at C{broker_epoch}).
    """

    broker_epoch: int
    offline_replicas: set[tuple[str, int]]
    unclean_shutdown: bool
    unclean_shutdown_epoch: int = -1

    @property
    def restart_epoch(self) -> int:
        """The broker epoch of the process's restart after an unclean shutdown (its first registration)."""
        return self.unclean_shutdown_epoch if self.unclean_shutdown_epoch >= 0 else self.broker_epoch


@dataclass(frozen=True)
class PartitionState:
    """C{/brokers/topics/<t>/partitions/<p>/state}; C{zk_version} is the znode version (for CAS)."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int = 1
    zk_version: int = -1
    #: the zxid of the znode's last write (C{-1}: not known), to compare with a
    #: broker's epoch (the C{czxid} of its registration, KIP-380): a state
    #: written before a broker registered was written for its previous process.
    mzxid: int = field(default=-1, compare=False)
    #: the eligible leader replicas (KIP-966): replicas that left the ISR while
    #: it was smaller than C{min.insync.replicas}, and so hold every record
    #: below the high watermark (which does not move meanwhile)
    elr: list[int] = field(default_factory=list)
    #: beside C{elr}, for each of them the C{mzxid} of the last state that
    #: held it in the ISR (-1: not known): the process it was in sync in is
    #: the one registered before that (L{elr_isr_zxid})
    elr_isr_zxids: list[int] = field(default_factory=list)
    #: the C{mzxid} of the state that began this leader epoch (its election),
    #: carried by the writes that keep the epoch (ISR changes); -1: not
    #: written, the state began it itself (L{epoch_start_zxid})
    leader_epoch_zxid: int = field(default=-1, compare=False)
    #: beside C{isr}, for each member the C{mzxid} of the state that took it
    #: into the ISR, carried by later writes (-1: this state did, or not
    #: known; L{isr_join_zxid})
    isr_zxids: list[int] = field(default_factory=list, compare=False)

    @property
    def epoch_start_zxid(self) -> int:
        """
        The zxid at which this leader epoch began: the C{mzxid} of its
        election (-1: not known).  A leader that registered after an unclean
        shutdown at a later zxid is not the process that was elected, however
        late the state's last ISR change was written.
        """
        return self.leader_epoch_zxid if self.leader_epoch_zxid >= 0 else self.mzxid

    def isr_join_zxid(self, broker: int) -> int:
        """
        The zxid at which ISR member C{broker} joined the ISR: the C{mzxid}
        of the state that took it in (this state's own when it did, or when
        not known; -1 when that is not known either).  A member that
        registered after an unclean shutdown at a later zxid is not the
        process that was in sync, whoever wrote the state since (KIP-903's
        broker epochs of the ISR members, in ZooKeeper's terms).
        """
        zxid = _beside(self.isr, self.isr_zxids, broker)
        return zxid if zxid >= 0 else self.mzxid

    def elr_isr_zxid(self, broker: int) -> int:
        """
        The C{mzxid} of the last state that held eligible leader replica
        C{broker} in the ISR, -1 when not known (a state written without it).
        A broker that registered after an unclean shutdown at a later zxid
        (its L{BrokerRegistration.restart_epoch}) is not the process that was
        in sync: it may have lost records below the high watermark.
        """
        return _beside(self.elr, self.elr_isr_zxids, broker)


def _beside(members: list[int], zxids: list[int], broker: int) -> int:
    """The zxid beside C{broker} in C{members} (a list as long or shorter: an older writer's), -1 when none."""
    for member, zxid in zip(members, zxids):
        if member == broker:
            return zxid
    return -1


def _padded(zxids: list[int] | None, members: list[int]) -> list[int]:
    """C{zxids} cut or filled with -1 to one beside each of C{members}."""
    zxids = list(zxids or ())[:len(members)]
    return zxids + [-1] * (len(members) - len(zxids))


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def topic_id_to_string(topic_id: uuid.UUID) -> str:
    """Kafka's C{Uuid.toString}: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def topic_id_from_string(text: str) -> uuid.UUID:
    """Inverse of L{topic_id_to_string}."""
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def encode_broker(host: str, port: int, rack: str | None = None, timestamp_ms: str | None = None,
                  endpoints: Any = None, protocol_map: Any = None,
                  offline_log_dirs: dict[str, list[tuple[str, int]]] | None = None,
                  unclean_shutdown: bool = False, metrics_port: int | None = None,
                  metrics_host: str | None = None, unclean_shutdown_epoch: int | None = None) -> bytes:
    """
    The v5 JSON of C{/brokers/ids/<id>} (Kafka's C{BrokerIdZNode.encode}).

    @param endpoints: C{(listener, host, port)} per listener (default: one
        C{PLAINTEXT} listener at C{host:port}); C{host} and C{port} are
        then the PLAINTEXT listener's, or C{null} and -1 without one, as Kafka writes.
    @param protocol_map: listener -> security protocol (default: each listener's name).
    @param offline_log_dirs: kafkatw's addition, only when some log dir
        failed (KIP-112): offline log dir -> the partitions whose replicas
        were there, written as C{"offline_log_dirs": {dir: {topic:
        [partition, ...]}}} (Kafka learns them from LeaderAndIsr
        responses, which kafkatw has not; Kafka's readers ignore the key).
    @param unclean_shutdown: kafkatw's addition, only when true: the
        broker's process started after an unclean shutdown (a crash or
        SIGKILL), so its logs may have lost records that were not flushed
        (KIP-966 tells the controller the same at registration); written
        as C{"unclean_shutdown": true}.
    @param unclean_shutdown_epoch: kafkatw's addition, with
        C{unclean_shutdown}, in a registration after the process's first (a
        new session's): the broker epoch of that first registration, written
        as C{"unclean_shutdown_epoch": E}.  The restart is at that epoch; a
        state written since names the broker for what it did after it.
    @param metrics_port: kafkatw's addition, only with an HTTP port: its
        port (C{metrics.port}), written as C{"metrics_port": N}, where the
        consoles of the other brokers read this broker's counters (Kafka
        writes its JMX port in C{jmx_port} for the same use; its readers
        ignore the key).
    @param metrics_host: kafkatw's addition, only with an HTTP port: the
        host (name or IP address) that port is reached at
        (C{metrics.bind.address}, or the inter-broker listener's advertised
        host when it binds every interface), written as C{"metrics_host": "H"}.
    """
    if endpoints:
        plaintext = [(h, p) for name, h, p in endpoints if name == "PLAINTEXT"]
        host, port = plaintext[0] if plaintext else (None, -1)  # type: ignore[assignment]
    else:
        endpoints = [("PLAINTEXT", host, port)]
    protocols = dict(protocol_map or {name: name for name, _, _ in endpoints})

    def uri(name: str, h: str, p: int) -> str:
        return f"{name}://[{h}]:{p}" if ":" in h else f"{name}://{h}:{p}"

    body: dict[str, Any] = {
        "version": 5,
        "host": host,
        "port": port,
        "endpoints": [uri(name, h, p) for name, h, p in endpoints],
        "listener_security_protocol_map": {name: protocols[name] for name, _, _ in endpoints},
        "jmx_port": -1,
        "features": {},
        "timestamp": timestamp_ms or _now_ms(),
    }
    if rack is not None:
        body["rack"] = rack
    if offline_log_dirs:
        offline: dict[str, dict[str, list[int]]] = {}
        for log_dir, partitions in sorted(offline_log_dirs.items()):
            by_topic = offline[log_dir] = {}
            for topic, partition in sorted(partitions):
                by_topic.setdefault(topic, []).append(partition)
        body["offline_log_dirs"] = offline
    if unclean_shutdown:
        body["unclean_shutdown"] = True
        if unclean_shutdown_epoch is not None:
            body["unclean_shutdown_epoch"] = unclean_shutdown_epoch
    if metrics_port is not None:
        body["metrics_port"] = metrics_port
        if metrics_host is not None:
            body["metrics_host"] = metrics_host
    return _dumps(body)


def decode_broker(broker_id: int, data: bytes) -> BrokerInfo:
    """Read any broker JSON version 1-5; the PLAINTEXT endpoint (else the first) is C{host:port}."""
    body = json.loads(data)
    host, port = body.get("host"), body.get("port")
    endpoints = []
    for endpoint in body.get("endpoints") or []:
        listener, _, address = endpoint.partition("://")
        h, _, p = address.rpartition(":")
        endpoints.append((listener, h.strip("[]"), int(p)))
    plaintext = [e for e in endpoints if e[0] == "PLAINTEXT"]
    if plaintext or (endpoints and (host is None or port in (None, -1))):
        _, host, port = (plaintext or endpoints)[0]
    protocols = body.get("listener_security_protocol_map") or {}
    return BrokerInfo(broker_id, host, int(port), body.get("rack"), tuple(endpoints),
                      tuple(sorted(protocols.items())), bool(body.get("unclean_shutdown", False)),
                      body.get("metrics_port"), body.get("metrics_host"))


def decode_offline_replicas(data: bytes) -> set[tuple[str, int]]:
    """The partitions in a broker registration's C{offline_log_dirs} (empty without them)."""
    body = json.loads(data)
    offline = body.get("offline_log_dirs") or {}
    return {(topic, int(p)) for by_topic in offline.values() for topic, partitions in by_topic.items()
            for p in partitions}


def encode_topic(topic_id: uuid.UUID, partitions: dict[int, list[int]],
                 adding: dict[int, list[int]] | None = None, removing: dict[int, list[int]] | None = None) -> bytes:
    """The JSON of C{/brokers/topics/<topic>} (Kafka's C{TopicZNode.encode}, v3)."""
    return _dumps(
        {
            "version": 3,
            "partitions": {str(p): list(r) for p, r in sorted(partitions.items())},
            "adding_replicas": {str(p): list(r) for p, r in sorted((adding or {}).items()) if r},
            "removing_replicas": {str(p): list(r) for p, r in sorted((removing or {}).items()) if r},
            "topic_id": topic_id_to_string(topic_id),
        }
    )


def decode_topic(name: str, data: bytes) -> TopicAssignment:
    """Kafka's C{TopicZNode.decode}: any version; without C{topic_id} (before v3) the zero id."""
    body = json.loads(data)
    text = body.get("topic_id")
    topic_id = topic_id_from_string(text) if text else uuid.UUID(int=0)
    partitions = {int(p): list(r) for p, r in (body.get("partitions") or {}).items()}
    adding = {int(p): list(r) for p, r in (body.get("adding_replicas") or {}).items()}
    removing = {int(p): list(r) for p, r in (body.get("removing_replicas") or {}).items()}
    return TopicAssignment(name, topic_id, dict(sorted(partitions.items())), adding, removing)


def encode_partition_state(leader: int, leader_epoch: int, isr: list[int], controller_epoch: int = 1,
                           elr: list[int] | None = None, elr_isr_zxids: list[int] | None = None,
                           leader_epoch_zxid: int = -1, isr_zxids: list[int] | None = None) -> bytes:
    """
    Kafka's C{TopicPartitionStateZNode.encode}; with C{elr}, kafkatw's
    C{"eligible_leader_replicas"} (KIP-966's field of the partition record,
    which Kafka's ZooKeeper mode has not; its readers ignore the key) and
    C{"eligible_leader_replica_isr_zxids"} beside it (L{PartitionState.elr_isr_zxids};
    -1 for each when not given); with C{leader_epoch_zxid} (0 or more: a
    write that keeps the leader epoch of a state whose election is known),
    kafkatw's C{"leader_epoch_zxid"} (L{PartitionState.leader_epoch_zxid});
    with C{isr_zxids} holding a known zxid, kafkatw's C{"isr_zxids"} beside
    C{"isr"} (L{PartitionState.isr_zxids}; -1 for each not given).
    """
    body: dict[str, Any] = {
        "version": 1,
        "leader": leader,
        "leader_epoch": leader_epoch,
        "controller_epoch": controller_epoch,
        "isr": list(isr),
    }
    if elr:
        body["eligible_leader_replicas"] = list(elr)
        body["eligible_leader_replica_isr_zxids"] = _padded(elr_isr_zxids, elr)
    if leader_epoch_zxid >= 0:
        body["leader_epoch_zxid"] = leader_epoch_zxid
    if isr_zxids and any(z >= 0 for z in isr_zxids):
        body["isr_zxids"] = _padded(isr_zxids, isr)
    return _dumps(body)


def decode_partition_state(data: bytes, zk_version: int, mzxid: int = -1) -> PartitionState:
    """Kafka's C{TopicPartitionStateZNode.decode}, with the znode version (and its last write's zxid)."""
    body = json.loads(data)
    return PartitionState(body["leader"], body["leader_epoch"], list(body["isr"]),
                          body.get("controller_epoch", 1), zk_version, mzxid,
                          list(body.get("eligible_leader_replicas") or ()),
                          list(body.get("eligible_leader_replica_isr_zxids") or ()),
                          int(body.get("leader_epoch_zxid", -1)),
                          list(body.get("isr_zxids") or ()))


def partition_state_path(topic: str, partition: int) -> str:
    """C{/brokers/topics/<topic>/partitions/<partition>/state} (Kafka's C{TopicPartitionStateZNode.path})."""
    return f"{TOPICS_PATH}/{topic}/partitions/{partition}/state"


def user_entity_name(user: str) -> str:
    """
    The znode name of a user, as Kafka's C{Sanitizer.sanitize} writes it: URL
    encoding with C{%20} for a space and C{%2A} for C{*} (C{alice} stays
    C{alice}).
    """
    return quote(user, safe="-._").replace("~", "%7E")


def decode_config(data: bytes | None) -> dict[str, str]:
    """The C{config} of a C{/config/...} znode's v1 JSON ({} when empty or missing)."""
    return dict(json.loads(data).get("config") or {}) if data else {}


def encode_config(config: dict[str, str]) -> bytes:
    """
    The v1 JSON of a C{/config/<entity type>/<name>} znode (Kafka's
    C{ConfigEntityZNode.encode}): C{{"version":1,"config":{key: value}}}.
    """
    return _dumps({"version": 1, "config": dict(config)})


def encode_config_change(entity_path: str) -> bytes:
    """
    The v2 JSON of a C{/config/changes/config_change_<n>} notification (Kafka's
    C{ConfigEntityChangeNotificationSequenceZNode.encode}):
    C{{"version":2,"entity_path":"users/alice"}}.
    """
    return _dumps({"version": 2, "entity_path": entity_path})


def encode_log_dir_event(broker_id: int) -> bytes:
    """
    The v1 JSON of a C{/log_dir_event_notification/log_dir_event_<n>} (Kafka's
    C{LogDirEventNotificationSequenceZNode.encode}, KIP-112):
    C{{"version":1,"broker":<id>,"event":1}}.
    """
    return _dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def encode_producer_id_block(broker_id: int, start: int, end: int) -> bytes:
    """
    The v1 JSON of C{/latest_producer_id_block} (Kafka's
    C{ProducerIdBlockZNode.generateProducerIdBlockJson}): the block
    C{start..end} (inclusive) C{broker_id} claimed, both as decimal strings.
    """
    return _dumps({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)})


def encode_controller(broker_id: int) -> bytes:
    """
    The v1 JSON of C{/controller} (Kafka's C{ControllerZNode.encode}):
    C{{"version":1,"brokerid":<id>,"timestamp":"<ms>"}}, stamped now.
    """
    return _dumps({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})


def decode_controller(data: bytes) -> int:
    """
    The controller's broker id in C{/controller} (Kafka's C{ControllerZNode.decode}).

    @raise ValueError: not JSON (C{json.JSONDecodeError}).
    @raise KeyError: no C{brokerid}.
    """
    return int(json.loads(data)["brokerid"])


@dataclass(frozen=True)
class GroupCoordinatorHolder:
    """
    The holder of C{/group_coordinator/holders/<partition>}.

    @ivar broker_id: the coordinating broker.
    @ivar coordinator_epoch: the version of C{/group_coordinator/epochs/<partition>}
        its claim set: its writes check it.
    @ivar session_id: the ZooKeeper session that owns the (ephemeral) holder znode.
    """

    broker_id: int
    coordinator_epoch: int
    session_id: int


def group_coordinator_holder_path(partition: int) -> str:
    """C{/group_coordinator/holders/<partition>}: ephemeral, the broker coordinating the partition's groups."""
    return f"{GROUP_COORDINATOR_HOLDERS_PATH}/{partition}"


def group_coordinator_epoch_path(partition: int) -> str:
    """C{/group_coordinator/epochs/<partition>}: persistent; its znode version is the coordinator epoch."""
    return f"{GROUP_COORDINATOR_EPOCHS_PATH}/{partition}"


@dataclass(frozen=True)
class CommittedOffset:
    """
    A group's committed position in one partition.

    @ivar offset: the next offset to consume.
    @ivar leader_epoch: the leader epoch of the last consumed record (-1: unknown), KIP-320.
    @ivar metadata: the client's metadata string.
    @ivar commit_timestamp_ms: when the coordinator accepted the commit (ms since the epoch; -1: unknown).
    """

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp_ms: int = -1


def group_path(group: str) -> str:
    """C{/consumers/<group>} with the group id percent-encoded into one path component."""
    name = quote(group, safe="")
    if name in (".", ".."):
        name = name.replace(".", "%2E")
    return f"{CONSUMERS_PATH}/{name}"


def group_from_path_component(name: str) -> str:
    """Inverse of the encoding of L{group_path}."""
    return unquote(name)


def consumer_offset_path(group: str, topic: str, partition: int) -> str:
    """C{/consumers/<group>/offsets/<topic>/<partition>}."""
    return f"{group_path(group)}/offsets/{topic}/{partition}"


def encode_committed_offset(committed: CommittedOffset) -> bytes:
    """The JSON v1 value of an offset znode (see the module docstring)."""
    return _dumps({"version": 1, "offset": committed.offset, "leader_epoch": committed.leader_epoch,
                   "metadata": committed.metadata, "commit_timestamp": committed.commit_timestamp_ms})


def decode_committed_offset(data: bytes) -> CommittedOffset | None:
    """
    Read an offset znode: JSON v1, or Kafka 0.8's bare decimal.

    @return: C{None} for an empty or unreadable value.
    """
    text = data.decode("utf-8", "replace").strip()
    if not text:
        return None
    if text.lstrip("-").isdigit():
        return CommittedOffset(int(text))
    try:
        body = json.loads(text)
        return CommittedOffset(int(body["offset"]), int(body.get("leader_epoch", -1)),
                               str(body.get("metadata") or ""), int(body.get("commit_timestamp", -1)))
    except (ValueError, KeyError, TypeError):
        return None


def encode_group_coordinator_holder(broker_id: int, coordinator_epoch: int) -> bytes:
    """
    The v1 JSON of C{/group_coordinator/holders/<n>} (see the module
    docstring), stamped now.
    """
    return _dumps({"version": 1, "brokerid": broker_id, "coordinator_epoch": coordinator_epoch,
                   "timestamp": _now_ms()})


def acl_path(pattern: ResourcePattern) -> str:
    """The znode of a pattern's ACLs (Kafka's C{ResourceZNode.path})."""
    root = LITERAL_ACL_PATH if pattern.pattern_type == PatternType.LITERAL else PREFIXED_ACL_PATH
    return f"{root}/{pattern.resource_type.kafka_name}/{pattern.name}"


def encode_acl_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """
    The change store and value of a notification about C{pattern} (Kafka's
    C{LiteralAclChangeStore} and C{ExtendedAclChangeStore}).
    """
    if pattern.pattern_type == PatternType.LITERAL:
        return LITERAL_ACL_CHANGES_PATH, f"{pattern.resource_type.name}:{pattern.name}".encode()
    return EXTENDED_ACL_CHANGES_PATH, _dumps({"version": 1, "resourceType": pattern.resource_type.name,
                                              "name": pattern.name, "patternType": pattern.pattern_type.name})


def decode_acl_change(store: str, data: bytes) -> ResourcePattern:
    """
    The pattern a change notification names.

    @raise ValueError: a value neither format reads.
    """
    if store == LITERAL_ACL_CHANGES_PATH:
        kind, sep, name = data.decode().partition(":")
        if not sep:
            raise ValueError(f"expected ResourceType:ResourceName, got {data!r}")
        return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)  # type: ignore[arg-type]
    body = json.loads(data)
    return ResourcePattern(ResourceType.parse(body["resourceType"]), body["name"],  # type: ignore[arg-type]
                           PatternType.parse(body["patternType"]))  # type: ignore[arg-type]
