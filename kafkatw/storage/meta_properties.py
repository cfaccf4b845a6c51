"""
C{meta.properties}: which cluster and which broker a log directory belongs to.

Every log directory holds one, written on the broker's first start with that
directory (Kafka's C{BrokerMetadataCheckpoint}, ZooKeeper mode), as a Java
properties file::

    #
    #Tue Mar 05 12:00:00 UTC 2024       <- comment header, as java.util.Properties.store writes it
    version=0                           <- format version: 0 (ZooKeeper mode; 1 is KRaft's)
    broker.id=0                         <- the broker.id the directory belongs to
    cluster.id=sIyk8bdDT-GPGIV_ntLbmA   <- /cluster/id of the cluster it belongs to

Before the broker touches anything in its log directories (no partition
directory created, no recovery, no checkpoint written), L{check_log_dirs}
compares each file with the broker's configured C{broker.id} and the cluster
id in ZooKeeper's C{/cluster/id}; a mismatch stops the start with Kafka's own
message (C{InconsistentClusterIdException}, C{InconsistentBrokerIdException},
C{InconsistentBrokerMetadataException}).  A broker pointed at another
cluster's ZooKeeper, or at another broker's data, thus refuses to start
instead of serving — and deleting — data that is not its own.

Sans-IO apart from reading and writing the files: no reactor, no ZooKeeper.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Iterable

from kafkatw.properties import parse_properties
from kafkatw.storage.files import write_atomically

__all__ = [
    "META_PROPERTIES_FILE",
    "MetaProperties",
    "MetaPropertiesError",
    "InconsistentBrokerMetadataError",
    "InconsistentClusterIdError",
    "InconsistentBrokerIdError",
    "read_meta_properties",
    "write_meta_properties",
    "check_log_dirs",
    "ensure_meta_properties",
]

META_PROPERTIES_FILE = "meta.properties"


class MetaPropertiesError(Exception):
    """A log directory's C{meta.properties} forbids the start; the message is one line for a person."""


class InconsistentBrokerMetadataError(MetaPropertiesError):
    """The log directories disagree among themselves (Kafka's C{InconsistentBrokerMetadataException})."""


class InconsistentClusterIdError(MetaPropertiesError):
    """A log directory belongs to another cluster (Kafka's C{InconsistentClusterIdException})."""


class InconsistentBrokerIdError(MetaPropertiesError):
    """A log directory belongs to another broker id (Kafka's C{InconsistentBrokerIdException})."""


@dataclass(frozen=True)
class MetaProperties:
    """
    The content of one C{meta.properties}.

    @ivar version: the format version; 0 (ZooKeeper mode) is the only one kafkatw reads.
    @ivar broker_id: the C{broker.id} the directory belongs to.
    @ivar cluster_id: the cluster id (Kafka's URL-safe base64 UUID), or
        C{None} in a file written before the cluster had one (Kafka 0.10.0).
    """

    broker_id: int
    cluster_id: str | None
    version: int = 0

    def to_text(self, now_s: float | None = None) -> str:
        """
        The file's text: Java's C{Properties.store} comment header (an empty
        comment line, then the date as Java's C{Date.toString} prints it, UTC),
        then the keys.

        @param now_s: the date of the header (s since the epoch); now when C{None}.
        """
        date = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime(now_s))
        lines = ["#", f"#{date}", f"version={self.version}", f"broker.id={self.broker_id}"]
        if self.cluster_id is not None:
            lines.append(f"cluster.id={self.cluster_id}")
        return "\n".join(lines) + "\n"

    @classmethod
    def from_text(cls, text: str, path: str = META_PROPERTIES_FILE) -> "MetaProperties":
        """
        Parse a file's text.  A missing C{version} means 0, as in Kafka.

        @raise MetaPropertiesError: no or a non-integer C{broker.id} or
            C{version}, or a version other than 0.
        """
        properties = parse_properties(text)
        try:
            version = int(properties.get("version", "0"))
            broker_id = int(properties["broker.id"])
        except KeyError:
            raise MetaPropertiesError(f"{path} has no broker.id") from None
        except ValueError as e:
            raise MetaPropertiesError(f"malformed {path}: {e}") from None
        if version != 0:
            raise MetaPropertiesError(
                f"Found unexpected version {version} in {path}. ZooKeeper-based brokers only support version 0"
                " (which is implicit when the version field is missing)."
            )
        return cls(broker_id=broker_id, cluster_id=properties.get("cluster.id") or None, version=version)


