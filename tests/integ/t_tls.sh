#!/bin/sh
# TLS on the Gearman port (dsjobd --ssl), end to end with real components:
# a throwaway PKI made with the openssl command line, our client and worker
# libraries through dsjob, openssl s_client speaking a Gearman ECHO_REQ,
# plain, stalled and garbage peers that must cost only their own
# connection, --ssl-verify-client refusing a certificate of another CA and
# no certificate, the unix socket staying plain, startup errors that name
# the file, and Debian's gearman CLI (whose libgearman has no TLS: -S
# still speaks plain text, so it is refused like any plain client). A
# plain dsjob (submit, submit -b, worker, status) prints the server's
# TLS_REQUIRED and exits 3, as a failed handshake does (submit -b too).
# What README and doc/operations.md say of the other tools: none of
# gearman, gearadmin, php-gearman and Perl's Gearman::Client takes a unix
# socket's path, and Perl's client and worker speak TLS with use_ssl.
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/lib/tls.sh"
dir=$(test_tmpdir)

if [ "${HAVE_OPENSSL:-}" != yes ]; then
    echo "1..0 # SKIP built without OpenSSL"
    exit 0
fi
command -v "$OPENSSL_BIN" >/dev/null 2>&1 || { echo "1..0 # SKIP no openssl command"; exit 0; }
tls_make_pki "$dir/pki" || { echo "Bail out! cannot make the test PKI"; exit 1; }
P=$dir/pki

_pids=""
bg_stop_all() {
    for p in $_pids; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    _pids=""
}
# A failure shows the servers' logs: the reason is there, and the directory goes.
show_logs() {
    [ "$_tap_fail" -eq 0 ] && return
    for f in "$TEST_TMPDIR"/dsjobd.*.log; do
        [ -f "$f" ] && sed 's/^/# /' "$f" | tail -60
    done
}
trap 'bg_stop_all; server_stop_all; show_logs; rm -rf "$TEST_TMPDIR"' EXIT

wait_log() { # wait_log PATTERN: until the server's log has it, at most 10 s
    i=0
    while ! grep -q -- "$1" "$SERVER_LOG" 2>/dev/null && [ $i -lt 200 ]; do
        sleep 0.05
        i=$((i + 1))
    done
    grep -q -- "$1" "$SERVER_LOG"
}

# sclient OUT ARGS...: openssl s_client -quiet ARGS, sending the ECHO_REQ
# of $dir/echo.req, its answer in OUT. Its input stays open until OUT has
# the 20 bytes of an ECHO_RES or s_client is gone (the server refused it),
# at most 120 s; then the end of input ends it (-no_ign_eof: -quiet alone
# ignores it, and s_client ran until its timeout).
sclient() {
    _out=$1
    shift
    rm -f "$dir/sclient.in"
    mkfifo "$dir/sclient.in"
    : >"$_out"
    timeout 180 "$OPENSSL_BIN" s_client -quiet -no_ign_eof "$@" <"$dir/sclient.in" >"$_out" \
        2>>"$dir/sclient.err" &
    _sc=$!
    exec 8>"$dir/sclient.in"
    cat "$dir/echo.req" >&8
    _i=0
    while [ "$(wc -c <"$_out")" -lt 20 ] && kill -0 "$_sc" 2>/dev/null && [ $_i -lt 2400 ]; do
        sleep 0.05
        _i=$((_i + 1))
    done
    exec 8>&-
    wait "$_sc"
}

# Startup errors: each names the option, and the file when it is a file.
out=$(timeout 10 "$DSJOBD" -p 0 --ssl 2>&1); rc=$?
is "$rc" 2 "--ssl without a certificate exits 2"
echo "$out" | grep -q -- "--ssl needs --ssl-certificate and --ssl-key"; ok $? "saying so: $out"
out=$(timeout 10 "$DSJOBD" -p 0 --ssl-certificate "$P/server.pem" 2>&1); rc=$?
is "$rc" 2 "a TLS file without --ssl exits 2 (no silent plain text)"
out=$(timeout 10 "$DSJOBD" -p 0 --ssl --ssl-certificate "$P/server.pem" --ssl-key "$P/server.key" \
    --ssl-verify-client 2>&1); rc=$?
