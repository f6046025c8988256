/*
 * A small command-line face of the two libraries for the shell interop
 * test (t_gearman_cli.sh), so that gearman's own CLI can be paired with our
 * client and our worker:
 *   peer_tool submit ADDR FUNC DATA   foreground job; the result on stdout;
 *                                     exit 0 complete, 1 fail/exception, 3 other
 *   peer_tool worker ADDR FUNC COUNT  reverse the payload of COUNT jobs, then exit 0
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dsjob/client.h>
#include <dsjob/worker.h>

static int
fn_rev(struct dsjob_job *job, void *user)
{
    size_t len, i;
    const char *p = dsjob_job_payload(job, &len);
    char *r = malloc(len + 1);

    (void)user;
    if (r == NULL)
        return DSJOB_WORK_FAIL;
    for (i = 0; i < len; i++)
        r[i] = p[len - 1 - i];
    dsjob_job_set_result(job, r, len);
    free(r);
    return DSJOB_WORK_COMPLETE;
}

static int
do_submit(const char *addr, const char *func, const char *data)
{
    struct dsjob_client *c = dsjob_client_new();
    void *res = NULL;
    size_t len = 0;
    int err;

    dsjob_client_add_server(c, addr);
    dsjob_client_set_timeout(c, 2000, 10000);
    err = dsjob_client_submit(c, func, NULL, data, strlen(data), DSJOB_PRIO_NORMAL, &res, &len);
    if (err == DSJOB_OK)
        fwrite(res, 1, len, stdout);
    else
        fprintf(stderr, "peer_tool: %s: %s\n", dsjob_strerror(err), dsjob_client_errmsg(c));
    dsjob_free(res);
    dsjob_client_free(c);
    if (err == DSJOB_OK)
        return 0;
    return err == DSJOB_ERR_JOB_FAILED || err == DSJOB_ERR_JOB_EXCEPTION ? 1 : 3;
}

static int
do_worker(const char *addr, const char *func, int count)
{
    struct dsjob_worker *w = dsjob_worker_new();
    int i, err = DSJOB_OK;

    dsjob_worker_add_server(w, addr);
    dsjob_worker_register(w, func, fn_rev, NULL, 0);
    for (i = 0; i < count && err == DSJOB_OK; i++)
        err = dsjob_worker_work(w, 20000);
    if (err != DSJOB_OK)
        fprintf(stderr, "peer_tool: %s: %s\n", dsjob_strerror(err), dsjob_worker_errmsg(w));
    dsjob_worker_free(w);
    return err == DSJOB_OK ? 0 : 3;
}

int
main(int argc, char **argv)
{
    alarm(60);
    if (argc == 5 && strcmp(argv[1], "submit") == 0)
        return do_submit(argv[2], argv[3], argv[4]);
    if (argc == 5 && strcmp(argv[1], "worker") == 0)
        return do_worker(argv[2], argv[3], atoi(argv[4]));
    fprintf(stderr, "usage: peer_tool submit ADDR FUNC DATA | worker ADDR FUNC COUNT\n");
    return 2;
}
