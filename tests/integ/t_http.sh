#!/bin/sh
# dsjobd's HTTP pages (--http-port), against a real dsjobd with real jobs
# and a real `dsjob worker`, over plain sockets (rawpeer http, tests/lib/rawpeer.c):
# off by default; usage errors naming the option; /healthz 200, and 503
# with the reason once --max-jobs is reached; /metrics checked by promtool
# (Debian's prometheus package; those checks are skipped without it;
# with 10,000 functions in t_http_size.sh, make check-long); the JSON of /api/status, /api/workers,
# /api/jobs and /api/job parsed with JSON::PP; bad input (unknown path,
# method, parameter, handle, a NUL, a huge target or headers) answered
# with a 4xx that leaves the server serving. The dashboard at / (its CSP,
# its files, its CSRF token only with --http-admin and only to an admitted
# peer); the admin writes (POST cancel, dead retry and drop, a function's
# limit): refused
# without --http-admin, without or with a wrong X-CSRF-Token, from a peer
# outside --admin-allow, with a Host that is a name (DNS rebinding), done
# with all three on real jobs (submitted with
# the gearman CLI, dead ones from a failing `dsjob worker`). The time
# /api/status takes with 1,000 functions is printed as a diagnostic, never
# asserted. --max-unique-size refuses a long
# unique key at submit; listings cut keys to 256 bytes; names that are
# not plain UTF-8 are escaped so that two never read alike.

: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
. "$top_srcdir/tests/lib/server.sh"
. "$top_srcdir/tests/interop/lib.sh"
. "$top_srcdir/tests/lib/integ.sh"

if ! perl -MJSON::PP -e 1 2>/dev/null; then
    echo "1..0 # SKIP perl with JSON::PP not found"
    exit 0
fi
unset DSJOB_SERVERS DSJOB_PROGRESS

# req, code, body, body_post, line1, line2, from3, promcheck, adm_lines:
# tests/lib/integ.sh. contains TEXT STRING: TEXT has STRING in it (a case,
# where a grep was a process).
contains() {
    case $1 in *"$2"*) return 0 ;; esac
    return 1
}
_nl='
' # (integ.sh's: a newline, for whole lines)
# json TARGET PERL-EXPR: the expression, evaluated with $d the decoded body,
# is true. One perl answers them all (json_begin, tests/lib/integ.sh).
json() {
    body "$1" >"$T/page.json"
    json_eval "$T/page.json" "$2" >/dev/null
}
# jval TARGET PERL-EXPR: the expression's value.
jval() {
    body "$1" >"$T/page.json"
    json_eval "$T/page.json" "$2"
}
json_begin

# Off by default, and usage errors.
server_start dsjobd --http-port-file "$T/off.port"
is "$(cat "$T/off.port")" -1 "without --http-port no HTTP port is opened"
server_stop
out=$("$DSJOBD" --http-port 70000 2>&1)
is $? 2 "--http-port 70000 exits 2"
contains "$out" "--http-port"
ok $? "naming the option: $out"
out=$("$DSJOBD" --http-port 0 --http-listen '' 2>&1)
is $? 2 "an empty --http-listen exits 2"
contains "$out" "--http-listen"
ok $? "naming the option: $out"
out=$(timeout 10 "$DSJOBD" -L 127.0.0.1 -p 0 --http-port 0 --http-listen 192.0.2.1 -l stderr 2>&1)
is $? 1 "an address that is not ours exits 1"
contains "$out" "--http-listen 192.0.2.1"
ok $? "saying which: $out"

server_start dsjobd --http-port 0 --http-port-file "$T/http.port" --max-jobs 6
HTTP_PORT=$(cat "$T/http.port")
[ "$HTTP_PORT" -gt 0 ] 2>/dev/null
ok $? "--http-port 0 picks a port and --http-port-file tells it: $HTTP_PORT"

# /healthz
r=$(req GET /healthz)
is "$(line1 "$r")" 200 "/healthz: 200"
is "$(line2 "$r")" application/json "as JSON"
is "$(from3 "$r")" '{"status":"ok"}' "saying ok"
is "$(code HEAD /healthz)" 200 "HEAD /healthz: 200"
is "$(from3 "$(req HEAD /healthz)")" "" "without a body"

