#!/bin/sh
# Replay each fuzz target's committed corpus through its replay binary
# (built without libFuzzer), as one TAP stream.
n=0
fail=0
for t in packet admin server; do
    n=$((n + 1))
    out=$("$top_builddir/tests/fuzz/replay_$t" "$top_srcdir/tests/fuzz/corpus/$t" 2>&1)
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
