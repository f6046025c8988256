/*
 * dsjob batch: batches of background jobs on dsjobd (BATCHES in
 * dsjobd(8)). open, close, status, list and drop are admin lines to the
 * first server given ("batch open ID on-complete=F on-success=G" and the
 * rest); add submits background jobs with libdsjobclient after
 * dsjob_client_set_batch, so they join the batch. A batch lives on one
 * server: every word goes to the first -s server.
 */
#include "config.h"
#include "dsjob.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsjob/client.h>
#include <dsjob/common.h>

#include "link/link.h"

#define BATCH_ADD_MAX 10000000UL /* jobs one batch add may submit */

static const char batch_usage[] =
    "usage: dsjob batch open [--on-complete FUNCTION] [--on-success FUNCTION] ID\n"
    "       dsjob batch add [-n N [--numbered]] [-u UNIQUE] ID FUNCTION [DATA]\n"
    "       dsjob batch close|status|drop ID\n"
    "       dsjob batch list\n"
    "  [-s SERVER] [-t MS] [--format table|tsv|json]\n"
    "Batches (dsjobd): background jobs submitted under a batch's ID are counted;\n"
    "once the batch is closed and every job in it has ended, the server submits\n"
    "the on-complete job, and if every job succeeded the on-success job, each\n"
    "once, with a JSON summary (counts, failed handles) as payload and the\n"
    "unique key batch:ID:complete or batch:ID:success. A batch lives on one\n"
    "server, the first given (with --store postgres, on all that share the\n"
    "database). ID is 1 to 64 of A-Z a-z 0-9 _ . : -\n"
    "  open     make the batch (an existing ID is an error)\n"
    "  add      submit N (default 1) background jobs of FUNCTION with DATA into it;\n"
    "           prints each handle\n"
    "  close    take no more jobs; a batch closed with none fires at once\n"
    "  status   its counts: total, pending, done, failed, dead; closed; fired\n"
    "  list     every batch of the server\n"
    "  drop     forget it (an --admin-allow peer); its jobs run on\n"
    "      --on-complete F  open: the function of the job submitted when all ended\n"
    "      --on-success F   open: ... when all succeeded\n"
    "  -n N                 add: how many jobs (default 1)\n"
    "      --numbered       add: each job's DATA ends with a space and its number\n"
    "                       (1 to N), so the jobs differ\n"
    "  -u UNIQUE            add: the job's unique key (with -n 1)\n"
    "  -s, --server ADDR    host[:port] (4730) or /unix/socket\n"
    "  -t, --timeout MS     connect and reply timeout (default 5000)\n";

static const char *const list_cols[] = {
    "id",    "total",       "pending",    "done",           "failed",        "dead",
    "state", "on_complete", "on_success", "fired_complete", "fired_success",
};
#define NCOLS (sizeof(list_cols) / sizeof(list_cols[0]))

/* Print "batch list"'s reply (tab-separated rows ending with ".") in cli's format. */
static void
print_list(const struct cli *cli, const char *buf)
{
    const char *p = buf;
    bool first = true;
    size_t i;

    if (cli->format == CLI_FORMAT_JSON)
        fputc('[', stdout);
    else if (cli->format == CLI_FORMAT_TABLE)
        for (i = 0; i < NCOLS; i++)
            printf("%s%c", list_cols[i], i + 1 < NCOLS ? '\t' : '\n');
    while (*p != '\0' && strncmp(p, ".\n", 2) != 0) {
        size_t len = strcspn(p, "\n");

        if (cli->format != CLI_FORMAT_JSON) {
            printf("%.*s\n", (int)len, p);
        } else {
            const char *c = p, *end = p + len;

            printf("%s{", first ? "" : ",");
            for (i = 0; i < NCOLS && c <= end; i++) {
                const char *tab = memchr(c, '\t', (size_t)(end - c));
                size_t n = tab ? (size_t)(tab - c) : (size_t)(end - c);
                bool num = i >= 1 && i <= 5;

                /* ids and function names hold no quote or backslash (the server checks) */
                printf("%s\"%s\":%s%.*s%s", i ? "," : "", list_cols[i], num ? "" : "\"", (int)n, c,
                       num ? "" : "\"");
                c += n + 1;
            }
            fputc('}', stdout);
            first = false;
        }
        p += len + (p[len] == '\n');
    }
    if (cli->format == CLI_FORMAT_JSON)
        fputs("]\n", stdout);
}

