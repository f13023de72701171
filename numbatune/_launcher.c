/* Launcher: what a fast path does once its generated code has checked the arguments' classes
 * and read their arrays in C (numbatune/launch/codegen.py): the key's winner (the last key's
 * kept while the winner table publishes nothing new), its compiled function and launch
 * configuration, the stream, the parameters packed, the order across streams and the launch,
 * in one call. What it cannot do it hands to its ``fallbacks`` (numbatune.launch.fastpath.
 * Fallbacks), which hold the tuned kernel's general path, numba's launch and the errors' words.
 *
 * hit(args, stream, key, read..., value...) launches the key's winner (None), or returns what
 * the fallback that took the call returns; launch_winner(args, stream, winner, read...,
 * value...) launches ``winner`` (True), or False where this signature has no function of it
 * yet. Each ``read`` is a read's result, (current stream, key, runs..., allocations); the
 * ``value``s are what the packer packs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_native.h"

/* The Launcher's references, as the collector visits and clears them. */
#define LAUNCHER_OBJECTS(X)                                                                       \
    X(winners) X(functions) X(config) X(configs) X(readers) X(scalars) X(pack) X(launch)          \
    X(offsets) X(context) X(cooperative) X(order) X(fallbacks) X(name) X(sync) X(last)            \
    X(last_config)

typedef struct {
    PyObject_HEAD
    PyObject *winners;     /* the winner table (a dict with a ``published`` count) */
    PyObject *functions;   /* variant index -> compiled function's handle, for this signature */
    PyObject *config;      /* the launch function */
    PyObject *configs;     /* a by_shape launch function's memo (a dict), or None */
    PyObject *readers;     /* the readers whose ``shapes`` key the memo */
    PyObject *scalars;     /* the indexes of the arguments (not arrays) that key it too */
    PyObject *pack;        /* packs the values */
    PyObject *launch;      /* numbatune._native.launch (the tests' stand-in) */
    PyObject *offsets, *context, *cooperative; /* what launch takes with them */
    PyObject *order;       /* the stream order (numbatune._native.Order) */
    PyObject *fallbacks;
    PyObject *name;        /* the kernel's name, for the order */
    PyObject *sync;        /* whether a stream apart from its arrays' library waits for it */
    PyObject *last;        /* (key, published, winner, function) of the last key, or NULL */
    PyObject *last_config; /* (depends, config) of the memo's last answer, or NULL */
    Py_ssize_t reads;      /* how many reads' results follow the key */
    unsigned long long streamed; /* bit i: read i's library has a current stream */
    Py_ssize_t top;        /* the read whose current stream a call without one takes, or -1 */
    int remember;          /* whether the last key's winner is kept (the default key) */
    int valid;             /* whether the fallbacks' valid() is asked */
} Launcher;

static PyObject *published_name, *remember_name, *shapes_name, *handle_name, *struct_error;
static PyObject *general_name, *numba_name, *failed_name, *config_failed_name;
static PyObject *bad_config_name, *handle_of_name, *buffers_name, *kept_name, *valid_name;
static PyObject *index_name, *params_name;

/* fallbacks.<name>(*args): a new reference, or NULL with an exception. */
static PyObject *fall_back(Launcher *self, PyObject *name, PyObject **args, size_t nargs) {
    PyObject *call[8] = {self->fallbacks};
    for (size_t i = 0; i < nargs; i++) call[i + 1] = args[i];
    return PyObject_VectorcallMethod(name, call, nargs + 1, NULL);
}

/* fallbacks.<name>(error, *args) with the exception raised (which it raises, worded): NULL. */
static PyObject *fall_back_raising(Launcher *self, PyObject *name, PyObject *arg) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL) PyException_SetTraceback(value, traceback);
    PyObject *args[2] = {value, arg};
    PyObject *result = fall_back(self, name, args, 2);
    Py_XDECREF(result); /* (it raises) */
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    return NULL;
}

/* What a launch takes of a winner: the winner, its function, its index and its params. */
typedef struct {
    PyObject *winner, *function, *index, *params;
} chosen_t;

