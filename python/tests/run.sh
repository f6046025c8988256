#!/bin/sh
# make check's Python suite: pytest (Debian's python3-pytest) on python/tests
# with the package as built in this tree: the modules from the sources and
# the libtool module python/.libs/_dsjob.so, staged side by side in a
# scratch directory, and the three libraries from their .libs. Each pytest
# test becomes one TAP line (python/tests/junit2tap.py), pytest's own
# output a TAP comment. Extra arguments go to pytest. DSJOB_PYTEST_FILES
# names the test files to run (in python/tests); without it, every file but
# test_install.py, which pip-installs the package and so compiles the
# extension again: make check-long runs it (python/tests/install.sh).
set -u
: "${top_srcdir:=.}" "${top_builddir:=.}" "${PYTHON:=python3}"
if [ "${HAVE_PYTEST:-no}" != yes ]; then
    echo "1..0 # SKIP pytest is not installed for $PYTHON (Debian: apt-get install python3-pytest)"
    exit 0
fi
stage=$(mktemp -d "${TMPDIR:-/tmp}/dsjob-py.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/dsjob"
for f in "$top_srcdir"/python/dsjob/*.py "$top_srcdir"/python/dsjob/*.pyi \
    "$top_srcdir"/python/dsjob/py.typed; do
    ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$stage/dsjob/"
done
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
if [ -n "${DSJOB_PYTEST_FILES:-}" ]; then
    for f in $DSJOB_PYTEST_FILES; do set -- "$tests/$f" "$@"; done
else
    set -- "$tests" --ignore="$tests/test_install.py" "$@"
fi
"$PYTHON" -m pytest -p no:cacheprovider -q -rfE --junitxml="$stage/junit.xml" "$@" \
    > "$stage/out" 2>&1
rc=$?
sed 's/^/# /' "$stage/out"
if [ ! -s "$stage/junit.xml" ]; then
    echo "Bail out! pytest exited $rc without a report"
    exit 1
fi
"$PYTHON" "$top_srcdir/python/tests/junit2tap.py" "$stage/junit.xml"
