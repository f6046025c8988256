#!/usr/bin/perl
# http.pl PORT METHOD TARGET [EXTRA-HEADER-BYTES]: one HTTP/1.1 request to
# 127.0.0.1:PORT over a plain socket (no HTTP library, so a test can send
# what a library would refuse: a huge target, huge headers, any method).
# Prints the status code on the first line, the Content-Type on the second
# (empty if none), then the body. Exits 1 if no status line came back
# within 20 s.
use strict;
use warnings;
use IO::Socket::INET;

my ($port, $method, $target, $extra) = @ARGV;
my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $port, Timeout => 20)
    or die "connect: $!\n";
my $req = "$method $target HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
$req .= "X-Filler: " . ("a" x $extra) . "\r\n" if $extra;
$req .= "\r\n";
print $s $req;
my $resp = "";
eval {
    local $SIG{ALRM} = sub { die "timeout\n" };
    alarm 20;
    while (1) {
        my $n = sysread($s, my $buf, 65536);
        last if !defined $n || $n == 0;
        $resp .= $buf;
    }
    alarm 0;
};
my ($head, $body) = split /\r\n\r\n/, $resp, 2;
exit 1 unless defined $head && $head =~ m{^HTTP/1\.[01] (\d{3})};
my $code = $1;
my ($type) = $head =~ /^Content-Type:\s*([^\r\n]*)/mi;
print "$code\n", (defined $type ? $type : ""), "\n", (defined $body ? $body : "");
