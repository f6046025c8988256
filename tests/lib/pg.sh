# Shell helper for the PostgreSQL store's tests: a throwaway PostgreSQL
# (15 or later) of the test's own, in a temp dir, on a loopback port.
# Sourced after tests/lib/server.sh (and tests/interop/lib.sh, if the test
# uses it); POSIX sh.
#
#   pg_find           sets PG_BIN to the directory of initdb and pg_ctl
#                     (/usr/lib/postgresql/15/bin, else `pg_config --bindir`)
#                     and PG_VERSION; returns 1 and sets PG_WHY if there is
#                     none, or if we are root and have no `postgres` user or
#                     no runuser.
#   pg_skip_unless_found
#                     prints `1..0 # SKIP <why>` and exits 0 when pg_find fails
#   pg_start          a copy of the first test's cluster (initdb, then
#                     CREATE DATABASE dsjob, kept stopped as a tar,
#                     $top_builddir/tests/pg-template-VERSION-db4.tar) in a
#                     fresh temp dir (on /dev/shm when it has 1 GB free,
#                     else in TMPDIR; PG_TMPDIR chooses), owned by the
#                     `postgres` user when we are root (initdb refuses
#                     root; initdb, pg_ctl and postgres then run as
#                     `postgres` through setpriv, else runuser),
#                     started on 127.0.0.1 only, on a port that was free
#                     (tried again on another port if the start fails), its
#                     unix socket in the temp dir. fsync is off (no test
#                     crashes the machine: what a commit wrote survives a
#                     kill -9 or an immediate shutdown of PostgreSQL in
#                     the page cache); synchronous_commit and
#                     full_page_writes are on, as by default; shared_buffers
#                     is small; no autovacuum. Started without pg_ctl
#                     (postgres itself, waited for by one rawpeer until
#                     postmaster.pid says ready).
#                     Sets PG_DIR, PG_DATA, PG_LOG, PG_PORT, PG_PID (from
#                     postmaster.pid), PG_DSN (libpq conninfo for dsjobd's
#                     --pg-dsn). Returns 1, with the server log on stderr,
#                     if it could not start.
#   pg_psql ARG...    psql against the dsjob database (quiet, unaligned,
#                     tuples only, no psqlrc, ON_ERROR_STOP), as the caller:
#                     psql is a client and does not mind root, and so it can
#                     read the test's own files
#   pg_restart_immediate
#                     pg_ctl restart -m immediate (a crash: no checkpoint,
#                     recovery at the start); PG_PID is the new postmaster's
#   pg_stop_immediate, pg_start_again
#                     the two halves of that, for a test that wants to act
#                     while PostgreSQL is down
#   pg_stop           SIGINT (fast shutdown) to PG_PID, waits for it to go
#                     (SIGQUIT after 20 s); the postmaster is pg_ctl's child,
#                     not ours, so this polls /proc (a zombie is gone)
#   pg_cleanup        an immediate shutdown (SIGQUIT, no checkpoint: the
#                     data goes next) if it runs, then removes PG_DIR; safe
#                     to call more than once and from an EXIT trap (pg_start
#                     installs one that also runs the test's own cleanup)
#
# The superuser is `postgres` whoever runs the test (initdb -U postgres),
# authentication is trust, and nothing listens beyond 127.0.0.1.
#
# dsjobd on the postgres store, several at once, each known by a NAME (a
# shell word: a, b, c):
#
#   pg_skip_unless_store
#                     runs `dsjobd --store postgres` once (libpq's defaults
#                     pointing where nothing listens, bounded to 3 s) and prints its
#                     answer as a diagnostic (kept in
#                     $top_builddir/tests/pg-template-dsjobd-answer while
#                     it is newer than dsjobd); if dsjobd reports the store
#                     unknown or not built, prints `1..0 # SKIP` with that
#                     answer and exits 0. Any other answer goes on to the test.
#   pgd_start NAME [ARG...]
#                     starts dsjobd -L 127.0.0.1 -p 0 --store postgres
#                     --pg-dsn "$PG_DSN" with ARGs, waits (120 s at most,
#                     while it runs) for its port file; sets PGD_PORT_<NAME>,
#                     PGD_PID_<NAME>, PGD_LOG_<NAME> (its stderr goes to
#                     PGD_LOG_<NAME>.stderr). Returns 1, with the end of its
#                     log and stderr as TAP comments, if it did not start.
#   pgd_start_or_bail NAME [ARG...]
#                     pgd_start, or `Bail out!` and exit 1
#   pgd_launch NAME [ARG...], pgd_wait NAME
#                     the two halves of pgd_start, to start several at once
#   pgd_start_all_or_bail "NAME..." [ARG...]
#                     a dsjobd under each NAME with the same ARGs, launched
#                     at once, then waited for; `Bail out!` if one fails
#   pgd_wait_all_or_bail
#                     pgd_wait for each one launched and not waited for yet
#                     (several with ARGs of their own), or `Bail out!`
#   pg_test_start [NAMES [ARG...]]
#                     pg_test_begin, pg_start_or_bail and, given NAMES,
#                     pgd_start_all_or_bail: a test's usual preamble
#   pgd_stop_idle NAME OWNER
#                     SIGSTOP to NAME at a moment its writer's backend is
#                     idle (no row locks held while it is stopped)
#   pgd_port NAME, pgd_pid NAME, pgd_log NAME
#                     print those
#   pgd_stop NAME     SIGTERM (SIGCONT first, in case it is stopped), waits
#                     up to 15 s, then SIGKILL; returns 1 if it needed the KILL
#   pgd_kill9 NAME    SIGKILL and reap
#   pgd_stop_all      pgd_stop for every one still running (the EXIT trap)
#   pgd_stat NAME SAMPLE
#                     one sample of `dsjob stats` (tsv), e.g.
#                     dsjob_pg_lease_lost_total; empty if absent
#   pgd_registered NAME FUNCTION [N]
#                     `dsjob status` of NAME shows at least N (1) workers
#                     for FUNCTION
#   poll_s SECONDS CMD...
#                     CMD until it succeeds, at most SECONDS (60 at least)
#                     of pauses; between tries it sleeps POLL_S_SLEEP
#                     seconds if set, else 0.1 s for the first second,
#                     0.25 s for the next five and 0.5 s after them
#   pg_test_begin     a test's first steps: skips when tools/dsjob ($DSJOB,
#                     set by server.sh) is not built and as pg_skip_unless_found and
#                     pg_skip_unless_store do, unsets DSJOB_SERVERS and
#                     DSJOB_PROGRESS
#   pg_start_or_bail  pg_start, or `Bail out!` and exit 1; a diagnostic
#                     names the PostgreSQL, its port and pid
#   q SQL             SQL's value(s), one a line, as pg_psql -c SQL prints
#                     them, through one psql session the test keeps open
#                     (opened when PostgreSQL has started: pg_start,
#                     pg_start_again, pg_restart_immediate; once it has
#                     ended otherwise, q runs a psql a query; a statement
#                     sent to the session as it ended is not run again:
#                     q says so on stderr and returns 1, as it may have
#                     run): a
#                     psql and its backend cost ~80 ms of CPU to start on
#                     a loaded machine, a query in the session ~4 ms, and
#                     polls run q many times. Not ON_ERROR_STOP: a failed
#                     statement's message goes to stderr and q returns 1.
#                     The statements of SQL are sent one by one (not as
#                     one implicit transaction as -c does). The session
#                     uses file descriptors 6, 8 and 9 of the test's shell;
#                     its backend is one more in pg_stat_activity, and is
#                     pg_backend_pid() of q's queries. It is closed
#                     before PostgreSQL stops or restarts (pg_stop,
#                     pg_stop_immediate, pg_restart_immediate). q is not
#                     for two processes at once (not in a job run with &).
#   pgd_writer_pid OWNER
#                     the backend of that start's writer connection (the one
#                     holding its advisory lock), empty once it is gone
#   gate_hold N FD, gate_is N t|f, gate_open N FD
#                     a psql session of the test holds advisory lock N (for
#                     a trigger of the test's that waits for it), until
#                     gate_open; gate_is: N is held (t) or waited for (f)

