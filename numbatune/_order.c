/* The stream order of numbatune.streams.order. Its Python reference, tests/order_reference.py
 * (StreamOrder), takes the same steps and makes the same calls to its events, in the same order,
 * with the same ``last_use`` and ``quick`` dicts; this takes a fraction of its time. The Python
 * class is the tests' oracle; the comments name its methods.
 *
 * Where the Python class keeps a dict per kind of state (each stream's open entry, event, the
 * epochs it waited for, the last barrier), this keeps one record per stream (a Stream, found by
 * one lookup), so that a launch that waits for another stream costs a few dict operations.
 * Callers of use(), launched(), barrier(), retire() and forget() hold the monitor's lock, as
 * they do for the Python class; the generated launch code calls before(), after(), hold() and
 * apart() without it, and they take it (or leave the rest to the monitor, which does) where
 * the order must change. Entries, (stream, epoch) tuples, are compared by identity. Streams
 * the program let go of are retired and forgotten (retire, forget), which the Python class
 * does not do.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_native.h"

/* One stream's state: what the Python class keeps in _open, _event, _waited, _barrier and
 * _past_barrier under the stream's key. */
typedef struct {
    PyObject_HEAD
    PyObject *stream;        /* its key, as first given */
    PyObject *entry;         /* its open entry (stream, epoch); NULL before the first */
    long long epoch;         /* the open entry's epoch; 0 without one */
    PyObject *event;         /* its event; NULL until made */
    Py_ssize_t index;        /* its position among the order's streams */
    long long *waited;       /* waited[i]: the last epoch of stream i it waited for */
    Py_ssize_t waited_size;  /* how many waited holds (0 beyond) */
    int used;                /* whether a use noted its open epoch (StreamOrder._used) */
    unsigned long passed;    /* the number of the last barrier whose waits it had, plus one */
    long long barrier_epoch; /* its epoch at the last barrier (streams open then) */
} Stream;

static int stream_traverse(Stream *self, visitproc visit, void *arg) {
    Py_VISIT(self->stream);
    Py_VISIT(self->entry);
    Py_VISIT(self->event);
    return 0;
}

static int stream_clear(Stream *self) {
    Py_CLEAR(self->stream);
    Py_CLEAR(self->entry);
    Py_CLEAR(self->event);
    return 0;
}

static void stream_dealloc(Stream *self) {
    PyObject_GC_UnTrack(self);
    stream_clear(self);
    PyMem_Free(self->waited);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject stream_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "numbatune._native.OrderStream",
    .tp_basicsize = sizeof(Stream),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One stream's state in an Order.",
    .tp_traverse = (traverseproc)stream_traverse,
    .tp_clear = (inquiry)stream_clear,
    .tp_dealloc = (destructor)stream_dealloc,
};

typedef struct {
    PyObject_HEAD
    PyObject *events;     /* create(timing, stream), record(event, stream), wait_event(...) */
    PyObject *record;     /* events.record, or NULL until events is set */
    PyObject *wait_event; /* events.wait_event, or NULL until events is set */
    int driver;           /* whether those are the module's: the driver is called directly */
    PyObject *capturing;  /* events.capturing(stream), or NULL where the events have none */
    PyObject *last_use;   /* buffer -> the entry of its last use */
    PyObject *quick;      /* stream -> its open entry, for streams whose launches may skip use */
    PyObject *streams;    /* stream -> its Stream */
    PyObject *opened;     /* the Streams with an open entry, in the order they got one */
    Py_ssize_t count;     /* how many indexes Streams were given */
    PyObject *free;       /* the indexes of forgotten Streams, for the next ones made */
    Py_ssize_t barrier_streams; /* how many of ``opened`` the last barrier holds */
    unsigned long barriers;     /* how many barriers so far */
    Py_ssize_t limit;
    /* What the generated launch code reads of the monitor, and the monitor, whose methods
     * before(), after(), hold() and wait() take what this leaves to Python. */
    PyObject *stream;   /* the one stream launched on so far; None before it and once ordering */
    char ordering;      /* whether every launch is ordered (a second stream, or a profile) */
    PyObject *lock;     /* the lock the monitor guards itself and its order with */
    PyObject *pending;  /* stream -> (event, arrays kept not yet behind it), for the keeper */
    PyObject *blocking; /* stream -> whether it is a blocking one, as far as asked */
    PyObject *monitor;  /* None until set */
} Order;

