#!/usr/bin/perl
# http.pl PORT METHOD TARGET [EXTRA-HEADER-BYTES]: one HTTP/1.1 request to
# 127.0.0.1:PORT over a plain socket (no HTTP library, so a test can send
# what a library would refuse: a huge target, huge headers, any method).
# Prints the status code on the first line, the Content-Type on the second
# (empty if none), then the body. Exits 1 if no status line came back
# within 20 s. $HTTP_HEADER, if set, is sent as one more header line (e.g.
# "X-CSRF-Token: ..."); $HTTP_HOST replaces the Host (127.0.0.1); $HTTP_BODY, if
# set, is sent as the request's body; $HTTP_HEAD_FILE, if set, names a file that
# gets the response's status line and headers.
use strict;
use warnings;
# Socket alone, not IO::Socket::INET: it starts in half the time, and
# t_http.sh runs this script a hundred times.
use Socket;

my ($port, $method, $target, $extra) = @ARGV;
socket(my $s, PF_INET, SOCK_STREAM, 0) or die "socket: $!\n";
connect($s, pack_sockaddr_in($port, inet_aton("127.0.0.1"))) or die "connect: $!\n";
select((select($s), $| = 1)[0]);
my $host = $ENV{HTTP_HOST} // "127.0.0.1";
my $req = "$method $target HTTP/1.1\r\nHost: $host\r\nConnection: close\r\n";
$req .= "X-Filler: " . ("a" x $extra) . "\r\n" if $extra;
$req .= "$ENV{HTTP_HEADER}\r\n" if $ENV{HTTP_HEADER};
if (defined $ENV{HTTP_BODY}) {
    $req .= "Content-Length: " . length($ENV{HTTP_BODY}) . "\r\n\r\n$ENV{HTTP_BODY}";
} else {
    $req .= "Content-Length: 0\r\n" if $method eq "POST";
    $req .= "\r\n";
}
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
if ($ENV{HTTP_HEAD_FILE}) {
    open(my $f, ">", $ENV{HTTP_HEAD_FILE}) or die "$ENV{HTTP_HEAD_FILE}: $!\n";
    print $f $head, "\n";
    close $f;
}
my ($type) = $head =~ /^Content-Type:\s*([^\r\n]*)/mi;
print "$code\n", (defined $type ? $type : ""), "\n", (defined $body ? $body : "");
