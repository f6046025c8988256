#!/bin/sh
# What a user gets from `make install`, in TAP: install the build tree into
# a temporary DESTDIR, then compile the example of every library man page,
# cut out of the installed page, against only the installed headers and
# libraries (through pkg-config with PKG_CONFIG_SYSROOT_DIR, since the .pc
# files name the configured prefix), and run them against the installed
# dsjobd. Each installed header must also compile on its own, as C11 with
# -pedantic and, when a C++ compiler is found, as C++. The systemd unit and
# the sample config are installed, the unit verified (systemd-analyze) and
# dsjobd started from the sample; make uninstall removes them.
#
# Under `make check -j2` the sub-make runs serially without the parent's
# MAKEFLAGS (no jobserver, no command-line variables). make install only
# copies when the tree is up to date, which check guarantees by building
# first; the test checks that with `make -q` before, and after installing
# that no object, library or program in the build tree was written, so it
# never rebuilds under tests that are running. The one exception is
# libtool's own: libdsjobworker links libdsjobclient, so libtool relinks it
# at install against the installed libdsjobclient, into .libs/NAME.soT (and
# .exp, .ver) beside the built library, which it leaves alone.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/meta/lib.sh"

T=$(test_tmpdir)
DEST=$T/dest
CC=${CC:-cc}
CXX=${CXX:-g++}
MAKE=${MAKE:-make}
command -v "$CC" >/dev/null 2>&1 || { echo "1..0 # SKIP no C compiler ($CC)"; exit 0; }
command -v pkg-config >/dev/null 2>&1 || { echo "1..0 # SKIP pkg-config not installed"; exit 0; }
[ -f "$top_builddir/libclient/.libs/libdsjobclient.so" ] || { echo "1..0 # SKIP shared libraries not built"; exit 0; }

unset MAKEFLAGS MFLAGS MAKELEVEL GNUMAKEFLAGS
# config.h is never rewritten when configure's answers did not change, so
# make -q would always call it out of date; it is not what we ask about.
if ! (cd "$top_builddir" && $MAKE -q -o config.h all-am >/dev/null 2>&1); then
    echo "1..0 # SKIP the build tree is not up to date: make install would rebuild it"
    exit 0
fi

libdir=$(pkg-config --variable=libdir "$top_builddir/libdsjobclient.pc")
includedir=$(pkg-config --variable=includedir "$top_builddir/libdsjobclient.pc")

touch "$T/marker"
sleep 1 # so that a file written by the install below is newer than the marker
(cd "$top_builddir" && $MAKE install DESTDIR="$DEST") >"$T/install.log" 2>&1
rc=$?
ok $rc "make install DESTDIR=... succeeds"
[ $rc -eq 0 ] || { sed 's/^/# /' "$T/install.log"; done_testing; exit 1; }
rebuilt=$(find "$top_builddir" -newer "$T/marker" -type f \
    \( -name '*.o' -o -name '*.lo' -o -name '*.la' -o -name '*.a' -o -name '*.so*' \
    -o -name dsjobd -o -name dsjob \) ! -name 'lt-*' ! -name '*.so*T' ! -path "$DEST/*" \
    2>/dev/null)
[ -z "$rebuilt" ]
ok $? "make install wrote nothing into the build tree${rebuilt:+: $(echo $rebuilt)}"

for h in common client worker server; do
    [ -f "$DEST$includedir/dsjob/$h.h" ]
    ok $? "<dsjob/$h.h> is installed in \$includedir/dsjob"
done
for lib in client worker server; do
    [ -f "$DEST$libdir/libdsjob$lib.so" ]
    ok $? "libdsjob$lib.so is installed in \$libdir"
done
for pc in libdsjobclient libdsjobworker libdsjobserver; do
    [ -f "$DEST$libdir/pkgconfig/$pc.pc" ]
    ok $? "$pc.pc is installed in \$libdir/pkgconfig"
done

# The installed tree first, paths under DESTDIR; then the system's .pc
# directories, only for what libdsjobserver.pc requires (libevent).
syspc=$(pkg-config --variable pc_path pkg-config 2>/dev/null)
PKG_CONFIG_LIBDIR=$DEST$libdir/pkgconfig${syspc:+:$syspc}
PKG_CONFIG_SYSROOT_DIR=$DEST
export PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR
unset PKG_CONFIG_PATH
LD_LIBRARY_PATH=$DEST$libdir
export LD_LIBRARY_PATH

