#!/usr/bin/env python3
"""The dataset consumer in Python: submits every shard of a dataset to
dataset.shard and iterates the rows as they arrive, from all shards at once,
printing each as "SHARD<TAB>ROW" with "# shard ..." lines between them, as
examples/dataset-consumer does. A shard that fails is submitted again, up to -a attempts, and the rows of the
failed attempt are dropped ("# shard S drop N"). At the end each shard's
rows must match its producer's summary (count and Adler-32): "# shard S ok
COUNT ADLER". Exit 0 when every shard matched, 1 otherwise.

    usage: dataset_consumer.py [-s SERVER]... [-d NAME] [-n SHARDS] [-r ROWS]
                               [--seed S] [-a ATTEMPTS] [-j PARALLEL]
"""

import argparse
import os
import queue
import sys
import threading
from typing import Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dsjob  # noqa: E402
from dataset import Spec, adler32, parse_summary  # noqa: E402


def shards_as_they_arrive(client: dsjob.Client, specs: list[Spec], attempts: int,
                          parallel: int) -> Iterator[tuple]:
    """Yields ("row", shard, bytes), ("drop", shard, n, why), ("done", shard,
    summary bytes) and ("failed", shard, why) as they happen: each shard is
    streamed in a thread of its own, at most `parallel` at once."""
    events: queue.Queue = queue.Queue()
    slots = threading.Semaphore(parallel)

    def run(spec: Spec) -> None:
        with slots:
            why = ""
            for attempt in range(1, attempts + 1):
                got = 0
                st = dsjob.Stream()
                try:
                    for chunk in client.stream("dataset.shard", spec.json(), state=st):
                        events.put(("row", spec.shard, chunk))
                        got += 1
                    events.put(("done", spec.shard, st.result))
                    return
                except dsjob.Error as e:
                    why = f"attempt {attempt} failed: {e}"
                    events.put(("drop", spec.shard, got, why))
            events.put(("failed", spec.shard, why))

    threads = [threading.Thread(target=run, args=(s,), daemon=True) for s in specs]
    for t in threads:
        t.start()
    for _ in range(len(specs)):
        while True:
            ev = events.get()
            yield ev
            if ev[0] in ("done", "failed"):
                break
    for t in threads:
        t.join()


def mark(out, line: str) -> None:
    out.write(line.encode() + b"\n")
    out.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-s", "--server", action="append")
    ap.add_argument("-d", "--dataset", default="demo")
    ap.add_argument("-n", "--shards", type=int, default=8)
    ap.add_argument("-r", "--rows", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("-a", "--attempts", type=int, default=3)
    ap.add_argument("-j", "--parallel", type=int, default=8)
    args = ap.parse_args()
    client = dsjob.Client(args.server)
    specs = [Spec(args.dataset, i, args.shards, args.seed, args.rows) for i in range(args.shards)]
    rows: dict[int, list[bytes]] = {s.shard: [] for s in specs}
    tails: dict[int, bytes] = {}
    bad = 0
    out = sys.stdout.buffer
    for ev in shards_as_they_arrive(client, specs, args.attempts, args.parallel):
        kind, s = ev[0], ev[1]
        if kind == "row":
            # produce.sh (dsjob worker --stream) sends its summary as the last
            # WORK_DATA and an empty WORK_COMPLETE; rows start with a digit.
            if ev[2].startswith(b"{"):
                tails[s] = ev[2]
                continue
            rows[s].append(ev[2])
            out.write(b"%d\t%s" % (s, ev[2]))
        elif kind == "drop":
            mark(out, f"# shard {s} drop {ev[2]}: {ev[3]}")
            rows[s] = []
            tails.pop(s, None)
        elif kind == "failed":
            mark(out, f"# shard {s} failed: {ev[2]}")
            bad += 1
        else:
            got = rows[s]
            result = ev[2]
            if not result:
                result = tails.get(s, b"")
            adler = 1
            for r in got:
                adler = adler32(r, adler)
            spec = specs[s]
            why = None
            try:
                summ = parse_summary(result)
            except (ValueError, KeyError) as e:
                why = f"the summary is unreadable: {e}"
            else:
                if (summ["dataset"], summ["shard"], summ["shards"]) != \
                        (spec.dataset, spec.shard, spec.shards):
                    why = "the summary is about another shard"
                elif summ["count"] != len(got) or summ["adler32"] != adler:
                    why = (f"{len(got)} rows with Adler-32 {adler:08x}, the summary says "
                           f"{summ['count']} and {summ['adler32']:08x}")
                elif len(got) != spec.count() or got != [spec.row(k) for k in range(len(got))]:
                    why = f"{len(got)} rows, the shard has {spec.count()}"
            if why:
                mark(out, f"# shard {s} bad: {why}")
                bad += 1
            else:
                mark(out, f"# shard {s} ok {len(got)} {adler:08x}")
    out.flush()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
