/*
 * dsjob._dsjob: the CPython extension under the dsjob package, a thin layer
 * over libdsjobclient, libdsjobworker and libdsjobserver. Every call that
 * may wait (on the network, on a job, on a thread) runs with the GIL
 * released; a C handle is used by one thread at a time, so each object
 * holds a lock taken with the GIL released. Errors become the exceptions of
 * dsjob._errors with the library's message. The Python modules of the
 * package (client.py, worker.py, server.py) build the public API on this.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <structmember.h>

#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include <dsjob/async.h>
#include <dsjob/client.h>
#include <dsjob/server.h>
#include <dsjob/worker.h>

/* The exception classes of dsjob._errors, set at import. */
static PyObject *Error, *NoServer, *Timeout, *Refused, *JobFailed;

/*
 * Raises the exception for err with msg (the handle's errmsg; "" for none):
 * JobFailed for a job that failed or raised, Refused with the server's code
 * for an ERROR answer, Timeout, NoServer for a server that could not be
 * used, ValueError for a bad argument, MemoryError. Returns NULL.
 */
static PyObject *
raise_err(int err, const char *msg)
{
    PyObject *exc, *cls = Error;

    if (msg == NULL || msg[0] == '\0')
        msg = dsjob_strerror(err);
    switch (err) {
    case DSJOB_ERR_NOMEM: return PyErr_NoMemory();
    case DSJOB_ERR_ARG: PyErr_SetString(PyExc_ValueError, msg); return NULL;
    case DSJOB_ERR_TIMEOUT: cls = Timeout; break;
    case DSJOB_ERR_SYS:
    case DSJOB_ERR_CLOSED: cls = NoServer; break;
    case DSJOB_ERR_JOB_FAILED:
        exc = PyObject_CallFunction(JobFailed, "sO", "the job failed (WORK_FAIL)", Py_None);
        goto raise;
    case DSJOB_ERR_JOB_EXCEPTION:
        exc = PyObject_CallFunction(JobFailed, "ss", msg, msg);
        goto raise;
    case DSJOB_ERR_SERVER: {
        /* "host:port: CODE: text" */
        const char *a = strstr(msg, ": "), *b = a ? strstr(a + 2, ": ") : NULL;

        if (b != NULL)
            exc =
                PyObject_CallFunction(Refused, "ss#s", msg, a + 2, (Py_ssize_t)(b - a - 2), b + 2);
        else
            exc = PyObject_CallFunction(Refused, "sss", msg, "", msg);
        goto raise;
    }
    default: break;
    }
    exc = PyObject_CallFunction(cls, "s", msg);
raise:
    if (exc != NULL) {
        PyObject *code = PyLong_FromLong(err);

        if (code == NULL || PyObject_SetAttrString(exc, "errno_dsjob", code) < 0)
            PyErr_Clear();
        Py_XDECREF(code);
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* The exception raised, normalized, with its traceback; cleared (PyErr_GetRaisedException). */
static PyObject *
take_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *t, *v, *tb;

    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb != NULL)
        PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
#endif
}

