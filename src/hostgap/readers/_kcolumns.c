/* hostgap.readers._kcolumns: one chunk of Kineto ``traceEvents`` (the text of a JSON list of
 * events) -> raw columns, without a Python object per event.
 *
 * The text is parsed by the vendored yyjson (numbers kept as their raw text), then each event's
 * fields are written into flat arrays. The contract with hostgap.readers.kineto.compiled:
 *
 * - decode(buffer) returns None whenever the chunk is anything but plain: invalid JSON, a root
 *   that is not a list, an event that is not an object, nesting deeper than MAX_DEPTH, a field
 *   of the typed schema with a type the schema refuses or might refuse (a float pid, an integer
 *   beyond int64, args that are not an object, a non-string args.name, a known key given
 *   twice), text that is not valid UTF-8. The caller then decodes the same text with the
 *   msgspec path, so every such case has exactly that path's outcome.
 * - otherwise it returns a tuple of column buffers (see build_result) plus a string table and
 *   the raw texts of the ts/dur numbers it did not convert.
 * - ts/dur: a number text of the form -?D{1,16}(.D{1,3})? whose magnitude in ns is below 2^62
 *   is converted here, exactly (integer arithmetic only); every other number text is flagged
 *   and returned as its raw bytes for the exact decimal path (hostgap.readers.decimal_ns).
 *
 * Memory: every allocation is released on every path (one cleanup block); nothing recurses
 * (yyjson reads iteratively; the depth check is a flat pass over its values).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_yyjson/yyjson.h"

#define MAX_DEPTH 32 /* the list, an event, its args: 3; deeper chunks go to msgspec */
#define MAX_FAST_INT_DIGITS 16
#define MAX_ABS_NS (((uint64_t)1) << 62)

enum { ST_OK = 0, ST_MISSING = 1, ST_MALFORMED = 2, ST_FLAGGED = 4 };
enum { K_INT = 0, K_NULL = 1, K_STR = 2 };
#define N_ARGS 6
static const char *ARG_KEYS[N_ARGS] = {"correlation", "External id", "external id", "device", "stream", "bytes"};
static const size_t ARG_LENS[N_ARGS] = {11, 11, 11, 6, 6, 5};
#define NONE_ID (-1)

/* ---------------------------------------------------------------- number texts */

/* ns from a JSON number text in us, when it is -?D{1,16}(.D{1,3})? below 2^62 ns: 1 and *out;
 * else 0 (the caller flags the text for the exact decimal path). */
static int fast_ns(const char *t, size_t n, int64_t *out) {
    size_t i = 0;
    int neg = 0;
    uint64_t v = 0;
    if (i < n && t[i] == '-') {
        neg = 1;
        i++;
    }
    size_t d0 = i;
    while (i < n && t[i] >= '0' && t[i] <= '9') {
        if (i - d0 >= MAX_FAST_INT_DIGITS) return 0;
        v = v * 10 + (uint64_t)(t[i] - '0');
        i++;
    }
    if (i == d0) return 0;
    v *= 1000; /* < 10^16 * 1000 < 2^64 */
    if (i < n && t[i] == '.') {
        i++;
        size_t f0 = i;
        uint64_t f = 0;
        while (i < n && t[i] >= '0' && t[i] <= '9') {
            if (i - f0 >= 3) return 0;
            f = f * 10 + (uint64_t)(t[i] - '0');
            i++;
        }
        if (i == f0) return 0;
        for (size_t k = i - f0; k < 3; k++) f *= 10;
        v += f;
    }
    if (i != n) return 0; /* an exponent, or anything else */
    if (v >= MAX_ABS_NS) return 0;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 1;
}

/* An integer text that fits int64 (what msgspec's int64-bounded int accepts): 1 and *out. The
 * same grammar decides whether a string is a number: -?[0-9]+ (ASCII, leading zeros allowed). */
