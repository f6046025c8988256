/*
 * rawpeer: one request to a job server on 127.0.0.1, for the shell tests'
 * gpacket (tests/interop/lib.sh) and admin helpers. It is what their
 * `timeout 20 perl -MSocket -e ...` one-liners did, in a process that
 * starts in a tenth of the time: the suite runs them hundreds of times.
 *
 *   rawpeer PORT packet TYPE [ARG...]
 *       sends one binary request of TYPE with the ARGs joined by NULs and
 *       prints the first answer as "TYPE ARG|ARG|..." (NULs shown as |).
 *   rawpeer PORT admin LINE
 *       sends the text LINE and prints the reply with "\r\n" ends as "\n":
 *       up to its "." line, or its one OK or ERR line unless LINE is a
 *       "show dead" or "show jobs" listing; after the OK line of a
 *       "show result", the result's bytes and the newline after them.
 *
 *   rawpeer PORT http METHOD TARGET [FILLER-BYTES]
 *       one HTTP/1.1 request (what t_http.sh sent with a perl script, with
 *       HTTP_HOST, HTTP_HEADER, HTTP_BODY and HTTP_HEAD_FILE); reads the
 *       answer until the server closes or 20 s have passed, then prints the
 *       status code, the Content-Type (empty if none) and the body, each
 *       from a line of its own; exit 1 without a status line. With
 *       HTTP_PRINT=code only the status code's line, with HTTP_PRINT=body
 *       only the body (integ.sh's code and body: no head or tail after it).
 *   rawpeer PORT listening
 *       waits until something accepts on the port: a try every 0.05 s,
 *       1200 tries (a minute and more); exit 0 once it does, else 1.
 *   rawpeer free-port
 *       prints a port that was free a moment ago (bound as port 0).
 *   rawpeer PORT packets TYPE [ARG...] [-- TYPE [ARG...]]...
 *       as packet, for each request in turn on one connection (each
 *       answered before the next goes), a line per answer.
 *   rawpeer PORT until-admin LINE WANT
 *   rawpeer PORT until-packet WANT TYPE [ARG...]
 *       a shell poll in one process: asks as admin or packet does, again
 *       and again (every 25 ms for a second, then every 100 ms), until a
 *       line of the answer is WANT (where a '*' stands for any
 *       characters: "FUNC\t*" or "* : FUNC"), at most 120 s (or
 *       $RAWPEER_UNTIL_S); exit 0 once it is, else 1 (and the last answer
 *       on stderr). A try that cannot connect is tried again; a server
 *       that closes in the middle of an answer ends it (exit 3).
 *   rawpeer until-file FILE [TEXT [PID]]
 *       the same for a file: until FILE holds TEXT (an empty TEXT: until
 *       it is not empty; no TEXT: until it exists); exit 1 also as soon
 *       as process PID is gone (or a zombie), after a last look at FILE.
 *   rawpeer until-lines FILE N [-E REGEX | -x LINE] [-d] [-p PID]
 *       until FILE has N whole lines (ended by a newline), or with -E
 *       N lines matching the POSIX extended REGEX, with -x N lines equal
 *       to LINE; -d counts each different line once; -p PID as above.
 *       It reads only what was appended since its last look, and fails
 *       at once when FILE shrank (was truncated under it).
 *       The bound of the two file waits is 120 s (or $RAWPEER_UNTIL_S)
 *       in which FILE did not change (nothing moved): it restarts each
 *       time FILE grew. They are server.sh's await_file and await_lines
 *       and integ.sh's wait_lines and wait_line.
 *   rawpeer PORT job [-e] FUNCTION DATA
 *       the packets one foreground job gets, for t_dsjob.sh (the
 *       libraries and the gearman CLI merge or hide them): SUBMIT_JOB of FUNCTION with DATA
 *       (after OPTION_REQ "exceptions" with -e), then a line a packet
 *       until the job ends: DATA BYTES | WARNING BYTES | STATUS N/D |
 *       COMPLETE BYTES | FAIL BYTES | EXCEPTION BYTES | ERROR CODE TEXT,
 *       where BYTES is what follows the handle (FAIL's is empty unless
 *       the server added something), a newline shown as \n, a NUL as \0,
 *       a backslash as \\. JOB_CREATED and OPTION_RES are not shown.
 *       Exit 1 after ERROR.
 *   rawpeer PORT batchpipe ID N FUNCTION
 *       on one connection, in one write: OPTION_REQ batch=ID and N
 *       SUBMIT_JOB_BG of FUNCTION (payloads 1..N); at once after it, on a
 *       second connection, "batch close ID". Then reads every answer and
 *       prints "created C refused R" and the close's reply line.
 *
 * Exit status of packet and admin: 0 answered, 2 no connection, 3 the
 * answer was cut short, 124 no answer within 20 s (timeout(1)'s status,
 * as it bounded the perl).
 */