PG_DIR=""
PG_PID=""
_pg_uid=$(id -u)

pg_find() {
    PG_WHY=""
    PG_BIN=""
    # pg_config (a script on Debian) only when PostgreSQL 15's own
    # directory has none.
    for _d in /usr/lib/postgresql/15/bin pg_config; do
        [ "$_d" != pg_config ] || _d=$(pg_config --bindir 2>/dev/null)
        if [ -n "$_d" ] && [ -x "$_d/initdb" ] && [ -x "$_d/pg_ctl" ] && [ -x "$_d/postgres" ]; then
            PG_BIN=$_d
            break
        fi
    done
    if [ -z "$PG_BIN" ]; then
        PG_WHY="PostgreSQL 15 binaries not found (no initdb/pg_ctl in /usr/lib/postgresql/15/bin nor in pg_config --bindir; apt-get install postgresql-15)"
        return 1
    fi
    # Debian's layout names the major version (no postgres --version, a
    # start of a program linked to forty libraries, a test).
    case $PG_BIN in
    /usr/lib/postgresql/[1-9][0-9]/bin) PG_VERSION=${PG_BIN#/usr/lib/postgresql/} PG_VERSION=${PG_VERSION%/bin} ;;
    *) PG_VERSION=$("$PG_BIN/postgres" --version 2>/dev/null | sed -n 's/.* \([0-9][0-9]*\)\.[0-9].*/\1/p') ;;
    esac
    if [ -z "$PG_VERSION" ] || [ "$PG_VERSION" -lt 15 ]; then
        PG_WHY="PostgreSQL in $PG_BIN is '${PG_VERSION:-unknown}', not 15 or later (apt-get install postgresql-15)"
        return 1
    fi
    [ -x "$PG_BIN/psql" ] || {
        PG_WHY="no psql in $PG_BIN"
        return 1
    }
    if [ "$_pg_uid" = 0 ]; then
        if ! _pg_has_user postgres; then
            PG_WHY="running as root and there is no 'postgres' user to run initdb as"
            return 1
        fi
        if ! command -v runuser >/dev/null 2>&1; then
            PG_WHY="running as root and there is no runuser to run initdb as postgres"
            return 1
        fi
    fi
    return 0
}

# _pg_has_user NAME: a user NAME, found in /etc/passwd by the shell (no
# process), else by id (a user of NSS's other sources).
_pg_has_user() {
    while IFS=: read -r _pu _pr; do
        [ "$_pu" = "$1" ] && return 0
    done </etc/passwd 2>/dev/null
    id "$1" >/dev/null 2>&1
}

