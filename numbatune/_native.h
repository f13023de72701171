/* What the extension's files share (_native.c, _order.c, _launcher.c, _module.c): the driver's
 * event calls, which _native.c loads and _order.c calls where an order's events are the
 * module's, the order's calls the launcher makes, and what each file adds to the module. */
#ifndef NUMBATUNE_NATIVE_H
#define NUMBATUNE_NATIVE_H

#include <Python.h>

typedef int (*event_record_t)(void *event, void *stream);
typedef int (*stream_wait_event_t)(void *stream, void *event, unsigned flags);
typedef int (*stream_is_capturing_t)(void *stream, int *status);

/* cuEventRecord, cuStreamWaitEvent and cuStreamIsCapturing (NULL where the driver is not
 * loaded, or, the last, lacks it). */
extern event_record_t event_record;
extern stream_wait_event_t stream_wait_event;
extern stream_is_capturing_t stream_is_capturing;

/* The module's record(event, stream) and wait(stream, event): events whose record and
 * wait_event are these are the driver's, which an order calls directly. */
PyObject *native_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *native_wait(PyObject *self, PyObject *const *args, Py_ssize_t nargs);

/* Add to the extension module (_module.c) what each file makes: 0, or -1 with an exception.
 * _native.c: the driver's calls, the array reads, the packer, Called. */
int add_native(PyObject *module);

/* Adds the Order type to the extension module: 0, or -1 with an exception. */
int add_order_type(PyObject *module);

/* An Order's before(), after(), hold() and apart() (_order.c documents them), called by the
 * Launcher directly; its ``stream`` (borrowed); whether a value is an Order. */
PyObject *order_before(PyObject *order, PyObject *const *args, Py_ssize_t nargs);
PyObject *order_after(PyObject *order, PyObject *const *args, Py_ssize_t nargs);
PyObject *order_hold(PyObject *order, PyObject *const *args, Py_ssize_t nargs);
PyObject *order_apart(PyObject *order, PyObject *const *args, Py_ssize_t nargs);
PyObject *order_stream(PyObject *order);
int is_order(PyObject *value);

/* Adds the Launcher type (_launcher.c) to the extension module: 0, or -1 with an exception. */
int add_launcher_type(PyObject *module);

#endif
