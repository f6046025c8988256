#!/usr/bin/perl
# A scripted Gearman worker for t_dsjob.sh, speaking the binary protocol
# over a plain socket, for what neither `dsjob worker` nor `gearman -w` can
# send: WORK_DATA, WORK_WARNING and WORK_EXCEPTION. It serves COUNT jobs of
# FUNCTION and exits; the payload picks what it does:
#   stream:FILE  WORK_DATA "chunk1", then waits (at most 20 s) until FILE
#                exists, WORK_WARNING "careful", WORK_DATA "chunk2",
#                WORK_COMPLETE "end"
#   exception    WORK_EXCEPTION "bad thing happened"
#   fail         WORK_FAIL
#   anything else WORK_COMPLETE with the payload
# usage: fake_worker.pl PORT FUNCTION COUNT
use strict;
use warnings;
use IO::Socket::INET;

my ($port, $func, $count) = @ARGV;
alarm 60;
my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1", PeerPort => $port) or die "connect: $!";
$s->autoflush(1);

sub send_pkt {
    my ($type, @args) = @_;
    my $p = join("\0", @args);
    print $s "\0REQ" . pack("NN", $type, length $p) . $p;
}

sub read_n {
    my ($n) = @_;
    my $b = "";
    while (length $b < $n) {
        my $r = sysread($s, $b, $n - length $b, length $b);
        die "server closed\n" unless $r;
    }
    return $b;
}

sub recv_pkt {
    my ($magic, $type, $len) = unpack("a4NN", read_n(12));
    return ($type, $len ? read_n($len) : "");
}

send_pkt(1, $func);    # CAN_DO
while ($count > 0) {
    send_pkt(9);       # GRAB_JOB
    my ($type, $data) = recv_pkt();
    if ($type == 10) {    # NO_JOB
        send_pkt(4);      # PRE_SLEEP
        ($type) = recv_pkt() until defined $type && $type == 6;    # NOOP
        next;
    }
    next unless $type == 11;    # JOB_ASSIGN
    my ($handle, $f, $payload) = split /\0/, $data, 3;
    $payload = "" unless defined $payload;
    if ($payload =~ /^stream:(.*)$/) {
        my $file = $1;
        send_pkt(28, $handle, "chunk1");    # WORK_DATA
        for (1 .. 400) { last if -e $file; select(undef, undef, undef, 0.05); }
        send_pkt(29, $handle, "careful");   # WORK_WARNING
        send_pkt(28, $handle, "chunk2");
        send_pkt(13, $handle, "end");       # WORK_COMPLETE
    } elsif ($payload eq "exception") {
        send_pkt(25, $handle, "bad thing happened");    # WORK_EXCEPTION
    } elsif ($payload eq "fail") {
        send_pkt(14, $handle);                          # WORK_FAIL
    } else {
        send_pkt(13, $handle, $payload);
    }
    $count--;
}
close $s;
exit 0;