pg_skip_unless_found() {
    pg_find || {
        echo "1..0 # SKIP $PG_WHY"
        exit 0
    }
}

# _pg_as CMD ARG...: CMD as the owner of the cluster: through setpriv when
# there is one (a third of runuser's CPU: no PAM session), else runuser.
_pg_as() {
    if [ "$_pg_uid" = 0 ]; then
        if [ -n "$_pg_setpriv" ]; then
            setpriv --reuid=postgres --regid=postgres --clear-groups -- "$@"
        else
            runuser -u postgres -- "$@"
        fi
    else
        "$@"
    fi
}

_pg_read_pid() {
    PG_PID=""
    read -r PG_PID 2>/dev/null <"$PG_DATA/postmaster.pid" || :
}
_pg_setpriv=""
if [ "$_pg_uid" = 0 ] && command -v setpriv >/dev/null 2>&1; then
    _pg_setpriv=1
fi

# _pg_base: the directory the clusters go in: /dev/shm when it is a
# writable tmpfs with 1 GB free (a copy of the template there, and its
# removal, cost a fifth of what they cost on a disk's file system: no
# journal, no block allocation), else ${TMPDIR:-/tmp}; PG_TMPDIR, if set,
# wins. Nothing in a test's cluster needs a disk: fsync is off.
_pg_base() {
    if [ -n "${PG_TMPDIR:-}" ]; then
        echo "$PG_TMPDIR"
        return
    fi
    if [ -d /dev/shm ] && [ -w /dev/shm ]; then
        # df -P: "Filesystem 1024-blocks Used Available Capacity Mounted".
        set -- $(df -Pk /dev/shm 2>/dev/null) ""
        if [ "${1:-}" = Filesystem ] && [ "${11:-0}" -ge 1048576 ] 2>/dev/null; then
            echo /dev/shm
            return
        fi
    fi
    echo "${TMPDIR:-/tmp}"
}

