#!/usr/bin/perl
# A producer for tests/integ/t_pg_cluster.sh: background submits to one job
# server over one connection, pipelined, speaking the binary protocol, so
# that the test knows exactly which submits were acknowledged (JOB_CREATED
# seen) and under which handle. Payload of job ID: "PREFIX-ID"; its unique
# key: none, or with -u the payload itself. Priority: one of high, normal,
# low, or "mix" (ID mod 3: 0 high, 1 normal, 2 low).
#
# usage: pg_load.pl [-w WINDOW] [-d DELAY-MS] [-p PRIO] [-u] [-s] [-r] [-t SECONDS]
#                   PORT FUNCTION PREFIX FIRST LAST
#   -w  submits in flight at most (default 16)
#   -d  pause after each window of answers (default 0)
#   -s  stamp: the payload is "PREFIX-ID-NS", NS the time of the send in
#       nanoseconds since the epoch (a worker's start time minus NS is the
#       job's time from submit to assignment); its unique key stays PREFIX-ID
#   -r  reconnect after the connection drops (every 100 ms, until -t)
#   -t  give up after this long (default 60 s)
# One line per job ID on stdout, in ID order as the answers come:
#   ID ok HANDLE     acknowledged
#   ID err CODE      an ERROR packet (e.g. STORE_ERROR) answered it
#   ID lost          sent, but the connection closed before its answer
#   ID unsent        never sent (no connection, or out of time)
# and on stderr a summary. Exit 0 unless the arguments are bad.
use strict;
use warnings;
use IO::Socket::INET;
use Getopt::Std;
use Time::HiRes qw(time sleep);

my %o;
getopts('w:d:p:urst:', \%o) or die "usage\n";
my ($port, $func, $prefix, $first, $last) = @ARGV;
die "usage: pg_load.pl [-w N] [-d MS] [-p PRIO] [-u] [-r] [-t S] PORT FUNCTION PREFIX FIRST LAST\n"
    unless defined $last;
my $window = $o{w} // 16;
my $delay = ($o{d} // 0) / 1000;
my $prio = $o{p} // 'normal';
my $deadline = time + ($o{t} // 60);
alarm(($o{t} // 60) + 10);
$SIG{PIPE} = 'IGNORE';
$| = 1;

my %type = (normal => 18, high => 32, low => 34);
my @prio_of = qw(high normal low);

sub prio_for { my ($id) = @_; return $prio eq 'mix' ? $prio_of[$id % 3] : $prio; }

my ($sock, $buf);

sub connect_once {
    $sock = IO::Socket::INET->new(PeerAddr => '127.0.0.1', PeerPort => $port, Timeout => 5);
    $buf = '';
    return defined $sock;
}

# read_packet: one response (type, args) or () when the connection ended.
sub read_packet {
    while (1) {
        if (length $buf >= 12) {
            my ($magic, $t, $len) = unpack('a4NN', $buf);
            die "bad magic\n" unless $magic eq "\0RES";
            if (length $buf >= 12 + $len) {
                my $d = substr($buf, 12, $len);
                substr($buf, 0, 12 + $len) = '';
                return ($t, split(/\0/, $d, -1));
            }
        }
        my $left = $deadline - time;
        return () if $left <= 0;
        my $rin = '';
        vec($rin, fileno($sock), 1) = 1;
        my $n = select(my $rout = $rin, undef, undef, $left);
        return () unless $n > 0;
        my $r = sysread($sock, $buf, 65536, length $buf);
        return () unless $r;
    }
}

my %count = (ok => 0, err => 0, lost => 0, unsent => 0);
my $id = $first;
my $connected = connect_once();
while ($id <= $last) {
    if (!$connected) {
        if (!$o{r} || time >= $deadline) {
            for my $u ($id .. $last) { print "$u unsent\n"; $count{unsent}++; }
            last;
        }
        sleep 0.1;
        $connected = connect_once();
        next;
    }
    my @batch;
    my $out = '';
    while ($id <= $last && @batch < $window) {
        my $payload = "$prefix-$id";
        my $uniq = $o{u} ? $payload : '';
        $payload .= sprintf('-%.0f', time * 1e9) if $o{s};
        my $p = join("\0", $func, $uniq, $payload);
        $out .= "\0REQ" . pack('NN', $type{prio_for($id)}, length $p) . $p;
        push @batch, $id++;
    }
    my $sent = defined syswrite($sock, $out);
    for my $i (0 .. $#batch) {
        my @r = $sent ? read_packet() : ();
        if (!@r) {
            for my $u (@batch[$i .. $#batch]) { print "$u lost\n"; $count{lost}++; }
            close $sock;
            $connected = 0;
            last;
        }
        if ($r[0] == 8) {
            print "$batch[$i] ok $r[1]\n";
            $count{ok}++;
        } elsif ($r[0] == 19) {
            print "$batch[$i] err $r[1]\n";
            $count{err}++;
        } else {
            die "unexpected answer type $r[0]\n";
        }
    }
    sleep $delay if $delay && $id <= $last;
}
printf STDERR "pg_load %s %s %s-%d..%d: ok %d err %d lost %d unsent %d\n", $port, $func, $prefix,
    $first, $last, @count{qw(ok err lost unsent)};
exit 0;
