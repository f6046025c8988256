"""Batches (dsjobd BATCHES) from the Python package: Client.batch opens one,
its submit joins jobs, the block's end closes it; the callbacks reach a
Python worker with the summary; status and the listing read it back."""
from __future__ import annotations

import json
import queue

import dsjob
import pytest
from conftest import PATIENCE, wait_for


def test_batch_callbacks(dsjobd, run_worker, fn) -> None:
    got: queue.Queue = queue.Queue()
    w = dsjob.Worker(dsjobd.addr)

    @w.function(fn("shard"))
    def shard(job):
        return job.payload

    @w.function(fn("merge"))
    def merge(job):
        got.put((job.unique, json.loads(job.payload)))
        return b""

    run_worker(w, concurrency=2)
    c = dsjob.Client(dsjobd.addr)
    with c.batch("py1", on_complete=fn("merge"), on_success=fn("merge")) as b:
        jobs = [b.submit(fn("shard"), str(i)) for i in range(8)]
        assert c.batch_status("py1")["closed"] is False
    assert len({j.handle for j in jobs}) == 8
    seen = {}
    for _ in range(2):
        unique, summary = got.get(timeout=PATIENCE)
        seen[unique] = summary
    assert set(seen) == {"batch:py1:complete", "batch:py1:success"}
    assert seen["batch:py1:complete"]["total"] == 8
    assert seen["batch:py1:complete"]["done"] == 8
    wait_for(lambda: c.batch_status("py1")["fired_success"], "the status to say fired")
    st = c.batch_status("py1")
    assert (st["total"], st["pending"], st["closed"], st["fired_complete"]) == (8, 0, True, True)
    assert [r["id"] for r in c.batches()] == ["py1"]  # the run's only batch
    with pytest.raises(dsjob.Refused) as e:
        b.submit(fn("shard"), "late")
    assert e.value.code == "BATCH_CLOSED"
    with pytest.raises(dsjob.Refused) as e:
        c.batch("py1")
    assert e.value.code == "BATCH_EXISTS"