/* "OK k=v k=v ..." as JSON, or as the line without its "OK ". */
static void
print_status(const struct cli *cli, const char *buf)
{
    const char *p = buf + (strncmp(buf, "OK ", 3) == 0 ? 3 : 0);
    size_t len = strcspn(p, "\r\n");

    if (cli->format != CLI_FORMAT_JSON) {
        printf("%.*s\n", (int)len, p);
        return;
    }
    fputc('{', stdout);
    while (len > 0) {
        size_t w = strcspn(p, " \r\n"), k = strcspn(p, "=");
        bool num = true;
        size_t i;

        if (k >= w)
            break;
        for (i = k + 1; i < w; i++)
            if (p[i] < '0' || p[i] > '9')
                num = false;
        printf("%s\"%.*s\":%s%.*s%s", p == buf + 3 || p == buf ? "" : ",", (int)k, p,
               num ? "" : "\"", (int)(w - k - 1), p + k + 1, num ? "" : "\"");
        p += w;
        len -= w;
        while (len > 0 && *p == ' ')
            p++, len--;
    }
    fputs("}\n", stdout);
}

static int
batch_add(struct cli *cli, const char *id, const char *func, const char *data, unsigned long n,
          bool numbered, const char *unique)
{
    size_t dlen = strlen(data);
    char *buf = cli_xmalloc(dlen + 24);
    struct dsjob_client *c = dsjob_client_new();
    unsigned long i;
    int r = CLI_OK;

    if (c == NULL) {
        cli_err("out of memory");
        return CLI_FAILED;
    }
    if (dsjob_client_add_server(c, cli->servers[0]) != DSJOB_OK)
        r = cli_usage_error(cli, "bad server address '%s'", cli->servers[0]);
    if (r == CLI_OK)
        r = cli_tls_client(cli, c);
    if (r == CLI_OK && dsjob_client_set_batch(c, id) != DSJOB_OK)
        r = cli_usage_error(cli, "%s", dsjob_client_errmsg(c));
    if (r == CLI_OK)
        dsjob_client_set_timeout(c, cli->timeout_ms ? cli->timeout_ms : 5000,
                                 cli->timeout_ms ? cli->timeout_ms : 30000);
    for (i = 0; i < n && r == CLI_OK; i++) {
        char handle[DSJOB_HANDLE_MAX];
        size_t len = dlen;
        int err;

        memcpy(buf, data, dlen);
        if (numbered)
            len += (size_t)snprintf(buf + dlen, 24, " %lu", i + 1);
        err = dsjob_client_submit_bg(c, func, unique, buf, len, DSJOB_PRIO_NORMAL, handle,
                                     sizeof(handle));

        if (err != DSJOB_OK) {
            cli_err("%s", dsjob_client_errmsg(c));
            r = err == DSJOB_ERR_SERVER ? CLI_FAILED : CLI_UNREACHABLE;
            break;
        }
        if (printf("%s\n", handle) < 0)
            r = CLI_FAILED;
    }
    dsjob_client_free(c);
    free(buf);
    if (fflush(stdout) != 0)
        r = CLI_FAILED;
    return r;
}

