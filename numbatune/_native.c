/* cuLaunchKernel called from Python with as little in between as possible, and array
 * arguments read through the DLPack C exchange API or their attributes (and, in _order.c, the
 * stream order).
 *
 * Built with the package into the extension numbatune._native (_module.c; setup.py, which
 * stops where it cannot be built) and loaded by numbatune/native.py. The kernel's parameters arrive packed in
 * one bytes object, laid out as the driver lays them out, with the byte offset of each parameter
 * in another; the driver copies them during the call (as one buffer; a cooperative launch, one
 * parameter at a time), so nothing is shared between calls or threads, and the driver's calls
 * that may block (the launch, the event record and wait) release the GIL. The driver is found at
 * run time, so no CUDA header or library is needed to build; where it cannot be loaded,
 * DRIVER_ERROR says why and only the array reads work.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#include "_native.h"

#define MAX_PARAMETERS 1024

typedef int (*launch_kernel_t)(void *function, unsigned grid_x, unsigned grid_y,
                               unsigned grid_z, unsigned block_x, unsigned block_y,
                               unsigned block_z, unsigned shared_bytes, void *stream,
                               void **parameters, void **extra);
typedef int (*launch_cooperative_t)(void *function, unsigned grid_x, unsigned grid_y,
                                    unsigned grid_z, unsigned block_x, unsigned block_y,
                                    unsigned block_z, unsigned shared_bytes, void *stream,
                                    void **parameters);
typedef int (*get_current_context_t)(void **context);
typedef int (*event_query_t)(void *event);

static launch_kernel_t launch_kernel = NULL;
static launch_cooperative_t launch_cooperative = NULL;
static get_current_context_t get_current_context = NULL;
/* (not static: _order.c calls these, _native.h) */
event_record_t event_record = NULL;
stream_wait_event_t stream_wait_event = NULL;
stream_is_capturing_t stream_is_capturing = NULL;
static event_query_t event_query = NULL;

/* cuLaunchKernel's ``extra`` keys (cuda.h): the parameters as one buffer, and its size. */
#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

/* Returned instead of a CUresult (which are never negative). */
#define WRONG_CONTEXT -1 /* the thread's current context is not the function's */
#define EMPTY_LAUNCH -2  /* a grid or block dimension is 0 */

/* -1 with a ``type`` exception saying ``message``: a failed check's answer. */
static int refuse(PyObject *type, const char *message) {
    PyErr_SetString(type, message);
    return -1;
}

static int unsigned_of(PyObject *value, unsigned *out) {
    PyObject *index = PyNumber_Index(value);
    if (index == NULL) return -1;
    unsigned long result = PyLong_AsUnsignedLong(index);
    Py_DECREF(index);
    if (result == (unsigned long)-1 && PyErr_Occurred()) return -1;
    if (result > 0xFFFFFFFFul) {
        return refuse(PyExc_OverflowError, "launch dimension does not fit in 32 bits");
    }
    *out = (unsigned)result;
    return 0;
}

/* An int, or a tuple or list of 1 to 3 ints, as three dimensions. */
static int dim3_of(PyObject *value, unsigned out[3]) {
    out[0] = out[1] = out[2] = 1;
    if (PyTuple_Check(value) || PyList_Check(value)) {
        Py_ssize_t count = PySequence_Fast_GET_SIZE(value);
        PyObject **items = PySequence_Fast_ITEMS(value);
        if (count < 1 || count > 3) {
            return refuse(PyExc_ValueError, "grid and block take 1 to 3 dimensions");
        }
        for (Py_ssize_t i = 0; i < count; i++) {
            if (unsigned_of(items[i], &out[i]) < 0) return -1;
        }
        return 0;
    }
    return unsigned_of(value, &out[0]);
}

/* The address in the Python int ``value`` into ``*out`` (0 included): 0, or -1 with an
 * exception where it is no int or out of range. */
static inline int pointer_of(PyObject *value, void **out) {
    *out = PyLong_AsVoidPtr(value);
    return *out == NULL && PyErr_Occurred() ? -1 : 0;
}

/* Why the driver's calls cannot be made (load_driver's answer; NULL when they can). */
static const char *driver_error = NULL;

/* 1, with a RuntimeError saying why, where the driver's calls cannot be made; else 0. */
static int without_driver(void) {
    if (driver_error == NULL) return 0;
    PyErr_Format(PyExc_RuntimeError, "numbatune._native: no CUDA driver call can be made: %s",
                 driver_error);
    return 1;
}

/* launch(function, config, stream, parameters, offsets, context, cooperative) -> CUresult,
 * where config is (grid, block) or (grid, block, shared_bytes), context the function's
 * CUcontext and cooperative true for a kernel that synchronises its grid; WRONG_CONTEXT or
 * EMPTY_LAUNCH, launching nothing, where those hold. */
static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned grid[3], block[3], shared = 0;
    void *pointers[MAX_PARAMETERS];
    if (without_driver()) return NULL;
    if (nargs != 7 || !(PyTuple_Check(args[1]) || PyList_Check(args[1])) ||
        !PyBytes_Check(args[3]) || !PyBytes_Check(args[4])) {
        return PyErr_Format(PyExc_TypeError,
                            "launch(function, (grid, block[, shared]), stream, parameters: bytes, "
                            "offsets: bytes, context, cooperative)");
    }
    void *expected, *current = NULL;
    if (pointer_of(args[5], &expected) < 0) return NULL;
    if (get_current_context(&current) != 0 || current != expected) {
        return PyLong_FromLong(WRONG_CONTEXT);
    }
    Py_ssize_t config_size = PySequence_Fast_GET_SIZE(args[1]);
    PyObject **config = PySequence_Fast_ITEMS(args[1]);
    if (config_size != 2 && config_size != 3) {
        return PyErr_Format(PyExc_ValueError, "a launch configuration is (grid, block[, shared])");
    }
    if (dim3_of(config[0], grid) < 0 || dim3_of(config[1], block) < 0) return NULL;
    if (config_size == 3 && unsigned_of(config[2], &shared) < 0) return NULL;
    for (int i = 0; i < 3; i++) {
        if (grid[i] == 0 || block[i] == 0) return PyLong_FromLong(EMPTY_LAUNCH);
    }
    void *function, *stream;
    if (pointer_of(args[0], &function) < 0 || pointer_of(args[2], &stream) < 0) return NULL;
    char *data = PyBytes_AS_STRING(args[3]);
    int cooperative = PyObject_IsTrue(args[6]), error;
    if (cooperative < 0) return NULL;
    /* The driver runs without the GIL (a launch blocks while the stream's queue is full): the
     * bytes objects stay alive in the caller's arguments, and nothing else here is shared. */
    if (!cooperative) {
        /* The parameters lie at the driver's offsets already: the driver copies them as one
         * buffer, instead of one parameter at a time (0.4 us less with 134 parameters). */
        size_t size = (size_t)PyBytes_GET_SIZE(args[3]);
        void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, data, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                         CU_LAUNCH_PARAM_END};
        Py_BEGIN_ALLOW_THREADS
        error = launch_kernel(function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                              shared, stream, NULL, size ? extra : NULL);
        Py_END_ALLOW_THREADS
        return PyLong_FromLong(error);
    }
    const int64_t *offsets = (const int64_t *)PyBytes_AS_STRING(args[4]);
    Py_ssize_t count = PyBytes_GET_SIZE(args[4]) / (Py_ssize_t)sizeof(int64_t);
    if (count > MAX_PARAMETERS) return PyErr_Format(PyExc_ValueError, "too many kernel parameters");
    for (Py_ssize_t i = 0; i < count; i++) pointers[i] = data + offsets[i];
    Py_BEGIN_ALLOW_THREADS
    error = launch_cooperative(function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                               shared, stream, count ? pointers : NULL);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(error);
}

/* Two handles from Python ints. */
static int two_pointers(PyObject *const *args, Py_ssize_t nargs, void **a, void **b) {
    if (nargs != 2) return refuse(PyExc_TypeError, "expected two handles");
    return pointer_of(args[0], a) < 0 || pointer_of(args[1], b) < 0 ? -1 : 0;
}

