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

n=0
for m in $lower; do
    n=$((n + 1))
    obj=
    for o in "$top_builddir/server/.libs/libdsserver_la-$m.o" \
        "$top_builddir/server/libdsserver_la-$m.o"; do
        if [ -f "$o" ]; then
            obj=$o
            break
        fi
    done
    if [ -z "$obj" ]; then
        echo "ok $n - server/$m.c # SKIP not built"
        continue
    fi
    deny=$above
    case $m in
    store* | mcindex | idset | pq_lazy | mc_lazy) deny="$above|storage" ;;
    esac
    calls=$("$NM" -u "$obj" | awk '{ print $NF }' | grep -E "^($deny)_" | tr '\n' ' ')
    if [ -z "$calls" ]; then
        echo "ok $n - server/$m.c calls no module above it"
    else
        echo "not ok $n - server/$m.c calls up: $calls"
    fi
done
echo "1..$n"
