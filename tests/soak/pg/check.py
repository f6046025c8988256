#!/usr/bin/env python3
"""The guarantees checker (doc/guarantees.md): reads a run's history (what
was submitted and acknowledged, what the workers ran, what the clients
observed, what the SQL transactions did, the snapshots of the table taken
at the faults) and the database, and checks each guarantee from them, not
from job status. soak_pg.py calls check() after every cell; on its own,

    check.py HISTORY.json [--port PORT --db DB]

checks a kept history again (with the database of a --keep run, if given).

The history (a dict):
  jobs      [{id, kind, server, sent, ack, handle, err, execs: [[t, server, handle]], obs}]
            kind "bg" (SUBMIT_JOB_BG), "uq" (a unique-key probe: one submit of a
            pair sent to two servers with one key), "rt" "dd" "kp" (retry, dead
            set, kept result: the survival checks); times are seconds of the
            run's monotonic clock; ack is when JOB_CREATED came, err when
            ERROR did (neither: the answer was lost with the connection);
            obs is when GET_STATUS said the job is gone after its worker
            had written WORK_COMPLETE
  txns      [{id, outcome: commit|rollback|unknown, handle, t}] (dsjob.submit)
  snapshots [{t0, t1, handles: [...]}]: the live rows (state 0) of the soak's
            functions read between t0 and t1
  phantoms  [text]: executions of payloads nobody submitted
  survive   [{what, handle, before: {...}, after: {...}}]: rows read before a
            crash and after the restart, and what the server said of them
  final_live [handle]: live rows of the soak's functions left after the drain
"""
import json
import sys


def _execs(j, before=None):
    if before is None:
        return j["execs"]
    return [e for e in j["execs"] if e[0] < before]


