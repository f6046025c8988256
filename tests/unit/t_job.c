/*
 * Jobs: one allocation with handle, unique, reducer and payload (NULs
 * included) in place; the job_ext made only on demand; references; limits.
 */
#include "config.h"

#include <stdbool.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/job.h"
#include "tap.h"

static void
unref_null(void)
{
    job_unref(NULL);
}

/* runs_cleanly calls fn in a child: true if the child returned from it and exited 0. */
static bool
runs_cleanly(void (*fn)(void))
{
    int status;
    pid_t pid = fork();

    if (pid == 0) {
        fn();
        _exit(0);
    }
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

int
main(void)
{
    static const char data[] = "pay\0load";
    char longh[JOB_HANDLE_MAX + 2];
    struct job *j;

    j = job_new("H:h:1", 5, "u-1", 3, "red", 3, data, sizeof(data) - 1);
    tap_ok(j != NULL, "job_new");
    tap_is_str(job_handle(j), "H:h:1", "handle");
    tap_is_str(job_unique(j), "u-1", "unique");
    tap_is_str(job_reducer(j), "red", "reducer");
    tap_is_mem(job_data(j), j->data_len, data, sizeof(data) - 1, "payload with its NUL");
    tap_is_int(j->refs, 1, "one reference");
    tap_is_int(j->state, JOB_NEW, "new");
    tap_ok(job_ref(j) == j && j->refs == 2, "job_ref");
    job_unref(j);
    tap_is_int(j->refs, 1, "job_unref");
    tap_is_int(job_nwaiters(j), 0, "no waiters");
    tap_ok(j->ext == NULL, "a new job has no job_ext");
    tap_ok(job_worker(j) == NULL && job_when(j) == 0 && job_attempts(j) == 0 && !job_has_waiters(j),
           "and reads as idle without one");
    tap_ok(job_set_when(j, 0) == 0 && j->ext == NULL, "setting no time allocates nothing");
    tap_ok(job_set_when(j, 4102444800) == 0 && j->ext != NULL && job_when(j) == 4102444800,
           "setting a time makes the job_ext");
    tap_ok(job_ext(j) == j->ext && TAILQ_EMPTY(&j->ext->waiters), "job_ext is made once");
    job_unref(j);
    tap_ok(runs_cleanly(unref_null), "job_unref(NULL) is a no-op");

    j = job_new("H:h:2", 5, NULL, 0, NULL, 0, NULL, 0);
    tap_ok(j != NULL && j->data_len == 0 && job_unique(j)[0] == '\0', "empty unique and data");
    job_unref(j);

    tap_ok(job_new("H:h:3", 5, NULL, 0, NULL, 0, data, (size_t)UINT32_MAX + 1) == NULL,
           "a payload over UINT32_MAX is refused");

    memset(longh, 'h', sizeof(longh));
    tap_ok(job_new(longh, sizeof(longh), NULL, 0, NULL, 0, NULL, 0) == NULL,
           "a handle over JOB_HANDLE_MAX is refused");
    return tap_done();
}