pg_start() {
    [ -n "$PG_BIN" ] || pg_find || {
        echo "pg_start: $PG_WHY" >&2
        return 1
    }
    # Not inside the test's own temp dir: that one is root's and mode 700
    # when we are root, and the postgres user must reach its data directory.
    PG_DIR=$(mktemp -d "$(_pg_base)/dsjob-pg.XXXXXX") || return 1
    PG_DATA=$PG_DIR/data
    PG_LOG=$PG_DIR/postgres.log
    # The server log is the postgres user's: _pg_launch's postgres writes it
    # through the descriptor we open, pg_ctl (pg_start_again) opens it as
    # postgres.
    : >"$PG_LOG" || return 1
    if [ "$_pg_uid" = 0 ]; then
        chown postgres "$PG_DIR" "$PG_LOG" || return 1
    fi
    # Every test's cluster starts the same: initdb, then database dsjob. The
    # first test makes that (_pg_template_make, about 2 s of CPU and a
    # CREATE DATABASE that writes and syncs a copy of template1) and keeps
    # a tar of the stopped data directory in the build tree (removed by
    # make clean); the others unpack it (tar keeps the owner and modes
    # when we are root; one archive file to read, not 700) and only start
    # it. Two tests that both find none both make one; the
    # last rename wins. The copy is small
    # (18 MB, not initdb's 46: WAL segments of 1 MB, two of them kept,
    # and no databases postgres and template0).
    _pg_tpl=${top_builddir:-.}/tests/pg-template-$PG_VERSION-db4.tar
    if [ -s "$_pg_tpl" ] && tar -C "$PG_DIR" -xf "$_pg_tpl" 2>/dev/null; then
        :
    else
        rm -rf "$PG_DATA"
        _pg_template_make || return 1
        if tar -C "$PG_DIR" -cf "$_pg_tpl.$$" data 2>/dev/null; then
            mv -f "$_pg_tpl.$$" "$_pg_tpl" 2>/dev/null || rm -f "$_pg_tpl.$$"
        else
            rm -f "$_pg_tpl.$$"
        fi
    fi
    # Appended by us, root or not: an append keeps the file's owner (and a
    # runuser costs a tenth of a second on a loaded machine). No
    # autovacuum: no test waits for it, and its launcher and workers
    # (every database, every minute) are CPU a test does not need.
    {
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$PG_DIR'"
        echo "shared_buffers = 16MB"
        echo "fsync = off"
        echo "max_connections = 60"
        echo "log_min_messages = warning"
        echo "autovacuum = off"
        # On /dev/shm, its dynamic shared memory in files of the cluster's
        # (removed with it), not in segments of /dev/shm's own that an
        # immediate shutdown leaves behind.
        case $PG_DIR in /dev/shm/*) echo "dynamic_shared_memory_type = mmap" ;; esac
    } >>"$PG_DATA/postgresql.conf"
    _try=0
    while :; do
        _try=$((_try + 1))
        PG_PORT=$(free_port)
        echo "port = $PG_PORT" >>"$PG_DATA/postgresql.conf"
        if _pg_launch; then
            break
        fi
        if [ $_try -ge 5 ]; then
            echo "pg_start: PostgreSQL did not start after $_try tries:" >&2
            cat "$PG_LOG" >&2
            return 1
        fi
        sleep 0.2
    done
    PG_DSN="host=127.0.0.1 port=$PG_PORT dbname=dsjob user=postgres connect_timeout=5"
    export PG_PORT PG_DSN PG_PID
    _pgq_open
    return 0
}

# _pg_launch: the postmaster started on PG_DATA as pg_ctl start -w would
# (in the background, not our child: a subshell's, which exits), without
# pg_ctl's own processes (a shell and a postgres -V before the start, a
# shell for it); true once postmaster.pid says "ready" (one rawpeer
# waits), false if the postmaster ended first or nothing moved for 120 s.
# Sets PG_PID.
_pg_nl='
'
_pg_launch() {
    _pm=$(
        if [ "$_pg_uid" != 0 ]; then
            "$PG_BIN/postgres" -D "$PG_DATA" </dev/null >>"$PG_LOG" 2>&1 &
        elif [ -n "$_pg_setpriv" ]; then
            setpriv --reuid=postgres --regid=postgres --clear-groups -- \
                "$PG_BIN/postgres" -D "$PG_DATA" </dev/null >>"$PG_LOG" 2>&1 &
        else
            runuser -u postgres -- "$PG_BIN/postgres" -D "$PG_DATA" </dev/null >>"$PG_LOG" 2>&1 &
        fi
        echo $!
    )
    "$RAWPEER" until-file "$PG_DATA/postmaster.pid" "${_pg_nl}ready" "$_pm" || return 1
    _pg_read_pid
    [ -n "$PG_PID" ]
}

# _pg_template_make: a stopped cluster in PG_DATA with database dsjob.
# initdb --no-sync does not fsync the files it writes (pg_start sets the
# test clusters' fsync off). The cluster is started once to make
# the database, on a unix socket in PG_DIR only (no TCP port to find),
# and stopped cleanly (a checkpoint), so that a copy needs no recovery.
_pg_template_make() {
    if ! _pg_as "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -A trust -E UTF8 --no-sync \
        --wal-segsize=1 >"$PG_DIR/initdb.log" 2>&1; then
        echo "pg_start: initdb failed:" >&2
        cat "$PG_DIR/initdb.log" >&2
        return 1
    fi
    if ! _pg_as "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_DIR/template.log" -w -t 60 \
        -o "-c listen_addresses= -k $PG_DIR -p 5432 -c min_wal_size=2MB -c wal_recycle=off" start >"$PG_DIR/pg_ctl.log" 2>&1; then
        echo "pg_start: PostgreSQL did not start to make database dsjob:" >&2
        cat "$PG_DIR/pg_ctl.log" "$PG_DIR/template.log" >&2
        return 1
    fi
    _pg_bad=0
    "$PG_BIN/psql" -X -q -h "$PG_DIR" -p 5432 -U postgres -d postgres \
        -c 'CREATE DATABASE dsjob' >"$PG_DIR/createdb.log" 2>&1 || _pg_bad=1
    # Tests connect to dsjob only, and make a database (CREATE DATABASE)
    # from template1.
    "$PG_BIN/psql" -X -q -h "$PG_DIR" -p 5432 -U postgres -d dsjob \
        -c 'DROP DATABASE postgres' -c 'ALTER DATABASE template0 IS_TEMPLATE false' \
        -c 'DROP DATABASE template0' >>"$PG_DIR/createdb.log" 2>&1 || _pg_bad=1
    _pg_as "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >>"$PG_DIR/pg_ctl.log" 2>&1 || _pg_bad=1
    if [ $_pg_bad -ne 0 ]; then
        echo "pg_start: CREATE DATABASE dsjob, or the stop after it, failed:" >&2
        cat "$PG_DIR/createdb.log" "$PG_DIR/pg_ctl.log" "$PG_DIR/template.log" >&2
        return 1
    fi
    rm -f "$PG_DATA/postmaster.opts"
    return 0
}

q() {
    # A session that ended before this statement (its psql gone or a
    # zombie: nothing of SQL reached it) hands q over to a psql a query.
    if [ -n "$_PGQ_PID" ] && [ ! -e "$TEST_TMPDIR/pgq.ended" ] && _pgd_gone "$_PGQ_PID"; then
        _pgq_ended
    fi
    if [ -z "$_PGQ_PID" ] || [ -e "$TEST_TMPDIR/pgq.ended" ]; then
        pg_psql -c "$1"
        return
    fi
    printf '\\set LAST_ERROR_SQLSTATE 00000\n%s\n;\n\\echo @@pgq@@ :LAST_ERROR_SQLSTATE :LAST_ERROR_MESSAGE\n' \
        "$1" >&8
    while IFS= read -r _pgq_l <&9; do
        case $_pgq_l in
        "@@pgq@@ 00000 "*) return 0 ;;
        "@@pgq@@ "*)
            echo "q: ${_pgq_l#@@pgq@@ }" >&2
            return 1
            ;;
        esac
        printf '%s\n' "$_pgq_l"
    done
    # The session ended after SQL went to it: it may have run SQL, in whole
    # or in part, before it ended (its connection lost in the middle or
    # after the commit), and a statement run again (an UPDATE, an INSERT)
    # would run twice. q refuses; the queries after it go through a psql
    # each.
    _pgq_ended
    echo "q: the psql session ended with this statement sent to it; not run again (it may have run): $1" >&2
    return 1
}

# _pgq_ended: q's session is over (its psql ended): the queries after it
# go through a psql each.
_pgq_ended() {
    : >"$TEST_TMPDIR/pgq.ended"
    echo "# q: the psql session ended: $(tr '\n' ' ' <"$TEST_TMPDIR/pgq.err" 2>/dev/null)" >&2
}

# _pgq_open: q's session, opened (again) in the test's shell (not in a
# subshell: a q in $(...) could not keep it) when PostgreSQL has started.
# Its input and output are FIFOs in the test's temp dir; fd 6, a reader of
# the input the test never reads, keeps a write to a session that ended
# from killing the shell with SIGPIPE.
_PGQ_PID=""
_pgq_open() {
    _pgq_close
    # No rm at the first open (a fresh temp dir): a process less a test.
    if [ -e "$TEST_TMPDIR/pgq.in" ] || [ -e "$TEST_TMPDIR/pgq.ended" ]; then
        rm -f "$TEST_TMPDIR/pgq.in" "$TEST_TMPDIR/pgq.out" "$TEST_TMPDIR/pgq.ended"
    fi
    mkfifo "$TEST_TMPDIR/pgq.in" "$TEST_TMPDIR/pgq.out" || return 0
    PGCONNECT_TIMEOUT=5 "$PG_BIN/psql" -X -q -A -t -h 127.0.0.1 -p "$PG_PORT" -U postgres \
        -d dsjob <"$TEST_TMPDIR/pgq.in" >"$TEST_TMPDIR/pgq.out" 2>"$TEST_TMPDIR/pgq.err" &
    _PGQ_PID=$!
    exec 8>"$TEST_TMPDIR/pgq.in" 9<"$TEST_TMPDIR/pgq.out" 6<"$TEST_TMPDIR/pgq.in"
}

# _pgq_close: q's session ended (its psql killed by pid, and reaped).
_pgq_close() {
    [ -n "$_PGQ_PID" ] || return 0
    exec 8>&- 9<&- 6<&-
    kill "$_PGQ_PID" 2>/dev/null
    wait "$_PGQ_PID" 2>/dev/null
    _PGQ_PID=""
}

pg_psql() {
    PGCONNECT_TIMEOUT=5 "$PG_BIN/psql" -X -q -A -t -v ON_ERROR_STOP=1 \
        -h 127.0.0.1 -p "$PG_PORT" -U postgres -d dsjob "$@"
}

pg_restart_immediate() {
    _pg_cpu_note
    _pgq_close
    _pg_as "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -m immediate -w -t 60 restart \
        >>"$PG_DIR/pg_ctl.log" 2>&1 || return 1
    _pg_read_pid
    _pgq_open
}

pg_stop_immediate() {
    _pg_cpu_note
    _pgq_close
    _pg_as "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate -w -t 60 stop \
        >>"$PG_DIR/pg_ctl.log" 2>&1 || return 1
    PG_PID=""
}

pg_start_again() {
    _pg_as "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t 60 start \
        >>"$PG_DIR/pg_ctl.log" 2>&1 || return 1
    _pg_read_pid
    _pgq_open
}

pg_stop() {
    _pg_signal INT
}

# _pg_signal SIG: SIG to PG_PID and wait for it to go, SIGQUIT after 20 s
# (for INT), SIGKILL after 30 s. Gone is a zombie too: the postmaster is
# not our child, and whoever reaps it (a container's init) may take a
# second or more, long after it closed its files and ports.
_pg_signal() {
    [ -n "$PG_PID" ] || return 0
    _pg_cpu_note
    _pgq_close
    kill -"$1" "$PG_PID" 2>/dev/null
    if ! _pg_await_gone "$PG_PID" 20; then
        kill -QUIT "$PG_PID" 2>/dev/null
        _pg_await_gone "$PG_PID" 10 || kill -KILL "$PG_PID" 2>/dev/null
    fi
    PG_PID=""
}

# _pg_await_gone PID SECONDS: true once process PID is gone or a zombie,
# false if it is still there after SECONDS. The wait is one rawpeer
# (until-file of a file that never comes, given PID: it ends when PID
# goes), not a sleep and a look per try.
_pg_await_gone() {
    _pgd_gone "$1" && return 0
    RAWPEER_UNTIL_S=$2 "$RAWPEER" until-file "$TEST_TMPDIR/.never" "" "$1" 2>/dev/null
    _pgd_gone "$1"
}

# _pg_cpu_note: with PG_CPUTIME_FILE set (a measurement, as tests/cputime.sh
# makes of the test: the postmaster is pg_ctl's child, not the test's, so
# its CPU is not in the test's), appends "SECONDS TEST" to it: the CPU
# (user + system) of the postmaster, of its children that ended (backends,
# reaped by it) and of those still running (its auxiliary processes).
_pg_cpu_note() {
    [ -n "${PG_CPUTIME_FILE:-}" ] && [ -n "$PG_PID" ] || return 0
    cat /proc/[0-9]*/stat 2>/dev/null | sed 's/^\([0-9]*\) (.*) /\1 /' |
        awk -v pm="$PG_PID" -v t="$(basename "$0")" -v hz="$(getconf CLK_TCK)" '
            $1 == pm { s += $13 + $14 + $15 + $16 }
            $3 == pm { s += $13 + $14 }
            END { printf "%.2f %s\n", s / hz, t }' >>"$PG_CPUTIME_FILE"
}

# The cluster is removed next: an immediate shutdown (SIGQUIT), without the
# shutdown checkpoint's writes and fsyncs a fast one makes.
pg_cleanup() {
    _pg_signal QUIT
    if [ -n "$PG_DIR" ]; then
        rm -rf "$PG_DIR"
        PG_DIR=""
    fi
}

pg_skip_unless_store() {
    # No --pg-dsn (an older dsjobd would stop at an unknown option first);
    # libpq's defaults from the environment point where nothing listens.
    # The answer (one line) is kept in the build tree beside the cluster
    # template, for the tests after the first as long as dsjobd is older.
    _ans=${top_builddir:-.}/tests/pg-template-dsjobd-answer
    if [ -s "$_ans" ] && [ "$_ans" -nt "$DSJOBD" ] &&
        read -r _out <"$_ans"; then
        :
    else
        _out=$(PGHOST=127.0.0.1 PGPORT=1 PGCONNECT_TIMEOUT=1 timeout -k 2 3 \
            "$DSJOBD" -L 127.0.0.1 -p 0 -l stderr --store postgres 2>&1 | head -5 | tr '\n' ' ')
        printf '%s\n' "$_out" >"$_ans.$$" 2>/dev/null && mv -f "$_ans.$$" "$_ans" 2>/dev/null
    fi
    echo "# dsjobd --store postgres (libpq's defaults pointing nowhere) said: $_out"
    case $_out in
    *"unknown store 'postgres'"* | *"store 'postgres' was not built"*)
        echo "1..0 # SKIP dsjobd has no postgres store: $_out"
        exit 0
        ;;
    esac
}