static void chosen_clear(chosen_t *chosen) {
    Py_CLEAR(chosen->winner);
    Py_CLEAR(chosen->function);
    Py_CLEAR(chosen->index);
    Py_CLEAR(chosen->params);
}

/* ``winner``'s index, params and function for this signature: 1, 0 where it has no function
 * compiled yet, or -1. */
static int choose(Launcher *self, PyObject *winner, chosen_t *chosen) {
    chosen->winner = Py_NewRef(winner);
    chosen->index = PyObject_GetAttr(winner, index_name);
    chosen->params = chosen->index ? PyObject_GetAttr(winner, params_name) : NULL;
    PyObject *function = chosen->params ? PyDict_GetItemWithError(self->functions, chosen->index)
                                        : NULL;
    chosen->function = Py_XNewRef(function);
    return function != NULL ? 1 : PyErr_Occurred() ? -1 : 0;
}

/* The key's winner, chosen, kept for the next call where ``remember``: 1, 0 where the table
 * has none (or the key is unhashable, or no function of it is compiled), or -1. */
static int find_winner(Launcher *self, PyObject *key, chosen_t *chosen) {
    PyObject *count = PyObject_GetAttr(self->winners, published_name);
    if (count == NULL) return -1;
    PyObject *last = self->remember ? Py_XNewRef(self->last) : NULL;
    if (last != NULL) {
        int same = PyTuple_GET_ITEM(last, 0) == key ||
                   PyObject_RichCompareBool(PyTuple_GET_ITEM(last, 0), key, Py_EQ);
        if (same > 0) same = PyObject_RichCompareBool(PyTuple_GET_ITEM(last, 1), count, Py_EQ);
        if (same > 0) {
            PyObject **kept[] = {&chosen->winner, &chosen->function, &chosen->index,
                                 &chosen->params};
            for (int i = 0; i < 4; i++) *kept[i] = Py_NewRef(PyTuple_GET_ITEM(last, 2 + i));
        }
        Py_DECREF(last);
        if (same != 0) {
            Py_DECREF(count);
            return same;
        }
    }
    /* (the count read before the lookup: see numbatune.cache.tunecache.WinnerTable) */
    PyObject *found = PyDict_GetItemWithError(self->winners, key);
    int chose = found ? choose(self, found, chosen) : -1;
    if (chose <= 0) {
        Py_DECREF(count);
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
        PyErr_Clear(); /* (a new key; an unhashable one: the general path's to say) */
        return 0;
    }
    if (self->remember) {
        PyObject *kept = PyTuple_Pack(6, key, count, chosen->winner, chosen->function,
                                      chosen->index, chosen->params);
        if (kept == NULL) {
            Py_DECREF(count);
            return -1;
        }
        Py_XSETREF(self->last, kept);
    }
    Py_DECREF(count);
    return 1;
}

/* The memo's key of a by_shape launch function: (winner's index, readers' shapes..., the
 * scalars...), the same objects as the last answer's where they are (then *same is set). */
static PyObject *depends_of(Launcher *self, PyObject *args, PyObject *index, int *same) {
    Py_ssize_t readers = PyTuple_GET_SIZE(self->readers), scalars = PyTuple_GET_SIZE(self->scalars);
    PyObject *depends = PyTuple_New(1 + readers + scalars);
    if (depends == NULL) return NULL;
    PyTuple_SET_ITEM(depends, 0, Py_NewRef(index));
    for (Py_ssize_t i = 0; i < readers; i++) {
        PyObject *shapes = PyObject_GetAttr(PyTuple_GET_ITEM(self->readers, i), shapes_name);
        if (shapes == NULL) {
            Py_DECREF(depends);
            return NULL;
        }
        PyTuple_SET_ITEM(depends, 1 + i, shapes);
    }
    for (Py_ssize_t i = 0; i < scalars; i++) {
        Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(self->scalars, i));
        PyTuple_SET_ITEM(depends, 1 + readers + i, Py_NewRef(PyTuple_GET_ITEM(args, at)));
    }
    PyObject *last = self->last_config ? PyTuple_GET_ITEM(self->last_config, 0) : NULL;
    *same = last != NULL;
    for (Py_ssize_t i = 0; *same && i < PyTuple_GET_SIZE(depends); i++) {
        *same = PyTuple_GET_ITEM(depends, i) == PyTuple_GET_ITEM(last, i);
    }
    return depends;
}

