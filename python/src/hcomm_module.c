/*
 * hcomm._hcomm: the CPython binding of libhcomm.
 *
 * Buffers are taken where they lie, never copied: objects with the buffer
 * protocol (numpy arrays, memoryview, bytearray...) through a Py_buffer,
 * torch CPU tensors through data_ptr()/numel()/element_size(). Each hcomm
 * call runs with the GIL released under the process-wide lock that
 * serializes libhcomm (hcomm_capi.h); a non-blocking call's Request holds
 * its buffers (the Py_buffer export or a reference to the tensor) until it
 * completes, or until hcomm finalizes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hcomm.h>

#include "hcomm_capi.h"

/* ---- process-wide state ------------------------------------------------ */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_holds;            /* holds on the initialized library (g_lock) */
static int g_py_hold;          /* 1 while hcomm.init()'s hold is taken (g_lock) */
static unsigned long g_gen = 1; /* bumped at every finalize: older objects are dead */
static PyObject *g_error;      /* hcomm.Error */
static PyObject *g_world;      /* cached Comm of the world, of generation g_world_gen */
static PyObject *g_torch_dtypes; /* dict: torch dtype object -> (code, name) */

static void lib_lock(void)
{
    pthread_mutex_lock(&g_lock);
}
static void lib_unlock(void)
{
    pthread_mutex_unlock(&g_lock);
}

/* Runs expr (an hcomm call) without the GIL, under the lock. */
#define HC_LOCKED(st, expr)                                                                        \
    do {                                                                                           \
        Py_BEGIN_ALLOW_THREADS lib_lock();                                                         \
        (st) = (expr);                                                                             \
        lib_unlock();                                                                              \
        Py_END_ALLOW_THREADS                                                                       \
    } while (0)

/* hcomm.Error(message) with .status, .status_name, .message. */
static PyObject *make_error(int st, const char *msg)
{
    if (!msg || !*msg)
        msg = hcomm_strerror((hcomm_status_t)st);
    PyObject *text = PyUnicode_FromFormat("%s [%s]", msg, hcpy_status_name(st));
    if (!text)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(g_error, text);
    Py_DECREF(text);
    if (!exc)
        return NULL;
    PyObject *v;
    if (!(v = PyLong_FromLong(st)) || PyObject_SetAttrString(exc, "status", v) < 0)
        goto fail;
    Py_DECREF(v);
    if (!(v = PyUnicode_FromString(hcpy_status_name(st))) ||
        PyObject_SetAttrString(exc, "status_name", v) < 0)
        goto fail;
    Py_DECREF(v);
    if (!(v = PyUnicode_FromString(msg)) || PyObject_SetAttrString(exc, "message", v) < 0)
        goto fail;
    Py_DECREF(v);
    return exc;
fail:
    Py_XDECREF(v);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *raise_msg(int st, const char *msg)
{
    PyObject *exc = make_error(st, msg);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* Raises hcomm.Error for st with this thread's hcomm_last_error(). */
static PyObject *raise_status(int st)
{
    return raise_msg(st, hcomm_last_error());
}

static PyObject *raise_fmt(int st, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return raise_msg(st, buf);
}

/* ---- buffers ------------------------------------------------------------ */

typedef struct {
    char *ptr;
    size_t nbytes;
    size_t itemsize;
    int dtype;   /* hcomm dtype, or -1: one hcomm does not reduce (moved as bytes) */
    int has_view;
    Py_buffer view;
    PyObject *owner; /* torch path: the tensor */
    PyObject *obj;   /* borrowed: what the caller passed */
    char desc[40];   /* the type, for messages */
} hbuf_t;

static const char *dtype_names[HCOMM_DTYPE_COUNT] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64",
};

static int format_dtype(const char *fmt, Py_ssize_t itemsize)
{
    if (!fmt)
        return itemsize == 1 ? HCOMM_UINT8 : -1;
    const char *f = fmt;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
#else
    if (*f == '@' || *f == '=' || *f == '>' || *f == '!')
        f++;
#endif
    if (!f[0] || f[1])
        return -1;
    switch (*f) {
    case 'b':
        return HCOMM_INT8;
    case 'B':
        return HCOMM_UINT8;
    case 'i':
    case 'l':
    case 'q':
    case 'n':
        return itemsize == 4 ? HCOMM_INT32 : itemsize == 8 ? HCOMM_INT64 : -1;
    case 'I':
    case 'L':
    case 'Q':
    case 'N':
        return itemsize == 4 ? HCOMM_UINT32 : itemsize == 8 ? HCOMM_UINT64 : -1;
    case 'e':
        return itemsize == 2 ? HCOMM_FLOAT16 : -1;
    case 'f':
        return itemsize == 4 ? HCOMM_FLOAT32 : -1;
    case 'd':
        return itemsize == 8 ? HCOMM_FLOAT64 : -1;
    }
    return -1;
}

static void hbuf_release(hbuf_t *b)
{
    if (b->has_view)
        PyBuffer_Release(&b->view);
    b->has_view = 0;
    Py_CLEAR(b->owner);
}

/* torch dtype -> (hcomm code or -1, name), cached per dtype object. */
static int torch_dtype(PyObject *dtype, int *code, char *name, size_t namelen)
{
    PyObject *ent = PyDict_GetItemWithError(g_torch_dtypes, dtype);
    if (!ent) {
        if (PyErr_Occurred())
            return -1;
        PyObject *s = PyObject_Str(dtype);
        if (!s)
            return -1;
        const char *str = PyUnicode_AsUTF8(s);
        if (!str) {
            Py_DECREF(s);
            return -1;
        }
        static const struct {
            const char *name;
            int code;
        } map[] = {
            {"torch.int8", HCOMM_INT8},         {"torch.uint8", HCOMM_UINT8},
            {"torch.int32", HCOMM_INT32},       {"torch.int64", HCOMM_INT64},
            {"torch.float16", HCOMM_FLOAT16},   {"torch.bfloat16", HCOMM_BFLOAT16},
            {"torch.float32", HCOMM_FLOAT32},   {"torch.float64", HCOMM_FLOAT64},
        };
        int c = -1;
        for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
            if (!strcmp(map[i].name, str))
                c = map[i].code;
        ent = Py_BuildValue("(iO)", c, s);
        Py_DECREF(s);
        if (!ent || PyDict_SetItem(g_torch_dtypes, dtype, ent) < 0) {
            Py_XDECREF(ent);
            return -1;
        }
        Py_DECREF(ent); /* the dict holds it */
    }
    *code = (int)PyLong_AsLong(PyTuple_GET_ITEM(ent, 0));
    snprintf(name, namelen, "%s", PyUnicode_AsUTF8(PyTuple_GET_ITEM(ent, 1)));
    return 0;
}

static int call_bool(PyObject *o, const char *meth, int *out)
{
    PyObject *r = PyObject_CallMethod(o, meth, NULL);
    if (!r)
        return -1;
    *out = PyObject_IsTrue(r);
    Py_DECREF(r);
    return *out < 0 ? -1 : 0;
}

static int call_size(PyObject *o, const char *meth, size_t *out)
{
    PyObject *r = PyObject_CallMethod(o, meth, NULL);
    if (!r)
        return -1;
    *out = PyLong_AsSize_t(r);
    Py_DECREF(r);
    return PyErr_Occurred() ? -1 : 0;
}

/* A torch tensor (anything with data_ptr/numel/element_size/dtype). */
static int resolve_tensor(PyObject *o, const char *fn, const char *arg, hbuf_t *b)
{
    int contig;
    if (call_bool(o, "is_contiguous", &contig) < 0)
        return -1;
    PyObject *dev = PyObject_GetAttrString(o, "device");
    if (!dev)
        return -1;
    PyObject *type = PyObject_GetAttrString(dev, "type");
    Py_DECREF(dev);
    if (!type)
        return -1;
    int cpu = PyUnicode_Check(type) && !PyUnicode_CompareWithASCIIString(type, "cpu");
    if (!cpu) {
        PyErr_Format(PyExc_ValueError, "%s: %s is a tensor on device '%S': hcomm takes CPU tensors",
                     fn, arg, type);
        Py_DECREF(type);
        return -1;
    }
    Py_DECREF(type);
    if (!contig) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s is not contiguous: hcomm does not copy (pass .contiguous())", fn, arg);
        return -1;
    }
    PyObject *dt = PyObject_GetAttrString(o, "dtype");
    if (!dt)
        return -1;
    int r = torch_dtype(dt, &b->dtype, b->desc, sizeof(b->desc));
    Py_DECREF(dt);
    if (r < 0)
        return -1;
    size_t numel, esize;
    if (call_size(o, "numel", &numel) < 0 || call_size(o, "element_size", &esize) < 0)
        return -1;
    PyObject *p = PyObject_CallMethod(o, "data_ptr", NULL);
    if (!p)
        return -1;
    b->ptr = PyLong_AsVoidPtr(p);
    Py_DECREF(p);
    if (PyErr_Occurred())
        return -1;
    b->itemsize = esize ? esize : 1;
    b->nbytes = numel * esize;
    Py_INCREF(o);
    b->owner = o;
    return 0;
}

/* ---- DLPack (any producer: __dlpack__ / __dlpack_device__) ----------------- */

typedef struct {
    int32_t device_type, device_id;
} hc_dl_device_t;
typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} hc_dl_dtype_t;
typedef struct {
    void *data;
    hc_dl_device_t device;
    int32_t ndim;
    hc_dl_dtype_t dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} hc_dl_tensor_t;
typedef struct hc_dl_managed {
    hc_dl_tensor_t t;
    void *manager_ctx;
    void (*deleter)(struct hc_dl_managed *self);
} hc_dl_managed_t;

