# Helpers of the example tests (tests/examples/t_*.sh), sourced after
# tests/lib/server.sh and tests/interop/lib.sh. The data checks all come
# down to one comparison: the rows a consumer kept, shard-tagged and
# sorted, against the rows `dataset-producer --print` makes for every
# shard, locally and without a server. Sorting keeps duplicates, so the
# two are equal only if every row of every shard arrived exactly once and
# nothing else did.
#
#   expect_dataset DIR NAME SHARDS ROWS SEED
#       writes DIR/expect.rows (every "SHARD<TAB>row" line, sorted) and
#       DIR/expect.ok (every "# shard S ok COUNT ADLER32" line, sorted)
#   kept_rows FILE      the rows of a consumer's output (consumer.h's
#                       format) that no later drop line took back, sorted
#   rows_are FILE DESC  ok if kept_rows FILE is DIR/expect.rows of the
#                       last expect_dataset, with a diff excerpt otherwise
#   oks_are FILE DESC   ok if FILE's "ok" lines are DIR/expect.ok

EXAMPLES=$top_builddir/examples
PRODUCER=$EXAMPLES/dataset-producer
CONSUMER=$EXAMPLES/dataset-consumer
EMBEDDED=$EXAMPLES/dataset-embedded
# The programs themselves, not libtool's wrappers (tests/lib/server.sh).
unwrap_libtool PRODUCER
unwrap_libtool CONSUMER
unwrap_libtool EMBEDDED
LC_ALL=C
export LC_ALL

spec_of() { # spec_of NAME SHARD SHARDS ROWS SEED
    printf '{"dataset":"%s","shard":%s,"shards":%s,"seed":%s,"rows":%s}' "$1" "$2" "$3" "$5" "$4"
}

expect_dataset() {
    _d=$1
    EXPECT_DIR=$_d
    _s=0
    while [ "$_s" -lt "$3" ]; do
        "$PRODUCER" --print "$(spec_of "$2" "$_s" "$3" "$4" "$5")" >"$_d/expect.$_s" || return 1
        _s=$((_s + 1))
    done
    # One awk for all the shards (FILE.S is shard S): every line but the
    # last a row, the last the summary; then the two counts.
    _n=$(awk -v rows="$_d/expect.rows.u" -v oks="$_d/expect.ok.u" '
        function summary(line, s,   v) {
            if (match(line, /"count":[0-9]*,"adler32":"[0-9a-f]*"/)) {
                v = substr(line, RSTART, RLENGTH)
                gsub(/"count":|"adler32":|"/, "", v)
                sub(/,/, " ", v)
                print "# shard " s " ok " v >oks
                nok++
            }
        }
        FNR == 1 {
            if (NR > 1) summary(held, shard)
            shard = FILENAME
            sub(/.*\./, "", shard)
            have = 0
        }
        {
            if (have) { print shard "\t" held >rows; nrows++ }
            held = $0
            have = 1
        }
        END { if (NR > 0) summary(held, shard); print nrows + 0, nok + 0 }' "$_d"/expect.[0-9]*) || return 1
    sort "$_d/expect.rows.u" >"$_d/expect.rows"
    sort "$_d/expect.ok.u" >"$_d/expect.ok"
    [ "$_n" = "$4 $3" ]
}

kept_rows() {
    awk -F '\t' '
        /^# shard [0-9]+ drop / { split($0, w, " "); keep[w[3]] = ""; next }
        /^#/ { next }
        { keep[$1] = keep[$1] $0 "\n" }
        END { for (s in keep) printf "%s", keep[s] }' "$1" | sort
}

rows_are() {
    kept_rows "$1" >"$1.kept"
    if cmp -s "$1.kept" "$EXPECT_DIR/expect.rows"; then
        ok 0 "$2"
    else
        ok 1 "$2"
        diag "kept $(wc -l <"$1.kept") rows, want $(wc -l <"$EXPECT_DIR/expect.rows")"
        diag "first differences:"
        diff "$1.kept" "$EXPECT_DIR/expect.rows" | head -5 | sed 's/^/#   /'
    fi
}

oks_are() {
    grep '^# shard [0-9]* ok ' "$1" | sort >"$1.oks"
    if cmp -s "$1.oks" "$EXPECT_DIR/expect.ok"; then
        ok 0 "$2"
    else
        ok 1 "$2"
        diff "$1.oks" "$EXPECT_DIR/expect.ok" | head -5 | sed 's/^/#   /'
    fi
}