/* None for CUDA_SUCCESS; else numba's CudaAPIError(error, message) raised. */
static PyObject *checked(int error, const char *message) {
    if (error == 0) Py_RETURN_NONE;
    PyObject *driver = PyImport_ImportModule("numba.cuda.cudadrv.driver");
    PyObject *type = driver ? PyObject_GetAttrString(driver, "CudaAPIError") : NULL;
    PyObject *raised = type ? PyObject_CallFunction(type, "is", error, message) : NULL;
    if (raised != NULL) PyErr_SetObject(type, raised);
    Py_XDECREF(raised);
    Py_XDECREF(type);
    Py_XDECREF(driver);
    return NULL;
}

/* record(event, stream) -> None: cuEventRecord, raising numba's CudaAPIError on a failure. */
PyObject *native_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *event, *stream;
    if (without_driver() || two_pointers(args, nargs, &event, &stream) < 0) return NULL;
    int error;
    Py_BEGIN_ALLOW_THREADS
    error = event_record(event, stream);
    Py_END_ALLOW_THREADS
    return checked(error, "cuEventRecord failed");
}

/* wait(stream, event) -> None: cuStreamWaitEvent with no flags, raising as record does. */
PyObject *native_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *stream, *event;
    if (without_driver() || two_pointers(args, nargs, &stream, &event) < 0) return NULL;
    int error;
    Py_BEGIN_ALLOW_THREADS
    error = stream_wait_event(stream, event, 0);
    Py_END_ALLOW_THREADS
    return checked(error, "cuStreamWaitEvent failed");
}

/* query(event) -> CUresult: cuEventQuery (0 once the device passed it, 600 before). */
static PyObject *query(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (without_driver()) return NULL;
    if (nargs != 1) return PyErr_Format(PyExc_TypeError, "query(event)");
    void *event;
    if (pointer_of(args[0], &event) < 0) return NULL;
    return PyLong_FromLong(event_query(event));
}

/* same_classes(args, classes) -> bool: whether the tuple ``args`` holds as many values as the
 * tuple ``classes`` holds classes, each of exactly its class (a fast path's first check). */
static PyObject *same_classes(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_Check(args[1])) {
        return PyErr_Format(PyExc_TypeError, "same_classes(args, classes: tuple)");
    }
    Py_ssize_t count = PyTuple_GET_SIZE(args[1]);
    if (!PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != count) Py_RETURN_FALSE;
    for (Py_ssize_t i = 0; i < count; i++) {
        if ((PyObject *)Py_TYPE(PyTuple_GET_ITEM(args[0], i)) != PyTuple_GET_ITEM(args[1], i)) {
            Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

/* The DLPack C exchange API (dlpack.h 1.3), as far as it is used here. */
typedef struct {
    int32_t device_type;
    int32_t device_id;
} dl_device_t;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} dl_data_type_t;

typedef struct {
    void *data;
    dl_device_t device;
    int32_t ndim;
    dl_data_type_t dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL for a compact row-major tensor */
    uint64_t byte_offset;
} dl_tensor_t;

typedef struct {
    struct {
        uint32_t major;
        uint32_t minor;
    } version;
    void *previous;
    void *managed_tensor_allocator;
    void *managed_tensor_from_py_object_no_sync;
    void *managed_tensor_to_py_object_no_sync;
    int (*dltensor_from_py_object_no_sync)(void *py_object, dl_tensor_t *out);
    int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out);
} dl_exchange_api_t;

#define MAX_DIMENSIONS 64

/* What a fast path expects of one array: where it lies, its element type, rank and layout. */
typedef struct {
    int32_t device_type;
    int32_t device_id;
    uint8_t ndim;
    uint8_t code;
    uint8_t bits;
    uint8_t layout; /* 'C', 'F' or 'A', as numba types the array */
    uint8_t structure; /* of its kernel parameters: STRUCTURE_NUMBA or STRUCTURE_MEMREF */
    uint8_t reads_device; /* attribute reads: whether the device is read and checked */
} dl_expected_t;

/* numba's array structure: meminfo, parent, size, itemsize, data, shape..., byte strides... */
#define STRUCTURE_NUMBA 0
/* An MLIR memref descriptor: data (allocated), data (aligned), offset 0, shape..., strides in
 * elements... */
#define STRUCTURE_MEMREF 1

/* How many parameters an array of ``structure`` has before its shape. */
static inline Py_ssize_t head_of(uint8_t structure) {
    return structure == STRUCTURE_MEMREF ? 3 : 5;
}

/* dlpack_api(cls) -> int: the address of the class's DLPack C exchange API, 0 where it has
 * none of a version and completeness this file reads. */
static PyObject *dlpack_api(PyObject *self, PyObject *cls) {
    PyObject *capsule = PyObject_GetAttrString(cls, "__dlpack_c_exchange_api__");
    dl_exchange_api_t *api = capsule ? PyCapsule_GetPointer(capsule, "dlpack_exchange_api") : NULL;
    Py_XDECREF(capsule);
    if (api == NULL) PyErr_Clear();
    if (api == NULL || api->version.major != 1 || api->dltensor_from_py_object_no_sync == NULL ||
        api->current_work_stream == NULL) {
        return PyLong_FromLong(0);
    }
    return PyLong_FromVoidPtr(api);
}

static dl_exchange_api_t *api_of(PyObject *value) {
    dl_exchange_api_t *api = PyLong_AsVoidPtr(value);
    if (api == NULL && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_ValueError, "no DLPack C exchange API (address 0)");
    }
    return api;
}

/* Whether the byte strides are those of a dense array, last dimension fastest (C order) or
 * first fastest; dimensions of size 1 may have any stride (as numba's layout test). */
static int dense(const dl_tensor_t *t, const int64_t *strides, int c_order) {
    int64_t expected = t->dtype.bits / 8;
    for (int32_t k = 0; k < t->ndim; k++) {
        int32_t d = c_order ? t->ndim - 1 - k : k;
        if (t->shape[d] != 1 && strides[d] != expected) return 0;
        expected *= t->shape[d];
    }
    return 1;
}

/* The kernel parameters of an array in the structure expected (numba's: meminfo, parent, size,
 * itemsize, data, shape..., byte strides...; or a memref's: data, data, offset, shape...,
 * strides in elements...; each 8 bytes in the host's order) written to ``out``; how many, or -1
 * where the array is not as expected. */
static Py_ssize_t write_fields(const dl_tensor_t *t, const dl_expected_t *e, int64_t *out) {
    if (t->device.device_type != e->device_type || t->device.device_id != e->device_id ||
        t->ndim != e->ndim || t->dtype.code != e->code || t->dtype.bits != e->bits ||
        t->dtype.lanes != 1 || t->ndim > MAX_DIMENSIONS) {
        return -1;
    }
    int64_t itemsize = t->dtype.bits / 8, strides[MAX_DIMENSIONS], size = 1;
    for (int32_t d = t->ndim - 1; d >= 0; d--) {
        strides[d] = t->strides ? t->strides[d] * itemsize : itemsize * size;
        size *= t->shape[d];
    }
    int c_dense = size == 0 || dense(t, strides, 1); /* empty: C, as torch and CuPy say */
    if (e->layout == 'C') {
        if (!c_dense) return -1;
        int64_t step = 1;
        for (int32_t d = t->ndim - 1; d >= 0; d--) { /* numba's, from the shape */
            strides[d] = itemsize * step;
            step *= t->shape[d];
        }
    } else if (c_dense || dense(t, strides, 0) != (e->layout == 'F')) {
        return -1;
    }
    int memref = e->structure == STRUCTURE_MEMREF;
    Py_ssize_t head = head_of(e->structure);
    int64_t data = (int64_t)(intptr_t)((char *)t->data + t->byte_offset);
    if (memref) {
        out[0] = out[1] = data;
        out[2] = 0;
    } else {
        out[0] = out[1] = 0;
        out[2] = size;
        out[3] = itemsize;
        out[4] = data;
    }
    for (int32_t d = 0; d < t->ndim; d++) {
        out[head + d] = t->shape[d];
        out[head + t->ndim + d] = memref ? strides[d] / itemsize : strides[d];
    }
    return head + 2 * (Py_ssize_t)t->ndim;
}

/* The default key (numbatune.keys): each array argument's part, its shape's extents anchored
 * to powers of two, its dtype name and layout letter, and each flag's value, in order. Each
 * part made so far is kept as itself, so that equal parts are one object (a key lookup
 * compares them by identity); emptied at PARTS_LIMIT parts. */
#define PARTS_LIMIT 4096
static PyObject *parts_made;

/* key_part((shape, dtype, layout)) -> the part of the default key of an array so read (a new
 * reference; NULL with an exception). */