enum { HC_DL_CPU = 1, HC_DL_CUDA = 2, HC_DL_CUDA_HOST = 3, HC_DL_CUDA_MANAGED = 13 };

/* The capsule that owns a consumed DLManagedTensor: its deleter runs when
 * the buffer is released. */
static void dl_owner_free(PyObject *cap)
{
    hc_dl_managed_t *m = PyCapsule_GetPointer(cap, "hcomm.dltensor");
    if (m && m->deleter)
        m->deleter(m);
}

/* hcomm's dtype of a DLPack dtype, or -1 (moved as bytes). */
static int dl_dtype(hc_dl_dtype_t d)
{
    if (d.lanes != 1)
        return -1;
    switch (d.code) {
    case 0: /* kDLInt */
        return d.bits == 8 ? HCOMM_INT8 : d.bits == 32 ? HCOMM_INT32 : d.bits == 64 ? HCOMM_INT64 : -1;
    case 1: /* kDLUInt */
        return d.bits == 8 ? HCOMM_UINT8 : d.bits == 32 ? HCOMM_UINT32 : d.bits == 64 ? HCOMM_UINT64 : -1;
    case 2: /* kDLFloat */
        return d.bits == 16 ? HCOMM_FLOAT16 : d.bits == 32 ? HCOMM_FLOAT32 : d.bits == 64 ? HCOMM_FLOAT64 : -1;
    case 4: /* kDLBfloat */
        return d.bits == 16 ? HCOMM_BFLOAT16 : -1;
    }
    return -1;
}

/* The device o's memory is on: host memory passes; GPU memory is refused
 * with a message until libhcomm has GPU memory support. */
static int dl_check_device(PyObject *o, const char *fn, const char *arg)
{
    PyObject *dev = PyObject_CallMethod(o, "__dlpack_device__", NULL);
    if (!dev)
        return -1;
    long type = -1;
    if (PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) >= 1)
        type = PyLong_AsLong(PyTuple_GET_ITEM(dev, 0));
    Py_DECREF(dev);
    if (PyErr_Occurred())
        return -1;
    if (type == HC_DL_CPU || type == HC_DL_CUDA_HOST)
        return 0;
    if (type == HC_DL_CUDA || type == HC_DL_CUDA_MANAGED)
        PyErr_Format(PyExc_ValueError,
                     "%s: %s is GPU memory (DLPack device type %ld): it needs libhcomm's GPU memory "
                     "support, which this build of hcomm does not have yet; pass host memory",
                     fn, arg, type);
    else
        PyErr_Format(PyExc_ValueError, "%s: %s is on DLPack device type %ld: hcomm takes host memory",
                     fn, arg, type);
    return -1;
}

/* An object with __dlpack__ (CuPy, JAX, TensorFlow, numpy...): consumes its
 * capsule; the buffer holds it (and the producer's memory) until released. */
static int resolve_dlpack(PyObject *o, const char *fn, const char *arg, hbuf_t *b)
{
    if (dl_check_device(o, fn, arg) < 0)
        return -1;
    PyObject *cap = PyObject_CallMethod(o, "__dlpack__", NULL);
    if (!cap)
        return -1;
    hc_dl_managed_t *m = PyCapsule_GetPointer(cap, "dltensor");
    if (!m || PyCapsule_SetName(cap, "used_dltensor") < 0) {
        Py_DECREF(cap);
        return -1;
    }
    Py_DECREF(cap); /* renamed: its destructor leaves m alone, the owner below frees it */
    PyObject *owner = PyCapsule_New(m, "hcomm.dltensor", dl_owner_free);
    if (!owner) {
        if (m->deleter)
            m->deleter(m);
        return -1;
    }
    b->owner = owner;
    const hc_dl_tensor_t *t = &m->t;
    size_t itemsize = ((size_t)t->dtype.bits * t->dtype.lanes + 7) / 8, numel = 1;
    int64_t expect = 1;
    int contig = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->strides && t->shape[i] != 1 && t->strides[i] != expect)
            contig = 0;
        expect *= t->shape[i];
        numel *= (size_t)t->shape[i];
    }
    if (!contig) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %s is not C-contiguous: hcomm does not copy (pass a contiguous array)", fn, arg);
        return -1;
    }
    b->ptr = (char *)t->data + t->byte_offset;
    b->itemsize = itemsize ? itemsize : 1;
    b->nbytes = numel * itemsize;
    b->dtype = dl_dtype(t->dtype);
    snprintf(b->desc, sizeof(b->desc), "DLPack code %u bits %u", t->dtype.code, t->dtype.bits);
    return 0;
}

/* Fills b from o. writable: the call writes into it. dtype_override >= 0:
 * read the bytes as that hcomm dtype (e.g. bfloat16 data in a uint16 array). */
static int resolve(PyObject *o, int writable, int dtype_override, const char *fn, const char *arg,
                   hbuf_t *b)
{
    memset(b, 0, sizeof(*b));
    b->obj = o;
    if (o == NULL || o == Py_None) {
        PyErr_Format(PyExc_TypeError, "%s: %s is required here", fn, arg);
        return -1;
    }
    if (PyObject_CheckBuffer(o)) {
        int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(o, &b->view, flags) < 0) {
            PyObject *t, *v, *tb;
            PyErr_Fetch(&t, &v, &tb);
            PyErr_Format(writable ? PyExc_ValueError : PyExc_TypeError, "%s: %s: %S", fn, arg,
                         v ? v : Py_None);
            Py_XDECREF(t);
            Py_XDECREF(v);
            Py_XDECREF(tb);
            return -1;
        }
        b->has_view = 1;
        if (!PyBuffer_IsContiguous(&b->view, 'C')) {
            PyErr_Format(PyExc_ValueError,
                         "%s: %s is not C-contiguous: hcomm does not copy (pass a contiguous array)",
                         fn, arg);
            hbuf_release(b);
            return -1;
        }
        b->ptr = b->view.buf;
        b->nbytes = (size_t)b->view.len;
        b->itemsize = b->view.itemsize > 0 ? (size_t)b->view.itemsize : 1;
        b->dtype = format_dtype(b->view.format, b->view.itemsize);
        snprintf(b->desc, sizeof(b->desc), "format '%s'", b->view.format ? b->view.format : "B");
    } else if (PyObject_HasAttrString(o, "data_ptr") && PyObject_HasAttrString(o, "element_size")) {
        if (resolve_tensor(o, fn, arg, b) < 0) {
            hbuf_release(b);
            return -1;
        }
    } else if (PyObject_HasAttrString(o, "__dlpack__") &&
               PyObject_HasAttrString(o, "__dlpack_device__")) {
        if (resolve_dlpack(o, fn, arg, b) < 0) {
            hbuf_release(b);
            return -1;
        }
    } else {
        PyErr_Format(PyExc_TypeError,
                     "%s: %s must be a numpy array, a torch CPU tensor, a DLPack producer or an "
                     "object with the buffer protocol, not %.100s",
                     fn, arg, Py_TYPE(o)->tp_name);
        return -1;
    }
    if (dtype_override >= 0) {
        size_t sz = hcomm_dtype_size((hcomm_dtype_t)dtype_override);
        if (!sz || b->nbytes % sz) {
            PyErr_Format(PyExc_ValueError, "%s: %s has %zu bytes, not a whole number of dtype %d",
                         fn, arg, b->nbytes, dtype_override);
            hbuf_release(b);
            return -1;
        }
        b->dtype = dtype_override;
        b->itemsize = sz;
        snprintf(b->desc, sizeof(b->desc), "%s", dtype_names[dtype_override]);
    } else if (b->dtype >= 0) {
        snprintf(b->desc, sizeof(b->desc), "%s", dtype_names[b->dtype]);
    }
    return 0;
}

static size_t hbuf_count(const hbuf_t *b)
{
    return b->nbytes / b->itemsize;
}

/* Reductions need a dtype hcomm reduces. */
static int need_reducible(const hbuf_t *b, const char *fn, const char *arg)
{
    if (b->dtype >= 0)
        return 0;
    PyErr_Format(PyExc_TypeError,
                 "%s: %s has type %s, which hcomm does not reduce (int8, uint8, int32, uint32, "
                 "int64, uint64, float16, bfloat16, float32, float64; dtype= reinterprets bytes)",
                 fn, arg, b->desc);
    return -1;
}

static int need_same(const hbuf_t *a, const hbuf_t *b, const char *fn, const char *an,
                     const char *bn)
{
    if (a->dtype == b->dtype && a->itemsize == b->itemsize)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s: %s (%s) and %s (%s) have different types", fn, an, a->desc,
                 bn, b->desc);
    return -1;
}

/* The dtype a buffer travels as, and how many of those make one element. */
static hcomm_dtype_t xfer_dtype(const hbuf_t *b, size_t *scale)
{
    if (b->dtype >= 0) {
        *scale = 1;
        return (hcomm_dtype_t)b->dtype;
    }
    *scale = b->itemsize;
    return HCOMM_UINT8;
}

/* ---- in-flight operations ----------------------------------------------- */

typedef struct hop {
    struct hop *prev, *next; /* in g_ops while in flight */
    hcomm_request_t req;
    int inflight;
    int orphan; /* its Request is gone: reaped by later calls */
    int busy;   /* a thread is in wait()/test() on it */
    int status;
    char *errmsg;
    int nbufs;
    hbuf_t bufs[2];
    PyObject *result; /* what wait() returns */
    const char *what;
    int want_source;  /* irecv_any: wait() returns the sender's rank */
    int source;
} hop_t;

static hop_t g_ops = {&g_ops, &g_ops};

