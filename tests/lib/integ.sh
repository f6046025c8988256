# Shell helpers of the tests/integ scripts that make check runs often, on
# top of tests/lib/server.sh (sourced first): waits and submits that cost
# one process, where a poll loop or a submit loop cost one or more process
# starts a try or a job. On a loaded 2-core machine a test's CPU is mostly
# process starts, and a poll's tries multiply with the load.
#
#   wait_lines FILE N [REGEX]   until FILE holds N whole lines matching the
#                  POSIX extended REGEX (default: any line); wait_line FILE
#                  LINE: until LINE is a whole line of FILE. Both are
#                  rawpeer until-lines (server.sh's await_lines, where the
#                  bound and the truncation rule are).
#   wait_file FILE PERL-EXPR    until the Perl expression is true, with @l
#                  FILE's lines (chomped), evaluated again each time FILE
#                  grew; one perl process (0.05 s between looks), failing
#                  after 120 s in which FILE did not grow or at once when it
#                  shrank. The only wait left in Perl: for the conditions a
#                  line pattern does not say (a captured tick compared with
#                  `gt`, a line count OR a set of lines).
#   req METHOD TARGET [FILLER], code, body TARGET, body_post TARGET
#                  HTTP to HTTP_PORT (rawpeer http): the status, type and
#                  body; the status; a GET's body; a POST's body.
#   line1, line2, from3 TEXT   a req's status, type and body from a variable.
#   promcheck TARGET DESC   promtool check metrics accepts the page (an ok
#                  or a skip without promtool).
#   adm_lines      stdin's admin lines to SERVER_PORT; prints how many OK.
#   submit_bg PORT FUNC UNIQUE DATA [FUNC UNIQUE DATA]...
#                  SUBMIT_JOB_BG of each, in order, on one connection
#                  (rawpeer packets: each answered before the next goes);
#                  prints "8 HANDLE" (JOB_CREATED) a job, fails when the
#                  connection failed or a job was not answered.
#   wait_every STEP SECONDS CMD...   wait_for with a try every STEP s.
#   json_begin, json_eval FILE EXPR  one perl with JSON::PP for a test's
#                  JSON questions.