static PyObject *key_part(PyObject *module, PyObject *read) {
    PyObject *shape, *dtype, *layout;
    if (!PyTuple_Check(read) || !PyArg_ParseTuple(read, "OUU", &shape, &dtype, &layout)) {
        PyErr_Clear();
        return PyErr_Format(PyExc_TypeError, "key_part((shape, dtype name, layout letter))");
    }
    PyObject *extents = PySequence_Fast(shape, "key_part: a shape is a sequence of integers");
    if (extents == NULL) return NULL;
    Py_ssize_t ndim = PySequence_Fast_GET_SIZE(extents);
    PyObject *anchored = PyTuple_New(ndim); /* (a new tuple: the shape given is not changed) */
    for (Py_ssize_t d = 0; anchored != NULL && d < ndim; d++) {
        long long extent = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(extents, d));
        unsigned long long power = 1; /* (up to 2**63: unsigned) */
        while (extent > 0 && power < (unsigned long long)extent) power <<= 1;
        PyObject *item =
            extent == -1 && PyErr_Occurred() ? NULL : PyLong_FromUnsignedLongLong(power);
        if (item == NULL) Py_CLEAR(anchored);
        else PyTuple_SET_ITEM(anchored, d, item);
    }
    Py_DECREF(extents);
    if (anchored == NULL) return NULL;
    PyObject *part = Py_BuildValue("(NOO)", anchored, dtype, layout);
    if (part == NULL) return NULL;
    if (PyDict_GET_SIZE(parts_made) >= PARTS_LIMIT) PyDict_Clear(parts_made);
    PyObject *kept = PyDict_SetDefault(parts_made, part, part);
    Py_XINCREF(kept);
    Py_DECREF(part);
    return kept;
}

/* default_key(values, reads, flags) -> the default key of arguments ``values`` (a tuple),
 * each one's read ``reads[i]`` given ((shape, dtype name, layout letter), or None: not an
 * array); ``flags`` are the classes of the values that are mode flags (their truth is in the
 * key). */
static PyObject *default_key(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyTuple_Check(args[0]) || !PyTuple_Check(args[1]) ||
        PyTuple_GET_SIZE(args[0]) != PyTuple_GET_SIZE(args[1])) {
        return PyErr_Format(PyExc_TypeError,
                            "default_key(values, reads, flags): two tuples of one "
                            "length and the flags' classes");
    }
    PyObject *key = PyList_New(0);
    if (key == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args[0]); i++) {
        PyObject *value = PyTuple_GET_ITEM(args[0], i), *read = PyTuple_GET_ITEM(args[1], i);
        PyObject *part = NULL;
        int flag = read == Py_None ? PyObject_IsInstance(value, args[2]) : 0;
        if (flag == 1) {
            int truth = PyObject_IsTrue(value);
            part = truth < 0 ? NULL : PyBool_FromLong(truth);
        } else if (flag == 0 && read != Py_None) {
            part = key_part(module, read);
        } else if (flag == 0) {
            continue;
        }
        if (part == NULL || PyList_Append(key, part) < 0) {
            Py_XDECREF(part);
            Py_DECREF(key);
            return NULL;
        }
        Py_DECREF(part);
    }
    Py_SETREF(key, PyList_AsTuple(key));
    return key;
}

/* What a reader keeps of one of its arrays: what is expected of it, where its part of the
 * default key comes from, and its extents and part as last read. */
typedef struct {
    dl_expected_t expected;
    PyObject *dtype;    /* attribute reads: its dtype object */
    Py_ssize_t fields;  /* how many kernel parameters it has */
    PyObject *parts;    /* the default-key parts by shape (a keys.KeyParts), or NULL: none */
    PyObject *part;     /* the part of the last read, or NULL */
    int64_t *extents;   /* those of the last read (ndim of them) */
    PyObject *token;      /* memo reads: the token its memo must carry */
    PyObject *seen;       /* a weak reference to the array whose allocation was read last */
    void *seen_data;      /* its data pointer then */
    PyObject *allocation; /* where its allocation starts (an int), or NULL: none read yet */
} reader_array_t;

/* The attributes arrays read by attribute expose their fields by (reader_source). */
enum {
    NAME_SHAPE,
    NAME_STRIDES,
    NAME_C_CONTIGUOUS,
    NAME_DTYPE,
    NAME_MEMORY,
    NAME_POINTER,
    NAME_DEVICE,
    NAME_STREAM_POINTER,
    NAME_RANK,
    NAME_SIZE,
    NAME_ALLOCATION,
    NAME_COUNT
};

/* The getters of a class's attributes where they are getset descriptors (as Cython's
 * properties are): the functions its attribute lookup calls for them, found once per class so
 * that a read calls them with no lookup (an instance's dict cannot hide a getset descriptor),
 * and found again where the class changes (its version tag). */
typedef struct {
    PyTypeObject *type;     /* the class they were found for, or NULL */
    unsigned int version;   /* its version tag then; 0: none, every attribute looked up */
    getter get[NAME_COUNT]; /* NULL: the attribute is looked up on each read */
    void *closure[NAME_COUNT];
} getters_t;

/* The getters a reader keeps: of its arrays' class, of their memory objects' class and of
 * the class of the objects those hold their allocations' starts in. */
enum { OF_ARRAY, OF_MEMORY, OF_ALLOCATION, GETTERS_COUNT };

/* Reads the arrays of one fast path: see reader_new. */
typedef struct {
    PyObject_HEAD
    dl_exchange_api_t *api;      /* NULL: the arrays are read by attribute */
    PyObject *names[NAME_COUNT]; /* attribute reads: the attributes' names, interned */
    PyObject *current_stream;    /* attribute reads: the library's current stream function */
    PyObject *offset;            /* DLPack reads: the name of the arrays' method that gives their
                                    offset into their allocation, in elements, or NULL */
    PyObject *memo;              /* memo reads: the name the arrays keep their memo under */
    PyObject *make_memo;         /* memo reads: makes (and keeps) an array's memo */
    getters_t getters[GETTERS_COUNT];
    Py_ssize_t count, items, keyed, runs;
    Py_ssize_t *key_items;  /* the key's elements: an array's part, or an item as it is */
    reader_array_t *arrays;
    Py_ssize_t *run_fields; /* how many kernel parameters each run has */
    PyObject **fields;      /* each run's parameters as last read (bytes), or NULL */
    int64_t *extents;       /* the arrays' extents of the last read, one block */
    Py_ssize_t total_extents;
    PyObject *shapes;       /* a tuple of them, or NULL: not made since they changed */
} Reader;

/* A tuple of the ``count`` integers ``values`` (a new reference), or NULL with an exception. */
static PyObject *tuple_of(const int64_t *values, Py_ssize_t count) {
    PyObject *tuple = PyTuple_New(count);
    for (Py_ssize_t i = 0; tuple != NULL && i < count; i++) {
        PyObject *value = PyLong_FromLongLong(values[i]);
        if (value == NULL) Py_CLEAR(tuple);
        else PyTuple_SET_ITEM(tuple, i, value);
    }
    return tuple;
}

/* The read's key: for each of ``key_items``, the part of the array it names (its extents read
 * into ``extents``; the last read's part where they are the same), or the item of ``items``
 * it names, as it is. NULL with an exception. */
static PyObject *key_of(Reader *self, PyObject *items, const int64_t *extents) {
    PyObject *key = PyTuple_New(self->keyed);
    if (key == NULL) return NULL;
    for (Py_ssize_t k = 0; k < self->keyed; k++) {
        Py_ssize_t i = self->key_items[k];
        if (i >= self->count) {
            PyTuple_SET_ITEM(key, k, Py_NewRef(PyTuple_GET_ITEM(items, i)));
            continue;
        }
        reader_array_t *array = &self->arrays[i];
        size_t size = (size_t)array->expected.ndim * sizeof(int64_t);
        const int64_t *read = extents + (array->extents - self->extents);
        PyObject *part;
        if (array->part != NULL && memcmp(array->extents, read, size) == 0) {
            part = Py_NewRef(array->part);
        } else {
            /* its parts' for the shape, which make one they lack (may run Python code: the
             * state is set after) */
            PyObject *shape = tuple_of(read, array->expected.ndim);
            part = shape != NULL ? PyObject_GetItem(array->parts, shape) : NULL;
            Py_XDECREF(shape);
            if (part == NULL) {
                Py_DECREF(key);
                return NULL;
            }
            memcpy(array->extents, read, size);
            Py_XSETREF(array->part, Py_NewRef(part));
        }
        PyTuple_SET_ITEM(key, k, part);
    }
    return key;
}