static void op_unlink_release(hop_t *op)
{
    if (op->inflight) {
        op->prev->next = op->next;
        op->next->prev = op->prev;
        op->prev = op->next = NULL;
        op->inflight = 0;
    }
    for (int i = 0; i < op->nbufs; i++)
        hbuf_release(&op->bufs[i]);
    op->nbufs = 0;
}

static void op_free(hop_t *op)
{
    op_unlink_release(op);
    Py_CLEAR(op->result);
    free(op->errmsg);
    free(op);
}

static void op_complete(hop_t *op, int st)
{
    op->status = st;
    if (st < 0) {
        const char *m = hcomm_last_error();
        op->errmsg = strdup(m && *m ? m : hcomm_strerror((hcomm_status_t)st));
    }
    op_unlink_release(op);
}

/* Completes requests whose Request objects were dropped while in flight
 * (their buffers stayed referenced). Only when the lock is free: never
 * waits behind another thread's blocking call. */
static void reap_orphans(void)
{
    int any = 0;
    for (hop_t *op = g_ops.next; op != &g_ops; op = op->next)
        any |= op->orphan;
    if (!any || pthread_mutex_trylock(&g_lock) != 0)
        return;
    for (hop_t *op = g_ops.next, *next; op != &g_ops; op = next) {
        next = op->next;
        if (!op->orphan)
            continue;
        int done = 0;
        hcomm_status_t st = hcomm_test(op->req, &done);
        if (st < 0) {
            PySys_WriteStderr("hcomm: a dropped, unfinished request (%s) failed: %s\n", op->what,
                              hcomm_last_error());
            done = 1;
        }
        if (done)
            op_free(op);
    }
    pthread_mutex_unlock(&g_lock);
}

/* After hcomm_finalize: every request was cancelled by the library. */
static void cancel_all_ops(void)
{
    while (g_ops.next != &g_ops) {
        hop_t *op = g_ops.next;
        if (op->orphan) {
            op_free(op);
        } else {
            op->status = HCOMM_ERR_NOT_INITIALIZED;
            free(op->errmsg);
            op->errmsg = strdup("the request was cancelled by hcomm_finalize before it completed");
            op_unlink_release(op);
        }
    }
}

/* ---- the library's holds ------------------------------------------------- */

/* Under the lock: drop a hold; returns 1 when it was the last (finalized). */
static int drop_hold_locked(hcomm_status_t *st)
{
    *st = HCOMM_OK;
    if (g_holds > 0 && --g_holds == 0) {
        *st = hcomm_finalize();
        return 1;
    }
    return 0;
}

static void after_finalize(void)
{
    g_gen++;
    Py_CLEAR(g_world);
    cancel_all_ops();
}

static int capi_initialized(void)
{
    return hcomm_initialized();
}

static hcomm_status_t capi_world_acquire(const hcomm_init_params_t *params, char *msg,
                                         size_t msglen)
{
    hcomm_status_t st = HCOMM_OK;
    lib_lock();
    if (params) {
        st = hcomm_init_rank(params);
        if (st == HCOMM_OK)
            g_holds = 1;
        else if (msg && msglen)
            snprintf(msg, msglen, "%s", hcomm_last_error());
    } else if (!hcomm_initialized()) {
        st = HCOMM_ERR_NOT_INITIALIZED;
        if (msg && msglen)
            snprintf(msg, msglen, "hcomm is not initialized");
    } else {
        g_holds++;
    }
    lib_unlock();
    return st;
}

static void capi_world_release(void)
{
    int py = Py_IsInitialized() && !_Py_IsFinalizing();
    PyGILState_STATE gs = PyGILState_UNLOCKED;
    if (py)
        gs = PyGILState_Ensure();
    hcomm_status_t st;
    int fin;
    if (py) {
        Py_BEGIN_ALLOW_THREADS lib_lock();
        fin = drop_hold_locked(&st);
        lib_unlock();
        Py_END_ALLOW_THREADS
        if (fin)
            after_finalize();
        PyGILState_Release(gs);
    } else {
        lib_lock();
        drop_hold_locked(&st);
        lib_unlock();
    }
}

static hcpy_capi_t g_capi = {
    .version = HCPY_CAPI_VERSION,
    .lock = lib_lock,
    .unlock = lib_unlock,
    .initialized = capi_initialized,
    .world_acquire = capi_world_acquire,
    .world_release = capi_world_release,
};

/* ---- Comm --------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD hcomm_comm_t comm;
    unsigned long gen;
    int owned; /* from split: freed by free() or when collected */
    int freed;
    int rank, size;
} CommObject;

static PyTypeObject CommType;

static PyObject *comm_new(hcomm_comm_t c, int owned)
{
    CommObject *o = PyObject_New(CommObject, &CommType);
    if (!o)
        return NULL;
    o->comm = c;
    o->gen = g_gen;
    o->owned = owned;
    o->freed = 0;
    o->rank = hcomm_comm_rank(c);
    o->size = hcomm_comm_size(c);
    return (PyObject *)o;
}

static int comm_check(CommObject *c, const char *fn)
{
    if (c->freed) {
        raise_fmt(HCOMM_ERR_INVALID, "%s: the communicator was freed", fn);
        return -1;
    }
    if (c->gen != g_gen || !hcomm_initialized()) {
        raise_fmt(HCOMM_ERR_NOT_INITIALIZED,
                  "%s: the communicator belongs to an hcomm that was finalized", fn);
        return -1;
    }
    return 0;
}

static void comm_dealloc(CommObject *c)
{
    if (c->owned && !c->freed && c->gen == g_gen && hcomm_initialized()) {
        hcomm_status_t st;
        HC_LOCKED(st, hcomm_comm_free(c->comm));
        (void)st;
    }
    PyObject_Free(c);
}

static PyObject *comm_repr(CommObject *c)
{
    if (c->freed)
        return PyUnicode_FromString("<hcomm.Comm freed>");
    return PyUnicode_FromFormat("<hcomm.Comm rank %d of %d%s>", c->rank, c->size,
                                c->owned ? "" : " (world)");
}

static PyObject *comm_get_rank(CommObject *c, void *unused)
{
    (void)unused;
    if (comm_check(c, "hcomm.Comm.rank") < 0)
        return NULL;
    return PyLong_FromLong(c->rank);
}

static PyObject *comm_get_size(CommObject *c, void *unused)
{
    (void)unused;
    if (comm_check(c, "hcomm.Comm.size") < 0)
        return NULL;
    return PyLong_FromLong(c->size);
}

static PyObject *comm_split(CommObject *c, PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"color", "key", NULL};
    int color, key = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i|i:split", kwl, &color, &key))
        return NULL;
    if (comm_check(c, "hcomm.Comm.split") < 0)
        return NULL;
    if (key == -1)
        key = c->rank;
    hcomm_comm_t nc = NULL;
    hcomm_status_t st;
    HC_LOCKED(st, hcomm_comm_split(c->comm, color, key, &nc));
    if (st < 0)
        return raise_status(st);
    if (!nc)
        Py_RETURN_NONE;
    return comm_new(nc, 1);
}

static PyObject *comm_free_m(CommObject *c, PyObject *unused)
{
    (void)unused;
    if (!c->owned)
        return raise_fmt(HCOMM_ERR_INVALID,
                         "hcomm.Comm.free: the world communicator belongs to the library");
    if (comm_check(c, "hcomm.Comm.free") < 0)
        return NULL;
    hcomm_status_t st;
    HC_LOCKED(st, hcomm_comm_free(c->comm));
    if (st < 0)
        return raise_status(st);
    c->freed = 1;
    Py_RETURN_NONE;
}

static PyObject *comm_abort_m(CommObject *c, PyObject *unused)
{
    (void)unused;
    if (comm_check(c, "hcomm.Comm.abort") < 0)
        return NULL;
    /* Any thread, without the lock: its purpose is to end a blocked call. */
    hcomm_status_t st = hcomm_comm_abort(c->comm);
    if (st < 0)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *comm_enter(CommObject *c, PyObject *unused)
{
    (void)unused;
    Py_INCREF(c);
    return (PyObject *)c;
}

static PyObject *comm_exit(CommObject *c, PyObject *args)
{
    (void)args;
    if (c->owned && !c->freed && c->gen == g_gen && hcomm_initialized())
        return comm_free_m(c, NULL);
    Py_RETURN_NONE;
}

/* ---- Request ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD hop_t *op;
} RequestObject;

static PyTypeObject RequestType;

static void request_dealloc(RequestObject *r)
{
    hop_t *op = r->op;
    if (op) {
        if (op->inflight)
            op->orphan = 1; /* the buffers stay referenced until it completes */
        else
            op_free(op);
    }
    PyObject_Free(r);
}

static PyObject *request_result(hop_t *op)
{
    if (op->status < 0)
        return raise_msg(op->status, op->errmsg);
    if (op->want_source)
        return PyLong_FromLong(op->source);
    PyObject *res = op->result ? op->result : Py_None;
    Py_INCREF(res);
    return res;
}

/* 0 when no other thread is in wait()/test() on op. */
static int request_idle(hop_t *op, const char *fn)
{
    if (!op->busy)
        return 0;
    raise_fmt(HCOMM_ERR_INVALID, "%s: another thread is waiting for it", fn);
    return -1;
}

/* HC_LOCKED on op's request, op marked busy meanwhile. */
#define HC_ON_REQUEST(op, st, expr)                                                                \
    do {                                                                                           \
        (op)->busy = 1;                                                                            \
        HC_LOCKED(st, expr);                                                                       \
        (op)->busy = 0;                                                                            \
    } while (0)