is "$rc" 2 "--ssl-verify-client without --ssl-ca-file exits 2"
echo "$out" | grep -q -- "--ssl-verify-client needs --ssl-ca-file"; ok $? "saying so: $out"
out=$(timeout 10 "$DSJOBD" -L 127.0.0.1 -p 0 --ssl --ssl-certificate "$dir/none.pem" \
    --ssl-key "$P/server.key" 2>&1); rc=$?
is "$rc" 1 "a missing certificate file stops the start"
echo "$out" | grep -q -- "--ssl-certificate: cannot load '$dir/none.pem'"; ok $? "naming it: $out"
out=$(timeout 10 "$DSJOBD" -L 127.0.0.1 -p 0 --ssl --ssl-certificate "$P/server.pem" \
    --ssl-key "$P/client.key" 2>&1); rc=$?
is "$rc" 1 "a key that is not the certificate's stops the start"
echo "$out" | grep -q -- "--ssl-key: .*'$P/client.key'"; ok $? "naming it: $out"
out=$(timeout 10 "$DSJOBD" -L 127.0.0.1 -p 0 --ssl --ssl-certificate "$P/server.pem" \
    --ssl-key "$P/server.key" --ssl-ca-file "$P/server.ext" 2>&1); rc=$?
is "$rc" 1 "a CA file with no certificate in it stops the start"
echo "$out" | grep -q -- "--ssl-ca-file: cannot load '$P/server.ext'"; ok $? "naming it: $out"

# A TLS server with a plain unix socket beside it.
sock=$dir/dsjobd.sock
server_start dsjobd --verbose INFO --idle-timeout 2 --unix-socket "$sock" \
    --ssl --ssl-certificate "$P/server.pem" --ssl-key "$P/server.key" || exit 1
S=127.0.0.1:$SERVER_PORT
TLS="--ssl-ca-file $P/ca.pem"

# shellcheck disable=SC2086
"$DSJOB" -s "$S" $TLS worker -f tls.upper -- tr a-z A-Z >/dev/null 2>"$dir/worker.err" &
_pids="$_pids $!"
# shellcheck disable=SC2086
out=$(echo hello | "$DSJOB" -s "$S" $TLS -t 10000 submit tls.upper 2>&1)
is "$out" "HELLO" "a foreground job runs through our client and worker over TLS"
# shellcheck disable=SC2086
out=$(echo later | "$DSJOB" -s "localhost:$SERVER_PORT" $TLS -t 10000 submit -b tls.upper 2>&1)
case $out in H:*) ok 0 "a background job over TLS, by the name localhost: $out" ;;
*) ok 1 "a background job over TLS, by the name localhost: $out" ;; esac
grep -q "TLS handshake done: TLSv1.[23]" "$SERVER_LOG"; ok $? "the server logs the handshakes at INFO"
out=$(echo plain | "$DSJOB" -s "$sock" -t 10000 submit tls.upper 2>&1)
is "$out" "PLAIN" "the unix socket stays plain"

# openssl s_client speaking a real Gearman packet: ECHO_REQ "tls-echo".
printf '\000REQ\000\000\000\020\000\000\000\010tls-echo' >"$dir/echo.req"
printf '\000RES\000\000\000\021\000\000\000\010tls-echo' >"$dir/echo.want"
sclient "$dir/echo.got" -connect "$S" -CAfile "$P/ca.pem" -verify_return_error \
    -verify_hostname localhost
cmp -s "$dir/echo.got" "$dir/echo.want"; ok $? "openssl s_client gets ECHO_RES back, byte for byte"
out=$(timeout 10 "$OPENSSL_BIN" s_client -connect "$S" -CAfile "$P/ca.pem" -tls1_1 </dev/null 2>&1)
echo "$out" | grep -q "BEGIN CERTIFICATE"; is $? 1 "TLS 1.1 is refused (1.2 at least)"

# A plain Gearman client on the TLS port: told why in its own protocol, then closed.
printf '\000REQ\000\000\000\020\000\000\000\005plain' >"$dir/plain.req"
perl -MIO::Socket::INET -e '
    my $s = IO::Socket::INET->new("127.0.0.1:$ARGV[0]") or die "connect: $!";
    open(my $f, "<", $ARGV[1]) or die; local $/; my $d = <$f>; print $s $d; shutdown($s, 1);
    my $r = ""; while (sysread($s, my $b, 4096)) { $r .= $b } print $r;' \
    "$SERVER_PORT" "$dir/plain.req" >"$dir/plain.got" 2>&1
