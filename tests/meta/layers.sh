#!/bin/sh
# Meta check of the server's layers, in TAP: storage (the group-commit
# engine, storage.c) and what is below it (the store backends, job, clock,
# log) call nothing of the modules above them. What a commit means is the
# caller's continuation (durable.c, lifecycle.c, storage_lease.c), so an
# undefined symbol of an upper module in one of these objects is a call
# climbing back up: a cycle. One check an object, on the built objects
# (libtool's PIC ones, or the plain ones of a --disable-shared build).
#
# Environment (from AM_TESTS_ENVIRONMENT): top_builddir, the build tree.
# Run by hand, it defaults to the directory above this script's.

top_builddir=${top_builddir:-$(dirname "$0")/../..}
NM=${NM:-nm}
if ! command -v "$NM" >/dev/null 2>&1; then
    echo "1..0 # SKIP $NM not installed"
    exit 0
fi

# The modules above storage, by prefix: none of them may be called from below.
above='lifecycle|conn|queue|dispatch|admin|http|stats|srv|durable|listener|tls|storage_lease|storage_want_lease'
# Below storage.c, storage itself is above: a backend does not call it either.
lower="storage job log clock store store_null store_sqlite store_memcached store_postgres \
store_pg_import mcindex idset pq_lazy mc_lazy"

# One nm for every object and one awk for the verdicts (a process a check
# was most of this test's cost): MODULE=OBJECT words, OBJECT empty when
# the module is not built.
pairs=
objs=
for m in $lower; do
    obj=
    for o in "$top_builddir/server/.libs/libdsserver_la-$m.o" \
        "$top_builddir/server/libdsserver_la-$m.o"; do
        if [ -f "$o" ]; then
            obj=$o
            break
        fi
    done
    pairs="$pairs $m=$obj"
    objs="$objs${obj:+ $obj}"
done
# shellcheck disable=SC2086 # the objects are words
{ [ -z "$objs" ] || "$NM" -u -A $objs; } | awk -v pairs="$pairs" -v above="$above" '
    { f = $1; sub(/:$/, "", f); syms[f] = syms[f] " " $NF }
    END {
        n = split(pairs, p, " ")
        for (i = 1; i <= n; i++) {
            m = p[i]; obj = m; sub(/=.*/, "", m); sub(/^[^=]*=/, "", obj)
            if (obj == "") { print "ok " i " - server/" m ".c # SKIP not built"; continue }
            deny = above
            if (m ~ /^store/ || m ~ /^(mcindex|idset|pq_lazy|mc_lazy)$/) deny = above "|storage"
            k = split(syms[obj], s, " "); calls = ""
            for (j = 1; j <= k; j++) if (s[j] ~ ("^(" deny ")_")) calls = calls s[j] " "
            if (calls == "") print "ok " i " - server/" m ".c calls no module above it"
            else print "not ok " i " - server/" m ".c calls up: " calls
        }
        print "1.." n
    }'