static PyObject *request_wait(RequestObject *r, PyObject *unused)
{
    (void)unused;
    hop_t *op = r->op;
    if (request_idle(op, "hcomm.Request.wait") < 0)
        return NULL;
    if (op->inflight) {
        hcomm_status_t st;
        HC_ON_REQUEST(op, st, hcomm_wait(op->req));
        if (op->inflight) /* not cancelled by a finalize meanwhile */
            op_complete(op, st);
    }
    return request_result(op);
}

static PyObject *request_test(RequestObject *r, PyObject *unused)
{
    (void)unused;
    hop_t *op = r->op;
    if (request_idle(op, "hcomm.Request.test") < 0)
        return NULL;
    if (op->inflight) {
        int done = 0;
        hcomm_status_t st;
        HC_ON_REQUEST(op, st, hcomm_test(op->req, &done));
        if (!op->inflight)
            done = 1;
        else if (st < 0 || done)
            op_complete(op, st);
        else
            Py_RETURN_FALSE;
    }
    if (op->status < 0)
        return raise_msg(op->status, op->errmsg);
    Py_RETURN_TRUE;
}

static PyObject *request_get_done(RequestObject *r, void *unused)
{
    (void)unused;
    return PyBool_FromLong(!r->op->inflight);
}

static PyObject *request_repr(RequestObject *r)
{
    return PyUnicode_FromFormat("<hcomm.Request %s%s>", r->op->what,
                                r->op->inflight ? " in flight" : " done");
}

/* ---- calling libhcomm ------------------------------------------------------ */

typedef enum {
    K_ALLREDUCE,
    K_BROADCAST,
    K_REDUCE,
    K_ALLGATHER,
    K_REDUCE_SCATTER,
    K_ALLTOALL,
    K_BARRIER,
    K_GATHER,
    K_SCATTER,
    K_ALLGATHERV,
    K_REDUCE_SCATTERV,
    K_ALLTOALLV,
    K_SEND,
    K_RECV,
} kind_t;

typedef struct {
    kind_t kind;
    const void *sbuf;
    void *rbuf;
    size_t count;
    hcomm_dtype_t dt;
    hcomm_op_t op;
    int root, peer, tag;
    size_t *c1, *d1, *c2, *d2; /* vector forms (malloc'd) */
    int want_source;           /* recv_any: the call's result is the sender's rank */
    int *source_out;           /* ... written here when the message matches */
} call_t;

/* hcomm_NAME(args..., comm), or hcomm_iNAME(args..., comm, rq) when rq. */
#define HC_CALL(name, ...) (rq ? hcomm_i##name(__VA_ARGS__, comm, rq) : hcomm_##name(__VA_ARGS__, comm))

static hcomm_status_t do_call(const call_t *c, hcomm_comm_t comm, hcomm_request_t *rq)
{
    switch (c->kind) {
    case K_ALLREDUCE:
        return HC_CALL(allreduce, c->sbuf, c->rbuf, c->count, c->dt, c->op);
    case K_BROADCAST:
        return HC_CALL(broadcast, c->rbuf, c->count, c->dt, c->root);
    case K_REDUCE:
        return HC_CALL(reduce, c->sbuf, c->rbuf, c->count, c->dt, c->op, c->root);
    case K_ALLGATHER:
        return HC_CALL(allgather, c->sbuf, c->rbuf, c->count, c->dt);
    case K_REDUCE_SCATTER:
        return HC_CALL(reduce_scatter, c->sbuf, c->rbuf, c->count, c->dt, c->op);
    case K_ALLTOALL:
        return HC_CALL(alltoall, c->sbuf, c->rbuf, c->count, c->dt);
    case K_BARRIER:
        return rq ? hcomm_ibarrier(comm, rq) : hcomm_barrier(comm);
    case K_GATHER:
        return HC_CALL(gather, c->sbuf, c->rbuf, c->count, c->dt, c->root);
    case K_SCATTER:
        return HC_CALL(scatter, c->sbuf, c->rbuf, c->count, c->dt, c->root);
    case K_ALLGATHERV:
        return HC_CALL(allgatherv, c->sbuf, c->count, c->rbuf, c->c1, c->d1, c->dt);
    case K_REDUCE_SCATTERV:
        return HC_CALL(reduce_scatterv, c->sbuf, c->rbuf, c->c1, c->dt, c->op);
    case K_ALLTOALLV:
        return HC_CALL(alltoallv, c->sbuf, c->c1, c->d1, c->rbuf, c->c2, c->d2, c->dt);
    case K_SEND:
        return HC_CALL(send, c->sbuf, c->count, c->dt, c->peer, c->tag);
    case K_RECV:
        if (c->want_source)
            return rq ? hcomm_irecv_any(c->rbuf, c->count, c->dt, c->tag, comm, c->source_out, rq)
                      : hcomm_recv_any(c->rbuf, c->count, c->dt, c->tag, comm, c->source_out);
        return HC_CALL(recv, c->rbuf, c->count, c->dt, c->peer, c->tag);
    }
    return HCOMM_ERR_INTERNAL;
}
#undef HC_CALL

static const char *kind_name(kind_t k)
{
    static const char *n[] = {"allreduce", "broadcast", "reduce",        "allgather",
                              "reduce_scatter", "alltoall", "barrier",   "gather",
                              "scatter",   "allgatherv", "reduce_scatterv", "alltoallv",
                              "send",      "recv"};
    return n[k];
}

static void call_free(call_t *c)
{
    free(c->c1);
    free(c->d1);
    free(c->c2);
    free(c->d2);
}

/* Runs the call (blocking) or posts it (nb) and hands back the result
 * object or a Request. Takes over bufs[0..nbufs) and the call's arrays. */
static PyObject *finish_call(CommObject *self, call_t *c, hbuf_t *bufs, int nbufs,
                             PyObject *result, int nb)
{
    hcomm_status_t st;
    if (!nb) {
        int source = HCOMM_ANY_SOURCE;
        c->source_out = &source;
        HC_LOCKED(st, do_call(c, self->comm, NULL));
        for (int i = 0; i < nbufs; i++)
            hbuf_release(&bufs[i]);
        call_free(c);
        if (st < 0)
            return raise_status(st);
        if (c->want_source)
            return PyLong_FromLong(source);
        if (!result)
            result = Py_None;
        Py_INCREF(result);
        return result;
    }
    reap_orphans();
    hop_t *op = calloc(1, sizeof(*op));
    RequestObject *r = op ? PyObject_New(RequestObject, &RequestType) : NULL;
    if (!r) {
        free(op);
        for (int i = 0; i < nbufs; i++)
            hbuf_release(&bufs[i]);
        call_free(c);
        return PyErr_NoMemory();
    }
    hcomm_request_t req = NULL;
    op->want_source = c->want_source;
    op->source = HCOMM_ANY_SOURCE;
    c->source_out = &op->source; /* op outlives the request */
    HC_LOCKED(st, do_call(c, self->comm, &req));
    call_free(c); /* the library copied the vector arrays */
    op->what = kind_name(c->kind);
    op->nbufs = nbufs;
    for (int i = 0; i < nbufs; i++)
        op->bufs[i] = bufs[i];
    r->op = op;
    if (st < 0) {
        op->status = st;
        const char *m = hcomm_last_error();
        PyObject *exc = make_error(st, m);
        op_free(op);
        r->op = NULL;
        Py_DECREF(r);
        if (exc) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    op->req = req;
    op->inflight = 1;
    op->prev = g_ops.prev;
    op->next = &g_ops;
    g_ops.prev->next = op;
    g_ops.prev = op;
    if (result) {
        Py_INCREF(result);
        op->result = result;
    }
    return (PyObject *)r;
}

/* dtype= keyword: None or an hcomm dtype code. */
static int parse_dtype(PyObject *o, int *out)
{
    *out = -1;
    if (!o || o == Py_None)
        return 0;
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v >= HCOMM_DTYPE_COUNT) {
        PyErr_Format(PyExc_ValueError, "dtype %ld is not an hcomm dtype", v);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_counts(PyObject *o, int n, size_t scale, const char *fn, const char *arg,
                        size_t **out)
{
    *out = NULL;
    PyObject *seq = PySequence_Fast(o, "counts must be a sequence");
    if (!seq) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a sequence of %d integers", fn, arg, n);
        return -1;
    }
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "%s: %s has %zd entries for a communicator of %d ranks", fn,
                     arg, PySequence_Fast_GET_SIZE(seq), n);
        Py_DECREF(seq);
        return -1;
    }
    size_t *a = calloc(n ? (size_t)n : 1, sizeof(size_t));
    if (!a) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *it = PyNumber_Index(PySequence_Fast_GET_ITEM(seq, i));
        long long v = it ? PyLong_AsLongLong(it) : -1;
        Py_XDECREF(it);
        if (v < 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "%s: %s[%d] = %lld is negative", fn, arg, i, v);
            free(a);
            Py_DECREF(seq);
            return -1;
        }
        a[i] = (size_t)v * scale;
    }
    Py_DECREF(seq);
    *out = a;
    return 0;
}

/* displs: given, or the exclusive prefix sum of counts. */
static int parse_displs(PyObject *o, const size_t *counts, int n, size_t scale, const char *fn,
                        const char *arg, size_t **out)
{
    if (o && o != Py_None)
        return parse_counts(o, n, scale, fn, arg, out);
    size_t *a = calloc(n ? (size_t)n : 1, sizeof(size_t));
    if (!a) {
        PyErr_NoMemory();
        return -1;
    }
    size_t s = 0;
    for (int i = 0; i < n; i++) {
        a[i] = s;
        s += counts[i];
    }
    *out = a;
    return 0;
}

