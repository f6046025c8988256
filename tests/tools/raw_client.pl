#!/usr/bin/perl
# A Gearman client for t_dsjob.sh that shows the packets a foreground job
# gets, speaking the binary protocol over a plain socket, so a check can
# assert each WORK_DATA, WORK_WARNING and the packet that ends the job as
# the server sent it (the libraries and the gearman CLI merge or hide them).
# Submits one SUBMIT_JOB of FUNCTION with DATA (after OPTION_REQ
# "exceptions" with -e) and prints one line a packet until the job ends:
#   DATA BYTES | WARNING BYTES | STATUS N/D | COMPLETE BYTES | FAIL BYTES |
#   EXCEPTION BYTES | ERROR CODE TEXT
# where BYTES is what follows the job's handle (FAIL's is empty unless the
# server added something), a newline shown as \n, a NUL as \0, a
# backslash as \\. JOB_CREATED and OPTION_RES are not shown.
# usage: raw_client.pl [-e] PORT FUNCTION DATA
use strict;
use warnings;
use IO::Socket::INET;

my $exc = @ARGV && $ARGV[0] eq '-e' ? shift : undef;
my ($port, $func, $data) = @ARGV;
alarm 30;
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

sub show {
    my ($b) = @_;
    $b =~ s/\\/\\\\/g;
    $b =~ s/\n/\\n/g;
    $b =~ s/\0/\\0/g;
    return $b;
}

my %name = (12 => 'STATUS', 13 => 'COMPLETE', 14 => 'FAIL', 25 => 'EXCEPTION', 28 => 'DATA',
    29 => 'WARNING');
send_pkt(26, "exceptions") if $exc;    # OPTION_REQ
send_pkt(7, $func, "", $data);          # SUBMIT_JOB
$| = 1;
my $handle;
for (;;) {
    my ($magic, $type, $len) = unpack("a4NN", read_n(12));
    my $p = $len ? read_n($len) : "";
    next if $type == 27;    # OPTION_RES
    if ($type == 8) {       # JOB_CREATED
        $handle = $p;
        next;
    }
    if ($type == 19) {      # ERROR
        print "ERROR ", show($p), "\n";
        exit 1;
    }
    next unless $name{$type} && defined $handle && substr($p, 0, length $handle) eq $handle;
    my $rest = substr($p, length $handle);
    if ($type == 12) {
        $rest =~ s/^\0//;
        $rest =~ s/\0/\//;
        print "STATUS $rest\n";
        next;
    }
    # The separator after the handle; FAIL has no second argument.
    $rest =~ s/^\0// unless $type == 14;
    print "$name{$type} ", show($rest), "\n";
    exit 0 if $type == 13 || $type == 14 || $type == 25;
}