/* The winner's launch configuration: the launch function's, or a by_shape one's memo's. */
static PyObject *config_of(Launcher *self, PyObject *args, const chosen_t *chosen) {
    PyObject *config = NULL;
    if (self->configs == Py_None) {
        config = PyObject_Call(self->config, args, chosen->params);
    } else {
        int same = 0;
        PyObject *depends = depends_of(self, args, chosen->index, &same);
        if (depends != NULL && same) {
            config = Py_NewRef(PyTuple_GET_ITEM(self->last_config, 1));
        } else if (depends != NULL) {
            config = Py_XNewRef(PyDict_GetItemWithError(self->configs, depends));
            if (config == NULL && (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError))) {
                PyErr_Clear(); /* a value not seen yet: the launch function */
                PyObject *call[5] = {self->config, self->configs, depends, args, chosen->params};
                config = PyObject_VectorcallMethod(remember_name, call, 5, NULL);
            }
            PyObject *kept = config ? PyTuple_Pack(2, depends, config) : NULL;
            if (kept != NULL) Py_XSETREF(self->last_config, kept);
            if (config != NULL && kept == NULL) Py_CLEAR(config);
        }
        Py_XDECREF(depends);
    }
    if (config == NULL && PyErr_Occurred()) {
        fall_back_raising(self, config_failed_name, chosen->params);
    }
    return config;
}

/* The raw handle of the call's ``stream`` (None: the top read's library's current stream, or
 * the legacy default stream where no read has one). */