# Real jobs: a worker that does "up", jobs nobody does, odd function names.
"$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -i web-1 -f up -- tr a-z A-Z &
track $!
poll json /api/workers '@{$d->{workers}} == 1'
ok $? "/api/workers lists the worker once it registered"
json /api/workers '$d->{workers}[0]{id} eq "web-1" && $d->{workers}[0]{functions}[0] eq "up"'
ok $? "with its id and its function"
is "$(echo hello | timeout 20 "$DSJOB" -s "127.0.0.1:$SERVER_PORT" submit up)" HELLO \
    "a job runs through the worker"
h=$(timeout 20 "$DSJOB" -s "127.0.0.1:$SERVER_PORT" submit -b -p high -u key-1 idle one)
timeout 20 "$DSJOB" -s "127.0.0.1:$SERVER_PORT" submit -b -p low idle two >/dev/null
timeout 20 "$DSJOB" -s "127.0.0.1:$SERVER_PORT" submit -b 'q"uote\back' x >/dev/null
printf 'create function sp ace\n' | adm_lines >/dev/null

json /api/status '$d->{healthy} && !defined $d->{reason} && $d->{jobs} == 3'
ok $? "/api/status: healthy, three jobs held"
json /api/status 'my ($f) = grep { $_->{name} eq "idle" } @{$d->{functions}};
    $f->{queued}{high} == 1 && $f->{queued}{low} == 1 && $f->{queued}{normal} == 0
    && $f->{submitted} == 2 && $f->{workers} == 0 && $f->{oldest_queued_seconds} >= 0'
ok $? "/api/status: a function's queue by priority, its counters"
json /api/status 'my ($f) = grep { $_->{name} eq "up" } @{$d->{functions}};
    $f->{completed} == 1 && $f->{workers} == 1 && $f->{run}{count} == 1'
ok $? "/api/status: the done job is counted, with its run time"
json /api/status '$d->{connections}{worker} == 1 && $d->{bytes}{received} > 0'
ok $? "/api/status: connections by kind and bytes"

promcheck /metrics "/metrics passes promtool check metrics"
r=$(req GET /metrics)
contains "$_nl$(line2 "$r")" "${_nl}text/plain; version=0.0.4"
ok $? "/metrics is text/plain version 0.0.4"
contains "$_nl$r$_nl" "${_nl}dsjob_jobs_queued{function=\"idle\",priority=\"high\"} 1$_nl"
ok $? "/metrics: queued by function and priority"
contains "$r" 'dsjob_jobs_submitted_total{function="q\"uote\\back"} 1'
ok $? "/metrics: a quote and a backslash in a name are escaped"
contains "$_nl$r$_nl" "${_nl}dsjob_jobs_completed_total{function=\"up\"} 1$_nl"
ok $? "/metrics: the same counters as stats"
is "$(printf "%s\n" "$r" | grep -c '^# TYPE dsjob_job_run_seconds histogram$')" 1 \
    "/metrics: one TYPE line per family"

# /api/jobs and /api/job
json '/api/jobs?function=idle' '@{$d->{jobs}} == 2 && !$d->{truncated}'
ok $? "/api/jobs?function=idle: its two jobs"
json '/api/jobs?function=idle&limit=1' '@{$d->{jobs}} == 1 && $d->{truncated}
    && $d->{jobs}[0]{priority} eq "high"'
ok $? "limit=1: the first, and truncated"
json '/api/jobs' '@{$d->{jobs}} == 3'
ok $? "/api/jobs: every job"
json "/api/job/$h" '$d->{handle} eq "'"$h"'" && $d->{state} eq "queued" && $d->{unique} eq "key-1"
    && $d->{function} eq "idle" && !defined $d->{worker}'
ok $? "/api/job/HANDLE: the job"
json '/api/job?function=idle&unique=key-1' '$d->{handle} eq "'"$h"'"'
ok $? "/api/job?function=&unique=: found by its unique key"

