/*
 * Shared declarations of dsjob's public libraries: the error codes every
 * call returns, their text, the version, and the export macro.
 */
#ifndef DSJOB_COMMON_H
#define DSJOB_COMMON_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(DSJOB_BUILDING)
#define DSJOB_API __attribute__((visibility("default")))
#else
#define DSJOB_API
#endif

#define DSJOB_VERSION_STRING "0.1.0"
#define DSJOB_VERSION_NUMBER 0x000100 /* 0xMMmmpp */

/*
 * Return codes of every dsjob_ call. Values are only ever appended, never
 * renumbered: they are part of the ABI.
 */
enum dsjob_err {
    DSJOB_OK = 0,
    DSJOB_ERR_NOMEM,         /* an allocation failed */
    DSJOB_ERR_SYS,           /* a system call failed; errno says why */
    DSJOB_ERR_TIMEOUT,       /* a deadline passed */
    DSJOB_ERR_CLOSED,        /* the peer closed the connection */
    DSJOB_ERR_PROTO,         /* the peer broke the protocol */
    DSJOB_ERR_SERVER,        /* the server answered with an error */
    DSJOB_ERR_ARG,           /* an argument or option is invalid */
    DSJOB_ERR_NOTFOUND,      /* no such job, function or server */
    DSJOB_ERR_STATE,         /* the call does not fit the object's state */
    DSJOB_ERR_STORE,         /* the persistent store failed */
    DSJOB_ERR_JOB_FAILED,    /* the job ended with WORK_FAIL */
    DSJOB_ERR_JOB_EXCEPTION, /* the job ended with WORK_EXCEPTION (text in the errmsg) */
};

/* Flags of dsjob_client_set_tls and dsjob_worker_set_tls. */
enum dsjob_tls_flags {
    DSJOB_TLS_NO_VERIFY_NAME = 1 << 0, /* check the server's certificate chain, not its name */
    DSJOB_TLS_NO_VERIFY = 1 << 1,      /* accept any server certificate: for tests only */
};

/* dsjob_strerror returns a static, never-NULL text for an enum dsjob_err value. */
DSJOB_API const char *dsjob_strerror(int err);

#include <stddef.h>

/*
 * dsjob_malloc and dsjob_free are the libraries' allocator: what a dsjob_
 * call returns for the caller to free is freed with dsjob_free (NULL is a
 * no-op). dsjob_set_alloc_funcs replaces both for the whole process (NULLs
 * restore malloc and free); call it before any other dsjob_ call.
 */
DSJOB_API void *dsjob_malloc(size_t size);
DSJOB_API void dsjob_free(void *ptr);
DSJOB_API void dsjob_set_alloc_funcs(void *(*malloc_fn)(size_t), void (*free_fn)(void *));

/* dsjob_version returns the library's version string, e.g. "0.1.0". */
DSJOB_API const char *dsjob_version(void);

#ifdef __cplusplus
}
#endif

#endif
