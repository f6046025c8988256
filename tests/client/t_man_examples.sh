#!/bin/sh
# The example programs of dsjob_client(3), dsjob_worker(3) and
# dsjob_server(3) are real: cut each out of its page (the .Bd -literal
# block under EXAMPLES, with mdoc's \e turned back into a backslash),
# compile it against the headers and the built libraries, and run the
# client and the worker together against dsjobd, then against the
# server example (a job server inside a program).

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"

T=$(test_tmpdir)
CC=${CC:-cc}
command -v "$CC" >/dev/null 2>&1 || { echo "1..0 # SKIP no C compiler ($CC)"; exit 0; }
[ -f "$top_builddir/libclient/.libs/libdsjobclient.so" ] || { echo "1..0 # SKIP shared libraries not built"; exit 0; }

# A sanitizer build's libraries need the sanitizer runtime in the program too.
SAN=
if ldd "$top_builddir/libclient/.libs/libdsjobclient.so" 2>/dev/null | grep -q asan; then
    SAN="-fsanitize=address,undefined"
fi
LD_LIBRARY_PATH="$top_builddir/libclient/.libs:$top_builddir/libworker/.libs:$top_builddir/server/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH

extract() { # extract PAGE OUT
    sed -n '/^\.Sh EXAMPLES/,/^\.Sh /p' "$1" | sed -n '/^\.Bd -literal/,/^\.Ed/p' |
        sed -e '1d' -e '$d' -e 's/\\e/\\/g' -e 's/\\&//g' >"$2"
}

libs_of() { # libs_of client|worker|server: the linker flags for the built library
    case $1 in
    server) echo "-L$top_builddir/server/.libs -ldsjobserver" ;;
    # libdsjobworker takes the allocator and dsjob_strerror from libdsjobclient.
    worker) echo "-L$top_builddir/libworker/.libs -L$top_builddir/libclient/.libs -ldsjobworker -ldsjobclient" ;;
    *) echo "-L$top_builddir/lib$1/.libs -ldsjob$1" ;;
    esac
}

for lib in client worker server; do
    extract "$top_srcdir/man/dsjob_$lib.3" "$T/$lib.c"
    [ -s "$T/$lib.c" ]
    ok $? "dsjob_$lib.3 has an example program"
    $CC -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter $SAN -I"$top_srcdir/include" \
        -o "$T/$lib" "$T/$lib.c" $(libs_of $lib) >"$T/$lib.log" 2>&1
    rc=$?
    ok $rc "dsjob_$lib.3's example compiles cleanly against <dsjob/$lib.h>"
    [ $rc -eq 0 ] || sed 's/^/# /' "$T/$lib.log"
done

# run_pair ADDR WHAT: the worker example on ADDR, the client example against it.
run_pair() {
    "$T/worker" "$1" &
    wpid=$!
    out=$(timeout 30 "$T/client" "$1")
    ok $? "$2: the client example exits 0 with the worker example running"
    is "$out" "olleh
0 of 100 failed" "$2: the client example prints the result and the task set's count"
    kill -TERM $wpid
    wait $wpid
    ok $? "$2: the worker example stops with status 0 on SIGTERM"
}

if [ -x "$T/client" ] && [ -x "$T/worker" ] && server_start dsjobd; then
    run_pair "127.0.0.1:$SERVER_PORT" dsjobd
    server_stop
fi

if [ -x "$T/server" ]; then
    "$T/server" >"$T/server.out" 2>"$T/server.err" &
    spid=$!
    i=0
    while [ ! -s "$T/server.out" ] && [ $i -lt 100 ] && kill -0 $spid 2>/dev/null; do
        sleep 0.05
        i=$((i + 1))
    done
    addr=$(head -n 1 "$T/server.out")
    printf '%s\n' "$addr" | grep -Eq '^127\.0\.0\.1:[1-9][0-9]*$'
    ok $? "the server example prints the address it bound on a free port ($addr)"
    if [ -x "$T/client" ] && [ -x "$T/worker" ] && [ -n "$addr" ]; then
        run_pair "$addr" "the server example"
    fi
    kill -TERM $spid
    wait $spid
    rc=$?
    ok $rc "the server example stops gracefully with status 0 on SIGTERM"
    [ $rc -eq 0 ] || sed 's/^/# /' "$T/server.err"
fi
done_testing
