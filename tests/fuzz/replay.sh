#!/bin/sh
# Replay each fuzz target's committed corpus through its replay binary
# (built without libFuzzer), as one TAP stream. A target that was not
# built (fuzz_store without SQLite) is skipped.
n=0
fail=0
for t in packet admin server client worker store; do
    n=$((n + 1))
    bin="$top_builddir/tests/fuzz/replay_$t"
    if [ ! -x "$bin" ]; then
        echo "ok $n - fuzz_$t # SKIP not built"
        continue
    fi
    out=$("$bin" "$top_srcdir/tests/fuzz/corpus/$t" 2>&1)
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "ok $n - fuzz_$t corpus replays: $(echo "$out" | grep '^ok' | sed 's/^ok [0-9]* - //')"
    else
        echo "not ok $n - fuzz_$t corpus replays (exit $rc)"
        echo "$out" | sed 's/^/# /'
        fail=1
    fi
done
echo "1..$n"
exit $fail
