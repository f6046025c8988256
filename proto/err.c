/*
 * Text for enum dsjob_err, and the version. In libdsproto (not libdscodec):
 * libdsjobclient and libdsjobserver export them, libdsjobworker uses
 * libdsjobclient's.
 */
#include "config.h"

#include <dsjob/common.h>

const char *
dsjob_strerror(int err)
{
    switch (err) {
    case DSJOB_OK: return "success";
    case DSJOB_ERR_NOMEM: return "out of memory";
    case DSJOB_ERR_SYS: return "system call failed";
    case DSJOB_ERR_TIMEOUT: return "timed out";
    case DSJOB_ERR_CLOSED: return "connection closed";
    case DSJOB_ERR_PROTO: return "protocol error";
    case DSJOB_ERR_SERVER: return "server error";
    case DSJOB_ERR_ARG: return "invalid argument";
    case DSJOB_ERR_NOTFOUND: return "not found";
    case DSJOB_ERR_STATE: return "invalid state";
    case DSJOB_ERR_STORE: return "store failed";
    case DSJOB_ERR_JOB_FAILED: return "job failed";
    case DSJOB_ERR_JOB_EXCEPTION: return "job raised an exception";
    }
    return "unknown error";
}

const char *
dsjob_version(void)
{
    return DSJOB_VERSION_STRING;
}