int
batch_main(struct cli *cli, int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_GLOBAL_LONG,
        {"on-complete", required_argument, NULL, OPT_ON_COMPLETE},
        {"on-success", required_argument, NULL, OPT_ON_SUCCESS},
        {"numbered", no_argument, NULL, OPT_NUMBERED},
        {NULL, 0, NULL, 0},
    };
    const char *on_complete = NULL, *on_success = NULL, *unique = NULL, *sub;
    unsigned long n = 1;
    bool n_set = false, numbered = false;
    char *line = NULL, *reply = NULL;
    int ch, r, want;

    while ((ch = getopt_long(argc, argv, ":n:u:" CLI_GLOBAL_SHORT, longopts, NULL)) != -1) {
        switch (ch) {
        case 'h': fputs(batch_usage, stdout); return CLI_OK;
        case OPT_ON_COMPLETE: on_complete = optarg; break;
        case OPT_ON_SUCCESS: on_success = optarg; break;
        case 'n':
            if (cli_parse_uint(optarg, 1, BATCH_ADD_MAX, &n) != 0)
                return cli_usage_error(cli, "option '-n' wants 1 to %lu, not '%s'", BATCH_ADD_MAX,
                                       optarg);
            n_set = true;
            break;
        case 'u': unique = optarg; break;
        case OPT_NUMBERED: numbered = true; break;
        case '?':
        case ':': return cli_getopt_error(cli, ch, argv);
        default:
            r = cli_global_opt(cli, ch, optarg);
            if (r != 0)
                return r < 0 ? cli_getopt_error(cli, '?', argv) : r;
            break;
        }
    }
    if (optind >= argc)
        return cli_usage_error(cli, "missing open, add, close, status, list or drop");
    sub = argv[optind++];
    want = strcmp(sub, "list") == 0 ? 0 : strcmp(sub, "add") == 0 ? 2 : 1;
    if (want == 1 && strcmp(sub, "open") != 0 && strcmp(sub, "close") != 0 &&
        strcmp(sub, "status") != 0 && strcmp(sub, "drop") != 0)
        return cli_usage_error(cli,
                               "unknown 'batch %s' (want open, add, close, status, list or "
                               "drop)",
                               sub);
    if ((on_complete || on_success) && strcmp(sub, "open") != 0)
        return cli_usage_error(cli, "--on-complete and --on-success are for batch open");
    if ((n_set || unique || numbered) && want != 2)
        return cli_usage_error(cli, "-n, -u and --numbered are for batch add");
    if (unique != NULL && n > 1)
        return cli_usage_error(cli, "-u with -n over 1 would make one job");
    if (want == 2 ? argc - optind < 2 || argc - optind > 3 : argc - optind != want)
        return cli_usage_error(cli,
                               want == 0   ? "batch list takes no argument"
                               : want == 1 ? "batch %s takes an ID"
                                           : "batch add takes ID FUNCTION [DATA]",
                               sub);
    r = cli_servers(cli);
    if (r != 0)
        return r;
    if (want == 2)
        return batch_add(cli, argv[optind], argv[optind + 1],
                         argc - optind > 2 ? argv[optind + 2] : "", n, numbered, unique);
    if (want == 1 && (argv[optind][0] == '\0' || strpbrk(argv[optind], " \t\r\n") != NULL))
        return cli_usage_error(cli, "bad ID '%s'", argv[optind]);
    if ((on_complete && strpbrk(on_complete, " \t\r\n")) ||
        (on_success && strpbrk(on_success, " \t\r\n")))
        return cli_usage_error(cli, "a callback's FUNCTION is one word");
    if (cli->ssl) {
        char err[LINK_ERR_LEN];

        cli->admin_tls =
            link_tls_new(cli->ssl_ca, cli->ssl_cert, cli->ssl_key, 0, err, sizeof(err));
        if (cli->admin_tls == NULL)
            return cli_usage_error(cli, "--ssl: %s", err);
    }
    if (want == 0) {
        line = strdup("batch list\n");
    } else {
        size_t len = strlen(argv[optind]) + 64 + (on_complete ? strlen(on_complete) : 0) +
                     (on_success ? strlen(on_success) : 0);

        line = cli_xmalloc(len);
        snprintf(line, len, "batch %s %s%s%s%s%s\n", sub, argv[optind],
                 on_complete ? " on-complete=" : "", on_complete ? on_complete : "",
                 on_success ? " on-success=" : "", on_success ? on_success : "");
    }
    if (line == NULL) {
        cli_err("out of memory");
        r = CLI_FAILED;
    } else {
        r = cli_admin_ask(cli, cli->servers[0], line, want == 0, &reply);
    }
    if (r == CLI_OK && want == 0)
        print_list(cli, reply);
    else if (r == CLI_OK && strcmp(sub, "status") == 0)
        print_status(cli, reply);
    free(reply);
    free(line);
    link_tls_free(cli->admin_tls);
    cli->admin_tls = NULL;
    if (fflush(stdout) != 0)
        r = CLI_FAILED;
    return r;
}
