/*
 * annal.storage._columns: fetched records as Arrow-layout column buffers.
 *
 * decode(sections, start, end, with_headers) walks the records sections of
 * v2 batches (inflated when compressed) and returns the records with offsets
 * in [start, end) column by column, without a Python object per record:
 *
 *     (count, offsets, timestamps_us, timestamp_types,
 *      keys, values, headers)
 *
 * ``sections`` is a sequence of (section, record_count, base_offset,
 * first_timestamp, timestamp_type, max_timestamp) tuples, one per batch.
 * offsets and timestamps_us are int64 buffers, timestamp_types int32 (native
 * byte order, as Arrow lays them out).  keys and values are binary columns
 * (validity bitmap or None when nothing is null, null count, int32 offsets,
 * data).  headers is None unless with_headers; then it is (list offsets,
 * key offsets, key data, value validity or None, value null count, value
 * offsets, value data, header count).  A LogAppendTime batch's records all
 * take its max_timestamp.  A record that does not parse raises
 * ValueError(batch index, byte of its records section, reason).  annal/storage/columns.py has the
 * pure-Python twin; the two agree on every valid input.
 */
#include "_readers.h"
#include <string.h>

/* A bytes object filled in place: made at its expected size, grown if it
 * must be, cut to what was written at the end (no copy on the way out). */
typedef struct {
    PyObject *bytes;
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} growable;

static int reserve(growable *g, Py_ssize_t cap)
{
    if (cap < 64) cap = 64;
    if (g->bytes == NULL) {
        g->bytes = PyBytes_FromStringAndSize(NULL, cap);
    } else if (_PyBytes_Resize(&g->bytes, cap) < 0) {
        g->bytes = NULL;
    }
    if (g->bytes == NULL) return -1;
    g->data = PyBytes_AS_STRING(g->bytes);
    g->cap = cap;
    return 0;
}

static inline int put(growable *g, const void *src, Py_ssize_t n)
{
    if (g->len + n > g->cap) {
        Py_ssize_t cap = g->cap * 2;
        while (cap < g->len + n) cap *= 2;
        if (reserve(g, cap) < 0) return -1;
    }
    if (n) memcpy(g->data + g->len, src, (size_t)n);
    g->len += n;
    return 0;
}

/* The bytes written, handed over (the growable is empty after). */
static PyObject *to_bytes(growable *g)
{
    if (g->bytes == NULL && reserve(g, 64) < 0) return NULL;
    if (_PyBytes_Resize(&g->bytes, g->len) < 0) {
        g->bytes = NULL;
        return NULL;
    }
    PyObject *out = g->bytes;
    g->bytes = NULL;
    g->data = NULL;
    g->len = g->cap = 0;
    return out;
}

static void release(growable *g)
{
    Py_CLEAR(g->bytes);
}

/* A variable-length column: validity bits, int32 offsets and the bytes. */
typedef struct {
    growable validity;
    growable offsets;
    growable data;
    Py_ssize_t count;
    Py_ssize_t nulls;
} binary_column;

/* An empty column sized for ``count`` values of ``bytes`` bytes in all. */
static int binary_init(binary_column *b, Py_ssize_t count, Py_ssize_t bytes)
{
    memset(b, 0, sizeof(*b));
    int32_t zero = 0;
    if (reserve(&b->validity, count / 8 + 1) < 0 || reserve(&b->offsets, (count + 1) * 4) < 0
        || reserve(&b->data, bytes) < 0) {
        return -1;
    }
    return put(&b->offsets, &zero, 4);
}

/* Append one value; length -1 is null. */
static int binary_append(binary_column *b, const unsigned char *src, int64_t length)
{
    if (b->count % 8 == 0) {
        unsigned char none = 0;
        if (put(&b->validity, &none, 1) < 0) return -1;
    }
    if (length < 0) {
        b->nulls++;
    } else {
        b->validity.data[b->count / 8] |= (unsigned char)(1u << (b->count % 8));
        if (b->data.len + length > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of bytes in one column");
            return -1;
        }
        if (put(&b->data, src, (Py_ssize_t)length) < 0) return -1;
    }
    int32_t end = (int32_t)b->data.len;
    b->count++;
    return put(&b->offsets, &end, 4);
}

static void binary_free(binary_column *b)
{
    release(&b->validity);
    release(&b->offsets);
    release(&b->data);
}

/* (validity or None, null count, offsets, data) */
static PyObject *binary_result(binary_column *b)
{
    PyObject *validity;
    if (b->nulls) {
        validity = to_bytes(&b->validity);
        if (validity == NULL) return NULL;
    } else {
        validity = Py_NewRef(Py_None);
    }
    PyObject *offsets = to_bytes(&b->offsets);
    PyObject *data = to_bytes(&b->data);
    if (offsets == NULL || data == NULL) {
        Py_DECREF(validity);
        Py_XDECREF(offsets);
        Py_XDECREF(data);
        return NULL;
    }
    return Py_BuildValue("(NnNN)", validity, b->nulls, offsets, data);
}

