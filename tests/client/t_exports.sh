#!/bin/sh
# Meta check, in TAP: each installed library exports exactly the symbols
# listed in its exports.txt (all of them dsjob_), nothing internal. Needs
# nm and the built shared objects; skipped without them.
top_srcdir=${top_srcdir:-$(dirname "$0")/../..}
top_builddir=${top_builddir:-.}
command -v nm >/dev/null 2>&1 || { echo "1..0 # SKIP nm not installed"; exit 0; }

n=0
failed=0
ok() { # ok STATUS DESCRIPTION
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi
}

echo "1..4"
for lib in client worker; do
    so=$top_builddir/lib$lib/.libs/libdsjob$lib.so
    list=$top_srcdir/lib$lib/exports.txt
    if [ ! -f "$so" ]; then
        echo "ok $((n += 1)) # SKIP libdsjob$lib.so not built"
        echo "ok $((n += 1)) # SKIP libdsjob$lib.so not built"
        continue
    fi
    got=$(nm -D --defined-only "$so" | awk 'NF >= 3 { print $3 }' | sort)
    want=$(sort "$list")
    if [ "$got" = "$want" ]; then
        ok 0 "libdsjob$lib exports exactly lib$lib/exports.txt"
    else
        ok 1 "libdsjob$lib exports exactly lib$lib/exports.txt"
        printf '%s\n' "$got" > "${TMPDIR:-/tmp}/exports.$$"
        printf '%s\n' "$want" | diff - "${TMPDIR:-/tmp}/exports.$$" | sed 's/^/# /'
        rm -f "${TMPDIR:-/tmp}/exports.$$"
    fi
    bad=$(printf '%s\n' "$got" | grep -v '^dsjob_' | tr '\n' ' ')
    [ -z "$bad" ]
    ok $? "libdsjob$lib exports only dsjob_ symbols${bad:+ (not: $bad)}"
done
exit $failed