static int int64_text(const char *t, size_t n, int64_t *out) {
    size_t i = 0;
    int neg = 0;
    uint64_t v = 0;
    if (i < n && t[i] == '-') {
        neg = 1;
        i++;
    }
    if (i == n) return 0;
    for (; i < n; i++) {
        if (t[i] < '0' || t[i] > '9') return 0; /* a fraction or an exponent: a float */
        uint64_t d = (uint64_t)(t[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > ((uint64_t)1 << 63)) return 0;
        *out = (int64_t)(0 - v);
    } else {
        if (v > (uint64_t)INT64_MAX) return 0;
        *out = (int64_t)v;
    }
    return 1;
}

static PyObject *number_ns(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    int64_t v;
    int ok = fast_ns((const char *)b.buf, (size_t)b.len, &v);
    PyBuffer_Release(&b);
    if (!ok) Py_RETURN_NONE;
    return PyLong_FromLongLong(v);
}

/* ---------------------------------------------------------------- string table */

typedef struct {
    const char *s;
    size_t n;
} Str;

typedef struct {
    Str *items;     /* in order of first appearance: the code is the index */
    int32_t *slots; /* open addressing: code + 1, 0 = empty */
    size_t count, cap_items, cap_slots;
} Table;

static uint64_t hash_bytes(const char *s, size_t n) {
    /* 8 bytes at a time (names are long: a byte-serial hash would cost more than the parse) */
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    memcpy(&w, s + i, n - i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

static int table_grow(Table *t) {
    size_t cap = t->cap_slots ? t->cap_slots * 2 : 256;
    int32_t *slots = calloc(cap, sizeof(int32_t));
    if (!slots) return -1;
    for (size_t k = 0; k < t->count; k++) {
        size_t j = hash_bytes(t->items[k].s, t->items[k].n) & (cap - 1);
        while (slots[j]) j = (j + 1) & (cap - 1);
        slots[j] = (int32_t)(k + 1);
    }
    free(t->slots);
    t->slots = slots;
    t->cap_slots = cap;
    return 0;
}

/* The code of a string (added when new); -1 when memory runs out. */
static int32_t table_code(Table *t, const char *s, size_t n) {
    if ((t->count + 1) * 2 > t->cap_slots && table_grow(t) < 0) return -1;
    size_t j = hash_bytes(s, n) & (t->cap_slots - 1);
    while (t->slots[j]) {
        Str *e = &t->items[t->slots[j] - 1];
        if (e->n == n && memcmp(e->s, s, n) == 0) return t->slots[j] - 1;
        j = (j + 1) & (t->cap_slots - 1);
    }
    if (t->count == t->cap_items) {
        size_t cap = t->cap_items ? t->cap_items * 2 : 128;
        Str *items = realloc(t->items, cap * sizeof(Str));
        if (!items) return -1;
        t->items = items;
        t->cap_items = cap;
    }
    if (t->count >= INT32_MAX - 1) return -1;
    t->items[t->count].s = s;
    t->items[t->count].n = n;
    t->slots[j] = (int32_t)(t->count + 1);
    return (int32_t)t->count++;
}

static void table_free(Table *t) {
    free(t->items);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

/* ---------------------------------------------------------------- columns */

typedef struct {
    size_t n;
    int32_t *ph, *cat, *name, *aname;
    int64_t *ts, *dur, *pid, *tid, *args; /* args: N_ARGS rows of n */
    int8_t *ts_st, *dur_st, *pid_k, *tid_k, *args_k;
    Str *ts_raw, *dur_raw; /* flagged texts, in event order */
    size_t n_ts_raw, n_dur_raw;
    Table strings;
} Cols;

static void cols_free(Cols *c) {
    free(c->ph); free(c->cat); free(c->name); free(c->aname);
    free(c->ts); free(c->dur); free(c->pid); free(c->tid); free(c->args);
    free(c->ts_st); free(c->dur_st); free(c->pid_k); free(c->tid_k); free(c->args_k);
    free(c->ts_raw); free(c->dur_raw);
    table_free(&c->strings);
    memset(c, 0, sizeof(*c));
}

/* Forget the strings of the previous chunk (they pointed into its freed document). */
static void table_reset(Table *t) {
    t->count = 0;
    if (t->slots) memset(t->slots, 0, t->cap_slots * sizeof(int32_t));
}

static int cols_alloc(Cols *c, size_t n) {
    size_t m = n ? n : 1;
    c->n = n;
    c->ph = malloc(m * 4); c->cat = malloc(m * 4); c->name = malloc(m * 4); c->aname = malloc(m * 4);
    c->ts = malloc(m * 8); c->dur = malloc(m * 8); c->pid = malloc(m * 8); c->tid = malloc(m * 8);
    c->args = malloc(m * 8 * N_ARGS);
    c->ts_st = malloc(m); c->dur_st = malloc(m); c->pid_k = malloc(m); c->tid_k = malloc(m);
    c->args_k = malloc(m * N_ARGS);
    c->ts_raw = malloc(m * sizeof(Str)); c->dur_raw = malloc(m * sizeof(Str));
    return (c->ph && c->cat && c->name && c->aname && c->ts && c->dur && c->pid && c->tid && c->args &&
            c->ts_st && c->dur_st && c->pid_k && c->tid_k && c->args_k && c->ts_raw && c->dur_raw)
               ? 0 : -1;
}

/* Nesting deeper than MAX_DEPTH anywhere in the document: one pass over yyjson's values, which
 * lie in document order in one array (a container's next sibling at its ``uni.ofs``). */
static int too_deep(yyjson_doc *doc) {
    yyjson_val *ends[MAX_DEPTH];
    int depth = 0;
    yyjson_val *root = yyjson_doc_get_root(doc), *end = root + yyjson_doc_get_val_count(doc);
    for (yyjson_val *v = root; v < end; v++) {
        while (depth && v >= ends[depth - 1]) depth--;
        if (yyjson_is_ctn(v)) {
            if (depth == MAX_DEPTH) return 1;
            ends[depth++] = (yyjson_val *)(void *)((uint8_t *)v + v->uni.ofs);
        }
    }
    return 0;
}

static int key_is(yyjson_val *k, const char *s, size_t n) {
    return yyjson_get_len(k) == n && memcmp(yyjson_get_str(k), s, n) == 0;
}

/* A string or null field: its code, or -1 for null; -2 to refuse the chunk. */
static int32_t str_or_null(Table *t, yyjson_val *v) {
    if (yyjson_is_null(v)) return -1;
    if (!yyjson_is_str(v)) return -2;
    int32_t c = table_code(t, yyjson_get_str(v), yyjson_get_len(v));
    return c < 0 ? -2 : c;
}

/* ts or dur: status and value (or a flagged raw text). */
static void time_field(yyjson_val *v, int64_t *val, int8_t *st, Str *raw, size_t *n_raw) {
    *val = 0;
    if (yyjson_is_raw(v)) {
        const char *s = yyjson_get_raw(v);
        size_t n = yyjson_get_len(v);
        if (fast_ns(s, n, val)) {
            *st = ST_OK;
        } else {
            *st = ST_FLAGGED;
            raw[*n_raw].s = s;
            raw[*n_raw].n = n;
            (*n_raw)++;
        }
    } else if (yyjson_is_null(v)) {
        *st = ST_MISSING;
    } else {
        *st = ST_MALFORMED; /* a string, a boolean, an object, a list */
    }
}

/* An ``I64 | str | None`` field: 0, or -1 to refuse the chunk. With ``numeric_strings`` (the
 * args) a string that is a number by the loader's rule (int64_text: an optional '-' and ASCII
 * digits within int64, hostgap.readers.kineto.schema.int_text) is that integer; a pid or tid string
 * stays a string (its kind decides whether a process name is read). */
static int int_str_null(Table *t, yyjson_val *v, int64_t *val, int8_t *kind, int numeric_strings) {
    if (yyjson_is_raw(v)) {
        if (!int64_text(yyjson_get_raw(v), yyjson_get_len(v), val)) return -1;
        *kind = K_INT;
    } else if (yyjson_is_null(v)) {
        *val = NONE_ID;
        *kind = K_NULL;
    } else if (numeric_strings && yyjson_is_str(v) && int64_text(yyjson_get_str(v), yyjson_get_len(v), val)) {
        *kind = K_INT;
    } else if (yyjson_is_str(v)) {
        int32_t c = table_code(t, yyjson_get_str(v), yyjson_get_len(v));
        if (c < 0) return -1;
        *val = c;
        *kind = K_STR;
    } else {
        return -1;
    }
    return 0;
}

static int read_args(Cols *c, size_t i, yyjson_val *args) {
    if (yyjson_is_null(args)) return 0;
    if (!yyjson_is_obj(args)) return -1;
    unsigned seen = 0;
    yyjson_obj_iter it;
    yyjson_obj_iter_init(args, &it);
    yyjson_val *k;
    while ((k = yyjson_obj_iter_next(&it))) {
        yyjson_val *v = yyjson_obj_iter_get_val(k);
        int j;
        for (j = 0; j < N_ARGS; j++)
            if (key_is(k, ARG_KEYS[j], ARG_LENS[j])) break;
        if (j < N_ARGS) {
            if (seen & (1u << j)) return -1;
            seen |= 1u << j;
            if (int_str_null(&c->strings, v, &c->args[(size_t)j * c->n + i], &c->args_k[(size_t)j * c->n + i], 1) < 0)
                return -1;
        } else if (key_is(k, "name", 4)) {
            if (seen & (1u << N_ARGS)) return -1;
            seen |= 1u << N_ARGS;
            if (!yyjson_is_str(v)) return -1;
            int32_t code = table_code(&c->strings, yyjson_get_str(v), yyjson_get_len(v));
            if (code < 0) return -1;
            c->aname[i] = code;
        }
    }
    return 0;
}

/* One event object into row i: 0, or -1 to refuse the chunk. */
static int read_event(Cols *c, size_t i, yyjson_val *ev) {
    if (!yyjson_is_obj(ev)) return -1;
    c->ph[i] = c->cat[i] = c->name[i] = c->aname[i] = -1;
    c->ts[i] = c->dur[i] = 0;
    c->ts_st[i] = c->dur_st[i] = ST_MISSING;
    c->pid[i] = c->tid[i] = NONE_ID;
    c->pid_k[i] = c->tid_k[i] = K_INT;
    for (int j = 0; j < N_ARGS; j++) {
        c->args[(size_t)j * c->n + i] = NONE_ID;
        c->args_k[(size_t)j * c->n + i] = K_INT;
    }
    unsigned seen = 0;
    yyjson_obj_iter it;
    yyjson_obj_iter_init(ev, &it);
    yyjson_val *k;
    while ((k = yyjson_obj_iter_next(&it))) {
        yyjson_val *v = yyjson_obj_iter_get_val(k);
        size_t n = yyjson_get_len(k);
        const char *s = yyjson_get_str(k);
        int f = -1;
        if (n == 2 && s[0] == 'p' && s[1] == 'h') f = 0;
        else if (n == 3 && memcmp(s, "cat", 3) == 0) f = 1;
        else if (n == 4 && memcmp(s, "name", 4) == 0) f = 2;
        else if (n == 2 && s[0] == 't' && s[1] == 's') f = 3;
        else if (n == 3 && memcmp(s, "dur", 3) == 0) f = 4;
        else if (n == 3 && memcmp(s, "pid", 3) == 0) f = 5;
        else if (n == 3 && memcmp(s, "tid", 3) == 0) f = 6;
        else if (n == 4 && memcmp(s, "args", 4) == 0) f = 7;
        if (f < 0) continue; /* fields hostgap does not read */
        if (seen & (1u << f)) return -1;
        seen |= 1u << f;
        switch (f) {
        case 0: {
            if (!yyjson_is_str(v)) return -1;
            int32_t code = table_code(&c->strings, yyjson_get_str(v), yyjson_get_len(v));
            if (code < 0) return -1;
            c->ph[i] = code;
            break;
        }
        case 1:
            if ((c->cat[i] = str_or_null(&c->strings, v)) == -2) return -1;
            break;
        case 2:
            if ((c->name[i] = str_or_null(&c->strings, v)) == -2) return -1;
            break;
        case 3:
            time_field(v, &c->ts[i], &c->ts_st[i], c->ts_raw, &c->n_ts_raw);
            break;
        case 4:
            time_field(v, &c->dur[i], &c->dur_st[i], c->dur_raw, &c->n_dur_raw);
            break;
        case 5:
            if (int_str_null(&c->strings, v, &c->pid[i], &c->pid_k[i], 0) < 0) return -1;
            break;
        case 6:
            if (int_str_null(&c->strings, v, &c->tid[i], &c->tid_k[i], 0) < 0) return -1;
            break;
        case 7:
            if (read_args(c, i, v) < 0) return -1;
            break;
        }
    }
    return 0;
}

static PyObject *bytes_of(const void *p, size_t n) {
    return PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)n);
}

/* A column the caller changes in place (numpy over a bytearray is writable: no second copy). */
static PyObject *bytearray_of(const void *p, size_t n) {
    return PyByteArray_FromStringAndSize((const char *)p, (Py_ssize_t)n);
}

static PyObject *raw_list(const Str *raw, size_t n) {
    PyObject *l = PyList_New((Py_ssize_t)n);
    if (!l) return NULL;
    for (size_t k = 0; k < n; k++) {
        PyObject *b = bytes_of(raw[k].s, raw[k].n);
        if (!b) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)k, b);
    }
    return l;
}