#include "config.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <regex.h>
#include <signal.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RAWPEER_BOUND_S 20

static void
loopback(struct sockaddr_in *a, const char *port)
{
    memset(a, 0, sizeof(*a));
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)atoi(port));
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

static int
connect_port(const char *port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    loopback(&a, port);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        exit(2);
    return fd;
}

static void
send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);

        if (w <= 0)
            exit(3);
        p += w;
        n -= (size_t)w;
    }
}

static void
read_all(int fd, char *p, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, p, n);

        if (r <= 0)
            exit(3);
        p += r;
        n -= (size_t)r;
    }
}

static uint32_t
get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void
put32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
}

static int do_packet(int fd, int argc, char **argv, FILE *out);

/* Each "--"-separated request of argv, on fd, one after the other. */
static int
do_packets(int fd, int argc, char **argv)
{
    int i, from = 0, rc;

    for (i = 0; i <= argc; i++) {
        if (i < argc && strcmp(argv[i], "--") != 0)
            continue;
        if (i > from && (rc = do_packet(fd, i - from, argv + from, stdout)) != 0)
            return rc;
        from = i + 1;
    }
    return 0;
}

static int
do_packet(int fd, int argc, char **argv, FILE *out)
{
    size_t len = 0, off = 12, i;
    unsigned char h[12];
    char *req, *d;
    uint32_t n;
    int k;

    for (k = 1; k < argc; k++)
        len += strlen(argv[k]) + (k > 1);
    req = malloc(12 + len + 1);
    if (req == NULL)
        return 3;
    memcpy(req, "\0REQ", 4);
    put32(req + 4, (uint32_t)strtoul(argv[0], NULL, 10));
    put32(req + 8, (uint32_t)len);
    for (k = 1; k < argc; k++) {
        if (k > 1)
            req[off++] = '\0';
        memcpy(req + off, argv[k], strlen(argv[k]));
        off += strlen(argv[k]);
    }
    send_all(fd, req, off);
    free(req);
    read_all(fd, (char *)h, sizeof(h));
    n = get32(h + 8);
    d = malloc((size_t)n + 1);
    if (d == NULL)
        return 3;
    read_all(fd, d, n);
    for (i = 0; i < n; i++)
        if (d[i] == '\0')
            d[i] = '|';
    fprintf(out, "%lu ", (unsigned long)get32(h + 4));
    fwrite(d, 1, n, out);
    putc('\n', out);
    free(d);
    return 0;
}

/* One request of type with its args joined by NULs. */
static void
send_packet(int fd, uint32_t type, int nargs, char **args)
{
    size_t len = 0, off = 12;
    char *req;
    int k;

    for (k = 0; k < nargs; k++)
        len += strlen(args[k]) + (k > 0);
    if ((req = malloc(12 + len)) == NULL)
        exit(3);
    memcpy(req, "\0REQ", 4);
    put32(req + 4, type);
    put32(req + 8, (uint32_t)len);
    for (k = 0; k < nargs; k++) {
        if (k > 0)
            req[off++] = '\0';
        memcpy(req + off, args[k], strlen(args[k]));
        off += strlen(args[k]);
    }
    send_all(fd, req, off);
    free(req);
}