/* Bytes of the ``count`` parameters of run ``run``: the last read's where they are equal. */
static PyObject *run_bytes(Reader *self, Py_ssize_t run, const int64_t *values) {
    PyObject *last = self->fields[run];
    Py_ssize_t size = self->run_fields[run] * (Py_ssize_t)sizeof(int64_t);
    if (last != NULL && memcmp(PyBytes_AS_STRING(last), values, (size_t)size) == 0) {
        return Py_NewRef(last);
    }
    PyObject *fields = PyBytes_FromStringAndSize((const char *)values, size);
    if (fields != NULL) Py_XSETREF(self->fields[run], Py_NewRef(fields));
    return fields;
}

/* The result of a read whose arrays' parameters lie in ``values``, their extents in
 * ``extents`` and the starts of their allocations in ``allocations`` (a reference it takes;
 * NULL: not read): (current stream, key, run, run, ..., allocations or None). */
static PyObject *read_result(Reader *self, PyObject *items, void *stream, const int64_t *values,
                             const int64_t *extents, PyObject *allocations) {
    PyObject *result = PyTuple_New(3 + self->runs);
    if (result == NULL) {
        Py_XDECREF(allocations);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 2 + self->runs, allocations ? allocations : Py_NewRef(Py_None));
    PyObject *item = PyLong_FromVoidPtr(stream); /* (NULL: the tuple releases those it holds) */
    PyTuple_SET_ITEM(result, 0, item);
    if (item != NULL) {
        item = key_of(self, items, extents);
        PyTuple_SET_ITEM(result, 1, item);
    }
    for (Py_ssize_t r = 0; item != NULL && r < self->runs; r++) {
        item = run_bytes(self, r, values);
        PyTuple_SET_ITEM(result, 2 + r, item);
        values += self->run_fields[r];
    }
    if (item == NULL) Py_CLEAR(result);
    return result;
}

/* Array ``value`` of a read through the DLPack C exchange API into ``t``, and, for the
 * first (``stream`` not NULL), the library's current stream on its device. -1 where the
 * library cannot describe it. */
static int read_dlpack(Reader *self, PyObject *value, dl_tensor_t *t, void **stream) {
    if (self->api->dltensor_from_py_object_no_sync(value, t) != 0) return -1;
    if (stream == NULL) return 0;
    int32_t type = t->device.device_type, id = t->device.device_id;
    return self->api->current_work_stream(type, id, stream) == 0 ? 0 : -1;
}

/* The getters of ``type``'s attributes ``names`` (getters_t) into ``found``. */
static void find_getters(getters_t *found, PyTypeObject *type, PyObject *const *names) {
    Py_XSETREF(found->type, (PyTypeObject *)Py_NewRef(type));
    memset(found->get, 0, sizeof found->get);
    found->version = 0;
    if (type->tp_getattro != PyObject_GenericGetAttr) { /* its own lookup: every read asks it */
        found->version = type->tp_version_tag; /* (so that it is not searched again each read) */
        return;
    }
    for (int n = 0; n < NAME_COUNT; n++) {
        PyObject *descriptor = PyObject_GetAttr((PyObject *)type, names[n]);
        if (descriptor == NULL) {
            PyErr_Clear();
            continue;
        }
        if (Py_IS_TYPE(descriptor, &PyGetSetDescr_Type) &&
            PyType_IsSubtype(type, PyDescr_TYPE(descriptor))) {
            PyGetSetDef *definition = ((PyGetSetDescrObject *)descriptor)->d_getset;
            found->get[n] = definition->get;
            found->closure[n] = definition->closure;
        }
        Py_DECREF(descriptor);
    }
    if (PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) && type->tp_version_tag != 0) {
        found->version = type->tp_version_tag;
    } else {
        memset(found->get, 0, sizeof found->get); /* (a change could not be seen) */
    }
}

/* ``value.<names[n]>`` (a new reference; NULL with an exception), through the getter of its
 * class kept in ``getters[which]`` where it has one. */
static PyObject *attribute(Reader *self, int which, PyObject *value, int n) {
    getters_t *getters = &self->getters[which];
    PyTypeObject *type = Py_TYPE(value);
    if (type != getters->type || type->tp_version_tag != getters->version) {
        find_getters(getters, type, self->names);
    }
    getter get = getters->get[n];
    return get != NULL ? get(value, getters->closure[n]) : PyObject_GetAttr(value, self->names[n]);
}

/* The ``count`` integers of ``found`` (a new reference, released; a tuple or list) into
 * ``out``; -1 where it is NULL, of another length, or holds other values. */
static int integers_in(PyObject *found, int count, int64_t *out) {
    if (found == NULL) return -1;
    int ok = (PyTuple_Check(found) || PyList_Check(found)) &&
             PySequence_Fast_GET_SIZE(found) == count;
    PyObject **items = ok ? PySequence_Fast_ITEMS(found) : NULL;
    for (int i = 0; ok && i < count; i++) {
        out[i] = PyLong_AsLongLong(items[i]);
        ok = !(out[i] == -1 && PyErr_Occurred());
    }
    Py_DECREF(found);
    return ok ? 0 : -1;
}

/* The integer ``found`` (a new reference, released) into ``*value`` or, where ``value`` is
 * NULL, the address it holds (0 included) into ``*address``; -1 where it is NULL, no integer
 * or out of range (of PyLong_AsLongLong, of PyLong_AsVoidPtr). */
static inline int number_in(PyObject *found, int64_t *value, void **address) {
    if (found == NULL) return -1;
    int integer = PyLong_Check(found);
    if (value != NULL) *value = integer ? PyLong_AsLongLong(found) : -1;
    else *address = integer ? PyLong_AsVoidPtr(found) : NULL;
    Py_DECREF(found);
    int maybe_error = value != NULL ? *value == -1 : *address == NULL; /* (or a valid -1, 0) */
    return !integer || (maybe_error && PyErr_Occurred()) ? -1 : 0;
}

static int integer_in(PyObject *found, int64_t *out) { return number_in(found, out, NULL); }

static int address_in(PyObject *found, void **out) { return number_in(found, NULL, out); }

/* The extents of array ``value`` of ``ndim`` dimensions into ``shape``: of an array of at
 * most one, its rank and size (no sequence made); -1 where it has another rank. */
static int extents_of(Reader *self, PyObject *value, int ndim, int64_t *shape) {
    if (ndim > 1) return integers_in(attribute(self, OF_ARRAY, value, NAME_SHAPE), ndim, shape);
    int64_t rank;
    if (integer_in(attribute(self, OF_ARRAY, value, NAME_RANK), &rank) < 0 || rank != ndim) {
        return -1;
    }
    return ndim == 0 ? 0 : integer_in(attribute(self, OF_ARRAY, value, NAME_SIZE), &shape[0]);
}

/* Whether array ``value`` is as ``array`` expects in dtype, rank and layout, its extents read
 * into ``shape`` and, but where the layout expected is C (its flag says it), its strides into
 * ``strides`` (in elements; NULL into ``*strides_read`` for C); -1 where it is not. */
static int read_layout(Reader *self, const reader_array_t *array, PyObject *value,
                       int64_t *shape, int64_t *strides, int64_t **strides_read) {
    const dl_expected_t *e = &array->expected;
    PyObject *dtype = attribute(self, OF_ARRAY, value, NAME_DTYPE);
    if (dtype == NULL) return -1;
    int same = dtype == array->dtype || PyObject_RichCompareBool(dtype, array->dtype, Py_EQ) == 1;
    Py_DECREF(dtype);
    if (!same || extents_of(self, value, e->ndim, shape) < 0) return -1;
    *strides_read = NULL; /* (C: numba's, from the shape) */
    if (e->layout == 'C') {
        PyObject *flag = attribute(self, OF_ARRAY, value, NAME_C_CONTIGUOUS);
        int c_contiguous = flag == NULL ? -1 : PyObject_IsTrue(flag);
        Py_XDECREF(flag);
        return c_contiguous == 1 ? 0 : -1;
    }
    int64_t itemsize = e->bits / 8;
    if (integers_in(attribute(self, OF_ARRAY, value, NAME_STRIDES), e->ndim, strides) < 0) {
        return -1;
    }
    for (int d = 0; d < e->ndim; d++) { /* bytes, DLPack's in elements */
        if (strides[d] % itemsize != 0) return -1;
        strides[d] /= itemsize;
    }
    *strides_read = strides;
    return 0;
}

