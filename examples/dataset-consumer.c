/*
 * dataset-consumer: reads a whole dataset from dataset-producer workers
 * (see consumer.h for what it prints and checks).
 *
 *   dataset-consumer [-s SERVER]... [-d NAME] [-n SHARDS] [-r ROWS] [--seed S]
 *                    [-a ATTEMPTS] [-p high|normal|low] [-q] [--progress force|never]
 *                    [--statuses]
 *
 * Defaults: dataset "demo", 8 shards, 2000 rows, seed 42, 3 attempts a
 * shard. -q prints no rows, only the marker lines (on stderr). --statuses
 * adds a marker line for each WORK_STATUS a shard reports. Exit status
 * 0 when every shard matched its summary, 1 otherwise, 2 for a usage error.
 */
#define _POSIX_C_SOURCE 200809L

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dsjob/client.h>

#include "consumer.h"

static void
usage(FILE *f)
{
    fputs("usage: dataset-consumer [-s SERVER]... [-d NAME] [-n SHARDS] [-r ROWS] [--seed S]\n"
          "                        [-a ATTEMPTS] [-p high|normal|low] [-q]\n"
          "                        [--progress force|never] [--statuses]\n",
          f);
}

/* Reads a number from lo to hi, or exits 2 naming the option. */
static uint32_t
number(const char *opt, const char *arg, unsigned long lo, unsigned long hi)
{
    char *end;
    unsigned long v = strtoul(arg, &end, 10);

    if (end == arg || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "dataset-consumer: '%s' wants a number from %lu to %lu, not '%s'\n", opt,
                lo, hi, arg);
        exit(2);
    }
    return (uint32_t)v;
}

int
main(int argc, char **argv)
{
    enum { OPT_SEED = 256, OPT_PROGRESS, OPT_STATUSES };
    static const struct option longopts[] = {
        {"server", required_argument, NULL, 's'},
        {"dataset", required_argument, NULL, 'd'},
        {"shards", required_argument, NULL, 'n'},
        {"rows", required_argument, NULL, 'r'},
        {"seed", required_argument, NULL, OPT_SEED},
        {"attempts", required_argument, NULL, 'a'},
        {"priority", required_argument, NULL, 'p'},
        {"quiet", no_argument, NULL, 'q'},
        {"progress", required_argument, NULL, OPT_PROGRESS},
        {"statuses", no_argument, NULL, OPT_STATUSES},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct consumer_opts o;
    struct consumer_result res;
    struct dsjob_client *c = dsjob_client_new();
    int opt, nservers = 0, rc;

    if (c == NULL)
        return 1;
    memset(&o, 0, sizeof(o));
    strcpy(o.dataset.name, "demo");
    o.dataset.shards = 8;
    o.dataset.rows = 2000;
    o.dataset.seed = 42;
    o.attempts = 3;
    o.out = stdout;
    while ((opt = getopt_long(argc, argv, "s:d:n:r:a:p:qh", longopts, NULL)) != -1) {
        switch (opt) {
        case 's':
            if (dsjob_client_add_server(c, optarg) != DSJOB_OK) {
                fprintf(stderr, "dataset-consumer: bad server '%s'\n", optarg);
                return 2;
            }
            nservers++;
            break;
        case 'd':
            if (!dataset_name_ok(optarg)) {
                fprintf(stderr, "dataset-consumer: bad dataset name '%s'\n", optarg);
                return 2;
            }
            strcpy(o.dataset.name, optarg);
            break;
        case 'n': o.dataset.shards = number("-n", optarg, 1, DATASET_SHARDS_MAX); break;
        case 'r': o.dataset.rows = number("-r", optarg, 0, DATASET_ROWS_MAX); break;
        case OPT_SEED: o.dataset.seed = number("--seed", optarg, 0, DATASET_SEED_MAX); break;
        case 'a': o.attempts = number("-a", optarg, 1, 100); break;
        case 'p':
            if (strcmp(optarg, "high") == 0)
                o.prio = DSJOB_PRIO_HIGH;
            else if (strcmp(optarg, "low") == 0)
                o.prio = DSJOB_PRIO_LOW;
            else if (strcmp(optarg, "normal") != 0) {
                fprintf(stderr, "dataset-consumer: bad -p '%s'\n", optarg);
                return 2;
            }
            break;
        case 'q': o.out = NULL; break;
        case OPT_PROGRESS:
            if (strcmp(optarg, "force") == 0)
                o.progress = CONSUMER_PROGRESS_FORCE;
            else if (strcmp(optarg, "never") == 0)
                o.progress = CONSUMER_PROGRESS_NEVER;
            else {
                fprintf(stderr, "dataset-consumer: bad --progress '%s'\n", optarg);
                return 2;
            }
            break;
        case OPT_STATUSES: o.statuses = true; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }
    if (nservers == 0)
        dsjob_client_add_server(c, "127.0.0.1:4730");

    rc = consumer_run(c, &o, &res);
    if (rc < 0) {
        fprintf(stderr, "dataset-consumer: out of memory\n");
        rc = 1;
    } else if (rc == 0) {
        fprintf(stderr,
                "dataset-consumer: %s: %" PRIu32 "/%" PRIu32 " shards, %" PRIu64
                " rows, every summary matched (%u resubmitted, %u restarted)\n",
                o.dataset.name, res.ok, o.dataset.shards, res.rows, res.resubmits, res.restarts);
    } else {
        fprintf(stderr, "dataset-consumer: %s: %" PRIu32 " of %" PRIu32 " shards bad; %s\n",
                o.dataset.name, res.bad, o.dataset.shards, res.why);
    }
    dsjob_client_free(c);
    return rc;
}