/* Largest displs[j] + counts[j] (in transfer units). */
static size_t extent(const size_t *c, const size_t *d, int n)
{
    size_t m = 0;
    for (int i = 0; i < n; i++)
        if (c[i] && d[i] + c[i] > m)
            m = d[i] + c[i];
    return m;
}

/* ---- the collectives: one call being prepared -------------------------------- */

/* A call's arguments as they are checked: its buffers (released on failure,
 * handed to finish_call on success) and the call_t (vector arrays freed). */
typedef struct {
    CommObject *self;
    int nb;       /* the non-blocking form */
    int dtype;    /* dtype= (-1: none) */
    char fn[32];  /* "hcomm.allreduce", "hcomm.iallreduce"... for messages */
    int nbuf;
    hbuf_t b[2];
    call_t c;
} ctx_t;

/* After the arguments parsed: dto (the dtype= keyword, NULL: none) and the
 * communicator checked. */
static int ctx_begin(ctx_t *x, CommObject *self, int nb, kind_t kind, PyObject *dto)
{
    memset(x, 0, sizeof(*x));
    x->self = self;
    x->nb = nb;
    x->c.kind = kind;
    snprintf(x->fn, sizeof(x->fn), "hcomm.%s%s", nb ? "i" : "", kind_name(kind));
    if (parse_dtype(dto, &x->dtype) < 0 || comm_check(self, x->fn) < 0)
        return -1;
    return 0;
}

/* Parses an impl_'s arguments (its kwl) into the ctx x of the call kind. */
#define CTX_BEGIN(x, kind, dto, fmt, ...)                                                          \
    (PyArg_ParseTupleAndKeywords(args, kw, fmt, kwl, __VA_ARGS__) &&                               \
     ctx_begin(&(x), self, nb, kind, dto) == 0)

static PyObject *ctx_fail(ctx_t *x)
{
    call_free(&x->c);
    for (int i = 0; i < x->nbuf; i++)
        hbuf_release(&x->b[i]);
    return NULL;
}

static PyObject *ctx_finish(ctx_t *x, PyObject *result)
{
    return finish_call(x->self, &x->c, x->b, x->nbuf, result, x->nb);
}

/* o (named arg) as the call's next buffer. */
static hbuf_t *ctx_buf(ctx_t *x, PyObject *o, int writable, const char *arg)
{
    hbuf_t *b = &x->b[x->nbuf];
    if (resolve(o, writable, x->dtype, x->fn, arg, b) < 0)
        return NULL;
    x->nbuf++;
    return b;
}

/* The second buffer, of the first one's type: the sendbuf (sends, read) or
 * the recvbuf (written). */
static hbuf_t *ctx_second(ctx_t *x, PyObject *o, int sends)
{
    hbuf_t *first = &x->b[0], *b = ctx_buf(x, o, !sends, sends ? "sendbuf" : "recvbuf");
    if (!b || need_same(sends ? b : first, sends ? first : b, x->fn, "sendbuf", "recvbuf") < 0)
        return NULL;
    return b;
}

/* The recvbuf of a call whose sendbuf (the first buffer) it matches in size. */
static hbuf_t *ctx_recvbuf(ctx_t *x, PyObject *o)
{
    hbuf_t *s = &x->b[0], *r = ctx_second(x, o, 0);
    if (!r || r->nbytes == s->nbytes)
        return r;
    PyErr_Format(PyExc_ValueError, "%s: recvbuf has %zu elements, sendbuf %zu", x->fn,
                 hbuf_count(r), hbuf_count(s));
    return NULL;
}

/* The sendbuf of a reduction (the first buffer): sets the call's dtype and sbuf. */
static hbuf_t *ctx_reducible(ctx_t *x, PyObject *o, int writable)
{
    hbuf_t *b = ctx_buf(x, o, writable, "sendbuf");
    if (!b || need_reducible(b, x->fn, "sendbuf") < 0)
        return NULL;
    x->c.dt = (hcomm_dtype_t)b->dtype;
    x->c.sbuf = b->ptr;
    return b;
}

/* b (named arg) holds one block per rank: *block, the elements of one. */
static int ctx_blocks(ctx_t *x, const hbuf_t *b, const char *arg, size_t *block)
{
    size_t n = x->self->size, count = hbuf_count(b);
    if (count % n) {
        PyErr_Format(PyExc_ValueError, "%s: %s has %zu elements, not a multiple of %zu ranks",
                     x->fn, arg, count, n);
        return -1;
    }
    *block = count / n;
    return 0;
}

/* Calls of one block per rank on one side (allgather, gather, reduce_scatter,
 * scatter): the first buffer, the sendbuf (whole_sends) or the recvbuf, holds
 * them; the other side is o or, o None, block k of the first in place. Sets
 * the call's buffers, dtype and count. */
static int ctx_blocked(ctx_t *x, int whole_sends, PyObject *o, size_t k)
{
    hbuf_t *whole = &x->b[0];
    const char *warg = whole_sends ? "sendbuf" : "recvbuf";
    size_t scale, block, n = x->self->size;
    x->c.dt = xfer_dtype(whole, &scale);
    char *other;
    if (o == Py_None) {
        if (ctx_blocks(x, whole, warg, &block) < 0)
            return -1;
        other = whole->ptr + k * block * whole->itemsize;
    } else {
        hbuf_t *b = ctx_second(x, o, !whole_sends);
        if (!b)
            return -1;
        block = hbuf_count(b);
        if (block * n != hbuf_count(whole)) {
            PyErr_Format(PyExc_ValueError, "%s: %s has %zu elements, not %zu ranks x %zu", x->fn,
                         warg, hbuf_count(whole), n, block);
            return -1;
        }
        other = b->ptr;
    }
    x->c.count = block * scale;
    x->c.sbuf = whole_sends ? whole->ptr : other;
    x->c.rbuf = whole_sends ? other : whole->ptr;
    return 0;
}

/* Calls of one buffer moved as it lies (broadcast, send, recv, gather off the
 * root, scatter off the root): into the call's sbuf (sends) or rbuf. */
static PyObject *ctx_single(ctx_t *x, PyObject *o, const char *arg, int sends, int writable,
                            PyObject *result)
{
    hbuf_t *b = ctx_buf(x, o, writable, arg);
    if (!b)
        return NULL;
    size_t scale;
    x->c.dt = xfer_dtype(b, &scale);
    x->c.count = hbuf_count(b) * scale;
    if (sends)
        x->c.sbuf = b->ptr;
    else
        x->c.rbuf = b->ptr;
    return ctx_finish(x, result);
}

/* counts (carg) and displs (darg, None: packed) of a vector call. */
static int ctx_vector(ctx_t *x, PyObject *co, PyObject *dso, size_t scale, const char *carg,
                      const char *darg, size_t **counts, size_t **displs)
{
    int n = x->self->size;
    if (parse_counts(co, n, scale, x->fn, carg, counts) < 0 ||
        parse_displs(dso, *counts, n, scale, x->fn, darg, displs) < 0)
        return -1;
    return 0;
}

/* b (named arg) holds what counts and displs reach. */
static int ctx_reach(ctx_t *x, const hbuf_t *b, size_t scale, const size_t *counts,
                     const size_t *displs, const char *arg, const char *carg, const char *darg)
{
    size_t e = extent(counts, displs, x->self->size);
    if (e <= hbuf_count(b) * scale)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s: %s has %zu elements, %s and %s reach %zu", x->fn, arg,
                 hbuf_count(b), carg, darg, e / scale);
    return -1;
}

/* In-place allreduces of n buffers in one hcomm group (launched together;
 * hcomm fuses the small ones). Under the lock. */
static hcomm_status_t allreduce_group(hcomm_comm_t comm, const hbuf_t *b, Py_ssize_t n, hcomm_op_t op)
{
    hcomm_status_t st = hcomm_group_start(), end;
    if (st != HCOMM_OK)
        return st;
    for (Py_ssize_t i = 0; i < n && st == HCOMM_OK; i++)
        st = hcomm_allreduce(b[i].ptr, b[i].ptr, hbuf_count(&b[i]), (hcomm_dtype_t)b[i].dtype, op, comm);
    end = hcomm_group_end(); /* waits for the ones posted */
    return st != HCOMM_OK ? st : end;
}

/* allreduce(list_of_buffers, op=SUM, dtype=None): each buffer in place, all
 * in one group (not a loop of calls); returns the list. */
static PyObject *allreduce_many(CommObject *self, PyObject *lo, int op, int dtype)
{
    const char *fn = "hcomm.allreduce";
    PyObject *seq = PySequence_Fast(lo, "hcomm.allreduce: a list or tuple of buffers");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), got = 0;
    hbuf_t *b = calloc((size_t)(n ? n : 1), sizeof(*b));
    PyObject *ret = NULL;
    if (!b) {
        PyErr_NoMemory();
        goto cleanup;
    }
    for (; got < n; got++) {
        char arg[32];
        snprintf(arg, sizeof(arg), "buffer %zd", got);
        if (resolve(PySequence_Fast_GET_ITEM(seq, got), 1, dtype, fn, arg, &b[got]) < 0)
            goto cleanup;
        if (need_reducible(&b[got], fn, arg) < 0) {
            got++;
            goto cleanup;
        }
    }
    hcomm_status_t st = HCOMM_OK;
    if (n)
        HC_LOCKED(st, allreduce_group(self->comm, b, n, (hcomm_op_t)op));
    if (st < 0) {
        raise_status(st);
        goto cleanup;
    }
    Py_INCREF(lo);
    ret = lo;
