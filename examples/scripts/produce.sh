#!/bin/sh
# produce.sh: the dataset's producer as a shell script, for
#   dsjob worker --stream -f dataset.shard -- ./produce.sh
# The spec (JSON, as dataset-consumer and consume.sh send it) comes on
# standard input; each row of the shard goes to standard output as one
# line as soon as it is made (with --stream, one WORK_DATA packet each),
# progress to fd 3 as N/D lines (WORK_STATUS), and the summary line last.
# The rows and the summary are byte for byte those of the C producer
# (examples/dataset.c): awk computes in doubles, and every product of the
# generator stays below 2^53. The same awk reads the spec, one regular
# expression a field: enough for the flat objects the consumers send, not
# a JSON parser.

# fd 3 is the status pipe under dsjob worker; run by hand there is none.
status=/dev/null
if { true >&3; } 2>/dev/null; then status=/dev/fd/3; fi

exec awk -v status="$status" '
# field(KEY, LINE): the value of the last "KEY": in LINE, quoted or not, of
# the characters [A-Za-z0-9._-] only ("" if none).
function field(key, line,   v) {
    v = ""
    while (match(line, "\"" key "\" *: *\"?[A-Za-z0-9._-]*")) {
        v = substr(line, RSTART, RLENGTH)
        line = substr(line, RSTART + RLENGTH)
    }
    sub(/^"[^"]*" *: *"?/, "", v)
    return v
}
function get(key,   v) { # a key found on several lines is all of them: a bad spec
    if ($0 ~ "\"" key "\" *:") {
        v = (key in spec_) ? spec_[key] "\n" : ""
        spec_[key] = v field(key, $0)
    }
}
function num(v) { # a number if it looks like one, as awk -v would make it
    return v ~ /^-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE]-?[0-9]+)?$/ ? v + 0 : v
}
{
    spec = spec (NR > 1 ? "\n" : "") $0
    get("dataset"); get("shard"); get("shards"); get("seed"); get("rows")
}
END {
    sub(/\n+$/, "", spec)
    name = spec_["dataset"]; shard = num(spec_["shard"]); shards = num(spec_["shards"])
    seed = num(spec_["seed"]); rows = spec_["rows"] == "" ? 1000 : num(spec_["rows"])
    if (name == "" || shard == "" || shards == "" || seed == "" ||
        (name shard shards seed rows) ~ /[^A-Za-z0-9._-]/) {
        print "produce.sh: bad spec: " spec > "/dev/stderr"
        exit 2
    }

    M = 2147483647; A = 48271
    split("alpha bravo charlie delta echo foxtrot golf hotel", label, " ")
    for (i = 1; i < 128; i++) ord[sprintf("%c", i)] = i
    n = shard < rows ? int((rows - shard + shards - 1) / shards) : 0
    step = int(n / 20) > 0 ? int(n / 20) : 1
    s1 = 1; s2 = 0
    print 0 "/" n > status; fflush(status)
    for (k = 0; k < n; k++) {
        g = k * shards + shard
        x = (seed + (g + 1) * 2654435) % M
        x = x * A % M
        x = (x + int(x / 65536) * (x % 65536) * 7919) % M
        x = x * A % M
        x = x * A % M
        row = g "\t" (x % 1000000) "\t" label[int(x / 1000000) % 8 + 1] "\n"
        printf "%s", row; fflush()
        for (i = 1; i <= length(row); i++) {
            s1 = (s1 + ord[substr(row, i, 1)]) % 65521
            s2 = (s2 + s1) % 65521
        }
        if ((k + 1) % step == 0 && k + 1 < n) { print (k + 1) "/" n > status; fflush(status) }
    }
    print n "/" n > status
    printf "{\"dataset\":\"%s\",\"shard\":%d,\"shards\":%d,\"count\":%d,\"adler32\":\"%08x\"}\n",
        name, shard, shards, n, s2 * 65536 + s1
}'