/* The Stream of ``key``, made on first use; a borrowed reference. */
static Stream *stream_of(Order *self, PyObject *key) {
    PyObject *found = PyDict_GetItemWithError(self->streams, key);
    if (found != NULL || PyErr_Occurred()) return (Stream *)found;
    Stream *made = PyObject_GC_New(Stream, &stream_type);
    if (made == NULL) return NULL;
    memset(&made->stream, 0, sizeof(Stream) - offsetof(Stream, stream)); /* every field NULL, 0 */
    made->stream = Py_NewRef(key);
    Py_ssize_t reused = PyList_GET_SIZE(self->free);
    made->index = reused ? PyLong_AsSsize_t(PyList_GET_ITEM(self->free, reused - 1)) : self->count;
    PyObject_GC_Track(made);
    int failed = PyDict_SetItem(self->streams, key, (PyObject *)made);
    Py_DECREF(made);
    if (failed || (reused && PyList_SetSlice(self->free, reused - 1, reused, NULL) < 0)) {
        return NULL;
    }
    self->count += !reused;
    return made;
}

/* The last epoch of ``producer`` that ``stream`` waited for (0: none). */
static long long waited_for(Stream *stream, Stream *producer) {
    return producer->index < stream->waited_size ? stream->waited[producer->index] : 0;
}

static int set_waited(Stream *stream, Stream *producer, long long epoch) {
    if (producer->index >= stream->waited_size) {
        Py_ssize_t size = producer->index + 8;
        long long *grown = PyMem_Realloc(stream->waited, (size_t)size * sizeof(long long));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = stream->waited_size; i < size; i++) grown[i] = 0;
        stream->waited = grown;
        stream->waited_size = size;
    }
    stream->waited[producer->index] = epoch;
    return 0;
}

/* A new (stream, epoch) entry as the stream's open one, and its quick one where it has one. */
static int open_entry(Order *self, Stream *stream, long long epoch) {
    PyObject *number = PyLong_FromLongLong(epoch);
    if (number == NULL) return -1;
    PyObject *entry = PyTuple_Pack(2, stream->stream, number);
    Py_DECREF(number);
    if (entry == NULL) return -1;
    if (stream->entry == NULL && PyList_Append(self->opened, (PyObject *)stream) < 0) {
        Py_DECREF(entry);
        return -1;
    }
    Py_XSETREF(stream->entry, entry);
    stream->epoch = epoch;
    stream->used = 0;
    PyObject *quick = PyDict_GetItemWithError(self->quick, stream->stream);
    if (quick == NULL) return PyErr_Occurred() ? -1 : 0;
    return PyDict_SetItem(self->quick, stream->stream, entry);
}

/* Whether a method got ``count`` arguments, the second a tuple where ``tuple``: else a TypeError
 * that shows the call (``usage``). */
static int called(Py_ssize_t nargs, Py_ssize_t count, PyObject *const *args, int tuple,
                  const char *usage) {
    if (nargs == count && (!tuple || PyTuple_Check(args[1]))) return 1;
    PyErr_SetString(PyExc_TypeError, usage);
    return 0;
}

/* method(a, b), its result dropped. */
static int call_events(PyObject *method, PyObject *a, PyObject *b) {
    PyObject *args[2] = {a, b};
    PyObject *result = PyObject_Vectorcall(method, args, 2, NULL);
    if (result == NULL) return -1;
    Py_DECREF(result);
    return 0;
}

/* A handle from a Python int, or NULL with *failed set where it is not one (no exception). */
static void *handle_of(PyObject *value, int *failed) {
    void *handle = PyLong_Check(value) ? PyLong_AsVoidPtr(value) : NULL;
    if (handle == NULL && (!PyLong_Check(value) || PyErr_Occurred())) {
        PyErr_Clear();
        *failed = 1;
    }
    return handle;
}

/* The handles of the ints ``a`` and ``b`` into ``*x`` and ``*y``: whether both are ints. */
static inline int handles_of(PyObject *a, PyObject *b, void **x, void **y) {
    int failed = 0;
    *x = handle_of(a, &failed);
    *y = handle_of(b, &failed);
    return !failed;
}

/* events.record(event, stream): cuEventRecord itself where the events are the driver's. Where
 * the direct call fails, the call is made again through events.record, which raises the
 * driver's error as the module's record does. */
static int record_event(Order *self, PyObject *event, PyObject *stream) {
    void *e, *s;
    if (self->driver && handles_of(event, stream, &e, &s) && event_record(e, s) == 0) return 0;
    return call_events(self->record, event, stream);
}

/* events.wait_event(stream, event): cuStreamWaitEvent itself where the events are the
 * driver's (as record_event). */
static int wait_event_on(Order *self, PyObject *stream, PyObject *event) {
    void *s, *e;
    if (self->driver && handles_of(stream, event, &s, &e) && stream_wait_event(s, e, 0) == 0) {
        return 0;
    }
    return call_events(self->wait_event, stream, event);
}

/* The stream's event, made on first use (a borrowed reference). */
static PyObject *event_of(Order *self, Stream *stream) {
    if (self->record == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Order: its events were never set");
        return NULL;
    }
    if (stream->event != NULL) return stream->event;
    PyObject *create = PyObject_GetAttrString(self->events, "create");
    PyObject *no_args = PyTuple_New(0);
    PyObject *options = Py_BuildValue("{sOsO}", "timing", Py_False, "stream", stream->stream);
    PyObject *made = create && no_args && options ? PyObject_Call(create, no_args, options) : NULL;
    Py_XDECREF(create);
    Py_XDECREF(no_args);
    Py_XDECREF(options);
    if (made == NULL) return NULL;
    Py_XSETREF(stream->event, made); /* (a create that made one meanwhile: the last one) */
    return made;
}