# Bad input: a 4xx each, and nothing else happens.
is "$(code GET /nope)" 404 "an unknown path: 404"
is "$(code GET /api/job/H:none:1)" 404 "an unknown handle: 404"
is "$(code GET '/api/job?function=idle&unique=nope')" 404 "an unknown unique: 404"
is "$(code GET '/api/jobs?function=nope')" 404 "an unknown function: 404"
is "$(code GET '/api/jobs?limit=ten')" 400 "limit=ten: 400"
is "$(code GET '/api/jobs?limit=0')" 400 "limit=0: 400"
is "$(code GET '/api/jobs?limit=99999999999999999999')" 400 "a limit too large: 400"
is "$(code GET '/api/jobs?colour=red')" 400 "an unknown parameter: 400"
is "$(code GET '/api/jobs?limit=1&limit=2')" 400 "a repeated parameter: 400"
is "$(code GET '/api/job')" 400 "/api/job without a handle: 400"
is "$(code GET '/healthz?x=1')" 400 "a query where none is taken: 400"
is "$(code GET '/api/job/a%00b')" 400 "a NUL in the path: 400"
is "$(code POST /healthz)" 405 "POST: 405"
is "$(code DELETE "/api/job/$h")" 405 "DELETE: 405"
long=$(perl -e 'print "a" x 3000')
c=$(code GET "/api/job/$long")
case $c in 414 | 413 | 400) ok 0 "a 3000-byte target: $c" ;; *) ok 1 "a 3000-byte target: '$c'" ;; esac
# evhttp closes a connection whose headers are too large, without an answer.
c=$(code GET /healthz 20000)
case $c in '' | 413 | 431 | 400) ok 0 "20000 bytes of headers: closed or refused ($c)" ;;
*) ok 1 "20000 bytes of headers: '$c'" ;; esac
# The dashboard, without --http-admin: the page and its two files, a strict
# CSP, no token, and POST refused naming --http-admin.
r=$(HTTP_HEAD_FILE="$T/page.head" req GET /)
is "$(line1 "$r")" 200 "GET /: 200"
is "$(line2 "$r")" "text/html; charset=utf-8" "as HTML"
grep -qi "^Content-Security-Policy: default-src 'self'; " "$T/page.head"
ok $? "with a Content-Security-Policy of default-src 'self'"
grep -qi '^Cache-Control: no-store' "$T/page.head"
ok $? "and Cache-Control: no-store"
contains "$r" '<meta name="dsjob-csrf" content="">'
ok $? "without --http-admin the page carries no token"
contains "$r" 'http://' || contains "$r" 'https://'
ok $((!$?)) "and names no outside URL"
r=$(req GET /dashboard.js)
is "$(line1 "$r") $(line2 "$r") " "200 text/javascript; charset=utf-8 " \
    "/dashboard.js: 200, JavaScript"
r=$(req GET /dashboard.css)
is "$(line1 "$r") $(line2 "$r") " "200 text/css; charset=utf-8 " \
    "/dashboard.css: 200, CSS"
contains "$(body /dashboard.js)" 'api/status'
ok $? "the script polls /api/status"
is "$(from3 "$(req HEAD /)")" "" "HEAD /: no body"
is "$(code GET '/?x=1')" 400 "/ takes no query"
r=$(req POST "/api/job/$h/cancel")
is "$(line1 "$r")" 405 "POST without --http-admin: 405"
contains "$r" '--http-admin'
ok $? "naming --http-admin: $(from3 "$r")"
is "$(code GET "/api/job/$h/cancel")" 404 "GET of a write's path changes nothing: 404"
is "$(code POST '/api/func/anything/limit?concurrency=1')" 405 \
    "POST limit without --http-admin: 405"
json "/api/job/$h" '$d->{state} eq "queued"'
ok $? "and the job is still queued"
json '/api/job?unique=key-1' '$d->{handle} eq "'"$h"'"'
ok $? "/api/job?unique= without function=: the one job with that key"
is "$(code GET '/api/job?function=idle')" 400 "/api/job?function= without unique=: 400"
is "$(code GET "/api/job/$h")" 200 "the server still answers after all that"
is "$(timeout 20 "$DSJOB" -s "127.0.0.1:$SERVER_PORT" status --format tsv | grep -c '^idle	2	')" 1 \
    "and its jobs are untouched"

# 503 once --max-jobs (6) is reached.
for i in 1 2 3; do
    timeout 20 "$DSJOB" -s "127.0.0.1:$SERVER_PORT" submit -b idle "more $i" >/dev/null
done
r=$(req GET /healthz)
is "$(line1 "$r")" 503 "/healthz: 503 at --max-jobs"
contains "$(from3 "$r")" '"reason":"--max-jobs reached: 6 jobs held"'
ok $? "with the reason: $(from3 "$r")"
json /api/status '!$d->{healthy} && $d->{reason} =~ /max-jobs/'
ok $? "/api/status says so too"
timeout 20 "$DSJOB" -s "127.0.0.1:$SERVER_PORT" submit -b idle refused >/dev/null 2>&1
json /api/status '$d->{limit_hits}{max_jobs} == 1'
ok $? "a refused submit is a max_jobs hit"
timeout 20 "$DSJOB" -s "127.0.0.1:$SERVER_PORT" cancel "$h" >/dev/null
is "$(code GET /healthz)" 200 "200 again once a job is gone"
server_stop
reap

