/* cuLaunchKernel called from Python with as little in between as possible.
 *
 * Compiled on first use by numbatune/native.py (as Triton compiles its launchers). The
 * kernel's parameters arrive packed in one bytes object, with the byte offset of each parameter
 * in another; the driver copies them during the call, so nothing is shared between calls or
 * threads. The driver is found at run time, so no CUDA header or library is needed to build.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>

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
typedef int (*event_record_t)(void *event, void *stream);
typedef int (*stream_wait_event_t)(void *stream, void *event, unsigned flags);
typedef int (*event_query_t)(void *event);

static launch_kernel_t launch_kernel = NULL;
static launch_cooperative_t launch_cooperative = NULL;
static get_current_context_t get_current_context = NULL;
static event_record_t event_record = NULL;
static stream_wait_event_t stream_wait_event = NULL;
static event_query_t event_query = NULL;

/* Returned instead of a CUresult (which are never negative). */
#define WRONG_CONTEXT -1 /* the thread's current context is not the function's */
#define EMPTY_LAUNCH -2  /* a grid or block dimension is 0 */

static int unsigned_of(PyObject *value, unsigned *out) {
    unsigned long result;
    if (PyLong_Check(value)) {
        result = PyLong_AsUnsignedLong(value);
    } else {
        PyObject *index = PyNumber_Index(value);
        if (index == NULL) return -1;
        result = PyLong_AsUnsignedLong(index);
        Py_DECREF(index);
    }
    if (result == (unsigned long)-1 && PyErr_Occurred()) return -1;
    if (result > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_OverflowError, "launch dimension does not fit in 32 bits");
        return -1;
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
            PyErr_SetString(PyExc_ValueError, "grid and block take 1 to 3 dimensions");
            return -1;
        }
        for (Py_ssize_t i = 0; i < count; i++) {
            if (unsigned_of(items[i], &out[i]) < 0) return -1;
        }
        return 0;
    }
    return unsigned_of(value, &out[0]);
}

/* launch(function, config, stream, parameters, offsets, context, cooperative) -> CUresult,
 * where config is (grid, block) or (grid, block, shared_bytes), context the function's
 * CUcontext and cooperative true for a kernel that synchronises its grid; WRONG_CONTEXT or
 * EMPTY_LAUNCH, launching nothing, where those hold. */
static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    unsigned grid[3], block[3], shared = 0;
    void *pointers[MAX_PARAMETERS];
    if (nargs != 7 || !(PyTuple_Check(args[1]) || PyList_Check(args[1])) ||
        !PyBytes_Check(args[3]) || !PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "launch(function, (grid, block[, shared]), stream, parameters: bytes, "
                        "offsets: bytes, context, cooperative)");
        return NULL;
    }
    void *expected = PyLong_AsVoidPtr(args[5]);
    if (expected == NULL && PyErr_Occurred()) return NULL;
    void *current = NULL;
    if (get_current_context(&current) != 0 || current != expected) {
        return PyLong_FromLong(WRONG_CONTEXT);
    }
    Py_ssize_t config_size = PySequence_Fast_GET_SIZE(args[1]);
    PyObject **config = PySequence_Fast_ITEMS(args[1]);
    if (config_size != 2 && config_size != 3) {
        PyErr_SetString(PyExc_ValueError, "a launch configuration is (grid, block[, shared])");
        return NULL;
    }
    if (dim3_of(config[0], grid) < 0 || dim3_of(config[1], block) < 0) return NULL;
    if (config_size == 3 && unsigned_of(config[2], &shared) < 0) return NULL;
    for (int i = 0; i < 3; i++) {
        if (grid[i] == 0 || block[i] == 0) return PyLong_FromLong(EMPTY_LAUNCH);
    }
    void *function = PyLong_AsVoidPtr(args[0]);
    if (function == NULL && PyErr_Occurred()) return NULL;
    void *stream = PyLong_AsVoidPtr(args[2]);
    if (stream == NULL && PyErr_Occurred()) return NULL;
    char *data = PyBytes_AS_STRING(args[3]);
    const int64_t *offsets = (const int64_t *)PyBytes_AS_STRING(args[4]);
    Py_ssize_t count = PyBytes_GET_SIZE(args[4]) / (Py_ssize_t)sizeof(int64_t);
    if (count > MAX_PARAMETERS) {
        PyErr_SetString(PyExc_ValueError, "too many kernel parameters");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) pointers[i] = data + offsets[i];
    int cooperative = PyObject_IsTrue(args[6]);
    if (cooperative < 0) return NULL;
    int result = cooperative
                     ? launch_cooperative(function, grid[0], grid[1], grid[2], block[0],
                                          block[1], block[2], shared, stream,
                                          count ? pointers : NULL)
                     : launch_kernel(function, grid[0], grid[1], grid[2], block[0], block[1],
                                     block[2], shared, stream, count ? pointers : NULL, NULL);
    return PyLong_FromLong(result);
}

