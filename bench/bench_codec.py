"""
Record batch codec throughput: kafkatw.protocol.records vs kafka-python.

Prints one JSON line per figure: records/s for encode and decode (CRC checked) of
batches of C{--batch} records with C{--value-bytes}-byte values, best of C{--repeat}.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from kafkatw.protocol.records import COMPRESSION_CODECS, decode_batches, encode_batch


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--value-bytes", type=int, default=200)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--codecs", default="none,snappy,lz4,zstd,gzip")
    p.add_argument("--no-kafka-python", action="store_true")
    args = p.parse_args()
    value = os.urandom(args.value_bytes // 2).hex().encode()[: args.value_bytes]
    ts = int(time.time() * 1000)
    recs = [(b"key-%d" % i, value, [], ts + i) for i in range(args.batch)]
    total = args.batch * args.batches

    def emit(impl: str, op: str, codec: str, seconds: float) -> None:
        print(json.dumps({"bench": "codec", "impl": impl, "op": op, "codec": codec,
                          "value_bytes": args.value_bytes, "batch_records": args.batch,
                          "records_per_s": round(total / seconds)}), flush=True)

    for name in args.codecs.split(","):
        codec = COMPRESSION_CODECS[name]
        emit("kafkatw", "encode", name, _best(
            lambda: [encode_batch(recs, compression=codec) for _ in range(args.batches)], args.repeat))
        batch = encode_batch(recs, compression=codec)
        data = batch * args.batches
        emit("kafkatw", "decode", name, _best(lambda: decode_batches(data), args.repeat))

        if args.no_kafka_python:
            continue
        from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

        try:
            if codec:
                DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1)._assert_has_codec(codec)
        except Exception:
            continue  # kafka-python lacks this codec's library

        def kp_build() -> bytes:
            b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
            for i, (k, v, h, t) in enumerate(recs):
                b.append(i, t, k, v, h)
            return bytes(b.build())

        emit("kafka-python", "encode", name, _best(lambda: [kp_build() for _ in range(args.batches)], args.repeat))
        kp_batch = kp_build()

        def kp_parse() -> None:
            for _ in range(args.batches):
                rb = DefaultRecordBatch(kp_batch)
                rb.validate_crc()
                for _r in rb:
                    pass

        emit("kafka-python", "decode", name, _best(kp_parse, args.repeat))


if __name__ == "__main__":
    main()