typedef struct {
    growable offsets, timestamps, types, header_lists;
    binary_column keys, values, header_keys, header_values;
    Py_ssize_t count;
    int with_headers;
} columns;

/* Columns sized for at most ``count`` records in ``bytes`` bytes of sections;
 * the headers' columns start small and grow. */
static int columns_init(columns *cs, int with_headers, Py_ssize_t count, Py_ssize_t bytes)
{
    memset(cs, 0, sizeof(*cs));
    cs->with_headers = with_headers;
    int32_t zero = 0;
    if (reserve(&cs->offsets, count * 8) < 0 || reserve(&cs->timestamps, count * 8) < 0
        || reserve(&cs->types, count * 4) < 0 || binary_init(&cs->keys, count, bytes) < 0
        || binary_init(&cs->values, count, bytes) < 0
        || binary_init(&cs->header_keys, 0, 0) < 0 || binary_init(&cs->header_values, 0, 0) < 0
        || reserve(&cs->header_lists, with_headers ? (count + 1) * 4 : 4) < 0) {
        return -1;
    }
    return put(&cs->header_lists, &zero, 4);
}

static void columns_free(columns *cs)
{
    release(&cs->offsets);
    release(&cs->timestamps);
    release(&cs->types);
    release(&cs->header_lists);
    binary_free(&cs->keys);
    binary_free(&cs->values);
    binary_free(&cs->header_keys);
    binary_free(&cs->header_values);
}

/* Raise ValueError(batch index, byte of its records section, reason). */
static int fault(Py_ssize_t batch, int64_t record, Py_ssize_t position, const char *what)
{
    PyObject *reason = PyUnicode_FromFormat("record %lld: %s", (long long)record, what);
    if (reason == NULL) return -1;
    PyObject *args = Py_BuildValue("(nnN)", batch, position, reason);
    if (args != NULL) {
        PyErr_SetObject(PyExc_ValueError, args);
        Py_DECREF(args);
    }
    return -1;
}

/* A length field of a record: -1 (null, when nullable) or bytes that fit. */
static int64_t read_length(cursor *c, Py_ssize_t record_end, int nullable)
{
    int64_t length = read_varint(c, record_end, 5);
    if (c->reason) return -2;
    if (length < (nullable ? -1 : 0) || length > record_end - c->pos) return -2;
    return length;
}

/* Walk one batch's records section, appending the records in [start, end). */
static int walk_section(columns *cs, Py_ssize_t batch, const unsigned char *buf,
                        Py_ssize_t size, int64_t count, int64_t base_offset, int64_t first_ts,
                        int32_t ts_type, int64_t max_ts, int64_t start, int64_t end)
{
    cursor c = {buf, 0, 0, 0};
    for (int64_t i = 0; i < count; i++) {
        Py_ssize_t record_start = c.pos;
        int64_t length = read_varint(&c, size, 5);
        if (c.reason) return fault(batch, i, c.fault_pos, "bad record length varint");
        if (length < 6 || length > size - c.pos) {
            return fault(batch, i, record_start, "record length does not fit the batch");
        }
        const Py_ssize_t record_end = c.pos + (Py_ssize_t)length;
        c.pos += 1; /* attributes */
        int64_t ts_delta = read_varint(&c, record_end, 10);
        int64_t offset_delta = c.reason ? 0 : read_varint(&c, record_end, 5);
        if (c.reason) return fault(batch, i, c.fault_pos, "bad timestamp or offset delta");
        Py_ssize_t field = c.pos;
        int64_t key_length = read_length(&c, record_end, 1);
        if (key_length < -1) return fault(batch, i, field, "key length does not fit the record");
        const unsigned char *key = buf + c.pos;
        if (key_length > 0) c.pos += (Py_ssize_t)key_length;
        field = c.pos;
        int64_t value_length = read_length(&c, record_end, 1);
        if (value_length < -1) {
            return fault(batch, i, field, "value length does not fit the record");
        }
        const unsigned char *value = buf + c.pos;
        if (value_length > 0) c.pos += (Py_ssize_t)value_length;
        field = c.pos;
        int64_t header_count = read_varint(&c, record_end, 5);
        if (c.reason || header_count < 0) return fault(batch, i, field, "bad header count");
        int64_t offset = base_offset + offset_delta;
        int keep = offset >= start && offset < end;
        for (int64_t h = 0; h < header_count; h++) {
            field = c.pos;
            int64_t hk = read_length(&c, record_end, 0);
            if (hk < 0) return fault(batch, i, field, "header key length does not fit the record");
            const unsigned char *header_key = buf + c.pos;
            if (!valid_utf8(header_key, (Py_ssize_t)hk)) {
                return fault(batch, i, c.pos, "header key is not UTF-8");
            }
            c.pos += (Py_ssize_t)hk;
            field = c.pos;
            int64_t hv = read_length(&c, record_end, 1);
            if (hv < -1) return fault(batch, i, field, "header value length does not fit the record");
            const unsigned char *header_value = buf + c.pos;
            if (hv > 0) c.pos += (Py_ssize_t)hv;
            if (keep && cs->with_headers
                && (binary_append(&cs->header_keys, header_key, hk) < 0
                    || binary_append(&cs->header_values, header_value, hv) < 0)) {
                return -1;
            }
        }
        if (c.pos != record_end) {
            return fault(batch, i, record_start, "the record's fields do not add up to its length");
        }
        if (!keep) continue;
        int64_t ts = ts_type ? max_ts : (int64_t)((uint64_t)first_ts + (uint64_t)ts_delta);
        int64_t micros = (int64_t)((uint64_t)ts * 1000u);
        if (put(&cs->offsets, &offset, 8) < 0 || put(&cs->timestamps, &micros, 8) < 0
            || put(&cs->types, &ts_type, 4) < 0 || binary_append(&cs->keys, key, key_length) < 0
            || binary_append(&cs->values, value, value_length) < 0) {
            return -1;
        }
        if (cs->with_headers) {
            int32_t lists_end = (int32_t)cs->header_keys.count;
            if (put(&cs->header_lists, &lists_end, 4) < 0) return -1;
        }
        cs->count++;
    }
    if (c.pos != size) return fault(batch, count - 1, c.pos, "bytes left after the last record");
    return 0;
}