/* StreamOrder._captured: whether work queued on ``key`` now goes into a CUDA graph being
 * captured (or the driver cannot say): 1, 0, or -1 with an exception. cuStreamIsCapturing
 * itself where the events are the driver's. */
static int captured(Order *self, PyObject *key) {
    void *s, *unused;
    int status = 0;
    if (self->driver && stream_is_capturing != NULL && handles_of(key, key, &s, &unused)) {
        return stream_is_capturing(s, &status) != 0 || status != 0;
    }
    if (self->capturing == NULL) return 0;
    PyObject *result = PyObject_CallOneArg(self->capturing, key);
    if (result == NULL) return -1;
    int answer = PyObject_IsTrue(result);
    Py_DECREF(result);
    return answer;
}

/* _end_epoch: record the stream's event after all queued on it so far, ending its open epoch.
 * ``stream`` is kept alive by the order's dict of streams. */
static int end_epoch(Order *self, Stream *stream) {
    PyObject *event = event_of(self, stream);
    if (event == NULL) return -1;
    Py_INCREF(event);
    int failed = record_event(self, event, stream->stream);
    Py_DECREF(event);
    return failed ? -1 : open_entry(self, stream, stream->epoch + 1);
}

/* _wait_for: ``stream`` waits for ``producer``'s launches up to the end of ``epoch``: 0, or 1
 * where ``stream`` is being captured into a graph, or ``producer`` is while its event must be
 * recorded now (nothing is recorded or waited for), or -1 with an exception. The producer's
 * capture is asked only then: an event recorded before waits for nothing on its stream, which
 * may be gone (a stream its program destroyed after its last launch recorded the event). */
static int wait_for(Order *self, Stream *stream, Stream *producer, long long epoch) {
    if (producer == stream || waited_for(stream, producer) >= epoch) return 0;
    int record = producer->epoch <= epoch; /* (no event recorded on it since) */
    int skipped = captured(self, stream->stream);
    if (skipped == 0 && record) skipped = captured(self, producer->stream);
    if (skipped) return skipped;
    if (record && end_epoch(self, producer) < 0) return -1;
    PyObject *event = event_of(self, producer);
    if (event == NULL) return -1;
    Py_INCREF(event);
    int failed = wait_event_on(self, stream->stream, event);
    Py_DECREF(event);
    return failed ? -1 : set_waited(stream, producer, producer->epoch - 1);
}

/* barrier(): forget every buffer; each stream's next launch waits for all queued on the others:
 * up to their open epoch, or, where no use noted it (and the stream is not quick), the last one
 * recorded. */
static PyObject *barrier(Order *self, PyObject *unused) {
    self->barrier_streams = PyList_GET_SIZE(self->opened);
    for (Py_ssize_t i = 0; i < self->barrier_streams; i++) {
        Stream *stream = (Stream *)PyList_GET_ITEM(self->opened, i);
        int quick = PyDict_Contains(self->quick, stream->stream);
        if (quick < 0) return NULL;
        stream->barrier_epoch = stream->used || quick ? stream->epoch : stream->epoch - 1;
    }
    self->barriers++;
    PyDict_Clear(self->last_use);
    PyDict_Clear(self->quick);
    Py_RETURN_NONE;
}

/* The waits for the last barrier, where ``stream`` has not had them yet (had, once none was
 * skipped for a capture). */
static int pass_barrier(Order *self, Stream *stream) {
    if (stream->passed == self->barriers + 1) return 0;
    int skipped = 0;
    for (Py_ssize_t i = 0; i < self->barrier_streams; i++) {
        Stream *producer = (Stream *)PyList_GET_ITEM(self->opened, i);
        int waited = wait_for(self, stream, producer, producer->barrier_epoch);
        if (waited < 0) return -1;
        skipped |= waited;
    }
    if (!skipped) stream->passed = self->barriers + 1;
    return 0;
}