/* A packet's bytes as the job line shows them: \n, \0 and \\ escaped. */
static void
show(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\\')
            fputs("\\\\", stdout);
        else if (p[i] == '\n')
            fputs("\\n", stdout);
        else if (p[i] == '\0')
            fputs("\\0", stdout);
        else
            putchar(p[i]);
    }
}

static int
do_job(int fd, int exceptions, const char *func, const char *data)
{
    char *submit[] = {(char *)func, "", (char *)data}, *exc[] = {"exceptions"};
    char *handle = NULL;
    size_t hl = 0;

    if (exceptions)
        send_packet(fd, 26, 1, exc); /* OPTION_REQ */
    send_packet(fd, 7, 3, submit);   /* SUBMIT_JOB */
    for (;;) {
        unsigned char h[12];
        uint32_t type, n;
        char *d, *rest;
        size_t rl;
        const char *name = NULL;

        read_all(fd, (char *)h, sizeof(h));
        type = get32(h + 4);
        n = get32(h + 8);
        d = malloc((size_t)n + 1);
        if (d == NULL) {
            free(handle);
            return 3;
        }
        read_all(fd, d, n);
        d[n] = '\0';
        if (type == 8 && handle == NULL) { /* JOB_CREATED */
            handle = d;
            hl = n;
            continue;
        }
        if (type == 19) { /* ERROR */
            fputs("ERROR ", stdout);
            show(d, n);
            putchar('\n');
            free(d);
            free(handle);
            return 1;
        }
        switch (type) {
        case 12: name = "STATUS"; break;
        case 13: name = "COMPLETE"; break;
        case 14: name = "FAIL"; break;
        case 25: name = "EXCEPTION"; break;
        case 28: name = "DATA"; break;
        case 29: name = "WARNING"; break;
        }
        if (name == NULL || handle == NULL || n < hl || memcmp(d, handle, hl) != 0) {
            free(d);
            continue;
        }
        rest = d + hl;
        rl = n - hl;
        if (type != 14 && rl > 0 && rest[0] == '\0') { /* the separator; FAIL has none */
            rest++;
            rl--;
        }
        printf("%s ", name);
        if (type == 12) { /* N\0D as N/D */
            char *z = memchr(rest, '\0', rl);

            if (z != NULL)
                *z = '/';
            fwrite(rest, 1, rl, stdout);
        } else
            show(rest, rl);
        putchar('\n');
        free(d);
        if (type == 13 || type == 14 || type == 25)
            break;
    }
    free(handle);
    return 0;
}

static int
do_admin(int fd, const char *line, FILE *out)
{
    int listing = strncmp(line, "show dead", 9) == 0 || strncmp(line, "show jobs", 9) == 0;
    int result = strncmp(line, "show result", 11) == 0;
    char *l = NULL;
    size_t cap = 0;
    ssize_t n;
    FILE *in;

    send_all(fd, line, strlen(line));
    send_all(fd, "\n", 1);
    in = fdopen(fd, "r");
    if (in == NULL)
        return 3;
    while ((n = getline(&l, &cap, in)) > 0) {
        unsigned long size, i;
        char st[64];
        int used = -1;

        if (result && sscanf(l, "OK %63s %lu %*u %*u %*u%n", st, &size, &used) == 2 && used > 0 &&
            strcmp(l + used, "\n") == 0) {
            /* The result's bytes and the newline after them. */
            fputs(l, out);
            for (i = 0; i < size + 1; i++) {
                int c = getc(in);

                if (c == EOF)
                    break;
                putc(c, out);
            }
            break;
        }
        if (n >= 2 && l[n - 2] == '\r' && l[n - 1] == '\n') {
            l[n - 2] = '\n';
            l[n - 1] = '\0';
        }
        fputs(l, out);
        if (strcmp(l, ".\n") == 0 ||
            ((strncmp(l, "OK", 2) == 0 || strncmp(l, "ERR", 3) == 0) && !listing))
            break;
    }
    free(l);
    fclose(in);
    return 0;
}

static void
on_alarm(int sig)
{
    (void)sig;
    _exit(124);
}

static volatile sig_atomic_t http_late;

