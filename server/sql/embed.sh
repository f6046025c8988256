#!/bin/sh
# embed.sh FILE...: prints a C header that holds each SQL FILE's text as
# `static const char pg_sql_NAME[]`, NAME being the file's name without
# .sql: the statements of the postgres store (server/store_postgres.c),
# kept in server/sql/ as SQL so that they read, diff and run (psql -f) as
# SQL. Whole-line comments (--) and blank lines are left out; each line
# keeps its newline, so a comment at the end of a line stays one, except
# a line that ends in \, which is joined to the next without either. A
# line "\ir PART.sql" (psql's include) is replaced by the lines of
# PART.sql, read from the including file's directory: a piece several
# statements share (add_rows.sql), which is not itself a statement. Needs
# only POSIX sh and sed; reads its inputs from wherever make says
# ($(srcdir)), so an out-of-tree build works.
set -eu
# expand FILE: its lines, each "\ir PART" line replaced by PART's
expand() {
    dir=$(dirname "$1")
    while IFS= read -r line || [ -n "$line" ]; do
        case $line in
        '\ir '*)
            part=$dir/${line#'\ir '}
            [ -r "$part" ] || { echo "embed.sh: '$1' includes '$part', which cannot be read" >&2; exit 1; }
            cat "$part"
            ;;
        *) printf '%s\n' "$line" ;;
        esac
    done <"$1"
}
echo "/* Made by server/sql/embed.sh from the .sql files of server/sql: do not edit. */"
echo "/* clang-format off */"
for file in "$@"; do
    [ -r "$file" ] || { echo "embed.sh: cannot read '$file'" >&2; exit 1; }
    name=$(basename "$file" .sql)
    case $name in
    *[!a-z0-9_]* | "") echo "embed.sh: '$file': a name of a-z, 0-9 and _ only" >&2; exit 1 ;;
    esac
    echo
    echo "static const char pg_sql_$name[] ="
    text=$(expand "$file")
    printf '%s\n' "$text" | sed -e '/^[[:space:]]*--/d' -e '/^[[:space:]]*$/d' |
        sed -e ':a' -e '/\\$/{' -e 'N' -e 's/\\\n//' -e 'ba' -e '}' |
        sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/?/\\?/g' -e 's/^/    "/' -e 's/$/\\n"/'
    echo "    ;"
done
echo
echo "/* clang-format on */"