wait_lines() {
    if [ $# -gt 2 ]; then
        "$RAWPEER" until-lines "$1" "$2" -E "$3"
    else
        "$RAWPEER" until-lines "$1" "$2"
    fi
}

wait_file() {
    perl -e '
        my ($f, $expr) = @ARGV;
        my ($pos, $part, $last, @l) = (0, "", time);
        my $cond = eval "sub { $expr }" or die "wait_file: $@";
        my $grew = 1;
        while (1) {
            if (open(my $h, "<", $f)) {
                my $size = -s $h;
                exit 1 if $size < $pos;
                if ($size > $pos) {
                    seek($h, $pos, 0);
                    $pos += read($h, my $d, $size - $pos);
                    $last = time;
                    $part .= $d;
                    push @l, $1 while $part =~ s/^([^\n]*)\n//;
                    $grew = 1;
                }
                close $h;
            }
            if ($grew) {
                exit 0 if $cond->(@l);
                $grew = 0;
            }
            exit 1 if time - $last > 120;
            select(undef, undef, undef, 0.05);
        }' "$@"
}

wait_line() {
    "$RAWPEER" until-lines "$1" 1 -x "$2"
}

submit_bg() {
    _sb_port=$1
    shift
    # FUNC UNIQUE DATA ... becomes 18 FUNC UNIQUE DATA -- 18 ..., in place:
    # each of the first $# words is shifted off the front, put at the back.
    _sb_n=$#
    _sb_i=0
    while [ $_sb_i -lt $_sb_n ]; do
        _sb_a=$1
        shift
        if [ $((_sb_i % 3)) -eq 0 ]; then
            [ $_sb_i -eq 0 ] || set -- "$@" --
            set -- "$@" 18 "$_sb_a"
        else
            set -- "$@" "$_sb_a"
        fi
        _sb_i=$((_sb_i + 1))
    done
    "$RAWPEER" "$_sb_port" packets "$@" >"$TEST_TMPDIR/.submit_bg" || return 1
    [ "$(grep -c '^8 H:' "$TEST_TMPDIR/.submit_bg")" -eq $((_sb_n / 3)) ] || return 1
    cat "$TEST_TMPDIR/.submit_bg"
}

# wait_every STEP SECONDS CMD...: as wait_for, a try every STEP seconds: for
# an event known to take a second or more (an expiry, a timer's tick), whose
# early tries would each start CMD's processes for nothing.
wait_every() {
    _we_step=$1
    _we_n=$(awk -v s="$2" -v t="$1" 'BEGIN { printf "%d", s / t + 1 }')
    shift 2
    _we_i=0
    while ! "$@"; do
        [ $_we_i -lt $_we_n ] || return 1
        _we_i=$((_we_i + 1))
        sleep "$_we_step"
    done
}

# json_begin: one perl with JSON::PP for the whole test (it takes about
# 40 ms of CPU to start, a test asks hundreds of questions), reading
# questions on a FIFO. json_eval FILE EXPR: EXPR, with $d the JSON of FILE
# decoded, evaluated by it; prints the value (on one line) and succeeds
# when it is true. The perl ends when the test's shell does (its FIFO's
# writer closes). A test that never calls json_begin can use json_eval:
# each call then starts its own perl.
json_begin() {
    mkfifo "$TEST_TMPDIR/.json.q" "$TEST_TMPDIR/.json.a" || return 1
    perl -MJSON::PP -e '
        open(my $q, "<", $ARGV[0]) or die; open(my $a, ">", $ARGV[1]) or die;
        $a->autoflush(1);
        while (my $file = <$q>) {
            chomp $file;
            my $expr = do { open(my $e, "<", "$file.expr") or die; local $/; <$e> };
            my $v = eval {
                my $d = decode_json(do { open(my $f, "<", $file) or die; local $/; <$f> });
                eval $expr;
            };
            $v = "" unless defined $v;
            $v =~ s/\n/ /g;
            print $a (($v ? "1 " : "0 ") . "$v\n");
        }' "$TEST_TMPDIR/.json.q" "$TEST_TMPDIR/.json.a" &
    exec 8>"$TEST_TMPDIR/.json.q" 9<"$TEST_TMPDIR/.json.a"
    _json_on=1
}
json_eval() {
    if [ -z "${_json_on:-}" ]; then
        perl -MJSON::PP -e '
            my $d = decode_json(do { open(my $f, "<", $ARGV[0]) or die; local $/; <$f> });
            my $v = eval $ARGV[1]; print defined $v ? "$v\n" : "\n"; exit !$v;' "$1" "$2"
        return
    fi
    printf '%s' "$2" >"$1.expr"
    echo "$1" >&8
    read -r _je_ok _je_v <&9 || return 1
    printf '%s\n' "$_je_v"
    [ "$_je_ok" = 1 ]
}

# HTTP and admin helpers of t_http.sh and t_http_size.sh.
PROMTOOL=$(command -v promtool 2>/dev/null)
# req METHOD TARGET [FILLER]: status, content type and body, as rawpeer http prints them.
req() {
    "$RAWPEER" "$HTTP_PORT" http "$@"
}
code() { # code METHOD TARGET [FILLER]: the status code alone
    HTTP_PRINT=code "$RAWPEER" "$HTTP_PORT" http "$@"
}
body() { # body TARGET: the body of a GET
    HTTP_PRINT=body "$RAWPEER" "$HTTP_PORT" http GET "$1"
}
body_post() { # body_post TARGET: the body of a POST
    HTTP_PRINT=body "$RAWPEER" "$HTTP_PORT" http POST "$1"
}
# line1 TEXT, line2 TEXT, from3 TEXT: TEXT's first line, its second, and
# its lines from the third on (of a req's answer in a variable: the status,
# the type and the body), cut by the shell, not by head, sed and tail.
_nl='
'
line1() {
    printf '%s\n' "${1%%"$_nl"*}"
}
line2() {
    case $1 in *"$_nl"*) _l=${1#*"$_nl"} ;; *) _l= ;; esac
    printf '%s\n' "${_l%%"$_nl"*}"
}
from3() {
    case $1 in *"$_nl"*"$_nl"*) _l=${1#*"$_nl"}; _l=${_l#*"$_nl"} ;; *) _l= ;; esac
    printf '%s\n' "$_l"
}
# promcheck TARGET DESC: promtool check metrics accepts the page (a skip without promtool).
promcheck() {
    if [ -z "$PROMTOOL" ]; then
        _tap_n=$((_tap_n + 1))
        echo "ok $_tap_n # SKIP promtool not installed (apt-get install prometheus): $2"
        return
    fi
    body "$1" > "$TEST_TMPDIR/metrics.txt"
    "$PROMTOOL" check metrics < "$TEST_TMPDIR/metrics.txt" > "$TEST_TMPDIR/promtool.out" 2>&1
    rc=$?
    ok $rc "$2"
    [ $rc -eq 0 ] || sed 's/^/# /' "$TEST_TMPDIR/promtool.out" | head -20
}
adm_lines() { # adm_lines: send stdin's admin lines, read the replies (one OK per line)
    perl -MIO::Socket::INET -e '
        my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $ARGV[0]) or die;
        my @l = <STDIN>; print $s @l; my $ok = 0;
        while (<$s>) { $ok++ if /^OK/; last if $ok == @l; }
        print "$ok\n";' "$SERVER_PORT"
}