/* The result tuple; NULL with a Python error (memory), or NULL with no error when a string is
 * not valid UTF-8 for Python (the chunk is then refused). */
static PyObject *build_result(Cols *c) {
    size_t n = c->n;
    PyObject *strings = PyList_New((Py_ssize_t)c->strings.count);
    if (!strings) return NULL;
    for (size_t k = 0; k < c->strings.count; k++) {
        PyObject *s = PyUnicode_DecodeUTF8(c->strings.items[k].s, (Py_ssize_t)c->strings.items[k].n, "strict");
        if (!s) {
            Py_DECREF(strings);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
            return NULL;
        }
        PyList_SET_ITEM(strings, (Py_ssize_t)k, s);
    }
    return Py_BuildValue(
        "nNNNNNNNNNNNNNNNNN", (Py_ssize_t)n, strings,
        bytes_of(c->ph, n * 4), bytes_of(c->cat, n * 4), bytes_of(c->name, n * 4), bytes_of(c->aname, n * 4),
        bytearray_of(c->ts, n * 8), bytearray_of(c->ts_st, n), raw_list(c->ts_raw, c->n_ts_raw),
        bytearray_of(c->dur, n * 8), bytearray_of(c->dur_st, n), raw_list(c->dur_raw, c->n_dur_raw),
        bytearray_of(c->pid, n * 8), bytes_of(c->pid_k, n), bytearray_of(c->tid, n * 8), bytes_of(c->tid_k, n),
        bytearray_of(c->args, n * 8 * N_ARGS), bytes_of(c->args_k, n * N_ARGS));
}

