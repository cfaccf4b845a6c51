"""
Storage benchmark: append throughput of 16 KB batches, read-region lookups.

Prints one JSON line per figure.  Bounded loops; page cache only (no fsync).
Usage: python bench/bench_storage.py [--seconds 1.0]
"""

import json
import os
import random
import shutil
import sys
import tempfile
import time

from kafkatw.protocol.batch import build_batch, parse_batch_headers
from kafkatw.storage.log import PartitionLog
from kafkatw.storage.log_config import LogConfig


def main(seconds: float = 1.0) -> None:
    tmp = tempfile.mkdtemp(prefix="kafkatw-bench-")
    try:
        records = [(None, os.urandom(100)) for _ in range(16 * 1024 // 110)]
        batch = build_batch(records, timestamp_ms=1_000_000)
        log = PartitionLog(os.path.join(tmp, "bench-0"), "bench", 0,
                           LogConfig(segment_bytes=64 * 1024 * 1024), now_ms=lambda: 1_000_000)
        count = 0
        start = time.perf_counter()
        deadline = start + seconds
        while count < 200_000 and (count % 256 or time.perf_counter() < deadline):
            log.append(batch, 0)
            count += 1
        elapsed = time.perf_counter() - start
        print(json.dumps({"figure": "append_16k_batches_per_s", "value": round(count / elapsed),
                          "batch_bytes": len(batch), "records_per_batch": len(records)}))
        print(json.dumps({"figure": "append_16k_mb_per_s", "value": round(count * len(batch) / elapsed / 1e6, 1)}))

        big = build_batch([(None, os.urandom(1000)) for _ in range(100)], timestamp_ms=1_000_000)
        n = 2000
        start = time.perf_counter()
        for _ in range(n):
            parse_batch_headers(big, True, 1 << 20)
        print(json.dumps({"figure": "parse_crc_100k_batch_us", "value": round((time.perf_counter() - start) / n * 1e6, 2)}))

        leo = log.log_end_offset
        rng = random.Random(1)
        offsets = [rng.randrange(leo) for _ in range(5000)]
        start = time.perf_counter()
        lookups = 0
        for off in offsets:
            log.read(off, 1024 * 1024)
            lookups += 1
        elapsed = time.perf_counter() - start
        print(json.dumps({"figure": "read_region_lookups_per_s", "value": round(lookups / elapsed),
                          "max_bytes": 1024 * 1024, "segments": len(log.segments), "log_end_offset": leo}))
        log.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(float(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[1] == "--seconds" else 1.0)