# libdsjobworker takes the allocator, dsjob_strerror and dsjob_version from
# libdsjobclient: its .pc must bring -ldsjobclient along.
is "$(pkg-config --print-requires libdsjobworker)" "libdsjobclient" \
    "libdsjobworker.pc requires libdsjobclient"
case " $(pkg-config --libs libdsjobworker) " in
*" -ldsjobclient "*) ok 0 "pkg-config --libs libdsjobworker names -ldsjobclient" ;;
*) ok 1 "pkg-config --libs libdsjobworker names -ldsjobclient" ;;
esac

# libdsjobserver links libevent and jansson (and, when built with them,
# sqlite3, libmemcached and OpenSSL): a dynamic link needs only
# -ldsjobserver, a static one the rest, through Requires.private and
# Libs.private. libevent_pthreads is not linked, so it is not named.
is "$(pkg-config --print-requires-private libdsjobserver | tr '\n' ' ')" \
    "libevent >= 2.1 jansson >= 2.11 " "libdsjobserver.pc: libevent and jansson in Requires.private"
case " $(pkg-config --libs libdsjobserver) " in
*" -levent"*) ok 1 "pkg-config --libs libdsjobserver: no libevent for a dynamic link" ;;
*) ok 0 "pkg-config --libs libdsjobserver: no libevent for a dynamic link" ;;
esac
static=" $(pkg-config --static --libs libdsjobserver) "
case $static in
*" -levent_pthreads "*) ok 1 "pkg-config --static: -levent, not -levent_pthreads ($static)" ;;
*" -levent "*) ok 0 "pkg-config --static: -levent, not -levent_pthreads" ;;
*) ok 1 "pkg-config --static: -levent, not -levent_pthreads ($static)" ;;
esac

flags_of() { # flags_of client|worker|server: compiler and linker flags for the library
    pkg-config --cflags --libs "libdsjob$1"
}

# A sanitizer build's libraries need the sanitizer runtime in the program too.
SAN=
if ldd "$DEST$libdir/libdsjobclient.so" 2>/dev/null | grep -q asan; then
    SAN="-fsanitize=address,undefined"
fi

headers_compile "$DEST$includedir" "installed "

extract() { # extract PAGE OUT: the .Bd -literal block under EXAMPLES
    sed -n '/^\.Sh EXAMPLES/,/^\.Sh /p' "$1" | sed -n '/^\.Bd -literal/,/^\.Ed/p' |
        sed -e '1d' -e '$d' -e 's/\\e/\\/g' -e 's/\\&//g' >"$2"
}

for lib in client worker server; do
    page=$(find "$DEST" -name "dsjob_$lib.3" -type f | head -n 1)
    [ -n "$page" ] && extract "$page" "$T/$lib.c" && [ -s "$T/$lib.c" ]
    ok $? "dsjob_$lib.3 is installed and has an example program"
    flags=$(flags_of $lib)
    # shellcheck disable=SC2086 # the flags are words
    $CC -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter $SAN -o "$T/$lib" "$T/$lib.c" \
        $flags >"$T/$lib.log" 2>&1
    rc=$?
    ok $rc "dsjob_$lib.3's example builds against the installed tree ($flags)"
    [ $rc -eq 0 ] || sed 's/^/# /' "$T/$lib.log"
    if [ $rc -eq 0 ]; then
        resolved=$(ldd "$T/$lib" | awk '/libdsjob/ { print $3 }')
        outside=$(printf '%s\n' "$resolved" | grep -v "^$DEST$libdir/" | tr '\n' ' ')
        [ -n "$resolved" ] && [ -z "$(echo $outside)" ]
        ok $? "dsjob_$lib.3's example loads libdsjob$lib from the installed tree${outside:+ (not: $outside)}"
    fi
done

# run_pair ADDR WHAT: the worker example on ADDR, the client example against it.
run_pair() {
    "$T/worker" "$1" &
    wpid=$!
    out=$(timeout 30 "$T/client" "$1")
    ok $? "$2: the installed client example exits 0 with the worker example running"
    is "$out" "olleh
0 of 100 failed" "$2: the client example prints the result and the task set's count"
    kill -TERM $wpid
    wait $wpid
    ok $? "$2: the worker example stops with status 0 on SIGTERM"
}