static void
on_http_alarm(int sig)
{
    (void)sig;
    http_late = 1;
}

static void
append(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *buf = realloc(*buf, *cap);
        if (*buf == NULL)
            exit(3);
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
}

static int
do_http(int fd, const char *method, const char *target, const char *filler)
{
    const char *host = getenv("HTTP_HOST"), *hdr = getenv("HTTP_HEADER");
    const char *body = getenv("HTTP_BODY"), *head_file = getenv("HTTP_HEAD_FILE");
    const char *only = getenv("HTTP_PRINT");
    char *req = NULL, *resp = NULL, *end, *type = NULL, *l, num[40], in[65536];
    size_t rlen = 0, rcap = 0, len = 0, cap = 0, i, extra = filler ? strtoul(filler, NULL, 10) : 0;
    struct sigaction sa;
    ssize_t n;

    append(&req, &rlen, &rcap, method, strlen(method));
    append(&req, &rlen, &rcap, " ", 1);
    append(&req, &rlen, &rcap, target, strlen(target));
    append(&req, &rlen, &rcap, " HTTP/1.1\r\nHost: ", 17);
    host = host ? host : "127.0.0.1";
    append(&req, &rlen, &rcap, host, strlen(host));
    append(&req, &rlen, &rcap, "\r\nConnection: close\r\n", 21);
    if (extra > 0) {
        append(&req, &rlen, &rcap, "X-Filler: ", 10);
        for (i = 0; i < extra; i++)
            append(&req, &rlen, &rcap, "a", 1);
        append(&req, &rlen, &rcap, "\r\n", 2);
    }
    if (hdr != NULL && *hdr != '\0') {
        append(&req, &rlen, &rcap, hdr, strlen(hdr));
        append(&req, &rlen, &rcap, "\r\n", 2);
    }
    if (body != NULL) {
        snprintf(num, sizeof(num), "%zu", strlen(body));
        append(&req, &rlen, &rcap, "Content-Length: ", 16);
        append(&req, &rlen, &rcap, num, strlen(num));
        append(&req, &rlen, &rcap, "\r\n\r\n", 4);
        append(&req, &rlen, &rcap, body, strlen(body));
    } else {
        if (strcmp(method, "POST") == 0)
            append(&req, &rlen, &rcap, "Content-Length: 0\r\n", 19);
        append(&req, &rlen, &rcap, "\r\n", 2);
    }
    send_all(fd, req, rlen);
    free(req);

    /* Read until the close, or what came within 20 s (no SA_RESTART). */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_http_alarm;
    sigaction(SIGALRM, &sa, NULL);
    alarm(RAWPEER_BOUND_S);
    append(&resp, &len, &cap, "", 0);
    while (!http_late && (n = read(fd, in, sizeof(in))) > 0)
        append(&resp, &len, &cap, in, (size_t)n);
    alarm(0);

    end = strstr(resp, "\r\n\r\n");
    if (end != NULL)
        *end = '\0';
    if (strncmp(resp, "HTTP/1.", 7) != 0 || (resp[7] != '0' && resp[7] != '1') || resp[8] != ' ' ||
        strspn(resp + 9, "0123456789") < 3) {
        free(resp);
        return 1;
    }
    if (head_file != NULL && *head_file != '\0') {
        FILE *f = fopen(head_file, "w");

        if (f == NULL) {
            free(resp);
            return 3;
        }
        fprintf(f, "%s\n", resp);
        fclose(f);
    }
    /* The first Content-Type header line, any case. */
    for (l = resp; type == NULL && l != NULL; l = strchr(l, '\n')) {
        l += *l == '\n';
        if (strncasecmp(l, "Content-Type:", 13) == 0)
            type = l + 13 + strspn(l + 13, " \t");
    }
    if (only == NULL || strcmp(only, "body") != 0)
        printf("%.3s\n", resp + 9);
    if (only != NULL && *only != '\0') {
        if (strcmp(only, "body") == 0 && end != NULL)
            fwrite(end + 4, 1, len - (size_t)(end + 4 - resp), stdout);
        free(resp);
        return 0;
    }
    if (type != NULL)
        fwrite(type, 1, strcspn(type, "\r\n"), stdout);
    putchar('\n');
    if (end != NULL)
        fwrite(end + 4, 1, len - (size_t)(end + 4 - resp), stdout);
    free(resp);
    return 0;
}