# --http-admin needs --http-port.
out=$("$DSJOBD" -p 0 --http-admin 2>&1)
is $? 2 "--http-admin without --http-port exits 2"
contains "$out" "--http-admin needs --http-port"
ok $? "saying so: $out"

# --http-admin: the page carries a token; the writes take it from an admitted peer.
server_start dsjobd --http-port 0 --http-port-file "$T/adm.port" --http-admin --max-dead 10 \
    --verbose NOTICE
HTTP_PORT=$(cat "$T/adm.port")
tok=$(body / | sed -n 's/.*<meta name="dsjob-csrf" content="\([0-9a-f]*\)">.*/\1/p')
is "${#tok}" 64 "with --http-admin the page carries a 64-digit token"
is "$(body / | sed -n 's/.*<meta name="dsjob-csrf" content="\([0-9a-f]*\)">.*/\1/p')" "$tok" \
    "the same on every load"
gm -b -f cancel_me one
gm -b -f cancel_me two
poll json '/api/jobs?function=cancel_me' '@{$d->{jobs}} == 2'
ok $? "two background jobs submitted with gearman -b"
hc=$(jval '/api/jobs?function=cancel_me' '$d->{jobs}[0]{handle}')
adm --show-jobs | grep -q "^$hc	"
ok $? "gearadmin --show-jobs lists $hc"
r=$(req POST "/api/job/$hc/cancel")
is "$(line1 "$r")" 403 "POST without X-CSRF-Token: 403"
contains "$r" 'X-CSRF-Token'
ok $? "saying so: $(from3 "$r")"
# Wrong in its first character, whatever that is (a fixed "0" was the
# token itself once in 16 runs).
case $tok in 0*) wrong=1 ;; *) wrong=0 ;; esac
wrong=$wrong$(printf %s "$tok" | cut -c2-)
[ "$wrong" != "$tok" ]
ok $? "the wrong token differs from the page's"
is "$(HTTP_HEADER="X-CSRF-Token: $wrong" code POST "/api/job/$hc/cancel")" \
    403 "POST with a wrong token: 403"
is "$(HTTP_HEADER="X-CSRF-Token: $tok" code POST "/api/job/$hc/cancel?x=1")" 400 \
    "POST with a query: 400"
is "$(HTTP_HEADER="X-CSRF-Token: $tok" code POST /api/status)" 404 "POST to a read-only page: 404"
# DNS rebinding: a page loaded by another name gets no token, and its POSTs are refused.
contains "$(HTTP_HOST=rebind.example:$HTTP_PORT body /)" '<meta name="dsjob-csrf" content="">'
ok $? "a page loaded as rebind.example carries no token"
is "$(HTTP_HOST=localhost:$HTTP_PORT body / | sed -n 's/.*<meta name="dsjob-csrf" content="\([0-9a-f]*\)">.*/\1/p')" \
    "$tok" "loaded as localhost it does"
r=$(HTTP_HOST=rebind.example:$HTTP_PORT HTTP_HEADER="X-CSRF-Token: $tok" req POST "/api/job/$hc/cancel")
is "$(line1 "$r")" 403 "POST with the token as Host rebind.example: 403"
contains "$r" "not 'rebind.example:$HTTP_PORT'"
ok $? "naming the Host: $(from3 "$r")"
adm --show-jobs | grep -q "^$hc	"
ok $? "the refused POSTs left $hc alone"
r=$(HTTP_HEADER="X-CSRF-Token: $tok" req POST "/api/job/$hc/cancel")
is "$(line1 "$r") $(from3 "$r")" \
    "200 {\"cancelled\":\"$hc\"}" "POST /api/job/HANDLE/cancel with the token: cancelled"
adm --show-jobs | grep -q "^$hc	"
ok $((!$?)) "gearadmin --show-jobs no longer lists it"
is "$(adm --status | grep '^cancel_me	' | cut -f2)" 1 "and the other job is still queued"
is "$(code GET "/api/job/$hc")" 404 "/api/job/HANDLE: 404 now"
is "$(HTTP_HEADER="X-CSRF-Token: $tok" code POST "/api/job/$hc/cancel")" 404 \
    "cancelling it again: 404"
grep -q "http 127.0.0.1: cancelled job $hc of 'cancel_me'" "$SERVER_LOG"
ok $? "the log says who cancelled it"