/* use() for the ``count`` buffers at ``buffers``: 0, or -1 with an exception. */
static int use_buffers(Order *self, PyObject *key, PyObject *const *buffers, Py_ssize_t count,
                       int quick) {
    Stream *stream = stream_of(self, key);
    if (stream == NULL) return -1;
    Py_INCREF(stream); /* (the events' calls may run code that replaces dict values) */
    int failed = pass_barrier(self, stream) < 0 ||
                 (stream->entry == NULL && open_entry(self, stream, 1) < 0);
    stream->used = 1;
    PyObject *entry = failed ? NULL : Py_NewRef(stream->entry);
    PyObject *seen = NULL; /* the last entry waited for */
    int skipped = 0;       /* whether the wait for ``seen`` was skipped for a capture */
    for (Py_ssize_t i = 0; !failed && i < count; i++) {
        PyObject *last = PyDict_GetItemWithError(self->last_use, buffers[i]);
        if (last == entry) continue;
        if (last == NULL && PyErr_Occurred()) {
            failed = 1;
            break;
        }
        if (last != NULL && last != seen) {
            Py_INCREF(last);
            Py_XSETREF(seen, last);
            Stream *producer = stream_of(self, PyTuple_GET_ITEM(last, 0));
            long long epoch = PyLong_AsLongLong(PyTuple_GET_ITEM(last, 1));
            skipped = producer == NULL || (epoch < 0 && PyErr_Occurred())
                          ? -1
                          : wait_for(self, stream, producer, epoch);
            failed = skipped < 0;
            if (failed) break;
        }
        /* (a use whose wait a capture skipped is not the buffer's last: its last use stays the
         * work that runs, which later launches wait for) */
        if (last == NULL || !skipped) {
            failed = PyDict_SetItem(self->last_use, buffers[i], entry) < 0;
        }
    }
    Py_XDECREF(seen);
    if (!failed) {
        if (PyDict_GET_SIZE(self->last_use) > self->limit) {
            PyObject *done = barrier(self, NULL);
            failed = done == NULL;
            Py_XDECREF(done);
        } else if (quick) {
            failed = PyDict_SetItem(self->quick, key, entry) < 0;
        }
    }
    Py_XDECREF(entry);
    Py_DECREF(stream);
    return failed ? -1 : 0;
}

/* use(stream, buffers, quick=False): queue the waits a launch on ``stream`` that uses
 * ``buffers`` needs, and note the use; ``quick``: the stream's later launches may skip this
 * while their buffers stay in its open epoch. */
static PyObject *use(Order *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    nargs = PyVectorcall_NARGS(nargs);
    Py_ssize_t keywords = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs < 2 || nargs + keywords > 3 ||
        (keywords && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "quick") != 0)) {
        PyErr_SetString(PyExc_TypeError, "use(stream, buffers, quick=False)");
        return NULL;
    }
    int quick = nargs + keywords == 3 ? PyObject_IsTrue(args[2]) : 0;
    if (quick < 0) return NULL;
    /* (a tuple: what the events' calls do cannot change it while it is read) */
    PyObject *buffers = PyTuple_Check(args[1]) ? Py_NewRef(args[1]) : PySequence_Tuple(args[1]);
    if (buffers == NULL) return NULL;
    int failed = use_buffers(self, args[0], &PyTuple_GET_ITEM(buffers, 0),
                             PyTuple_GET_SIZE(buffers), quick);
    Py_DECREF(buffers);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

static PyObject *acquire_name = NULL, *release_name = NULL; /* "acquire", "release" */

/* lock.acquire() or lock.release() (``method``): 0, or -1 with an exception. */
static int call_lock(PyObject *lock, PyObject *method) {
    PyObject *result = PyObject_CallMethodNoArgs(lock, method);
    Py_XDECREF(result);
    return result == NULL ? -1 : 0;
}

/* use(stream, buffers) under ``lock``: 0, or -1 with an exception (use's, if it raised). */
static int use_locked(Order *self, PyObject *key, PyObject *buffers, PyObject *lock) {
    if (call_lock(lock, acquire_name) < 0) return -1;
    Py_INCREF(buffers); /* (while use reads them) */
    int failed = use_buffers(self, key, &PyTuple_GET_ITEM(buffers, 0), PyTuple_GET_SIZE(buffers), 0);
    Py_DECREF(buffers);
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback); /* use's error, if any, is the one raised */
    int released = call_lock(lock, release_name);
    if (type != NULL) PyErr_Restore(type, value, traceback);
    return failed || released < 0 ? -1 : 0;
}

/* StreamOrder.quick_use for the tuple ``buffers``: the stream's open entry, or None (new
 * references), or NULL with an exception. */
static PyObject *quick_entry(Order *self, PyObject *key, PyObject *buffers, PyObject *lock) {
    PyObject *entry = PyDict_GetItemWithError(self->quick, key);
    if (entry == NULL) return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    Py_INCREF(entry);
    int moved = PyDict_GET_SIZE(self->last_use) >= self->limit;
    for (Py_ssize_t i = 0; !moved && i < PyTuple_GET_SIZE(buffers); i++) {
        PyObject *last = PyDict_SetDefault(self->last_use, PyTuple_GET_ITEM(buffers, i), entry);
        if (last == NULL) {
            Py_DECREF(entry);
            return NULL;
        }
        moved = last != entry;
    }
    if (moved && use_locked(self, key, buffers, lock) < 0) Py_CLEAR(entry);
    return entry;
}

