/*
 * annal.storage._encoder: the records section of a v2 batch, encoded in one
 * call without a Python object per record.
 *
 * encode_section(keys, values, timestamp_deltas) takes two sequences of
 * bytes-or-None of one length and the records' timestamp deltas (a sequence
 * of ints, or None for all 0) and returns the section's bytes: per record its
 * length, attributes 0, timestamp delta, offset delta (the record's index),
 * key, value and a header count of 0, in Kafka's zig-zag varints.  A key or
 * value that is neither bytes nor None returns NotImplemented: the caller
 * encodes that batch in Python (annal/storage/records.py, whose output this
 * matches byte for byte; a property test checks it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline uint64_t zigzag(int64_t n)
{
    return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
}

static inline Py_ssize_t varint_size(int64_t n)
{
    uint64_t z = zigzag(n);
    Py_ssize_t size = 1;
    while (z >= 0x80) {
        z >>= 7;
        size++;
    }
    return size;
}

static inline char *put_varint(char *out, int64_t n)
{
    uint64_t z = zigzag(n);
    while (z >= 0x80) {
        *out++ = (char)(z | 0x80);
        z >>= 7;
    }
    *out++ = (char)z;
    return out;
}

/* The length of a key or value: -1 for None, -2 for anything but bytes. */
static inline Py_ssize_t field_length(PyObject *item)
{
    if (item == Py_None) return -1;
    if (!PyBytes_CheckExact(item)) return -2;
    return PyBytes_GET_SIZE(item);
}

static PyObject *encode_section(PyObject *self, PyObject *args)
{
    PyObject *keys_in, *values_in, *deltas_in;
    if (!PyArg_ParseTuple(args, "OOO", &keys_in, &values_in, &deltas_in)) return NULL;
    PyObject *keys = PySequence_Fast(keys_in, "keys must be a sequence");
    PyObject *values = keys ? PySequence_Fast(values_in, "values must be a sequence") : NULL;
    PyObject *deltas = NULL;
    PyObject *out = NULL;
    int64_t *ts = NULL;
    if (values == NULL) goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(values);
    if (PySequence_Fast_GET_SIZE(keys) != n) {
        PyErr_Format(PyExc_ValueError, "%zd keys for %zd values", PySequence_Fast_GET_SIZE(keys), n);
        goto done;
    }
    if (n > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many records for one batch");
        goto done;
    }
    ts = PyMem_Calloc((size_t)(n ? n : 1), sizeof(int64_t));
    if (ts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (deltas_in != Py_None) {
        deltas = PySequence_Fast(deltas_in, "timestamp deltas must be a sequence");
        if (deltas == NULL) goto done;
        if (PySequence_Fast_GET_SIZE(deltas) != n) {
            PyErr_Format(PyExc_ValueError, "%zd timestamp deltas for %zd values",
                         PySequence_Fast_GET_SIZE(deltas), n);
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            ts[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(deltas, i));
            if (ts[i] == -1 && PyErr_Occurred()) goto done;
        }
    }
    PyObject **key_items = PySequence_Fast_ITEMS(keys);
    PyObject **value_items = PySequence_Fast_ITEMS(values);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t kl = field_length(key_items[i]), vl = field_length(value_items[i]);
        if (kl < -1 || vl < -1) {
            out = Py_NewRef(Py_NotImplemented);
            goto done;
        }
        Py_ssize_t body = 2 + varint_size(ts[i]) + varint_size(i) + varint_size(kl)
                          + (kl > 0 ? kl : 0) + varint_size(vl) + (vl > 0 ? vl : 0);
        if (body > INT32_MAX || total > PY_SSIZE_T_MAX - body - 5) {
            PyErr_SetString(PyExc_OverflowError, "records too large for one batch");
            goto done;
        }
        total += varint_size(body) + body;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) goto done;
    char *p = PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t kl = field_length(key_items[i]), vl = field_length(value_items[i]);
        Py_ssize_t body = 2 + varint_size(ts[i]) + varint_size(i) + varint_size(kl)
                          + (kl > 0 ? kl : 0) + varint_size(vl) + (vl > 0 ? vl : 0);
        p = put_varint(p, body);
        *p++ = 0; /* attributes */
        p = put_varint(p, ts[i]);
        p = put_varint(p, i);
        p = put_varint(p, kl);
        if (kl > 0) {
            memcpy(p, PyBytes_AS_STRING(key_items[i]), (size_t)kl);
            p += kl;
        }
        p = put_varint(p, vl);
        if (vl > 0) {
            memcpy(p, PyBytes_AS_STRING(value_items[i]), (size_t)vl);
            p += vl;
        }
        *p++ = 0; /* no headers */
    }
done:
    PyMem_Free(ts);
    Py_XDECREF(deltas);
    Py_XDECREF(values);
    Py_XDECREF(keys);
    return out;
}

static PyMethodDef methods[] = {
    {"encode_section", encode_section, METH_VARARGS,
     "encode_section(keys, values, timestamp_deltas) -> the records section of a v2 batch "
     "(or NotImplemented for keys or values that are not bytes); see "
     "annal.storage.records."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_encoder",
    "The records section of a v2 batch, encoded in one call (see annal.storage.records).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__encoder(void)
{
    return PyModule_Create(&module);
}