/* The start of the allocation of an array whose memory object is ``memory`` (a new reference:
 * the pointer of the object its allocation attribute holds), or NULL (an exception set where
 * a read failed; none where the pointer is no integer). */
static PyObject *allocation_of(Reader *self, PyObject *memory) {
    PyObject *owner = attribute(self, OF_MEMORY, memory, NAME_ALLOCATION);
    if (owner == NULL) return NULL;
    PyObject *start = attribute(self, OF_ALLOCATION, owner, NAME_POINTER);
    Py_DECREF(owner);
    if (start != NULL && !PyLong_Check(start)) Py_SETREF(start, NULL); /* (not an address) */
    return start;
}

/* The start of the allocation of ``value``, read through DLPack into ``t``: its data pointer
 * less the elements its offset method gives (a new reference), or NULL with an exception. */
static PyObject *dlpack_allocation(Reader *self, PyObject *value, const dl_tensor_t *t) {
    int64_t offset;
    if (integer_in(PyObject_CallMethodNoArgs(value, self->offset), &offset) < 0) return NULL;
    intptr_t data = (intptr_t)((char *)t->data + t->byte_offset);
    return PyLong_FromLongLong((long long)(data - offset * (t->dtype.bits / 8)));
}

/* Whether ``reference`` is a weak reference to ``value``, alive. */
static int refers_to(PyObject *reference, PyObject *value) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *alive = NULL;
    if (PyWeakref_GetRef(reference, &alive) < 0) PyErr_Clear();
    Py_XDECREF(alive); /* (compared by address only: ``value`` holds it) */
    return alive == value;
#else
    return PyWeakref_GetObject(reference) == value;
#endif
}

/* Where the allocation of ``array``'s ``value``, whose data pointer is ``data``, starts (a new
 * reference; NULL where it cannot be read: the general path's read in Python says why): the
 * last read's where ``value`` is the same live object with the same data pointer (an array's
 * allocation changes only with its data pointer: a tensor set onto another storage or resized
 * points elsewhere, as the two allocations are alive at once), else read from ``memory`` (the
 * memory object of a read by attribute) or through the DLPack offset method, and kept. */
static PyObject *allocation_start(Reader *self, reader_array_t *array, PyObject *value,
                                  void *data, PyObject *memory, const dl_tensor_t *t) {
    if (array->allocation != NULL && array->seen_data == data && refers_to(array->seen, value)) {
        return Py_NewRef(array->allocation);
    }
    PyObject *start =
        memory != NULL ? allocation_of(self, memory) : dlpack_allocation(self, value, t);
    PyObject *seen = start != NULL && Py_TYPE(value)->tp_weaklistoffset != 0
                         ? PyWeakref_NewRef(value, NULL)
                         : NULL;
    if (seen == NULL) {
        PyErr_Clear();
        return start;
    }
    PyObject *old_seen = array->seen, *old_allocation = array->allocation;
    array->seen = seen;
    array->seen_data = data;
    array->allocation = Py_NewRef(start);
    Py_XDECREF(old_seen); /* (after the state is whole: these may run Python code) */
    Py_XDECREF(old_allocation);
    return start;
}

/* Array ``value`` of a read by attribute into ``t`` (its extents into ``shape``, its strides
 * into ``strides``: read_layout); for the first (``stream`` not NULL), the library's current
 * stream; where ``allocation`` is not NULL, the start of its allocation into it (a new
 * reference; NULL where it cannot be read). -1 where it is not as expected. */
static int read_attributes(Reader *self, reader_array_t *array, PyObject *value,
                           dl_tensor_t *t, int64_t *shape, int64_t *strides, void **stream,
                           PyObject **allocation) {
    const dl_expected_t *e = &array->expected;
    if (read_layout(self, array, value, shape, strides, &t->strides) < 0) return -1;
    PyObject *memory = attribute(self, OF_ARRAY, value, NAME_MEMORY);
    if (memory == NULL) return -1;
    int64_t device = e->device_id; /* (not read: the process sees one GPU) */
    int failed = address_in(attribute(self, OF_MEMORY, memory, NAME_POINTER), &t->data) < 0 ||
                 (e->reads_device &&
                  integer_in(attribute(self, OF_MEMORY, memory, NAME_DEVICE), &device) < 0);
    if (!failed && allocation != NULL) {
        *allocation = allocation_start(self, array, value, t->data, memory, NULL);
        PyErr_Clear(); /* (where it cannot be read, it is read in Python: any error raised there) */
    }
    Py_DECREF(memory);
    if (failed || device != e->device_id) return -1;
    /* (the dtype object is the one expected: its code and bits too) */
    *t = (dl_tensor_t){t->data, {e->device_type, e->device_id}, e->ndim, {e->code, e->bits, 1},
                       shape, t->strides, 0};
    if (stream == NULL) return 0;
    PyObject *current = PyObject_CallNoArgs(self->current_stream);
    if (current == NULL) return -1;
    int result = address_in(PyObject_GetAttr(current, self->names[NAME_STREAM_POINTER]), stream);
    Py_DECREF(current);
    return result;
}

/* Array ``value`` of a memo read: its memo (kept in its dict under the memo name, else made
 * by the memo function: a tuple of its token, its kernel parameters as bytes and its
 * allocation) carries the token expected; its parameters into ``out``, its extents into
 * ``extents``, and where ``start`` is not NULL its allocation into it (a new reference). -1
 * where it is not as expected. */
static int read_memo(Reader *self, reader_array_t *array, PyObject *value, int64_t *out,
                     int64_t *extents, PyObject **start) {
    PyObject *dict = PyObject_GenericGetDict(value, NULL);
    if (dict == NULL) return -1;
    PyObject *memo = PyDict_GetItemWithError(dict, self->memo);
    Py_XINCREF(memo);
    Py_DECREF(dict);
    if (memo == NULL || memo == Py_None) {
        Py_XDECREF(memo);
        if (PyErr_Occurred()) return -1;
        memo = PyObject_CallOneArg(self->make_memo, value);
        if (memo == NULL) return -1;
    }
    size_t size = (size_t)array->fields * sizeof(int64_t);
    PyObject *fields = PyTuple_Check(memo) && PyTuple_GET_SIZE(memo) == 3 &&
                               PyTuple_GET_ITEM(memo, 0) == array->token
                           ? PyTuple_GET_ITEM(memo, 1)
                           : NULL;
    int ok = fields != NULL && PyBytes_Check(fields) && (size_t)PyBytes_GET_SIZE(fields) == size;
    if (ok) {
        memcpy(out, PyBytes_AS_STRING(fields), size);
        memcpy(extents, out + head_of(array->expected.structure),
               (size_t)array->expected.ndim * sizeof(int64_t));
        if (start != NULL) *start = Py_NewRef(PyTuple_GET_ITEM(memo, 2));
    }
    Py_DECREF(memo);
    return ok ? 0 : -1;
}

/* Array ``value`` of a read: its kernel parameters into ``out`` and its extents into
 * ``extents``; for the first (``stream`` not NULL), the library's current stream; where
 * ``start`` is not NULL, where its allocation starts into it (a new reference; NULL where it
 * cannot be read). -1 where it is not as expected (``*start`` may be set then too). */
static int read_array(Reader *self, reader_array_t *array, PyObject *value, void **stream,
                      int64_t *out, int64_t *extents, PyObject **start) {
    if (self->memo != NULL) return read_memo(self, array, value, out, extents, start);
    int64_t shape[MAX_DIMENSIONS], strides[MAX_DIMENSIONS];
    dl_tensor_t tensor;
    int read = self->api != NULL
                   ? read_dlpack(self, value, &tensor, stream)
                   : read_attributes(self, array, value, &tensor, shape, strides, stream, start);
    if (read < 0 || write_fields(&tensor, &array->expected, out) < 0) return -1;
    if (start != NULL && self->api != NULL) {
        void *data = (char *)tensor.data + tensor.byte_offset;
        *start = allocation_start(self, array, value, data, NULL, &tensor);
    }
    memcpy(extents, tensor.shape, (size_t)tensor.ndim * sizeof(int64_t));
    return 0;
}

/* reader.read(arrays[, allocations]) -> (current stream, key, run, run, ..., allocations) or
 * None: see reader_new. */