/* quick_use(stream, buffers, lock) -> the stream's open entry, or None (StreamOrder.quick_use):
 * on a quick stream, buffers last used in its open epoch (or never: noted so now) need
 * nothing; else use(stream, buffers) runs under ``lock``. */
static PyObject *quick_use(Order *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!called(nargs, 3, args, 1, "quick_use(stream, buffers: tuple, lock)")) return NULL;
    return quick_entry(self, args[0], args[1], args[2]);
}

static PyObject *before_name = NULL, *after_name = NULL, *hold_name = NULL, *wait_name = NULL;

/* monitor.<name>(*args): a new reference, or NULL with an exception. */
static PyObject *ask_monitor(Order *self, PyObject *name, PyObject *const *args, size_t nargs) {
    PyObject *call[5] = {self->monitor};
    for (size_t i = 0; i < nargs && i < 4; i++) call[i + 1] = args[i];
    if (self->monitor == NULL || self->monitor == Py_None) {
        PyErr_SetString(PyExc_RuntimeError, "Order: its monitor was never set");
        return NULL;
    }
    return PyObject_VectorcallMethod(name, call, nargs + 1, NULL);
}

/* before(stream, buffers, name, given) -> what after() takes, or None where it needs nothing:
 * the generated launch code's ordering of a launch of ``name`` on ``stream`` (a stream other
 * than the one in use, if any), which uses ``buffers``, after their last uses. On a quick
 * stream, quick_use under the monitor's lock: the stream's open entry. Else the monitor's
 * before(): what it returns (it needs its after()), or, where that is None, the stream's quick
 * entry, or () where a buffer's last use is already another (another thread ended the epoch
 * the monitor noted it in: after() notes it again). */
PyObject *order_before(PyObject *order, PyObject *const *args, Py_ssize_t nargs) {
    Order *self = (Order *)order;
    if (!called(nargs, 4, args, 1, "before(stream, buffers: tuple, name, given)")) return NULL;
    PyObject *entry = quick_entry(self, args[0], args[1], self->lock);
    if (entry != Py_None) return entry;
    Py_DECREF(entry);
    PyObject *watched = ask_monitor(self, before_name, args, 4);
    if (watched != Py_None) return watched;
    Py_DECREF(watched);
    entry = PyDict_GetItemWithError(self->quick, args[0]);
    if (entry == NULL) return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[1]); i++) {
        PyObject *last = PyDict_GetItemWithError(self->last_use, PyTuple_GET_ITEM(args[1], i));
        if (last != entry) return PyErr_Occurred() ? NULL : PyTuple_New(0);
    }
    return Py_NewRef(entry);
}

/* after(stream, buffers, ticket): once the launch before() returned ``ticket`` for is queued.
 * An entry: where it is no longer the stream's quick one (another thread ended the epoch), the
 * buffers are noted again under the lock (the event that ended it cannot cover the launch).
 * Else the monitor's after(ticket). */
PyObject *order_after(PyObject *order, PyObject *const *args, Py_ssize_t nargs) {
    Order *self = (Order *)order;
    if (!called(nargs, 3, args, 1, "after(stream, buffers: tuple, ticket)")) return NULL;
    if (!PyTuple_Check(args[2])) return ask_monitor(self, after_name, &args[2], 1);
    PyObject *entry = PyDict_GetItemWithError(self->quick, args[0]);
    if (entry == NULL && PyErr_Occurred()) return NULL;
    if (entry != args[2] && use_locked(self, args[0], args[1], self->lock) < 0) return NULL;
    Py_RETURN_NONE;
}

/* hold(stream, arrays): keep ``arrays`` alive past a launch queued on ``stream``: into the
 * stream's pending list where it has one (the keeper records its event), else the monitor's
 * hold(). */
PyObject *order_hold(PyObject *order, PyObject *const *args, Py_ssize_t nargs) {
    Order *self = (Order *)order;
    if (!called(nargs, 2, args, 0, "hold(stream, arrays)")) return NULL;
    PyObject *pending = PyDict_GetItemWithError(self->pending, args[0]);
    if (pending == NULL) return PyErr_Occurred() ? NULL : ask_monitor(self, hold_name, args, 2);
    PyObject *kept = PyTuple_Check(pending) && PyTuple_GET_SIZE(pending) == 2
                         ? PyTuple_GET_ITEM(pending, 1)
                         : NULL;
    if (kept == NULL || !PyList_Check(kept)) {
        PyErr_SetString(PyExc_TypeError, "Order: a pending entry is (event, list)");
        return NULL;
    }
    Py_ssize_t end = PyList_GET_SIZE(kept);
    if (PyList_SetSlice(kept, end, end, args[1]) < 0) return NULL;
    Py_RETURN_NONE;
}