/* Two handles from Python ints. */
static int two_pointers(PyObject *const *args, Py_ssize_t nargs, void **a, void **b) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "expected two handles");
        return -1;
    }
    *a = PyLong_AsVoidPtr(args[0]);
    if (*a == NULL && PyErr_Occurred()) return -1;
    *b = PyLong_AsVoidPtr(args[1]);
    if (*b == NULL && PyErr_Occurred()) return -1;
    return 0;
}

/* record(event, stream) -> CUresult: cuEventRecord. */
static PyObject *record(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *event, *stream;
    if (two_pointers(args, nargs, &event, &stream) < 0) return NULL;
    return PyLong_FromLong(event_record(event, stream));
}

/* wait(stream, event) -> CUresult: cuStreamWaitEvent with no flags. */
static PyObject *wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    void *stream, *event;
    if (two_pointers(args, nargs, &stream, &event) < 0) return NULL;
    return PyLong_FromLong(stream_wait_event(stream, event, 0));
}

/* query(event) -> CUresult: cuEventQuery (0 once the device passed it, 600 before). */
static PyObject *query(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "query(event)");
        return NULL;
    }
    void *event = PyLong_AsVoidPtr(args[0]);
    if (event == NULL && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(event_query(event));
}

static PyMethodDef methods[] = {
    {"record", (PyCFunction)(void (*)(void))record, METH_FASTCALL,
     "record(event, stream) -> CUresult"},
    {"wait", (PyCFunction)(void (*)(void))wait, METH_FASTCALL, "wait(stream, event) -> CUresult"},
    {"query", (PyCFunction)(void (*)(void))query, METH_FASTCALL, "query(event) -> CUresult"},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
     "launch(function, (grid, block[, shared]), stream, parameters, offsets, context, "
     "cooperative) -> CUresult"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_numbatune_launch", NULL, -1,
                                    methods};

PyMODINIT_FUNC PyInit__numbatune_launch(void) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (driver == NULL) {
        PyErr_Format(PyExc_ImportError, "cannot load libcuda.so.1: %s", dlerror());
        return NULL;
    }
    launch_kernel = (launch_kernel_t)dlsym(driver, "cuLaunchKernel");
    if (launch_kernel == NULL) {
        PyErr_SetString(PyExc_ImportError, "libcuda.so.1 has no cuLaunchKernel");
        return NULL;
    }
    launch_cooperative = (launch_cooperative_t)dlsym(driver, "cuLaunchCooperativeKernel");
    get_current_context = (get_current_context_t)dlsym(driver, "cuCtxGetCurrent");
    event_record = (event_record_t)dlsym(driver, "cuEventRecord");
    stream_wait_event = (stream_wait_event_t)dlsym(driver, "cuStreamWaitEvent");
    event_query = (event_query_t)dlsym(driver, "cuEventQuery");
    if (launch_cooperative == NULL || get_current_context == NULL || event_record == NULL ||
        stream_wait_event == NULL || event_query == NULL) {
        PyErr_SetString(PyExc_ImportError,
                        "libcuda.so.1 lacks cuLaunchCooperativeKernel, cuCtxGetCurrent, "
                        "cuEventRecord, cuStreamWaitEvent or cuEventQuery");
        return NULL;
    }
    return PyModule_Create(&module);
}