# Dead jobs: a worker whose command fails, --max-dead keeps them.
"$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -f dfail -- false 2>/dev/null &
wpid=$!
track $wpid
gm -b -f dfail a
gm -b -f dfail b
poll json /api/status 'my ($f) = grep { $_->{name} eq "dfail" } @{$d->{functions}}; $f->{dead} == 2'
ok $? "a failing worker makes two dead jobs"
kill -TERM "$wpid"
wait "$wpid" 2>/dev/null
is "$(code POST /api/dead/dfail/retry)" 403 "POST retry without the token: 403"
is "$(HTTP_HEADER="X-CSRF-Token: $tok" code POST /api/dead/nope/retry)" 404 \
    "retry of an unknown function: 404"
is "$(HTTP_HEADER="X-CSRF-Token: $tok" body_post /api/dead/dfail/retry)" \
    '{"retried":2,"held":0}' "POST /api/dead/FUNCTION/retry: both retried"
json /api/status 'my ($f) = grep { $_->{name} eq "dfail" } @{$d->{functions}};
    $f->{dead} == 0 && $f->{queued}{normal} == 2'
ok $? "and queued again"
"$DSJOB" worker -s "127.0.0.1:$SERVER_PORT" -f dfail -- false 2>/dev/null &
wpid=$!
track $wpid
poll json /api/status 'my ($f) = grep { $_->{name} eq "dfail" } @{$d->{functions}}; $f->{dead} == 2'
ok $? "the worker fails them again: dead again"
kill -TERM "$wpid"
wait "$wpid" 2>/dev/null
is "$(HTTP_HEADER="X-CSRF-Token: $tok" body_post /api/dead/dfail/drop)" \
    '{"dropped":2,"held":0}' "POST /api/dead/FUNCTION/drop: both dropped"
json /api/status 'my ($f) = grep { $_->{name} eq "dfail" } @{$d->{functions}};
    $f->{dead} == 0 && $f->{queued}{normal} == 0'
ok $? "and gone"
is "$(adm --show-jobs | grep -c '	dfail	')" 0 "gearadmin --show-jobs lists none of them"

# The dashboard's limit (POST /api/func/NAME/limit): set, change one, clear.
lpost() { HTTP_HEADER="X-CSRF-Token: $tok" body_post "$1"; }
lcode() { HTTP_HEADER="X-CSRF-Token: $tok" code POST "$1"; }
is "$(code POST '/api/func/dfail/limit?concurrency=2')" 403 "POST limit without the token: 403"
is "$(lcode '/api/func/nope/limit?concurrency=2')" 404 "limit of an unknown function: 404"
is "$(lpost '/api/func/dfail/limit?concurrency=2&rate=5/s')" '{"settings":"concurrency 2 rate 5/s"}' \
    "POST /api/func/F/limit?concurrency=2&rate=5/s: both set"
json /api/status 'my ($f) = grep { $_->{name} eq "dfail" } @{$d->{functions}};
    $f->{flow}{concurrency} == 2 && $f->{flow}{settings} eq "concurrency 2 rate 5/s"'
ok $? "/api/status shows them"
is "$(lpost '/api/func/dfail/limit?rate=off')" '{"settings":"concurrency 2"}' \
    "rate=off clears the rate, the concurrency stays"
is "$(lpost '/api/func/dfail/limit?concurrency=0')" '{"settings":""}' "concurrency=0 clears it"
json /api/status 'my ($f) = grep { $_->{name} eq "dfail" } @{$d->{functions}}; !defined $f->{flow}'
ok $? "and the function has no flow settings left"
is "$(lcode '/api/func/dfail/limit?concurrency=2%20paused')" 400 \
    "a value with a space (another setting smuggled in): 400"
is "$(lcode '/api/func/dfail/limit?rate=5/fortnight')" 400 "a bad rate: 400"
is "$(lcode '/api/func/dfail/limit?sequence=hold')" 400 "a setting it does not take: 400"
is "$(lcode '/api/func/dfail/limit')" 400 "no setting: 400"
is "$(lcode '/api/func/dfail/pause?x=1')" 400 "pause still takes no query: 400"
json /api/status 'my ($f) = grep { $_->{name} eq "dfail" } @{$d->{functions}}; !defined $f->{flow}'
ok $? "the refused ones changed nothing"
grep -q "http 127.0.0.1: limit 'dfail' concurrency 2 rate 5/s" "$SERVER_LOG"
ok $? "the log says who set the limit"

