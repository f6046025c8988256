#!/usr/bin/perl
# A Gearman::Worker for t_lifecycle.sh: does FUNCTION on 127.0.0.1:PORT,
# failing (returning undef, so the worker library sends WORK_FAIL) its first
# FAILS calls and then answering "done:" and the payload; writes one line
# "TIME PAYLOAD" per call to LOG (TIME in seconds, with decimals), and exits
# after CALLS calls or 60 s.
use strict;
use warnings;
use Gearman::Worker;
use IO::Handle;
use Time::HiRes qw(time);

my ($port, $func, $fails, $calls, $log) = @ARGV;
die "usage: lifecycle_worker.pl PORT FUNCTION FAILS CALLS LOG\n" unless defined $log;
open(my $out, '>>', $log) or die "$log: $!\n";
$out->autoflush(1);
my $n = 0;
my $w = Gearman::Worker->new(job_servers => ["127.0.0.1:$port"]);
$w->register_function($func => sub {
    my $arg = $_[0]->arg;
    $n++;
    printf $out "%.3f %s\n", time, $arg;
    return undef if $n <= $fails;
    return "done:$arg";
});
my $end = time + 60;
$w->work(stop_if => sub { $n >= $calls || time > $end });
