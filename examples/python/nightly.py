#!/usr/bin/env python3
"""What a crontab runs to have a dataset saved by whichever dataset.save
workers are up (examples/dataset-producer --save-dir, or save.sh under
dsjob worker), without waiting for them: a background save of each shard,
shard 0 (which readers open first) at high priority and the rest at low,
all pipelined on one connection. With --at EPOCH, one save of the whole
dataset (one shard of one) that the server holds until that time. Prints
"SHARD HANDLE" a job ("all HANDLE" with --at), as nightly.sh does; exit 1
if a submit failed.

    usage: nightly.py [-s SERVER] [--at EPOCH] NAME SHARDS ROWS SEED
"""

import argparse
import json
import sys

import dsjob


def spec(name: str, shard: int, shards: int, rows: int, seed: int) -> str:
    return json.dumps({"dataset": name, "shard": shard, "shards": shards, "seed": seed,
                       "rows": rows}, separators=(",", ":"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-s", "--server", action="append")
    ap.add_argument("--at", type=int, default=None, help="seconds since the epoch")
    ap.add_argument("name")
    ap.add_argument("shards", type=int)
    ap.add_argument("rows", type=int)
    ap.add_argument("seed", type=int)
    args = ap.parse_args()
    client = dsjob.Client(args.server)
    try:
        if args.at is not None:
            job = client.submit("dataset.save", spec(args.name, 0, 1, args.rows, args.seed),
                                at=args.at)
            print(f"all {job.handle}")
            return 0
        first = client.submit("dataset.save", spec(args.name, 0, args.shards, args.rows,
                                                   args.seed), background=True, priority="high")
        print(f"0 {first.handle}")
        rest = client.submit_many("dataset.save",
                                  [spec(args.name, s, args.shards, args.rows, args.seed)
                                   for s in range(1, args.shards)], priority="low")
        for s, job in enumerate(rest, 1):
            print(f"{s} {job.handle}")
    except (dsjob.Error, ExceptionGroup) as e:
        print(f"nightly.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
