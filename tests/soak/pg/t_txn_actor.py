#!/usr/bin/env python3
"""TAP: soak_pg.py's transaction actor records each dsjob.submit()
transaction's outcome as the session saw it. A make soak-pg
SOAK_PG_FLAGS=--short run (seed 1796488293, pg-restart cell) reported a
"txn rolled back, ran": its transaction 113 had sent COMMIT (the seed's
coin says so, and it matches all 319 other outcomes), the session died
under the immediate shutdown, and the connect refused while PostgreSQL
started again ("the database system is starting up") relabelled that
unknown outcome "rollback". The commit had been flushed, so the job ran:
the harness was wrong, not the server. Driven here with scripted sessions,
no PostgreSQL."""
import os
import random
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak_pg  # noqa: E402
from pgwire import PGError  # noqa: E402


class Session:
    """A scripted session: BEGIN and the submit answer; COMMIT and ROLLBACK do what end says."""

    def __init__(self, handle, end):
        self.handle, self.end, self.sent = handle, end, []
        self.stop = None  # called once it answered COMMIT or ROLLBACK

    def query(self, sql):
        self.sent.append(sql)
        if sql in ("COMMIT", "ROLLBACK") and self.end is not None:
            raise self.end
        if sql in ("COMMIT", "ROLLBACK"):
            self.stop()
        return []

    def execute(self, sql, params):
        self.sent.append("submit")
        return [(self.handle,)]

    def close(self):
        pass


def seed_for(commit_first):
    """A seed whose actor's first coin is COMMIT (or ROLLBACK)."""
    for s in range(1000):
        if (random.Random(s + 1).random() < 0.75) == commit_first:
            return s
    raise AssertionError("no seed")


def run(script, commit_first):
    """txn_actor over script: each connect takes the next item (a Session, or
    an exception it raises); the last one stops the actor."""
    r = soak_pg.Run.__new__(soak_pg.Run)
    r.a = types.SimpleNamespace(seed=seed_for(commit_first))
    r.stopping = False
    r.tjobs, r.byname, r.txns = [], {}, []
    r.t0 = soak_pg.now()
    items = list(script)

    def connect(app="soak-pg", user="postgres"):
        item = items.pop(0)
        if not items:
            r.stopping = True
        if isinstance(item, Exception):
            raise item
        item.stop = lambda: setattr(r, "stopping", True)
        return item

    r.pg = connect
    saved = soak_pg.time
    soak_pg.time = types.SimpleNamespace(sleep=lambda s: None, time=saved.time)
    try:
        r.txn_actor()
    finally:
        soak_pg.time = saved
    return r.txns


def main():
    starting = PGError({"C": "57P03", "M": "the database system is starting up"})
    cases = [
        ("COMMIT sent, the session died, the reconnect refused while PostgreSQL starts: unknown",
         [Session("H:sql:1", EOFError("closed")), starting, OSError("refused")], True, "unknown"),
        ("COMMIT answered with an error (a FATAL at shutdown), the reconnect refused: unknown",
         [Session("H:sql:1", PGError({"C": "57P01", "M": "terminating connection"})), starting,
          OSError("refused")], True, "unknown"),
        ("ROLLBACK sent, the session died, the reconnect refused: rollback",
         [Session("H:sql:1", EOFError("closed")), starting, OSError("refused")], False, "rollback"),
        ("COMMIT answered: commit", [Session("H:sql:1", None), OSError("unused")], True, "commit"),
    ]
    print("1..%d" % len(cases))
    allok = True
    for i, (name, script, commit_first, want) in enumerate(cases, 1):
        txns = run(script, commit_first)
        got = txns[0]["outcome"] if txns else None
        ok = got == want and txns[0]["handle"] == "H:sql:1"
        allok &= ok
        print("%s %d - %s%s" % ("ok" if ok else "not ok", i, name,
                                "" if ok else " (got %r: %r)" % (got, txns)))
    return 0 if allok else 1


if __name__ == "__main__":
    sys.exit(main())