/* ---------------------------------------------------------------- scratch */

/* Memory one thread reuses from chunk to chunk: yyjson's documents come from a dynamic allocator
 * that keeps what they freed, and the column buffers stay allocated, so a long load does not ask
 * the system for fresh pages (each one a page fault) at every chunk. One scratch serves one call
 * at a time (``busy``, set and cleared with the GIL held); everything is freed with the capsule. */
typedef struct {
    yyjson_alc *alc;
    Cols cols;
    size_t cap; /* rows the column buffers hold */
    int busy;
} Scratch;

#define SCRATCH_NAME "hostgap.readers._kcolumns.scratch"

static void scratch_destroy(PyObject *capsule) {
    Scratch *s = (Scratch *)PyCapsule_GetPointer(capsule, SCRATCH_NAME);
    if (!s) return;
    cols_free(&s->cols);
    yyjson_alc_dyn_free(s->alc);
    free(s);
}

static PyObject *scratch(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    Scratch *s = calloc(1, sizeof(Scratch));
    if (!s) return PyErr_NoMemory();
    s->alc = yyjson_alc_dyn_new();
    if (!s->alc) {
        free(s);
        return PyErr_NoMemory();
    }
    PyObject *capsule = PyCapsule_New(s, SCRATCH_NAME, scratch_destroy);
    if (!capsule) {
        yyjson_alc_dyn_free(s->alc);
        free(s);
    }
    return capsule;
}

