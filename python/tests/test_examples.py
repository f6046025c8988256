"""examples/python/ run as a user would, and the interop of the Python
client and worker with the other peers: the Python dataset consumer reads
the C producer (and a failed shard is resubmitted), the C consumer, PHP's
consume.php and Perl's consume.pl read the Python producer, the Python
consumer reads produce.sh under `dsjob worker --stream`, and the Python
client gets results from a libgearman worker (the gearman tool). Every row
is compared with what `dataset-producer --print` makes locally: 8 shards
of 400 rows in all in make check, of 2000 in make check-long.

The tests that read the Python producer (and the libgearman worker's) share
one server of each kind with a producer registered (python_dataset,
started once for the module): only the consumers change from test to
test. The tests whose own producers must be the only ones (the C producer
that fails a shard, produce.sh) start a server of their own."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

import dsjob
from conftest import (PATIENCE, SERVERS, TOP_BUILDDIR, TOP_SRCDIR, Proc, program, registered,
                      sized, start_dsjobd, start_gearmand, wait_for)

EX = TOP_SRCDIR / "examples" / "python"
PRODUCER_C = program(TOP_BUILDDIR / "examples" / "dataset-producer")
CONSUMER_C = program(TOP_BUILDDIR / "examples" / "dataset-consumer")
DSJOB_CLI = program(TOP_BUILDDIR / "tools" / "dsjob")
SHARDS, ROWS, SEED = 8, sized(400, 2000), 42


def spec(shard: int, shards: int = SHARDS, rows: int = ROWS, name: str = "demo") -> str:
    return json.dumps({"dataset": name, "shard": shard, "shards": shards, "seed": SEED,
                       "rows": rows}, separators=(",", ":"))


_expected: dict[tuple, tuple] = {}


def expected(shards: int = SHARDS, rows: int = ROWS) -> tuple[dict, dict]:
    """Each shard's rows and summary as the C producer makes them locally."""
    key = (shards, rows)
    if key not in _expected:
        if not PRODUCER_C.exists():
            pytest.skip("the C examples are not built")
        rows_of, sums = {}, {}
        for s in range(shards):
            out = subprocess.run([str(PRODUCER_C), "--print", spec(s, shards, rows)],
                                 capture_output=True, check=True).stdout.splitlines(True)
            rows_of[s] = out[:-1]
            summ = json.loads(out[-1])
            sums[s] = f"{summ['count']} {summ['adler32']}"
        _expected[key] = (rows_of, sums)
    return _expected[key]


def kept_rows(out: bytes) -> tuple[dict[int, list[bytes]], dict[int, str], list[str]]:
    """The rows a consumer kept per shard (a "drop N" line takes back the
    shard's last N rows), its "ok" lines, and its other marks."""
    rows: dict[int, list[bytes]] = {}
    oks: dict[int, str] = {}
    marks = []
    for line in out.splitlines(True):
        if line.startswith(b"# shard "):
            f = line.decode().split()
            s = int(f[2])
            marks.append(line.decode().strip())
            if f[3] == "drop":
                n = int(f[4].rstrip(":"))
                rows[s] = rows.get(s, [])[:len(rows.get(s, [])) - n]
            elif f[3] == "ok":
                oks[s] = f"{f[4]} {f[5]}"
            continue
        if line.startswith(b"#"):
            continue
        s, _, row = line.partition(b"\t")
        rows.setdefault(int(s), []).append(row)
    return rows, oks, marks


def assert_dataset(out: bytes) -> list[str]:
    rows, oks, marks = kept_rows(out)
    want_rows, want_sums = expected()
    assert rows == want_rows, "every row of every shard exactly once, in order"
    assert oks == want_sums
    return marks


class Procs:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: str | Path, **kw) -> subprocess.Popen:
        p = subprocess.Popen([str(a) for a in args], **kw)
        self.procs.append(p)
        return p

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(PATIENCE)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def procs():
    ps = Procs()
    yield ps
    ps.stop_all()


def py_producer(procs: Procs, addr: str, concurrency: int) -> None:
    """A Python producer making concurrency shards at once (threads)."""
    procs.start(sys.executable, EX / "dataset_producer.py", "-s", addr, "-c", str(concurrency))
    wait_for(lambda: registered(addr, "dataset.shard", concurrency), "the Python producer")


@pytest.fixture(scope="module", params=SERVERS)
def python_dataset(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """A dsjobd (no kept results: PHP's and Perl's consumers submit the same
    unique keys) or a gearmand 1.1.20 with a Python producer of 4 threads
    registered (one process: each Python start costs a fifth of a second),
    shared by the tests that only consume: each consumer runs foreground
    jobs to the end, so nothing of one test is left for the next."""
    tmp = tmp_path_factory.mktemp(request.param)
    s = start_dsjobd(tmp) if request.param == "dsjobd" else start_gearmand(tmp)
    ps = Procs()
    try:
        py_producer(ps, s.addr, 4)
        yield s
    finally:
        ps.stop_all()
        s.stop()


def consumer_py(addr: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EX / "dataset_consumer.py"), "-s", addr,
                           "-n", str(SHARDS), "-r", str(ROWS), "--seed", str(SEED), *extra],
                          capture_output=True, timeout=120)