grep -q "TLS_REQUIRED" "$dir/plain.got"; ok $? "a plain client gets ERROR TLS_REQUIRED"
wait_log "TLS handshake failed: the peer speaks plain Gearman"
ok $? "the server logs the refusal at INFO, with the peer"
grep "the peer speaks plain Gearman" "$SERVER_LOG" | grep -q "127.0.0.1:[0-9]"
ok $? "naming the peer's address and port"

# A plain admin line on the TLS port: told in a text line, not a binary packet.
got=$(perl -MIO::Socket::INET -e '
    my $s = IO::Socket::INET->new("127.0.0.1:$ARGV[0]") or die "connect: $!";
    print $s "version\n"; shutdown($s, 1);
    my $r = ""; while (sysread($s, my $b, 4096)) { $r .= $b } print $r;' "$SERVER_PORT" 2>&1)
case $got in
"ERR TLS_REQUIRED "*) ok 0 "a plain admin line gets a text ERR TLS_REQUIRED line" ;;
*) ok 1 "a plain admin line gets a text ERR TLS_REQUIRED line (got: $(printf '%s' "$got" | od -c | head -2))" ;;
esac

# Garbage that looks like a TLS record, and a peer that stalls mid-handshake.
perl -MIO::Socket::INET -e '
    my $s = IO::Socket::INET->new("127.0.0.1:$ARGV[0]") or die;
    print $s "\x16\x03\x01\x00\x10" . ("\xff" x 16); shutdown($s, 1);
    1 while sysread($s, my $b, 4096);' "$SERVER_PORT"
wait_log "TLS handshake failed: error:"; ok $? "garbage in a TLS record fails its handshake (logged)"
perl -MIO::Socket::INET -e '
    my $s = IO::Socket::INET->new("127.0.0.1:$ARGV[0]") or die;
    print $s "\x16\x03\x01\x00\xff\x01";   # half a ClientHello, then nothing
    sleep 60;' "$SERVER_PORT" &
stall=$!
_pids="$_pids $stall"
# shellcheck disable=SC2086
out=$(echo bystander | "$DSJOB" -s "$S" $TLS -t 10000 submit tls.upper 2>&1)
is "$out" "BYSTANDER" "a bystander's job runs while a handshake stalls"
wait_log "TLS handshake not done in"; ok $? "the stalled handshake is closed at --idle-timeout"
kill "$stall" 2>/dev/null; wait "$stall" 2>/dev/null

# Clients that do not trust the server, or do not speak TLS at all.
out=$(echo x | "$DSJOB" -s "$S" --ssl-ca-file "$P/other-ca.pem" -t 10000 submit tls.upper 2>&1)
rc=$?
is "$rc" 3 "a client that does not trust the server's CA cannot reach it (exit 3)"
echo "$out" | grep -q "certificate verify failed"; ok $? "saying why: $out"
out=$(echo x | "$DSJOB" -s "$S" --ssl-ca-file "$dir/none.pem" submit tls.upper 2>&1); rc=$?
is "$rc" 2 "dsjob --ssl-ca-file with a missing file exits 2"
echo "$out" | grep -q "cannot load CA file '$dir/none.pem'"; ok $? "naming it: $out"
out=$(echo x | "$DSJOB" -s "$S" --ssl-ca-file "$P/other-ca.pem" -t 10000 submit -b tls.upper 2>&1)
rc=$?
is "$rc" 3 "submit -b not trusting the server's CA cannot reach it (exit 3, as in the foreground)"
out=$(echo x | "$DSJOB" -s "$S" -t 5000 submit tls.upper 2>&1); rc=$?
[ "$rc" -eq 3 ] && echo "$out" | grep -q "saying TLS_REQUIRED: this server takes TLS connections only"
ok $? "a plain dsjob submit to the TLS port: exit 3 with the server's TLS_REQUIRED (rc $rc: $out)"
out=$(echo x | "$DSJOB" -s "$S" -t 5000 submit -b tls.upper 2>&1); rc=$?
[ "$rc" -eq 3 ] && echo "$out" | grep -q "saying TLS_REQUIRED"
ok $? "a plain dsjob submit -b too (rc $rc: $out)"
# The worker retries for ever: wait (60 s at most) for its first reason, then stop it.
timeout 120 "$DSJOB" -s "$S" worker -f tls.plain -- cat >/dev/null 2>"$dir/pw.err" &
pw=$!
i=0
while ! grep -q "saying TLS_REQUIRED" "$dir/pw.err" && [ $i -lt 1200 ] && kill -0 $pw 2>/dev/null; do
    sleep 0.05
    i=$((i + 1))
