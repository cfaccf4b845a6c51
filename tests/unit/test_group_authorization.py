"""
Authorization of the KIP-848 consumer group and KIP-932 share group APIs
on the in-process broker (KafkaApis over real logs and the fake ZooKeeper,
a ZooKeeper ACL authorizer), with the errors Kafka's KafkaApis answers
(KAFKA-18813, KAFKA-18817): a heartbeat naming a topic the principal may
not Describe is C{TOPIC_AUTHORIZATION_FAILED}; a regular expression resolves
to the describable topics only; a described group naming such a topic is
C{TOPIC_AUTHORIZATION_FAILED} without members; DescribeShareGroupOffsets
needs Describe and AlterShareGroupOffsets Read on each topic.
"""

from __future__ import annotations

from typing import Any

from twisted.trial import unittest

from kafkatw.errors import ErrorCode

from .test_authorization import ALICE, BOB, GROUP, GAF, TAF, AuthorizedBroker, G, O, T

E = ErrorCode


class ConsumerGroupAuthorizationTests(unittest.TestCase):
    """ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) v1 on group C{g1} (broker 0's)."""

    def setUp(self) -> None:
        self.h = AuthorizedBroker(self)
        for name in ("t", "secret", "logs-1", "logs-2"):
            self.h.create_topic(name)
        self.names = {meta.topic_id: name for name, meta in self.h.metadata.topics.items()}
        self.h.grant(ALICE, O.READ, G, GROUP)
        self.h.grant(ALICE, O.DESCRIBE, T, "t")

    def heartbeat(self, principal: str, member: str, epoch: int, **fields: Any) -> Any:
        body = {"group_id": GROUP, "member_id": member, "member_epoch": epoch,
                "rebalance_timeout": 30000 if epoch == 0 else -1, "subscribed_topic_names": None,
                "topic_partitions": [] if epoch == 0 else None, **fields}
        return self.h.as_(principal, 68, 1, body)

    def assigned(self, response: Any) -> list[str]:
        return sorted(self.names[tp.topic_id] for tp in response.assignment.topic_partitions if tp.partitions)

    def test_heartbeat_needs_describe_on_each_subscribed_topic(self) -> None:
        denied = self.heartbeat(ALICE, "a", 0, subscribed_topic_names=["t", "secret"])
        self.assertEqual((denied.error_code, denied.member_id), (TAF, None))
        self.assertNotIn(GROUP, self.h.apis.consumer_group_coordinator.groups)  # the coordinator never saw it
        self.assertEqual(self.heartbeat(BOB, "a", 0, subscribed_topic_names=["t"]).error_code, GAF)
        ok = self.heartbeat(ALICE, "a", 0, subscribed_topic_names=["t"])
        self.assertEqual((ok.error_code, self.assigned(ok)), (E.none, ["t"]))
        # a later heartbeat that changes the subscription is checked too
        self.assertEqual(self.heartbeat(ALICE, "a", 1, subscribed_topic_names=["t", "secret"]).error_code, TAF)

    def test_regex_resolves_to_describable_topics_only(self) -> None:
        self.h.grant(ALICE, O.DESCRIBE, T, "logs-1")
        r = self.heartbeat(ALICE, "a", 0, subscribed_topic_regex="logs-.*")
        self.assertEqual((r.error_code, self.assigned(r)), (E.none, ["logs-1"]))
        # an ACL granted later: the next heartbeat resolves the regex again
        self.h.grant(ALICE, O.DESCRIBE, T, "logs-2")
        r = self.heartbeat(ALICE, "a", 1, topic_partitions=[
            {"topic_id": self.h.metadata.topics["logs-1"].topic_id, "partitions": [0]}])
        self.assertEqual((r.error_code, r.member_epoch, self.assigned(r)), (E.none, 2, ["logs-1", "logs-2"]))

    def test_describe_hides_a_group_assigned_undescribable_topics(self) -> None:
        self.heartbeat(ALICE, "a", 0, subscribed_topic_names=["t"])
        self.h.grant(BOB, O.DESCRIBE, G, GROUP)  # may describe the group, not topic t
        body = {"group_ids": [GROUP], "include_authorized_operations": True}
        denied = self.h.as_(BOB, 69, 1, body).groups[0]
        self.assertEqual((denied.error_code, denied.error_message, denied.members),
                         (TAF, "The group has described topic(s) that the client is not authorized to describe.",
                          ()))
        described = self.h.as_(ALICE, 69, 1, body).groups[0]
        self.assertEqual((described.error_code, [m.member_id for m in described.members]), (E.none, ["a"]))
        self.assertEqual(self.h.as_("User:carol", 69, 1, body).groups[0].error_code, GAF)


