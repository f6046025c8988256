# Shell helpers of tests/meta/t_package.sh and t_install.sh (sourced after
# tests/lib/server.sh, with T, CC and CXX set).
#
# unit_verify UNIT FROM TO: systemd-analyze verify (SYSTEMD_ANALYZE) of
# UNIT with FROM (its ExecStart's program) made TO, a check that it says
# nothing; a diagnostic when there is no systemd-analyze.
#
# headers_compile DIR [WHICH]:
# each public header under DIR/dsjob compiles on its own, as C11 with
# -pedantic and, when CXX is found, as C++11; a check each, named with
# WHICH (say "installed "), and the compiler's output as TAP comments when
# one fails.
headers_compile() {
    for h in common client worker server; do
        printf '#include <dsjob/%s.h>\nint main(void) { return 0; }\n' "$h" >"$T/h_$h.c"
        $CC -std=c11 -Wall -Wextra -Werror -pedantic -I"$1" -c -o "$T/h_$h.o" \
            "$T/h_$h.c" >"$T/h_$h.log" 2>&1
        rc=$?
        ok $rc "${2:-}<dsjob/$h.h> compiles alone as C11 with -Wall -Wextra -Werror -pedantic"
        [ $rc -eq 0 ] || sed 's/^/# /' "$T/h_$h.log"
    done
    if ! command -v "$CXX" >/dev/null 2>&1; then
        diag "no C++ compiler ($CXX): the headers are not tried as C++"
        return 0
    fi
    for h in common client worker server; do
        printf '#include <dsjob/%s.h>\nint main() { return 0; }\n' "$h" >"$T/hxx_$h.cc"
        $CXX -std=c++11 -Wall -Wextra -Werror -pedantic -I"$1" -c \
            -o "$T/hxx_$h.o" "$T/hxx_$h.cc" >"$T/hxx_$h.log" 2>&1
        rc=$?
        ok $rc "${2:-}<dsjob/$h.h> compiles alone as C++11 with -Werror -pedantic"
        [ $rc -eq 0 ] || sed 's/^/# /' "$T/hxx_$h.log"
    done
}

unit_verify() {
    if [ -z "${SYSTEMD_ANALYZE:-}" ] || [ ! -x "$SYSTEMD_ANALYZE" ]; then
        diag "systemd-analyze not found: the unit is not verified"
        return 0
    fi
    mkdir -p "$T/units"
    sed "s|$2|$3|g" "$1" >"$T/units/dsjobd.service"
    out=$("$SYSTEMD_ANALYZE" verify --man=no "$T/units/dsjobd.service" 2>&1)
    rc=$?
    [ $rc -eq 0 ] && [ -z "$out" ]
    ok $? "systemd-analyze verify finds nothing to say about the unit"
    [ -n "$out" ] && diag "$out"
    return 0
}