/* Takes lock with the GIL released (another thread may hold it for a long wait). */
static void
lock_take(PyThread_type_lock lock)
{
    if (!PyThread_acquire_lock(lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock(lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
}

/*
 * Runs call, which may wait, with the GIL released and lock held (taken
 * there too, since another thread may hold it for a long wait): the shape
 * of every library call on a handle. The caller releases lock once it has
 * read the handle's error message.
 */
#define CALL_WAITING(lock, call)                                                                   \
    do {                                                                                           \
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock((lock), WAIT_LOCK);                           \
        call;                                                                                      \
        Py_END_ALLOW_THREADS                                                                       \
    } while (0)

static const char no_server_msg[] = "no server given (pass servers or set DSJOB_SERVERS)";

/* What add_server and set_tls call on a client's or a worker's handle. */
struct handle_ops {
    int (*add_server)(void *h, const char *addr);
    int (*set_tls)(void *h, const char *ca, const char *cert, const char *key, unsigned flags);
    const char *(*errmsg)(void *h);
};

/* add_server(addr) of Client and Worker: counts the servers in *nservers. */
static PyObject *
handle_add_server(const struct handle_ops *ops, void *h, PyThread_type_lock lock, int *nservers,
                  PyObject *arg)
{
    const char *addr = PyUnicode_AsUTF8(arg);
    int err;

    if (addr == NULL)
        return NULL;
    lock_take(lock);
    err = ops->add_server(h, addr);
    PyThread_release_lock(lock);
    if (err == DSJOB_ERR_ARG)
        return PyErr_Format(PyExc_ValueError, "bad server address '%s'", addr);
    if (err != DSJOB_OK)
        return raise_err(err, "");
    (*nservers)++;
    Py_RETURN_NONE;
}

/* set_tls(ca_file, cert_file, key_file, flags) of Client, Worker and AsyncConn (lock NULL). */
static PyObject *
handle_set_tls(const struct handle_ops *ops, void *h, PyThread_type_lock lock, PyObject *args)
{
    const char *ca, *cert, *key;
    unsigned flags;
    PyObject *r = Py_None;
    int err;

    if (!PyArg_ParseTuple(args, "zzzI", &ca, &cert, &key, &flags))
        return NULL;
    if (lock != NULL)
        lock_take(lock);
    err = ops->set_tls(h, ca, cert, key, flags);
    if (err != DSJOB_OK)
        r = raise_err(err, ops->errmsg(h));
    if (lock != NULL)
        PyThread_release_lock(lock);
    return Py_XNewRef(r);
}

/*
 * A payload's bytes, as dsjob._util.to_bytes takes them: bytes, str
 * (UTF-8), None (empty) or any buffer, without a copy. Release with
 * payload_release. Returns -1 with TypeError for anything else.
 */
struct payload {
    const char *buf;
    Py_ssize_t len;
    Py_buffer view; /* view.obj set for a buffer */
};

static inline int
payload_get(PyObject *o, struct payload *p)
{
    p->view.obj = NULL;
    if (PyBytes_CheckExact(o)) {
        p->buf = PyBytes_AS_STRING(o);
        p->len = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (PyUnicode_Check(o))
        return (p->buf = PyUnicode_AsUTF8AndSize(o, &p->len)) != NULL ? 0 : -1;
    if (o == Py_None) {
        p->buf = "";
        p->len = 0;
        return 0;
    }
    if (PyObject_CheckBuffer(o)) {
        if (PyObject_GetBuffer(o, &p->view, PyBUF_SIMPLE) < 0)
            return -1;
        p->buf = p->view.buf;
        p->len = p->view.len;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "payload must be bytes or str, not %.100s", Py_TYPE(o)->tp_name);
    return -1;
}

static void
payload_release(struct payload *p)
{
    if (p->view.obj != NULL)
        PyBuffer_Release(&p->view);
}

/* ---- Client ---- */

typedef struct {
    PyObject_HEAD struct dsjob_client *c;
    PyThread_type_lock lock;
    int nservers;
    PyObject *on_data, *on_status, *on_warning; /* during a submit only */
    PyObject *cb_error;                         /* the first exception a callback raised */
} ClientObject;

static int
Client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"connect_ms", "io_ms", NULL};
    int connect_ms = 5000, io_ms = 0;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|ii", kwlist, &connect_ms, &io_ms))
        return -1;
    if (self->c == NULL) {
        self->c = dsjob_client_new();
        self->lock = PyThread_allocate_lock();
        if (self->c == NULL || self->lock == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    dsjob_client_set_timeout(self->c, connect_ms, io_ms);
    return 0;
}

static void
Client_dealloc(ClientObject *self)
{
    dsjob_client_free(self->c);
    if (self->lock != NULL)
        PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
client_add_server(void *h, const char *addr)
{
    return dsjob_client_add_server(h, addr);
}

static int
client_set_tls(void *h, const char *ca, const char *cert, const char *key, unsigned flags)
{
    return dsjob_client_set_tls(h, ca, cert, key, flags);
}

static const char *
client_errmsg(void *h)
{
    return dsjob_client_errmsg(h);
}

static const struct handle_ops client_ops = {client_add_server, client_set_tls, client_errmsg};

static PyObject *
Client_add_server(ClientObject *self, PyObject *arg)
{
    return handle_add_server(&client_ops, self->c, self->lock, &self->nservers, arg);
}

static PyObject *
Client_set_tls(ClientObject *self, PyObject *args)
{
    return handle_set_tls(&client_ops, self->c, self->lock, args);
}

/* Calls a Python callback of a foreground submit, in the thread that waits. */
static void
client_call(ClientObject *self, PyObject *fn, PyObject *arg)
{
    PyGILState_STATE g;
    PyObject *r;

    if (fn == NULL || arg == NULL) {
        Py_XDECREF(arg);
        return;
    }
    g = PyGILState_Ensure();
    if (self->cb_error == NULL) {
        r = PyObject_CallObject(fn, arg);
        if (r == NULL)
            self->cb_error = take_exception();
        Py_XDECREF(r);
    }
    Py_DECREF(arg);
    PyGILState_Release(g);
}

static void
client_cb_status(unsigned num, unsigned den, void *user)
{
    ClientObject *self = user;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *a = self->on_status ? Py_BuildValue("(II)", num, den) : NULL;

    PyGILState_Release(g);
    client_call(self, self->on_status, a);
}

static void
client_cb_bytes(ClientObject *self, PyObject *fn, const void *data, size_t len)
{
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *a = fn ? Py_BuildValue("(y#)", (const char *)data, (Py_ssize_t)len) : NULL;

    PyGILState_Release(g);
    client_call(self, fn, a);
}

static void
client_cb_data(const void *data, size_t len, void *user)
{
    ClientObject *self = user;

    client_cb_bytes(self, self->on_data, data, len);
}

static void
client_cb_warning(const void *data, size_t len, void *user)
{
    ClientObject *self = user;

    client_cb_bytes(self, self->on_warning, data, len);
}

static int
check_servers(ClientObject *self)
{
    if (self->nservers == 0) {
        PyErr_SetString(NoServer, no_server_msg);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(Client_submit_doc,
             "submit(function, payload, unique=None, priority=0, on_data=None, on_status=None,\n"
             "       on_warning=None, /) -> bytes\n\n"
             "Run a foreground job and return its WORK_COMPLETE bytes, with the GIL released\n"
             "while waiting. The callbacks get WORK_DATA and WORK_WARNING bytes and\n"
             "WORK_STATUS (numerator, denominator) as they arrive, in this thread.");

/* An optional str argument: NULL for None. */
static int
opt_str(PyObject *o, const char **out)
{
    *out = NULL;
    return o == Py_None || (*out = PyUnicode_AsUTF8(o)) != NULL ? 0 : -1;
}

static PyObject *
Client_submit(ClientObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const char *func, *unique = NULL;
    struct payload payload;
    int prio = 0, err;
    PyObject *cbs[3] = {NULL, NULL, NULL}, *res = NULL;
    void *result = NULL;
    size_t rlen = 0;
    struct dsjob_client_callbacks cb = {client_cb_status, client_cb_data, client_cb_warning};
    Py_ssize_t i;

    /* Positional only (client.py calls it so): PyArg_ParseTupleAndKeywords was a tenth of a
     * round trip's instructions. */
    if (nargs < 2 || nargs > 7)
        return PyErr_Format(PyExc_TypeError, "submit() takes 2 to 7 arguments (%zd given)", nargs);
    if ((func = PyUnicode_AsUTF8(args[0])) == NULL || (nargs > 2 && opt_str(args[2], &unique) < 0))
        return NULL;
    if (nargs > 3 && (prio = (int)PyLong_AsLong(args[3])) == -1 && PyErr_Occurred())
        return NULL;
    for (i = 4; i < nargs; i++)
        cbs[i - 4] = args[i] != Py_None ? args[i] : NULL;
    if (check_servers(self) < 0 || payload_get(args[1], &payload) < 0)
        return NULL;
    lock_take(self->lock);
    self->on_data = cbs[0];
    self->on_status = cbs[1];
    self->on_warning = cbs[2];
    self->cb_error = NULL;
    dsjob_client_set_callbacks(self->c, &cb, self);
    Py_BEGIN_ALLOW_THREADS err =
        dsjob_client_submit(self->c, func, unique, payload.buf, (size_t)payload.len,
                            (enum dsjob_priority)prio, &result, &rlen);
    Py_END_ALLOW_THREADS dsjob_client_set_callbacks(self->c, NULL, NULL);
    self->on_data = self->on_status = self->on_warning = NULL;
    if (self->cb_error != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(self->cb_error), self->cb_error);
        Py_CLEAR(self->cb_error);
    } else if (err == DSJOB_OK) {
        res = PyBytes_FromStringAndSize(result, (Py_ssize_t)rlen);
    } else {
        raise_err(err, dsjob_client_errmsg(self->c));
    }
    PyThread_release_lock(self->lock);
    dsjob_free(result);
    payload_release(&payload);
    return res;
}

PyDoc_STRVAR(Client_submit_bg_doc,
             "submit_bg(function, payload, unique=None, priority=0, at=None, after=None,\n"
             "          after_fail=0) -> str\n\n"
             "Submit a background job (at: seconds since the epoch, SUBMIT_JOB_EPOCH)\n"
             "and return its handle once a server has accepted it. after: handles\n"
             "(str) of jobs it waits for (dsjob_client_set_after), after_fail: 0 fail,\n"
             "1 cancel, 2 run.");

/* What Client_submit_bg hands to the library with the GIL released. */
struct bg_call {
    struct dsjob_client *c;
    const char *func;
    const char *unique;
    const Py_buffer *payload;
    int prio;
    bool at_set; /* SUBMIT_JOB_EPOCH at epoch */
    long long epoch;
    const char **after; /* handles to wait for, if after_set */
    Py_ssize_t nafter;
    bool after_set;
    int after_fail; /* enum dsjob_after_fail */
    char *handle;   /* out: DSJOB_HANDLE_MAX bytes */
    size_t cap;
};

static int
bg_call_run(const struct bg_call *b)
{
    int err = DSJOB_OK;

    if (b->after_set)
        err = dsjob_client_set_after(b->c, b->after, (size_t)b->nafter,
                                     (enum dsjob_after_fail)b->after_fail);
    if (err != DSJOB_OK)
        return err;
    if (b->at_set)
        return dsjob_client_submit_epoch(b->c, b->func, b->unique, b->payload->buf,
                                         (size_t)b->payload->len, (int64_t)b->epoch, b->handle,
                                         b->cap);
    return dsjob_client_submit_bg(b->c, b->func, b->unique, b->payload->buf,
                                  (size_t)b->payload->len, (enum dsjob_priority)b->prio, b->handle,
                                  b->cap);
}

/* after (a sequence of str, or None) as dsjob_client_set_after's array; -1 with an exception. */
static int
after_handles(PyObject *after, const char ***out, Py_ssize_t *n, PyObject **seq)
{
    Py_ssize_t i;

    *out = NULL;
    *n = 0;
    *seq = NULL;
    if (after == Py_None)
        return 0;
    /* A tuple of its own: the UTF-8 borrowed from its items outlives the GIL's release. */
    if (!PySequence_Check(after) || PyUnicode_Check(after)) {
        PyErr_SetString(PyExc_TypeError, "after must be a sequence of job handles");
        return -1;
    }
    *seq = PySequence_Tuple(after);
    if (*seq == NULL)
        return -1;
    *n = PySequence_Fast_GET_SIZE(*seq);
    *out = PyMem_Calloc((size_t)(*n > 0 ? *n : 1), sizeof(**out));
    if (*out == NULL) {
        Py_CLEAR(*seq);
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < *n; i++) {
        (*out)[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(*seq, i));
        if ((*out)[i] == NULL) {
            PyMem_Free(*out);
            *out = NULL;
            Py_CLEAR(*seq);
            return -1;
        }
    }
    return 0;
}

static PyObject *
Client_submit_bg(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"function", "payload", "unique",     "priority",
                             "at",       "after",   "after_fail", NULL};
    const char *func, *unique = NULL, **after_h = NULL;
    Py_buffer payload;
    int prio = 0, err, after_fail = 0;
    PyObject *at = Py_None, *after = Py_None, *after_seq = NULL, *res = NULL;
    Py_ssize_t nafter = 0;
    long long epoch = 0;
    char handle[DSJOB_HANDLE_MAX];

    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss*|ziOOi", kwlist, &func, &payload, &unique, &prio,
                                     &at, &after, &after_fail))
        return NULL;
    if (after_handles(after, &after_h, &nafter, &after_seq) < 0) {
        PyBuffer_Release(&payload);
        return NULL;
    }
    if (at != Py_None) {
        epoch = PyLong_AsLongLong(at);
        if (epoch == -1 && PyErr_Occurred())
            goto out;
    }
    if (check_servers(self) < 0)
        goto out;
    {
        struct bg_call call = {self->c,       func,   unique,        &payload, prio,
                               at != Py_None, epoch,  after_h,       nafter,   after != Py_None,
                               after_fail,    handle, sizeof(handle)};

        CALL_WAITING(self->lock, err = bg_call_run(&call));
    }
    if (err == DSJOB_OK)
        res = PyUnicode_DecodeUTF8(handle, (Py_ssize_t)strlen(handle), "surrogateescape");
    else
        raise_err(err, dsjob_client_errmsg(self->c));
    PyThread_release_lock(self->lock);
out:
    PyBuffer_Release(&payload);
    PyMem_Free(after_h);
    Py_XDECREF(after_seq);
    return res;
}

PyDoc_STRVAR(Client_status_doc,
             "status(handle=None, unique=None) -> (known, running, numerator, denominator,\n"
             "                                     waiting)\n\n"
             "Ask the servers about a job by handle (GET_STATUS) or unique key\n"
             "(GET_STATUS_UNIQUE).");

static PyObject *
Client_status(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"handle", "unique", NULL};
    const char *handle = NULL, *unique = NULL;
    struct dsjob_status st;
    PyObject *res = NULL;
    int err;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|zz", kwlist, &handle, &unique))
        return NULL;
    if ((handle == NULL) == (unique == NULL)) {
        PyErr_SetString(PyExc_TypeError, "status() takes a handle or a unique key");
        return NULL;
    }
    if (check_servers(self) < 0)
        return NULL;
    memset(&st, 0, sizeof(st));
    CALL_WAITING(self->lock, err = handle ? dsjob_client_status(self->c, handle, &st)
                                          : dsjob_client_status_unique(self->c, unique, &st));
    if (err == DSJOB_OK)
        res = Py_BuildValue("(NNIII)", PyBool_FromLong(st.known), PyBool_FromLong(st.running),
                            st.numerator, st.denominator, st.waiting);
    else
        raise_err(err, dsjob_client_errmsg(self->c));
    PyThread_release_lock(self->lock);
    return res;
}

PyDoc_STRVAR(Client_set_batch_doc, "set_batch(id)\n\n"
                                   "Make the client's later background jobs join dsjobd batch id\n"
                                   "(OPTION_REQ batch=ID); None or \"\" stops that.");

static PyObject *
Client_set_batch(ClientObject *self, PyObject *arg)
{
    const char *id = NULL;
    int err;

    if (arg != Py_None && (id = PyUnicode_AsUTF8(arg)) == NULL)
        return NULL;
    CALL_WAITING(self->lock, err = dsjob_client_set_batch(self->c, id));
    if (err != DSJOB_OK) {
        raise_err(err, dsjob_client_errmsg(self->c));
        PyThread_release_lock(self->lock);
        return NULL;
    }
    PyThread_release_lock(self->lock);
    Py_RETURN_NONE;
}

static PyObject *
Client_echo(ClientObject *self, PyObject *arg)
{
    Py_buffer data;
    int err;

    if (!PyArg_Parse(arg, "s*", &data))
        return NULL;
    if (check_servers(self) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    CALL_WAITING(self->lock, err = dsjob_client_echo(self->c, data.buf, (size_t)data.len));
    if (err != DSJOB_OK)
        raise_err(err, dsjob_client_errmsg(self->c));
    PyThread_release_lock(self->lock);
    PyBuffer_Release(&data);
    if (err != DSJOB_OK)
        return NULL;
    Py_RETURN_NONE;
}

/* One task of run_tasks: its index, and the shared record of the order they ended in. */
struct task_ctx {
    size_t index;
    struct task_run *run;
};

struct task_run {
    size_t *order; /* indexes, in the order the tasks ended */
    size_t nended;
    int background; /* created ends a task (it is only progress in the foreground) */
};

static void
task_end(struct dsjob_task *t, void *user)
{
    struct task_ctx *tc = user;

    (void)t;
    tc->run->order[tc->run->nended++] = tc->index;
}

static void
task_created(struct dsjob_task *t, const char *handle, void *user)
{
    struct task_ctx *tc = user;

    (void)handle;
    if (tc->run->background)
        task_end(t, user);
}

static void
task_complete(struct dsjob_task *t, const void *r, size_t len, void *user)
{
    (void)r;
    (void)len;
    task_end(t, user);
}

static void
task_exception(struct dsjob_task *t, const char *text, size_t len, void *user)
{
    (void)text;
    (void)len;
    task_end(t, user);
}

/*
 * A task set of one function over a sequence of payloads (and of unique
 * keys or None), run to its end with the GIL released: what run_tasks and
 * submit_many share. The tasks' results stay in ts and tasks until
 * tasks_free; with ordered, run.order lists them as they ended (submit_many
 * reads them by index and needs no callbacks).
 */
struct tasks {
    struct dsjob_taskset *ts;
    struct dsjob_task **tasks; /* by payload index */
    struct task_ctx *ctx;
    struct task_run run;
    Py_ssize_t n;
};

static void
tasks_free(struct tasks *t)
{
    dsjob_taskset_free(t->ts);
    PyMem_Free(t->tasks);
    PyMem_Free(t->ctx);
    PyMem_Free(t->run.order);
}

static int
tasks_run(ClientObject *self, struct tasks *t, const char *func, PyObject *seq, PyObject *useq,
          int prio, int background, int timeout_ms, int ordered)
{
    static const struct dsjob_task_callbacks cbs = {task_created,  NULL,     NULL,          NULL,
                                                    task_complete, task_end, task_exception};
    Py_ssize_t i, n = PySequence_Fast_GET_SIZE(seq);
    int err;

    memset(t, 0, sizeof(*t));
    t->n = n;
    t->run.background = background;
    if (useq != NULL && PySequence_Fast_GET_SIZE(useq) != n) {
        PyErr_SetString(PyExc_ValueError, "uniques and payloads differ in length");
        return -1;
    }
    t->tasks = PyMem_Calloc((size_t)n + 1, sizeof(*t->tasks));
    if (ordered) {
        t->ctx = PyMem_Calloc((size_t)n + 1, sizeof(*t->ctx));
        t->run.order = PyMem_Calloc((size_t)n + 1, sizeof(*t->run.order));
    }
    if (t->tasks == NULL || (ordered && (t->ctx == NULL || t->run.order == NULL))) {
        PyErr_NoMemory();
        return -1;
    }
    lock_take(self->lock);
    t->ts = dsjob_taskset_new(self->c, ordered ? &cbs : NULL);
    PyThread_release_lock(self->lock);
    if (t->ts == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < n; i++) {
        const char *unique = NULL;
        struct payload p;

        if (useq != NULL) {
            PyObject *u = PySequence_Fast_GET_ITEM(useq, i);

            if (u != Py_None && (unique = PyUnicode_AsUTF8(u)) == NULL)
                return -1;
        }
        if (payload_get(PySequence_Fast_GET_ITEM(seq, i), &p) < 0)
            return -1;
        if (ordered) {
            t->ctx[i].index = (size_t)i;
            t->ctx[i].run = &t->run;
        }
        err = dsjob_taskset_add(t->ts, func, unique, p.buf, (size_t)p.len,
                                (enum dsjob_priority)prio, background ? DSJOB_TASK_BACKGROUND : 0,
                                ordered ? &t->ctx[i] : NULL, &t->tasks[i]);
        payload_release(&p);
        if (err != DSJOB_OK) {
            raise_err(err, "");
            return -1;
        }
    }
    Py_BEGIN_ALLOW_THREADS err = dsjob_taskset_run(t->ts, timeout_ms);
    Py_END_ALLOW_THREADS if (err == DSJOB_ERR_NOMEM)
    {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* (index, error, errmsg, handle) of a task that failed. */
static PyObject *
task_failure(struct dsjob_task *t, Py_ssize_t index)
{
    return Py_BuildValue("(niss)", index, dsjob_task_error(t), dsjob_task_errmsg(t),
                         dsjob_task_handle(t));
}

PyDoc_STRVAR(Client_run_tasks_doc,
             "run_tasks(function, payloads, uniques=None, priority=0, background=False,\n"
             "          timeout_ms=0) -> list\n\n"
             "Submit every payload (bytes, str or None) through one C task set (pipelined,\n"
             "resubmitted to the next server when a connection fails) and wait for all.\n"
             "Returns one tuple a task, in the order they ended: (index, error, result,\n"
             "errmsg, handle) with error 0 and result the WORK_COMPLETE bytes (or None in\n"
             "the background) for a task that succeeded, else the dsjob error code and its\n"
             "text. Tasks still running at the timeout are left out.");

static PyObject *
Client_run_tasks(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"function",   "payloads",   "uniques", "priority",
                             "background", "timeout_ms", NULL};
    const char *func;
    PyObject *payloads, *uniques = Py_None, *seq = NULL, *useq = NULL, *out = NULL;
    int prio = 0, background = 0, timeout_ms = 0;
    struct tasks t;
    Py_ssize_t i;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|Oipi", kwlist, &func, &payloads, &uniques, &prio,
                                     &background, &timeout_ms))
        return NULL;
    memset(&t, 0, sizeof(t));
    if (check_servers(self) < 0)
        return NULL;
    if ((seq = PySequence_Fast(payloads, "payloads must be a sequence")) == NULL)
        return NULL;
    if (uniques != Py_None &&
        (useq = PySequence_Fast(uniques, "uniques must be a sequence")) == NULL)
        goto out;
    if (tasks_run(self, &t, func, seq, useq, prio, background, timeout_ms, 1) < 0)
        goto out;
    out = PyList_New((Py_ssize_t)t.run.nended);
    for (i = 0; out != NULL && i < (Py_ssize_t)t.run.nended; i++) {
        size_t k = t.run.order[i], len = 0;
        struct dsjob_task *task = t.tasks[k];
        int terr = dsjob_task_error(task);
        const void *r = dsjob_task_result(task, &len);
        PyObject *res, *item;

        if (terr == DSJOB_OK && !background)
            res = PyBytes_FromStringAndSize(r != NULL ? r : "", (Py_ssize_t)len);
        else
            res = Py_NewRef(Py_None);
        item = res ? Py_BuildValue("(niNss)", (Py_ssize_t)k, terr, res, dsjob_task_errmsg(task),
                                   dsjob_task_handle(task))
                   : NULL;
        if (item == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, item);
    }
out:
    tasks_free(&t);
    Py_XDECREF(seq);
    Py_XDECREF(useq);
    return out;
}

/* Interned attribute names of dsjob.Job, which submit_many fills in. */
static PyObject *str_handle, *str_function, *str_unique;

/*
 * Where a slots class keeps handle, function and unique: the offsets of
 * its member descriptors, so that submit_many stores each field with one
 * write instead of an attribute lookup (a third of a submit's cost in the
 * client). n is 0 for a class without them, which gets setattr.
 */
struct job_slots {
    PyTypeObject *type; /* the class looked at last (borrowed: compared only) */
    Py_ssize_t off[3];  /* handle, function, unique */
    int n;              /* 3 when off holds all three */
};

static void
job_slots_find(struct job_slots *js, PyTypeObject *type)
{
    PyObject *names[3] = {str_handle, str_function, str_unique};
    int i;

    js->type = type;
    js->n = 0;
    for (i = 0; i < 3; i++) {
        PyObject *d = _PyType_Lookup(type, names[i]); /* borrowed */

        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) ||
            ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX ||
            (((PyMemberDescrObject *)d)->d_member->flags & READONLY))
            return;
        js->off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    js->n = 3;
}

/* Sets job's three fields (new references taken from v, not stolen). */
static int
job_slots_set(const struct job_slots *js, PyObject *job, PyObject *const v[3])
{
    PyObject *names[3] = {str_handle, str_function, str_unique};
    int i;

    for (i = 0; i < 3; i++) {
        if (js->n == 3) {
            PyObject **slot = (PyObject **)((char *)job + js->off[i]);

            Py_XSETREF(*slot, Py_NewRef(v[i]));
        } else if (PyObject_SetAttr(job, names[i], v[i]) < 0) {
            return -1;
        }
    }
    return 0;
}

/*
 * ---- SubmittedJob (dsjob.Job: a submitted background job) ----
 *
 * What Client.submit_many returns one of a payload, and what submit and
 * the asyncio client return for a background job: handle, function and
 * unique, with the dataclass's __init__, __eq__, __repr__ and pickling
 * (client.py adds the dataclass fields). A job from submit_many keeps the
 * handle's bytes inside the object and makes the str on the first read of
 * .handle: most scripts never read most handles, and the str is a third of
 * the cost of a background submit in the client. A handle set by
 * __init__ or assignment is kept as given. The fields are str (unique
 * also None), checked on every store: a Job can then hold no reference
 * cycle, and is no object of the garbage collector (what a GC header and
 * tracking cost was a fifth of what Python adds to a submit).
 */
typedef struct {
    PyObject_VAR_HEAD PyObject *handle; /* the handle as given, or made from h; NULL if neither */
    PyObject *function;
    PyObject *unique;
    Py_ssize_t hlen;         /* bytes in h when handle is still to be made from them, else -1 */
    struct job_block *block; /* the block of submit_many it sits in, or NULL */
    char h[1];               /* ob_size bytes: the handle as the server sent it */
} SubmittedObject;

static PyTypeObject *SubmittedType; /* dsjob.Job, a heap type (client.py adds attributes) */

/*
 * submit_many's jobs are cut out of blocks of JOB_BLOCK bytes, one
 * allocation for some hundred jobs instead of one a job. A block is freed
 * with the last of its jobs (and once the submit_many that cut it is
 * done: live counts that too), so that a job kept alone keeps a block
 * alive: at most JOB_BLOCK bytes.
 */
#define JOB_BLOCK 16384
#define JOB_ALIGN 16 /* as pymalloc's */

struct job_block {
    Py_ssize_t live; /* jobs not deallocated, + 1 while it is the arena's */
};

struct job_arena {
    struct job_block *b; /* the block being cut, or NULL */
    char *next, *end;
};

static void
job_block_unref(struct job_block *b)
{
    if (--b->live == 0)
        PyMem_Free(b);
}

static void
job_arena_release(struct job_arena *a)
{
    if (a->b != NULL)
        job_block_unref(a->b);
    a->b = NULL;
}

/* A job of submit_many for handle h, function and unique (str, or None). */
static PyObject *
submitted_new(struct job_arena *a, const char *h, PyObject *function, PyObject *unique)
{
    Py_ssize_t len = (Py_ssize_t)strlen(h);
    size_t size = ((size_t)SubmittedType->tp_basicsize + (size_t)len + JOB_ALIGN - 1) &
                  ~(size_t)(JOB_ALIGN - 1);
    SubmittedObject *self;

    if (size > JOB_BLOCK / 8) {
        if ((self = PyObject_NewVar(SubmittedObject, SubmittedType, len)) == NULL)
            return NULL;
        self->block = NULL;
    } else {
        if (a->b == NULL || (size_t)(a->end - a->next) < size) {
            job_arena_release(a);
            if ((a->b = PyMem_Malloc(JOB_BLOCK)) == NULL)
                return PyErr_NoMemory();
            a->b->live = 1;
            a->next = (char *)a->b + JOB_ALIGN;
            a->end = (char *)a->b + JOB_BLOCK;
        }
        self = (SubmittedObject *)a->next;
        a->next += size;
        a->b->live++;
        self->block = a->b;
        PyObject_InitVar((PyVarObject *)self, SubmittedType, len);
    }
    memcpy(self->h, h, (size_t)len);
    self->hlen = len;
    self->handle = NULL;
    self->function = Py_NewRef(function);
    self->unique = Py_NewRef(unique);
    return (PyObject *)self;
}

static void
Submitted_dealloc(SubmittedObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);

    Py_CLEAR(self->handle);
    Py_CLEAR(self->function);
    Py_CLEAR(self->unique);
    if (self->block != NULL)
        job_block_unref(self->block);
    else
        tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Checks a field's new value: a str, or for unique also None. */
static int
submitted_check(const char *name, PyObject *v, int none_ok)
{
    if (PyUnicode_Check(v) || (none_ok && v == Py_None))
        return 0;
    PyErr_Format(PyExc_TypeError, "Job.%s must be str%s, not %.100s", name,
                 none_ok ? " or None" : "", Py_TYPE(v)->tp_name);
    return -1;
}

static PyObject *
Submitted_get_handle(SubmittedObject *self, void *closure)
{
    (void)closure;
    if (self->handle == NULL) {
        if (self->hlen < 0) {
            PyErr_SetString(PyExc_AttributeError, "handle");
            return NULL;
        }
        self->handle = PyUnicode_DecodeUTF8(self->h, self->hlen, "surrogateescape");
        if (self->handle == NULL)
            return NULL;
        self->hlen = -1;
    }
    return Py_NewRef(self->handle);
}

/* handle, function or unique (closure 0, 1, 2) set or deleted. */
static int
Submitted_set(SubmittedObject *self, PyObject *v, void *closure)
{
    static const char *const names[] = {"handle", "function", "unique"};
    int k = (int)(intptr_t)closure;
    PyObject **slot = k == 0 ? &self->handle : k == 1 ? &self->function : &self->unique;

    if (v == NULL && *slot == NULL && (k != 0 || self->hlen < 0)) {
        PyErr_SetString(PyExc_AttributeError, names[k]);
        return -1;
    }
    if (v != NULL && submitted_check(names[k], v, k == 2) < 0)
        return -1;
    Py_XSETREF(*slot, Py_XNewRef(v));
    if (k == 0)
        self->hlen = -1;
    return 0;
}

/* function or unique (closure 1, 2). */
static PyObject *
Submitted_get(SubmittedObject *self, void *closure)
{
    PyObject *v = closure == (void *)1 ? self->function : self->unique;

    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, closure == (void *)1 ? "function" : "unique");
        return NULL;
    }
    return Py_NewRef(v);
}