static PyObject *handle_of(Launcher *self, PyObject *stream, PyObject *const *reads) {
    if (stream == Py_None) {
        return self->top < 0 ? PyLong_FromLong(0) : Py_NewRef(PyTuple_GET_ITEM(reads[self->top], 0));
    }
    if (PyLong_CheckExact(stream)) return Py_NewRef(stream);
    PyObject *kept = PyObject_GetAttr(stream, handle_name);
    if (kept == NULL && !PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
    PyErr_Clear();
    int set = kept != NULL ? PyObject_IsTrue(kept) : 0;
    if (set != 0) {
        if (set < 0) Py_CLEAR(kept);
        return kept;
    }
    Py_XDECREF(kept);
    PyObject *arg = stream;
    return fall_back(self, handle_of_name, &arg, 1);
}

/* The allocations the reads gave, as one tuple; the fallbacks' where a read gave none. */
static PyObject *buffers_of(Launcher *self, PyObject *args, PyObject *const *reads) {
    PyObject *single = NULL;
    for (Py_ssize_t i = 0; i < self->reads; i++) {
        PyObject *given = PyTuple_GET_ITEM(reads[i], PyTuple_GET_SIZE(reads[i]) - 1);
        if (!PyTuple_Check(given) || PyTuple_GET_SIZE(given) == 0) {
            return fall_back(self, buffers_name, &args, 1);
        }
        single = given;
    }
    if (self->reads == 1) return Py_NewRef(single);
    PyObject *all = PyTuple_New(0);
    for (Py_ssize_t i = 0; all != NULL && i < self->reads; i++) {
        PyObject *given = PyTuple_GET_ITEM(reads[i], PyTuple_GET_SIZE(reads[i]) - 1);
        PyObject *joined = PySequence_Concat(all, given);
        Py_SETREF(all, joined);
    }
    return all;
}

/* Launches ``winner`` (or, where NULL, ``key``'s) with ``reads`` and ``values``; ``a`` holds
 * args, stream, key or winner, the reads, the values. */
static PyObject *run(Launcher *self, PyObject *const *a, Py_ssize_t n, int in_call) {
    if (n < 3 + self->reads || !PyTuple_Check(a[0])) {
        return PyErr_Format(PyExc_TypeError, "%s(args, stream, %s, %zd reads, values...)",
                            in_call ? "hit" : "launch_winner", in_call ? "key" : "winner", self->reads);
    }
    PyObject *args = a[0], *given = a[1], *const *reads = a + 3, *const *values = reads + self->reads;
    for (Py_ssize_t i = 0; i < self->reads; i++) {
        if (!PyTuple_Check(reads[i]) || PyTuple_GET_SIZE(reads[i]) < 2) {
            return PyErr_Format(PyExc_TypeError, "a read's result is (current, key, ..., allocations)");
        }
    }
    chosen_t chosen = {NULL, NULL, NULL, NULL};
    PyObject *config = NULL, *stream = NULL, *parameters = NULL;
    PyObject *buffers = NULL, *ticket = NULL, *result = NULL;
    unsigned long long unordered = 0;
    int found = in_call ? find_winner(self, a[2], &chosen) : choose(self, a[2], &chosen);
    if (found <= 0) {
        PyObject *call[2] = {args, given};
        result = found < 0 ? NULL : in_call ? fall_back(self, general_name, call, 2)
                                            : Py_NewRef(Py_False);
        goto done;
    }
    PyObject *winner = chosen.winner;
    if (in_call && self->valid) {
        PyObject *call[2] = {args, winner};
        PyObject *runs = fall_back(self, valid_name, call, 2);
        int yes = runs ? PyObject_IsTrue(runs) : -1;
        Py_XDECREF(runs);
        if (yes <= 0) {
            call[1] = given;
            result = yes < 0 ? NULL : fall_back(self, general_name, call, 2);
            goto done;
        }
    }
    if ((config = config_of(self, args, &chosen)) == NULL) goto done;
    if ((stream = handle_of(self, given, reads)) == NULL) goto done;
    for (Py_ssize_t i = 0; i < self->reads; i++) {
        if (!(self->streamed >> i & 1)) continue;
        PyObject *producer = PyTuple_GET_ITEM(reads[i], 0);
        int differ = PyObject_RichCompareBool(stream, producer, Py_NE);
        PyObject *call[4] = {stream, producer, given, self->sync};
        PyObject *apart = differ > 0 ? order_apart(self->order, call, 4) : NULL;
        int yes = differ > 0 ? (apart ? PyObject_IsTrue(apart) : -1) : differ;
        Py_XDECREF(apart);
        if (yes < 0) goto done;
        unordered |= (unsigned long long)yes << i;
    }
    parameters = PyObject_Vectorcall(self->pack, values, (size_t)(n - 3 - self->reads), NULL);
    if (parameters == NULL) {
        if (!PyErr_ExceptionMatches(struct_error) && !PyErr_ExceptionMatches(PyExc_OverflowError)) {
            goto done;
        }
        PyErr_Clear(); /* a value numba types otherwise (an int over 2**63) or converts (1e39) */
        PyObject *call[4] = {args, winner, config, given};
        result = fall_back(self, numba_name, call, 4);
        goto done;
    }
    int same = PyObject_RichCompareBool(stream, order_stream(self->order), Py_EQ);
    if (same < 0) goto done;
    if (!same) {
        if ((buffers = buffers_of(self, args, reads)) == NULL) goto done;
        PyObject *call[4] = {stream, buffers, self->name, given};
        if ((ticket = order_before(self->order, call, 4)) == NULL) goto done;
    }
    PyObject *call[7] = {chosen.function, config, stream, parameters, self->offsets, self->context,
                         self->cooperative};
    PyObject *error = self->launch ? PyObject_Vectorcall(self->launch, call, 7, NULL) : NULL;
    if (self->launch == NULL) PyErr_SetString(PyExc_TypeError, "Launcher: launch was deleted");
    if (error == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_ValueError) ||
            PyErr_ExceptionMatches(PyExc_OverflowError)) {
            fall_back_raising(self, bad_config_name, config); /* (says what is wrong with it) */
        }
        goto done;
    }
    int failed = PyObject_IsTrue(error);
    if (failed) {
        PyObject *call[7] = {error, args, winner, config, given, stream, in_call ? Py_True : Py_False};
        result = failed < 0 ? NULL : fall_back(self, failed_name, call, 7);
        Py_DECREF(error);
        goto done;
    }
    Py_DECREF(error);
    if (ticket != NULL && ticket != Py_None) {
        PyObject *call[3] = {stream, buffers, ticket};
        PyObject *after = order_after(self->order, call, 3);
        if (after == NULL) goto done;
        Py_DECREF(after);
    }
    if (unordered) {
        PyObject *mask = PyLong_FromUnsignedLongLong(unordered);
        PyObject *call[2] = {args, mask};
        PyObject *kept = mask ? fall_back(self, kept_name, call, 2) : NULL;
        Py_XDECREF(mask);
        PyObject *hold[2] = {stream, kept};
        int some = kept ? PyObject_IsTrue(kept) : -1;
        PyObject *held = some > 0 ? order_hold(self->order, hold, 2) : NULL;
        Py_XDECREF(kept);
        if (some < 0 || (some && held == NULL)) goto done;
        Py_XDECREF(held);
    }
    result = Py_NewRef(in_call ? Py_None : Py_True);
