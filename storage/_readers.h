/*
 * The readers the compiled record walks share: zig-zag varints with bounds
 * and length checks, and strict UTF-8 (annal.storage._walker, _columns).
 */
#ifndef ANNAL_RECORD_READERS_H
#define ANNAL_RECORD_READERS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The varint faults, numbered as annal/storage/walker.py numbers them. */
enum { VARINT_PAST_END = 2, VARINT_TOO_LONG = 3 };

typedef struct {
    const unsigned char *buf;
    Py_ssize_t pos;
    int reason;
    Py_ssize_t fault_pos;
} cursor;

/* A zig-zag varint of at most max_bytes bytes, before end.  On a fault sets
 * c->reason and returns 0. */
static inline int64_t read_varint(cursor *c, Py_ssize_t end, int max_bytes)
{
    /* One and two bytes, the common lengths and deltas, read with the position
     * in a local (stores through c may alias the buffer, so the general loop
     * reloads it every byte). */
    const unsigned char *buf = c->buf;
    Py_ssize_t at = c->pos;
    if (at + 1 < end) {
        unsigned char b0 = buf[at];
        if (b0 < 0x80) {
            c->pos = at + 1;
            return (int64_t)(b0 >> 1) ^ -(int64_t)(b0 & 1);
        }
        unsigned char b1 = buf[at + 1];
        if (b1 < 0x80) {
            uint64_t two = (uint64_t)(b0 & 0x7f) | ((uint64_t)b1 << 7);
            c->pos = at + 2;
            return (int64_t)(two >> 1) ^ -(int64_t)(two & 1);
        }
    }
    uint64_t raw = 0;
    int shift = 0;
    Py_ssize_t start = c->pos;
    for (int i = 0; i < max_bytes; i++) {
        if (c->pos >= end) {
            c->reason = VARINT_PAST_END;
            c->fault_pos = start;
            return 0;
        }
        unsigned char b = c->buf[c->pos++];
        raw |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) {
            int64_t value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            if (max_bytes == 5 && (value > INT32_MAX || value < INT32_MIN)) {
                c->reason = VARINT_TOO_LONG;
                c->fault_pos = start;
                return 0;
            }
            return value;
        }
        shift += 7;
    }
    c->reason = VARINT_TOO_LONG;
    c->fault_pos = start;
    return 0;
}

/* Strict UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF),
 * as Python's decoder accepts it. */
static inline int valid_utf8(const unsigned char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        int need;
        unsigned char lo = 0x80, hi = 0xbf;
        if (b >= 0xc2 && b <= 0xdf) {
            need = 1;
        } else if (b >= 0xe0 && b <= 0xef) {
            need = 2;
            if (b == 0xe0) lo = 0xa0;
            if (b == 0xed) hi = 0x9f;
        } else if (b >= 0xf0 && b <= 0xf4) {
            need = 3;
            if (b == 0xf0) lo = 0x90;
            if (b == 0xf4) hi = 0x8f;
        } else {
            return 0;
        }
        if (i + need >= n) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k <= need; k++) {
            if (s[i + k] < 0x80 || s[i + k] > 0xbf) return 0;
        }
        i += need + 1;
    }
    return 1;
}

#endif
