#!/bin/sh
# Replay each fuzz target's committed corpus through its replay binary
# (built without libFuzzer), as one TAP stream. A target that was not
# built (fuzz_store without SQLite) is skipped. A replay binary that is a
# libtool wrapper (those linked with the shared client library) is run
# as the program it wraps (server.sh's unwrap_libtool): the wrapper is a
# bash and a dozen seds a run.
. "$top_srcdir/tests/lib/server.sh"
n=0
fail=0
for t in packet admin server client worker store; do
    n=$((n + 1))
    bin="$top_builddir/tests/fuzz/replay_$t"
    unwrap_libtool bin
    if [ ! -x "$bin" ]; then
        echo "ok $n - fuzz_$t # SKIP not built"
        continue
    fi
    out=$("$bin" "$top_srcdir/tests/fuzz/corpus/$t" 2>&1)
    rc=$?
    if [ $rc -eq 0 ]; then
        # Its "ok N - " lines without that, taken apart by the shell.
        said=
        while IFS= read -r l; do
            case $l in "ok "[0-9]*" - "*) said="$said${said:+ }${l#ok * - }" ;; esac
        done <<EOF
$out
EOF
        echo "ok $n - fuzz_$t corpus replays: $said"
    else
        echo "not ok $n - fuzz_$t corpus replays (exit $rc)"
        echo "$out" | sed 's/^/# /'
        fail=1
    fi
done
echo "1..$n"
exit $fail
