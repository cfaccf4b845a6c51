"""
C{kafkatw leader-election} and C{kafkatw reassign-partitions} without a
broker: Kafka's JSON formats, output lines and usage errors, and the tools'
requests against a fake admin client (the admin client's own controller
retries are tested in tests/unit/test_admin_client.py).
"""

from __future__ import annotations

import json
import random

from click.testing import CliRunner
from twisted.internet import defer
from twisted.trial import unittest

from kafkatw.cli.leader_election import ElectionDataError, elect, format_election_results, parse_election_json
from kafkatw.cli.main import main
from kafkatw.cli.reassign_partitions import (ReassignmentDataError, _cancel, _execute, _list, _verify, format_list,
                                             format_reassignment_json, format_verify, parse_broker_list,
                                             parse_reassignment, parse_topics_to_move, propose_assignment,
                                             validate_for_execute)
from kafkatw.client.admin import PartitionReassignment
from kafkatw.errors import ErrorCode, KafkaError, kafka_error
from kafkatw.protocol.messages import build, response_schema

B = ["--bootstrap-server", "127.0.0.1:1"]


def _cli(*args):
    return CliRunner().invoke(main, list(args), prog_name="kafkatw")


class LeaderElectionFormatTests(unittest.TestCase):

    def test_parse_election_json(self) -> None:
        text = '{"partitions": [{"topic": "foo", "partition": 1}, {"topic": "bar", "partition": 2}]}'
        self.assertEqual(parse_election_json(text), [("bar", 2), ("foo", 1)])

    def test_parse_election_json_errors(self) -> None:
        for text, message in [
            ("{}", "Replica election data is empty"),
            ('{"other": 1}', 'Replica election data is missing "partitions" field'),
            ('{"partitions": [{"topic": "a"}]}', "malformed partition entry"),
            ('{"partitions": [{"topic": "a", "partition": 0}, {"topic": "a", "partition": 0}]}',
             "Replica election data contains duplicate partitions: a-0"),
            ("not json", "not valid JSON"),
        ]:
            with self.assertRaises(ElectionDataError) as caught:
                parse_election_json(text)
            self.assertIn(message, str(caught.exception))

    def test_format_results(self) -> None:
        results = {("t", 1): (0, None), ("t", 0): (0, None), ("u", 0): (int(ErrorCode.election_not_needed), "x"),
                   ("v", 3): (int(ErrorCode.preferred_leader_not_available), "preferred replica 2 is not alive")}
        lines, failed = format_election_results("PREFERRED", results)
        self.assertEqual(lines, [
            "Successfully completed leader election (PREFERRED) for partitions t-0, t-1",
            "Valid replica already elected for partitions u-0",
            "Error completing leader election (PREFERRED) for partition: v-3: PREFERRED_LEADER_NOT_AVAILABLE: "
            "preferred replica 2 is not alive",
        ])
        self.assertEqual(failed, 1)
        self.assertEqual(format_election_results("UNCLEAN", {}), ([], 0))

    def test_usage_errors(self) -> None:
        for args, message in [
            (["--election-type", "PREFERRED"], "One and only one of the following options is required"),
            (["--election-type", "PREFERRED", "--all-topic-partitions", "--topic", "t", "--partition", "0"],
             "One and only one of the following options is required"),
            (["--election-type", "PREFERRED", "--topic", "t"], "Missing required option(s): partition"),
            (["--election-type", "PREFERRED", "--all-topic-partitions", "--partition", "0"],
             "Option partition is only allowed if topic is used"),
            (["--election-type", "OTHER", "--all-topic-partitions"], "Invalid value for '--election-type'"),
            (["--all-topic-partitions"], "Missing option '--election-type'"),
        ]:
            result = _cli("leader-election", *B, *args)
            self.assertEqual(result.exit_code, 2, (args, result.output))
            self.assertIn(message, result.output.splitlines()[0])

    def test_unreachable_broker_is_exit_1(self) -> None:
        result = _cli("leader-election", *B, "--election-type", "preferred", "--all-topic-partitions")
        self.assertEqual(result.exit_code, 1, result.output)
        self.assertIn("Error while making request", result.output)