/* The scratch's columns for n rows (buffers grown when too small): 0, or -1 out of memory. */
static int scratch_cols(Scratch *s, size_t n) {
    if (n > s->cap || !s->cols.ph) {
        Table keep = s->cols.strings;
        memset(&s->cols.strings, 0, sizeof(Table));
        cols_free(&s->cols);
        s->cols.strings = keep;
        s->cap = 0;
        if (cols_alloc(&s->cols, n) < 0) return -1;
        s->cap = n;
    }
    s->cols.n = n;
    s->cols.n_ts_raw = s->cols.n_dur_raw = 0;
    table_reset(&s->cols.strings);
    return 0;
}

/* ---------------------------------------------------------------- decode */

static PyObject *decode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *arg, *capsule = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:decode", &arg, &capsule)) return NULL;
    Scratch *s = NULL;
    if (capsule != Py_None) {
        s = (Scratch *)PyCapsule_GetPointer(capsule, SCRATCH_NAME);
        if (!s) return NULL;
        if (s->busy) s = NULL; /* another thread holds it: plain allocations this time */
    }
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    if (s) s->busy = 1;
    yyjson_doc *doc = NULL;
    Cols own;
    memset(&own, 0, sizeof(own));
    Cols *cp = s ? &s->cols : &own;
    int refused = 0, nomem = 0;
    PyObject *result = NULL;

    Py_BEGIN_ALLOW_THREADS
    {
        yyjson_read_err err;
        doc = yyjson_read_opts((char *)b.buf, (size_t)b.len, YYJSON_READ_NUMBER_AS_RAW, s ? s->alc : NULL, &err);
        yyjson_val *root = doc ? yyjson_doc_get_root(doc) : NULL;
        if (!root || !yyjson_is_arr(root) || too_deep(doc)) {
            refused = 1;
        } else if ((s ? scratch_cols(s, yyjson_arr_size(root)) : cols_alloc(&own, yyjson_arr_size(root))) < 0) {
            nomem = 1;
        } else {
            Cols c = *cp; /* a local copy: read_event's stores stay in registers and the stack */
            yyjson_arr_iter it;
            yyjson_arr_iter_init(root, &it);
            yyjson_val *ev;
            size_t i = 0;
            while ((ev = yyjson_arr_iter_next(&it))) {
                if (read_event(&c, i++, ev) < 0) {
                    refused = 1;
                    break;
                }
            }
            *cp = c; /* the table may have grown, the raw counts moved */
        }
    }
    Py_END_ALLOW_THREADS

    if (nomem) {
        PyErr_NoMemory();
    } else if (!refused) {
        result = build_result(cp);
        if (!result && !PyErr_Occurred()) refused = 1;
    }
    if (!s) cols_free(&own);
    if (doc) yyjson_doc_free(doc);
    if (s) s->busy = 0;
    PyBuffer_Release(&b);
    if (refused) Py_RETURN_NONE;
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(text, scratch=None) -> tuple | None: the raw columns of a JSON list of Kineto events, or "
     "None when the chunk must take the msgspec path (see hostgap.readers.kineto.compiled). scratch: "
     "memory from scratch() reused from call to call (one thread's)."},
    {"scratch", scratch, METH_NOARGS, "scratch() -> memory one thread's decode() calls reuse (freed with it)."},
    {"number_ns", number_ns, METH_O,
     "number_ns(text) -> int | None: ns of a us number text on the fast path, None when flagged."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kcolumns", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kcolumns(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddStringConstant(m, "YYJSON_VERSION", YYJSON_VERSION_STRING) < 0 ||
        PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
