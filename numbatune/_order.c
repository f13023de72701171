/* numbatune.streams.order.StreamOrder in C: the same state (Python dicts of the same entries),
 * the same steps and the same calls to its events, in the same order, for a fraction of the cost.
 *
 * The Python class is the reference, and what runs where this cannot be built; the comments
 * name its methods. Callers hold the monitor's lock, as they do for the Python class. Entries,
 * (stream, epoch) tuples, are compared by identity, as the generated launch code compares them
 * (numbatune.streams.order.quick_check).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

typedef struct {
    PyObject_HEAD
    PyObject *events;       /* create(timing, stream), record(event, stream), wait_event(...) */
    PyObject *record;       /* events.record, or NULL until events is set */
    PyObject *wait_event;   /* events.wait_event, or NULL until events is set */
    PyObject *last_use;     /* buffer -> the entry of its last use */
    PyObject *quick;        /* stream -> its open entry, for streams whose launches may skip use */
    PyObject *open;         /* stream -> its open entry */
    PyObject *event;        /* stream -> its event */
    PyObject *waited;       /* (stream, producer) -> the producer's last epoch waited for */
    PyObject *barrier;      /* stream -> its epoch at the last barrier */
    PyObject *past_barrier; /* the streams that waited for the last barrier */
    Py_ssize_t limit;
} Order;

/* The epoch of ``stream``'s open entry, 0 where it has none; -1 on an error. */
static long long open_epoch(Order *self, PyObject *stream) {
    PyObject *entry = PyDict_GetItemWithError(self->open, stream);
    if (entry == NULL) return PyErr_Occurred() ? -1 : 0;
    return PyLong_AsLongLong(PyTuple_GET_ITEM(entry, 1));
}

/* A new (stream, epoch) entry as the stream's open one, and its quick one where it has one;
 * a new reference. */
static PyObject *open_entry(Order *self, PyObject *stream, long long epoch) {
    PyObject *number = PyLong_FromLongLong(epoch);
    if (number == NULL) return NULL;
    PyObject *entry = PyTuple_Pack(2, stream, number);
    Py_DECREF(number);
    if (entry == NULL) return NULL;
    int quick = -1;
    if (PyDict_SetItem(self->open, stream, entry) == 0) quick = PyDict_Contains(self->quick, stream);
    if (quick < 0 || (quick && PyDict_SetItem(self->quick, stream, entry) < 0)) {
        Py_DECREF(entry);
        return NULL;
    }
    return entry;
}

/* method(a, b), its result dropped. */
static int call_events(PyObject *method, PyObject *a, PyObject *b) {
    PyObject *args[2] = {a, b};
    PyObject *result = PyObject_Vectorcall(method, args, 2, NULL);
    if (result == NULL) return -1;
    Py_DECREF(result);
    return 0;
}

/* The stream's event, made on first use (a borrowed reference); each record or wait asks for
 * it first. */
static PyObject *event_of(Order *self, PyObject *stream) {
    if (self->record == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Order: its events were never set");
        return NULL;
    }
    PyObject *event = PyDict_GetItemWithError(self->event, stream);
    if (event != NULL || PyErr_Occurred()) return event;
    PyObject *create = PyObject_GetAttrString(self->events, "create");
    PyObject *no_args = PyTuple_New(0);
    PyObject *options = Py_BuildValue("{sOsO}", "timing", Py_False, "stream", stream);
    PyObject *made = create && no_args && options ? PyObject_Call(create, no_args, options) : NULL;
    Py_XDECREF(create);
    Py_XDECREF(no_args);
    Py_XDECREF(options);
    if (made == NULL) return NULL;
    int failed = PyDict_SetItem(self->event, stream, made);
    Py_DECREF(made);
    return failed ? NULL : PyDict_GetItemWithError(self->event, stream);
}

/* _end_epoch: record the stream's event after all queued on it so far, ending its open epoch. */
static int end_epoch(Order *self, PyObject *stream) {
    PyObject *event = event_of(self, stream);
    if (event == NULL) return -1;
    Py_INCREF(event);
    int failed = call_events(self->record, event, stream);
    Py_DECREF(event);
    long long epoch = failed ? -1 : open_epoch(self, stream);
    if (epoch < 0) return -1;
    PyObject *entry = open_entry(self, stream, epoch + 1);
    Py_XDECREF(entry);
    return entry ? 0 : -1;
}