static PyObject *reader_read(Reader *self, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *arrays = nargs >= 1 ? args[0] : NULL;
    if (nargs > 2 || arrays == NULL || !PyTuple_Check(arrays) ||
        PyTuple_GET_SIZE(arrays) != self->items) {
        PyErr_Format(PyExc_TypeError, "read(arrays[, allocations]): a tuple of %zd arrays "
                     "and %zd other items of the key", self->count, self->items - self->count);
        return NULL;
    }
    int wanted = nargs == 2 ? PyObject_IsTrue(args[1]) : 0;
    if (wanted < 0) return NULL;
    /* The starts of the arrays' allocations, where asked and this reader can read them. */
    PyObject *allocations = wanted && (self->api == NULL || self->offset != NULL)
                                ? PyTuple_New(self->count)
                                : NULL;
    if (wanted && allocations == NULL && PyErr_Occurred()) return NULL;
    int64_t values[MAX_PARAMETERS], extents[MAX_PARAMETERS];
    Py_ssize_t written = 0;
    void *stream = NULL;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        reader_array_t *array = &self->arrays[i];
        PyObject *start = NULL;
        if (read_array(self, array, PyTuple_GET_ITEM(arrays, i), i == 0 ? &stream : NULL,
                       values + written, extents + (array->extents - self->extents),
                       allocations != NULL ? &start : NULL) < 0) {
            Py_XDECREF(start);
            Py_XDECREF(allocations);
            if (PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_MemoryError)) return NULL;
            PyErr_Clear(); /* the library cannot describe it: not this signature */
            Py_RETURN_NONE;
        }
        if (allocations != NULL && start == NULL) { /* (read in Python: any error raised there) */
            PyErr_Clear();
            Py_CLEAR(allocations);
        }
        if (allocations != NULL) PyTuple_SET_ITEM(allocations, i, start);
        written += array->fields;
    }
    size_t size = (size_t)self->total_extents * sizeof(int64_t);
    if (self->shapes != NULL && memcmp(self->extents, extents, size) != 0) Py_CLEAR(self->shapes);
    PyObject *result = read_result(self, arrays, stream, values, extents, allocations);
    /* (key_of kept the keyed arrays' extents with their parts: this keeps every array's) */
    if (result != NULL) memcpy(self->extents, extents, size);
    return result;
}

/* reader.shapes: the extents of the last read's arrays, in order, as one tuple of ints (the
 * same object while they stay the same): what a launch function wrapped in ``by_shape``
 * depends on of them, with their dtypes and layouts, which the fast path fixes. */
static PyObject *reader_shapes(Reader *self, void *closure) {
    if (self->shapes == NULL) self->shapes = tuple_of(self->extents, self->total_extents);
    return Py_XNewRef(self->shapes);
}

/* The arrays' state, from what is expected of each and where their key parts come from. */
static int reader_arrays(Reader *self, const dl_expected_t *expected, PyObject *parts) {
    Py_ssize_t total_fields = 0, total_extents = 0;
    for (Py_ssize_t i = 0; i < self->count; i++) {
        reader_array_t *array = &self->arrays[i];
        PyObject *source = PyTuple_GET_ITEM(parts, i);
        array->expected = expected[i];
        if (expected[i].structure != STRUCTURE_NUMBA && expected[i].structure != STRUCTURE_MEMREF) {
            return refuse(PyExc_ValueError, "Reader: an unknown structure of parameters");
        }
        if (expected[i].ndim > MAX_DIMENSIONS) {
            return refuse(PyExc_ValueError, "Reader: an array of too many dimensions");
        }
        if (source != Py_None) {
            if (!PyDict_Check(source)) {
                return refuse(PyExc_TypeError, "Reader: a key part's source is a KeyParts");
            }
            array->parts = Py_NewRef(source);
        }
        array->fields = head_of(expected[i].structure) + 2 * expected[i].ndim;
        total_fields += array->fields;
        total_extents += expected[i].ndim;
    }
    if (total_fields > MAX_PARAMETERS) {
        return refuse(PyExc_ValueError, "Reader: too many kernel parameters");
    }
    self->extents = PyMem_Calloc((size_t)total_extents + 1, sizeof(int64_t));
    if (self->extents == NULL) return -1;
    self->total_extents = total_extents;
    for (Py_ssize_t i = 0, at = 0; i < self->count; at += self->arrays[i++].expected.ndim) {
        self->arrays[i].extents = self->extents + at;
    }
    return 0;
}

/* The key's elements (key_of): those ``key`` lists (array indices, and indices past the arrays'
 * of the other items of a read), or, where it is None, each array's with a key part's source,
 * in order. */
static int reader_key(Reader *self, PyObject *key) {
    Py_ssize_t listed = key == Py_None ? self->count : PyTuple_GET_SIZE(key);
    self->key_items = PyMem_Calloc((size_t)listed + 1, sizeof(Py_ssize_t));
    if (self->key_items == NULL) return -1;
    self->items = self->count;
    for (Py_ssize_t k = 0; k < listed; k++) {
        Py_ssize_t i = k;
        if (key != Py_None) {
            i = PyLong_AsSsize_t(PyTuple_GET_ITEM(key, k));
            if (i == -1 && PyErr_Occurred()) return -1;
        } else if (self->arrays[k].parts == NULL) {
            continue;
        }
        if (i < 0 || (i < self->count && self->arrays[i].parts == NULL)) {
            return refuse(PyExc_ValueError,
                          "Reader: a key's element is an array with a key "
                          "part's source or an item past the arrays");
        }
        self->items = i >= self->items ? i + 1 : self->items;
        self->key_items[self->keyed++] = i;
    }
    return 0;
}

/* Each run's count of parameters, from its count of arrays. */
static int reader_runs(Reader *self, PyObject *runs) {
    Py_ssize_t array = 0;
    for (Py_ssize_t r = 0; r < self->runs; r++) {
        Py_ssize_t length = PyLong_AsSsize_t(PyTuple_GET_ITEM(runs, r));
        if (length == -1 && PyErr_Occurred()) return -1;
        if (length < 1 || array + length > self->count) break;
        for (Py_ssize_t end = array + length; array < end; array++) {
            self->run_fields[r] += self->arrays[array].fields;
        }
    }
    if (array != self->count) {
        return refuse(PyExc_ValueError, "Reader: runs of at least one array, of all of them");
    }
    return 0;
}

/* How the arrays are read: through the DLPack C exchange API at the address ``source``; for a tuple
 * (name, make, tokens), from the memo each keeps under ``name`` (made by ``make`` where it is
 * missing; read_memo), which must carry its token; or, for a tuple (names, current stream function,
 * dtypes), by attribute: ``names`` are those of NAME_SHAPE to NAME_ALLOCATION (shape and strides in
 * bytes, tuples or lists; whether C-contiguous; dtype; the object holding the pointer and device
 * index; those; of the object the function returns, its handle; rank and size, which give the
 * extents of arrays of at most one dimension; of the memory object, the object whose pointer
 * attribute is where its allocation starts), ``dtypes`` the dtype object expected of each array. */
static int reader_source(Reader *self, PyObject *source) {
    if (PyLong_Check(source)) {
        self->api = api_of(source);
        return self->api == NULL ? -1 : 0;
    }
    if (PyTuple_Check(source) && PyTuple_GET_SIZE(source) == 3 &&
        PyUnicode_CheckExact(PyTuple_GET_ITEM(source, 0))) {
        PyObject *tokens = PyTuple_GET_ITEM(source, 2);
        if (!PyTuple_Check(tokens) || PyTuple_GET_SIZE(tokens) != self->count) {
            return refuse(PyExc_TypeError, "Reader: a memo source is (name, make, tokens)");
        }
        self->memo = Py_NewRef(PyTuple_GET_ITEM(source, 0));
        PyUnicode_InternInPlace(&self->memo);
        self->make_memo = Py_NewRef(PyTuple_GET_ITEM(source, 1));
        for (Py_ssize_t i = 0; i < self->count; i++) {
            self->arrays[i].token = Py_NewRef(PyTuple_GET_ITEM(tokens, i));
        }
        return 0;
    }
    PyObject *names, *current_stream, *dtypes;
    if (!PyTuple_Check(source) ||
        !PyArg_ParseTuple(source, "O!OO!", &PyTuple_Type, &names, &current_stream,
                          &PyTuple_Type, &dtypes) ||
        PyTuple_GET_SIZE(names) != NAME_COUNT || PyTuple_GET_SIZE(dtypes) != self->count) {
        PyErr_Clear();
        return refuse(PyExc_TypeError, "Reader: a source is a DLPack C exchange API's address, "
                                       "(names, current stream function, dtypes) or "
                                       "(name, make, tokens)");
    }
    for (int n = 0; n < NAME_COUNT; n++) {
        PyObject *name = PyTuple_GET_ITEM(names, n);
        if (!PyUnicode_CheckExact(name)) {
            return refuse(PyExc_TypeError, "Reader: attribute names are str");
        }
        self->names[n] = Py_NewRef(name);
        PyUnicode_InternInPlace(&self->names[n]);
    }
    self->current_stream = Py_NewRef(current_stream);
    for (Py_ssize_t i = 0; i < self->count; i++) {
        self->arrays[i].dtype = Py_NewRef(PyTuple_GET_ITEM(dtypes, i));
    }
    return 0;
}