static int
do_listening(const char *port)
{
    struct timespec pause = {0, 50 * 1000 * 1000};
    struct sockaddr_in a;
    int i;

    loopback(&a, port);
    for (i = 0; i < 1200; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);

        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
            close(fd);
            return 0;
        }
        if (fd >= 0)
            close(fd);
        nanosleep(&pause, NULL);
    }
    return 1;
}

static int
do_free_port(void)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);

    loopback(&a, "0");
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 1) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return 1;
    printf("%u\n", (unsigned)ntohs(a.sin_port));
    return 0;
}

/* One packet of type with its len bytes of arguments, appended to buf at *off. */
static void
put_packet(char *buf, size_t *off, uint32_t type, const char *args, size_t len)
{
    memcpy(buf + *off, "\0REQ", 4);
    put32(buf + *off + 4, type);
    put32(buf + *off + 8, (uint32_t)len);
    memcpy(buf + *off + 12, args, len);
    *off += 12 + len;
}

static int
do_batchpipe(const char *port, const char *id, unsigned n, const char *func)
{
    size_t cap = 64 + strlen(id) + (size_t)n * (40 + strlen(func)), off = 0;
    char *buf = malloc(cap), opt[200], args[300], *l = NULL;
    int a = connect_port(port), b = connect_port(port);
    unsigned i, created = 0, refused = 0;
    size_t lcap = 0;
    FILE *in;

    if (buf == NULL)
        return 3;
    snprintf(opt, sizeof(opt), "batch=%s", id);
    put_packet(buf, &off, 26, opt, strlen(opt)); /* OPTION_REQ */
    for (i = 1; i <= n; i++) {
        /* function, an empty unique key, the payload */
        int len = snprintf(args, sizeof(args), "%s%c%c%u", func, '\0', '\0', i);

        put_packet(buf, &off, 18, args, (size_t)len); /* SUBMIT_JOB_BG */
    }
    send_all(a, buf, off);
    snprintf(args, sizeof(args), "batch close %s\n", id);
    send_all(b, args, strlen(args));
    for (i = 0; i <= n; i++) {
        unsigned char h[12];
        uint32_t len;
        char *d;

        read_all(a, (char *)h, sizeof(h));
        len = get32(h + 8);
        d = malloc((size_t)len + 1);
        if (d == NULL)
            return 3;
        read_all(a, d, len);
        free(d);
        if (i == 0)
            continue;          /* OPTION_RES */
        if (get32(h + 4) == 8) /* JOB_CREATED */
            created++;
        else
            refused++;
    }
    printf("created %u refused %u\n", created, refused);
    in = fdopen(b, "r");
    if (in == NULL || getline(&l, &lcap, in) <= 0)
        return 3;
    fputs(l, stdout);
    free(l);
    free(buf);
    return 0;
}

/* until-admin, until-packet, until-file, until-lines: a shell poll loop in one
 * process. */
#define UNTIL_BOUND_S 120

/* Whether a line of buf (len bytes) is want, where a '*' (the first) stands
 * for any characters. */
static int
has_line(const char *buf, size_t len, const char *want)
{
    const char *star = strchr(want, '*'), *p = buf, *end = buf + len;
    size_t head = star ? (size_t)(star - want) : strlen(want), tail = star ? strlen(star + 1) : 0;

    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

        if (star ? n >= head + tail && memcmp(p, want, head) == 0 &&
                       memcmp(p + n - tail, star + 1, tail) == 0
                 : n == head && memcmp(p, want, head) == 0)
            return 1;
        p += n + 1;
    }
    return 0;
}

/* One try of until-admin or until-packet, in this process (a fork a try
 * cost more than the try): 0 when want is a line of the answer, else 1
 * (also when the server cannot be reached); the answer in last. */