def test_dispatch_server_example() -> None:
    r = subprocess.run([sys.executable, str(EX / "dispatch_server.py"), "--workers", "3"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str([n * n for n in range(10)])


def test_dispatch_server_example_work_dir(tmp_path) -> None:
    r = subprocess.run([sys.executable, str(EX / "dispatch_server.py"), "--work-dir",
                        str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "dsjobd.db").exists()


def test_python_consumer_python_producer(python_dataset) -> None:
    r = consumer_py(python_dataset.addr)
    assert r.returncode == 0, r.stderr.decode()
    assert_dataset(r.stdout)


def test_python_consumer_reads_c_producer_and_resubmits(own_server, procs, tmp_path) -> None:
    server = own_server
    expected()
    claim = tmp_path / "fail.claim"
    procs.start(PRODUCER_C, "-s", server.addr)
    procs.start(PRODUCER_C, "-s", server.addr, "--fail", f"30:{claim}")
    wait_for(lambda: registered(server.addr, "dataset.shard", 2), "two C producers")
    r = consumer_py(server.addr)
    assert r.returncode == 0, r.stderr.decode()
    marks = assert_dataset(r.stdout)
    assert claim.exists(), "the failing producer failed a shard"
    drops = [m for m in marks if " drop 30: attempt 1 failed" in m]
    assert len(drops) == 1, marks


def test_c_consumer_reads_python_producer(python_dataset) -> None:
    expected()
    r = subprocess.run([str(CONSUMER_C), "-s", python_dataset.addr, "-n", str(SHARDS), "-r",
                        str(ROWS), "--seed", str(SEED)], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    assert_dataset(r.stdout)


def test_python_producer_exception_text(python_dataset) -> None:
    with pytest.raises(dsjob.JobFailed) as e:
        dsjob.Client(python_dataset.addr).submit("dataset.shard", b'{"dataset":"demo","shard":9,'
                                                 b'"shards":8,"seed":1}')
    assert e.value.text == "ValueError: 'shard' must be a number below 'shards'"


@pytest.mark.parametrize("lang", ["php", "perl"])
def test_php_and_perl_clients_read_python_producer(python_dataset, lang) -> None:
    expected()
    if lang == "php":
        if subprocess.run(["php", "-r", 'exit(class_exists("GearmanClient") ? 0 : 1);'],
                          capture_output=True).returncode != 0:
            pytest.skip("php with the gearman extension (php-gearman) is not installed")
        cmd = ["php", str(TOP_SRCDIR / "examples" / "php" / "consume.php")]
    else:
        cmd = ["perl", str(TOP_SRCDIR / "examples" / "perl" / "consume.pl")]
    r = subprocess.run([*cmd, python_dataset.addr, "demo", str(SHARDS), str(ROWS), str(SEED)],
                       capture_output=True, timeout=120)
    # (a perl without one of the modules says so at once: no perl of its own to ask first)
    missing = re.search(rb"Can't locate (\S+)\.pm in @INC", r.stderr)
    if lang == "perl" and r.returncode != 0 and missing:
        pytest.skip(f"Perl's {missing[1].decode().replace('/', '::')} is not installed"
                    " (Gearman::Client: libgearman-client-perl)")
    assert r.returncode == 0, r.stderr.decode()
    assert_dataset(r.stdout)


def test_python_consumer_reads_produce_sh_under_dsjob_worker(own_server, procs) -> None:
    server = own_server
    expected()
    if not DSJOB_CLI.exists():
        pytest.skip("tools/dsjob is not built")
    procs.start(DSJOB_CLI, "worker", "-s", server.addr, "-c", "4", "--stream", "-f",
                "dataset.shard", "--", "sh", TOP_SRCDIR / "examples" / "scripts" / "produce.sh")
    wait_for(lambda: registered(server.addr, "dataset.shard"), "dsjob worker")
    r = consumer_py(server.addr)
    assert r.returncode == 0, r.stderr.decode()
    assert_dataset(r.stdout)


def test_python_client_to_libgearman_worker(python_dataset, procs) -> None:
    server = python_dataset
    gearman = os.environ.get("GEARMAN") or shutil.which("gearman")
    if not gearman:
        pytest.skip("the gearman tool (libgearman) is not installed")
    procs.start(gearman, "-h", "127.0.0.1", "-p", str(server.port), "-w", "-f", "rev", "--",
                "rev")
    wait_for(lambda: registered(server.addr, "rev"), "the libgearman worker")
    c = dsjob.Client(server.addr)
    assert c.submit("rev", b"hello\n") == b"olleh\n"
    assert list(c.map("rev", [b"ab\n", b"cd\n"], ordered=True)) == [b"ba\n", b"dc\n"]


def test_nightly_priorities_run_at_and_saves(procs, tmp_path) -> None:
    expected(4, 400)
    s = start_dsjobd(tmp_path)
    try:
        r = subprocess.run([sys.executable, str(EX / "nightly.py"), "-s", s.addr, "demo", "4",
                            "400", str(SEED)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        handles = dict(line.split() for line in r.stdout.splitlines())
        assert sorted(handles) == ["0", "1", "2", "3"]
        at = int(time.time()) + 86400
        r = subprocess.run([sys.executable, str(EX / "nightly.py"), "-s", s.addr, "--at",
                            str(at), "demo", "4", "400", str(SEED)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        later = r.stdout.split()[1]
        jobs = {j["handle"]: j for j in dsjob.Client(s.addr).jobs()}
        assert jobs[handles["0"]]["priority"] == "high"
        assert {jobs[handles[k]]["priority"] for k in "123"} == {"low"}
        assert jobs[later]["run_at"] == at and jobs[later]["state"] == "scheduled"
        out = tmp_path / "saved"
        out.mkdir()
        procs.start(PRODUCER_C, "-s", s.addr, "--save-dir", out)
        want_rows, _ = expected(4, 400)
        for k in range(4):
            f = out / f"demo-{k}-of-4.tsv"
            wait_for(lambda: f.exists() and f.read_bytes().count(b"\n") == len(want_rows[k]),
                     f"{f.name} saved")
            assert f.read_bytes() == b"".join(want_rows[k])
    finally:
        s.stop()
