#!/bin/sh
# Meta check of the source format, in TAP: every C file git tracks (or, in a
# tarball, every .c and .h below the source tree) must be what clang-format
# makes of it with the project's .clang-format, and no line may be over 100
# columns (clang-format leaves long comments alone: ReflowComments is off).
# One check a file, so the log names each file that drifted and where.
#
# Environment (from AM_TESTS_ENVIRONMENT): top_srcdir, the source tree;
# CLANG_FORMAT, the clang-format program, empty when configure did not find
# it (the test is then skipped: a 1..0 SKIP plan, the TAP form of exit 77,
# which tap-driver.sh would count as an error). Run by hand, CLANG_FORMAT
# defaults to the clang-format on PATH.

top_srcdir=${top_srcdir:-$(dirname "$0")/../..}
if [ -z "${CLANG_FORMAT+set}" ]; then
    CLANG_FORMAT=$(command -v clang-format 2>/dev/null)
fi
if [ -z "$CLANG_FORMAT" ]; then
    echo "1..0 # SKIP clang-format not installed"
    exit 0
fi
cd "$top_srcdir" || exit 1

# .git is a file, not a directory, in a git worktree. In a tarball, config.h
# is configure's wherever the build is (make distcheck builds in _build/).
if [ -e .git ] && command -v git >/dev/null 2>&1; then
    files=$(git ls-files '*.c' '*.h')
else
    files=$(find . -name '*.[ch]' ! -name config.h ! -path './build-aux/*' ! -path './_build/*' |
        sed 's|^\./||' | sort)
fi

n=0
for f in $files; do n=$((n + 1)); done
echo "1..$n"

# One clang-format and one awk over all the files (not three programs a
# file): --dry-run names each file it would change; the diff is made only
# for those. --style=file finds .clang-format from each file's directory up.
# shellcheck disable=SC2086 # files are words
drift=$("$CLANG_FORMAT" --style=file --dry-run $files 2>&1 |
    sed -n 's/^\([^ :]*\):[0-9]*:[0-9]*: [a-z]*: .*/\1/p' | sort -u)
# shellcheck disable=SC2086
all_long=$(awk 'length > 100 { print FILENAME ":" FNR ": " length " columns" }' $files)

nl='
'
i=0
failed=0
for f in $files; do
    i=$((i + 1))
    # Shell patterns, not a grep a file: only a drifted file costs programs.
    long= d=
    case "$nl$all_long" in *"$nl$f:"[0-9]*)
        long=$(printf '%s\n' "$all_long" | grep -F "$f:" | grep "^$f:[0-9]") ;;
    esac
    case "$nl$drift$nl" in *"$nl$f$nl"*)
        d=$("$CLANG_FORMAT" --style=file "$f" | diff "$f" - 2>&1)
        [ -n "$d" ] || d="clang-format --dry-run: $f would change" ;;
    esac
    if [ -z "$d" ] && [ -z "$long" ]; then
        echo "ok $i - $f is clang-format clean"
    else
        echo "not ok $i - $f is clang-format clean"
        if [ -n "$long" ]; then
            printf '%s\n' "$long" | sed 's/^/# /'
        else
            printf '%s\n' "$d" | grep -c '^[<>]' | sed 's/^/# lines that differ: /'
            printf '%s\n' "$d" | head -20 | sed 's/^/# /'
        fi
        failed=1
    fi
done
exit $failed