class ReassignmentFormatTests(unittest.TestCase):

    def test_topics_to_move(self) -> None:
        self.assertEqual(parse_topics_to_move('{"version": 1, "topics": [{"topic": "a"}, {"topic": "b"}]}'),
                         ["a", "b"])
        self.assertEqual(parse_topics_to_move('{"topics": [{"topic": "a"}]}'), ["a"])  # version 1 by default
        for text, message in [('{"version": 2, "topics": []}', "Not supported version field value 2"),
                              ('{"topics": [{"topic": "a"}, {"topic": "a"}]}',
                               "List of topics to reassign contains duplicate entries: a"),
                              ("[", "The input string is not a valid JSON")]:
            with self.assertRaises(ReassignmentDataError) as caught:
                parse_topics_to_move(text)
            self.assertIn(message, str(caught.exception))

    def test_broker_list(self) -> None:
        self.assertEqual(parse_broker_list("1,2,3"), [1, 2, 3])
        with self.assertRaises(ReassignmentDataError) as caught:
            parse_broker_list("1,2,1")
        self.assertIn("Broker list contains duplicate entries: 1", str(caught.exception))
        self.assertRaises(ReassignmentDataError, parse_broker_list, "1,x")

    def test_reassignment_json_round_trip(self) -> None:
        assignment = {("b", 1): [2, 0], ("a", 10): [1], ("a", 2): [0, 1]}
        text = format_reassignment_json(assignment)
        self.assertEqual(text, '{"version":1,"partitions":['
                               '{"topic":"a","partition":2,"replicas":[0,1],"log_dirs":["any","any"]},'
                               '{"topic":"a","partition":10,"replicas":[1],"log_dirs":["any"]},'
                               '{"topic":"b","partition":1,"replicas":[2,0],"log_dirs":["any","any"]}]}')
        entries = parse_reassignment(text)
        self.assertEqual(validate_for_execute(entries), assignment)
        # log_dirs may be left out; whitespace and key order do not matter
        self.assertEqual(parse_reassignment('{"partitions": [{"replicas": [3], "partition": 0, "topic": "t"}]}'),
                         [(("t", 0), [3], ["any"])])

    def test_reassignment_errors(self) -> None:
        def entries(*partitions):
            return json.dumps({"version": 1, "partitions": list(partitions)})

        p = {"topic": "t", "partition": 0, "replicas": [1, 2]}
        for text, message in [
            (entries(dict(p, log_dirs=["any"])),
             "Size of replicas list [1, 2] is different from size of log dirs list [any] for partition t-0"),
            (entries({"topic": "t", "partition": "0", "replicas": [1]}), "malformed partition entry"),
            ('{"version": 3, "partitions": []}', "Not supported version field value 3"),
        ]:
            with self.assertRaises(ReassignmentDataError) as caught:
                parse_reassignment(text)
            self.assertIn(message, str(caught.exception))
        for text, message in [
            (entries(), "Partition reassignment list cannot be empty"),
            (entries(dict(p, replicas=[], log_dirs=[])), "Partition replica list cannot be empty"),
            (entries(p, p), "Partition reassignment contains duplicate topic partitions: t-0"),
            (entries(dict(p, replicas=[1, 1])),
             "Partition replica lists may not contain duplicate entries: t-0 contains multiple entries for 1"),
        ]:
            with self.assertRaises(ReassignmentDataError) as caught:
                validate_for_execute(parse_reassignment(text))
            self.assertIn(message, str(caught.exception))

    def test_propose_assignment(self) -> None:
        current = {("a", 0): [0, 1], ("a", 1): [1, 0], ("a", 2): [0, 1], ("b", 0): [0]}
        proposed = propose_assignment(current, [3, 1, 2], random=random.Random(7))
        self.assertEqual(set(proposed), set(current))
        for key, replicas in proposed.items():
            self.assertEqual(len(replicas), len(current[key]))
            self.assertEqual(len(set(replicas)), len(replicas))
            self.assertTrue(set(replicas) <= {1, 2, 3})
        # the leaders of a topic's partitions are spread over the brokers, as AdminUtils does
        self.assertEqual(sorted(proposed[("a", p)][0] for p in range(3)), [1, 2, 3])
        with self.assertRaises(KafkaError):
            propose_assignment(current, [1])  # replication factor 2 on one broker

    def test_format_verify_and_list(self) -> None:
        self.assertEqual(format_verify({("t", 1): ([1, 2], [1, 2], True), ("t", 0): ([0, 1, 2], [1, 2], False),
                                        ("s", 0): ([0, 1], [1, 2], True)}), [
            "Status of partition reassignment:",
            "There is no active reassignment of partition s-0, but replica set is 0,1 rather than 1,2.",
            "Reassignment of partition t-0 is still in progress.",
            "Reassignment of partition t-1 is completed.",
        ])
        self.assertEqual(format_list({}), "No partition reassignments found.")
        self.assertEqual(format_list({("t", 0): ([1, 2, 0], [2], [0]), ("s", 1): ([1], [], [])}),
                         "Current partition reassignments:\ns-1: replicas: 1.\nt-0: replicas: 1,2,0. adding: 2."
                         " removing: 0.")

    def test_usage_errors(self) -> None:
        for args, message in [
            ([], "Command must include exactly one action: --generate, --execute, --verify, --cancel, --list"),
            (["--verify", "--execute", "--reassignment-json-file", "f"], "Command must include exactly one action"),
            (["--execute"], 'Missing required argument "[reassignment-json-file]"'),
            (["--generate", "--topics-to-move-json-file", "f"], 'Missing required argument "[broker-list]"'),
            (["--verify", "--reassignment-json-file", "f", "--throttle", "10"],
             'Option "[throttle]" can\'t be used with action "[verify]"'),
            (["--list", "--broker-list", "1"], 'Option "[broker-list]" can\'t be used with action "[list]"'),
        ]:
            result = _cli("reassign-partitions", *B, *args)
            self.assertEqual(result.exit_code, 2, (args, result.output))
            self.assertTrue(result.output.splitlines()[0].startswith(f"Error: {message}"), result.output)

    def test_bad_file_is_exit_1(self) -> None:
        path = self.mktemp()
        with open(path, "w") as f:
            f.write('{"version":1,"partitions":[]}')
        result = _cli("reassign-partitions", *B, "--execute", "--reassignment-json-file", path)
        self.assertEqual(result.exit_code, 1)
        self.assertIn("Error: Partition reassignment list cannot be empty", result.output)
        result = _cli("reassign-partitions", *B, "--verify", "--reassignment-json-file", path + ".missing")
        self.assertEqual(result.exit_code, 1)
        self.assertIn("cannot read", result.output)