/* Reader(source, expected, parts, runs, offset=None, key=None): reads the tuples of arrays of one
 * fast path, of one library, read as ``source`` says (reader_source), in one call: ``read(arrays[,
 * allocations])``; with ``key`` (reader_key), the tuple holds after the arrays the other items of
 * the key, which it composes whole.
 *
 * ``expected`` holds a dl_expected_t per array, packed; ``parts``, per array, None or the source of
 * its part of the default key: a keys.KeyParts, the parts by shape (a dict that makes the part of a
 * shape not in it); ``runs`` splits the arrays, in order, into runs of consecutive kernel
 * parameters (the count of arrays of each). ``read`` returns (the library's current stream, through
 * DLPack on the first array's device, the key, the parameters of each run as bytes, and, where
 * ``allocations`` is true, the starts of the arrays' allocations, a tuple of ints, else None), or
 * None where an array is not as expected or its library cannot describe it. Parts and bytes equal
 * to the last read's are those objects again. An allocation starts, for arrays read through DLPack,
 * at the data pointer less the elements given by their method named ``offset`` (None: not read, the
 * allocations are None); for arrays read by attribute, at the pointer of the object their memory
 * object's allocation attribute holds. Where one cannot be read, they are all None. */
static PyObject *reader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"source", "expected", "parts", "runs", "offset", "key", NULL};
    PyObject *source, *expected, *parts, *runs, *offset = Py_None, *key = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OSO!O!|OO:Reader", names, &source, &expected,
                                     &PyTuple_Type, &parts, &PyTuple_Type, &runs, &offset,
                                     &key)) {
        return NULL;
    }
    if (key != Py_None && !PyTuple_Check(key)) {
        return PyErr_Format(PyExc_TypeError, "Reader: key is a tuple of indices or None");
    }
    if (offset != Py_None && !PyUnicode_CheckExact(offset)) {
        return PyErr_Format(PyExc_TypeError, "Reader: offset is a method's name or None");
    }
    Py_ssize_t count = PyTuple_GET_SIZE(parts);
    if (count == 0 || PyBytes_GET_SIZE(expected) != count * (Py_ssize_t)sizeof(dl_expected_t)) {
        return PyErr_Format(PyExc_ValueError, "Reader: one expectation and key part per array");
    }
    Reader *self = (Reader *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->count = count;
    self->runs = PyTuple_GET_SIZE(runs);
    if (offset != Py_None) {
        self->offset = Py_NewRef(offset);
        PyUnicode_InternInPlace(&self->offset);
    }
    self->arrays = PyMem_Calloc((size_t)count, sizeof(reader_array_t));
    self->run_fields = PyMem_Calloc((size_t)self->runs + 1, sizeof(Py_ssize_t));
    self->fields = PyMem_Calloc((size_t)self->runs + 1, sizeof(PyObject *));
    if (self->arrays == NULL || self->run_fields == NULL || self->fields == NULL ||
        reader_arrays(self, (const dl_expected_t *)PyBytes_AS_STRING(expected), parts) < 0 ||
        reader_key(self, key) < 0 ||
        reader_source(self, source) < 0 || reader_runs(self, runs) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* The objects a reader_array_t holds (reader_traverse, reader_clear). */
#define ARRAY_OBJECTS(a) \
    {&(a)->parts, &(a)->part, &(a)->dtype, &(a)->token, &(a)->seen, &(a)->allocation}

static int reader_traverse(Reader *self, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; self->arrays != NULL && i < self->count; i++) {
        PyObject **held[] = ARRAY_OBJECTS(&self->arrays[i]);
        for (size_t o = 0; o < sizeof held / sizeof *held; o++) Py_VISIT(*held[o]);
    }
    for (Py_ssize_t r = 0; self->fields != NULL && r < self->runs; r++) {
        Py_VISIT(self->fields[r]);
    }
    Py_VISIT(self->current_stream);
    Py_VISIT(self->make_memo);
    Py_VISIT(self->shapes);
    for (int g = 0; g < GETTERS_COUNT; g++) Py_VISIT(self->getters[g].type);
    return 0;
}

static int reader_clear(Reader *self) {
    for (Py_ssize_t i = 0; self->arrays != NULL && i < self->count; i++) {
        PyObject **held[] = ARRAY_OBJECTS(&self->arrays[i]);
        for (size_t o = 0; o < sizeof held / sizeof *held; o++) Py_CLEAR(*held[o]);
    }
    for (Py_ssize_t r = 0; self->fields != NULL && r < self->runs; r++) {
        Py_CLEAR(self->fields[r]);
    }
    Py_CLEAR(self->current_stream);
    Py_CLEAR(self->offset);
    Py_CLEAR(self->memo);
    Py_CLEAR(self->make_memo);
    Py_CLEAR(self->shapes);
    for (int n = 0; n < NAME_COUNT; n++) Py_CLEAR(self->names[n]);
    for (int g = 0; g < GETTERS_COUNT; g++) Py_CLEAR(self->getters[g].type);
    return 0;
}

static void reader_dealloc(Reader *self) {
    PyObject_GC_UnTrack(self);
    reader_clear(self);
    PyMem_Free(self->arrays);
    PyMem_Free(self->run_fields);
    PyMem_Free(self->key_items);
    PyMem_Free(self->fields);
    PyMem_Free(self->extents);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef reader_methods[] = {
    {"read", (PyCFunction)(void (*)(void))reader_read, METH_FASTCALL,
     "read(arrays[, allocations]) -> (current stream, key, run, run, ..., allocations) or None"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef reader_getset[] = {
    {"shapes", (getter)reader_shapes, NULL, "the extents of the last read's arrays", NULL},
    {NULL},
};

static PyTypeObject reader_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "numbatune._native.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Reader(source, expected, parts, runs): a fast path's arrays of one library, read "
              "through DLPack or by attribute.",
    .tp_new = reader_new,
    .tp_traverse = (traverseproc)reader_traverse,
    .tp_clear = (inquiry)reader_clear,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_methods = reader_methods,
    .tp_getset = reader_getset,
};

/* Packer(pack): ``pack(*values)`` (a struct's pack), giving the last call's bytes again where
 * each value is the same object as in the last call. A hit's values mostly are: the C reads
 * hand out the last read's bytes where equal, and a caller's scalars are often the same
 * objects (constants, a shape's extents). The values the fast paths pack are immutable (their
 * classes are checked exactly: ints, floats, bools, NumPy scalars, bytes), so the same object
 * packs to the same bytes. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *pack;
    PyObject *last; /* (bytes, value, value, ...) of the last call, or NULL */
} Packer;

static PyObject *packer_call(Packer *self, PyObject *const *args, size_t nargsf,
                             PyObject *kwnames) {
    Py_ssize_t count = PyVectorcall_NARGS(nargsf);
    PyObject *last = self->last;
    if (kwnames == NULL && last != NULL && PyTuple_GET_SIZE(last) == count + 1) {
        Py_ssize_t i = 0;
        while (i < count && PyTuple_GET_ITEM(last, i + 1) == args[i]) i++;
        if (i == count) return Py_NewRef(PyTuple_GET_ITEM(last, 0));
    }
    PyObject *packed = PyObject_Vectorcall(self->pack, args, nargsf, kwnames);
    if (packed == NULL || kwnames != NULL) return packed;
    PyObject *kept = PyTuple_New(count + 1);
    if (kept == NULL) {
        Py_DECREF(packed);
        return NULL;
    }
    PyTuple_SET_ITEM(kept, 0, Py_NewRef(packed));
    for (Py_ssize_t i = 0; i < count; i++) PyTuple_SET_ITEM(kept, i + 1, Py_NewRef(args[i]));
    Py_XSETREF(self->last, kept); /* (whole before the old one goes, which may run code) */
    return packed;
}

static PyObject *packer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *pack;
    if (!PyArg_ParseTuple(args, "O:Packer", &pack)) return NULL;
    if (!PyCallable_Check(pack)) {
        return PyErr_Format(PyExc_TypeError, "Packer(pack): pack is callable");
    }
    Packer *self = (Packer *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = (vectorcallfunc)packer_call;
    self->pack = Py_NewRef(pack);
    self->last = NULL;
    return (PyObject *)self;
}

static int packer_traverse(Packer *self, visitproc visit, void *arg) {
    Py_VISIT(self->pack);
    Py_VISIT(self->last);
    return 0;
}

static int packer_clear(Packer *self) {
    Py_CLEAR(self->pack);
    Py_CLEAR(self->last);
    return 0;
}

static void packer_dealloc(Packer *self) {
    PyObject_GC_UnTrack(self);
    packer_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject packer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "numbatune._native.Packer",
    .tp_basicsize = sizeof(Packer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Packer(pack): pack(*values), the last bytes again for the same values.",
    .tp_vectorcall_offset = offsetof(Packer, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = packer_new,
    .tp_traverse = (traverseproc)packer_traverse,
    .tp_clear = (inquiry)packer_clear,
    .tp_dealloc = (destructor)packer_dealloc,
};

/* Called: the base of a tuned kernel, whose call ``kernel(*args, stream=None)`` hands ``(args,
 * stream)`` to the ``entry`` of its ``_binder`` (numbatune.binder.Called says what it does),
 * with no Python frame between. */
typedef struct {
    PyObject_HEAD
    PyObject *binder;
} Called;

static PyObject *entry_name = NULL, *stream_name = NULL; /* "entry", "stream" */

static PyObject *called_call(Called *self, PyObject *args, PyObject *kwargs) {
    PyObject *stream = Py_None;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        Py_ssize_t position = 0;
        PyObject *name, *value;
        while (PyDict_Next(kwargs, &position, &name, &value)) {
            int is_stream = PyUnicode_Check(name) ? PyUnicode_Compare(name, stream_name) == 0 : 0;
            if (!is_stream) {
                PyErr_Format(PyExc_TypeError,
                             "%.200s() got an unexpected keyword argument '%S' (a tuned kernel "
                             "takes its kernel's arguments and stream=)",
                             Py_TYPE(self)->tp_name, name);
                return NULL;
            }
            stream = value;
        }
    }
    if (self->binder == NULL) {
        PyErr_Format(PyExc_TypeError, "%.200s was not made by numbatune.autotune",
                     Py_TYPE(self)->tp_name);
        return NULL;
    }
    PyObject *entry = PyObject_GetAttr(self->binder, entry_name);
    if (entry == NULL) return NULL;
    PyObject *call[2] = {args, stream};
    PyObject *result = PyObject_Vectorcall(entry, call, 2, NULL);
    Py_DECREF(entry);
    if (result == NULL) return NULL;
    Py_DECREF(result);
    Py_RETURN_NONE;
}

/* (a tuned kernel's class, a heap type, visits and releases itself: subtype_traverse and
 * subtype_dealloc do, for subclasses of a static type) */
static int called_traverse(Called *self, visitproc visit, void *arg) {
    Py_VISIT(self->binder);
    return 0;
}

static int called_clear(Called *self) {
    Py_CLEAR(self->binder);
    return 0;
}

static void called_dealloc(Called *self) {
    PyObject_GC_UnTrack(self);
    called_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef called_members[] = {
    {"_binder", T_OBJECT, offsetof(Called, binder), 0, "the kernel's binder"},
    {NULL},
};

static PyTypeObject called_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "numbatune._native.Called",
    .tp_basicsize = sizeof(Called),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The base of a tuned kernel: calling it calls its binder's entry.",
    .tp_call = (ternaryfunc)called_call,
    .tp_new = PyType_GenericNew,
    .tp_members = called_members,
    .tp_traverse = (traverseproc)called_traverse,
    .tp_clear = (inquiry)called_clear,
    .tp_dealloc = (destructor)called_dealloc,
};

/* describe(api, array) -> (device type, device id, ndim, type code, bits, lanes), or None
 * where the library cannot describe the array. */
static PyObject *describe(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) return PyErr_Format(PyExc_TypeError, "describe(api, array)");
    dl_exchange_api_t *api = api_of(args[0]);
    if (api == NULL) return NULL;
    dl_tensor_t t;
    if (api->dltensor_from_py_object_no_sync(args[1], &t) != 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(iiiiii)", t.device.device_type, t.device.device_id, t.ndim,
                         t.dtype.code, t.dtype.bits, t.dtype.lanes);
}

static PyMethodDef methods[] = {
    {"key_part", key_part, METH_O, "key_part((shape, dtype, layout)) -> the default key's part"},
    {"default_key", (PyCFunction)(void (*)(void))default_key, METH_FASTCALL,
     "default_key(values, reads, flags) -> the default key of the arguments so read"},
    {"dlpack_api", dlpack_api, METH_O, "dlpack_api(cls) -> address of its DLPack C API, or 0"},
    {"describe", (PyCFunction)(void (*)(void))describe, METH_FASTCALL,
     "describe(api, array) -> (device type, device id, ndim, code, bits, lanes) or None"},
    {"same_classes", (PyCFunction)(void (*)(void))same_classes, METH_FASTCALL,
     "same_classes(args, classes) -> whether each value is of exactly its class"},
    {"record", (PyCFunction)(void (*)(void))native_record, METH_FASTCALL,
     "record(event, stream): cuEventRecord, raising CudaAPIError on a failure"},
    {"wait", (PyCFunction)(void (*)(void))native_wait, METH_FASTCALL,
     "wait(stream, event): cuStreamWaitEvent, raising CudaAPIError on a failure"},
    {"query", (PyCFunction)(void (*)(void))query, METH_FASTCALL, "query(event) -> CUresult"},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
     "launch(function, (grid, block[, shared]), stream, parameters, offsets, context, "
     "cooperative) -> CUresult"},
    {NULL, NULL, 0, NULL},
};

/* Why the driver calls cannot be made (NULL when they can). */
static const char *load_driver(void) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (driver == NULL) return "cannot load libcuda.so.1";
    launch_kernel = (launch_kernel_t)dlsym(driver, "cuLaunchKernel");
    launch_cooperative = (launch_cooperative_t)dlsym(driver, "cuLaunchCooperativeKernel");
    get_current_context = (get_current_context_t)dlsym(driver, "cuCtxGetCurrent");
    event_record = (event_record_t)dlsym(driver, "cuEventRecord");
    stream_wait_event = (stream_wait_event_t)dlsym(driver, "cuStreamWaitEvent");
    event_query = (event_query_t)dlsym(driver, "cuEventQuery");
    stream_is_capturing = (stream_is_capturing_t)dlsym(driver, "cuStreamIsCapturing");
    if (launch_kernel == NULL || launch_cooperative == NULL || get_current_context == NULL ||
        event_record == NULL || stream_wait_event == NULL || event_query == NULL) {
        return "libcuda.so.1 lacks cuLaunchKernel, cuLaunchCooperativeKernel, cuCtxGetCurrent, "
               "cuEventRecord, cuStreamWaitEvent or cuEventQuery";
    }
    return NULL;
}

int add_native(PyObject *module) {
    driver_error = load_driver();
    return PyModule_AddFunctions(module, methods) < 0 ||
                   (driver_error ? PyModule_AddStringConstant(module, "DRIVER_ERROR", driver_error)
                                 : PyModule_AddObjectRef(module, "DRIVER_ERROR", Py_None)) < 0 ||
                   (parts_made = PyDict_New()) == NULL || PyType_Ready(&reader_type) < 0 ||
                   PyModule_AddObjectRef(module, "Reader", (PyObject *)&reader_type) < 0 ||
                   PyType_Ready(&packer_type) < 0 ||
                   PyModule_AddObjectRef(module, "Packer", (PyObject *)&packer_type) < 0 ||
                   (entry_name = PyUnicode_InternFromString("entry")) == NULL ||
                   (stream_name = PyUnicode_InternFromString("stream")) == NULL ||
                   PyType_Ready(&called_type) < 0 ||
                   PyModule_AddObjectRef(module, "Called", (PyObject *)&called_type) < 0
               ? -1
               : 0;
}
