#!/usr/bin/env python3
"""The dataset producer as a Python worker: dataset.shard streams each row
of the shard as a WORK_DATA packet as soon as it is made, reports
WORK_STATUS as it goes, and ends with the shard's summary (count and
Adler-32) as WORK_COMPLETE, as examples/dataset-producer does, so either
consumer reads it. A malformed spec is a WORK_EXCEPTION that says what is
wrong. -c N makes N shards at once (threads); SIGTERM lets running shards
finish.

    usage: dataset_producer.py [-s SERVER]... [-c N] [-i ID]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dsjob  # noqa: E402
from dataset import Spec, adler32, summary  # noqa: E402


def shard(job: dsjob.WorkerJob) -> bytes:
    spec = Spec.parse(job.payload)
    n = spec.count()
    step = max(n // 20, 1)
    adler = adler32(b"")
    job.send_status(0, n)
    for k in range(n):
        row = spec.row(k)
        job.send_data(row)
        adler = adler32(row, adler)
        if (k + 1) % step == 0 and k + 1 < n:
            job.send_status(k + 1, n)
    job.send_status(n, n)
    return summary(spec, n, adler)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-s", "--server", action="append", help="host:port (default $DSJOB_SERVERS)")
    ap.add_argument("-c", "--concurrency", type=int, default=1)
    ap.add_argument("-i", "--id", default=None, help="the id the server's workers list shows")
    args = ap.parse_args()
    worker = dsjob.Worker(args.server, id=args.id)
    worker.register("dataset.shard", shard)
    worker.run(concurrency=args.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main())