# --- the requests, against a fake admin client -----------------------------------------------


def _metadata(assignment: dict, brokers=(0, 1, 2), controller: int = 0) -> object:
    topics: dict = {}
    for (t, p), replicas in sorted(assignment.items()):
        topics.setdefault(t, []).append({"partition_index": p, "leader_id": replicas[0], "replica_nodes": replicas,
                                         "isr_nodes": replicas, "error_code": 0})
    return build(response_schema(3, 12), {
        "brokers": [{"node_id": b, "host": "h", "port": 9092 + b} for b in brokers], "controller_id": controller,
        "topics": [{"name": t, "error_code": 0, "partitions": ps} for t, ps in topics.items()]})


def _error(code: ErrorCode, message: str | None) -> KafkaError:
    """A per-partition error as the admin client reports it."""
    error = kafka_error(code, message or code.name)
    error.error_message = message
    return error


class FakeAdmin:
    """
    What the tools use of a L{kafkatw.client.blocking.BlockingAdminClient}:
    each method returns the next answer given for it (or raises it) and
    records its arguments.
    """

    def __init__(self, **answers: list) -> None:
        self.answers = answers  # method name -> answers, popped in order
        self.calls: list[tuple[str, tuple, dict]] = []

    def _answer(self, name: str, *args: object, **kwargs: object) -> object:
        self.calls.append((name, args, kwargs))
        answer = self.answers[name].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def metadata(self, *args: object, **kwargs: object) -> object:
        return self._answer("metadata", *args, **kwargs)

    def elect_leaders(self, *args: object, **kwargs: object) -> object:
        return self._answer("elect_leaders", *args, **kwargs)

    def list_partition_reassignments(self, *args: object, **kwargs: object) -> object:
        return self._answer("list_partition_reassignments", *args, **kwargs)

    def alter_partition_reassignments(self, *args: object, **kwargs: object) -> object:
        return self._answer("alter_partition_reassignments", *args, **kwargs)

    def incremental_alter_configs(self, *args: object, **kwargs: object) -> object:
        return self._answer("incremental_alter_configs", *args, **kwargs)


