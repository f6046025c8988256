#!/usr/bin/perl
# A Gearman::Worker for t_lifecycle.sh: does FUNCTION on 127.0.0.1:PORT,
# failing (returning undef, so the worker library sends WORK_FAIL) its first
# FAILS calls and then answering "done:" and the payload; writes one line
# "TIME PAYLOAD" per call to LOG (TIME in seconds, with decimals), and exits
# after CALLS calls or 60 s. MODE, if given, changes what a call does:
# "crash" kills the worker (SIGKILL) holding the job; "timeout:N" registers
# with CAN_DO_TIMEOUT N seconds and sleeps through each call.
use strict;
use warnings;
use Gearman::Worker;
use IO::Handle;
use Time::HiRes qw(time);

my ($port, $func, $fails, $calls, $log, $mode) = @ARGV;
die "usage: lifecycle_worker.pl PORT FUNCTION FAILS CALLS LOG [MODE]\n" unless defined $log;
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
