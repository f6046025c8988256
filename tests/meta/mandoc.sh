#!/bin/sh
# Meta check of the manual pages, in TAP: every man/*.[0-9] must be clean
# under `mandoc -Tlint -W warning` (no message at all, exit status 0), and
# every long option in the long_options[] table of server/options.c must be
# documented in man/dsjobd.8 as `Fl \-NAME`, so the page cannot drift from
# the code.
#
# Environment (from AM_TESTS_ENVIRONMENT): top_srcdir, the source tree;
# MANDOC, the mandoc program, empty when configure did not find it (the
# test is then skipped). Run by hand, MANDOC defaults to the mandoc on PATH.

top_srcdir=${top_srcdir:-$(dirname "$0")/../..}
if [ -z "${MANDOC+set}" ]; then
    MANDOC=$(command -v mandoc 2>/dev/null)
fi
if [ -z "$MANDOC" ]; then
    echo "1..0 # SKIP mandoc not installed"
    exit 0
fi

options_c=$top_srcdir/server/options.c
page=$top_srcdir/man/dsjobd.8

# The quoted names of the long_options[] table, one a line.
options=$(sed -n '/long_options\[\][^=]*=[[:space:]]*{/,/^[[:space:]]*};/p' "$options_c" 2>/dev/null |
    sed -n 's/^[[:space:]]*{[[:space:]]*"\([^"]*\)"[[:space:]]*,.*/\1/p')

pages=
for f in "$top_srcdir"/man/*.[0-9]; do
    [ -f "$f" ] && pages="$pages $f"
done

npages=0
for f in $pages; do npages=$((npages + 1)); done
nopts=0
for o in $options; do nopts=$((nopts + 1)); done

# Two more: that the table was found, and that dsjobd.8 exists.
echo "1..$((npages + nopts + 2))"

n=0
failed=0

ok() { # ok STATUS DESCRIPTION
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then
        echo "ok $n - $2"
    else
        echo "not ok $n - $2"
        failed=1
    fi
}

diag() {
    printf '%s\n' "$1" | sed 's/^/# /'
}

# One mandoc for every page (a process a page was most of this test's
# cost); its messages name their page, so only a page named costs a grep.
# shellcheck disable=SC2086 # the pages are words
all=$($MANDOC -Tlint -W warning $pages 2>&1)
all_rc=$?
nl='
'
for f in $pages; do
    name=${f##*/}
    out= rc=0
    case "$nl$all" in *"$f:"*)
        out=$(printf '%s\n' "$all" | grep -F "$f:")
        rc=$all_rc
        [ $rc -ne 0 ] || rc=1 ;;
    esac
    # a failure that names no page counts against every page
    [ $all_rc -eq 0 ] || [ -n "$all" ] || rc=$all_rc
    if [ $rc -eq 0 ] && [ -z "$out" ]; then
        ok 0 "mandoc -Tlint -W warning man/$name is clean"
    else
        ok 1 "mandoc -Tlint -W warning man/$name is clean"
        diag "exit status $rc"
        [ -n "$out" ] && diag "$out"
    fi
done

if [ "$nopts" -gt 0 ]; then
    ok 0 "server/options.c has a long_options[] table ($nopts options)"
else
    ok 1 "server/options.c has a long_options[] table"
    diag "no {\"name\", ...} entries found in $options_c"
fi

if [ -f "$page" ]; then
    ok 0 "man/dsjobd.8 exists"
else
    ok 1 "man/dsjobd.8 exists"
fi

# Every "Fl \-NAME" of the page, NAME as long as it goes, from one awk:
# "Fl \-port" must not be satisfied by "Fl \-port-file".
documented=" $(awk '{
    while (match($0, /Fl \\-[A-Za-z0-9-]+/)) {
        printf "%s ", substr($0, RSTART + 5, RLENGTH - 5)
        $0 = substr($0, RSTART + RLENGTH)
    }
}' "$page" 2>/dev/null)"
for o in $options; do
    case $o in
    *[!A-Za-z0-9-]*)
        # Not a plain option name: match it literally, without the boundary check.
        grep -F -e "Fl \\-$o" "$page" >/dev/null 2>&1
        ;;
    *)
        case $documented in *" $o "*) true ;; *) false ;; esac
        ;;
    esac
    ok $? "--$o is documented in man/dsjobd.8"
done

exit $failed