static int
Submitted_init(SubmittedObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"handle", "function", "unique", NULL};
    PyObject *handle, *function, *unique = Py_None;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:Job", kwlist, &handle, &function, &unique) ||
        submitted_check("handle", handle, 0) < 0 || submitted_check("function", function, 0) < 0 ||
        submitted_check("unique", unique, 1) < 0)
        return -1;
    Py_XSETREF(self->handle, Py_NewRef(handle));
    self->hlen = -1;
    Py_XSETREF(self->function, Py_NewRef(function));
    Py_XSETREF(self->unique, Py_NewRef(unique));
    return 0;
}

static PyObject *
Submitted_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    SubmittedObject *self = (SubmittedObject *)type->tp_alloc(type, 0);

    (void)args;
    (void)kw;
    if (self != NULL)
        self->hlen = -1;
    return (PyObject *)self;
}

/* (handle, function, unique): what equality compares and what pickles. */
static PyObject *
submitted_fields(SubmittedObject *self)
{
    PyObject *h = Submitted_get_handle(self, NULL);

    if (h == NULL)
        return NULL;
    if (self->function == NULL || self->unique == NULL) {
        Py_DECREF(h);
        PyErr_SetString(PyExc_AttributeError, self->function == NULL ? "function" : "unique");
        return NULL;
    }
    return Py_BuildValue("(NOO)", h, self->function, self->unique);
}