DSJOBD=$(find "$DEST" -name dsjobd -type f | head -n 1)
[ -n "$DSJOBD" ] && [ -x "$DSJOBD" ]
ok $? "dsjobd is installed"
if [ -x "$T/client" ] && [ -x "$T/worker" ] && [ -n "$DSJOBD" ] && server_start dsjobd; then
    run_pair "127.0.0.1:$SERVER_PORT" "installed dsjobd"
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
    ok $? "the installed server example prints its address ($addr)"
    if [ -x "$T/client" ] && [ -x "$T/worker" ] && [ -n "$addr" ]; then
        run_pair "$addr" "installed server example"
    fi
    kill -TERM $spid
    wait $spid
    rc=$?
    ok $rc "the server example stops gracefully with status 0 on SIGTERM"
    [ $rc -eq 0 ] || sed 's/^/# /' "$T/server.err"
fi

# The systemd unit and the sample config: in place, consistent with what
# was built, and working.
unit=$(find "$DEST" -path '*/systemd/system/dsjobd.service' -type f | head -n 1)
[ -n "$unit" ]; ok $? "dsjobd.service is installed in a systemd/system directory (${unit#"$DEST"})"
sample=$(find "$DEST" -name dsjobd.conf.sample -type f | head -n 1)
[ -n "$sample" ]; ok $? "dsjobd.conf.sample is installed (${sample#"$DEST"})"
conf=${sample%.sample}
cmp -s "$sample" "$conf"; ok $? "and copied to dsjobd.conf, which did not exist"
if [ -n "$unit" ]; then
    want=forking
    # dsjobd sends sd_notify's datagram itself, when built for systemd: then
    # the binary holds the variable's name.
    grep -a -q NOTIFY_SOCKET "$DSJOBD" && want=notify
    is "$(sed -n 's/^Type=//p' "$unit")" "$want" "the unit's Type= fits the dsjobd built ($want)"
    exec=$(sed -n 's/^ExecStart=\([^ ]*\) .*/\1/p' "$unit")
    [ -x "$DEST$exec" ]; ok $? "its ExecStart names the installed dsjobd ($exec)"
    grep -q -- "--config-file ${conf#"$DEST"}\( \|\$\)" "$unit"
    ok $? "and reads the installed config file"
    unit_verify "$unit" "$exec" "$DEST$exec"
fi
# Every option the sample names, set or in a comment, is one dsjobd takes.
if [ -n "$sample" ] && [ -n "$DSJOBD" ]; then
    "$DSJOBD" --help >"$T/help.txt" 2>&1
    unknown=""
    n=0
    for k in $(sed -n 's/^#* *\([a-z][a-z0-9-]*\)\( *=.*\)\{0,1\}$/\1/p' "$sample"); do
        n=$((n + 1))
        grep -q -- "--$k\([ ,=]\|\$\)" "$T/help.txt" || unknown="$unknown $k"
    done
    [ "$n" -gt 20 ] && [ -z "$unknown" ]
    ok $? "the $n options the sample names are all dsjobd's (unknown:${unknown:- none})"
fi
# The sample serves as it is, with the paths of a test.
if [ -n "$sample" ] && [ -n "$DSJOBD" ] && "$DSJOBD" --help | grep -q -- --work-dir; then
    "$DSJOBD" --config-file "$sample" -p 0 --port-file "$T/sample.port" --work-dir "$T/var" \
        -l "$T/sample.log" &
    spid=$!
    i=0
    while [ ! -s "$T/sample.port" ] && [ $i -lt 100 ] && kill -0 $spid 2>/dev/null; do
        sleep 0.05
        i=$((i + 1))
    done
    [ -s "$T/sample.port" ] && [ -f "$T/var/dsjobd.db" ]
    ok $? "dsjobd starts from the sample config (its work dir overridden)"
    kill -TERM $spid
    wait $spid
    ok $? "and stops with status 0"
fi
# make uninstall takes them away again, the unedited dsjobd.conf included.
(cd "$top_builddir" && $MAKE uninstall DESTDIR="$DEST") >"$T/uninstall.log" 2>&1
ok $? "make uninstall DESTDIR=... succeeds"
left=$(find "$DEST" -name 'dsjobd.service' -o -name 'dsjobd.conf*' | tr '\n' ' ')
is "$left" "" "and removes the unit, the sample and the unedited dsjobd.conf"
done_testing
