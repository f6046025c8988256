#!/bin/sh
# The example programs of dsjob_client(3) and dsjob_worker(3) are real:
# cut each out of its page (the .Bd -literal block under EXAMPLES, with
# mdoc's \e turned back into a backslash), compile it against the
# headers and the built libraries, and run the two together against dsjobd.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"

T=$(test_tmpdir)
CC=${CC:-cc}
command -v "$CC" >/dev/null 2>&1 || { echo "1..0 # SKIP no C compiler ($CC)"; exit 0; }
LIBS="$top_builddir/libclient/.libs $top_builddir/libworker/.libs"
[ -f "$top_builddir/libclient/.libs/libdsjobclient.so" ] || { echo "1..0 # SKIP shared libraries not built"; exit 0; }

# A sanitizer build's libraries need the sanitizer runtime in the program too.
SAN=
if ldd "$top_builddir/libclient/.libs/libdsjobclient.so" 2>/dev/null | grep -q asan; then
    SAN="-fsanitize=address,undefined"
fi
LD_LIBRARY_PATH="$top_builddir/libclient/.libs:$top_builddir/libworker/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH

extract() { # extract PAGE OUT
    sed -n '/^\.Sh EXAMPLES/,/^\.Sh /p' "$1" | sed -n '/^\.Bd -literal/,/^\.Ed/p' |
        sed -e '1d' -e '$d' -e 's/\\e/\\/g' -e 's/\\&//g' >"$2"
}

for lib in client worker; do
    extract "$top_srcdir/man/dsjob_$lib.3" "$T/$lib.c"
    [ -s "$T/$lib.c" ]
    ok $? "dsjob_$lib.3 has an example program"
    $CC -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter $SAN -I"$top_srcdir/include" \
        -o "$T/$lib" "$T/$lib.c" -L"$top_builddir/lib$lib/.libs" -ldsjob$lib >"$T/$lib.log" 2>&1
    rc=$?
    ok $rc "dsjob_$lib.3's example compiles cleanly against <dsjob/$lib.h>"
    [ $rc -eq 0 ] || sed 's/^/# /' "$T/$lib.log"
done

if [ -x "$T/client" ] && [ -x "$T/worker" ] && server_start dsjobd; then
    "$T/worker" "127.0.0.1:$SERVER_PORT" &
    wpid=$!
    out=$(timeout 30 "$T/client" "127.0.0.1:$SERVER_PORT")
    ok $? "the client example exits 0 with the worker example running"
    is "$out" "olleh
0 of 100 failed" "the client example prints the result and the task set's count"
    kill -TERM $wpid
    wait $wpid
    ok $? "the worker example stops with status 0 on SIGTERM"
    server_stop
fi
done_testing