/* _wait_for: ``stream`` waits for ``producer``'s launches up to the end of ``epoch``. */
static int wait_for(Order *self, PyObject *stream, PyObject *producer, long long epoch) {
    int same = PyObject_RichCompareBool(producer, stream, Py_EQ);
    if (same) return same < 0 ? -1 : 0;
    PyObject *key = PyTuple_Pack(2, stream, producer);
    if (key == NULL) return -1;
    int result = -1;
    PyObject *waited = PyDict_GetItemWithError(self->waited, key);
    long long waited_epoch = waited ? PyLong_AsLongLong(waited) : 0;
    if (PyErr_Occurred()) goto done;
    if (waited_epoch >= epoch) {
        result = 0;
        goto done;
    }
    long long open = open_epoch(self, producer);
    if (open < 0 || (open <= epoch && end_epoch(self, producer) < 0)) goto done;
    PyObject *event = event_of(self, producer);
    if (event == NULL) goto done;
    Py_INCREF(event);
    int failed = call_events(self->wait_event, stream, event);
    Py_DECREF(event);
    open = failed ? -1 : open_epoch(self, producer);
    PyObject *last = open < 0 ? NULL : PyLong_FromLongLong(open - 1);
    if (last != NULL) {
        result = PyDict_SetItem(self->waited, key, last);
        Py_DECREF(last);
    }
done:
    Py_DECREF(key);
    return result;
}

/* barrier(): forget every buffer; each stream's next launch waits for all queued on the others. */
static PyObject *barrier(Order *self, PyObject *unused) {
    PyDict_Clear(self->barrier);
    PyObject *stream, *entry;
    Py_ssize_t position = 0;
    while (PyDict_Next(self->open, &position, &stream, &entry)) {
        if (PyDict_SetItem(self->barrier, stream, PyTuple_GET_ITEM(entry, 1)) < 0) return NULL;
    }
    if (PySet_Clear(self->past_barrier) < 0) return NULL;
    PyDict_Clear(self->last_use);
    PyDict_Clear(self->quick);
    Py_RETURN_NONE;
}

/* The waits for the last barrier, where ``stream`` has not had them yet. */
static int pass_barrier(Order *self, PyObject *stream) {
    int past = PySet_Contains(self->past_barrier, stream);
    if (past) return past < 0 ? -1 : 0;
    PyObject *items = PyDict_Items(self->barrier); /* a copy: waits may add entries */
    if (items == NULL) return -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        long long epoch = PyLong_AsLongLong(PyTuple_GET_ITEM(item, 1));
        if ((epoch < 0 && PyErr_Occurred()) ||
            wait_for(self, stream, PyTuple_GET_ITEM(item, 0), epoch) < 0) {
            Py_DECREF(items);
            return -1;
        }
    }
    Py_DECREF(items);
    return PySet_Add(self->past_barrier, stream);
}

/* The waits a launch on ``stream`` needs for one buffer, and its use noted under ``entry``. */
static int use_buffer(Order *self, PyObject *stream, PyObject *entry, PyObject *buffer) {
    PyObject *last = PyDict_GetItemWithError(self->last_use, buffer);
    if (last == entry) return 0;
    if (last == NULL && PyErr_Occurred()) return -1;
    if (last != NULL) {
        PyObject *producer = PyTuple_GET_ITEM(last, 0);
        long long epoch = PyLong_AsLongLong(PyTuple_GET_ITEM(last, 1));
        Py_INCREF(producer);
        int failed = (epoch < 0 && PyErr_Occurred()) || wait_for(self, stream, producer, epoch);
        Py_DECREF(producer);
        if (failed) return -1;
    }
    return PyDict_SetItem(self->last_use, buffer, entry);
}

/* use() for ``buffers`` (a sequence), a new reference to None or NULL with an exception. */
static PyObject *use_buffers(Order *self, PyObject *stream, PyObject *sequence, int quick) {
    PyObject *buffers = PySequence_Fast(sequence, "use: buffers must be iterable");
    if (buffers == NULL || pass_barrier(self, stream) < 0) {
        Py_XDECREF(buffers);
        return NULL;
    }
    PyObject *entry = PyDict_GetItemWithError(self->open, stream);
    if (entry != NULL) {
        Py_INCREF(entry);
    } else if (!PyErr_Occurred()) {
        entry = open_entry(self, stream, 1);
    }
    int failed = entry == NULL;
    for (Py_ssize_t i = 0; !failed && i < PySequence_Fast_GET_SIZE(buffers); i++) {
        failed = use_buffer(self, stream, entry, PySequence_Fast_GET_ITEM(buffers, i)) < 0;
    }
    Py_DECREF(buffers);
    if (!failed) {
        if (PyDict_GET_SIZE(self->last_use) > self->limit) {
            PyObject *done = barrier(self, NULL);
            failed = done == NULL;
            Py_XDECREF(done);
        } else if (quick) {
            failed = PyDict_SetItem(self->quick, stream, entry) < 0;
        }
    }
    Py_XDECREF(entry);
    if (failed) return NULL;
    Py_RETURN_NONE;
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
    return use_buffers(self, args[0], args[1], quick);
}

static PyObject *acquire_name = NULL, *release_name = NULL; /* "acquire", "release" */

/* lock.acquire() or lock.release() (``method``): 0, or -1 with an exception. */
static int call_lock(PyObject *lock, PyObject *method) {
    PyObject *result = PyObject_CallMethodNoArgs(lock, method);
    Py_XDECREF(result);
    return result == NULL ? -1 : 0;
}