/* As the dataclass's __eq__: the same class and equal fields. */
static PyObject *
Submitted_richcompare(PyObject *a, PyObject *b, int op)
{
    PyObject *fa, *fb, *r;

    if ((op != Py_EQ && op != Py_NE) || Py_TYPE(a) != Py_TYPE(b))
        Py_RETURN_NOTIMPLEMENTED;
    if ((fa = submitted_fields((SubmittedObject *)a)) == NULL)
        return NULL;
    if ((fb = submitted_fields((SubmittedObject *)b)) == NULL) {
        Py_DECREF(fa);
        return NULL;
    }
    r = PyObject_RichCompare(fa, fb, op);
    Py_DECREF(fa);
    Py_DECREF(fb);
    return r;
}

/* As the dataclass's: Job(handle='H:host:1', function='f', unique=None). */
static PyObject *
Submitted_repr(SubmittedObject *self)
{
    PyObject *name, *f, *r = NULL;
    int rc = Py_ReprEnter((PyObject *)self);

    if (rc != 0)
        return rc > 0 ? PyUnicode_FromString("...") : NULL;
    name = PyType_GetQualName(Py_TYPE(self));
    f = name ? submitted_fields(self) : NULL;
    if (f != NULL)
        r = PyUnicode_FromFormat("%U(handle=%R, function=%R, unique=%R)", name,
                                 PyTuple_GET_ITEM(f, 0), PyTuple_GET_ITEM(f, 1),
                                 PyTuple_GET_ITEM(f, 2));
    Py_XDECREF(name);
    Py_XDECREF(f);
    Py_ReprLeave((PyObject *)self);
    return r;
}

/* Pickles as Job(handle, function, unique), with a subclass's __dict__. */
static PyObject *
Submitted_reduce(SubmittedObject *self, PyObject *unused)
{
    PyObject *f = submitted_fields(self), *d;

    (void)unused;
    if (f == NULL)
        return NULL;
    d = PyObject_GetAttrString((PyObject *)self, "__dict__");
    if (d == NULL) {
        PyErr_Clear();
    } else if (PyDict_Check(d) && PyDict_GET_SIZE(d) > 0) {
        return Py_BuildValue("(ONN)", Py_TYPE(self), f, d);
    }
    Py_XDECREF(d);
    return Py_BuildValue("(ON)", Py_TYPE(self), f);
}

