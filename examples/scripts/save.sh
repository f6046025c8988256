#!/bin/sh
# save.sh DIR: a dataset.save worker command, for background jobs:
#   dsjob worker -f dataset.save -- ./save.sh /var/lib/datasets
# Reads the spec on standard input and writes the shard's rows to
# DIR/NAME-SHARD-of-SHARDS.tsv (as dataset-producer --save-dir names it),
# through a temporary file and a rename, so that a file there is whole.
# Prints the summary line: the job's result.
dir=${1:?usage: save.sh DIR}
spec=$(cat)
field() {
    printf '%s\n' "$spec" | sed -n "s/.*\"$1\" *: *\"\{0,1\}\([A-Za-z0-9._-]*\)\"\{0,1\}.*/\1/p"
}
out=$dir/$(field dataset)-$(field shard)-of-$(field shards).tsv
printf '%s' "$spec" | "$(dirname "$0")/produce.sh" >"$out.tmp.$$" || exit 1
tail -n 1 "$out.tmp.$$"
sed -i '$d' "$out.tmp.$$" && mv "$out.tmp.$$" "$out"