static int
until_try(const char *port, int admin, char **argv, int argc, const char *want, char *last,
          size_t lastcap)
{
    struct sockaddr_in a;
    FILE *out;
    int fd = socket(AF_INET, SOCK_STREAM, 0), met;

    loopback(&a, port);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return 1;
    }
    memset(last, 0, lastcap);
    out = fmemopen(last, lastcap - 1, "w");
    if (out == NULL)
        exit(3);
    if (admin)
        do_admin(fd, argv[0], out); /* closes fd */
    else {
        do_packet(fd, argc, argv, out);
        close(fd);
    }
    fflush(out);
    met = has_line(last, strlen(last), want);
    fclose(out);
    return met ? 0 : 1;
}

/* Whether the file holds text (text empty: is not empty; NULL: exists). */
static int
file_has(const char *path, const char *text)
{
    static char buf[1 << 20];
    size_t n;
    FILE *f = fopen(path, "rb");

    if (f == NULL)
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (text == NULL)
        return 1;
    return *text == '\0' ? n > 0 : memmem(buf, n, text, strlen(text)) != NULL;
}

/* until-lines: what was read of the file, and the lines counted. */
struct lines_wait {
    const char *path;
    long want;    /* lines to count */
    int how;      /* 0 any line, 'E' matching re, 'x' equal to text */
    int distinct; /* count a line once however often it comes */
    regex_t re;
    const char *text;
    off_t pos;  /* bytes read so far */
    char *part; /* the unfinished last line */
    size_t partlen, partcap;
    char **seen; /* distinct: the lines counted */
    long count;
};

/* One whole line (no newline, NUL-terminated): count it if it is one. */
static void
lines_take(struct lines_wait *w, char *line, size_t n)
{
    long i;

    if (w->how == 'x' && strcmp(line, w->text) != 0)
        return;
    if (w->how == 'E' && regexec(&w->re, line, 0, NULL, 0) != 0)
        return;
    if (w->distinct) {
        for (i = 0; i < w->count; i++)
            if (strcmp(w->seen[i], line) == 0)
                return;
        w->seen = realloc(w->seen, (size_t)(w->count + 1) * sizeof(*w->seen));
        if (w->seen == NULL || (w->seen[w->count] = strndup(line, n)) == NULL)
            exit(3);
    }
    w->count++;
}

/* A look at the file: reads what was appended since the last one. Returns
 * -1 when the file shrank (truncated under the wait), else 1 when it grew,
 * 0 when not. */
static int
lines_look(struct lines_wait *w)
{
    char buf[65536];
    ssize_t r;
    int fd = open(w->path, O_RDONLY), grew = 0;

    if (fd < 0)
        return 0;
    if (lseek(fd, 0, SEEK_END) < w->pos) {
        close(fd);
        return -1;
    }
    lseek(fd, w->pos, SEEK_SET);
    while ((r = read(fd, buf, sizeof(buf))) > 0) {
        grew = 1;
        w->pos += r;
        for (ssize_t i = 0; i < r; i++) {
            if (w->partlen + 1 >= w->partcap) {
                w->partcap = w->partcap ? 2 * w->partcap : 256;
                if ((w->part = realloc(w->part, w->partcap)) == NULL)
                    exit(3);
            }
            if (buf[i] != '\n') {
                w->part[w->partlen++] = buf[i];
                continue;
            }
            w->part[w->partlen] = '\0';
            lines_take(w, w->part, w->partlen);
            w->partlen = 0;
        }
    }
    close(fd);
    return grew;
}

/* The size of the file (-1 when it is not there): a file wait's bound
 * restarts whenever it changed. */
