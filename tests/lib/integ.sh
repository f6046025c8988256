# Shell helpers of the tests/integ scripts that make check runs often, on
# top of tests/lib/server.sh (sourced first): waits and submits that cost
# one process, where a poll loop or a submit loop cost one or more process
# starts a try or a job. On a loaded 2-core machine a test's CPU is mostly
# process starts, and a poll's tries multiply with the load.
#
#   wait_lines FILE N [REGEX]   until FILE holds N lines matching the Perl
#                  REGEX (default: any line), watched by one perl process
#                  that reads only what was appended (0.05 s between
#                  looks, no fork); fails after 120 s in which FILE did not
#                  grow (nothing moved), or at once when FILE shrank under
#                  it below what it had counted.
#   wait_line FILE LINE         until LINE is a whole line of FILE.
#   submit_bg PORT FUNC UNIQUE DATA [FUNC UNIQUE DATA]...
#                  SUBMIT_JOB_BG of each, in order, on one connection
#                  (rawpeer packets: each answered before the next goes);
#                  prints "8 HANDLE" (JOB_CREATED) a job, fails when the
#                  connection failed or a job was not answered.

wait_lines() {
    perl -e '
        my ($f, $n, $re, $how) = @ARGV;
        $re = !defined $re ? qr/^/ : defined $how ? qr/^\Q$re\E$/ : qr/$re/;
        my ($pos, $c, $part, $last) = (0, 0, "", time);
        while (1) {
            if (open(my $h, "<", $f)) {
                my $size = -s $h;
                exit 1 if $size < $pos;
                if ($size > $pos) {
                    seek($h, $pos, 0);
                    my $got = read($h, my $d, $size - $pos);
                    $pos += $got;
                    $last = time;
                    $part .= $d;
                    while ($part =~ s/^([^\n]*)\n//) {
                        $c++ if $1 =~ $re;
                    }
                }
                close $h;
            }
            exit 0 if $c >= $n;
            exit 1 if time - $last > 120;
            select(undef, undef, undef, 0.05);
        }' "$@"
}

wait_line() {
    wait_lines "$1" 1 "$2" line
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
