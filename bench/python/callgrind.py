"""bench/python/callgrind.py: the client's instructions a background submit,
counted inside the submitting call only, Python's Client.submit_many beside
cref's run_tasks (the C task set), as in bench/RESULTS.md:

    python3 bench/python/callgrind.py STAGE [py|c ...]

STAGE is a directory holding the package as bench/python/run stages it
(dsjob/ with the modules and _dsjob.so). Each side runs twice under
valgrind --tool=callgrind --toggle-collect=FUNCTION, with 2,000 and with
6,000 submits, each against a fresh dsjobd of the build tree; the figure
is the difference over 4,000, so that what a run costs once falls out.
Instruction counts do not move with the machine's load, unlike jobs/s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
B = Path(os.environ.get("top_builddir", HERE.parents[1])).resolve()
N1, N2 = 2000, 6000


def count(kind: str, n: int, stage: str, tmp: str) -> int:
    pf = f"{tmp}/port.{time.monotonic_ns()}"
    d = subprocess.Popen([str(B / "server" / "dsjobd"), "-L", "127.0.0.1", "-p", "0",
                          "--port-file", pf, "-l", "none"])
    try:
        deadline = time.monotonic() + 30
        while not (os.path.exists(pf) and open(pf).read().strip()):
            if time.monotonic() > deadline or d.poll() is not None:
                raise SystemExit("callgrind.py: dsjobd did not start")
            time.sleep(0.02)
        addr = "127.0.0.1:" + open(pf).read().strip()
        out = f"{tmp}/cg.{kind}.{n}"
        vg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
        if kind == "py":
            cmd = [*vg, "--toggle-collect=Client_submit_many", sys.executable,
                   str(HERE / "pyside.py"), "bg", addr, str(n)]
        else:
            cmd = [str(B / "libtool"), "--mode=execute", *vg, "--toggle-collect=run_tasks",
                   str(B / "bench" / "python" / "cref"), "bg", addr, str(n)]
        env = dict(os.environ, PYTHONPATH=stage, LD_LIBRARY_PATH=":".join(
            str(B / d / ".libs") for d in ("libclient", "libworker", "server")))
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    finally:
        d.terminate()
        d.wait()
    with open(out) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise SystemExit(f"callgrind.py: no total in {out}")


def main() -> int:
    stage, kinds = sys.argv[1], sys.argv[2:] or ["py", "c"]
    per = {}
    with tempfile.TemporaryDirectory(prefix="dsjob-cg.") as tmp:
        for k in kinds:
            a, b = count(k, N1, stage, tmp), count(k, N2, stage, tmp)
            per[k] = (b - a) / (N2 - N1)
            print(f"{k}: {a} ({N1}), {b} ({N2}): {per[k]:.0f} instructions a submit",
                  flush=True)
    if len(per) == 2:
        print(f"C / Python = {per['c'] / per['py']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