static off_t
file_size(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Whether process pid is gone or a zombie. */
static int
gone(long pid)
{
    char path[64], st[512], *rp;
    FILE *f;
    size_t n;

    if (kill((pid_t)pid, 0) != 0)
        return 1;
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    n = fread(st, 1, sizeof(st) - 1, f);
    fclose(f);
    st[n] = '\0';
    rp = strrchr(st, ')');
    return rp != NULL && rp[1] == ' ' && rp[2] == 'Z';
}

/* The bound of the waits: 120 s, or $RAWPEER_UNTIL_S. */
static long
until_bound(void)
{
    const char *env = getenv("RAWPEER_UNTIL_S");

    return env != NULL && atol(env) > 0 ? atol(env) : UNTIL_BOUND_S;
}

static int
do_until(int argc, char **argv)
{
    struct timespec t0, now, fast = {0, 25 * 1000 * 1000}, slow = {0, 100 * 1000 * 1000};
    static char last[65536];
    long bound = until_bound();
    int tries;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    alarm((unsigned)bound + RAWPEER_BOUND_S); /* a try the server never answers */
    for (tries = 0;; tries++) {
        int met;

        if (strcmp(argv[2], "until-admin") == 0)
            met = until_try(argv[1], 1, argv + 3, 1, argv[4], last, sizeof(last)) == 0;
        else
            met = until_try(argv[1], 0, argv + 4, argc - 4, argv[3], last, sizeof(last)) == 0;
        if (met)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= bound) {
            if (last[0] != '\0')
                fprintf(stderr, "rawpeer: after %ld s the last answer was:\n%s", bound, last);
            return 1;
        }
        nanosleep(tries < 40 ? &fast : &slow, NULL);
    }
}

/* Frees what an until-lines wait holds. */
static void
lines_free(struct lines_wait *w)
{
    long i;

    if (w->how == 'E')
        regfree(&w->re);
    for (i = 0; w->seen != NULL && i < w->count; i++)
        free(w->seen[i]);
    free(w->seen);
    free(w->part);
}

/* until-lines' arguments after N into w: 0, or 64 when they are bad. */
static int
lines_parse(struct lines_wait *w, int argc, char **argv, long *pid)
{
    char *end;
    int i, rc;

    w->want = strtol(argv[3], &end, 10);
    if (*argv[3] == '\0' || *end != '\0')
        return 64;
    for (i = 4; i < argc; i++) {
        if (strcmp(argv[i], "-d") == 0)
            w->distinct = 1;
        else if (i + 1 < argc && strcmp(argv[i], "-p") == 0)
            *pid = strtol(argv[++i], NULL, 10);
        else if (i + 1 < argc && strcmp(argv[i], "-x") == 0 && w->how == 0) {
            w->how = 'x';
            w->text = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "-E") == 0 && w->how == 0) {
            if ((rc = regcomp(&w->re, argv[++i], REG_EXTENDED | REG_NOSUB)) != 0) {
                char msg[256];

                regerror(rc, &w->re, msg, sizeof(msg));
                fprintf(stderr, "rawpeer: until-lines: %s: %s\n", argv[i], msg);
                return 64;
            }
            w->how = 'E'; /* only now has w->re something to free */
        } else
            return 64;
    }
    return 0;
}

/* The wait itself: 0 when the file holds what is waited for, 1 after the
 * bound, when pid is gone, or when the file shrank under until-lines. */
static int
until_loop(struct lines_wait *w, int lines, const char *text, long pid)
{
    struct timespec t0, now, fast = {0, 25 * 1000 * 1000}, slow = {0, 100 * 1000 * 1000};
    long bound = until_bound();
    off_t size = -1;
    int tries;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (tries = 0;; tries++) {
        int dead = pid > 0 && gone(pid);
        off_t sz = file_size(w->path);

        if (lines) {
            if (lines_look(w) < 0) {
                fprintf(stderr, "rawpeer: %s shrank under until-lines\n", w->path);
                return 1;
            }
            if (w->count >= w->want)
                return 0;
        } else if (file_has(w->path, text))
            return 0;
        if (dead)
            return 1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (sz != size) {
            size = sz;
            t0 = now;
        } else if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >=
                   bound * 1000) {
            if (lines)
                fprintf(stderr, "rawpeer: %s: %ld of %ld lines, none added in %ld s\n", w->path,
                        w->count, w->want, bound);
            return 1;
        }
        nanosleep(tries < 40 ? &fast : &slow, NULL);
    }
}

