#!/bin/sh
# Meta check, in TAP: each installed library exports exactly the symbols
# listed in its exports.txt (all of them dsjob_), nothing internal; no
# symbol is defined by both (the allocator, dsjob_strerror and
# dsjob_version are libdsjobclient's alone), and libdsjobworker takes them
# from libdsjobclient, which it needs. Needs nm and the built shared
# objects; skipped without them.
top_srcdir=${top_srcdir:-$(dirname "$0")/../..}
top_builddir=${top_builddir:-.}
command -v nm >/dev/null 2>&1 || { echo "1..0 # SKIP nm not installed"; exit 0; }

n=0
failed=0
ok() { # ok STATUS DESCRIPTION
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi
}

echo "1..7"
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

cso=$top_builddir/libclient/.libs/libdsjobclient.so
wso=$top_builddir/libworker/.libs/libdsjobworker.so
if [ -f "$cso" ] && [ -f "$wso" ]; then
    defined() { nm -D --defined-only "$1" | awk 'NF >= 3 { print $3 }' | sort; }
    defined "$cso" >"${TMPDIR:-/tmp}/exports_c.$$"
    defined "$wso" >"${TMPDIR:-/tmp}/exports_w.$$"
    both=$(comm -12 "${TMPDIR:-/tmp}/exports_c.$$" "${TMPDIR:-/tmp}/exports_w.$$" | tr '\n' ' ')
    rm -f "${TMPDIR:-/tmp}/exports_c.$$" "${TMPDIR:-/tmp}/exports_w.$$"
    [ -z "$both" ]
    ok $? "no symbol is defined by both libraries${both:+ (both: $both)}"
    missing=
    for s in dsjob_malloc dsjob_free; do
        nm -D --undefined-only "$wso" | awk '{ print $NF }' | grep -qx "$s" || missing="$missing $s"
    done
    [ -z "$missing" ]
    ok $? "libdsjobworker calls libdsjobclient's dsjob_malloc and dsjob_free${missing:+ (not:$missing)}"
    if command -v readelf >/dev/null 2>&1; then
        readelf -d "$wso" | grep NEEDED | grep -q 'libdsjobclient\.so'
        ok $? "libdsjobworker.so needs libdsjobclient.so"
    else
        echo "ok $((n += 1)) # SKIP readelf not installed"
    fi
else
    for i in 1 2 3; do echo "ok $((n += 1)) # SKIP libraries not built"; done
fi
exit $failed
