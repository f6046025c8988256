#!/bin/sh
# Meta check, in TAP: every name a public header gives a caller (its
# functions, its DSJOB_ macros and enum constants, and the fields of its
# structs) appears in the header's man page, so a page cannot leave out
# what the header has. A field counts only where the page marks it up as
# one (.Fa or .Va) or shows it inside a literal "struct NAME {" block: a
# field named "status" or "data" is otherwise found in any sentence.
# Needs perl; skipped without it.
top_srcdir=${top_srcdir:-$(dirname "$0")/../..}
command -v perl >/dev/null 2>&1 || { echo "1..0 # SKIP perl not installed"; exit 0; }

n=0
failed=0
for lib in client worker server; do
    h=$top_srcdir/include/dsjob/$lib.h
    page=$top_srcdir/man/dsjob_$lib.3
    missing=$(perl -e '
        my ($h, $page) = @ARGV;
        local $/;
        open(my $fh, "<", $h) or die "$h: $!"; my $src = <$fh>;
        open(my $fp, "<", $page) or die "$page: $!"; my $man = <$fp>;
        $src =~ s{/\*.*?\*/}{}gs;
        my %names;
        $names{$1} = 1 while $src =~ /DSJOB_API\s[^;]*?\b(dsjob_\w+)\s*\(/g;
        $names{$1} = 1 while $src =~ /^#define\s+(DSJOB_\w+)/mg;
        while ($src =~ /\benum\s+\w+\s*\{(.*?)\}/gs) {
            my $body = $1;
            $names{$1} = 1 while $body =~ /\b(DSJOB_\w+)/g;
        }
        while ($src =~ /\bstruct\s+(\w+)\s*\{(.*?)\}\s*;/gs) {
            my ($s, $body) = ($1, $2);
            $names{"struct $s"} = 1;
            for my $decl (split /;/, $body) {
                next if $decl !~ /\S/;
                if ($decl =~ /\(\s*\*\s*(\w+)\s*\)/) { $names{"$s.$1"} = 1; }
                elsif ($decl =~ /(\w+)\s*(\[[^\]]*\])?\s*$/) { $names{"$s.$1"} = 1; }
            }
        }
        delete @names{grep { /^DSJOB_(API|BUILDING)$/ || /_H$/ } keys %names};
        (my $text = $man) =~ s/\\&//g;
        my @miss;
        for my $k (sort keys %names) {
            if ($k =~ /^(\w+)\.(\w+)$/) {
                my ($s, $f) = ($1, $2);
                my ($block) = $text =~ /struct \Q$s\E \{(.*?)\n\};/s;
                next if defined $block && $block =~ /\b\Q$f\E\b/;
                next if $text =~ /(?:^|\s)(?:Fa|Va) \Q$f\E\b/m;
                push @miss, $k;
                next;
            }
            my $w = $k; $w =~ s/^struct //;
            push @miss, $k unless $text =~ /(?<![\w])\Q$w\E(?![\w])/;
        }
        print join(" ", @miss);' "$h" "$page")
    n=$((n + 1))
    if [ -z "$missing" ]; then
        echo "ok $n - dsjob_$lib.3 names everything <dsjob/$lib.h> declares"
    else
        echo "not ok $n - dsjob_$lib.3 names everything <dsjob/$lib.h> declares (not: $missing)"
        failed=1
    fi
done
echo "1..$n"
exit $failed
