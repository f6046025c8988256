"""Builds the dsjob package: the _dsjob extension over libdsjobclient,
libdsjobworker and libdsjobserver, offline with setuptools.

Where the C libraries are found, first match wins:
  1. DSJOB_BUILD_DIR (a built dsjob tree; DSJOB_SRCDIR its sources if they
     are elsewhere): headers from the sources, libraries from the build's
     .libs directories, with that path as the extension's run path;
  2. the tree this directory sits in (../include and ../libclient/.libs),
     when it has been built;
  3. pkg-config libdsjobclient libdsjobworker libdsjobserver (an installed
     dsjob; PKG_CONFIG_PATH for a prefix of your own).
"""

import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
LIBS = ["dsjobclient", "dsjobworker", "dsjobserver"]


def from_tree(src, build):
    libdirs = [os.path.join(build, d, ".libs") for d in ("libclient", "libworker", "server")]
    if not os.path.exists(os.path.join(src, "include", "dsjob", "client.h")):
        return None
    if not all(os.path.exists(os.path.join(d, f"lib{n}.so"))
               for d, n in zip(libdirs, LIBS)):
        return None
    return {"include_dirs": [os.path.join(src, "include")], "library_dirs": libdirs,
            "libraries": LIBS, "runtime_library_dirs": libdirs, "extra_compile_args": []}


def from_pkg_config():
    try:
        cflags = subprocess.check_output(["pkg-config", "--cflags", *(f"lib{n}" for n in LIBS)],
                                         text=True)
        libs = subprocess.check_output(["pkg-config", "--libs", *(f"lib{n}" for n in LIBS)],
                                       text=True)
        libdir = subprocess.check_output(["pkg-config", "--variable=libdir", "libdsjobclient"],
                                         text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    inc = [a[2:] for a in shlex.split(cflags) if a.startswith("-I")]
    ldirs = [a[2:] for a in shlex.split(libs) if a.startswith("-L")]
    names = [a[2:] for a in shlex.split(libs) if a.startswith("-l")]
    system = libdir in ("/usr/lib", "/usr/lib64", "/lib") or libdir.startswith("/usr/lib/")
    return {"include_dirs": inc, "library_dirs": ldirs, "libraries": names,
            "runtime_library_dirs": [] if system else [libdir], "extra_compile_args": []}


def find():
    build = os.environ.get("DSJOB_BUILD_DIR")
    if build:
        found = from_tree(os.environ.get("DSJOB_SRCDIR", build), build)
        if found is None:
            sys.exit(f"setup.py: DSJOB_BUILD_DIR={build} holds no built libdsjobclient, "
                     "libdsjobworker and libdsjobserver (run make there first)")
        return found
    found = from_tree(os.path.dirname(HERE), os.path.dirname(HERE)) or from_pkg_config()
    if found is None:
        sys.exit("setup.py: no dsjob C libraries: build the tree this directory is in "
                 "(./configure && make), set DSJOB_BUILD_DIR to a built tree, or install "
                 "dsjob so that pkg-config finds libdsjobclient")
    return found


setup(
    name="dsjob",
    version="0.1.0",
    description="dsjob for Python: Gearman-protocol client, workers and server in-process",
    packages=["dsjob"],
    package_data={"dsjob": ["py.typed", "*.pyi"]},
    python_requires=">=3.11",
    ext_modules=[Extension("dsjob._dsjob", sources=["src/_dsjob.c"], **find())],
)