def _ongoing(ongoing: dict) -> dict:
    return {key: PartitionReassignment(*lists) for key, lists in ongoing.items()}


def _altered(results: dict) -> dict:
    return {key: None if code == 0 else _error(ErrorCode(code), "bad target") for key, code in results.items()}


class LeaderElectionRequestTests(unittest.TestCase):

    def test_elect_passes_the_controller_messages(self) -> None:
        admin = FakeAdmin(elect_leaders=[{
            ("t", 0): None, ("t", 1): _error(ErrorCode.election_not_needed, "the preferred replica leads"),
            ("t", 2): _error(ErrorCode.preferred_leader_not_available, None)}])
        results = elect(admin, "PREFERRED", [("t", 0), ("t", 1), ("t", 2)])
        self.assertEqual(results, {("t", 0): (0, None),
                                   ("t", 1): (int(ErrorCode.election_not_needed), "the preferred replica leads"),
                                   ("t", 2): (int(ErrorCode.preferred_leader_not_available), None)})
        self.assertEqual(admin.calls, [("elect_leaders", (0, [("t", 0), ("t", 1), ("t", 2)]), {"timeout_ms": 30000})])
        lines, failed = format_election_results("PREFERRED", results)
        self.assertEqual(lines[-1], "Error completing leader election (PREFERRED) for partition: t-2: "
                                    "PREFERRED_LEADER_NOT_AVAILABLE")
        self.assertEqual(failed, 1)

    def test_every_partition_unclean(self) -> None:
        admin = FakeAdmin(elect_leaders=[{}])
        self.assertEqual(elect(admin, "UNCLEAN", None), {})
        self.assertEqual(admin.calls[0][1], (1, None))