def check(h):
    """Returns (results, counts): results is a list of (guarantee, ok, detail)."""
    jobs = h["jobs"]
    res = []
    counts = {}

    acked = [j for j in jobs if j["ack"] is not None and j["kind"] in ("bg", "uq", "rt", "dd", "kp")]
    # uq pairs count once: the key's first acknowledged submit
    seen_keys = set()
    acked_once = []
    for j in acked:
        if j["kind"] == "uq":
            if j["key"] in seen_keys:
                continue
            seen_keys.add(j["key"])
        acked_once.append(j)
    counts["acknowledged"] = len(acked_once)
    counts["refused"] = sum(1 for j in jobs if j["err"] is not None)
    counts["unanswered"] = sum(1 for j in jobs if j["kind"] != "tx" and j["ack"] is None and j["err"] is None)

    # 1. Acknowledged only once durable: at every snapshot, a job acknowledged
    # before it began and not yet handed to a worker is a live row.
    bad = []
    seen = 0
    for s in h["snapshots"]:
        live = set(s["handles"])
        for j in acked:
            if j["kind"] != "bg" or j["ack"] >= s["t0"]:
                continue
            if _execs(j, s["t1"]):
                continue
            seen += 1
            if j["handle"] not in live:
                bad.append("job %d (%s) acknowledged at %.3f, not run, absent at the snapshot of %.3f"
                           % (j["id"], j["handle"], j["ack"], s["t0"]))
    res.append(("acknowledged only once durable", not bad,
                "%d snapshots, %d acknowledged jobs not yet run at them; %s"
                % (len(h["snapshots"]), seen, "; ".join(bad[:5]) or "each was a row")))

    # 2. At least once: every acknowledged job ran (a key's probes: once for the key).
    lost = []
    key_ran = {}
    for j in jobs:
        if j["kind"] == "uq" and j["execs"]:
            key_ran[j["key"]] = True
    for j in acked_once:
        ran = key_ran.get(j["key"]) if j["kind"] == "uq" else bool(j["execs"])
        if j["kind"] == "dd":
            continue  # a dead job ran at least once by construction; its survival is 6
        if not ran:
            lost.append(j)
    counts["lost"] = len(lost)
    res.append(("at least once", not lost,
                "%d acknowledged, %d never ran%s" % (len(acked_once), len(lost),
                                                       "".join(": job %d %s" % (j["id"], j["handle"]) for j in lost[:5]))))

    # run twice: executions past the first, all kinds
    dups = 0
    for j in jobs:
        if len(j["execs"]) > 1:
            dups += len(j["execs"]) - 1
    counts["run twice"] = dups

    # 3. An observed completion never runs again.
    reruns = []
    for j in jobs:
        if j.get("obs") is None:
            continue
        later = [e for e in j["execs"] if e[0] > j["obs"]]
        if later:
            reruns.append("job %d %s observed done at %.3f ran again at %.3f on %s"
                          % (j["id"], j["handle"], j["obs"], later[0][0], later[0][1]))
    counts["observed"] = sum(1 for j in jobs if j.get("obs") is not None)
    counts["reruns"] = len(reruns)
    res.append(("an observed completion never runs again", not reruns,
                "%d completions observed; %s" % (counts["observed"], "; ".join(reruns[:5]) or "none ran again")))

    # 4. Unique keys coalesce across servers while the job lives.
    bykey = {}
    for j in jobs:
        if j["kind"] == "uq":
            bykey.setdefault(j["key"], []).append(j)
    split = []
    for k, js in sorted(bykey.items()):
        ok = [j for j in js if j["ack"] is not None]
        handles = {j["handle"] for j in ok}
        if len(handles) > 1:
            # different handles are right only if the first job had already ended
            first = min(ok, key=lambda j: j["ack"])
            later = max(ok, key=lambda j: j["ack"])
            ended = any(e[2] == first["handle"] and e[0] < later["sent"] for jj in js for e in jj["execs"])
            if not ended:
                split.append("key %s: handles %s" % (k, sorted(handles)))
    both = sum(1 for js in bykey.values() if sum(1 for j in js if j["ack"] is not None) > 1)
    res.append(("unique keys coalesce across servers", not split,
                "%d keys, %d acknowledged by both servers; %s" % (len(bykey), both, "; ".join(split[:5]) or "one job each")))

    # 5. dsjob.submit() in a transaction: runs if and only if it commits.
    ran_t = set()
    for j in jobs:
        if j["kind"] == "tx" and j["execs"]:
            ran_t.add(j["id"])
    tbad = []
    n = {"commit": 0, "rollback": 0, "unknown": 0}
    for t in h["txns"]:
        n[t["outcome"]] += 1
        if t["outcome"] == "commit" and t["id"] not in ran_t:
            tbad.append("txn %d committed (%s), never ran" % (t["id"], t["handle"]))
        if t["outcome"] == "rollback" and t["id"] in ran_t:
            tbad.append("txn %d rolled back, ran" % t["id"])
    counts["txn lost"] = sum(1 for x in tbad if "never ran" in x)
    res.append(("a transaction's submit runs iff it commits", not tbad,
                "%d committed, %d rolled back, %d commit outcome unknown; %s"
                % (n["commit"], n["rollback"], n["unknown"], "; ".join(tbad[:5]) or "as committed")))

    # 6. A retry schedule, a dead set entry and a kept result survive a crash.
    sbad = []
    for s in h.get("survive", []):
        if not s["ok"]:
            sbad.append("%s %s: %s" % (s["what"], s["handle"], s["why"]))
    res.append(("retry schedule, dead set and kept result survive a crash", not sbad,
                "%d checked; %s" % (len(h.get("survive", [])), "; ".join(sbad[:5]) or "all there after the restart")
                if h.get("survive") else "not exercised in this cell"))

    # No phantoms, and nothing left behind in the table.
    res.append(("no phantom execution", not h["phantoms"],
                "; ".join(h["phantoms"][:5]) or "every execution was a job submitted with those bytes"))
    left = h.get("final_live", [])
    res.append(("the table drained", not left,
                "%d live rows left%s" % (len(left), (": " + ", ".join(left[:5])) if left else "")))
    return res, counts


def main():
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("history")
    ap.add_argument("--port", type=int)
    ap.add_argument("--db")
    a = ap.parse_args()
    with open(a.history) as f:
        h = json.load(f)
    if a.port and a.db:
        from pgwire import PG

        pg = PG(a.port, db=a.db)
        h["final_live"] = [r[0] for r in pg.query(
            "SELECT handle FROM dsjob.jobs WHERE state = 0 AND func LIKE 'soak%'")]
    res, counts = check(h)
    fail = False
    for name, ok, detail in res:
        print("%s %s: %s" % ("ok" if ok else "FAILED", name, detail))
        fail |= not ok
    print(" ".join("%s=%s" % kv for kv in counts.items()))
    sys.exit(1 if fail else 0)


if __name__ == "__main__":
    main()
