"""pip installs the package offline against this built tree: setup.py finds
the headers and the libraries (DSJOB_BUILD_DIR), builds _dsjob, and the
installed copy works in a clean environment (no PYTHONPATH, no
LD_LIBRARY_PATH: the extension's run path finds the libraries)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import TOP_BUILDDIR, TOP_SRCDIR

ROUND_TRIP = """
import threading, dsjob
with dsjob.Server() as s:
    w = dsjob.Worker(s.target)
    w.register("twice", lambda job: job.payload * 2)
    t = threading.Thread(target=w.run)
    t.start()
    print(dsjob.__version__, dsjob.Client(s.target).submit("twice", b"ab").decode())
    w.stop()
    t.join()
"""


def test_pip_install_offline(tmp_path) -> None:
    if subprocess.run([sys.executable, "-m", "pip", "--version"],
                      capture_output=True).returncode != 0:
        pytest.skip("pip is not installed (Debian: python3-pip)")
    src = tmp_path / "src"
    shutil.copytree(TOP_SRCDIR / "python", src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "PIP_INDEX_URL", "PIP_FIND_LINKS")}
    env["DSJOB_BUILD_DIR"] = str(TOP_BUILDDIR)
    env["DSJOB_SRCDIR"] = str(TOP_SRCDIR)
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                        "--no-build-isolation", "--target", str(target), str(src)],
                       env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (target / "dsjob" / "_dsjob.pyi").exists() and (target / "dsjob" / "py.typed").exists()
    del env["DSJOB_BUILD_DIR"], env["DSJOB_SRCDIR"]
    env["PYTHONPATH"] = str(target)
    r = subprocess.run([sys.executable, "-c", ROUND_TRIP], env=env, capture_output=True,
                       text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0.1.0", "abab"]