/* apart(stream, producer, given, wait) -> whether a launch on ``stream`` is apart from
 * ``producer``, the current stream of its arrays' library (the caller found the two differ),
 * with nothing the driver does ordering one after the other: not the legacy default stream and
 * a blocking stream (each waits for the other's work), as far as ``blocking`` knows. Where
 * ``wait``, ``stream`` then waits for ``producer`` on the device (the monitor's wait()). */
PyObject *order_apart(PyObject *order, PyObject *const *args, Py_ssize_t nargs) {
    Order *self = (Order *)order;
    if (!called(nargs, 4, args, 0, "apart(stream, producer, given, wait)")) return NULL;
    int failed = 0;
    void *producer = handle_of(args[1], &failed);
    if (!failed && (uintptr_t)producer <= 1) { /* the legacy default stream */
        PyObject *blocking = PyDict_GetItemWithError(self->blocking, args[0]);
        int ordered = blocking == NULL ? (PyErr_Occurred() ? -1 : 0) : PyObject_IsTrue(blocking);
        if (ordered < 0) return NULL;
        if (ordered) Py_RETURN_FALSE;
    }
    int wait = PyObject_IsTrue(args[3]);
    PyObject *waited = wait > 0 ? ask_monitor(self, wait_name, args, 3) : NULL;
    if (wait < 0 || (wait && waited == NULL)) return NULL;
    Py_XDECREF(waited);
    Py_RETURN_TRUE;
}

/* launched(stream): a launch on ``stream`` is queued: record its event now, ending its epoch
 * (nothing while the stream is being captured into a graph). */
static PyObject *launched(Order *self, PyObject *key) {
    Stream *stream = stream_of(self, key);
    if (stream == NULL) return NULL;
    int skipped = captured(self, key);
    if (skipped < 0 || (!skipped && end_epoch(self, stream) < 0)) return NULL;
    Py_RETURN_NONE;
}

/* retire(stream, record) -> (event, epoch), or None: the first half of forgetting a stream the
 * program let go of. Where ``record`` (a stream numbatune holds, alive), its event is recorded
 * now, ending its epoch (None, nothing done, while it is being captured into a graph: an event
 * recorded now would be the graph's); a stream that may close is not touched (its event was
 * recorded right after its last launch). Once the device passed the event, forget() drops the
 * stream, unless a use noted it meanwhile. None also where the order has no record of it. */
static PyObject *retire(Order *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!called(nargs, 2, args, 0, "retire(stream, record)")) return NULL;
    PyObject *found = PyDict_GetItemWithError(self->streams, args[0]);
    if (found == NULL) return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    Stream *stream = (Stream *)Py_NewRef(found); /* (capturing() may run Python code) */
    int record = PyObject_IsTrue(args[1]);
    int skipped = record > 0 ? captured(self, args[0]) : 0;
    if (record < 0 || skipped) {
        Py_DECREF(stream);
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    }
    int failed = record && stream->entry != NULL && end_epoch(self, stream) < 0;
    PyObject *event = stream->event ? stream->event : Py_None;
    PyObject *result = failed ? NULL : Py_BuildValue("(OL)", event, stream->epoch);
    Py_DECREF(stream);
    return result;
}

/* Drops every trace of ``stream``: its buffers' last uses (``gone``, a list), its quick entry,
 * its place among the opened streams and in the last barrier, the waits others made for it, its
 * record (its index kept for the next stream made). */
static int drop_stream(Order *self, Stream *stream, PyObject *gone) {
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(gone); i++) {
        if (PyDict_DelItem(self->last_use, PyList_GET_ITEM(gone, i)) < 0) PyErr_Clear();
    }
    if (PyDict_DelItem(self->quick, stream->stream) < 0) PyErr_Clear(); /* (not quick) */
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(self->opened); i++) {
        if (PyList_GET_ITEM(self->opened, i) != (PyObject *)stream) continue;
        if (PyList_SetSlice(self->opened, i, i + 1, NULL) < 0) return -1;
        self->barrier_streams -= i < self->barrier_streams;
        break;
    }
    Py_ssize_t position = 0;
    PyObject *key, *value;
    while (PyDict_Next(self->streams, &position, &key, &value)) {
        Stream *other = (Stream *)value;
        if (stream->index < other->waited_size) other->waited[stream->index] = 0;
    }
    PyObject *index = PyLong_FromSsize_t(stream->index);
    int failed = index == NULL || PyList_Append(self->free, index) < 0;
    Py_XDECREF(index);
    return failed ? -1 : PyDict_DelItem(self->streams, stream->stream);
}

/* forget(retired) -> {stream: event}: ``retired`` maps streams retire() gave (event, epoch) for,
 * whose events the device passed, to that epoch. Each whose epoch is still that and whose open
 * epoch no use noted (under the lock, or a quick one without it) is known to the order by no
 * more than the work before that event: every trace of it goes (drop_stream), and its event
 * (None: none made) comes back for the caller to destroy, with the streams the order had no
 * record of. One pass over the buffers' last uses for all of them. */
