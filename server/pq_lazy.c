/*
 * pq_lazy: the libpq functions the postgres store calls, each a call
 * through the address lazylib loaded from LIBPQ_SONAME on first use, so
 * that dsjobd links no libpq (lazy/lazylib.h says why). libpq-fe.h declares
 * them all, so the compiler checks each definition against the real one.
 */
#include "config.h"

#include <libpq-fe.h>

#include "lazy/lazylib.h"
#include "store.h"

/*
 * F(ret, name, params, args) for a function returning ret, V(name, params,
 * args) for one returning nothing. A function the store starts to call goes
 * here too (the link fails until it does).
 */
#define PQ_FUNCS(F, V)                                                                             \
    F(int, PQbackendPID, (const PGconn *c), (c))                                                   \
    V(PQclear, (PGresult * r), (r))                                                                \
    F(char *, PQcmdTuples, (PGresult * r), (r))                                                    \
    F(PostgresPollingStatusType, PQconnectPoll, (PGconn * c), (c))                                 \
    F(PGconn *, PQconnectStartParams, (const char *const *k, const char *const *v, int e),         \
      (k, v, e))                                                                                   \
    F(PQconninfoOption *, PQconninfo, (PGconn * c), (c))                                           \
    V(PQconninfoFree, (PQconninfoOption * o), (o))                                                 \
    F(PQconninfoOption *, PQconninfoParse, (const char *s, char **msg), (s, msg))                  \
    F(int, PQconsumeInput, (PGconn * c), (c))                                                      \
    F(char *, PQerrorMessage, (const PGconn *c), (c))                                              \
    F(char *, PQescapeIdentifier, (PGconn * c, const char *s, size_t n), (c, s, n))                \
    F(PGresult *, PQexec, (PGconn * c, const char *q), (c, q))                                     \
    F(PGresult *, PQexecParams,                                                                    \
      (PGconn * c, const char *q, int n, const Oid *t, const char *const *v, const int *l,         \
       const int *f, int rf),                                                                      \
      (c, q, n, t, v, l, f, rf))                                                                   \
    V(PQfinish, (PGconn * c), (c))                                                                 \
    V(PQfreemem, (void *p), (p))                                                                   \
    F(int, PQgetisnull, (const PGresult *r, int t, int f), (r, t, f))                              \
    F(int, PQgetlength, (const PGresult *r, int t, int f), (r, t, f))                              \
    F(PGresult *, PQgetResult, (PGconn * c), (c))                                                  \
    F(char *, PQgetvalue, (const PGresult *r, int t, int f), (r, t, f))                            \
    F(int, PQisBusy, (PGconn * c), (c))                                                            \
    F(int, PQlibVersion, (void), ())                                                               \
    F(PGnotify *, PQnotifies, (PGconn * c), (c))                                                   \
    F(int, PQntuples, (const PGresult *r), (r))                                                    \
    V(PQreset, (PGconn * c), (c))                                                                  \
    F(PostgresPollingStatusType, PQresetPoll, (PGconn * c), (c))                                   \
    F(int, PQresetStart, (PGconn * c), (c))                                                        \
    F(char *, PQresultErrorField, (const PGresult *r, int f), (r, f))                              \
    F(char *, PQresultErrorMessage, (const PGresult *r), (r))                                      \
    F(ExecStatusType, PQresultStatus, (const PGresult *r), (r))                                    \
    F(int, PQsendPrepare, (PGconn * c, const char *n, const char *q, int np, const Oid *t),        \
      (c, n, q, np, t))                                                                            \
    F(int, PQsendQuery, (PGconn * c, const char *q), (c, q))                                       \
    F(int, PQsendQueryParams,                                                                      \
      (PGconn * c, const char *q, int n, const Oid *t, const char *const *v, const int *l,         \
       const int *f, int rf),                                                                      \
      (c, q, n, t, v, l, f, rf))                                                                   \
    F(int, PQsendQueryPrepared,                                                                    \
      (PGconn * c, const char *s, int n, const char *const *v, const int *l, const int *f,         \
       int rf),                                                                                    \
      (c, s, n, v, l, f, rf))                                                                      \
    F(int, PQserverVersion, (const PGconn *c), (c))                                                \
    F(PQnoticeProcessor, PQsetNoticeProcessor, (PGconn * c, PQnoticeProcessor p, void *a),         \
      (c, p, a))                                                                                   \
    F(int, PQsocket, (const PGconn *c), (c))                                                       \
    F(ConnStatusType, PQstatus, (const PGconn *c), (c))

enum { PQ_FUNCS(LAZYLIB_INDEX, LAZYLIB_INDEX_V) PQ_N };

static const char *const pq_names[PQ_N] = {PQ_FUNCS(LAZYLIB_NAME, LAZYLIB_NAME_V)};
static lazylib_fn pq_fns[PQ_N];
static struct lazylib pq_lib = LAZYLIB_INIT(LIBPQ_SONAME, pq_names, pq_fns, PQ_N);

int
pq_lazy_load(char *err, size_t errlen)
{
    return lazylib_load(&pq_lib, err, errlen);
}

#define LAZYLIB_THIS pq_lib
PQ_FUNCS(LAZYLIB_DEFINE, LAZYLIB_DEFINE_V)