done:
    chosen_clear(&chosen);
    Py_XDECREF(config);
    Py_XDECREF(stream);
    Py_XDECREF(parameters);
    Py_XDECREF(buffers);
    Py_XDECREF(ticket);
    return result;
}

static PyObject *hit(Launcher *self, PyObject *const *args, Py_ssize_t nargs) {
    return run(self, args, nargs, 1);
}

static PyObject *launch_winner(Launcher *self, PyObject *const *args, Py_ssize_t nargs) {
    return run(self, args, nargs, 0);
}

static PyObject *launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"winners", "functions", "config", "configs", "readers", "scalars",
                            "pack", "launch", "offsets", "context", "cooperative", "order",
                            "fallbacks", "name", "sync", "reads", "streamed", "top",
                            "remember", "valid", NULL};
    PyObject *o[15];
    Py_ssize_t reads, top;
    unsigned long long streamed;
    int remember, valid;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!OOO!O!OOO!OOOOOOnKnpp:Launcher", names,
                                     &PyDict_Type, &o[0], &PyDict_Type, &o[1], &o[2], &o[3],
                                     &PyTuple_Type, &o[4], &PyTuple_Type, &o[5], &o[6], &o[7],
                                     &PyBytes_Type, &o[8], &o[9], &o[10], &o[11], &o[12], &o[13],
                                     &o[14], &reads, &streamed, &top, &remember, &valid)) {
        return NULL;
    }
    if (!is_order(o[11]) || (o[3] != Py_None && !PyDict_Check(o[3])) || reads < 0 || reads > 64 ||
        top >= reads) {
        return PyErr_Format(PyExc_TypeError, "Launcher: an Order, a dict or None of configs, "
                                             "and at most 64 reads, top one of them or -1");
    }
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    PyObject **fields[] = {&self->winners, &self->functions, &self->config, &self->configs,
                           &self->readers, &self->scalars, &self->pack, &self->launch,
                           &self->offsets, &self->context, &self->cooperative, &self->order,
                           &self->fallbacks, &self->name, &self->sync};
    for (int i = 0; i < 15; i++) *fields[i] = Py_NewRef(o[i]);
    self->reads = reads;
    self->streamed = streamed;
    self->top = top;
    self->remember = remember;
    self->valid = valid;
    return (PyObject *)self;
}

static int launcher_traverse(Launcher *self, visitproc visit, void *arg) {
#define VISIT(name) Py_VISIT(self->name);
    LAUNCHER_OBJECTS(VISIT)
#undef VISIT
    return 0;
}

static int launcher_clear(Launcher *self) {
#define CLEAR(name) Py_CLEAR(self->name);
    LAUNCHER_OBJECTS(CLEAR)
#undef CLEAR
    return 0;
}

