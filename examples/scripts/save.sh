#!/bin/sh
# save.sh DIR: a dataset.save worker command, for background jobs:
#   dsjob worker -f dataset.save -- ./save.sh /var/lib/datasets
# Reads the spec on standard input and writes the shard's rows to
# DIR/NAME-SHARD-of-SHARDS.tsv (as dataset-producer --save-dir names it),
# through a temporary file and a rename, so that a file there is whole.
# Prints the summary line: the job's result.
dir=${1:?usage: save.sh DIR}
spec=$(cat)
# The file's name, from the spec's fields as produce.sh reads them (the
# last "KEY": of a line, quoted or not, of [A-Za-z0-9._-] only).
name=$(printf '%s\n' "$spec" | awk '
    function field(key, line,   v) {
        v = ""
        while (match(line, "\"" key "\" *: *\"?[A-Za-z0-9._-]*")) {
            v = substr(line, RSTART, RLENGTH)
            line = substr(line, RSTART + RLENGTH)
        }
        sub(/^"[^"]*" *: *"?/, "", v)
        return v
    }
    { d = d field("dataset", $0); s = s field("shard", $0); n = n field("shards", $0) }
    END { print d "-" s "-of-" n ".tsv" }')
out=$dir/$name
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
printf '%s' "$spec" | "$here/produce.sh" >"$out.tmp.$$" || exit 1
tail -n 1 "$out.tmp.$$"
sed -i '$d' "$out.tmp.$$" && mv "$out.tmp.$$" "$out"