cleanup:
    for (Py_ssize_t i = 0; i < got; i++)
        hbuf_release(&b[i]);
    free(b);
    Py_DECREF(seq);
    return ret;
}

static PyObject *impl_allreduce(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    static char *kwl[] = {"sendbuf", "recvbuf", "op", "dtype", NULL};
    PyObject *so, *ro = Py_None, *dto = Py_None;
    int op = HCOMM_SUM;
    ctx_t x;
    if (!CTX_BEGIN(x, K_ALLREDUCE, dto, "O|OiO", &so, &ro, &op, &dto))
        return NULL;
    if (PyList_Check(so) || PyTuple_Check(so)) {
        if (nb || ro != Py_None) {
            PyErr_Format(PyExc_TypeError, "%s: a list of buffers is reduced in place by the blocking "
                         "allreduce (no recvbuf, not iallreduce)", x.fn);
            return ctx_fail(&x);
        }
        return allreduce_many(self, so, op, x.dtype);
    }
    int inplace = ro == Py_None || ro == so;
    hbuf_t *s = ctx_reducible(&x, so, inplace), *r = s;
    if (!s || (!inplace && !(r = ctx_recvbuf(&x, ro))))
        return ctx_fail(&x);
    x.c.rbuf = r->ptr;
    x.c.count = hbuf_count(s);
    x.c.op = (hcomm_op_t)op;
    return ctx_finish(&x, inplace ? so : ro);
}

static PyObject *impl_broadcast(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    static char *kwl[] = {"buf", "root", "dtype", NULL};
    PyObject *bo, *dto = Py_None;
    int root = 0;
    ctx_t x;
    if (!CTX_BEGIN(x, K_BROADCAST, dto, "O|iO", &bo, &root, &dto))
        return NULL;
    x.c.root = root;
    return ctx_single(&x, bo, "buf", 0, self->rank != root, bo);
}

static PyObject *impl_reduce(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    static char *kwl[] = {"sendbuf", "recvbuf", "op", "root", "dtype", NULL};
    PyObject *so, *ro = Py_None, *dto = Py_None;
    int op = HCOMM_SUM, root = 0;
    ctx_t x;
    if (!CTX_BEGIN(x, K_REDUCE, dto, "O|OiiO", &so, &ro, &op, &root, &dto))
        return NULL;
    int is_root = self->rank == root;
    int inplace = is_root && (ro == Py_None || ro == so);
    hbuf_t *s = ctx_reducible(&x, so, inplace), *r = s;
    if (!s || (is_root && !inplace && !(r = ctx_recvbuf(&x, ro))))
        return ctx_fail(&x);
    x.c.rbuf = is_root ? r->ptr : NULL;
    x.c.count = hbuf_count(s);
    x.c.op = (hcomm_op_t)op;
    x.c.root = root;
    return ctx_finish(&x, !is_root ? NULL : inplace ? so : ro);
}

/* allgather(sendbuf, recvbuf): sendbuf None: in place (block `rank` of recvbuf). */
static PyObject *impl_allgather(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    static char *kwl[] = {"sendbuf", "recvbuf", "dtype", NULL};
    PyObject *so, *ro, *dto = Py_None;
    ctx_t x;
    if (!CTX_BEGIN(x, K_ALLGATHER, dto, "OO|O", &so, &ro, &dto))
        return NULL;
    if (!ctx_buf(&x, ro, 1, "recvbuf") || ctx_blocked(&x, 0, so, self->rank) < 0)
        return ctx_fail(&x);
    return ctx_finish(&x, ro);
}

/* reduce_scatter(sendbuf, recvbuf=None): recvbuf None: in place (the
 * result is block `rank` of sendbuf). */
static PyObject *impl_reduce_scatter(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    static char *kwl[] = {"sendbuf", "recvbuf", "op", "dtype", NULL};
    PyObject *so, *ro = Py_None, *dto = Py_None;
    int op = HCOMM_SUM;
    ctx_t x;
    if (!CTX_BEGIN(x, K_REDUCE_SCATTER, dto, "O|OiO", &so, &ro, &op, &dto))
        return NULL;
    int inplace = ro == Py_None;
    if (!ctx_reducible(&x, so, inplace) || ctx_blocked(&x, 1, ro, self->rank) < 0)
        return ctx_fail(&x);
    x.c.op = (hcomm_op_t)op;
    return ctx_finish(&x, inplace ? so : ro);
}

static PyObject *impl_alltoall(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    static char *kwl[] = {"sendbuf", "recvbuf", "dtype", NULL};
    PyObject *so, *ro = Py_None, *dto = Py_None;
    ctx_t x;
    if (!CTX_BEGIN(x, K_ALLTOALL, dto, "O|OO", &so, &ro, &dto))
        return NULL;
    int inplace = ro == Py_None || ro == so;
    hbuf_t *s = ctx_buf(&x, so, inplace, "sendbuf"), *r = s;
    size_t scale, block;
    if (!s || ctx_blocks(&x, s, "sendbuf", &block) < 0 || (!inplace && !(r = ctx_recvbuf(&x, ro))))
        return ctx_fail(&x);
    x.c.dt = xfer_dtype(s, &scale);
    x.c.sbuf = s->ptr;
    x.c.rbuf = r->ptr;
    x.c.count = block * scale;
    return ctx_finish(&x, inplace ? so : ro);
}

static PyObject *impl_barrier(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    static char *kwl[] = {NULL};
    ctx_t x;
    if (!PyArg_ParseTupleAndKeywords(args, kw, ":barrier", kwl) ||
        ctx_begin(&x, self, nb, K_BARRIER, NULL) < 0)
        return NULL;
    return ctx_finish(&x, NULL);
}

/* gather(sendbuf, recvbuf=None, root=0): recvbuf on root only; sendbuf None
 * on root: in place (block `root` of recvbuf).
 * scatter(sendbuf, recvbuf, root=0): sendbuf on root only; recvbuf None on
 * root: in place (block `root` of sendbuf keeps its data). */
static PyObject *impl_rooted(CommObject *self, PyObject *args, PyObject *kw, int nb, kind_t kind)
{
    static char *kwl[] = {"sendbuf", "recvbuf", "root", "dtype", NULL};
    PyObject *so, *ro = Py_None, *dto = Py_None;
    int root = 0, scatter = kind == K_SCATTER;
    ctx_t x;
    if (!CTX_BEGIN(x, kind, dto, "O|OiO", &so, &ro, &root, &dto))
        return NULL;
    x.c.root = root;
    if (self->rank != root) /* one block, sent (gather) or received (scatter) */
        return scatter ? ctx_single(&x, ro, "recvbuf", 0, 1, ro)
                       : ctx_single(&x, so, "sendbuf", 1, 0, NULL);
    /* the root's buffer of every block, and its own block or None */
    PyObject *whole = scatter ? so : ro, *part = scatter ? ro : so;
    const char *warg = scatter ? "sendbuf" : "recvbuf";
    int inplace = part == Py_None;
    size_t block;
    hbuf_t *w = ctx_buf(&x, whole, scatter ? inplace : 1, warg);
    if (!w || ctx_blocks(&x, w, warg, &block) < 0 || ctx_blocked(&x, scatter, part, root) < 0)
        return ctx_fail(&x);
    return ctx_finish(&x, scatter && inplace ? so : ro);
}

static PyObject *impl_gather(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    return impl_rooted(self, args, kw, nb, K_GATHER);
}

static PyObject *impl_scatter(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    return impl_rooted(self, args, kw, nb, K_SCATTER);
}

/* allgatherv(sendbuf, recvbuf, recvcounts, displs=None): sendbuf None: in
 * place (at displs[rank] of recvbuf). */
static PyObject *impl_allgatherv(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    static char *kwl[] = {"sendbuf", "recvbuf", "recvcounts", "displs", "dtype", NULL};
    PyObject *so, *ro, *co, *dso = Py_None, *dto = Py_None;
    ctx_t x;
    if (!CTX_BEGIN(x, K_ALLGATHERV, dto, "OOO|OO", &so, &ro, &co, &dso, &dto))
        return NULL;
    call_t *c = &x.c;
    hbuf_t *r = ctx_buf(&x, ro, 1, "recvbuf"), *s;
    if (!r)
        return NULL;
    size_t scale;
    c->dt = xfer_dtype(r, &scale);
    if (ctx_vector(&x, co, dso, scale, "recvcounts", "displs", &c->c1, &c->d1) < 0 ||
        ctx_reach(&x, r, scale, c->c1, c->d1, "recvbuf", "recvcounts", "displs") < 0)
        return ctx_fail(&x);
    c->rbuf = r->ptr;
    if (so == Py_None) {
        c->sbuf = r->ptr + c->d1[self->rank] / scale * r->itemsize;
        c->count = c->c1[self->rank];
    } else {
        if (!(s = ctx_second(&x, so, 1)))
            return ctx_fail(&x);
        c->sbuf = s->ptr;
        c->count = hbuf_count(s) * scale;
    }
    return ctx_finish(&x, ro);
}