done
kill $pw 2>/dev/null
wait $pw 2>/dev/null
grep -q "saying TLS_REQUIRED" "$dir/pw.err"
ok $? "a plain dsjob worker says why it is refused: $(head -1 "$dir/pw.err")"
# shellcheck disable=SC2086
out=$(DSJOB_SSL_CA_FILE=$P/ca.pem "$DSJOB" -s "$S" -t 10000 submit tls.upper env 2>&1)
is "$out" "ENV" "DSJOB_SSL_CA_FILE turns TLS on"
# The admin verbs over TLS, on the same port.
# shellcheck disable=SC2086
out=$("$DSJOB" -s "$S" $TLS -t 10000 status --format tsv 2>&1); rc=$?
is "$rc" 0 "dsjob status over TLS exits 0"
echo "$out" | grep -q "^tls.upper	"; ok $? "and lists tls.upper ($(echo "$out" | grep "^tls.upper" | tr '\t' ' '))"
out=$("$DSJOB" -s "$S" --ssl-ca-file "$P/other-ca.pem" -t 10000 status 2>&1); rc=$?
is "$rc" 3 "dsjob status not trusting the server's CA cannot reach it (exit 3)"
echo "$out" | grep -q "certificate verify failed"; ok $? "saying why: $out"
out=$("$DSJOB" -s "$S" -t 5000 status 2>&1); rc=$?
[ "$rc" -eq 3 ] && echo "$out" | grep -q "TLS_REQUIRED"
ok $? "a plain dsjob status to the TLS port: exit 3 with TLS_REQUIRED (rc $rc: $out)"

# Tools that take no unix socket's path (README, doc/operations.md): each fails on it.
if [ -n "${GEARMAN:-}" ] && [ -x "$GEARMAN" ]; then
    out=$(echo x | timeout 10 "$GEARMAN" -h "$sock" -f tls.upper 2>&1)
    echo "$out" | grep -q "Name or service not known" && [ "$out" != "X" ]
    ok $? "gearman -h PATH does not reach the unix socket: $(echo "$out" | head -1)"
else
    ok 0 "# SKIP gearman CLI not installed"
fi
if [ -n "${GEARADMIN:-}" ] && [ -x "$GEARADMIN" ]; then
    out=$(timeout 10 "$GEARADMIN" -h "$sock" --status 2>&1); rc=$?
    [ "$rc" -ne 0 ] && ! echo "$out" | grep -q "^tls.upper"
    ok $? "gearadmin -h PATH does not either (rc $rc): $(echo "$out" | head -1)"
else
    ok 0 "# SKIP gearadmin not installed"