# /api/status with 1,000 functions: size and time, as a diagnostic.
is "$(perl -e 'print "create function g$_\n" for 1..1000' | adm_lines)" 1000 "1,000 functions made"
t0=$(date +%s%N)
req GET /api/status >"$T/status.json"
t1=$(date +%s%N)
diag "GET /api/status with 1,000 functions: $(( (t1 - t0) / 1000000 )) ms, $(wc -c <"$T/status.json") bytes"
server_stop
reap

# A peer outside --admin-allow: no token in its page, its POSTs refused.
server_start dsjobd --http-port 0 --http-port-file "$T/na.port" --http-admin \
    --admin-allow 10.0.0.0/8
HTTP_PORT=$(cat "$T/na.port")
contains "$(body /)" '<meta name="dsjob-csrf" content="">'
ok $? "outside --admin-allow the page carries no token"
gm -b -f keep_me x
hk=$(jval '/api/jobs?function=keep_me' '$d->{jobs}[0]{handle}')
r=$(HTTP_HEADER="X-CSRF-Token: $tok" req POST "/api/job/$hk/cancel")
is "$(line1 "$r")" 403 "POST from 127.0.0.1 outside --admin-allow 10.0.0.0/8: 403"
contains "$r" '--admin-allow'
ok $? "naming --admin-allow: $(from3 "$r")"
json "/api/job/$hk" '$d->{state} eq "queued"'
ok $? "and the job is still queued"
is "$(HTTP_HEADER="X-CSRF-Token: $tok" code POST '/api/func/keep_me/limit?concurrency=1')" 403 \
    "POST limit from outside --admin-allow: 403"
json /api/status 'my ($f) = grep { $_->{name} eq "keep_me" } @{$d->{functions}}; !defined $f->{flow}'
ok $? "and keep_me has no limit"
server_stop

# Unique keys: --max-unique-size (default 1024) refuses a longer one at
# submit, naming the option; listings show 256 bytes of a key and its size,
# one job's page the whole key. Function names that once looked alike (a
# raw 0xff byte and the text \xff) read differently, each with its exact key.
server_start dsjobd --http-port 0 --http-port-file "$T/u.port" --max-unique-size 2000
HTTP_PORT=$(cat "$T/u.port")
u1500=$(perl -e 'print "k" x 1500')
r=$(gpacket 18 ulong "$(perl -e 'print "k" x 2001')" x)
is "$r" "19 ARGUMENT_TOO_LARGE|SUBMIT_JOB_BG: a unique key of 2001 bytes is over --max-unique-size (2000)" \
    "a unique key over --max-unique-size is refused, naming the option"
r=$(gpacket 18 ulong "$u1500" x)
case $r in "8 "*) ok 0 "a unique key of 1500 bytes is taken under --max-unique-size 2000" ;;
*) ok 1 "a unique key of 1500 bytes is taken under --max-unique-size 2000: $r" ;; esac
hu=${r#8 }
json '/api/jobs?function=ulong' 'length($d->{jobs}[0]{unique}) == 256 && $d->{jobs}[0]{unique_size} == 1500'
ok $? "/api/jobs shows 256 bytes of it and its size"
json "/api/job/$hu" '$d->{unique} eq "'"$u1500"'" && !exists $d->{unique_size}'
ok $? "/api/job/HANDLE shows the whole key"
gpacket 18 "$(printf 'dd\377')" "" x >/dev/null
gpacket 18 'dd\xff' "" x >/dev/null
json /api/status 'my %k = map { $_->{key} => $_->{name} } @{$d->{functions}};
    $k{"6464ff"} eq "dd\\xff" && $k{"64645c786666"} eq "dd\\x5cxff"'
ok $? "dd<0xff> and dd\\xff read differently in /api/status, each with its exact key"
server_stop
out=$("$DSJOBD" -p 0 --max-unique-size 0 2>&1)
is $? 2 "--max-unique-size 0 exits 2"
contains "$out" "--max-unique-size"
ok $? "naming the option: $out"
server_start dsjobd
is "$(gpacket 18 ulong "$(perl -e 'print "k" x 1025')" x | cut -d'|' -f1)" "19 ARGUMENT_TOO_LARGE" \
    "by default a unique key over 1024 bytes is refused"
case $(gpacket 18 ulong "$(perl -e 'print "k" x 1024')" x) in "8 "*) ok 0 "and one of 1024 taken" ;;
*) ok 1 "and one of 1024 taken" ;; esac
server_stop

done_testing