static PyObject *impl_reduce_scatterv(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    static char *kwl[] = {"sendbuf", "recvbuf", "recvcounts", "op", "dtype", NULL};
    PyObject *so, *ro, *co, *dto = Py_None;
    int op = HCOMM_SUM;
    ctx_t x;
    if (!CTX_BEGIN(x, K_REDUCE_SCATTERV, dto, "OOO|iO", &so, &ro, &co, &op, &dto))
        return NULL;
    call_t *c = &x.c;
    int n = self->size;
    c->op = (hcomm_op_t)op;
    hbuf_t *s = ctx_reducible(&x, so, 0), *r;
    if (!s || !(r = ctx_second(&x, ro, 0)) || parse_counts(co, n, 1, x.fn, "recvcounts", &c->c1) < 0)
        return ctx_fail(&x);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += c->c1[i];
    if (total != hbuf_count(s)) {
        PyErr_Format(PyExc_ValueError, "%s: sendbuf has %zu elements, recvcounts sum to %zu", x.fn,
                     hbuf_count(s), total);
        return ctx_fail(&x);
    }
    if (hbuf_count(r) < c->c1[self->rank]) {
        PyErr_Format(PyExc_ValueError, "%s: recvbuf has %zu elements, recvcounts[%d] is %zu", x.fn,
                     hbuf_count(r), self->rank, c->c1[self->rank]);
        return ctx_fail(&x);
    }
    c->rbuf = r->ptr;
    return ctx_finish(&x, ro);
}

static PyObject *impl_alltoallv(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    static char *kwl[] = {"sendbuf", "sendcounts", "recvbuf", "recvcounts",
                          "sdispls", "rdispls",    "dtype",   NULL};
    PyObject *so, *sco, *ro, *rco, *sdo = Py_None, *rdo = Py_None, *dto = Py_None;
    ctx_t x;
    if (!CTX_BEGIN(x, K_ALLTOALLV, dto, "OOOO|OOO", &so, &sco, &ro, &rco, &sdo, &rdo, &dto))
        return NULL;
    call_t *c = &x.c;
    hbuf_t *s = ctx_buf(&x, so, 0, "sendbuf"), *r;
    if (!s || !(r = ctx_second(&x, ro, 0)))
        return ctx_fail(&x);
    size_t scale;
    c->dt = xfer_dtype(s, &scale);
    if (ctx_vector(&x, sco, sdo, scale, "sendcounts", "sdispls", &c->c1, &c->d1) < 0 ||
        ctx_vector(&x, rco, rdo, scale, "recvcounts", "rdispls", &c->c2, &c->d2) < 0 ||
        ctx_reach(&x, s, scale, c->c1, c->d1, "sendbuf", "sendcounts", "sdispls") < 0 ||
        ctx_reach(&x, r, scale, c->c2, c->d2, "recvbuf", "recvcounts", "rdispls") < 0)
        return ctx_fail(&x);
    c->sbuf = s->ptr;
    c->rbuf = r->ptr;
    return ctx_finish(&x, ro);
}

/* send(buf, dest, tag=0) and recv(buf, source, tag=0). */
static PyObject *impl_p2p(CommObject *self, PyObject *args, PyObject *kw, int nb, kind_t kind)
{
    static char *send_kwl[] = {"buf", "dest", "tag", "dtype", NULL};
    static char *recv_kwl[] = {"buf", "source", "tag", "dtype", NULL};
    int recv = kind == K_RECV;
    char **kwl = recv ? recv_kwl : send_kwl;
    PyObject *bo, *dto = Py_None;
    int peer, tag = 0;
    ctx_t x;
    if (!CTX_BEGIN(x, kind, dto, "Oi|iO", &bo, &peer, &tag, &dto))
        return NULL;
    x.c.peer = peer;
    x.c.tag = tag;
    return ctx_single(&x, bo, "buf", !recv, recv, recv ? bo : NULL);
}

/* recv_any(buf, tag=0): from whichever rank sends first; returns its rank
 * (irecv_any: a Request whose wait() does). */
static PyObject *impl_recv_any(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    static char *kwl[] = {"buf", "tag", "dtype", NULL};
    PyObject *bo, *dto = Py_None;
    int tag = 0;
    ctx_t x;
    if (!CTX_BEGIN(x, K_RECV, dto, "O|iO", &bo, &tag, &dto))
        return NULL;
    x.c.peer = HCOMM_ANY_SOURCE;
    x.c.tag = tag;
    x.c.want_source = 1;
    return ctx_single(&x, bo, "buf", 0, 1, NULL);
}

static PyObject *impl_send(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    return impl_p2p(self, args, kw, nb, K_SEND);
}

static PyObject *impl_recv(CommObject *self, PyObject *args, PyObject *kw, int nb)
{
    return impl_p2p(self, args, kw, nb, K_RECV);
}

#define HC_PAIR(name)                                                                              \
    static PyObject *comm_##name(CommObject *s, PyObject *a, PyObject *k)                          \
    {                                                                                              \
        return impl_##name(s, a, k, 0);                                                            \
    }                                                                                              \
    static PyObject *comm_i##name(CommObject *s, PyObject *a, PyObject *k)                         \
    {                                                                                              \
        return impl_##name(s, a, k, 1);                                                            \
    }
HC_PAIR(allreduce)
HC_PAIR(broadcast)
HC_PAIR(reduce)
HC_PAIR(allgather)
HC_PAIR(reduce_scatter)
HC_PAIR(alltoall)
HC_PAIR(barrier)
HC_PAIR(gather)
HC_PAIR(scatter)
HC_PAIR(allgatherv)
HC_PAIR(reduce_scatterv)
HC_PAIR(alltoallv)
HC_PAIR(send)
HC_PAIR(recv)
HC_PAIR(recv_any)

#define HC_METH(name, doc)                                                                         \
    {#name, (PyCFunction)(void (*)(void))comm_##name, METH_VARARGS | METH_KEYWORDS, doc},          \
        {"i" #name, (PyCFunction)(void (*)(void))comm_i##name, METH_VARARGS | METH_KEYWORDS,       \
         "non-blocking " #name ": returns a Request"}

static PyMethodDef comm_methods[] = {
    HC_METH(allreduce, "allreduce(sendbuf, recvbuf=None, op=SUM, dtype=None): recvbuf None: in place"),
    HC_METH(broadcast, "broadcast(buf, root=0, dtype=None)"),
    HC_METH(reduce, "reduce(sendbuf, recvbuf=None, op=SUM, root=0, dtype=None): recvbuf on root "
                    "(None: in place)"),
    HC_METH(allgather, "allgather(sendbuf, recvbuf, dtype=None): sendbuf None: in place"),
    HC_METH(reduce_scatter, "reduce_scatter(sendbuf, recvbuf=None, op=SUM, dtype=None): recvbuf "
                            "None: in place (block rank of sendbuf)"),
    HC_METH(alltoall, "alltoall(sendbuf, recvbuf=None, dtype=None): recvbuf None: in place"),
    HC_METH(barrier, "barrier()"),
    HC_METH(gather, "gather(sendbuf, recvbuf=None, root=0, dtype=None): recvbuf on root; sendbuf "
                    "None on root: in place"),
    HC_METH(scatter, "scatter(sendbuf, recvbuf=None, root=0, dtype=None): sendbuf on root; "
                     "recvbuf None on root: in place"),
    HC_METH(allgatherv, "allgatherv(sendbuf, recvbuf, recvcounts, displs=None, dtype=None): "
                        "sendbuf None: in place"),
    HC_METH(reduce_scatterv, "reduce_scatterv(sendbuf, recvbuf, recvcounts, op=SUM, dtype=None)"),
    HC_METH(alltoallv, "alltoallv(sendbuf, sendcounts, recvbuf, recvcounts, sdispls=None, "
                       "rdispls=None, dtype=None)"),
    HC_METH(send, "send(buf, dest, tag=0, dtype=None)"),
    HC_METH(recv, "recv(buf, source, tag=0, dtype=None): returns buf (source may be "
                  "ANY_SOURCE)"),
    HC_METH(recv_any, "recv_any(buf, tag=0, dtype=None): from whichever rank sends first; "
                      "returns its rank"),
    {"split", (PyCFunction)(void (*)(void))comm_split, METH_VARARGS | METH_KEYWORDS,
     "split(color, key=rank): a new Comm of the ranks with this color (None for a negative "
     "color)"},
    {"free", (PyCFunction)comm_free_m, METH_NOARGS, "free(): release a communicator from split()"},
    {"abort", (PyCFunction)comm_abort_m, METH_NOARGS,
     "abort(): make pending and later operations fail with ERR_ABORTED (any thread)"},
    {"__enter__", (PyCFunction)comm_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)comm_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef comm_getset[] = {
    {"rank", (getter)comm_get_rank, NULL, "this process's rank in the communicator", NULL},
    {"size", (getter)comm_get_size, NULL, "the number of ranks", NULL},
    {NULL},
};

static PyTypeObject CommType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hcomm.Comm",
    .tp_basicsize = sizeof(CommObject),
    .tp_dealloc = (destructor)comm_dealloc,
    .tp_repr = (reprfunc)comm_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An hcomm communicator: hcomm.world() or Comm.split()",
    .tp_methods = comm_methods,
    .tp_getset = comm_getset,
};

static PyMethodDef request_methods[] = {
    {"wait", (PyCFunction)request_wait, METH_NOARGS,
     "wait(): block until done; returns the output buffer (None for send/barrier), raises "
     "hcomm.Error on failure"},
    {"test", (PyCFunction)request_test, METH_NOARGS,
     "test(): True when done (raises hcomm.Error on failure), False otherwise"},
    {NULL},
};

static PyGetSetDef request_getset[] = {
    {"done", (getter)request_get_done, NULL, "True once completed (by wait or test)", NULL},
    {NULL},
};

static PyTypeObject RequestType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hcomm.Request",
    .tp_basicsize = sizeof(RequestObject),
    .tp_dealloc = (destructor)request_dealloc,
    .tp_repr = (reprfunc)request_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A non-blocking operation in flight; holds its buffers until it completes",
    .tp_methods = request_methods,
    .tp_getset = request_getset,
};

/* ---- module functions ------------------------------------------------------ */

/* hcomm_init_rank(p), or hcomm_init from the environment (p NULL), taking
 * hcomm.init()'s hold. */
static PyObject *init_with_hold(const hcomm_init_params_t *p)
{
    hcomm_status_t st;
    Py_BEGIN_ALLOW_THREADS lib_lock();
    st = p ? hcomm_init_rank(p) : hcomm_init(NULL, NULL);
    if (st == HCOMM_OK) {
        g_holds = 1;
        g_py_hold = 1;
    }
    lib_unlock();
    Py_END_ALLOW_THREADS
    if (st < 0)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *m_init_env(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return init_with_hold(NULL);
}

static PyObject *m_init_rank(PyObject *m, PyObject *args, PyObject *kw)
{
    (void)m;
    static char *kwl[] = {"rank", "size", "bootstrap", "key", "local_rank", "local_size", NULL};
    hcomm_init_params_t p = {.local_rank = -1, .local_size = -1};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ii|zzii:init_rank", kwl, &p.rank, &p.size,
                                     &p.bootstrap, &p.job_key, &p.local_rank, &p.local_size))
        return NULL;
    return init_with_hold(&p);
}