_pgd_names=""
_pgd_unwaited=""

pgd_port() { eval "echo \"\$PGD_PORT_$1\""; }
pgd_pid() { eval "echo \"\$PGD_PID_$1\""; }
pgd_log() { eval "echo \"\$PGD_LOG_$1\""; }

pgd_launch() {
    _n=$1
    shift
    _pgd_seq=$((${_pgd_seq:-0} + 1))
    _log="$TEST_TMPDIR/dsjobd-$_n.$_pgd_seq.log"
    "$DSJOBD" -L 127.0.0.1 -p 0 --port-file "$_log.port" -l "$_log" \
        --store postgres --pg-dsn "$PG_DSN" "$@" 2>>"$_log.stderr" &
    eval "PGD_PID_$_n=$! PGD_LOG_$_n=\$_log PGD_PORT_$_n="
    _pgd_names="$_pgd_names $_n"
    _pgd_unwaited="$_pgd_unwaited $_n"
}

pgd_wait() {
    _n=$1
    _w_left=""
    for _w in $_pgd_unwaited; do
        [ "$_w" = "$_n" ] || _w_left="$_w_left $_w"
    done
    _pgd_unwaited=$_w_left
    eval "_pid=\$PGD_PID_$_n _log=\$PGD_LOG_$_n"
    _pf=$_log.port
    # One rawpeer waits (until the file is not empty, or dsjobd is gone, or
    # nothing moved for 120 s), not a sleep and a look per try.
    "$RAWPEER" until-file "$_pf" "" "$_pid" 2>/dev/null
    if [ ! -s "$_pf" ]; then
        # On stdout, as TAP comments: the test's log (and CI's tail of it)
        # then says why, next to the check that failed.
        echo "# pgd_start $_n: dsjobd did not write its port file; the end of its log and stderr:"
        tail -n 20 "$_log" "$_log.stderr" 2>&1 | sed 's/^/#   /'
        return 1
    fi
    read -r _port <"$_pf"
    eval "PGD_PORT_$_n=\$_port"
    return 0
}

