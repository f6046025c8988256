#!/bin/sh
# embed.sh NAME FILE [NAME FILE]...: prints C source that holds each FILE's
# bytes as `const unsigned char NAME[]` (with a NUL after them, so the data
# is also a C string) and `const size_t NAME_len` (the file's size, without
# that NUL). The dashboard's page, style and script are compiled into
# dsjobd this way (server/include.am); it needs only POSIX sh, od and sed,
# not xxd, and reads its inputs from wherever make says ($(srcdir)), so an
# out-of-tree build works.
set -eu
echo "/* Made by server/dashboard/embed.sh from server/dashboard/: do not edit. */"
echo "/* clang-format off */"
echo "#include \"config.h\""
echo "#include \"server/dashboard.h\""
while [ $# -ge 2 ]; do
    name=$1 file=$2
    shift 2
    [ -r "$file" ] || { echo "embed.sh: cannot read '$file'" >&2; exit 1; }
    echo
    echo "const unsigned char $name[] = {"
    od -An -v -tx1 "$file" | sed -e 's/[[:space:]]*$//' -e '/^$/d' \
        -e 's/[[:space:]]*\([0-9a-f][0-9a-f]\)/0x\1,/g' -e 's/^/    /'
    echo "    0x00};"
    echo "const size_t ${name}_len = sizeof($name) - 1;"
done
echo
echo "/* clang-format on */"
if [ $# -ne 0 ]; then
    echo "embed.sh: NAME without a FILE" >&2
    exit 2
fi