static void launcher_dealloc(Launcher *self) {
    PyObject_GC_UnTrack(self);
    launcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* with_launch(launch) -> a Launcher like this one (its state shared, its memo's last answer and
 * last key not) that launches through ``launch`` (the bench's stand-in for the driver). */
static PyObject *with_launch(Launcher *self, PyObject *launch) {
    Launcher *twin = (Launcher *)Py_TYPE(self)->tp_alloc(Py_TYPE(self), 0);
    if (twin == NULL) return NULL;
#define COPY(name) twin->name = Py_XNewRef(self->name);
    LAUNCHER_OBJECTS(COPY)
#undef COPY
    Py_CLEAR(twin->last);
    Py_CLEAR(twin->last_config);
    Py_SETREF(twin->launch, Py_NewRef(launch));
    twin->reads = self->reads;
    twin->streamed = self->streamed;
    twin->top = self->top;
    twin->remember = self->remember;
    twin->valid = self->valid;
    return (PyObject *)twin;
}

static PyMethodDef launcher_methods[] = {
    {"with_launch", (PyCFunction)with_launch, METH_O,
     "with_launch(launch) -> a Launcher like this one that launches through launch"},
    {"hit", (PyCFunction)(void (*)(void))hit, METH_FASTCALL,
     "hit(args, stream, key, read..., value...): launch the key's winner"},
    {"launch_winner", (PyCFunction)(void (*)(void))launch_winner, METH_FASTCALL,
     "launch_winner(args, stream, winner, read..., value...) -> False where it has no function "
     "of it"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef launcher_members[] = {
    {"launch", T_OBJECT_EX, offsetof(Launcher, launch), 0,
     "what launches: numbatune._native.launch, or what stands in for it"},
    {"winners", T_OBJECT, offsetof(Launcher, winners), READONLY, "the winner table"},
    {"functions", T_OBJECT, offsetof(Launcher, functions), READONLY,
     "each variant's compiled function for this signature"},
    {"config", T_OBJECT, offsetof(Launcher, config), READONLY, "the launch function"},
    {"offsets", T_OBJECT, offsetof(Launcher, offsets), READONLY, "the parameters' offsets"},
    {"context", T_OBJECT, offsetof(Launcher, context), READONLY, "the functions' context"},
    {"cooperative", T_OBJECT, offsetof(Launcher, cooperative), READONLY,
     "whether the kernel synchronises its grid"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject launcher_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "numbatune._native.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A fast path's launch once its arrays are read (numbatune/_launcher.c).",
    .tp_new = launcher_new,
    .tp_traverse = (traverseproc)launcher_traverse,
    .tp_clear = (inquiry)launcher_clear,
    .tp_dealloc = (destructor)launcher_dealloc,
    .tp_methods = launcher_methods,
    .tp_members = launcher_members,
};

int add_launcher_type(PyObject *module) {
    PyObject **names[] = {&published_name, &remember_name, &shapes_name, &handle_name,
                          &general_name, &numba_name, &failed_name, &config_failed_name,
                          &bad_config_name, &handle_of_name, &buffers_name, &kept_name,
                          &valid_name, &index_name, &params_name};
    const char *texts[] = {"published", "remember", "shapes", "_numbatune_handle", "general",
                           "numba", "failed", "config_failed", "bad_config", "handle",
                           "buffers", "kept", "valid", "index", "params"};
    for (size_t i = 0; i < sizeof(texts) / sizeof(*texts); i++) {
        if ((*names[i] = PyUnicode_InternFromString(texts[i])) == NULL) return -1;
    }
    PyObject *module_struct = PyImport_ImportModule("struct");
    struct_error = module_struct ? PyObject_GetAttrString(module_struct, "error") : NULL;
    Py_XDECREF(module_struct);
    if (struct_error == NULL || PyType_Ready(&launcher_type) < 0) return -1;
    return PyModule_AddObjectRef(module, "Launcher", (PyObject *)&launcher_type);
}