/* until-file FILE [TEXT [PID]], until-lines FILE N [-E RE|-x LINE] [-d]
 * [-p PID]: the file waits, bounded by a time in which the file did not
 * change (nothing moved). Exit 1 after it, when PID is gone (after a last
 * look), or (until-lines) when the file shrank; 64 on bad arguments. */
static int
do_until_file(int argc, char **argv)
{
    struct lines_wait w = {0};
    long pid = 0;
    int lines = strcmp(argv[1], "until-lines") == 0, rc = 0;

    w.path = argv[2];
    if (lines)
        rc = lines_parse(&w, argc, argv, &pid);
    else if (argc > 4)
        pid = strtol(argv[4], NULL, 10);
    if (rc == 0)
        rc = until_loop(&w, lines, argc > 3 ? argv[3] : NULL, pid);
    lines_free(&w);
    return rc;
}

int
main(int argc, char **argv)
{
    int fd;

    if (argc == 2 && strcmp(argv[1], "free-port") == 0)
        return do_free_port();
    if (argc == 3 && strcmp(argv[2], "listening") == 0)
        return do_listening(argv[1]);
    if ((argc >= 3 && argc <= 5 && strcmp(argv[1], "until-file") == 0) ||
        (argc >= 4 && strcmp(argv[1], "until-lines") == 0)) {
        int rc = do_until_file(argc, argv);

        if (rc != 64)
            return rc; /* else the usage below */
    }
    if ((argc == 5 && strcmp(argv[2], "until-admin") == 0) ||
        (argc >= 5 && strcmp(argv[2], "until-packet") == 0))
        return do_until(argc, argv);
    if ((argc == 5 || (argc == 6 && strcmp(argv[3], "-e") == 0)) && strcmp(argv[2], "job") == 0) {
        signal(SIGALRM, on_alarm);
        alarm(30);
        return do_job(connect_port(argv[1]), argc == 6, argv[argc - 2], argv[argc - 1]);
    }
    if (argc == 6 && strcmp(argv[2], "batchpipe") == 0) {
        signal(SIGALRM, on_alarm);
        alarm(RAWPEER_BOUND_S);
        return do_batchpipe(argv[1], argv[3], (unsigned)strtoul(argv[4], NULL, 10), argv[5]);
    }
    if ((argc == 5 || argc == 6) && strcmp(argv[2], "http") == 0)
        return do_http(connect_port(argv[1]), argv[3], argv[4], argc == 6 ? argv[5] : NULL);
    if (argc >= 4 && strcmp(argv[2], "packets") == 0) {
        signal(SIGALRM, on_alarm);
        alarm(RAWPEER_BOUND_S);
        return do_packets(connect_port(argv[1]), argc - 3, argv + 3);
    }
    if (argc < 4 || (strcmp(argv[2], "packet") != 0 && strcmp(argv[2], "admin") != 0) ||
        (strcmp(argv[2], "admin") == 0 && argc != 4)) {
        fprintf(stderr, "usage: rawpeer PORT packet TYPE [ARG...] | rawpeer PORT admin LINE |\n"
                        "       rawpeer PORT http METHOD TARGET [FILLER-BYTES] |\n"
                        "       rawpeer PORT packets TYPE [ARG...] [-- TYPE [ARG...]]... |\n"
                        "       rawpeer PORT until-admin LINE WANT |\n"
                        "       rawpeer PORT until-packet WANT TYPE [ARG...] |\n"
                        "       rawpeer until-file FILE [TEXT [PID]] |\n"
                        "       rawpeer until-lines FILE N [-E REGEX | -x LINE] [-d] [-p PID] |\n"
                        "       rawpeer PORT batchpipe ID N FUNCTION |\n"
                        "       rawpeer PORT listening | rawpeer free-port\n");
        return 64;
    }
    signal(SIGALRM, on_alarm);
    alarm(RAWPEER_BOUND_S);
    fd = connect_port(argv[1]);
    if (strcmp(argv[2], "packet") == 0)
        return do_packet(fd, argc - 3, argv + 3, stdout);
    return do_admin(fd, argv[3], stdout);
}
