/*
 * annal.storage._walker: the compiled record walker of the leader's validator.
 *
 * walk_records(section, count, first_timestamp, timestamp_low, timestamp_high,
 *              require_keys) walks the records section of one v2 batch (already
 * inflated when the batch is compressed) without building a Python object per
 * record, and returns five integers:
 *
 *     (0, max_timestamp, index_of_max, 0, 0)           every record is sound
 *     (reason, record_index, position, value, extra)   the first fault found
 *
 * The reasons, and what value/extra hold for each, are the REASON_* numbers
 * of annal/storage/walker.py, which also holds the pure-Python twin of this
 * walk; the two must agree on every input (a property test checks it).
 * Timestamps outside [timestamp_low, timestamp_high] fail, except -1 (no
 * timestamp).  Length fields are varints of at most 5 bytes and int32 range,
 * the timestamp delta a varlong of at most 10 bytes, all zig-zag encoded.
 */
#include "_readers.h"

enum {
    OK = 0,
    SECTION_ENDS = 1,
    LENGTH_TOO_SMALL = 4,
    LENGTH_OVERRUNS = 5,
    OFFSET_DELTA = 6,
    KEY_LENGTH = 7,
    VALUE_LENGTH = 8,
    HEADER_COUNT = 9,
    HEADER_KEY_LENGTH = 10,
    HEADER_KEY_NOT_UTF8 = 11,
    HEADER_VALUE_LENGTH = 12,
    SIZE_MISMATCH = 13,
    TRAILING_BYTES = 14,
    NULL_KEY = 15,
    TIMESTAMP_RANGE = 16,
    TIMESTAMP_OVERFLOW = 17,
};

#define MIN_RECORD_BODY 6
#define NO_TIMESTAMP (-1)

static PyObject *result(int reason, long long a, long long b, long long value, long long extra)
{
    return Py_BuildValue("(iLLLL)", reason, a, b, value, extra);
}

static PyObject *walk_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count, first_ts, ts_low, ts_high;
    int require_keys;
    if (!PyArg_ParseTuple(args, "y*LLLLp", &view, &count, &first_ts, &ts_low, &ts_high,
                          &require_keys)) {
        return NULL;
    }
    cursor c = {(const unsigned char *)view.buf, 0, OK, 0};
    const Py_ssize_t end = view.len;
    long long max_ts = NO_TIMESTAMP, index_of_max = 0;
    long long i = 0;
    long long value = 0, extra = 0;
    Py_ssize_t record_start = 0;

#define FAIL(r, v, e) do { c.reason = (r); value = (v); extra = (e); goto fault; } while (0)
#define CHECK() do { if (c.reason) { value = 0; extra = 0; goto fault_at; } } while (0)

    for (i = 0; i < count; i++) {
        record_start = c.pos;
        if (c.pos >= end) {
            c.fault_pos = c.pos;
            FAIL(SECTION_ENDS, count, 0);
        }
        int64_t length = read_varint(&c, end, 5);
        CHECK();
        if (length < MIN_RECORD_BODY) {
            c.fault_pos = record_start;
            FAIL(LENGTH_TOO_SMALL, length, 0);
        }
        if (length > end - c.pos) {
            c.fault_pos = record_start;
            FAIL(LENGTH_OVERRUNS, length, end - c.pos);
        }
        const Py_ssize_t record_end = c.pos + (Py_ssize_t)length;
        c.pos += 1; /* attributes: unused */
        int64_t ts_delta = read_varint(&c, record_end, 10);
        CHECK();
        int64_t offset_delta = read_varint(&c, record_end, 5);
        CHECK();
        if (offset_delta != i) {
            c.fault_pos = record_start;
            FAIL(OFFSET_DELTA, offset_delta, 0);
        }
        Py_ssize_t field = c.pos;
        int64_t key_length = read_varint(&c, record_end, 5);
        CHECK();
        if (key_length < -1 || key_length > record_end - c.pos) {
            c.fault_pos = field;
            FAIL(KEY_LENGTH, key_length, 0);
        }
        if (key_length < 0) {
            if (require_keys) {
                c.fault_pos = field;
                FAIL(NULL_KEY, 0, 0);
            }
        } else {
            c.pos += (Py_ssize_t)key_length;
        }
        field = c.pos;
        int64_t value_length = read_varint(&c, record_end, 5);
        CHECK();
        if (value_length < -1 || value_length > record_end - c.pos) {
            c.fault_pos = field;
            FAIL(VALUE_LENGTH, value_length, 0);
        }
        if (value_length > 0) c.pos += (Py_ssize_t)value_length;
        field = c.pos;
        int64_t header_count = read_varint(&c, record_end, 5);
        CHECK();
        if (header_count < 0) {
            c.fault_pos = field;
            FAIL(HEADER_COUNT, header_count, 0);
        }
        for (int64_t h = 0; h < header_count; h++) {
            field = c.pos;
            int64_t hk = read_varint(&c, record_end, 5);
            CHECK();
            if (hk < 0 || hk > record_end - c.pos) {
                c.fault_pos = field;
                FAIL(HEADER_KEY_LENGTH, hk, h);
            }
            if (!valid_utf8(c.buf + c.pos, (Py_ssize_t)hk)) {
                c.fault_pos = c.pos;
                FAIL(HEADER_KEY_NOT_UTF8, h, 0);
            }
            c.pos += (Py_ssize_t)hk;
            field = c.pos;
            int64_t hv = read_varint(&c, record_end, 5);
            CHECK();
            if (hv < -1 || hv > record_end - c.pos) {
                c.fault_pos = field;
                FAIL(HEADER_VALUE_LENGTH, hv, h);
            }
            if (hv > 0) c.pos += (Py_ssize_t)hv;
        }
        if (c.pos != record_end) {
            c.fault_pos = record_start;
            FAIL(SIZE_MISMATCH, length, length - (record_end - c.pos));
        }
        int64_t ts;
        if (__builtin_add_overflow((int64_t)first_ts, ts_delta, &ts)) {
            c.fault_pos = record_start;
            FAIL(TIMESTAMP_OVERFLOW, ts_delta, 0);
        }
        if (ts != NO_TIMESTAMP && (ts < ts_low || ts > ts_high)) {
            c.fault_pos = record_start;
            FAIL(TIMESTAMP_RANGE, ts, 0);
        }
        if (ts > max_ts) {
            max_ts = ts;
            index_of_max = i;
        }
    }
    if (c.pos != end) {
        c.fault_pos = c.pos;
        c.reason = TRAILING_BYTES;
        value = end - c.pos;
        extra = 0;
        goto fault;
    }
    PyBuffer_Release(&view);
    return result(OK, max_ts, index_of_max, 0, 0);

fault_at: /* a varint fault: read_varint set its position */
fault:
    PyBuffer_Release(&view);
    return result(c.reason, i, c.fault_pos, value, extra);
#undef FAIL
#undef CHECK
}

static PyMethodDef methods[] = {
    {"walk_records", walk_records, METH_VARARGS,
     "walk_records(section, count, first_timestamp, timestamp_low, timestamp_high, "
     "require_keys) -> (reason, a, b, value, extra); see annal.storage.walker."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_walker",
    "The compiled record walker of the leader's validator (see annal.storage.walker).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__walker(void)
{
    return PyModule_Create(&module);
}
