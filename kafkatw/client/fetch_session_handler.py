"""
The fetcher's half of a fetch session (KIP-227): which partitions a Fetch names.

Named after Kafka's C{org.apache.kafka.clients.FetchSessionHandler}.  A
fetcher (a follower's replica fetcher, or a consumer) keeps one handler per
broker it fetches from.  Each round it hands L{FetchSessionHandler.build} every
partition it wants with that partition's request fields; the handler answers
the request's C{session_id}, C{session_epoch}, the partitions to send and the
partitions to forget:

  - with no session yet (or after an error), a I{full} fetch: every partition,
    epoch 0 (INITIAL) so the broker creates a session;
  - in a session, an I{incremental} fetch: only partitions added since the last
    request or whose fields changed (fetch offset, log start offset, max bytes,
    leader epoch), and in C{forgotten_topics_data} those no longer wanted.

L{FetchSessionHandler.handle_response} moves the session on: a full response
with a session id opens the session at epoch 1, each incremental response adds
one to the epoch, a session id of 0 leaves the fetcher sessionless (full
fetches again, each asking for a session), and a session error
(C{FETCH_SESSION_ID_NOT_FOUND}, C{INVALID_FETCH_SESSION_EPOCH}) or a failed
request makes the next fetch full.  An incremental response lists only the
partitions that changed: a partition it leaves out is as it was.

Source: KIP-227; the Kafka protocol guide (FetchRequest v7+).
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

from ..errors import ErrorCode

__all__ = ["FetchRequestData", "FetchSessionHandler"]

_INVALID_SESSION_ID = 0
_INITIAL_EPOCH = 0
_FINAL_EPOCH = -1
_MAX_EPOCH = 0x7FFFFFFF


class FetchRequestData(NamedTuple):
    """
    What one Fetch request names (L{FetchSessionHandler.build}).

    @ivar session_id: the request's C{session_id}.
    @ivar session_epoch: the request's C{session_epoch}.
    @ivar to_send: C{(topic, partition)} -> the partition's request fields (a
        dict with C{partition}, C{fetch_offset}, ...): the request's C{topics}.
    @ivar to_forget: C{(topic, partition)} keys: its C{forgotten_topics_data}.
    @ivar full: a full fetch (C{to_send} is every partition of the session).
    """

    session_id: int
    session_epoch: int
    to_send: dict[tuple[str, int], dict]
    to_forget: list[tuple[str, int]]
    full: bool

    def topics(self) -> list[dict]:
        """C{to_send} as a request's C{topics} (C{topic}, C{partitions})."""
        by_topic: dict[str, list] = {}
        for (topic, _), fields in self.to_send.items():
            by_topic.setdefault(topic, []).append(fields)
        return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]

    def forgotten_topics_data(self) -> list[dict]:
        """C{to_forget} as a request's C{forgotten_topics_data} (C{topic}, C{partitions})."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in self.to_forget:
            by_topic.setdefault(topic, []).append(partition)
        return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


class FetchSessionHandler:
    """
    The fetch session with one broker, as the fetcher sees it.

    @ivar session_id: the session's id (0: none).
    @ivar epoch: the epoch of the next request (0: the next fetch is full).
    @ivar session_partitions: C{(topic, partition)} -> the request fields the
        broker has cached for it (what the last request left it with).
    """

    def __init__(self) -> None:
        self.session_id = _INVALID_SESSION_ID
        self.epoch = _INITIAL_EPOCH
        self.session_partitions: dict[tuple[str, int], dict] = {}

    def __repr__(self) -> str:
        return f"<FetchSessionHandler session {self.session_id} epoch {self.epoch} " \
               f"{len(self.session_partitions)} partitions>"

    @property
    def full(self) -> bool:
        """Whether the next request is a full fetch."""
        return self.epoch in (_INITIAL_EPOCH, _FINAL_EPOCH)

    def build(self, wanted: dict[tuple[str, int], dict]) -> FetchRequestData:
        """
        The next request for the partitions C{wanted} (C{(topic, partition)}
        -> request fields, in fetch order); the handler takes them as the
        session's partitions once the request is sent.  A partition is sent
        again when its fields differ from the last sent (they hold only what
        the broker caches: C{partition}, C{fetch_offset},
        C{log_start_offset}, C{partition_max_bytes}, C{current_leader_epoch},
        C{last_fetched_epoch}).  A caller may hand the same dict again for
        an unchanged partition (it is then not compared), so it must never
        change a dict it handed over.
        """
        if self.full:
            self.session_partitions = dict(wanted)
            return FetchRequestData(self.session_id, self.epoch, self.session_partitions, [], True)
        session = self.session_partitions
        to_send: dict[tuple[str, int], dict] = {}
        to_forget = [key for key in session if key not in wanted]
        for key in to_forget:
            del session[key]
        for key, fields in wanted.items():
            previous = session.get(key)
            if previous is not fields and previous != fields:
                to_send[key] = fields
                session[key] = fields
        return FetchRequestData(self.session_id, self.epoch, to_send, to_forget, False)

    def handle_response(self, error_code: int, session_id: int, partitions: Iterable[tuple[str, int]] = ()) -> bool:
        """
        Move the session on with a Fetch response's top-level C{error_code}
        and C{session_id}, and the C{(topic, partition)} keys it answered.

        @return: whether the response's partitions may be used (C{False}: a
            session error, or partitions the session does not hold; the
            next fetch is full).
        """
        if error_code != 0:
            if error_code == ErrorCode.fetch_session_id_not_found:
                self.session_id = _INVALID_SESSION_ID
            self.epoch = _INITIAL_EPOCH  # a full fetch closing the session it names, asking for a new one
            return False
        known = self.session_partitions
        if any(key not in known for key in partitions):
            self.epoch = _INITIAL_EPOCH
            return False
        if self.full:
            self.session_id = session_id
            self.epoch = _INITIAL_EPOCH if session_id == _INVALID_SESSION_ID else 1
            return True
        if session_id == _INVALID_SESSION_ID:  # the broker closed the session
            self.session_id = _INVALID_SESSION_ID
            self.epoch = _INITIAL_EPOCH
        else:
            self.epoch = 1 if self.epoch == _MAX_EPOCH else self.epoch + 1
        return True

    def handle_error(self) -> None:
        """The request failed (no response): the next fetch is full, closing the session."""
        self.epoch = _INITIAL_EPOCH