class ShareGroupAuthorizationTests(unittest.TestCase):
    """ShareGroupHeartbeat (76), ShareGroupDescribe (77), Describe/AlterShareGroupOffsets (90, 91)."""

    def setUp(self) -> None:
        self.h = AuthorizedBroker(self)
        for name in ("t", "secret"):
            self.h.create_topic(name)
            self.h.write_state(name, 0, 0, 0, [0])
        self.h.grant(ALICE, O.READ, G, GROUP)
        self.h.grant(ALICE, O.READ, T, "t")
        self.h.grant(BOB, O.READ, G, GROUP)
        self.h.grant(BOB, O.READ, T, "t")

    def heartbeat(self, principal: str, member: str, epoch: int, topics: Any) -> Any:
        return self.h.as_(principal, 76, 1, {"group_id": GROUP, "member_id": member, "member_epoch": epoch,
                                             "rack_id": None, "subscribed_topic_names": topics})

    def test_heartbeat_needs_describe_on_each_subscribed_topic(self) -> None:
        denied = self.heartbeat(ALICE, "a", 0, ["t", "secret"])
        self.assertEqual((denied.error_code, denied.member_id), (TAF, None))
        self.assertNotIn(GROUP, self.h.apis.share_group_coordinator.groups)
        self.assertEqual(self.heartbeat(ALICE, "a", 0, ["t"]).error_code, E.none)

    def test_describe_hides_a_group_assigned_undescribable_topics(self) -> None:
        self.h.grant(ALICE, O.DESCRIBE, T, "secret")
        self.assertEqual(self.heartbeat(ALICE, "a", 0, ["t", "secret"]).error_code, E.none)
        body = {"group_ids": [GROUP], "include_authorized_operations": False}
        denied = self.h.as_(BOB, 77, 1, body).groups[0]
        self.assertEqual((denied.error_code, denied.members), (TAF, ()))
        described = self.h.as_(ALICE, 77, 1, body).groups[0]
        self.assertEqual((described.error_code, [m.member_id for m in described.members]), (E.none, ["a"]))

    def test_describe_offsets_needs_describe_on_each_topic(self) -> None:
        self.h.grant(ALICE, O.DESCRIBE, T, "secret")
        self.heartbeat(ALICE, "a", 0, ["t", "secret"])  # the group knows both topics
        named = {"groups": [{"group_id": GROUP, "topics": [{"topic_name": "t", "partitions": [0]},
                                                           {"topic_name": "secret", "partitions": [0]}]}]}
        group = self.h.as_(BOB, 90, 1, named).groups[0]
        self.assertEqual({t.topic_name: [(p.error_code, p.start_offset) for p in t.partitions] for t in group.topics},
                         {"t": [(E.none, -1)], "secret": [(TAF, -1)]})
        group = self.h.as_(ALICE, 90, 1, named).groups[0]
        self.assertEqual({t.topic_name: [p.error_code for p in t.partitions] for t in group.topics},
                         {"t": [E.none], "secret": [E.none]})
        every = {"groups": [{"group_id": GROUP, "topics": None}]}
        self.assertEqual([t.topic_name for t in self.h.as_(BOB, 90, 1, every).groups[0].topics], ["t"])
        self.assertEqual(sorted(t.topic_name for t in self.h.as_(ALICE, 90, 1, every).groups[0].topics),
                         ["secret", "t"])

    def test_alter_offsets_needs_read_on_each_topic(self) -> None:
        self.h.grant(ALICE, O.DESCRIBE, T, "secret")  # Describe is not enough: Read is needed
        alter = {"group_id": GROUP, "topics": [{"topic_name": name, "partitions": [
            {"partition_index": 0, "start_offset": 0}]} for name in ("t", "secret")]}
        response = self.h.as_(ALICE, 91, 0, alter)
        self.assertEqual((response.error_code, {t.topic_name: [p.error_code for p in t.partitions]
                                                for t in response.responses}),
                         (E.none, {"t": [E.none], "secret": [TAF]}))
        self.assertEqual(self.h.as_("User:carol", 91, 0, alter).error_code, GAF)

    def test_alter_offsets_of_a_consumer_group_id(self) -> None:
        """Group ids are one namespace: AlterShareGroupOffsets on a consumer group is GROUP_ID_NOT_FOUND."""
        joined = self.h.as_(ALICE, 68, 1, {"group_id": GROUP, "member_id": "c", "member_epoch": 0,
                                           "rebalance_timeout": 30000, "subscribed_topic_names": ["t"],
                                           "topic_partitions": []})
        self.assertEqual(joined.error_code, E.none)
        self.h.as_(ALICE, 68, 1, {"group_id": GROUP, "member_id": "c", "member_epoch": -1,
                                  "rebalance_timeout": -1, "subscribed_topic_names": None, "topic_partitions": None})
        alter = {"group_id": GROUP, "topics": [{"topic_name": "t", "partitions": [
            {"partition_index": 0, "start_offset": 0}]}]}
        self.assertEqual(self.h.as_(ALICE, 91, 0, alter).error_code, E.group_id_not_found)
        self.assertNotIn(GROUP, self.h.apis.share_group_coordinator.groups)
