/* The extension module numbatune._native, made of what each of its files adds (_native.h). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_native.h"

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "numbatune._native", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *made = PyModule_Create(&module);
    if (made != NULL &&
        (add_native(made) < 0 || add_order_type(made) < 0 || add_launcher_type(made) < 0)) {
        Py_CLEAR(made);
    }
    return made;
}