static PyObject *forget(Order *self, PyObject *retired) {
    if (!PyDict_Check(retired)) {
        PyErr_SetString(PyExc_TypeError, "forget(retired: dict)");
        return NULL;
    }
    PyObject *gone = PyDict_New(), *result = PyDict_New(); /* stream -> its buffers; -> event */
    Py_ssize_t position = 0;
    PyObject *key, *value, *buffer, *last;
    int failed = gone == NULL || result == NULL;
    while (!failed && PyDict_Next(retired, &position, &key, &value)) {
        Stream *stream = (Stream *)PyDict_GetItemWithError(self->streams, key);
        long long epoch = PyLong_AsLongLong(value);
        if (stream == NULL || (epoch == -1 && PyErr_Occurred())) {
            failed = PyErr_Occurred() || PyDict_SetItem(result, key, Py_None) < 0;
        } else if (stream->epoch == epoch && !stream->used) {
            PyObject *buffers = PyList_New(0);
            failed = buffers == NULL || PyDict_SetItem(gone, key, buffers) < 0;
            Py_XDECREF(buffers);
        }
    }
    position = 0;
    while (!failed && PyDict_GET_SIZE(gone) && PyDict_Next(self->last_use, &position, &buffer, &last)) {
        key = PyTuple_GET_ITEM(last, 0);
        PyObject *buffers = PyDict_GetItemWithError(gone, key);
        Stream *stream = buffers ? (Stream *)PyDict_GetItemWithError(self->streams, key) : NULL;
        if (stream == NULL) {
            failed = PyErr_Occurred() != NULL;
        } else if (last == stream->entry) { /* (a quick use without the lock, since retire) */
            failed = PyDict_DelItem(gone, key) < 0;
        } else {
            failed = PyList_Append(buffers, buffer) < 0;
        }
    }
    position = 0;
    while (!failed && PyDict_Next(gone, &position, &key, &value)) {
        Stream *stream = (Stream *)Py_NewRef(PyDict_GetItem(self->streams, key));
        PyObject *event = Py_NewRef(stream->event ? stream->event : Py_None);
        failed = drop_stream(self, stream, value) < 0 || PyDict_SetItem(result, key, event) < 0;
        Py_DECREF(event);
        Py_DECREF(stream);
    }
    Py_XDECREF(gone);
    if (failed) Py_CLEAR(result);
    return result;
}

static PyObject *get_events(Order *self, void *unused) { return Py_NewRef(self->events); }

/* events = value: the events, and their record and wait_event methods (None: not yet). */
static int set_events(Order *self, PyObject *value, void *unused) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "an Order's events cannot be deleted");
        return -1;
    }
    PyObject *record = NULL, *wait_event = NULL, *capturing = NULL;
    if (value != Py_None) {
        record = PyObject_GetAttrString(value, "record");
        wait_event = record ? PyObject_GetAttrString(value, "wait_event") : NULL;
        if (wait_event == NULL) {
            Py_XDECREF(record);
            return -1;
        }
        capturing = PyObject_GetAttrString(value, "capturing");
        if (capturing == NULL) PyErr_Clear(); /* (events that know of no capture) */
    }
    Py_XSETREF(self->events, Py_NewRef(value));
    Py_XSETREF(self->record, record);
    Py_XSETREF(self->wait_event, wait_event);
    Py_XSETREF(self->capturing, capturing);
    self->driver = event_record != NULL && stream_wait_event != NULL && record != NULL &&
                   PyCFunction_Check(record) && PyCFunction_Check(wait_event) &&
                   PyCFunction_GET_FUNCTION(record) == (PyCFunction)(void (*)(void))native_record &&
                   PyCFunction_GET_FUNCTION(wait_event) ==
                       (PyCFunction)(void (*)(void))native_wait;
    return 0;
}

