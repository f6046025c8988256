#!/usr/bin/env python3
"""The DispatchServer pattern of tf.data service, with dsjob: a server in
this process on a free port, workers in threads connected to its target,
range(10) distributed to them as jobs, and the results collected in order.
With --work-dir the server keeps background jobs in SQLite there (the
DispatchServer's fault-tolerant mode).

    usage: dispatch_server.py [--workers N] [--work-dir DIR]
"""

import argparse
import sys
import threading

import dsjob


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work-dir", default=None)
    args = ap.parse_args()

    with dsjob.Server(port=0, work_dir=args.work_dir) as server:
        print(f"# server at {server.target}", file=sys.stderr)
        workers, threads = [], []
        for i in range(args.workers):
            worker = dsjob.Worker(server.target, id=f"worker-{i}")

            @worker.function("element")
            def element(job, i=i):
                # The worker's part of the pipeline: here, square the element.
                n = int(job.payload)
                return f"{n * n} worker-{i}"

            workers.append(worker)
            threads.append(threading.Thread(target=worker.run, daemon=True))
            threads[-1].start()

        client = dsjob.Client(server.target)
        got = list(client.map("element", [str(n) for n in range(10)], ordered=True))
        values = [int(r.split()[0]) for r in got]
        print(values)
        by = sorted({r.split()[1].decode() for r in got})
        print(f"# done by {', '.join(by)}", file=sys.stderr)
        for w in workers:
            w.stop()
        for t in threads:
            t.join()
    return 0 if values == [n * n for n in range(10)] else 1


if __name__ == "__main__":
    sys.exit(main())