static PyObject *m_bootstrap_address(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    char url[256], key[64];
    hcomm_status_t st = hcomm_bootstrap_address(url, sizeof(url), key, sizeof(key));
    if (st < 0)
        return raise_status(st);
    return Py_BuildValue("(ss)", url, key);
}

static PyObject *m_finalize(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    if (!hcomm_initialized()) {
        hcomm_status_t st = hcomm_finalize(); /* the library's own error */
        return raise_status(st < 0 ? st : HCOMM_ERR_NOT_INITIALIZED);
    }
    hcomm_status_t st = HCOMM_OK;
    int fin = 0, held;
    Py_BEGIN_ALLOW_THREADS lib_lock();
    held = g_py_hold;
    if (held) {
        g_py_hold = 0;
        fin = drop_hold_locked(&st);
    }
    lib_unlock();
    Py_END_ALLOW_THREADS
    if (!held)
        return raise_fmt(HCOMM_ERR_INVALID,
                         "hcomm.finalize: hcomm was not initialized by hcomm.init() but by a torch "
                         "process group (torch.distributed.destroy_process_group() finalizes it)");
    if (fin)
        after_finalize();
    if (st < 0)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *m_initialized(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyBool_FromLong(hcomm_initialized());
}

static PyObject *m_world(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    hcomm_comm_t w = hcomm_comm_world();
    if (!w)
        return raise_fmt(HCOMM_ERR_NOT_INITIALIZED,
                         "hcomm.world: hcomm is not initialized (call hcomm.init first)");
    if (!g_world || ((CommObject *)g_world)->gen != g_gen || ((CommObject *)g_world)->comm != w) {
        Py_CLEAR(g_world);
        g_world = comm_new(w, 0);
        if (!g_world)
            return NULL;
    }
    Py_INCREF(g_world);
    return g_world;
}

static PyObject *m_version(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyUnicode_FromString(hcomm_version_string());
}

/* arg as a C long: 0, or -1 with the exception set. */
static int long_arg(PyObject *arg, long *v)
{
    *v = PyLong_AsLong(arg);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *m_strerror(PyObject *m, PyObject *arg)
{
    (void)m;
    long v;
    if (long_arg(arg, &v) < 0)
        return NULL;
    return PyUnicode_FromString(hcomm_strerror((hcomm_status_t)v));
}

static PyObject *m_last_error(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    return PyUnicode_FromString(hcomm_last_error());
}

static PyObject *m_dtype_size(PyObject *m, PyObject *arg)
{
    (void)m;
    long v;
    if (long_arg(arg, &v) < 0)
        return NULL;
    return PyLong_FromSize_t(hcomm_dtype_size((hcomm_dtype_t)v));
}

static PyObject *m_dtype_of(PyObject *m, PyObject *arg)
{
    (void)m;
    hbuf_t b;
    if (resolve(arg, 0, -1, "hcomm.dtype_of", "obj", &b) < 0)
        return NULL;
    int dt = b.dtype;
    hbuf_release(&b);
    if (dt < 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(dt);
}

static PyObject *m_stats_dump(PyObject *m, PyObject *args)
{
    (void)m;
    PyObject *co = Py_None;
    if (!PyArg_ParseTuple(args, "|O:stats_dump", &co))
        return NULL;
    hcomm_comm_t c = NULL;
    if (co != Py_None) {
        if (!PyObject_TypeCheck(co, &CommType)) {
            PyErr_SetString(PyExc_TypeError, "hcomm.stats_dump: comm must be an hcomm.Comm or None");
            return NULL;
        }
        if (comm_check((CommObject *)co, "hcomm.stats_dump") < 0)
            return NULL;
        c = ((CommObject *)co)->comm;
    }
    hcomm_status_t st;
    HC_LOCKED(st, hcomm_stats_dump(c));
    if (st < 0)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *m_holds(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    int h, p;
    lib_lock();
    h = g_holds;
    p = g_py_hold;
    lib_unlock();
    return Py_BuildValue("(ii)", h, p);
}

static PyObject *m_pending(PyObject *m, PyObject *unused)
{
    (void)m;
    (void)unused;
    long n = 0;
    for (hop_t *op = g_ops.next; op != &g_ops; op = op->next)
        n++;
    return PyLong_FromLong(n);
}

static PyMethodDef module_methods[] = {
    {"init_env", m_init_env, METH_NOARGS, "hcomm_init(): the job described by the environment"},
    {"init_rank", (PyCFunction)(void (*)(void))m_init_rank, METH_VARARGS | METH_KEYWORDS,
     "init_rank(rank, size, bootstrap, key, local_rank=-1, local_size=-1): hcomm_init_rank"},
    {"bootstrap_address", m_bootstrap_address, METH_NOARGS,
     "bootstrap_address() -> (url, key): for rank 0 to hand to every rank"},
    {"finalize", m_finalize, METH_NOARGS, "drop hcomm.init()'s hold (the last hold finalizes)"},
    {"initialized", m_initialized, METH_NOARGS, "True between init and finalize"},
    {"world", m_world, METH_NOARGS, "the world communicator"},
    {"version", m_version, METH_NOARGS, "hcomm_version_string()"},
    {"strerror", m_strerror, METH_O, "hcomm_strerror(status)"},
    {"last_error", m_last_error, METH_NOARGS, "this thread's hcomm_last_error()"},
    {"dtype_size", m_dtype_size, METH_O, "hcomm_dtype_size(dtype)"},
    {"dtype_of", m_dtype_of, METH_O, "the hcomm dtype of an array or tensor (None: moved as bytes)"},
    {"stats_dump", m_stats_dump, METH_VARARGS, "hcomm_stats_dump(comm=None)"},
    {"_holds", m_holds, METH_NOARGS, "(holds, module's hold): for tests"},
    {"_pending", m_pending, METH_NOARGS, "operations in flight (incl. dropped ones): for tests"},
    {NULL},
};

static struct PyModuleDef hcomm_module = {
    PyModuleDef_HEAD_INIT, .m_name = "hcomm._hcomm",
    .m_doc = "CPython binding of libhcomm (use the hcomm package)", .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__hcomm(void)
{
    if (PyType_Ready(&CommType) < 0 || PyType_Ready(&RequestType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&hcomm_module);
    if (!m)
        return NULL;
    g_error = PyErr_NewExceptionWithDoc(
        "hcomm.Error",
        "An hcomm call failed: .status (the hcomm_status_t), .status_name, .message "
        "(hcomm_last_error())",
        PyExc_RuntimeError, NULL);
    g_torch_dtypes = PyDict_New();
    if (!g_error || !g_torch_dtypes)
        goto fail;
    Py_INCREF(g_error);
    if (PyModule_AddObject(m, "Error", g_error) < 0)
        goto fail;
    Py_INCREF(&CommType);
    if (PyModule_AddObject(m, "Comm", (PyObject *)&CommType) < 0)
        goto fail;
    Py_INCREF(&RequestType);
    if (PyModule_AddObject(m, "Request", (PyObject *)&RequestType) < 0)
        goto fail;
#define HC_ADD_STATUS_(name, value, text)                                                          \
    if (PyModule_AddIntConstant(m, #name, value) < 0)                                              \
        goto fail;
    HCOMM_STATUS_MAP(HC_ADD_STATUS_)
#undef HC_ADD_STATUS_
    static const struct {
        const char *n;
        int v;
    } consts[] = {
        {"INT8", HCOMM_INT8},       {"UINT8", HCOMM_UINT8},       {"INT32", HCOMM_INT32},
        {"UINT32", HCOMM_UINT32},   {"INT64", HCOMM_INT64},       {"UINT64", HCOMM_UINT64},
        {"FLOAT16", HCOMM_FLOAT16}, {"BFLOAT16", HCOMM_BFLOAT16}, {"FLOAT32", HCOMM_FLOAT32},
        {"FLOAT64", HCOMM_FLOAT64}, {"SUM", HCOMM_SUM},           {"PROD", HCOMM_PROD},
        {"MAX", HCOMM_MAX},         {"MIN", HCOMM_MIN},           {"AVG", HCOMM_AVG},
        {"UNDEFINED", HCOMM_UNDEFINED}, {"ANY_SOURCE", HCOMM_ANY_SOURCE},
    };
    for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++)
        if (PyModule_AddIntConstant(m, consts[i].n, consts[i].v) < 0)
            goto fail;
    PyObject *cap = PyCapsule_New(&g_capi, HCPY_CAPI_NAME, NULL);
    if (!cap || PyModule_AddObject(m, "_C_API", cap) < 0) {
        Py_XDECREF(cap);
        goto fail;
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
