"""
Record batch codec throughput: kafkatw.protocol.records vs kafka-python.

Prints one JSON line per figure: records/s for encode and decode (CRC checked) of
batches of C{--batch} records with C{--value-bytes}-byte values, best of
C{--repeat}, and the CPU microseconds per record of that run.  C{--records
shipper} makes the records as C{kafkatw ship} does (key C{host:path}, headers
C{host}, C{path}, C{line_no}); C{--records keyed} (the default) a key and no
headers; C{--records values} a value only (what most producers send).  When the
compiled record codec is built, kafkatw's figures come twice: C{kafkatw}
(compiled loops) and C{kafkatw-python} (the pure-Python ones); C{decode-fetched}
is the consumer's decode (L{decode_fetched}).

    python bench/bench_codec.py --records shipper --codecs none,lz4 --no-kafka-python
"""

from __future__ import annotations

import argparse
import json
import os
import time

from kafkatw.client.consumer import ConsumerRecord
from kafkatw.protocol.records import (SPEEDUPS, COMPRESSION_CODECS, decode_batches, decode_batches_py,
                                      decode_fetched, decode_fetched_py, encode_batch, encode_batch_py)


def _best(fn, repeat: int) -> tuple[float, float]:
    """The best wall-clock seconds of C{repeat} runs, and that run's CPU seconds."""
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - t0, time.process_time() - c0))
    return best


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--value-bytes", type=int, default=200)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--codecs", default="none,snappy,lz4,zstd,gzip")
    p.add_argument("--no-kafka-python", action="store_true")
    p.add_argument("--records", choices=["keyed", "shipper", "values"], default="keyed")
    args = p.parse_args()
    value = os.urandom(args.value_bytes // 2).hex().encode()[: args.value_bytes]
    ts = int(time.time() * 1000)
    if args.records == "shipper":
        path = b"/var/log/nginx/access.log"
        recs = [(b"web-1:" + path, value, [("host", b"web-1"), ("path", path), ("line_no", b"%d" % (i + 1))], ts + i)
                for i in range(args.batch)]
    elif args.records == "values":
        recs = [(None, value, None, ts + i) for i in range(args.batch)]
    else:
        recs = [(b"key-%d" % i, value, [], ts + i) for i in range(args.batch)]
    total = args.batch * args.batches

    def emit(impl: str, op: str, codec: str, timing: tuple[float, float]) -> None:
        seconds, cpu = timing
        print(json.dumps({"bench": "codec", "impl": impl, "op": op, "codec": codec, "records": args.records,
                          "value_bytes": args.value_bytes, "batch_records": args.batch,
                          "records_per_s": round(total / seconds),
                          "cpu_us_per_record": round(cpu / total * 1e6, 3)}), flush=True)

    impls = [("kafkatw", encode_batch, decode_batches, decode_fetched)]
    if SPEEDUPS:
        impls.append(("kafkatw-python", encode_batch_py, decode_batches_py, decode_fetched_py))
    for name in args.codecs.split(","):
        codec = COMPRESSION_CODECS[name]
        for impl, encode, decode, fetched in impls:
            emit(impl, "encode", name, _best(
                lambda: [encode(recs, compression=codec) for _ in range(args.batches)], args.repeat))
            data = b"".join(encode(recs, base_offset=i * len(recs), compression=codec) for i in range(args.batches))
            emit(impl, "decode", name, _best(lambda: decode(data), args.repeat))
            emit(impl, "decode-fetched", name, _best(lambda: fetched(data, "t", 0, 0, ConsumerRecord),
                                                     args.repeat))

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