static PyGetSetDef Submitted_getset[] = {
    {"handle", (getter)Submitted_get_handle, (setter)Submitted_set,
     "The job's handle (str), as the server named it.", (void *)0},
    {"function", (getter)Submitted_get, (setter)Submitted_set,
     "The function the job was submitted to (str).", (void *)1},
    {"unique", (getter)Submitted_get, (setter)Submitted_set, "The job's unique key (str), or None.",
     (void *)2},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Submitted_methods[] = {
    {"__reduce__", (PyCFunction)Submitted_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Submitted_slots[] = {
    {Py_tp_doc, "Job(handle, function, unique=None)\n--\n\n"
                "A submitted background job: ``handle`` is the server's name for it."},
    {Py_tp_new, Submitted_new},
    {Py_tp_init, Submitted_init},
    {Py_tp_dealloc, Submitted_dealloc},
    {Py_tp_richcompare, Submitted_richcompare},
    {Py_tp_hash, PyObject_HashNotImplemented},
    {Py_tp_repr, Submitted_repr},
    {Py_tp_getset, Submitted_getset},
    {Py_tp_methods, Submitted_methods},
    {0, NULL},
};

static PyType_Spec Submitted_spec = {
    .name = "dsjob.Job",
    .basicsize = (int)offsetof(SubmittedObject, h),
    .itemsize = 1,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = Submitted_slots,
};

PyDoc_STRVAR(Client_submit_many_doc,
             "submit_many(function, payloads, uniques, priority, job) -> (jobs, failures)\n\n"
             "Submit every payload as a background job through one C task set. jobs has\n"
             "one instance of the class job a payload, in their order (None for one that\n"
             "failed), made without calling its __init__: its handle, function and unique\n"
             "attributes are set (for SubmittedJob, dsjob.Job, the handle's str is made on\n"
             "its first read). failures has (index, error, errmsg, handle) a failure.");

static PyObject *
Client_submit_many(ClientObject *self, PyObject *args)
{
    const char *func;
    PyObject *fname, *payloads, *uniques, *seq = NULL, *useq = NULL, *jobs = NULL, *fails = NULL;
    PyObject *v[3];
    PyTypeObject *job_type;
    static struct job_slots slots;
    struct job_arena arena = {NULL, NULL, NULL};
    int prio, gc_was;
    struct tasks t;
    Py_ssize_t i;

    if (!PyArg_ParseTuple(args, "UOOiO!", &fname, &payloads, &uniques, &prio, &PyType_Type,
                          &job_type))
        return NULL;
    memset(&t, 0, sizeof(t));
    if ((func = PyUnicode_AsUTF8(fname)) == NULL || check_servers(self) < 0)
        return NULL;
    if ((seq = PySequence_Fast(payloads, "payloads must be a sequence")) == NULL)
        return NULL;
    if (uniques != Py_None &&
        (useq = PySequence_Fast(uniques, "uniques must be a sequence")) == NULL)
        goto out;
    if (tasks_run(self, &t, func, seq, useq, prio, 1, 0, 0) < 0)
        goto out;
    if (job_type != SubmittedType && slots.type != job_type)
        job_slots_find(&slots, job_type);
    v[1] = fname;
    /*
     * n jobs that hold only strings: no collection can free any of them,
     * and a collection every 700 allocations would walk them all again.
     */
    gc_was = PyGC_Disable();
    jobs = PyList_New(t.n);
    fails = PyList_New(0);
    for (i = 0; jobs != NULL && fails != NULL && i < t.n; i++) {
        struct dsjob_task *task = t.tasks[i];
        const char *h = dsjob_task_handle(task);
        PyObject *job, *handle;

        if (dsjob_task_error(task) != DSJOB_OK) {
            PyObject *f = task_failure(task, i);

            if (f == NULL || PyList_Append(fails, f) < 0) {
                Py_XDECREF(f);
                Py_CLEAR(jobs);
                break;
            }
            Py_DECREF(f);
            PyList_SET_ITEM(jobs, i, Py_NewRef(Py_None));
            continue;
        }
        if (job_type == SubmittedType) {
            job =
                submitted_new(&arena, h, fname, useq ? PySequence_Fast_GET_ITEM(useq, i) : Py_None);
            if (job == NULL) {
                Py_CLEAR(jobs);
                break;
            }
            PyList_SET_ITEM(jobs, i, job);
            continue;
        }
        job = job_type->tp_alloc(job_type, 0);
        handle = PyUnicode_DecodeUTF8(h, (Py_ssize_t)strlen(h), "surrogateescape");
        if (job != NULL && handle != NULL) {
            v[0] = handle;
            v[2] = useq ? PySequence_Fast_GET_ITEM(useq, i) : Py_None;
        }
        if (job == NULL || handle == NULL || job_slots_set(&slots, job, v) < 0) {
            Py_XDECREF(job);
            Py_XDECREF(handle);
            Py_CLEAR(jobs);
            break;
        }
        Py_DECREF(handle);
        PyList_SET_ITEM(jobs, i, job);
    }
    job_arena_release(&arena);
    if (gc_was)
        PyGC_Enable();
out:
    tasks_free(&t);
    Py_XDECREF(seq);
    Py_XDECREF(useq);
    if (jobs == NULL || fails == NULL) {
        Py_XDECREF(jobs);
        Py_XDECREF(fails);
        return NULL;
    }
    return Py_BuildValue("(NN)", jobs, fails);
}

static PyMethodDef Client_methods[] = {
    {"add_server", (PyCFunction)Client_add_server, METH_O,
     "add_server(addr): add a server, \"host:port\", \"[v6]:port\" or a unix socket path."},
    {"set_tls", (PyCFunction)Client_set_tls, METH_VARARGS,
     "set_tls(ca_file, cert_file, key_file, flags): connect with TLS (dsjob_client_set_tls)."},
    {"submit", (PyCFunction)(void (*)(void))Client_submit, METH_FASTCALL, Client_submit_doc},
    {"submit_bg", (PyCFunction)(void (*)(void))Client_submit_bg, METH_VARARGS | METH_KEYWORDS,
     Client_submit_bg_doc},
    {"status", (PyCFunction)(void (*)(void))Client_status, METH_VARARGS | METH_KEYWORDS,
     Client_status_doc},
    {"set_batch", (PyCFunction)Client_set_batch, METH_O, Client_set_batch_doc},
    {"echo", (PyCFunction)Client_echo, METH_O,
     "echo(data): check that every server echoes data back."},
    {"run_tasks", (PyCFunction)(void (*)(void))Client_run_tasks, METH_VARARGS | METH_KEYWORDS,
     Client_run_tasks_doc},
    {"submit_many", (PyCFunction)Client_submit_many, METH_VARARGS, Client_submit_many_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dsjob._dsjob.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Client(connect_ms=5000, io_ms=0): a libdsjobclient handle (struct dsjob_client).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Client_init,
    .tp_dealloc = (destructor)Client_dealloc,
    .tp_methods = Client_methods,
};

/* ---- Job (a worker's current job) ---- */

typedef struct {
    PyObject_HEAD struct dsjob_job *job; /* NULL once the handler has returned */
    PyObject *payload;                   /* bytes, made on first access */
} JobObject;

static void
Job_dealloc(JobObject *self)
{
    Py_XDECREF(self->payload);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
job_live(JobObject *self)
{
    if (self->job == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the job has ended: use it only in its handler");
        return -1;
    }
    return 0;
}

static PyObject *
Job_get_payload(JobObject *self, void *closure)
{
    (void)closure;
    if (self->payload == NULL) {
        size_t len = 0;
        const void *p;

        if (job_live(self) < 0)
            return NULL;
        p = dsjob_job_payload(self->job, &len);
        self->payload = PyBytes_FromStringAndSize(p, (Py_ssize_t)len);
        if (self->payload == NULL)
            return NULL;
    }
    return Py_NewRef(self->payload);
}

static PyObject *
Job_get_str(JobObject *self, void *closure)
{
    const char *s;

    if (job_live(self) < 0)
        return NULL;
    s = closure == (void *)0   ? dsjob_job_handle(self->job)
        : closure == (void *)1 ? dsjob_job_unique(self->job)
                               : dsjob_job_function(self->job);
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "surrogateescape");
}

static PyObject *
job_send(JobObject *self, PyObject *arg, int kind)
{
    Py_buffer b;
    int err;

    if (job_live(self) < 0 || !PyArg_Parse(arg, "s*", &b))
        return NULL;
    Py_BEGIN_ALLOW_THREADS err = kind == 0 ? dsjob_job_data(self->job, b.buf, (size_t)b.len)
                                           : dsjob_job_warning(self->job, b.buf, (size_t)b.len);
    Py_END_ALLOW_THREADS PyBuffer_Release(&b);
    if (err != DSJOB_OK)
        return raise_err(err, "the job's connection failed: the server will requeue it");
    Py_RETURN_NONE;
}

static PyObject *
Job_send_data(JobObject *self, PyObject *arg)
{
    return job_send(self, arg, 0);
}

static PyObject *
Job_warn(JobObject *self, PyObject *arg)
{
    return job_send(self, arg, 1);
}

static PyObject *
Job_send_status(JobObject *self, PyObject *args)
{
    unsigned num, den;
    int err;

    if (job_live(self) < 0 || !PyArg_ParseTuple(args, "II", &num, &den))
        return NULL;
    Py_BEGIN_ALLOW_THREADS err = dsjob_job_status(self->job, num, den);
    Py_END_ALLOW_THREADS if (err != DSJOB_OK) return raise_err(
        err, "the job's connection failed: the server will requeue it");
    Py_RETURN_NONE;
}

static PyGetSetDef Job_getset[] = {
    {"payload", (getter)Job_get_payload, NULL, "The job's payload (bytes).", NULL},
    {"handle", (getter)Job_get_str, NULL, "The job's handle, as the server named it.", (void *)0},
    {"unique", (getter)Job_get_str, NULL, "The job's unique key, \"\" for none.", (void *)1},
    {"function", (getter)Job_get_str, NULL, "The function the job was submitted to.", (void *)2},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Job_methods[] = {
    {"send_data", (PyCFunction)Job_send_data, METH_O,
     "send_data(data): send a WORK_DATA chunk (bytes or str) to the waiting clients now."},
    {"send_status", (PyCFunction)Job_send_status, METH_VARARGS,
     "send_status(numerator, denominator): send WORK_STATUS now."},
    {"warn", (PyCFunction)Job_warn, METH_O, "warn(text): send a WORK_WARNING now."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject JobType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dsjob.WorkerJob",
    .tp_basicsize = sizeof(JobObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The job a worker's handler runs: payload, handle, unique, function, and\n"
              "send_data(), send_status(), warn(). Valid only while the handler runs.",
    .tp_dealloc = (destructor)Job_dealloc,
    .tp_getset = Job_getset,
    .tp_methods = Job_methods,
};

/* ---- Worker ---- */

struct handler;

typedef struct {
    PyObject_HEAD struct dsjob_worker *w;
    PyThread_type_lock lock;
    struct handler
        *handlers; /* the functions registered, each the user pointer of its C callback */
    int nservers;
    int nfuncs;
    /*
     * The thread states that Worker.run made for the library's own threads
     * (one each, on its first job, kept for the next ones) and deletes once
     * the library has joined them: run's concurrency - 1 slots.
     */
    PyInterpreterState *interp;
    PyThread_type_lock tslock;
    PyThreadState **tstates;
    size_t ntstates, maxtstates;
} WorkerObject;

/* A registered function: the handler, and the fallback for what the C dispatch does not do. */
struct handler {
    WorkerObject *worker; /* borrowed: the worker outlives the jobs it runs */
    PyObject *fn, *fallback;
    struct handler *next;
};

static int
Worker_init(WorkerObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"connect_ms", "io_ms", NULL};
    int connect_ms = 5000, io_ms = 30000;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|ii", kwlist, &connect_ms, &io_ms))
        return -1;
    if (self->w == NULL) {
        self->w = dsjob_worker_new();
        self->lock = PyThread_allocate_lock();
        self->tslock = PyThread_allocate_lock();
        self->interp = PyInterpreterState_Get();
        if (self->w == NULL || self->lock == NULL || self->tslock == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    dsjob_worker_set_timeout(self->w, connect_ms, io_ms);
    return 0;
}

static void
Worker_dealloc(WorkerObject *self)
{
    PyObject_GC_UnTrack(self);
    dsjob_worker_free(self->w);
    if (self->lock != NULL)
        PyThread_free_lock(self->lock);
    if (self->tslock != NULL)
        PyThread_free_lock(self->tslock);
    while (self->handlers != NULL) {
        struct handler *h = self->handlers;

        self->handlers = h->next;
        Py_XDECREF(h->fn);
        Py_XDECREF(h->fallback);
        PyMem_Free(h);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Worker_traverse(WorkerObject *self, visitproc visit, void *arg)
{
    for (struct handler *h = self->handlers; h != NULL; h = h->next) {
        Py_VISIT(h->fn);
        Py_VISIT(h->fallback);
    }
    return 0;
}

static int
Worker_clear(WorkerObject *self)
{
    for (struct handler *h = self->handlers; h != NULL; h = h->next) {
        Py_CLEAR(h->fn);
        Py_CLEAR(h->fallback);
    }
    return 0;
}

static int
worker_add_server(void *h, const char *addr)
{
    return dsjob_worker_add_server(h, addr);
}

static int
worker_set_tls(void *h, const char *ca, const char *cert, const char *key, unsigned flags)
{
    return dsjob_worker_set_tls(h, ca, cert, key, flags);
}

static const char *
worker_errmsg(void *h)
{
    return dsjob_worker_errmsg(h);
}

static const struct handle_ops worker_ops = {worker_add_server, worker_set_tls, worker_errmsg};

static PyObject *
Worker_add_server(WorkerObject *self, PyObject *arg)
{
    return handle_add_server(&worker_ops, self->w, self->lock, &self->nservers, arg);
}

static PyObject *
Worker_set_tls(WorkerObject *self, PyObject *args)
{
    return handle_set_tls(&worker_ops, self->w, self->lock, args);
}

static PyObject *
Worker_set_id(WorkerObject *self, PyObject *arg)
{
    const char *id = PyUnicode_AsUTF8(arg);
    int err;

    if (id == NULL)
        return NULL;
    lock_take(self->lock);
    err = dsjob_worker_set_id(self->w, id);
    PyThread_release_lock(self->lock);
    if (err != DSJOB_OK)
        return raise_err(err, "");
    Py_RETURN_NONE;
}

/*
 * The result of a handler that returned r: bytes, str (UTF-8) or None
 * complete the job here; anything else, or an exception (r NULL), goes to
 * the fallback, fallback(job, result, exception) -> (code, bytes), which
 * logs, formats "Type: message" and maps WorkFail and GiveBack. An
 * exception that is not an Exception (SystemExit, KeyboardInterrupt) or a
 * fallback that fails fails the job. Called with the GIL.
 */
static int
handler_result(struct handler *h, JobObject *jo, PyObject *r)
{
    PyObject *exc = NULL, *out;
    const char *buf;
    Py_ssize_t len;
    int rc = DSJOB_WORK_FAIL;

    if (r == Py_None)
        return DSJOB_WORK_COMPLETE;
    if (r != NULL && (PyBytes_CheckExact(r) || PyUnicode_CheckExact(r))) {
        buf = PyBytes_CheckExact(r) ? PyBytes_AS_STRING(r) : PyUnicode_AsUTF8AndSize(r, &len);
        if (buf != NULL) {
            if (PyBytes_CheckExact(r))
                len = PyBytes_GET_SIZE(r);
            if (len == 0) /* the job has no result yet: it completes empty, with no copy */
                return DSJOB_WORK_COMPLETE;
            return dsjob_job_set_result(jo->job, buf, (size_t)len) == DSJOB_OK ? DSJOB_WORK_COMPLETE
                                                                               : DSJOB_WORK_FAIL;
        }
        r = NULL; /* a str with lone surrogates: its UnicodeEncodeError goes to the fallback */
    }
    if (r == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return DSJOB_WORK_FAIL;
        exc = take_exception();
    }
    out = h->fallback == NULL
              ? NULL
              : PyObject_CallFunctionObjArgs(h->fallback, (PyObject *)jo, r ? r : Py_None,
                                             exc ? exc : Py_None, NULL);
    Py_XDECREF(exc);
    if (out != NULL && PyTuple_Check(out) && PyTuple_GET_SIZE(out) == 2 &&
        PyBytes_Check(PyTuple_GET_ITEM(out, 1))) {
        int code = (int)PyLong_AsLong(PyTuple_GET_ITEM(out, 0));
        PyObject *b = PyTuple_GET_ITEM(out, 1);

        if (code != -1 || !PyErr_Occurred()) {
            rc = code;
            if ((code == DSJOB_WORK_COMPLETE || code == DSJOB_WORK_EXCEPTION) &&
                dsjob_job_set_result(jo->job, PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b)) !=
                    DSJOB_OK)
                rc = DSJOB_WORK_FAIL;
        }
    } else if (out != NULL) {
        PyErr_SetString(PyExc_TypeError, "the worker's fallback returned no (code, bytes)");
    }
    Py_XDECREF(out);
    return rc;
}

/*
 * The thread state of a thread of libdsjobworker's own, made on its first
 * job and kept in the thread (PyGILState_GetThisThreadState finds it from
 * then on) until Worker.run deletes it; NULL when run left no slot.
 */
static PyThreadState *
worker_new_tstate(WorkerObject *wo)
{
    PyThreadState *ts = NULL;

    PyThread_acquire_lock(wo->tslock, WAIT_LOCK);
    if (wo->ntstates < wo->maxtstates && (ts = PyThreadState_New(wo->interp)) != NULL)
        wo->tstates[wo->ntstates++] = ts;
    PyThread_release_lock(wo->tslock);
    return ts;
}

/* Deletes the thread states of the library's threads, joined by now; with the GIL. */
static void
worker_free_tstates(WorkerObject *wo)
{
    size_t i;

    for (i = 0; i < wo->ntstates; i++) {
        PyThreadState_Clear(wo->tstates[i]);
        PyThreadState_Delete(wo->tstates[i]);
    }
    PyMem_Free(wo->tstates);
    wo->tstates = NULL;
    wo->ntstates = wo->maxtstates = 0;
}

/*
 * Jobs that their handler did not keep, for the next jobs: a job costs no
 * allocation then. Used with the GIL held, by every worker's threads.
 */
#define JOB_SPARES 16
static JobObject *job_spares[JOB_SPARES];
static int njob_spares;

/*
 * The C callback of every function, in whichever thread runs the job (the
 * GIL not held): takes the GIL with the thread's state (a thread of
 * Python's has its own; a library thread keeps the one of its first job),
 * calls the handler with a Job, and drops the GIL.
 */
static int
worker_cb(struct dsjob_job *job, void *user)
{
    struct handler *h = user;
    PyThreadState *ts = PyGILState_GetThisThreadState();
    PyGILState_STATE g = PyGILState_UNLOCKED;
    JobObject *jo;
    int rc = DSJOB_WORK_FAIL;

    if (ts == NULL)
        ts = worker_new_tstate(h->worker);
    if (ts != NULL)
        PyEval_RestoreThread(ts);
    else
        g = PyGILState_Ensure(); /* no slot: a state for this job only */
    jo = njob_spares > 0 ? job_spares[--njob_spares] : PyObject_New(JobObject, &JobType);
    if (jo != NULL && h->fn != NULL) {
        PyObject *r;

        jo->job = job;
        jo->payload = NULL;
        r = PyObject_CallOneArg(h->fn, (PyObject *)jo);
        rc = handler_result(h, jo, r);
        Py_XDECREF(r);
        jo->job = NULL;
    }
    if (jo != NULL && Py_REFCNT(jo) == 1 && njob_spares < JOB_SPARES) {
        Py_CLEAR(jo->payload);
        job_spares[njob_spares++] = jo;
    } else {
        Py_XDECREF(jo);
    }
    if (PyErr_Occurred())
        PyErr_WriteUnraisable(h->fn);
    if (ts != NULL)
        PyEval_SaveThread();
    else
        PyGILState_Release(g);
    return rc;
}

static PyObject *
Worker_register(WorkerObject *self, PyObject *args)
{
    const char *name;
    PyObject *fn, *fallback;
    int timeout_ms = 0, err;
    struct handler *h;

    if (!PyArg_ParseTuple(args, "sOO|i", &name, &fn, &fallback, &timeout_ms))
        return NULL;
    if (!PyCallable_Check(fn) || !PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "the handler must be callable");
        return NULL;
    }
    h = PyMem_Malloc(sizeof(*h));
    if (h == NULL)
        return PyErr_NoMemory();
    h->worker = self;
    h->fn = Py_NewRef(fn);
    h->fallback = Py_NewRef(fallback);
    h->next = self->handlers;
    self->handlers = h;
    lock_take(self->lock);
    err = dsjob_worker_register(self->w, name, worker_cb, h, timeout_ms);
    PyThread_release_lock(self->lock);
    if (err == DSJOB_ERR_ARG)
        return PyErr_Format(PyExc_ValueError, "function '%s' is empty or already registered", name);
    if (err != DSJOB_OK)
        return raise_err(err, "");
    self->nfuncs++;
    Py_RETURN_NONE;
}

/* The worker that SIGTERM and SIGINT stop during run() in the main thread. */
static struct dsjob_worker *volatile sig_worker;
static volatile sig_atomic_t sig_caught;

static void
on_stop_signal(int sig)
{
    struct dsjob_worker *w = sig_worker;

    sig_caught = sig;
    if (w != NULL)
        dsjob_worker_stop(w);
}

static int
worker_ready(WorkerObject *self)
{
    if (self->nservers == 0) {
        PyErr_SetString(NoServer, no_server_msg);
        return -1;
    }
    if (self->nfuncs == 0) {
        PyErr_SetString(PyExc_ValueError, "no function registered");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(Worker_run_doc,
             "run(concurrency=1, handle_signals=False) -> int\n\n"
             "Run jobs until stop(), concurrency at once (threads of libdsjobworker, each\n"
             "with its own connections), with the GIL released while waiting. In the main\n"
             "thread, with handle_signals, SIGTERM and SIGINT stop taking jobs and let the\n"
             "running ones finish; the old handlers are back when run returns. Returns\n"
             "the signal that stopped it, or 0.");

static PyObject *
Worker_run(WorkerObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"concurrency", "handle_signals", NULL};
    int n = 1, handle = 0, err, caught = 0;
    struct sigaction sa, old_term, old_int;
    bool signals;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|ip", kwlist, &n, &handle))
        return NULL;
    if (worker_ready(self) < 0)
        return NULL;
    if (dsjob_worker_set_concurrency(self->w, n) != DSJOB_OK) {
        PyErr_SetString(PyExc_ValueError, "concurrency must be 1 or more");
        return NULL;
    }
    signals = handle && sig_worker == NULL;
    lock_take(self->lock);
    if (n > 1 && (self->tstates = PyMem_Calloc((size_t)n - 1, sizeof(*self->tstates))) != NULL)
        self->maxtstates = (size_t)n - 1;
    if (signals) {
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_stop_signal;
        sigemptyset(&sa.sa_mask);
        sig_caught = 0;
        sig_worker = self->w;
        sigaction(SIGTERM, &sa, &old_term);
        sigaction(SIGINT, &sa, &old_int);
    }
    Py_BEGIN_ALLOW_THREADS err = dsjob_worker_run(self->w);
    Py_END_ALLOW_THREADS if (signals)
    {
        sigaction(SIGTERM, &old_term, NULL);
        sigaction(SIGINT, &old_int, NULL);
        sig_worker = NULL;
        caught = sig_caught;
    }
    worker_free_tstates(self);
    if (err != DSJOB_OK) {
        raise_err(err, dsjob_worker_errmsg(self->w));
        PyThread_release_lock(self->lock);
        return NULL;
    }
    PyThread_release_lock(self->lock);
    return PyLong_FromLong(caught);
}

static PyObject *
Worker_work(WorkerObject *self, PyObject *args)
{
    int timeout_ms = 0, err;

    if (!PyArg_ParseTuple(args, "|i", &timeout_ms))
        return NULL;
    if (worker_ready(self) < 0)
        return NULL;
    CALL_WAITING(self->lock, err = dsjob_worker_work(self->w, timeout_ms));
    PyThread_release_lock(self->lock);
    if (err == DSJOB_ERR_TIMEOUT || err == DSJOB_ERR_STATE)
        Py_RETURN_FALSE;
    if (err != DSJOB_OK)
        return raise_err(err, dsjob_worker_errmsg(self->w));
    Py_RETURN_TRUE;
}

static PyObject *
Worker_stop(WorkerObject *self, PyObject *unused)
{
    (void)unused;
    dsjob_worker_stop(self->w);
    Py_RETURN_NONE;
}

static PyMethodDef Worker_methods[] = {
    {"add_server", (PyCFunction)Worker_add_server, METH_O,
     "add_server(addr): add a server, as Client.add_server."},
    {"set_tls", (PyCFunction)Worker_set_tls, METH_VARARGS,
     "set_tls(ca_file, cert_file, key_file, flags): connect with TLS (dsjob_worker_set_tls)."},
    {"set_id", (PyCFunction)Worker_set_id, METH_O,
     "set_id(id): the id the server's \"workers\" command shows."},
    {"register", (PyCFunction)Worker_register, METH_VARARGS,
     "register(name, handler, fallback, timeout_ms=0): announce a function. handler(job)\n"
     "returning bytes, str or None completes the job; for an exception or another\n"
     "result, fallback(job, result, exception) returns (code, bytes) with code an\n"
     "enum dsjob_work_result."},
    {"run", (PyCFunction)(void (*)(void))Worker_run, METH_VARARGS | METH_KEYWORDS, Worker_run_doc},
    {"work", (PyCFunction)Worker_work, METH_VARARGS,
     "work(timeout_ms=0) -> bool: run one job; False when none came or stopped."},
    {"stop", (PyCFunction)Worker_stop, METH_NOARGS,
     "stop(): stop taking jobs; running ones finish (from any thread)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WorkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dsjob._dsjob.Worker",
    .tp_basicsize = sizeof(WorkerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Worker(connect_ms=5000, io_ms=30000): a libdsjobworker handle.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Worker_init,
    .tp_dealloc = (destructor)Worker_dealloc,
    .tp_traverse = (traverseproc)Worker_traverse,
    .tp_clear = (inquiry)Worker_clear,
    .tp_methods = Worker_methods,
};

/* ---- Server ---- */

typedef struct {
    PyObject_HEAD struct dsjob_server *srv;
    int started; /* dsjob_server_start ran and join did not yet */
    int result;  /* what join returned */
} ServerObject;

enum opt_type { OPT_INT, OPT_UINT, OPT_SIZE, OPT_BOOL, OPT_STR, OPT_LEVEL, OPT_LIST };

struct opt {
    const char *name;
    enum opt_type type;
    size_t off;
};

#define OPT(name, type)                                                                            \
    {                                                                                              \
#name, type, offsetof(struct dsjob_server_config, name)                                    \
    }
static const struct opt server_opts[] = {
    OPT(listen, OPT_LIST),
    OPT(port, OPT_INT),
    OPT(unix_socket, OPT_STR),
    OPT(backlog, OPT_INT),
    OPT(keepalive, OPT_BOOL),
    OPT(max_packet_size, OPT_SIZE),
    OPT(max_output_buffer, OPT_SIZE),
    OPT(max_connections, OPT_UINT),
    OPT(max_jobs, OPT_UINT),
    OPT(max_queue, OPT_UINT),
    OPT(job_retries, OPT_UINT),
    OPT(round_robin, OPT_BOOL),
    OPT(exceptions, OPT_BOOL),
    OPT(job_handle_prefix, OPT_STR),
    OPT(log_file, OPT_STR),
    OPT(verbose, OPT_LEVEL),
    OPT(store, OPT_STR),
    OPT(work_dir, OPT_STR),
    OPT(store_db, OPT_STR),
    OPT(store_sync, OPT_INT),
    OPT(store_batch, OPT_UINT),
    OPT(store_commit_interval_ms, OPT_UINT),
    OPT(memcached_servers, OPT_STR),
    OPT(memcached_prefix, OPT_STR),
    OPT(idle_timeout, OPT_UINT),
    OPT(retry_on, OPT_UINT),
    OPT(retry_backoff_base_ms, OPT_UINT),
    OPT(retry_backoff_max_ms, OPT_UINT),
    OPT(max_dead, OPT_UINT),
    OPT(keep_results, OPT_UINT),
    OPT(max_result_size, OPT_SIZE),
    OPT(reject_no_worker, OPT_BOOL),
    OPT(priority_aging, OPT_UINT),
    OPT(ssl, OPT_BOOL),
    OPT(ssl_certificate, OPT_STR),
    OPT(ssl_key, OPT_STR),
    OPT(ssl_ca_file, OPT_STR),
    OPT(ssl_verify_client, OPT_BOOL),
    OPT(http_port, OPT_INT),
    OPT(http_listen, OPT_STR),
    OPT(job_timeout, OPT_UINT),
    OPT(pg_dsn, OPT_STR),
    OPT(pg_lease, OPT_UINT),
    OPT(pg_prefetch, OPT_UINT),
    OPT(pg_poll_ms, OPT_UINT),
    OPT(http_admin, OPT_BOOL),
    OPT(store_async_ends, OPT_BOOL),
};
#undef OPT

/* Sets one option of cfg from value; strings borrow from value (kept alive by the caller). */
static int
set_opt(struct dsjob_server_config *cfg, const struct opt *o, PyObject *value)
{
    char *field = (char *)cfg + o->off;
    unsigned long long u;
    long l;

    switch (o->type) {
    case OPT_INT:
        l = PyLong_AsLong(value);
        if (l == -1 && PyErr_Occurred())
            return -1;
        if (l < INT_MIN || l > INT_MAX)
            goto range;
        *(int *)field = (int)l;
        return 0;
    case OPT_UINT:
    case OPT_SIZE:
        u = PyLong_AsUnsignedLongLong(value);
        if (u == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        if (o->type == OPT_UINT) {
            if (u > UINT_MAX)
                goto range;
            *(unsigned *)field = (unsigned)u;
        } else {
            *(size_t *)field = (size_t)u;
        }
        return 0;
    case OPT_BOOL:
        l = PyObject_IsTrue(value);
        if (l < 0)
            return -1;
        *(bool *)field = l != 0;
        return 0;
    case OPT_STR:
        if (value == Py_None) {
            *(const char **)field = NULL;
            return 0;
        }
        if ((*(const char **)field = PyUnicode_AsUTF8(value)) == NULL)
            return -1;
        return 0;
    case OPT_LEVEL:
        if (PyLong_Check(value)) {
            l = PyLong_AsLong(value);
        } else {
            const char *s = PyUnicode_AsUTF8(value);

            if (s == NULL)
                return -1;
            l = dsjob_server_log_level(s);
        }
        if (l < DSJOB_LOG_FATAL || l > DSJOB_LOG_DEBUG) {
            PyErr_Format(PyExc_ValueError, "verbose: unknown log level %R", value);
            return -1;
        }
        cfg->verbose = (enum dsjob_log_level)l;
        return 0;
    case OPT_LIST: {
        Py_ssize_t i, n;

        if (PyUnicode_Check(value)) {
            cfg->listen[0] = PyUnicode_AsUTF8(value);
            cfg->nlisten = 1;
            return cfg->listen[0] ? 0 : -1;
        }
        if (!PyList_Check(value) && !PyTuple_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "listen: a string or a list of strings");
            return -1;
        }
        n = PySequence_Fast_GET_SIZE(value);
        if (n > DSJOB_SERVER_MAX_LISTEN) {
            PyErr_Format(PyExc_ValueError, "listen: at most %d addresses", DSJOB_SERVER_MAX_LISTEN);
            return -1;
        }
        for (i = 0; i < n; i++)
            if ((cfg->listen[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(value, i))) == NULL)
                return -1;
        cfg->nlisten = (int)n;
        return 0;
    }
    }
range:
    PyErr_Format(PyExc_ValueError, "%s: %R is out of range", o->name, value);
    return -1;
}

static int
Server_init(ServerObject *self, PyObject *args, PyObject *kw)
{
    struct dsjob_server_config cfg;
    PyObject *key, *value, *opts = NULL;
    Py_ssize_t pos = 0;
    char errbuf[512];
    int err;

    if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &opts))
        return -1;
    if (self->srv != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the server is already made");
        return -1;
    }
    (void)kw;
    dsjob_server_config_init(&cfg);
    cfg.log_file = "none";
    while (PyDict_Next(opts, &pos, &key, &value)) {
        const char *name = PyUnicode_AsUTF8(key);
        size_t i;

        if (name == NULL)
            return -1;
        for (i = 0; i < sizeof(server_opts) / sizeof(server_opts[0]); i++)
            if (strcmp(server_opts[i].name, name) == 0)
                break;
        if (i == sizeof(server_opts) / sizeof(server_opts[0])) {
            PyErr_Format(PyExc_TypeError, "unknown server option '%s'", name);
            return -1;
        }
        if (set_opt(&cfg, &server_opts[i], value) < 0)
            return -1;
    }
    self->srv = dsjob_server_new(&cfg, errbuf, sizeof(errbuf));
    if (self->srv == NULL) {
        PyErr_SetString(PyExc_ValueError, errbuf);
        return -1;
    }
    Py_BEGIN_ALLOW_THREADS err = dsjob_server_bind(self->srv);
    Py_END_ALLOW_THREADS if (err != DSJOB_OK)
    {
        PyErr_Format(Error, "the server could not start: %s", dsjob_server_errmsg(self->srv));
        dsjob_server_free(self->srv);
        self->srv = NULL;
        return -1;
    }
    return 0;
}

static int
server_made(ServerObject *self)
{
    if (self->srv == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the server was not made");
        return -1;
    }
    return 0;
}

static void
server_join(ServerObject *self)
{
    if (self->started) {
        Py_BEGIN_ALLOW_THREADS self->result = dsjob_server_join(self->srv);
        Py_END_ALLOW_THREADS self->started = 0;
    }
}

static void
Server_dealloc(ServerObject *self)
{
    if (self->srv != NULL) {
        if (self->started) {
            dsjob_server_stop(self->srv, false);
            server_join(self);
        }
        dsjob_server_free(self->srv);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Server_start(ServerObject *self, PyObject *unused)
{
    int err;

    (void)unused;
    if (server_made(self) < 0)
        return NULL;
    if (self->started)
        Py_RETURN_NONE;
    err = dsjob_server_start(self->srv);
    if (err != DSJOB_OK)
        return PyErr_Format(Error, "the server could not start: %s",
                            dsjob_server_errmsg(self->srv));
    self->started = 1;
    Py_RETURN_NONE;
}

static PyObject *
Server_join(ServerObject *self, PyObject *unused)
{
    (void)unused;
    if (server_made(self) < 0)
        return NULL;
    server_join(self);
    if (self->result != DSJOB_OK)
        return PyErr_Format(Error, "the server failed: %s", dsjob_server_errmsg(self->srv));
    Py_RETURN_NONE;
}

static PyObject *
Server_stop(ServerObject *self, PyObject *args)
{
    int graceful = 0;

    if (!PyArg_ParseTuple(args, "|p", &graceful) || server_made(self) < 0)
        return NULL;
    if (self->started)
        dsjob_server_stop(self->srv, graceful != 0);
    Py_RETURN_NONE;
}

static PyObject *
Server_close(ServerObject *self, PyObject *unused)
{
    (void)unused;
    if (self->srv != NULL) {
        if (self->started) {
            dsjob_server_stop(self->srv, false);
            server_join(self);
        }
        dsjob_server_free(self->srv);
        self->srv = NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Server_get_port(ServerObject *self, void *closure)
{
    (void)closure;
    if (server_made(self) < 0)
        return NULL;
    return PyLong_FromLong(dsjob_server_port(self->srv));
}

static PyObject *
Server_get_http_port(ServerObject *self, void *closure)
{
    (void)closure;
    if (server_made(self) < 0)
        return NULL;
    return PyLong_FromLong(dsjob_server_http_port(self->srv));
}

static PyObject *
Server_get_address(ServerObject *self, void *closure)
{
    char buf[512];

    (void)closure;
    if (server_made(self) < 0)
        return NULL;
    if (dsjob_server_address(self->srv, buf, sizeof(buf)) != DSJOB_OK)
        Py_RETURN_NONE;
    return PyUnicode_FromString(buf);
}

static PyObject *
Server_get_running(ServerObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->started);
}

static PyGetSetDef Server_getset[] = {
    {"port", (getter)Server_get_port, NULL, "The bound TCP port, -1 without TCP.", NULL},
    {"http_port", (getter)Server_get_http_port, NULL, "The bound HTTP port, -1 without.", NULL},
    {"address", (getter)Server_get_address, NULL, "\"host:port\" of the first listener.", NULL},
    {"running", (getter)Server_get_running, NULL, "Whether start() ran and join() did not.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Server_methods[] = {
    {"start", (PyCFunction)Server_start, METH_NOARGS, "start(): serve in a thread of its own."},
    {"join", (PyCFunction)Server_join, METH_NOARGS,
     "join(): wait (GIL released) until the server has stopped."},
    {"stop", (PyCFunction)Server_stop, METH_VARARGS,
     "stop(graceful=False): ask the server to stop; join() waits for it."},
    {"close", (PyCFunction)Server_close, METH_NOARGS,
     "close(): stop the server if it runs, wait, and free it (its store, its port)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ServerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dsjob._dsjob.Server",
    .tp_basicsize = sizeof(ServerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Server(options): a libdsjobserver server, made and bound; options a dict\n"
              "of struct dsjob_server_config fields by name.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Server_init,
    .tp_dealloc = (destructor)Server_dealloc,
    .tp_getset = Server_getset,
    .tp_methods = Server_methods,
};

/* ---- AsyncConn (the non-blocking client, dsjob_async(3)) ---- */

/* The kinds of event AsyncConn passes to its Python callback. */
enum { EV_CREATED, EV_STATUS, EV_DATA, EV_WARNING, EV_COMPLETE, EV_FAIL };

typedef struct {
    PyObject_HEAD struct dsjob_async *a;
    PyObject *on_event; /* on_event(kind, id, arg1, arg2) */
    /*
     * The Python side's tables, when given (else NULL): jobs, id -> a future
     * or a (sink, index) pair; queues (a dict) and background (a set), the
     * ids whose every event goes to on_event. Any other job is a plain
     * foreground one, whose end step() hands over itself (below).
     */
    PyObject *jobs, *queues, *background;
} AsyncObject;

static PyObject *str_done, *str_set_result;

static void
async_event(AsyncObject *self, int kind, uint64_t id, PyObject *a1, PyObject *a2)
{
    PyObject *r;

    if (a1 == NULL || a2 == NULL) {
        Py_XDECREF(a1);
        Py_XDECREF(a2);
        PyErr_WriteUnraisable(self->on_event);
        return;
    }
    r = PyObject_CallFunction(self->on_event, "iKNN", kind, (unsigned long long)id, a1, a2);
    if (r == NULL)
        PyErr_WriteUnraisable(self->on_event);
    Py_XDECREF(r);
}

/*
 * Whether the job's events go to on_event, as they all do without the
 * tables. A plain foreground job (in none of queues and background) is
 * told nothing but its end: its created, status, data and warning events
 * are dropped here, with no call into Python. *key: the id as an int, for
 * the caller to drop (NULL when the answer is 1 and no key was made).
 * -1 on an error (set).
 */
static int
async_wants(AsyncObject *self, uint64_t id, PyObject **key)
{
    int r;

    *key = NULL;
    if (self->jobs == NULL)
        return 1;
    if ((*key = PyLong_FromUnsignedLongLong(id)) == NULL)
        return -1;
    r = PyDict_Contains(self->queues, *key);
    if (r == 0)
        r = PySet_Contains(self->background, *key);
    return r;
}

/* A quiet job's event: dropped, unless on_event is to hear it. */
static int
async_quiet(AsyncObject *self, uint64_t id)
{
    PyObject *key;
    int r = async_wants(self, id, &key);

    Py_XDECREF(key);
    if (r < 0) {
        PyErr_WriteUnraisable(self->on_event);
        return 1;
    }
    return r == 0;
}

static void
acb_created(struct dsjob_async *a, uint64_t id, const char *handle, void *user)
{
    (void)a;
    if (async_quiet(user, id))
        return;
    async_event(user, EV_CREATED, id,
                PyUnicode_DecodeUTF8(handle, (Py_ssize_t)strlen(handle), "surrogateescape"),
                Py_NewRef(Py_None));
}

static void
acb_status(struct dsjob_async *a, uint64_t id, unsigned num, unsigned den, void *user)
{
    (void)a;
    if (async_quiet(user, id))
        return;
    async_event(user, EV_STATUS, id, PyLong_FromUnsignedLong(num), PyLong_FromUnsignedLong(den));
}

static void
acb_data(struct dsjob_async *a, uint64_t id, const void *data, size_t len, void *user)
{
    (void)a;
    if (async_quiet(user, id))
        return;
    async_event(user, EV_DATA, id, PyBytes_FromStringAndSize(data, (Py_ssize_t)len),
                Py_NewRef(Py_None));
}

static void
acb_warning(struct dsjob_async *a, uint64_t id, const void *data, size_t len, void *user)
{
    (void)a;
    if (async_quiet(user, id))
        return;
    async_event(user, EV_WARNING, id, PyBytes_FromStringAndSize(data, (Py_ssize_t)len),
                Py_NewRef(Py_None));
}

/*
 * The end of a plain foreground job, without on_event: its entry leaves
 * jobs; a future gets the result (unless done: cancelled and not yet
 * forgotten), a (sink, index) pair calls sink((index, result)). Returns -1
 * on an error (set).
 */
static int
async_complete(AsyncObject *self, PyObject *key, const void *data, size_t len)
{
    PyObject *v, *res, *r;

    v = PyDict_GetItemWithError(self->jobs, key);
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 0; /* forgotten */
    Py_INCREF(v);
    if (PyDict_DelItem(self->jobs, key) < 0 ||
        (res = PyBytes_FromStringAndSize(data, (Py_ssize_t)len)) == NULL) {
        Py_DECREF(v);
        return -1;
    }
    if (PyTuple_CheckExact(v) && PyTuple_GET_SIZE(v) == 2) {
        PyObject *pair = PyTuple_Pack(2, PyTuple_GET_ITEM(v, 1), res);

        r = pair == NULL ? NULL : PyObject_CallOneArg(PyTuple_GET_ITEM(v, 0), pair);
        Py_XDECREF(pair);
    } else {
        r = PyObject_CallMethodNoArgs(v, str_done);
        if (r == Py_False) {
            Py_DECREF(r);
            r = PyObject_CallMethodOneArg(v, str_set_result, res);
        }
    }
    Py_DECREF(res);
    Py_DECREF(v);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static void
acb_complete(struct dsjob_async *a, uint64_t id, const void *data, size_t len, void *user)
{
    AsyncObject *self = user;
    PyObject *key;
    int r;

    (void)a;
    r = async_wants(self, id, &key);
    if (r == 0)
        r = async_complete(self, key, data, len);
    Py_XDECREF(key);
    if (r < 0)
        PyErr_WriteUnraisable(self->on_event);
    else if (r > 0)
        async_event(user, EV_COMPLETE, id, PyBytes_FromStringAndSize(data, (Py_ssize_t)len),
                    Py_NewRef(Py_None));
}

static void
acb_fail(struct dsjob_async *a, uint64_t id, int err, const char *text, size_t len, void *user)
{
    (void)a;
    async_event(user, EV_FAIL, id, PyLong_FromLong(err),
                PyUnicode_DecodeUTF8(text, (Py_ssize_t)len, "replace"));
}

static int
Async_init(AsyncObject *self, PyObject *args, PyObject *kw)
{
    static const struct dsjob_async_callbacks cbs = {acb_created, acb_status,   acb_data,
                                                     acb_warning, acb_complete, acb_fail};
    const char *addr;
    PyObject *on_event, *jobs = NULL, *queues = NULL, *background = NULL;

    (void)kw;
    if (!PyArg_ParseTuple(args, "sO|O!O!O!", &addr, &on_event, &PyDict_Type, &jobs, &PyDict_Type,
                          &queues, &PySet_Type, &background))
        return -1;
    if (jobs != NULL && background == NULL) {
        PyErr_SetString(PyExc_TypeError, "jobs needs queues and background");
        return -1;
    }
    if (self->a != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "already made");
        return -1;
    }
    self->a = dsjob_async_new(addr, &cbs, self);
    if (self->a == NULL) {
        PyErr_Format(PyExc_ValueError, "bad server address '%s'", addr);
        return -1;
    }
    Py_XSETREF(self->on_event, Py_NewRef(on_event));
    Py_XSETREF(self->jobs, Py_XNewRef(jobs));
    Py_XSETREF(self->queues, Py_XNewRef(queues));
    Py_XSETREF(self->background, Py_XNewRef(background));
    return 0;
}

static int Async_clear(AsyncObject *self);

static void
Async_dealloc(AsyncObject *self)
{
    PyObject_GC_UnTrack(self);
    dsjob_async_free(self->a);
    Async_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
Async_traverse(AsyncObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->on_event);
    Py_VISIT(self->jobs);
    Py_VISIT(self->queues);
    Py_VISIT(self->background);
    return 0;
}

static int
Async_clear(AsyncObject *self)
{
    Py_CLEAR(self->on_event);
    Py_CLEAR(self->jobs);
    Py_CLEAR(self->queues);
    Py_CLEAR(self->background);
    return 0;
}

static int
async_set_tls(void *h, const char *ca, const char *cert, const char *key, unsigned flags)
{
    return dsjob_async_set_tls(h, ca, cert, key, flags);
}

static const char *
async_errmsg(void *h)
{
    return dsjob_async_errmsg(h);
}

static const struct handle_ops async_ops = {NULL, async_set_tls, async_errmsg};

static PyObject *
Async_set_tls(AsyncObject *self, PyObject *args)
{
    return handle_set_tls(&async_ops, self->a, NULL, args);
}

static PyObject *
Async_connect(AsyncObject *self, PyObject *args)
{
    int timeout_ms = 5000, err;

    if (!PyArg_ParseTuple(args, "|i", &timeout_ms))
        return NULL;
    Py_BEGIN_ALLOW_THREADS err = dsjob_async_connect(self->a, timeout_ms);
    Py_END_ALLOW_THREADS if (err != DSJOB_OK) return raise_err(err, dsjob_async_errmsg(self->a));
    return PyLong_FromLong(dsjob_async_fd(self->a));
}

/* The UTF-8 of a str argument without NUL characters, as PyArg_Parse's "s"; NULL on an error. */
static const char *
arg_str(PyObject *o, const char *what)
{
    Py_ssize_t len;
    const char *s;

    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not %.100s", what, Py_TYPE(o)->tp_name);
        return NULL;
    }
    if ((s = PyUnicode_AsUTF8AndSize(o, &len)) != NULL && strlen(s) != (size_t)len) {
        PyErr_Format(PyExc_ValueError, "%s: embedded null character", what);
        return NULL;
    }
    return s;
}

/* submit(function, payload, unique=None, priority=0, background=False), positional. */
static PyObject *
Async_submit(AsyncObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    const char *func, *unique = NULL;
    struct payload payload;
    int prio = 0, background = 0, err;
    uint64_t id = 0;

    if (nargs < 2 || nargs > 5) {
        PyErr_SetString(PyExc_TypeError,
                        "submit(function, payload, unique=None, priority=0, background=False)");
        return NULL;
    }
    if ((func = arg_str(args[0], "function")) == NULL ||
        (nargs > 2 && args[2] != Py_None && (unique = arg_str(args[2], "unique")) == NULL))
        return NULL;
    if (nargs > 3) {
        long v = PyLong_AsLong(args[3]);

        if (v == -1 && PyErr_Occurred())
            return NULL;
        if (v < INT_MIN || v > INT_MAX) {
            PyErr_SetString(PyExc_OverflowError, "priority out of range");
            return NULL;
        }
        prio = (int)v;
    }
    if (nargs > 4 && (background = PyObject_IsTrue(args[4])) < 0)
        return NULL;
    if (payload_get(args[1], &payload) < 0)
        return NULL;
    err = dsjob_async_submit(self->a, func, unique, payload.buf, (size_t)payload.len,
                             (enum dsjob_priority)prio,
                             (background ? DSJOB_TASK_BACKGROUND : 0) | DSJOB_ASYNC_NO_WRITE, &id);
    payload_release(&payload);
    if (err != DSJOB_OK)
        return raise_err(err, dsjob_async_errmsg(self->a));
    return PyLong_FromUnsignedLongLong(id);
}

static PyObject *
Async_step(AsyncObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(dsjob_async_step(self->a));
}

static PyObject *
Async_forget(AsyncObject *self, PyObject *arg)
{
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);

    if (id == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(dsjob_async_forget(self->a, (uint64_t)id) == DSJOB_OK);
}

static PyObject *
Async_fd(AsyncObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromLong(dsjob_async_fd(self->a));
}

static PyObject *
Async_want_write(AsyncObject *self, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(dsjob_async_want_write(self->a));
}

static PyObject *
Async_pending(AsyncObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSize_t(dsjob_async_pending(self->a));
}

static PyObject *
Async_errmsg(AsyncObject *self, PyObject *unused)
{
    (void)unused;
    return PyUnicode_FromString(dsjob_async_errmsg(self->a));
}

static PyMethodDef Async_methods[] = {
    {"set_tls", (PyCFunction)Async_set_tls, METH_VARARGS,
     "set_tls(ca_file, cert_file, key_file, flags): TLS for the connection."},
    {"connect", (PyCFunction)Async_connect, METH_VARARGS,
     "connect(timeout_ms=5000) -> fd: connect (waits, GIL released; run it in a thread)."},
    {"submit", (PyCFunction)(void (*)(void))Async_submit, METH_FASTCALL,
     "submit(function, payload, unique=None, priority=0, background=False) -> id:\n"
     "queue a job (DSJOB_ASYNC_NO_WRITE: the next step() writes it); never waits."},
    {"step", (PyCFunction)Async_step, METH_NOARGS,
     "step() -> int: read, call back, write, without waiting; 0 or the connection's error\n"
     "code (every job in flight has then got its fail event)."},
    {"forget", (PyCFunction)Async_forget, METH_O,
     "forget(id) -> bool: no event names the job again."},
    {"fd", (PyCFunction)Async_fd, METH_NOARGS, "fd() -> int: the descriptor, -1 if none."},
    {"want_write", (PyCFunction)Async_want_write, METH_NOARGS,
     "want_write() -> bool: bytes wait for the descriptor to be writable."},
    {"pending", (PyCFunction)Async_pending, METH_NOARGS, "pending() -> int: jobs in flight."},
    {"errmsg", (PyCFunction)Async_errmsg, METH_NOARGS, "errmsg() -> str: the last failure."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject AsyncType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dsjob._dsjob.AsyncConn",
    .tp_basicsize = sizeof(AsyncObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "AsyncConn(addr, on_event, jobs=None, queues=None, background=None): a struct\n"
              "dsjob_async; on_event(kind, id, a, b) is called from step() for each job event.\n"
              "With the tables (jobs: id -> future or (sink, index); queues, a dict, and\n"
              "background, a set, of ids), a job in neither queues nor background hears only\n"
              "its end from on_event (a failure); its result goes from step() to its future's\n"
              "set_result, or sink((index, result)), and leaves jobs.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Async_init,
    .tp_dealloc = (destructor)Async_dealloc,
    .tp_traverse = (traverseproc)Async_traverse,
    .tp_clear = (inquiry)Async_clear,
    .tp_methods = Async_methods,
};

/* ---- module ---- */

static PyObject *
mod_strerror(PyObject *m, PyObject *arg)
{
    long err = PyLong_AsLong(arg);

    (void)m;
    if (err == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(dsjob_strerror((int)err));
}

static PyObject *
mod_raise_error(PyObject *m, PyObject *args)
{
    int err;
    const char *msg;

    (void)m;
    if (!PyArg_ParseTuple(args, "is", &err, &msg))
        return NULL;
    return raise_err(err, msg);
}

static PyMethodDef mod_methods[] = {
    {"strerror", mod_strerror, METH_O, "strerror(code) -> str: dsjob_strerror."},
    {"raise_error", mod_raise_error, METH_VARARGS,
     "raise_error(code, errmsg): raise the exception of a dsjob error code."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "dsjob._dsjob",
    .m_doc = "The C layer of dsjob over libdsjobclient, libdsjobworker and libdsjobserver.",
    .m_size = -1,
    .m_methods = mod_methods,
};

static int
add_int(PyObject *m, const char *name, long v)
{
    return PyModule_AddIntConstant(m, name, v);
}

PyMODINIT_FUNC PyInit__dsjob(void);

PyMODINIT_FUNC
PyInit__dsjob(void)
{
    PyObject *m, *errors;

    errors = PyImport_ImportModule("dsjob._errors");
    if (errors == NULL)
        return NULL;
    Error = PyObject_GetAttrString(errors, "Error");
    NoServer = PyObject_GetAttrString(errors, "NoServer");
    Timeout = PyObject_GetAttrString(errors, "Timeout");
    Refused = PyObject_GetAttrString(errors, "Refused");
    JobFailed = PyObject_GetAttrString(errors, "JobFailed");
    Py_DECREF(errors);
    if (!Error || !NoServer || !Timeout || !Refused || !JobFailed)
        return NULL;
    str_handle = PyUnicode_InternFromString("handle");
    str_function = PyUnicode_InternFromString("function");
    str_unique = PyUnicode_InternFromString("unique");
    str_done = PyUnicode_InternFromString("done");
    str_set_result = PyUnicode_InternFromString("set_result");
    if (!str_handle || !str_function || !str_unique || !str_done || !str_set_result)
        return NULL;
    SubmittedType = (PyTypeObject *)PyType_FromSpec(&Submitted_spec);
    if (SubmittedType == NULL)
        return NULL;
    if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&JobType) < 0 ||
        PyType_Ready(&WorkerType) < 0 || PyType_Ready(&ServerType) < 0 ||
        PyType_Ready(&AsyncType) < 0)
        return NULL;
    m = PyModule_Create(&moddef);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Client", (PyObject *)&ClientType) < 0 ||
        PyModule_AddObjectRef(m, "Job", (PyObject *)&JobType) < 0 ||
        PyModule_AddObjectRef(m, "SubmittedJob", (PyObject *)SubmittedType) < 0 ||
        PyModule_AddObjectRef(m, "Worker", (PyObject *)&WorkerType) < 0 ||
        PyModule_AddObjectRef(m, "Server", (PyObject *)&ServerType) < 0 ||
        PyModule_AddObjectRef(m, "AsyncConn", (PyObject *)&AsyncType) < 0 ||
        add_int(m, "EV_CREATED", EV_CREATED) < 0 || add_int(m, "EV_STATUS", EV_STATUS) < 0 ||
        add_int(m, "EV_DATA", EV_DATA) < 0 || add_int(m, "EV_WARNING", EV_WARNING) < 0 ||
        add_int(m, "EV_COMPLETE", EV_COMPLETE) < 0 || add_int(m, "EV_FAIL", EV_FAIL) < 0 ||
        PyModule_AddStringConstant(m, "library_version", dsjob_version()) < 0 ||
        add_int(m, "PRIO_NORMAL", DSJOB_PRIO_NORMAL) < 0 ||
        add_int(m, "PRIO_HIGH", DSJOB_PRIO_HIGH) < 0 ||
        add_int(m, "PRIO_LOW", DSJOB_PRIO_LOW) < 0 ||
        add_int(m, "WORK_COMPLETE", DSJOB_WORK_COMPLETE) < 0 ||
        add_int(m, "WORK_FAIL", DSJOB_WORK_FAIL) < 0 ||
        add_int(m, "WORK_EXCEPTION", DSJOB_WORK_EXCEPTION) < 0 ||
        add_int(m, "WORK_GIVE_BACK", DSJOB_WORK_GIVE_BACK) < 0 ||
        add_int(m, "TLS_NO_VERIFY_NAME", DSJOB_TLS_NO_VERIFY_NAME) < 0 ||
        add_int(m, "TLS_NO_VERIFY", DSJOB_TLS_NO_VERIFY) < 0 ||
        add_int(m, "ERR_TIMEOUT", DSJOB_ERR_TIMEOUT) < 0 ||
        add_int(m, "ERR_JOB_FAILED", DSJOB_ERR_JOB_FAILED) < 0 ||
        add_int(m, "ERR_JOB_EXCEPTION", DSJOB_ERR_JOB_EXCEPTION) < 0 ||
        add_int(m, "ERR_SERVER", DSJOB_ERR_SERVER) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