class ReassignmentRequestTests(unittest.TestCase):

    def test_execute(self) -> None:
        admin = FakeAdmin(list_partition_reassignments=[{}],
                          metadata=[_metadata({("t", 0): [0, 1], ("t", 1): [1, 0]})],
                          alter_partition_reassignments=[_altered({("t", 0): 0})])
        printed: list[str] = []
        _execute(admin, {("t", 0): [1, 2]}, False, -1, printed.append)
        self.assertEqual(printed, [
            'Current partition replica assignment\n\n{"version":1,"partitions":[{"topic":"t","partition":0,'
            '"replicas":[0,1],"log_dirs":["any","any"]}]}\n\nSave this to use as the --reassignment-json-file '
            "option during rollback",
            "Successfully started partition reassignment for t-0"])
        name, args, _ = admin.calls[-1]
        self.assertEqual((name, args), ("alter_partition_reassignments", ({("t", 0): [1, 2]},)))

    def test_execute_refuses_while_others_run_and_unknown_brokers(self) -> None:
        from kafkatw.cli.reassign_partitions import CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE, _Terse

        admin = FakeAdmin(list_partition_reassignments=[_ongoing({("s", 0): ([0, 1], [1], [0])})])
        with self.assertRaises(_Terse) as caught:
            _execute(admin, {("t", 0): [1, 2]}, False, -1, print)
        self.assertEqual(str(caught.exception), CANNOT_EXECUTE_BECAUSE_OF_EXISTING_MESSAGE)
        admin = FakeAdmin(metadata=[_metadata({("t", 0): [0, 1]})])
        with self.assertRaises(_Terse) as caught:
            _execute(admin, {("t", 0): [1, 7]}, True, -1, print)
        self.assertEqual(str(caught.exception), "Error: Unknown broker id 7")

    def test_execute_reports_partition_errors(self) -> None:
        from kafkatw.cli.reassign_partitions import _Terse

        admin = FakeAdmin(metadata=[_metadata({("t", 0): [0, 1]})],
                          alter_partition_reassignments=[_altered({("t", 0): int(ErrorCode.invalid_replica_assignment)})])
        with self.assertRaises(_Terse) as caught:
            _execute(admin, {("t", 0): [1, 2]}, True, -1, lambda line: None)
        self.assertEqual(str(caught.exception), "Error reassigning partition(s):\nt-0: bad target")

    def test_error_without_message_is_named(self) -> None:
        from kafkatw.cli.reassign_partitions import _Terse

        admin = FakeAdmin(metadata=[_metadata({("t", 0): [0, 1]})], alter_partition_reassignments=[
            {("t", 0): _error(ErrorCode.no_reassignment_in_progress, None)}])
        with self.assertRaises(_Terse) as caught:
            _execute(admin, {("t", 0): [1, 2]}, True, -1, lambda line: None)
        self.assertEqual(str(caught.exception), "Error reassigning partition(s):\nt-0: NO_REASSIGNMENT_IN_PROGRESS")

    def test_verify(self) -> None:
        admin = FakeAdmin(list_partition_reassignments=[_ongoing({("t", 0): ([1, 2, 0], [2], [0])})],
                          metadata=[_metadata({("t", 1): [1, 2], ("t", 2): [0, 1]})])  # not all done: no clearing
        self.assertEqual(_verify(admin, [(("t", 0), [1, 2]), (("t", 1), [1, 2]), (("t", 2), [2, 1])]), [
            "Status of partition reassignment:",
            "Reassignment of partition t-0 is still in progress.",
            "Reassignment of partition t-1 is completed.",
            "There is no active reassignment of partition t-2, but replica set is 0,1 rather than 2,1."])

    def test_execute_with_throttle_sets_it_on_every_broker_involved(self) -> None:
        admin = FakeAdmin(list_partition_reassignments=[{}], metadata=[_metadata({("t", 0): [0, 1]})],
                          incremental_alter_configs=[{(4, "0"): None, (4, "1"): None, (4, "2"): None}],
                          alter_partition_reassignments=[_altered({("t", 0): 0})])
        printed: list[str] = []
        _execute(admin, {("t", 0): [1, 2]}, False, 1000, printed.append)
        self.assertEqual(printed[1:], [
            "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle "
            "is removed.",
            "The inter-broker throttle limit was set to 1000 B/s",
            "Successfully started partition reassignment for t-0"])
        [(name, args, _)] = [c for c in admin.calls if c[0] == "incremental_alter_configs"]
        self.assertEqual(args[0], {(4, str(b)): [("leader.replication.throttled.rate", 0, "1000"),
                                                 ("follower.replication.throttled.rate", 0, "1000")]
                                   for b in (0, 1, 2)})

    def test_verify_clears_throttles_once_complete(self) -> None:
        admin = FakeAdmin(list_partition_reassignments=[{}],
                          metadata=[_metadata({("t", 0): [1, 2]}), _metadata({})],
                          incremental_alter_configs=[{(4, "0"): None, (4, "1"): None, (4, "2"): None}])
        lines = _verify(admin, [(("t", 0), [1, 2])])
        self.assertEqual(lines[-1], "Clearing broker-level throttles on brokers 0,1,2")
        [(name, args, _)] = [c for c in admin.calls if c[0] == "incremental_alter_configs"]
        self.assertEqual(args[0][(4, "1")], [("leader.replication.throttled.rate", 1, None),
                                              ("follower.replication.throttled.rate", 1, None)])
        # still in progress, or --preserve-throttles: nothing cleared
        admin = FakeAdmin(list_partition_reassignments=[_ongoing({("t", 0): ([1, 2, 0], [2], [0])})])
        self.assertNotIn("Clearing", " ".join(_verify(admin, [(("t", 0), [1, 2])])))
        admin = FakeAdmin(list_partition_reassignments=[{}], metadata=[_metadata({("t", 0): [1, 2]})])
        self.assertNotIn("Clearing", " ".join(_verify(admin, [(("t", 0), [1, 2])], preserve_throttles=True)))

    def test_cancel(self) -> None:
        admin = FakeAdmin(list_partition_reassignments=[_ongoing({("t", 0): ([1, 2, 0], [2], [0])})],
                          alter_partition_reassignments=[_altered({("t", 0): 0})])
        self.assertEqual(_cancel(admin, [("t", 0), ("t", 1)]), ["Successfully cancelled partition reassignment for: t-0",
                                                                "None of the specified partition moves are active."])
        self.assertEqual(admin.calls[0][1], ([("t", 0), ("t", 1)],))
        self.assertEqual(admin.calls[-1][1], ({("t", 0): None},))
        admin = FakeAdmin(list_partition_reassignments=[{}])
        self.assertEqual(_cancel(admin, [("t", 0)])[0], "None of the specified partition reassignments are active.")

    def test_list(self) -> None:
        admin = FakeAdmin(list_partition_reassignments=[_ongoing({("t", 0): ([1, 2, 0], [2], [0])})])
        self.assertEqual(format_list(_list(admin)), "Current partition reassignments:\nt-0: replicas: 1,2,0. "
                                                    "adding: 2. removing: 0.")


