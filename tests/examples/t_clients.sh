#!/bin/sh
# Example 5, existing Gearman clients reading the dataset from the C
# producer, against dsjobd (make check) and gearmand 1.1.20
# (t_clients_gearmand.sh, make check-long): examples/php/consume.php
# (php-gearman) and examples/perl/consume.pl (Gearman::Client). Two
# producers run, one of which fails a shard once after 30 rows, so that
# each client's own resubmission (PHP: a second run of the failed tasks;
# Perl: retry_count) is exercised too. Each client's kept rows are compared
# with `dataset-producer --print` (tests/examples/lib.sh) and its "ok"
# lines with the local summaries. A client that is not installed is
# skipped, saying so; CI installs both.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/examples/lib.sh"

if [ ! -x "$PRODUCER" ]; then
    echo "1..0 # SKIP the examples are not built ($EXAMPLES)"
    exit 0
fi
HAVE_PHP=yes
php -r 'exit(class_exists("GearmanClient") ? 0 : 1);' 2>/dev/null || HAVE_PHP=
HAVE_PERL=yes
perl -MGearman::Client -MJSON::PP -MCompress::Zlib -e 1 2>/dev/null || HAVE_PERL=

CHECKS=8

# producers N: the server counts exactly N workers able to run dataset.shard
# (none when it does not list the function).
producers() {
    _got=$(status_of dataset.shard | cut -f4)
    [ "${_got:-0}" = "$1" ]
}

# client NAME COMMAND...: runs a client with two producers, one failing a
# shard once. The client starts only once the server counts both: a loaded
# machine can start the failing one after the other has made all 8 shards,
# and then nothing fails (seen in CI against gearmand).
client() {
    _n=$1
    shift
    rm -f "$d/$_n.claim"
    poll producers 0 || diag "$K: the last client's producers are still counted"
    timeout -k 5 120 "$PRODUCER" -s "127.0.0.1:$SERVER_PORT" &
    track $!
    timeout -k 5 120 "$PRODUCER" -s "127.0.0.1:$SERVER_PORT" --fail "30:$d/$_n.claim" &
    track $!
    await_admin status "dataset.shard	*	2" || diag "$K: the server does not count both producers"
    timeout -k 5 120 "$@" "127.0.0.1:$SERVER_PORT" demo 8 2000 42 >"$d/$_n.out" 2>"$d/$_n.err"
    rc=$?
    reap
}

checks() {
    d="$T/$K"
    mkdir -p "$d"
    if [ -n "$HAVE_PHP" ]; then
        client php php "$top_srcdir/examples/php/consume.php"
        same "$rc" 0 "php-gearman: consume.php exits 0"
        rows_are "$d/php.out" "$K: php-gearman: every row of every shard exactly once"
        oks_are "$d/php.out" "$K: php-gearman: counts and checksums are the local ones"
        check "php-gearman: the shard that failed was run again" \
            grep -q "shard [0-9]*, attempt 1 failed" "$d/php.err"
    else
        skip_n 4 "$K: php with the gearman extension (php-gearman) not installed"
    fi
    if [ -n "$HAVE_PERL" ]; then
        client perl perl "$top_srcdir/examples/perl/consume.pl"
        same "$rc" 0 "Gearman::Client: consume.pl exits 0"
        rows_are "$d/perl.out" "$K: Gearman::Client: every row of every shard exactly once"
        oks_are "$d/perl.out" "$K: Gearman::Client: counts and checksums are the local ones"
        check "Gearman::Client: the shard that failed was submitted again" \
            grep -q "shard [0-9]* failed, again" "$d/perl.err"
    else
        skip_n 4 "$K: Perl Gearman::Client not installed"
    fi
}

expect_dataset "$T" demo 8 2000 42 || { echo "Bail out! dataset-producer --print failed"; exit 1; }
run_servers