fi
if php -r 'exit(class_exists("GearmanClient") ? 0 : 1);' 2>/dev/null; then
    out=$(timeout 10 php -r '$c = new GearmanClient(); @$c->addServer($argv[1]);
        $h = @$c->doBackground("tls.upper", "x"); echo $h ? "handle $h" : "failed: " . $c->error();'         "$sock" 2>&1)
    echo "$out" | grep -q "^failed"
    ok $? "php-gearman does not either: $out"
else
    ok 0 "# SKIP php-gearman not installed"
fi
if perl -MGearman::Client -e 1 2>/dev/null; then
    out=$(timeout 10 perl -MGearman::Client -e '
        my $c = Gearman::Client->new(job_servers => [$ARGV[0]]);
        my $h = $c->dispatch_background("tls.upper", "x"); print defined $h ? "handle\n" : "failed\n";'         "$sock" 2>&1)
    is "$out" "failed" "Perl's Gearman::Client does not either"
    # shellcheck disable=SC2016
    out=$(timeout 20 perl -MGearman::Client -MGearman::Worker -e '
        my %js = (host => "127.0.0.1", port => $ARGV[0], use_ssl => 1, ca_file => $ARGV[1]);
        if (my $pid = fork) {
            my $c = Gearman::Client->new(job_servers => [{%js}]);
            my $r = $c->do_task("tls.perl", "over tls", {timeout => 10});
            print defined $r ? "$$r\n" : "no result\n"; kill "TERM", $pid; waitpid $pid, 0;
        } else {
            my $w = Gearman::Worker->new(job_servers => [{%js}]);
            $w->register_function("tls.perl" => sub { uc $_[0]->arg });
            $w->work while 1;
        }' "$SERVER_PORT" "$P/ca.pem" 2>&1)
    is "$out" "OVER TLS" "Perl's Gearman::Client and Gearman::Worker with use_ssl run a job over TLS"
else
    ok 0 "# SKIP Perl Gearman::Client not installed"
    ok 0 "# SKIP Perl Gearman::Client not installed"
fi

if [ -n "${GEARMAN:-}" ] && [ -x "$GEARMAN" ]; then
    # Debian's libgearman 1.1.20 is built without TLS: -S is accepted and ignored.
    out=$(echo x | timeout 10 "$GEARMAN" -S -h 127.0.0.1 -p "$SERVER_PORT" -f tls.upper 2>&1)
    rc=$?
    # It exits 0 after a server's ERROR, so what it printed is the evidence.
    [ "$rc" -ne 124 ] && echo "$out" | grep -q "TLS_REQUIRED"
    ok $? "gearman -S (no TLS in Debian's build) is told TLS_REQUIRED: $(echo "$out" | head -1)"
else
    ok 0 "# SKIP gearman CLI not installed"
fi
# shellcheck disable=SC2086
out=$(echo still | "$DSJOB" -s "$S" $TLS -t 10000 submit tls.upper 2>&1)
is "$out" "STILL" "after all of them, jobs still run over TLS"
bg_stop_all
server_stop

# --ssl-verify-client: only holders of a certificate signed by --ssl-ca-file get in.
server_start dsjobd --verbose INFO --ssl --ssl-certificate "$P/server.pem" \
    --ssl-key "$P/server.key" --ssl-ca-file "$P/ca.pem" --ssl-verify-client || exit 1
S=127.0.0.1:$SERVER_PORT
MINE="--ssl-ca-file $P/ca.pem --ssl-certificate $P/client.pem --ssl-key $P/client.key"
# shellcheck disable=SC2086
"$DSJOB" -s "$S" $MINE worker -f tls.upper -- tr a-z A-Z >/dev/null 2>"$dir/worker2.err" &
_pids="$_pids $!"
# shellcheck disable=SC2086
out=$(echo certified | "$DSJOB" -s "$S" $MINE -t 10000 submit tls.upper 2>&1)
is "$out" "CERTIFIED" "a client and worker with certificates of the CA get in"
out=$(echo x | "$DSJOB" -s "$S" --ssl-ca-file "$P/ca.pem" --ssl-certificate "$P/rogue.pem" \
    --ssl-key "$P/rogue.key" -t 10000 submit tls.upper 2>&1); rc=$?
is "$rc" 3 "a certificate of another CA is refused (exit 3)"
diag "$out"
wait_log "client certificate: unable to get local issuer certificate"
ok $? "the server logs why, with the peer"
out=$(echo x | "$DSJOB" -s "$S" --ssl-ca-file "$P/ca.pem" -t 10000 submit tls.upper 2>&1); rc=$?
is "$rc" 3 "no certificate is refused (exit 3)"
diag "$out"
wait_log "peer did not return a certificate"; ok $? "the server logs that too"
sclient "$dir/echo2.got" -connect "$S" -CAfile "$P/ca.pem" -cert "$P/client.pem" \
    -key "$P/client.key"
cmp -s "$dir/echo2.got" "$dir/echo.want"; ok $? "openssl s_client with the client certificate gets ECHO_RES"
sclient "$dir/echo3.got" -connect "$S" -CAfile "$P/ca.pem" -cert "$P/rogue.pem" \
    -key "$P/rogue.key"
[ ! -s "$dir/echo3.got" ]; ok $? "and with the rogue certificate gets nothing"
# shellcheck disable=SC2086
out=$("$DSJOB" -s "$S" $MINE -t 10000 workers --format tsv 2>&1); rc=$?
is "$rc" 0 "dsjob workers with the client certificate exits 0"
echo "$out" | grep -q "tls.upper"; ok $? "and lists the worker of tls.upper"
out=$("$DSJOB" -s "$S" --ssl-ca-file "$P/ca.pem" -t 10000 status 2>&1); rc=$?
[ "$rc" -ne 0 ]; ok $? "dsjob status without a certificate is refused (exit $rc): $out"
# shellcheck disable=SC2086
out=$(echo after | "$DSJOB" -s "$S" $MINE -t 10000 submit tls.upper 2>&1)
is "$out" "AFTER" "the refusals cost the others nothing"
bg_stop_all
server_stop

done_testing