class ControllerPreferredElectionTests(unittest.TestCase):
    """What C{leader-election --election-type PREFERRED} gets from the controller for an offline partition."""

    def test_dead_preferred_leader_is_not_available(self) -> None:
        from types import SimpleNamespace

        from kafkatw.broker.controller import KafkaController
        from kafkatw.zookeeper.zk_data import PartitionState

        metadata = SimpleNamespace(
            topics={"t": SimpleNamespace(partitions={0: [0, 1], 1: [1, 0]})},
            partition_states={("t", 0): PartitionState(0, 3, [0], 1, 1),
                              ("t", 1): PartitionState(1, 2, [1], 1, 1)})
        controller = KafkaController(2, {}, None, metadata, lambda topic: {})
        controller.active = True
        controller.live = {1, 2}  # broker 0, preferred leader of t-0 and its whole ISR, is dead
        results = self.successResultOf(controller.elect_leaders(0, [("t", 0), ("t", 1)]))
        self.assertEqual(results[("t", 0)][0], ErrorCode.preferred_leader_not_available)
        self.assertEqual(results[("t", 1)][0], ErrorCode.election_not_needed)

    def test_first_election_of_a_partition_created_after_activation(self) -> None:
        """A topic created after the controller became active: its first election is NewPartition -> Online."""
        from types import SimpleNamespace

        from kafkatw.broker.controller import KafkaController
        from kafkatw.zookeeper.zk_data import PartitionState

        from kafkatw.zookeeper.registry import WrittenState

        class Registry:
            def set_partition_states(self, writes: list, *args: object) -> defer.Deferred:
                return defer.succeed([WrittenState(8, 100)] * len(writes))

        written = {}
        metadata = SimpleNamespace(
            topics={"t": SimpleNamespace(partitions={0: [0, 1], 1: [0, 1]})},
            partition_states={("t", 0): PartitionState(1, 3, [1, 0], 1, 1),
                              ("t", 1): PartitionState(1, 3, [1, 0], 1, 1)},
            set_partition_state=lambda topic, partition, state: written.__setitem__((topic, partition), state))
        controller = KafkaController(2, {}, Registry(), metadata, lambda topic: {})
        controller.active = True
        controller.live = {0, 1, 2}
        results = self.successResultOf(controller.elect_leaders(0, None))
        self.assertEqual(results, {("t", 0): (ErrorCode.none, None), ("t", 1): (ErrorCode.none, None)})
        self.assertEqual({k: (s.leader, s.leader_epoch) for k, s in written.items()},
                         {("t", 0): (0, 4), ("t", 1): (0, 4)})
        self.assertEqual(controller.partition_states.state(("t", 1)), "OnlinePartition")