pgd_start() {
    pgd_launch "$@"
    pgd_wait "$1"
}

pgd_start_or_bail() {
    pgd_start "$@" || {
        echo "Bail out! dsjobd $1 did not start"
        exit 1
    }
}

# pgd_start_all_or_bail "NAME..." [ARG...]: a dsjobd under each NAME, all
# launched at once (they race to make the schema, as a cluster's servers
# do), then waited for; "Bail out!" and exit 1 when one does not start.
pgd_start_all_or_bail() {
    _sa_names=$1
    shift
    for _sa in $_sa_names; do
        pgd_launch "$_sa" "$@"
    done
    pgd_wait_all_or_bail
}

# pgd_wait_all_or_bail: pgd_wait for every dsjobd launched (pgd_launch) and
# not waited for yet, e.g. several with arguments of their own launched one
# after the other; "Bail out!" and exit 1 when one does not start.
pgd_wait_all_or_bail() {
    for _sa in $_pgd_unwaited; do
        pgd_wait "$_sa" || {
            echo "Bail out! dsjobd $_sa did not start"
            exit 1
        }
    done
}

# pg_test_start [NAMES [ARG...]]: a test's usual first steps: pg_test_begin,
# pg_start_or_bail and, given NAMES, pgd_start_all_or_bail NAMES ARG...
pg_test_start() {
    pg_test_begin
    pg_start_or_bail
    [ $# -eq 0 ] || pgd_start_all_or_bail "$@"
}

# pgd_stop_idle NAME OWNER: SIGSTOP to dsjobd NAME at a moment when its
# writer's backend (pgd_writer_pid OWNER) is idle: stopped inside a
# transaction, the backend would keep the rows it locked from the other
# servers. Stopped, looked at and continued until it is (50 tries at most).
# Sets PGD_IDLE_TRIES and PGD_IDLE_STATE (the backend's state at the stop,
# empty without one). pgd_stop sends SIGCONT first.
pgd_stop_idle() {
    _si_pid=$(pgd_pid "$1")
    _si_pg=$(pgd_writer_pid "$2")
    PGD_IDLE_TRIES=0
    while :; do
        kill -STOP "$_si_pid"
        sleep 0.1
        PGD_IDLE_STATE=$(q "SELECT state FROM pg_stat_activity WHERE pid = '${_si_pg:-0}'")
        PGD_IDLE_TRIES=$((PGD_IDLE_TRIES + 1))
        [ "$PGD_IDLE_STATE" = idle ] || [ -z "$_si_pg" ] || [ $PGD_IDLE_TRIES -ge 50 ] && break
        kill -CONT "$_si_pid"
        sleep 0.05
    done
}

# _pgd_gone PID: the process is gone or a zombie.
_pgd_gone() {
    # The state after the command's name in /proc/PID/stat, read by the
    # shell itself (a sed a try cost as much as the sleep between tries).
    [ -e "/proc/$1" ] || return 0
    read -r _g_st 2>/dev/null <"/proc/$1/stat" || return 0
    _g_st=${_g_st##*) }
    [ "${_g_st%% *}" = Z ]
}

pgd_stop() {
    _pid=$(pgd_pid "$1")
    [ -n "$_pid" ] || return 0
    kill -CONT "$_pid" 2>/dev/null
    kill -TERM "$_pid" 2>/dev/null
    _rc=0
    if ! _pg_await_gone "$_pid" 15; then
        echo "# dsjobd $1 (pid $_pid) did not stop within 15 s of SIGTERM: SIGKILL" >&2
        kill -KILL "$_pid" 2>/dev/null
        _rc=1
    fi
    # Its exit status: a clean stop is 0; a sanitizer's report at exit
    # (LeakSanitizer under ./configure --enable-asan) is not, and says why.
    wait "$_pid" 2>/dev/null
    _st=$?
    if [ $_rc -eq 0 ] && [ $_st -ne 0 ]; then
        echo "# dsjobd $1 (pid $_pid) exited with status $_st; the end of its stderr:" >&2
        tail -n 40 "$(pgd_log "$1").stderr" 2>/dev/null | sed 's/^/#   /' >&2
        _rc=$_st
    fi
    eval "PGD_PID_$1="
    return $_rc
}

pgd_kill9() {
    _pid=$(pgd_pid "$1")
    [ -n "$_pid" ] || return 0
    kill -KILL "$_pid" 2>/dev/null
    wait "$_pid" 2>/dev/null
    eval "PGD_PID_$1="
}

pgd_stop_all() {
    for _n in $_pgd_names; do
        pgd_stop "$_n"
    done
}

# pg_test_begin: a postgres test's first steps: a
# skip (1..0) when tools/dsjob is not built, when there is no PostgreSQL or when
# dsjobd has no postgres store, and no DSJOB_SERVERS or DSJOB_PROGRESS from
# the caller's environment.
pg_test_begin() {
    [ -x "$DSJOB" ] || {
        echo "1..0 # SKIP tools/dsjob not built"
        exit 0
    }
    pg_skip_unless_found
    pg_skip_unless_store
    unset DSJOB_SERVERS DSJOB_PROGRESS
}

# pg_start_or_bail: pg_start, or "Bail out!" and exit 1; says which
# PostgreSQL runs where.
pg_start_or_bail() {
    pg_start || {
        echo "Bail out! PostgreSQL did not start"
        exit 1
    }
    diag "PostgreSQL $PG_VERSION on 127.0.0.1:$PG_PORT, pid $PG_PID ($PG_BIN)"
}

# pgd_writer_pid OWNER: the PostgreSQL backend of that dsjobd start's
# writer connection (the one holding its start's advisory lock, LIVE_LOCK
# 0x64736a31 and the start's number); empty once it is gone.
pgd_writer_pid() {
    q "SELECT l.pid FROM pg_locks l JOIN dsjob.servers s
        ON l.objid::int8 = s.boot % 2147483647 WHERE l.locktype = 'advisory'
        AND l.classid = 1685285425::oid AND l.objsubid = 2 AND s.owner = '$1'"
}

# Gates, for a test that holds a statement of dsjobd's at a point of its
# own (a trigger of the test's that waits for advisory lock N): a psql
# session of the test holds the lock, fed through file descriptor FD (not
# 6, 8 or 9: q's session has them), until
# gate_open; its processes are tracked (track, tests/interop/lib.sh).
# gate_is N t|f: lock N is held (t) or waited for (f).
gate_is() {
    [ "$(q "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND granted = '$2'")" = 1 ]
}
# gate_hold N FD: the session takes lock N; true once it holds it.
gate_hold() {
    mkfifo "$T/gate$1.in"
    pg_psql -f - <"$T/gate$1.in" >"$T/gate$1.out" 2>&1 &
    track $!
    eval "exec $2>\"\$T/gate$1.in\""
    echo "SELECT pg_advisory_lock($1);" >&"$2"
    poll_s 120 gate_is "$1" t
}
# gate_open N FD: the session lets lock N go; what waited at it goes on.
gate_open() {
    echo "SELECT pg_advisory_unlock($1);" >&"$2"
    eval "exec $2>&-"
}

pgd_registered() {
    "$DSJOB" -s "127.0.0.1:$(pgd_port "$1")" -t 20000 status --format tsv 2>/dev/null |
        awk -F '\t' -v f="$2" -v n="${3:-1}" '$1 == f && $NF >= n { x = 1 } END { exit !x }'
}

poll_s() {
    # Every wait here is for something that will happen: at least a minute
    # before giving up, however short the caller's figure, so that a loaded
    # machine (CI's is shared) is slow, not failing. A pass costs no more.
    # The minute is one of pauses between tries (_ps_cs, counted by
    # _poll_s_sleep, not read off the clock with a date a try): the wait
    # is as long or longer.
    _ps=$1
    [ "$_ps" -ge "${POLL_S_MIN:-60}" ] || _ps=${POLL_S_MIN:-60}
    shift
    _ps_i=0 _ps_cs=0
    while ! "$@"; do
        [ $_ps_cs -lt $((_ps * 100)) ] || return 1
        _poll_s_sleep
    done
}

# _poll_s_sleep: the pause between two tries of poll_s and poll_moving,
# counted in _ps_i and, in hundredths of a second, in _ps_cs (the caller
# zeroes both): POLL_S_SLEEP if set, else 0.1 s for the first second,
# 0.25 s for the next five, then 0.5 s. A wait of seconds (a lease, a
# commit interval) then costs a try every 0.25 s, and one of tens of
# seconds (a loaded machine) a try every 0.5 s: each try runs a sleep and
# dsjob, a query or gearadmin, and their CPU is what slows the suite on a
# shared machine (where a wait is seconds, and tries at 0.05 s were half
# of a test's processes).
_poll_s_sleep() {
    _ps_i=$((_ps_i + 1))
    if [ -n "${POLL_S_SLEEP:-}" ]; then
        case $POLL_S_SLEEP in
        *.*) _ps_w=${POLL_S_SLEEP%%.*} _ps_f=${POLL_S_SLEEP#*.}00 ;;
        *) _ps_w=$POLL_S_SLEEP _ps_f=00 ;;
        esac
        _ps_f=${_ps_f%"${_ps_f#??}"}
        _ps_cs=$((_ps_cs + ${_ps_w:-0} * 100 + 1$_ps_f - 100))
        sleep "$POLL_S_SLEEP"
    elif [ $_ps_i -le 10 ]; then
        _ps_cs=$((_ps_cs + 10))
        sleep 0.1
    elif [ $_ps_i -le 30 ]; then
        _ps_cs=$((_ps_cs + 25))
        sleep 0.25
    else
        _ps_cs=$((_ps_cs + 50))
        sleep 0.5
    fi
}

# poll_moving QUIET PROBE COND...: like poll_s, but gives up only once COND
# has not held and the output of PROBE (a command line, run with eval) has not
# changed for QUIET seconds (of pauses between tries, as poll_s counts
# them): work still moving on a loaded machine is slow, not lost, and a
# wait for it is bounded by progress, not by the clock.
poll_moving() {
    _pm_quiet=$1 _pm_probe=$2
    shift 2
    # COND first: once it holds, no probe (its processes) is run at all.
    "$@" && return 0
    _pm_last=$(eval "$_pm_probe")
    _ps_i=0 _ps_cs=0 _pm_since=0
    while :; do
        [ $((_ps_cs - _pm_since)) -lt $((_pm_quiet * 100)) ] || return 1
        _poll_s_sleep
        "$@" && return 0
        _pm_now=$(eval "$_pm_probe")
        if [ "$_pm_now" != "$_pm_last" ]; then
            _pm_last=$_pm_now _pm_since=$_ps_cs
        fi
    done
}

pgd_stat() {
    "$DSJOB" -s "127.0.0.1:$(pgd_port "$1")" -t 10000 stats --format tsv 2>/dev/null |
        awk -F '\t' -v n="$2" '$1 == n { print $2 }'
}

# pg_proxy_start: tests/integ/pg_gear.py's TCP proxy in front of the
# test's PostgreSQL, steered by files in $PG_PROXY_CTL (freeze, thaw, cut:
# see pg_gear.py); sets PG_PROXY_CTL, PG_PROXY_PID and PG_PROXY_PORT (the
# EXIT trap stops it). Bails out if it did not start. Needs $PYTHON.
PG_PROXY_PID=""
pg_proxy_start() {
    PG_PROXY_CTL=$TEST_TMPDIR/ctl
    mkdir "$PG_PROXY_CTL" || exit 1
    "$PYTHON" "$top_srcdir/tests/integ/pg_gear.py" proxy "$TEST_TMPDIR/proxy.port" "$PG_PORT" \
        "$PG_PROXY_CTL" &
    PG_PROXY_PID=$!
    poll_s 20 test -s "$TEST_TMPDIR/proxy.port" || {
        echo "Bail out! the proxy did not start"
        exit 1
    }
    read -r PG_PROXY_PORT <"$TEST_TMPDIR/proxy.port"
}

# The EXIT trap: the test's own pg_test_cleanup if it defines one (say, to
# SIGCONT a server it stopped), the proxy, the test's processes (they hold connections to
# PostgreSQL), then PostgreSQL, then the test's temp dir.
_pg_exit() {
    if command -v pg_test_cleanup >/dev/null 2>&1; then
        pg_test_cleanup
    fi
    [ -z "$PG_PROXY_PID" ] || kill "$PG_PROXY_PID" 2>/dev/null
    pgd_stop_all
    if command -v interop_cleanup >/dev/null 2>&1; then
        interop_cleanup
    else
        server_stop_all
        rm -rf "$TEST_TMPDIR"
    fi
    pg_cleanup
}
trap _pg_exit EXIT
