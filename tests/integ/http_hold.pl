#!/usr/bin/perl
# http_hold.pl MODE ARGS: slow and idle peers for t_http_limits.sh.
#   trickle PORT GAP MAX   one connection sending a GET's header a byte every
#                          GAP seconds, for at most MAX seconds; prints
#                          "closed after S s" when the server closes it, or
#                          "open after S s, N bytes sent"
#   cap PORT N             N silent connections, then one more with a GET
#                          /healthz: prints whether it was answered while the
#                          N were open (after 1 s), then closes one of them and
#                          prints the status the extra one then gets
#   hold PORT N SECS       N connections, each sent a byte every second, for
#                          SECS seconds (or until killed); prints how many opened
#   echo PORT              one Gearman ECHO_REQ "hello"; prints "ECHO_RES hello"
#                          once answered (waits as long as it takes)
use strict;
use warnings;
use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw(time sleep);

my $mode = shift;
$SIG{PIPE} = 'IGNORE';

sub conn {
    my ($port) = @_;
    return IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $port, Timeout => 20);
}

# Reads a status line within $secs; the code, or undef.
sub status_within {
    my ($s, $secs) = @_;
    my $sel = IO::Select->new($s);
    my $got = "";
    my $end = time + $secs;
    while (time < $end && $got !~ /\r\n/) {
        last unless $sel->can_read($end - time);
        my $n = sysread($s, my $buf, 4096);
        last unless $n;
        $got .= $buf;
    }
    return $got =~ m{^HTTP/1\.[01] (\d{3})} ? $1 : undef;
}

if ($mode eq "trickle") {
    my ($port, $gap, $max) = @ARGV;
    my $s = conn($port) or die "connect: $!\n";
    my $msg = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " . ("a" x 5000);
    my $t0 = time;
    my $i = 0;
    my $sel = IO::Select->new($s);
    while (time - $t0 < $max && $i < length $msg) {
        if ($sel->can_read(0)) { # the server closed it (or answered)
            my $n = sysread($s, my $buf, 4096);
            if (!$n) { printf "closed after %d s, %d bytes sent\n", time - $t0, $i; exit 0 }
        }
        my $w = syswrite($s, substr($msg, $i, 1));
        if (!defined $w) { printf "closed after %d s, %d bytes sent\n", time - $t0, $i; exit 0 }
        $i++;
        sleep $gap;
    }
    printf "open after %d s, %d bytes sent\n", time - $t0, $i;
} elsif ($mode eq "cap") {
    my ($port, $n) = @ARGV;
    my @held = map { conn($port) or die "connect: $!\n" } 1 .. $n;
    my $x = conn($port) or die "connect: $!\n";
    print $x "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    my $code = status_within($x, 1);
    print defined $code ? "held $n; the 4th: answered $code while they are open\n"
                        : "held $n; the 4th: no answer while they are open\n";
    close(shift @held);
    $code = status_within($x, 30) unless defined $code;
    print "after one closed: ", ($code // "nothing"), "\n";
} elsif ($mode eq "hold") {
    my ($port, $n, $secs) = @ARGV;
    my @s;
    for (1 .. $n) {
        my $s = conn($port) or last;
        push @s, $s;
    }
    print "opened ", scalar @s, "\n";
    my $t0 = time;
    while (time - $t0 < $secs) {
        syswrite($_, "G") for @s;
        sleep 1;
    }
} elsif ($mode eq "echo") {
    my ($port) = @ARGV;
    my $s = conn($port) or die "connect: $!\n";
    print $s "\0REQ" . pack("NN", 16, 5) . "hello";
    my $got = "";
    while (length $got < 12 + 5) {
        my $n = sysread($s, my $buf, 4096);
        die "closed after " . length($got) . " bytes\n" unless $n;
        $got .= $buf;
    }
    my ($magic, $type, $len) = unpack("a4NN", $got);
    print $type == 17 ? "ECHO_RES " : "type $type ", substr($got, 12, $len), "\n";
} else {
    die "usage: http_hold.pl trickle|cap|hold|echo ...\n";
}