static PyObject *columns_result(columns *cs)
{
    PyObject *headers;
    if (cs->with_headers) {
        PyObject *keys = binary_result(&cs->header_keys);
        PyObject *values = keys ? binary_result(&cs->header_values) : NULL;
        if (values == NULL) {
            Py_XDECREF(keys);
            return NULL;
        }
        /* keys are never null: only their offsets and data go out */
        headers = Py_BuildValue("(NOOOOOOn)", to_bytes(&cs->header_lists),
                                PyTuple_GET_ITEM(keys, 2), PyTuple_GET_ITEM(keys, 3),
                                PyTuple_GET_ITEM(values, 0), PyTuple_GET_ITEM(values, 1),
                                PyTuple_GET_ITEM(values, 2), PyTuple_GET_ITEM(values, 3),
                                cs->header_keys.count);
        Py_DECREF(keys);
        Py_DECREF(values);
        if (headers == NULL) return NULL;
    } else {
        headers = Py_NewRef(Py_None);
    }
    PyObject *keys = binary_result(&cs->keys);
    PyObject *values = keys ? binary_result(&cs->values) : NULL;
    if (values == NULL) {
        Py_XDECREF(keys);
        Py_DECREF(headers);
        return NULL;
    }
    return Py_BuildValue("(nNNNNNN)", cs->count, to_bytes(&cs->offsets),
                         to_bytes(&cs->timestamps), to_bytes(&cs->types), keys, values, headers);
}

static PyObject *decode(PyObject *self, PyObject *args)
{
    PyObject *sections;
    long long start, end;
    int with_headers;
    if (!PyArg_ParseTuple(args, "OLLp", &sections, &start, &end, &with_headers)) return NULL;
    PyObject *seq = PySequence_Fast(sections, "sections must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_ssize_t total_count = 0, total_bytes = 0;
    for (Py_ssize_t b = 0; b < n; b++) { /* sizes, for buffers made once */
        PyObject *section = PySequence_Fast_GET_ITEM(seq, b);
        if (!PyTuple_Check(section) || PyTuple_GET_SIZE(section) != 6) {
            PyErr_SetString(PyExc_TypeError,
                            "a section is (bytes, count, base_offset, first_timestamp, "
                            "timestamp_type, max_timestamp)");
            Py_DECREF(seq);
            return NULL;
        }
        Py_ssize_t size = PyObject_Length(PyTuple_GET_ITEM(section, 0));
        long long count = PyLong_AsLongLong(PyTuple_GET_ITEM(section, 1));
        if (size < 0 || (count == -1 && PyErr_Occurred())) {
            Py_DECREF(seq);
            return NULL;
        }
        /* a record takes at least 7 bytes: no more records than that */
        total_count += count < size / 7 ? (Py_ssize_t)(count > 0 ? count : 0) : size / 7;
        total_bytes += size;
    }
    columns cs;
    PyObject *out = NULL;
    if (columns_init(&cs, with_headers, total_count, total_bytes) < 0) goto done;
    for (Py_ssize_t b = 0; b < n; b++) {
        Py_buffer view;
        long long count, base_offset, first_ts, max_ts;
        int ts_type;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, b), "y*LLLiL", &view, &count,
                              &base_offset, &first_ts, &ts_type, &max_ts)) {
            goto done;
        }
        int rc = walk_section(&cs, b, view.buf, view.len, count, base_offset, first_ts,
                              ts_type, max_ts, start, end);
        PyBuffer_Release(&view);
        if (rc < 0) goto done;
    }
    out = columns_result(&cs);
done:
    columns_free(&cs);
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(sections, start, end, with_headers) -> column buffers; see "
     "annal.storage.columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_columns",
    "Fetched records as Arrow-layout column buffers (see annal.storage.columns).", -1, methods,
};

PyMODINIT_FUNC PyInit__columns(void)
{
    return PyModule_Create(&module);
}
