#!/bin/sh
# What `make install` ships, checked in the build tree, in TAP: the part of
# t_install.sh that needs no install, for make check (t_install.sh, which
# installs into a DESTDIR and builds the pages' examples against it, is in
# make check-long). Each public header compiles on its own, as C11 with
# -pedantic and, when a C++ compiler is found, as C++; the .pc files bring
# what a link needs; the systemd unit fits the dsjobd built and verifies
# (systemd-analyze); every option the sample config names is dsjobd's, and
# dsjobd serves from the sample. The man pages' examples are built and run
# against the build tree by tests/client/t_man_examples.sh.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/meta/lib.sh"

T=$TEST_TMPDIR
CC=${CC:-cc}
CXX=${CXX:-g++}
command -v "$CC" >/dev/null 2>&1 || { echo "1..0 # SKIP no C compiler ($CC)"; exit 0; }

headers_compile "$top_srcdir/include"

# The .pc files as configure made them (the installed ones are these).
if command -v pkg-config >/dev/null 2>&1; then
    PKG_CONFIG_PATH=$top_builddir
    export PKG_CONFIG_PATH
    is "$(pkg-config --print-requires libdsjobworker)" "libdsjobclient" \
        "libdsjobworker.pc requires libdsjobclient"
    is "$(pkg-config --print-requires-private libdsjobserver | tr '\n' ' ')" \
        "libevent >= 2.1 jansson >= 2.11 " "libdsjobserver.pc: libevent and jansson in Requires.private"
else
    diag "pkg-config not installed: the .pc files are not read"
fi

# The unit make built: its type fits the dsjobd built, it verifies.
unit=$top_builddir/contrib/dsjobd.service
if [ -f "$unit" ]; then
    want=forking
    grep -a -q NOTIFY_SOCKET "$DSJOBD" && want=notify
    is "$(sed -n 's/^Type=//p' "$unit")" "$want" "the unit's Type= fits the dsjobd built ($want)"
    unit_verify "$unit" "$(sed -n 's/^ExecStart=\([^ ]*\) .*/\1/p' "$unit")" "$DSJOBD"
fi

# Every option the sample names, set or in a comment, is one dsjobd takes
# (one awk for them all); and it serves as it is, with a test's paths.
sample=$top_srcdir/contrib/dsjobd.conf.sample
"$DSJOBD" --help >"$T/help.txt" 2>&1
out=$(awk 'NR == FNR { for (i = 1; i <= NF; i++) if ($i ~ /^--[a-z]/) { o = $i; sub(/[,=].*/, "", o); known[o] = 1 }; next }
    /^#* *[a-z][a-z0-9-]*( *=.*)?$/ { k = $0; sub(/^#* */, "", k); sub(/ *=.*/, "", k); n++
        if (!(("--" k) in known)) unknown = unknown " " k }
    END { print n + 0, (unknown == "" ? " none" : unknown) }' "$T/help.txt" "$sample")
n=${out%% *}
[ "$n" -gt 20 ] && [ "${out#* }" = " none" ]
ok $? "the $n options the sample names are all dsjobd's (unknown:${out#* })"
if grep -q -- --work-dir "$T/help.txt"; then
    "$DSJOBD" --config-file "$sample" -p 0 --port-file "$T/sample.port" --work-dir "$T/var" \
        -l "$T/sample.log" &
    spid=$!
    await_file "$T/sample.port" "" "$spid"
    [ -s "$T/sample.port" ] && [ -f "$T/var/dsjobd.db" ]
    ok $? "dsjobd starts from the sample config (its work dir overridden)"
    kill -TERM $spid
    wait $spid
    ok $? "and stops with status 0"
fi
done_testing
