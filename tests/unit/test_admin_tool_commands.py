"""
Unit tests of the admin tools' parsing and output: delete-records, log-dirs,
get-offsets, consumer-groups --delete-offsets, and dump-log over segment files
written by kafkatw's own storage.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
from types import SimpleNamespace

from click.testing import CliRunner
from twisted.trial import unittest

from kafkatw.cli.consumer_groups import format_delete_offsets, parse_topic_partitions
from kafkatw.cli.delete_records import OffsetJsonError, format_delete_results, parse_offset_json
from kafkatw.cli.dump_log import decode_offsets_record, dump_log
from kafkatw.cli.get_offsets import format_offsets, parse_partitions, parse_time
from kafkatw.cli.log_dirs import format_log_dirs
from kafkatw.errors import ErrorCode, kafka_error
from kafkatw.protocol.batch import build_batch
from kafkatw.protocol.records import Record, encode_batch
from kafkatw.storage.log import PartitionLog
from kafkatw.storage.log_config import LogConfig
from kafkatw.storage.transaction_index import AbortedTxn


class DeleteRecordsCommandTests(unittest.TestCase):
    def test_parse(self) -> None:
        text = '{"partitions":[{"topic":"t","partition":0,"offset":5},{"topic":"u","partition":1,"offset":-1}],' \
               '"version":1}'
        self.assertEqual(parse_offset_json(text), [("t", 0, 5), ("u", 1, -1)])
        self.assertEqual(parse_offset_json('{"partitions":[]}'), [])

    def test_parse_errors(self) -> None:
        for text, message in [
            ("nope", "The input string is not a valid JSON"),
            ('{"partitions":[],"version":2}', "Not supported version field value 2"),
            ('{"version":1}', "Missing partitions field"),
            ('{"partitions":[{"topic":"t","partition":0}]}', "malformed partition entry"),
            ('{"partitions":[{"topic":"t","partition":0,"offset":1},{"topic":"t","partition":0,"offset":2}]}',
             "Offset json file contains duplicate topic partitions: t-0"),
        ]:
            with self.assertRaises(OffsetJsonError) as e:
                parse_offset_json(text)
            self.assertIn(message, str(e.exception))

    def test_output(self) -> None:
        lines = format_delete_results({("t", 0): (5, None),
                                       ("t", 1): (-1, kafka_error(ErrorCode.offset_out_of_range))})
        self.assertEqual(lines, [
            "partition: t-0\tlow_watermark: 5",
            "partition: t-1\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: The requested offset "
            "is not within the range of offsets maintained by the server."])


class LogDirsCommandTests(unittest.TestCase):
    def test_kafka_json(self) -> None:
        partition = SimpleNamespace(partition_index=0, partition_size=120, offset_lag=0, is_future_key=False)
        results = [SimpleNamespace(error_code=0, log_dir="/data", topics=[
            SimpleNamespace(name="t", partitions=[partition]), SimpleNamespace(name="u", partitions=[partition])])]
        self.assertEqual(
            format_log_dirs({0: results}, {"t"}),
            '{"version":1,"brokers":[{"broker":0,"logDirs":[{"logDir":"/data","error":null,"partitions":'
            '[{"partition":"t-0","size":120,"offsetLag":0,"isFuture":false}]}]}]}')
        self.assertIn('"partition":"u-0"', format_log_dirs({0: results}, set()))


class GetOffsetsCommandTests(unittest.TestCase):
    def test_time(self) -> None:
        self.assertEqual([parse_time(t) for t in ("-1", "latest", "earliest", "max-timestamp", "1700000000000")],
                         [-1, -1, -2, -3, 1700000000000])
        import click

        with self.assertRaises(click.BadParameter):
            parse_time("yesterday")

    def test_partitions(self) -> None:
        self.assertEqual(parse_partitions("0,2-4,7-"), [(0, 0), (2, 4), (7, None)])
        self.assertEqual(parse_partitions(""), [])

    def test_output(self) -> None:
        self.assertEqual(format_offsets({("t", 1): 40, ("s", 0): 3, ("t", 0): 42, ("t", 2): -1}),
                         ["s:0:3", "t:0:42", "t:1:40"])


class DeleteOffsetsCommandTests(unittest.TestCase):
    def test_success(self) -> None:
        out, err = format_delete_offsets("g", ["t"], ErrorCode.none, {("t", 1): ErrorCode.none, ("t", 0): None})
        self.assertEqual(err, [])
        self.assertEqual(out, [
            "Request succeed for deleting offsets with topic t group g",
            "",
            "TOPIC                          PARTITION       STATUS         ",
            "t                              0               Successful     ",
            "t                              1               Successful     "])

    def test_partition_errors(self) -> None:
        out, err = format_delete_offsets("g", ["t"], ErrorCode.group_subscribed_to_topic,
                                         {("t", 0): ErrorCode.group_subscribed_to_topic, ("x", -1):
                                          ErrorCode.unknown_topic_or_partition})
        self.assertEqual(err, ["", "Error: Encounter some partition level error, see the follow-up details:"])
        self.assertIn("t                              0               Error: org.apache.kafka.common.errors."
                      "GroupSubscribedToTopicException: The consumer group is actively subscribed to the topic",
                      out)
        self.assertTrue(any(line.startswith("x                              Not Provided    Error: ")
                            for line in out))

    def test_group_errors(self) -> None:
        _, err = format_delete_offsets("g", ["t"], ErrorCode.non_empty_group, {})
        self.assertEqual(err[1], "Error: Deleting offsets of a consumer group 'g' is forbidden if the group is not "
                                 "empty.")
        _, err = format_delete_offsets("g", ["t"], ErrorCode.group_id_not_found, {})
        self.assertEqual(err[1], "Error: 'g' does not exist.")

    def test_topic_partitions(self) -> None:
        self.assertEqual(parse_topic_partitions("t"), ("t", None))
        self.assertEqual(parse_topic_partitions("t:0,2"), ("t", [0, 2]))


class DumpLogTests(unittest.TestCase):
    def setUp(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="kafkatw-dump-")
        self.addCleanup(shutil.rmtree, self.directory, True)
        self.log = PartitionLog(os.path.join(self.directory, "t-0"), "t", 0, LogConfig(index_interval_bytes=1),
                                now_ms=lambda: 0)
        self.log.append(encode_batch([(b"k1", b"hello", [("h", b"x")], 1000), (None, b"world", [], 1005)]), 3)
        self.log.append(build_batch([(b"k2", None)], timestamp_ms=2000, producer_id=7, producer_epoch=1,
                                    base_sequence=4), 3)
        self.log.flush()
        self.addCleanup(self.log.close)
        self.base = os.path.join(self.directory, "t-0", "00000000000000000000")

    def run_tool(self, *args: str) -> tuple[int, str, str]:
        try:
            runner = CliRunner(mix_stderr=False)
        except TypeError:  # click >= 8.2 keeps them apart
            runner = CliRunner()
        result = runner.invoke(dump_log, list(args))
        return result.exit_code, result.stdout, result.stderr

    def crc(self, position: int) -> int:
        with open(self.base + ".log", "rb") as f:
            data = f.read()
        return struct.unpack_from(">I", data, position + 17)[0]

    def test_batches_and_records(self) -> None:
        code, out, err = self.run_tool("--files", self.base + ".log", "--print-data-log")
        self.assertEqual((code, err), (0, ""))
        lines = out.splitlines()
        self.assertEqual(lines[0], f"Dumping {self.base}.log")
        self.assertEqual(lines[1], "Log starting offset: 0")
        first = ("baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 "
                 "producerEpoch: -1 partitionLeaderEpoch: 3 isTransactional: false isControl: false "
                 "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1005 size: ")
        self.assertTrue(lines[2].startswith(first), lines[2])
        size = int(lines[2][len(first):].split()[0])
        self.assertTrue(lines[2].endswith(f"size: {size} magic: 2 compresscodec: none crc: {self.crc(0)} "
                                          "isvalid: true"), lines[2])
        self.assertEqual(lines[3], "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 5 sequence: -1 "
                                   "headerKeys: [h] key: k1 payload: hello")
        self.assertEqual(lines[4], "| offset: 1 CreateTime: 1005 keySize: -1 valueSize: 5 sequence: -1 "
                                   "headerKeys: [] payload: world")
        self.assertTrue(lines[5].startswith(f"baseOffset: 2 lastOffset: 2 count: 1 baseSequence: 4 lastSequence: 4 "
                                            f"producerId: 7 producerEpoch: 1 partitionLeaderEpoch: 3 "
                                            f"isTransactional: false isControl: false deleteHorizonMs: "
                                            f"OptionalLong.empty position: {size} CreateTime: 2000 "), lines[5])
        self.assertEqual(lines[6], "| offset: 2 CreateTime: 2000 keySize: 2 valueSize: -1 sequence: 4 "
                                   "headerKeys: [] key: k2")
        self.assertEqual(len(lines), 7)

    def test_shallow_and_corrupt_crc(self) -> None:
        with open(self.base + ".log", "r+b") as f:
            f.seek(40)
            byte = f.read(1)
            f.seek(40)
            f.write(bytes([byte[0] ^ 0xFF]))
        code, out, _ = self.run_tool("--files", self.base + ".log")
        lines = out.splitlines()
        self.assertEqual(len(lines), 4)
        self.assertTrue(lines[2].endswith("isvalid: false"))
        self.assertTrue(lines[3].endswith("isvalid: true"))

    def test_trailing_bytes(self) -> None:
        with open(self.base + ".log", "ab") as f:
            f.write(b"\x00" * 7)
        _, out, _ = self.run_tool("--files", self.base + ".log")
        self.assertEqual(out.splitlines()[-1], "Found 7 invalid bytes at the end of 00000000000000000000.log")

    def test_indexes(self) -> None:
        code, out, err = self.run_tool("--files", f"{self.base}.index,{self.base}.timeindex")
        self.assertEqual((code, err), (0, ""))
        size = self.log.segments[0].position_of(2)
        self.assertEqual(out.splitlines(), [
            f"Dumping {self.base}.index", f"offset: 2 position: {size}",
            f"Dumping {self.base}.timeindex", "timestamp: 1005 offset: 0", "timestamp: 2000 offset: 2"])
        code, out, _ = self.run_tool("--index-sanity-check", "--files", f"{self.base}.index,{self.base}.timeindex")
        self.assertEqual(out.splitlines()[1::2], [f"{self.base}.index passed sanity check.",
                                                  f"{self.base}.timeindex passed sanity check."])

    def test_index_mismatch_and_corruption(self) -> None:
        with open(self.base + ".index", "ab") as f:
            f.write(struct.pack(">ii", 5, 3))
        code, out, err = self.run_tool("--verify-index-only", "--files", f"{self.base}.index")
        self.assertEqual(out.splitlines(), [f"Dumping {self.base}.index"])
        self.assertEqual(err.splitlines(), [f"Mismatches in :{self.base}.index", "  Index offset: 5, log offset: -1"])
        with open(self.base + ".index", "ab") as f:
            f.write(b"\x01")
        code, out, err = self.run_tool("--index-sanity-check", "--files", f"{self.base}.index")
        self.assertEqual(code, 1)
        self.assertIn("is corrupt, found 17 bytes which is neither positive nor a multiple of 8.", err)

    def test_txn_index_and_unknown_files(self) -> None:
        path = self.base + ".txnindex"
        with open(path, "wb") as f:
            f.write(AbortedTxn(9, 3, 8, 3).encode())
        other = os.path.join(self.directory, "notes.txt")
        open(other, "w").close()
        code, out, err = self.run_tool("--files", f"{path},{other}")
        self.assertEqual(out.splitlines(), [f"Dumping {path}", "version: 0 producerId: 9 firstOffset: 3 "
                                            "lastOffset: 8 lastStableOffset: 3", f"Dumping {other}"])
        self.assertEqual(err.splitlines(), [f"Ignoring unknown file {other}"])

    def test_offsets_decoder(self) -> None:
        key = struct.pack(">hh", 1, 1) + b"g" + struct.pack(">h", 1) + b"t" + struct.pack(">i", 2)
        value = struct.pack(">hqi", 3, 42, 5) + struct.pack(">h", 0) + struct.pack(">q", 1700)
        self.assertEqual(decode_offsets_record(Record(0, 0, key, value, [])), (
            '{"type":"1","data":{"group":"g","topic":"t","partition":2}}',
            '{"version":"3","data":{"offset":42,"leaderEpoch":5,"metadata":"","commitTimestamp":1700}}'))
        self.assertEqual(decode_offsets_record(Record(0, 0, key, None, []))[1], "<DELETE>")
        self.assertEqual(decode_offsets_record(Record(4, 0, struct.pack(">h", 9), b"", [])),
                         ("Unknown record type 9 at offset 4, skipping.", None))