def read_meta_properties(log_dir: str) -> MetaProperties | None:
    """
    Read C{<log_dir>/meta.properties}.

    @return: its content, or C{None} when the file (or the directory) does not exist.
    @raise MetaPropertiesError: the file is malformed.
    @raise OSError: the file exists but cannot be read.
    """
    path = os.path.join(log_dir, META_PROPERTIES_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    return MetaProperties.from_text(text, path)


def write_meta_properties(log_dir: str, meta: MetaProperties, now_s: float | None = None) -> None:
    """
    Write C{<log_dir>/meta.properties} atomically: temporary file, fsync,
    rename, fsync of the directory (as Kafka's C{PropertiesUtils.writePropertiesFile}).
    """
    path = os.path.join(log_dir, META_PROPERTIES_FILE)
    write_atomically(path, meta.to_text(now_s).encode("utf-8"))


def check_log_dirs(log_dirs: Iterable[str], broker_id: int, cluster_id: str) -> list[str]:
    """
    Check every log directory's C{meta.properties} against the broker, in
    Kafka's order: the directories agree with each other, then the cluster id,
    then the broker id.  Reads only; writes nothing.

    @param broker_id: the configured C{broker.id}.
    @param cluster_id: the cluster id in ZooKeeper's C{/cluster/id}.
    @return: the directories that have no C{meta.properties} yet (new ones).
    @raise InconsistentBrokerMetadataError: the directories name different
        broker ids or cluster ids.
    @raise InconsistentClusterIdError: they belong to another cluster.
    @raise InconsistentBrokerIdError: they belong to another broker id.
    @raise MetaPropertiesError: a file is malformed.
    """
    found: dict[str, MetaProperties] = {}
    missing: list[str] = []
    for log_dir in log_dirs:
        meta = read_meta_properties(log_dir)
        if meta is None:
            missing.append(log_dir)
        else:
            found[log_dir] = meta
    if not found:
        return missing
    if len({(m.broker_id, m.cluster_id) for m in found.values()}) > 1:
        listing = ", ".join(f"{d}: broker.id={m.broker_id} cluster.id={m.cluster_id}" for d, m in found.items())
        raise InconsistentBrokerMetadataError(
            "BrokerMetadata is not consistent across log.dirs. This could happen if multiple brokers shared a log"
            " directory (log.dirs) or partial data was manually copied from another broker."
            f" Found: {listing}"
        )
    log_dir, stored = next(iter(found.items()))
    if stored.cluster_id is not None and stored.cluster_id != cluster_id:
        raise InconsistentClusterIdError(
            f"The Cluster ID {cluster_id} doesn't match stored clusterId {stored.cluster_id} in meta.properties"
            f" ({os.path.join(log_dir, META_PROPERTIES_FILE)}). The broker is trying to join the wrong cluster."
            " Configured zookeeper.connect may be wrong."
        )
    if stored.broker_id != broker_id:
        raise InconsistentBrokerIdError(
            f"Configured broker.id {broker_id} doesn't match stored broker.id {stored.broker_id} in meta.properties"
            f" ({os.path.join(log_dir, META_PROPERTIES_FILE)}). If you moved your data, make sure your configured"
            " broker.id matches. If you intend to create a new broker, you should remove all data in your data"
            " directories (log.dirs)."
        )
    return missing


def ensure_meta_properties(log_dirs: Iterable[str], broker_id: int, cluster_id: str,
                           now_s: float | None = None) -> list[str]:
    """
    L{check_log_dirs}, then write C{meta.properties} into the directories that
    have none, or one without a C{cluster.id} (as Kafka completes a file of
    Kafka 0.10.0).

    @return: the directories written.
    @raise MetaPropertiesError: see L{check_log_dirs}; nothing is written then.
    """
    log_dirs = list(log_dirs)
    missing = check_log_dirs(log_dirs, broker_id, cluster_id)
    missing += [d for d in log_dirs if d not in missing and read_meta_properties(d).cluster_id is None]  # type: ignore[union-attr]
    for log_dir in missing:
        write_meta_properties(log_dir, MetaProperties(broker_id=broker_id, cluster_id=cluster_id), now_s)
    return missing
