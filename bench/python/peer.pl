#!/usr/bin/perl
# Perl Gearman::Client's figures for bench/python/run, of the same shapes
# as cref (Gearman::Client has no pipelined background submit: one
# dispatch_background after the other):
#   perl peer.pl bg SERVER N | fg SERVER N | worker SERVER 1
#   perl peer.pl inflight SERVER N K   N foreground jobs, K in flight at once
#                                      (a Gearman::Taskset of K, as cref's task sets)
use strict;
use warnings;
use Gearman::Client;
use Gearman::Worker;
use Time::HiRes qw(time);

my ($mode, $server, $n, $k) = @ARGV;
if ($mode eq 'worker') {
    my $w = Gearman::Worker->new(job_servers => [$server]);
    $w->register_function(noop => sub { '' });
    $w->work while 1;
}
my $c = Gearman::Client->new(job_servers => [$server]);
my $t0 = time;
if ($mode eq 'bg') {
    for (1 .. $n) { defined $c->dispatch_background('noop', 'x') or die "peer.pl: submit failed\n" }
} elsif ($mode eq 'inflight') {
    my ($done, $failed) = (0, 0);
    while ($done < $n) {
        my $m = $n - $done < $k ? $n - $done : $k;
        my $ts = $c->new_task_set;
        $ts->add_task('noop', 'x', { on_fail => sub { $failed++ } }) for 1 .. $m;
        $ts->wait;
        die "peer.pl: $failed jobs failed\n" if $failed;
        $done += $m;
    }
} else {
    for (1 .. $n) { defined $c->do_task('noop', 'x') or die "peer.pl: job failed\n" }
}
printf "%.6f\n", time - $t0;
