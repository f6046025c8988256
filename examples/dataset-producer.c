/*
 * dataset-producer: a worker process that makes the example dataset's
 * shards for any Gearman client (see producer.h for the two functions).
 *
 *   dataset-producer [-s SERVER]... [-c N] [-i ID] [--save-dir DIR] [--slow MS]
 *   dataset-producer --print SPEC
 *
 * Servers as for dsjob (-s host:port, repeatable; 127.0.0.1:4730 by
 * default). -c N makes N shards at once. --print makes one shard here, with
 * no server, and prints what `dsjob submit dataset.shard SPEC` would: the
 * rows, then the summary line (the tests compare the two). SIGINT or
 * SIGTERM lets the running shards finish, then exits 0. --hold, --fail and
 * --corrupt (N:FILE) inject the faults of struct producer_fault, for the
 * tests.
 */
#define _POSIX_C_SOURCE 200809L

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsjob/worker.h>

#include "producer.h"

static struct dsjob_worker *volatile running;

static void
on_signal(int sig)
{
    (void)sig;
    if (running != NULL)
        dsjob_worker_stop(running); /* async-signal-safe */
}

static void
usage(FILE *f)
{
    fputs("usage: dataset-producer [-s SERVER]... [-c N] [-i ID] [--save-dir DIR] [--slow MS]\n"
          "                        [--hold N:FILE] [--fail N:FILE] [--corrupt N:FILE]\n"
          "       dataset-producer --print SPEC\n",
          f);
}

static int
parse_fault(const char *arg, struct producer_fault *fault)
{
    char *end;
    unsigned long long n = strtoull(arg, &end, 10);

    if (end == arg || *end != ':' || end[1] == '\0' || n == 0)
        return -1;
    fault->after = n;
    fault->file = end + 1;
    return 0;
}

static int
print_shard(const char *json)
{
    struct dataset_spec spec;
    char err[DATASET_ERR_MAX];

    if (dataset_spec_parse(&spec, json, strlen(json), err) < 0) {
        fprintf(stderr, "dataset-producer: bad spec: %s\n", err);
        return 2;
    }
    producer_print(&spec, stdout);
    return fflush(stdout) == 0 ? 0 : 1;
}

int
main(int argc, char **argv)
{
    enum { OPT_SAVE = 256, OPT_SLOW, OPT_HOLD, OPT_FAIL, OPT_CORRUPT, OPT_PRINT };
    static const struct option longopts[] = {
        {"server", required_argument, NULL, 's'},
        {"concurrency", required_argument, NULL, 'c'},
        {"id", required_argument, NULL, 'i'},
        {"save-dir", required_argument, NULL, OPT_SAVE},
        {"slow", required_argument, NULL, OPT_SLOW},
        {"hold", required_argument, NULL, OPT_HOLD},
        {"fail", required_argument, NULL, OPT_FAIL},
        {"corrupt", required_argument, NULL, OPT_CORRUPT},
        {"print", required_argument, NULL, OPT_PRINT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct producer_opts o;
    struct dsjob_worker *w = dsjob_worker_new();
    struct sigaction sa;
    int opt, nservers = 0, concurrency = 1, err;

    memset(&o, 0, sizeof(o));
    if (w == NULL)
        return 1;
    while ((opt = getopt_long(argc, argv, "s:c:i:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 's':
            if (dsjob_worker_add_server(w, optarg) != DSJOB_OK) {
                fprintf(stderr, "dataset-producer: bad server '%s'\n", optarg);
                return 2;
            }
            nservers++;
            break;
        case 'c':
            concurrency = atoi(optarg);
            if (dsjob_worker_set_concurrency(w, concurrency) != DSJOB_OK) {
                fprintf(stderr, "dataset-producer: bad -c '%s'\n", optarg);
                return 2;
            }
            break;
        case 'i': dsjob_worker_set_id(w, optarg); break;
        case OPT_SAVE: o.save_dir = optarg; break;
        case OPT_SLOW: o.slow_ms = (unsigned)strtoul(optarg, NULL, 10); break;
        case OPT_HOLD:
        case OPT_FAIL:
        case OPT_CORRUPT:
            if (parse_fault(optarg, opt == OPT_HOLD   ? &o.hold
                                    : opt == OPT_FAIL ? &o.fail
                                                      : &o.corrupt) < 0) {
                fprintf(stderr, "dataset-producer: '%s' is not N:FILE\n", optarg);
                return 2;
            }
            break;
        case OPT_PRINT: dsjob_worker_free(w); return print_shard(optarg);
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (nservers == 0)
        dsjob_worker_add_server(w, "127.0.0.1:4730");
    if (producer_register(w, &o) != DSJOB_OK)
        return 1;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    running = w;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    err = dsjob_worker_run(w);
    if (err != DSJOB_OK)
        fprintf(stderr, "dataset-producer: %s: %s\n", dsjob_strerror(err), dsjob_worker_errmsg(w));
    running = NULL;
    dsjob_worker_free(w);
    return err == DSJOB_OK ? 0 : 1;
}