/* quick_use(stream, buffers, lock) -> the stream's open entry, or None (StreamOrder.quick_use):
 * on a quick stream, buffers last used in its open epoch (or never: noted so now) need
 * nothing; else use(stream, buffers) runs under ``lock``. */
static PyObject *quick_use(Order *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "quick_use(stream, buffers: tuple, lock)");
        return NULL;
    }
    PyObject *entry = PyDict_GetItemWithError(self->quick, args[0]);
    if (entry == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(entry);
    int moved = PyDict_GET_SIZE(self->last_use) >= self->limit;
    for (Py_ssize_t i = 0; !moved && i < PyTuple_GET_SIZE(args[1]); i++) {
        PyObject *last = PyDict_SetDefault(self->last_use, PyTuple_GET_ITEM(args[1], i), entry);
        if (last == NULL) {
            Py_DECREF(entry);
            return NULL;
        }
        moved = last != entry;
    }
    if (!moved) return entry;
    if (call_lock(args[2], acquire_name) < 0) {
        Py_DECREF(entry);
        return NULL;
    }
    PyObject *done = use_buffers(self, args[0], args[1], 0);
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback); /* use's error, if any, is the one raised */
    int released = call_lock(args[2], release_name);
    if (type != NULL) PyErr_Restore(type, value, traceback);
    if (done == NULL || released < 0) {
        Py_XDECREF(done);
        Py_DECREF(entry);
        return NULL;
    }
    Py_DECREF(done);
    return entry;
}

/* launched(stream): a launch on ``stream`` is queued: record its event now, ending its epoch. */
static PyObject *launched(Order *self, PyObject *stream) {
    if (end_epoch(self, stream) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *get_events(Order *self, void *unused) { return Py_NewRef(self->events); }

/* events = value: the events, and their record and wait_event methods (None: not yet). */
static int set_events(Order *self, PyObject *value, void *unused) {
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "an Order's events cannot be deleted");
        return -1;
    }
    PyObject *record = NULL, *wait_event = NULL;
    if (value != Py_None) {
        record = PyObject_GetAttrString(value, "record");
        wait_event = record ? PyObject_GetAttrString(value, "wait_event") : NULL;
        if (wait_event == NULL) {
            Py_XDECREF(record);
            return -1;
        }
    }
    Py_XSETREF(self->events, Py_NewRef(value));
    Py_XSETREF(self->record, record);
    Py_XSETREF(self->wait_event, wait_event);
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
    self->open = PyDict_New();
    self->event = PyDict_New();
    self->waited = PyDict_New();
    self->barrier = PyDict_New();
    self->past_barrier = PySet_New(NULL);
    if (!self->last_use || !self->quick || !self->open || !self->event || !self->waited ||
        !self->barrier || !self->past_barrier) {
        Py_DECREF(self);
        return NULL;
    }
    if (set_events(self, events, NULL) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int order_traverse(Order *self, visitproc visit, void *arg) {
    Py_VISIT(self->events);
    Py_VISIT(self->record);
    Py_VISIT(self->wait_event);
    Py_VISIT(self->last_use);
    Py_VISIT(self->quick);
    Py_VISIT(self->open);
    Py_VISIT(self->event);
    Py_VISIT(self->waited);
    Py_VISIT(self->barrier);
    Py_VISIT(self->past_barrier);
    return 0;
}

static int order_clear(Order *self) {
    Py_CLEAR(self->events);
    Py_CLEAR(self->record);
    Py_CLEAR(self->wait_event);
    Py_CLEAR(self->last_use);
    Py_CLEAR(self->quick);
    Py_CLEAR(self->open);
    Py_CLEAR(self->event);
    Py_CLEAR(self->waited);
    Py_CLEAR(self->barrier);
    Py_CLEAR(self->past_barrier);
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
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject order_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "numbatune._native.Order",
    .tp_basicsize = sizeof(Order),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Which streams a launch must wait for (numbatune.streams.order.StreamOrder).",
    .tp_new = order_new,
    .tp_traverse = (traverseproc)order_traverse,
    .tp_clear = (inquiry)order_clear,
    .tp_dealloc = (destructor)order_dealloc,
    .tp_methods = order_methods,
    .tp_members = order_members,
    .tp_getset = order_getset,
};

/* Adds the Order type to the extension module. */
int add_order_type(PyObject *module) {
    acquire_name = PyUnicode_InternFromString("acquire");
    release_name = PyUnicode_InternFromString("release");
    if (acquire_name == NULL || release_name == NULL) return -1;
    if (PyType_Ready(&order_type) < 0) return -1;
    Py_INCREF(&order_type);
    if (PyModule_AddObject(module, "Order", (PyObject *)&order_type) < 0) {
        Py_DECREF(&order_type);
        return -1;
    }
    return 0;
}
