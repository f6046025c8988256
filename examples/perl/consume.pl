#!/usr/bin/perl
# consume.pl: the dataset read by Perl's Gearman::Client
# (libgearman-client-perl), plain Gearman client code that knows nothing of
# dsjob: every shard is a task of one task set, the rows come in through
# on_data (WORK_DATA) and each shard's summary through on_complete; a shard
# that fails is submitted again by Gearman::Client itself (retry_count;
# on_retry forgets the failed attempt's rows). Each shard's rows are
# checked against its summary (count, and Adler-32 with
# Compress::Zlib::adler32). Prints what dataset-consumer prints (SHARD<TAB>ROW
# lines, "# shard S ok N ADLER32" or "# shard S bad: WHY"); exit 0 when
# every shard matched.
#   usage: perl consume.pl HOST:PORT NAME SHARDS ROWS SEED
use strict;
use warnings;

use Compress::Zlib ();
use Gearman::Client;
use JSON::PP;

@ARGV == 5 or die "usage: perl consume.pl HOST:PORT NAME SHARDS ROWS SEED\n";
my ($server, $name, $shards, $rows, $seed) = @ARGV;

# exceptions => 1: gearmand 1.1.20 sends a client that did not ask for them
# a WORK_FAIL with a stray NUL after the handle, which Gearman::Client does
# not always take for a failure (then the shard is never submitted again).
my $client = Gearman::Client->new(job_servers => [$server], exceptions => 1);
my $ts     = $client->new_task_set;
my (@data, @summary);
for my $s (0 .. $shards - 1) {
    $data[$s] = '';
    my $spec = encode_json({dataset => $name, shard => $s + 0, shards => $shards + 0,
                            seed    => $seed + 0, rows => $rows + 0});
    $ts->add_task(
        'dataset.shard' => $spec,
        {
            uniq        => "$name/$seed/$rows/${s}of$shards",
            retry_count => 2,
            on_data     => sub { $data[$s] .= ${ $_[0] } },
            on_complete => sub { $summary[$s] = ${ $_[0] } },
            on_retry    => sub { $data[$s] = ''; warn "consume.pl: shard $s failed, again\n" },
            on_fail     => sub { warn "consume.pl: shard $s failed\n" },
        });
}
$ts->wait(timeout => 120);

my $bad = 0;
for my $s (0 .. $shards - 1) {
    print "$s\t$_\n" for split /\n/, $data[$s];
    my $sum   = defined $summary[$s] ? eval { decode_json($summary[$s]) } : undef;
    my $count = ($data[$s] =~ tr/\n//);
    my $adler = sprintf '%08x', Compress::Zlib::adler32($data[$s]);
    if (!$sum) {
        print "# shard $s bad: no summary\n";
        $bad = 1;
    } elsif ($sum->{count} != $count || $sum->{adler32} ne $adler) {
        print "# shard $s bad: got $count rows with adler32 $adler, the producer says "
          . "$sum->{count} with $sum->{adler32}\n";
        $bad = 1;
    } else {
        print "# shard $s ok $count $adler\n";
    }
}
exit $bad;
