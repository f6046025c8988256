#!/usr/bin/perl
# A Gearman::Worker for t_lifecycle.sh: does FUNCTION on 127.0.0.1:PORT,
# failing (returning undef, so the worker library sends WORK_FAIL) its first
# FAILS calls and then answering "done:" and the payload; writes one line
# "TIME PAYLOAD" per call to LOG (TIME in seconds, with decimals), and exits
# after CALLS calls or 60 s. MODE, if given, changes what a call does:
# "crash" kills the worker (SIGKILL) holding the job; "timeout:N" registers
# with CAN_DO_TIMEOUT N seconds and sleeps through each call.
#
# With --serve QUEUE ANSWERS (two FIFOs) it is the test's one perl: a line
# "PORT<TAB>FUNCTION<TAB>FAILS<TAB>CALLS<TAB>LOG[<TAB>MODE]" on QUEUE forks
# such a worker (answering its pid), a line "reap" stops (SIGTERM) and
# waits for every worker it forked (answering "ok"), and the end of QUEUE
# does the same and ends it. A fork of a perl that has Gearman::Worker
# loaded costs a few milliseconds of CPU; a perl start that loads it costs
# about 0.2 s, and the test starts more than a dozen workers.
use strict;
use warnings;
use Gearman::Worker;
use IO::Handle;
use Time::HiRes qw(time);

sub run_worker {
    my ($port, $func, $fails, $calls, $log, $mode) = @_;
    $mode = "" unless defined $mode;
    open(my $out, '>>', $log) or die "$log: $!\n";
    $out->autoflush(1);
    my $n = 0;
    my $w = Gearman::Worker->new(job_servers => ["127.0.0.1:$port"]);
    my $do = sub {
        my $arg = $_[0]->arg;
        $n++;
        printf $out "%.3f %s\n", time, $arg;
        kill 'KILL', $$ if $mode eq 'crash';
        sleep 60 if $mode =~ /^timeout:/;
        return undef if $n <= $fails;
        return "done:$arg";
    };
    if ($mode =~ /^timeout:(\d+)$/) {
        $w->register_function($func, $1, $do);
    } else {
        $w->register_function($func => $do);
    }
    my $end = time + 60;
    $w->work(stop_if => sub { $n >= $calls || time > $end });
}

if (@ARGV && $ARGV[0] eq '--serve') {
    my (undef, $qf, $af) = @ARGV;
    open(my $q, '<', $qf) or die "$qf: $!\n";
    open(my $a, '>', $af) or die "$af: $!\n";
    $a->autoflush(1);
    my %kids;
    my $reap = sub {
        kill 'TERM', keys %kids;
        waitpid($_, 0) for keys %kids;
        %kids = ();
    };
    while (my $line = <$q>) {
        chomp $line;
        if ($line eq 'reap') {
            $reap->();
            print $a "ok\n";
            next;
        }
        my @args = split /\t/, $line;
        my $pid = fork;
        die "fork: $!\n" unless defined $pid;
        if ($pid == 0) {
            close $q;
            close $a;
            run_worker(@args);
            exit 0;
        }
        $kids{$pid} = 1;
        print $a "$pid\n";
    }
    $reap->();
    exit 0;
}
die "usage: lifecycle_worker.pl PORT FUNCTION FAILS CALLS LOG [MODE]\n" unless @ARGV >= 5;
run_worker(@ARGV);
