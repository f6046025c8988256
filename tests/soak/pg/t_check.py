#!/usr/bin/env python3
"""TAP: the guarantees checker (check.py) passes a clean history and fails
each guarantee on a history that breaks it, so that a soak-pg cell that
says "ok" has been checked, not just counted. Histories are built here,
in the shape soak_pg.py writes them."""
import copy
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402


def job(id, kind="bg", ack=1.0, handle=None, execs=((2.0, "A"),), obs=None, key=None, sent=0.5):
    h = handle or "H:x:%d" % id
    return {"id": id, "kind": kind, "key": key, "server": "A", "sent": sent, "ack": ack, "handle": h,
            "err": None, "execs": [[t, s, h] for t, s in execs], "obs": obs}


def clean():
    jobs = [job(0), job(1, execs=((2.0, "A"), (5.0, "B"))), job(2, ack=None, execs=()),
            job(3, obs=2.5), job(4, ack=3.0, execs=((6.0, "B"),))]
    # a unique key sent to A and B: one handle
    jobs += [job(5, "uq", handle="H:u:1", key="u1", execs=((7.0, "A"),)),
             job(6, "uq", handle="H:u:1", key="u1", execs=())]
    # transactions: 1 committed (ran), 2 rolled back (did not), 3 unknown (ran)
    jobs += [job(1, "tx", ack=None, execs=((3.0, "A"),)), job(3, "tx", ack=None, execs=((4.0, "B"),))]
    return {"jobs": jobs,
            "txns": [{"id": 1, "outcome": "commit", "handle": "H:sql:1", "t": 1.0},
                     {"id": 2, "outcome": "rollback", "handle": "H:sql:2", "t": 1.0},
                     {"id": 3, "outcome": "unknown", "handle": "H:sql:3", "t": 1.0}],
            # at 4.0 job 4 (acknowledged at 3.0, run at 6.0) must be a row
            "snapshots": [{"t0": 4.0, "t1": 4.1, "handles": ["H:x:4"]}],
            "phantoms": [], "survive": [{"what": "dead set entry", "handle": "H:d", "ok": True, "why": ""}],
            "final_live": []}


def verdict(h):
    res, counts = check.check(h)
    return {name: ok for name, ok, _ in res}, counts


def breaks(name, mutate, guarantee, n):
    h = copy.deepcopy(clean())
    mutate(h)
    v, _ = verdict(h)
    others = [g for g, ok in v.items() if not ok and g != guarantee]
    good = not v[guarantee] and not others
    print("%s %d - %s: fails '%s'%s" % ("ok" if good else "not ok", n, name, guarantee,
                                       "" if good else " (verdict %s)" % v))
    return good


def main():
    tests = [
        ("an acknowledged, unrun job missing from a snapshot",
         lambda h: h["snapshots"][0].__setitem__("handles", []), "acknowledged only once durable"),
        ("an acknowledged job that never ran",
         lambda h: h["jobs"][4].__setitem__("execs", []), "at least once"),
        ("a job run after its completion was observed",
         lambda h: h["jobs"][3]["execs"].append([9.0, "B", "H:x:3"]), "an observed completion never runs again"),
        ("one unique key, two live jobs",
         lambda h: h["jobs"][6].__setitem__("handle", "H:u:2"), "unique keys coalesce across servers"),
        ("a rolled-back transaction's job ran",
         lambda h: h["jobs"].append(job(2, "tx", ack=None)), "a transaction's submit runs iff it commits"),
        ("a committed transaction's job never ran",
         lambda h: h["jobs"][7].__setitem__("execs", []), "a transaction's submit runs iff it commits"),
        ("a dead set entry gone after a crash",
         lambda h: h["survive"][0].__setitem__("ok", False),
         "retry schedule, dead set and kept result survive a crash"),
        ("an execution nobody submitted",
         lambda h: h["phantoms"].append("soak ran b'x9'"), "no phantom execution"),
        ("a live row left after the drain",
         lambda h: h["final_live"].append("H:x:9"), "the table drained"),
    ]
    print("1..%d" % (len(tests) + 1))
    v, counts = verdict(clean())
    bad = [g for g, ok in v.items() if not ok]
    ok = not bad and counts["lost"] == 0 and counts["run twice"] == 1 and counts["acknowledged"] == 5
    print("%s 1 - a clean history passes every check (acknowledged 5, run twice 1)%s"
          % ("ok" if ok else "not ok", "" if ok else ": %s %s" % (bad, counts)))
    allok = ok
    for i, (name, m, g) in enumerate(tests):
        allok &= breaks(name, m, g, i + 2)
    return 0 if allok else 1


if __name__ == "__main__":
    sys.exit(main())