static PyObject *order_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"events", "limit", NULL};
    PyObject *events;
    Py_ssize_t limit; /* streams.order.LIMIT, which new_order passes */
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "On:Order", names, &events, &limit)) {
        return NULL;
    }
    Order *self = (Order *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->limit = limit;
    self->last_use = PyDict_New();
    self->quick = PyDict_New();
    self->streams = PyDict_New();
    self->opened = PyList_New(0);
    self->stream = Py_NewRef(Py_None);
    self->monitor = Py_NewRef(Py_None);
    PyObject *threads = PyImport_ImportModule("_thread");
    self->lock = threads ? PyObject_CallMethod(threads, "allocate_lock", NULL) : NULL;
    Py_XDECREF(threads);
    self->pending = PyDict_New();
    self->blocking = PyDict_New();
    self->free = PyList_New(0);
    if (!self->last_use || !self->quick || !self->streams || !self->opened || !self->lock ||
        !self->pending || !self->blocking || !self->free || set_events(self, events, NULL) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* The Order's references, as the collector visits and clears them. */
#define ORDER_OBJECTS(X)                                                                          \
    X(events) X(record) X(wait_event) X(capturing) X(last_use) X(quick) X(streams) X(opened)      \
    X(stream) X(lock) X(pending) X(blocking) X(monitor) X(free)

static int order_traverse(Order *self, visitproc visit, void *arg) {
#define VISIT(name) Py_VISIT(self->name);
    ORDER_OBJECTS(VISIT)
#undef VISIT
    return 0;
}

static int order_clear(Order *self) {
#define CLEAR(name) Py_CLEAR(self->name);
    ORDER_OBJECTS(CLEAR)
#undef CLEAR
    return 0;
}

static void order_dealloc(Order *self) {
    PyObject_GC_UnTrack(self);
    order_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef order_methods[] = {
    {"use", (PyCFunction)(void (*)(void))use, METH_FASTCALL | METH_KEYWORDS,
     "use(stream, buffers, quick=False): the waits a launch needs; its use noted"},
    {"quick_use", (PyCFunction)(void (*)(void))quick_use, METH_FASTCALL,
     "quick_use(stream, buffers, lock) -> the stream's open entry, or None where not quick"},
    {"launched", (PyCFunction)launched, METH_O, "launched(stream): end the stream's epoch"},
    {"barrier", (PyCFunction)barrier, METH_NOARGS, "barrier(): forget every buffer"},
    {"before", (PyCFunction)(void (*)(void))order_before, METH_FASTCALL,
     "before(stream, buffers, name, given) -> what after() takes, or None: a launch ordered"},
    {"after", (PyCFunction)(void (*)(void))order_after, METH_FASTCALL,
     "after(stream, buffers, ticket): what before() gave, once the launch is queued"},
    {"hold", (PyCFunction)(void (*)(void))order_hold, METH_FASTCALL,
     "hold(stream, arrays): arrays kept alive past a launch on the stream"},
    {"apart", (PyCFunction)(void (*)(void))order_apart, METH_FASTCALL,
     "apart(stream, producer, given, wait) -> whether nothing orders the two streams"},
    {"retire", (PyCFunction)(void (*)(void))retire, METH_FASTCALL,
     "retire(stream, record) -> (event, epoch), or None: a stream to forget, its event recorded"},
    {"forget", (PyCFunction)forget, METH_O,
     "forget(retired) -> {stream: event}: drop the retired streams no use noted since"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef order_getset[] = {
    {"events", (getter)get_events, (setter)set_events, "the events it records and waits for",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef order_members[] = {
    {"last_use", T_OBJECT, offsetof(Order, last_use), READONLY, "each buffer's last use"},
    {"quick", T_OBJECT, offsetof(Order, quick), READONLY,
     "the open entries of the streams whose launches may skip use()"},
    {"stream", T_OBJECT, offsetof(Order, stream), 0,
     "the one stream launched on so far; None before it and once ordering"},
    {"ordering", T_BOOL, offsetof(Order, ordering), 0, "whether every launch is ordered"},
    {"lock", T_OBJECT, offsetof(Order, lock), READONLY, "the lock guarding it and its monitor"},
    {"pending", T_OBJECT, offsetof(Order, pending), READONLY,
     "each held stream's event and the arrays kept not yet behind it"},
    {"blocking", T_OBJECT, offsetof(Order, blocking), READONLY,
     "whether each stream is a blocking one, as far as asked"},
    {"monitor", T_OBJECT, offsetof(Order, monitor), 0,
     "what before(), after(), hold() and apart() leave the rest to"},
    {"streams", T_OBJECT, offsetof(Order, streams), READONLY, "each stream's record"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject order_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "numbatune._native.Order",
    .tp_basicsize = sizeof(Order),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Which streams a launch must wait for (numbatune.streams.order).",
    .tp_new = order_new,
    .tp_traverse = (traverseproc)order_traverse,
    .tp_clear = (inquiry)order_clear,
    .tp_dealloc = (destructor)order_dealloc,
    .tp_methods = order_methods,
    .tp_members = order_members,
    .tp_getset = order_getset,
};

PyObject *order_stream(PyObject *order) { return ((Order *)order)->stream; }

int is_order(PyObject *value) { return Py_IS_TYPE(value, &order_type); }

/* Adds the Order type to the extension module. */
int add_order_type(PyObject *module) {
    acquire_name = PyUnicode_InternFromString("acquire");
    release_name = PyUnicode_InternFromString("release");
    before_name = PyUnicode_InternFromString("before");
    after_name = PyUnicode_InternFromString("after");
    hold_name = PyUnicode_InternFromString("hold");
    wait_name = PyUnicode_InternFromString("wait");
    if (!acquire_name || !release_name || !before_name || !after_name || !hold_name || !wait_name ||
        PyType_Ready(&stream_type) < 0 || PyType_Ready(&order_type) < 0) {
        return -1;
    }
    return PyModule_AddObjectRef(module, "Order", (PyObject *)&order_type);
}
