#!/bin/sh
# make check's Python suite: pytest (Debian's python3-pytest) on python/tests
# with the package as built in this tree: the modules from the sources and
# the libtool module python/.libs/_dsjob.so, staged side by side in a
# scratch directory, and the three libraries from their .libs. Each pytest
# test becomes one TAP line (python/tests/junit2tap.py), pytest's own
# output a TAP comment. Extra arguments go to pytest. DSJOB_PYTEST_FILES
# names the test files to run (in python/tests); without it, every file but
# test_install.py, which pip-installs the package and so compiles the
# extension again: make check-long runs it (python/tests/install.sh). One
# pytest run: its start (pytest's own modules) costs half a second of CPU.
# The tests that take a `server` run against dsjobd; make check-long runs
# them against gearmand 1.1.20 too, at full size (python/tests/long.sh:
# DSJOB_PY_SERVERS, DSJOB_PY_LONG, read by conftest.py).
set -u
: "${top_srcdir:=.}" "${top_builddir:=.}" "${PYTHON:=python3}"
if [ "${HAVE_PYTEST:-no}" != yes ]; then
    echo "1..0 # SKIP pytest is not installed for $PYTHON (Debian: apt-get install python3-pytest)"
    exit 0
fi
stage=$(mktemp -d "${TMPDIR:-/tmp}/dsjob-py.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/dsjob"
src=$(cd "$top_srcdir/python/dsjob" && pwd)
ln -s "$src"/*.py "$src"/*.pyi "$src/py.typed" "$stage/dsjob/"
# Compiled once, here: each of the dozen Pythons the suite starts (examples,
# producers, consumers, worker scripts) would compile them again, since
# PYTHONDONTWRITEBYTECODE (below) keeps caches out of the source tree.
"$PYTHON" -m compileall -q "$stage/dsjob" >/dev/null
ln -s "$(cd "$top_builddir" && pwd)/python/.libs/_dsjob.so" "$stage/dsjob/_dsjob.so"
b=$(cd "$top_builddir" && pwd)
PYTHONPATH="$stage${PYTHONPATH:+:$PYTHONPATH}"
LD_LIBRARY_PATH="$b/libclient/.libs:$b/libworker/.libs:$b/server/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH LD_LIBRARY_PATH PYTHONDONTWRITEBYTECODE
# A sanitizer build: the interpreter is not instrumented, so its runtime is
# preloaded; Python's own allocations at exit are not leaks of ours.
case "${SAN_CFLAGS:-}" in
*address*)
    LD_PRELOAD="$($CC -print-file-name=libasan.so) $($CC -print-file-name=libubsan.so)"
    ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    ASAN_OPTIONS=$(echo "$ASAN_OPTIONS" | sed 's/detect_leaks=1/detect_leaks=0/g')
    export LD_PRELOAD ASAN_OPTIONS
    ;;
esac
cd "$stage" || exit 1
tests=$(cd "$top_srcdir/python/tests" && pwd)
# pytest NAME ARGS...: one pytest run, its report in NAME.xml, its output
# in NAME.out, its own temporary directory.
pytest() {
    name=$1
    shift
    "$PYTHON" -m pytest -p no:cacheprovider -q -rfE --junitxml="$stage/$name.xml" \
        --basetemp="$stage/$name.tmp" "$@" > "$stage/$name.out" 2>&1
}
if [ -n "${DSJOB_PYTEST_FILES:-}" ]; then
    for f in $DSJOB_PYTEST_FILES; do set -- "$tests/$f" "$@"; done
    pytest all "$@"
else
    pytest all "$tests" --ignore="$tests/test_install.py" "$@"
fi
runs=all
reports=
for r in $runs; do
    sed 's/^/# /' "$stage/$r.out"
    if [ ! -s "$stage/$r.xml" ]; then
        echo "Bail out! pytest ($r) exited without a report"
        exit 1
    fi
    reports="$reports $stage/$r.xml"
done
# shellcheck disable=SC2086 # the reports' paths have no blanks: mktemp's
"$PYTHON" "$top_srcdir/python/tests/junit2tap.py" $reports
