/* Columns straight from a JSON array of objects: the native fast path of parsers/columns.py.
 *
 * scan(data, fields, to_int) reads `data`, the comma-separated elements of a JSON array (without the
 * brackets), and returns (rows, skipped, columns). Each field of `fields` is a tuple
 * (key path, kind, default) naming a top-level key or a key of a nested object (a path of two keys);
 * each element that is an object with valid field types becomes one row, every other element is
 * skipped and counted. A column is bytes holding int64 values for numeric kinds, or (bytes of int32
 * codes, list of distinct str values) for text kinds, code -1 meaning absent. Python objects are made
 * only for distinct values, which is why this is several times faster than decoding events into
 * objects. Malformed JSON raises ValueError naming the byte offset. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
    K_TEXT = 0,     /* string; null allowed with NULLABLE */
    K_ID = 1,       /* string or integer, as text */
    K_RAW = 2,      /* any value, its JSON text */
    K_NS = 3,       /* µs number -> int64 ns through float64, as numpy does */
    K_EXACT_NS = 4, /* µs number -> int64 ns from its decimal digits, truncated */
    K_INT = 5,      /* integer, number (truncated) or numeric string; -1 where it is none or too large */
    K_OBJECT = 6,   /* a nested object: 1 when present, else the default */
    K_KIND_MASK = 15,
    NULLABLE = 16,
};

#define IS_DIGIT(c) ((unsigned char)(c) - (unsigned)'0' < 10u)
#define IS_HEX(c) (IS_DIGIT(c) || ((unsigned char)(c) | 0x20u) - (unsigned)'a' < 6u)

#define MAX_FIELDS 64
#define MAX_KEYS 64
#define MAX_DEPTH 512

static const char TOO_DEEP[] = "nested too deeply";

typedef struct Table Table;

typedef struct {
    const char *key;
    Py_ssize_t len;
    int field;     /* column index, or -1 */
    Table *child;  /* keys wanted inside this key's object, or NULL */
    int next;      /* the next entry of the same bucket + 1, 0 = none */
} Entry;

#define BUCKETS 64 /* a power of two */

struct Table {
    Entry entries[MAX_KEYS];
    int count;
    int bucket[BUCKETS]; /* the first entry of each bucket + 1, 0 = none */
};

/* A key's bucket: the keys of one object mostly differ in length or first byte. */
static inline int bucket_of(const char *k, Py_ssize_t n) {
    return (int)(((size_t)n * 7 + (n ? (unsigned char)k[0] : 0)) & (BUCKETS - 1));
}

typedef struct {
    const char *ptr; /* into the input, or into the arena when unescaped */
    Py_ssize_t len;
    uint64_t hash;
} Unique;

typedef struct {
    Unique *items;
    Py_ssize_t count, cap;
    int32_t *slots; /* open addressing: index + 1, 0 = empty */
    Py_ssize_t nslots;
} Interner;

typedef struct {
    int kind, nullable;
    int64_t default_num;
    const char *default_text; /* UTF-8 of the str default, or NULL (absent: code -1) */
    Py_ssize_t default_len;
    void *data;             /* int64_t* or int32_t* */
    Interner interner;
    /* the current row's pending value */
    int seen;
    int64_t num;
    const char *span;
    Py_ssize_t span_len;
    int escaped;
    int is_string;
} Column;

typedef struct {
    const char *start, *p, *end;
    Column cols[MAX_FIELDS];
    int ncols;
    Table top;
    Table children[MAX_FIELDS];
    int nchildren;
    Py_ssize_t rows, cap, skipped;
    char *arena;
    Py_ssize_t arena_len, arena_cap;
    PyObject *to_int;
    const char *error;
    Py_ssize_t error_at;
    int nomem;                /* malloc failed: raise MemoryError once the GIL is back */
    int too_deep;             /* the error is nesting beyond MAX_DEPTH: raise RecursionError */
    PyThreadState *released;  /* the GIL is released while scanning (NULL while it is held) */
} Scan;

/* Scanning runs without the GIL, so threads read chunks in parallel; the rare paths that need Python take it. */
static void take_gil(Scan *s) {
    PyEval_RestoreThread(s->released);
    s->released = NULL;
}

static void drop_gil(Scan *s) { s->released = PyEval_SaveThread(); }

/* ------------------------------------------------------------------ lexing */

static inline void skip_ws(Scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++;
}

static int fail(Scan *s, const char *what) {
    if (!s->error) {
        s->too_deep = what == TOO_DEEP;
        s->error = what;
        s->error_at = s->p - s->start;
    }
    return -1;
}

#if defined(_MSC_VER)
#include <intrin.h>
#pragma intrinsic(_BitScanForward64)
#define LITTLE_ENDIAN_WORDS 1 /* every Windows target */
#elif defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define LITTLE_ENDIAN_WORDS 1
#else
#define LITTLE_ENDIAN_WORDS 0 /* then the byte loop finds the special byte */
#endif

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Bit 7 of each of 8 bytes (little-endian order) that is '"', '\\' or a control character, exact from the lowest
 * such byte up (the classic "has byte less than" bit trick: a false mark only ever sits above a true one). */
static inline uint64_t special8(const char *p) {
    uint64_t v, q, b;
    memcpy(&v, p, 8);
    q = v ^ (ONES * '"');
    b = v ^ (ONES * '\\');
    return (((q - ONES) & ~q) | ((b - ONES) & ~b) | ((v - ONES * 0x20) & ~v)) & HIGHS;
}

/* The index of the lowest set byte mark of special8 (mask not 0). */
static inline int first_marked(uint64_t mask) {
#if defined(_MSC_VER)
    unsigned long i;
    _BitScanForward64(&i, mask);
    return (int)(i >> 3);
#else
    return __builtin_ctzll(mask) >> 3;
#endif
}

/* A string at s->p (on its opening quote): its content span and whether it has escapes. */
static int lex_string(Scan *s, const char **out, Py_ssize_t *len, int *escaped) {
    const char *p = s->p + 1;
    *escaped = 0;
    for (;;) {
        for (; s->end - p >= 8; p += 8) {
            uint64_t mask = special8(p);
            if (mask) {
                if (LITTLE_ENDIAN_WORDS) p += first_marked(mask);
                break;
            }
        }
        while (p < s->end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) p++;
        if (p >= s->end) {
            s->p = p;
            return fail(s, "unterminated string");
        }
        if (*p == '"') break;
        if (*p != '\\') {
            s->p = p;
            return fail(s, "control character in a string");
        }
        *escaped = 1;
        if (p + 1 >= s->end) {
            s->p = p;
            return fail(s, "unterminated string");
        }
        char c = p[1];
        if (c == 'u') {
            for (int i = 2; i < 6; i++) {
                if (p + i >= s->end || !IS_HEX(p[i])) {
                    s->p = p;
                    return fail(s, "bad \\u escape");
                }
            }
            p += 6;
        } else if (strchr("\"\\/bfnrt", c) && c) {
            p += 2;
        } else {
            s->p = p;
            return fail(s, "bad escape");
        }
    }
    *out = s->p + 1;
    *len = p - (s->p + 1);
    s->p = p + 1;
    return 0;
}

typedef struct {
    const char *start;
    Py_ssize_t len;
    int integer; /* no fraction, no exponent */
} Number;

/* A JSON number starting at p (before end): its span in *n and the position after it; NULL if there is none. */
static const char *number_at(const char *p, const char *end, Number *n) {
    n->start = p;
    n->integer = 1;
    if (p < end && *p == '-') p++;
    if (p >= end || !IS_DIGIT(*p)) return NULL;
    if (*p == '0') p++;
    else
        while (p < end && IS_DIGIT(*p)) p++;
    if (p < end && *p == '.') {
        n->integer = 0;
        p++;
        if (p >= end || !IS_DIGIT(*p)) return NULL;
        while (p < end && IS_DIGIT(*p)) p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        n->integer = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !IS_DIGIT(*p)) return NULL;
        while (p < end && IS_DIGIT(*p)) p++;
    }
    n->len = p - n->start;
    return p;
}

static int lex_number(Scan *s, Number *n) {
    const char *after = number_at(s->p, s->end, n);
    if (!after) return fail(s, "bad number");
    s->p = after;
    return 0;
}

/* A string's content that is a JSON number, surrounding spaces allowed (Ascend writes "ts": "1736405443863674.400"). */
static int numeric_string(const char *p, Py_ssize_t len, Number *n) {
    const char *end = p + len;
    while (p < end && *p == ' ') p++;
    while (end > p && end[-1] == ' ') end--;
    return p < end && number_at(p, end, n) == end;
}

static int lex_literal(Scan *s, const char *word, Py_ssize_t len) {
    if (s->end - s->p < len || memcmp(s->p, word, len) != 0) return fail(s, "unexpected character");
    s->p += len;
    return 0;
}

/* An object's key and the ':' after it (s->p on the key's quote), leaving s->p on the value. */
static int lex_key(Scan *s, const char **key, Py_ssize_t *len, int *escaped) {
    if (s->p >= s->end || *s->p != '"') return fail(s, "expected a key");
    if (lex_string(s, key, len, escaped)) return -1;
    skip_ws(s);
    if (s->p >= s->end || *s->p != ':') return fail(s, "expected ':'");
    s->p++;
    skip_ws(s);
    return 0;
}

static int skip_value(Scan *s, int depth);
static int read_object(Scan *s, Table *t, int *bad, int depth);

static Table NO_KEYS; /* an object none of whose keys is wanted: read_object then only checks and skips it */

static int skip_array(Scan *s, int depth) {
    if (depth > MAX_DEPTH) return fail(s, TOO_DEEP);
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    for (;;) {
        skip_ws(s);
        if (skip_value(s, depth + 1)) return -1;
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == ']') {
            s->p++;
            return 0;
        }
        return fail(s, "expected ',' or ']'");
    }
}

static int skip_value(Scan *s, int depth) {
    if (s->p >= s->end) return fail(s, "unexpected end");
    const char *k;
    Py_ssize_t kl;
    int esc, bad = 0;
    Number n;
    switch (*s->p) {
        case '"': return lex_string(s, &k, &kl, &esc);
        case '{': return read_object(s, &NO_KEYS, &bad, depth);
        case '[': return skip_array(s, depth);
        case 't': return lex_literal(s, "true", 4);
        case 'f': return lex_literal(s, "false", 5);
        case 'n': return lex_literal(s, "null", 4);
        default: return lex_number(s, &n);
    }
}

/* ------------------------------------------------------------------ numbers */

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* The correctly rounded double of a JSON number (Clinger's fast path, else Python's own parser). */
static int number_to_double(Scan *s, const Number *n, double *out) {
    const char *p = n->start, *e = n->start + n->len;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    uint64_t mant = 0;
    int digits = 0, scale = 0, exp = 0;
    for (; p < e && IS_DIGIT(*p); p++) {
        if (mant || *p != '0') digits++;
        mant = mant * 10 + (uint64_t)(*p - '0');
        if (digits > 19) goto slow;
    }
    if (p < e && *p == '.') {
        for (p++; p < e && IS_DIGIT(*p); p++) {
            if (mant || *p != '0') digits++;
            mant = mant * 10 + (uint64_t)(*p - '0');
            scale++;
            if (digits > 19) goto slow;
        }
    }
    if (p < e) {
        p++; /* e or E */
        int eneg = 0;
        if (*p == '+' || *p == '-') eneg = *p++ == '-';
        for (; p < e; p++) {
            exp = exp * 10 + (*p - '0');
            if (exp > 400) goto slow;
        }
        if (eneg) exp = -exp;
    }
    exp -= scale;
    if (mant <= (1ULL << 53) && exp >= -22 && exp <= 22) {
        double v = (double)mant;
        v = exp < 0 ? v / POW10[-exp] : v * POW10[exp];
        *out = neg ? -v : v;
        return 0;
    }
slow : {
    char small[64];
    char *buf = n->len < (Py_ssize_t)sizeof small ? small : malloc(n->len + 1);
    if (!buf) {
        s->nomem = 1;
        return -1;
    }
    memcpy(buf, n->start, n->len);
    buf[n->len] = 0;
    take_gil(s);
    *out = PyOS_string_to_double(buf, NULL, NULL);
    int failed = *out == -1.0 && PyErr_Occurred();
    drop_gil(s);
    if (buf != small) free(buf);
    return failed ? -1 : 0;
}
}

/* An integer literal as int64; 0 on success, 1 when it does not fit. */
static int integer_literal(const Number *n, int64_t *out) {
    const char *p = n->start, *e = n->start + n->len;
    int neg = *p == '-';
    if (neg) p++;
    uint64_t v = 0;
    for (; p < e; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return 1;
        v = v * 10 + d;
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX) return 1;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

#define MAX_US 9.2e15 /* beyond this many µs, ns overflow int64: the element is invalid (as in parsers/columns.py) */

/* µs → ns the way numpy computes it from float64: floor(v) * 1000 + rint(frac * 1000). */
static int float_ns(double v, int64_t *out) {
    if (!isfinite(v) || fabs(v) >= MAX_US) return 1;
    double whole = floor(v);
    *out = (int64_t)whole * 1000 + (int64_t)rint((v - whole) * 1000.0);
    return 0;
}

/* µs → ns from the decimal digits, truncated toward zero (as int(Decimal(v) * 1000)). */
static int exact_ns(const Number *n, int64_t *out) {
    const char *p = n->start, *e = n->start + n->len;
    int neg = *p == '-';
    if (neg) p++;
    char digits[64];
    int nd = 0, point = -1, exp = 0;
    for (; p < e && (IS_DIGIT(*p) || *p == '.'); p++) {
        if (*p == '.') {
            point = nd;
            continue;
        }
        if (nd == 0 && *p == '0' && point < 0) continue; /* leading zeros of the integer part */
        if (nd >= (int)sizeof digits) return 1;
        digits[nd++] = *p;
    }
    if (point < 0) point = nd;
    if (p < e) {
        p++;
        int eneg = 0;
        if (*p == '+' || *p == '-') eneg = *p++ == '-';
        for (; p < e; p++) {
            exp = exp * 10 + (*p - '0');
            if (exp > 100) return 1;
        }
        if (eneg) exp = -exp;
    }
    int keep = point + exp + 3; /* digits left of the ns point */
    uint64_t v = 0;
    for (int i = 0; i < keep; i++) {
        uint64_t d = i < nd ? (uint64_t)(digits[i] - '0') : 0;
        if (v > (UINT64_MAX - d) / 10) return 1;
        v = v * 10 + d;
    }
    if (v > (uint64_t)INT64_MAX) return 1;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

/* ------------------------------------------------------------------ strings */

static char *arena_alloc(Scan *s, Py_ssize_t n) {
    if (s->arena_len + n > s->arena_cap) {
        return NULL;
    }
    char *out = s->arena + s->arena_len;
    s->arena_len += n;
    return out;
}

static void put_utf8(char **o, uint32_t c) {
    char *q = *o;
    if (c < 0x80) *q++ = (char)c;
    else if (c < 0x800) {
        *q++ = (char)(0xC0 | (c >> 6));
        *q++ = (char)(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        *q++ = (char)(0xE0 | (c >> 12));
        *q++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *q++ = (char)(0x80 | (c & 0x3F));
    } else {
        *q++ = (char)(0xF0 | (c >> 18));
        *q++ = (char)(0x80 | ((c >> 12) & 0x3F));
        *q++ = (char)(0x80 | ((c >> 6) & 0x3F));
        *q++ = (char)(0x80 | (c & 0x3F));
    }
    *o = q;
}

static uint32_t hex4(const char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v = v * 16 + (uint32_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

/* A string's content with escapes resolved, in the arena (lone surrogates become U+FFFD). */
static int unescape(Scan *s, const char *src, Py_ssize_t len, const char **out, Py_ssize_t *out_len) {
    char *dst = arena_alloc(s, len);
    if (!dst) return -2;
    char *q = dst;
    const char *p = src, *e = src + len;
    while (p < e) {
        if (*p != '\\') {
            *q++ = *p++;
            continue;
        }
        char c = p[1];
        p += 2;
        switch (c) {
            case 'b': *q++ = '\b'; break;
            case 'f': *q++ = '\f'; break;
            case 'n': *q++ = '\n'; break;
            case 'r': *q++ = '\r'; break;
            case 't': *q++ = '\t'; break;
            case 'u': {
                uint32_t cp = hex4(p);
                p += 4;
                if (cp >= 0xD800 && cp < 0xDC00 && e - p >= 6 && p[0] == '\\' && p[1] == 'u') {
                    uint32_t lo = hex4(p + 2);
                    if (lo >= 0xDC00 && lo < 0xE000) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        p += 6;
                    }
                }
                if (cp >= 0xD800 && cp < 0xE000) cp = 0xFFFD;
                put_utf8(&q, cp);
                break;
            }
            default: *q++ = c;
        }
    }
    *out = dst;
    *out_len = q - dst;
    return 0;
}

/* A hash of a byte string, 8 bytes a step (strings are mostly kernel and op names of tens to hundreds of bytes). */
static uint64_t hash_bytes(const char *p, Py_ssize_t n) {
    const uint64_t k = 0x9E3779B97F4A7C15ULL;
    uint64_t h = k ^ (uint64_t)n, w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * k;
        h ^= h >> 32;
    }
    for (w = 0; n > 0; n--) w = (w << 8) | (unsigned char)p[n - 1];
    h = (h ^ w) * k;
    return h ^ (h >> 29);
}

static int interner_grow(Interner *t) {
    Py_ssize_t nslots = t->nslots ? t->nslots * 2 : 64;
    int32_t *slots = calloc(nslots, sizeof *slots);
    if (!slots) return -1;
    for (Py_ssize_t i = 0; i < t->count; i++) {
        Py_ssize_t j = t->items[i].hash & (nslots - 1);
        while (slots[j]) j = (j + 1) & (nslots - 1);
        slots[j] = (int32_t)(i + 1);
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = nslots;
    return 0;
}

/* The code of a byte string, adding it when new; -1 on memory exhaustion. */
static int32_t intern(Interner *t, const char *p, Py_ssize_t n) {
    if (t->count >= INT32_MAX - 1) return -1; /* codes are int32 */
    if ((t->count + 1) * 2 > t->nslots && interner_grow(t)) return -1;
    uint64_t h = hash_bytes(p, n);
    Py_ssize_t j = h & (t->nslots - 1);
    while (t->slots[j]) {
        Unique *u = &t->items[t->slots[j] - 1];
        if (u->hash == h && u->len == n && memcmp(u->ptr, p, n) == 0) {
            return t->slots[j] - 1;
        }
        j = (j + 1) & (t->nslots - 1);
    }
    if (t->count == t->cap) {
        Py_ssize_t cap = t->cap ? t->cap * 2 : 64;
        Unique *items = realloc(t->items, cap * sizeof *items);
        if (!items) return -1;
        t->items = items;
        t->cap = cap;
    }
    t->items[t->count] = (Unique){p, n, h};
    t->slots[j] = (int32_t)(t->count + 1);
    return (int32_t)t->count++;
}

/* ------------------------------------------------------------------ fields */

static Entry *find_key(Table *t, const char *k, Py_ssize_t n) {
    for (int i = t->bucket[bucket_of(k, n)]; i; i = t->entries[i - 1].next) {
        Entry *e = &t->entries[i - 1];
        if (e->len == n && memcmp(e->key, k, n) == 0) return e;
    }
    return NULL;
}

static Entry *add_key(Table *t, const char *k, Py_ssize_t n) {
    Entry *e = &t->entries[t->count++];
    int *head = &t->bucket[bucket_of(k, n)];
    *e = (Entry){k, n, -1, NULL, *head};
    *head = t->count;
    return e;
}

/* Read one field's value into its column's pending slot; 1 when the type is wrong for the field. */
static int read_field(Scan *s, Column *c) {
    char ch = *s->p;
    const char *vstart = s->p;
    Number n;
    c->seen = 1;
    c->is_string = 0;
    if (ch == 'n' && c->kind != K_RAW) {
        if (lex_literal(s, "null", 4)) return -1;
        c->seen = 0;
        return c->nullable ? 0 : 1;
    }
    switch (c->kind) {
        case K_RAW:
            if (skip_value(s, 0)) return -1;
            c->span = vstart;
            c->span_len = s->p - vstart;
            c->escaped = 0;
            return 0;
        case K_TEXT:
        case K_ID:
            if (ch == '"') {
                c->is_string = 1;
                return lex_string(s, &c->span, &c->span_len, &c->escaped);
            }
            if (skip_value(s, 0)) return -1;
            if (c->kind == K_ID && (ch == '-' || IS_DIGIT(ch))) {
                n.start = vstart;
                n.len = s->p - vstart;
                if (memchr(vstart, '.', n.len) || memchr(vstart, 'e', n.len) || memchr(vstart, 'E', n.len)) return 1;
                c->span = vstart;
                c->span_len = n.len;
                c->escaped = 0;
                return 0;
            }
            return 1;
        case K_NS:
        case K_EXACT_NS:
        case K_INT:
            if (ch == '"' && c->kind == K_INT) {
                c->is_string = 1;
                return lex_string(s, &c->span, &c->span_len, &c->escaped);
            }
            if (ch == '"') {
                const char *text;
                Py_ssize_t len;
                int escaped;
                if (lex_string(s, &text, &len, &escaped)) return -1;
                if (escaped || !numeric_string(text, len, &n)) return 1;
            } else if (ch == '-' || IS_DIGIT(ch)) {
                if (lex_number(s, &n)) return -1;
            } else {
                return skip_value(s, 0) ? -1 : 1;
            }
            if (c->kind == K_EXACT_NS) return exact_ns(&n, &c->num) ? 1 : 0;
            if (c->kind == K_INT && n.integer) {
                if (integer_literal(&n, &c->num)) c->num = -1; /* an integer beyond int64: not usable */
                return 0;
            }
            double v;
            if (number_to_double(s, &n, &v)) return -1;
            if (c->kind == K_NS) return float_ns(v, &c->num);
            if (!isfinite(v)) return 1; /* a literal beyond double's range, which msgspec refuses too */
            if (fabs(v) >= 9223372036854775808.0) c->num = -1; /* beyond int64: not usable, as int_or_no_row says */
            else c->num = (int64_t)v;
            return 0;
    }
    return 1;
}

static void forget(Scan *s, Table *t);

/* One key's value: a wanted field, a nested object with wanted keys, or skipped. */
static int read_member(Scan *s, Entry *e, int *bad, int depth) {
    Column *c = e->field >= 0 ? &s->cols[e->field] : NULL;
    if (!e->child) {
        int r = read_field(s, c);
        if (r > 0) *bad = 1;
        return r < 0 ? -1 : 0;
    }
    forget(s, e->child); /* a key given twice: the last value wins, as for top-level keys */
    if (c) c->seen = 0;
    if (*s->p == '{') {
        if (c) {
            c->seen = 1;
            c->num = 1;
        }
        return read_object(s, e->child, bad, depth + 1);
    }
    if (*s->p == 'n' && (!c || c->nullable)) return lex_literal(s, "null", 4);
    *bad = 1; /* the fields under this key need an object */
    return skip_value(s, depth);
}

/* Forget what was read under a nested object's key (its fields and their own nested objects). */
static void forget(Scan *s, Table *t) {
    for (int i = 0; i < t->count; i++) {
        if (t->entries[i].field >= 0) s->cols[t->entries[i].field].seen = 0;
        if (t->entries[i].child) forget(s, t->entries[i].child);
    }
}

/* An object (s->p on '{') whose keys are looked up in t; sets *bad on a wrongly typed field. */
static int read_object(Scan *s, Table *t, int *bad, int depth) {
    if (depth > MAX_DEPTH) return fail(s, TOO_DEEP);
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    for (;;) {
        skip_ws(s);
        const char *k;
        Py_ssize_t kl;
        int esc;
        if (lex_key(s, &k, &kl, &esc)) return -1;
        if (s->p >= s->end) return fail(s, "unexpected end");
        if (esc && t->count && unescape(s, k, kl, &k, &kl)) {
            s->nomem = 1;
            return -1;
        }
        Entry *e = find_key(t, k, kl);
        if ((e ? read_member(s, e, bad, depth) : skip_value(s, depth + 1)) < 0) return -1;
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == '}') {
            s->p++;
            return 0;
        }
        return fail(s, "expected ',' or '}'");
    }
}

/* ------------------------------------------------------------------ rows */

static int is_text(int kind) { return kind == K_TEXT || kind == K_ID || kind == K_RAW; }

static size_t width(int kind) { return is_text(kind) ? sizeof(int32_t) : sizeof(int64_t); }

static int grow_rows(Scan *s) {
    Py_ssize_t cap = s->cap * 2;
    for (int i = 0; i < s->ncols; i++) {
        Column *c = &s->cols[i];
        void *d = realloc(c->data, cap * width(c->kind));
        if (!d) return -1;
        c->data = d;
    }
    s->cap = cap;
    return 0;
}

/* A numeric string through the Python converter (ROCm writes "bytes": "9216"); -1 with an exception set. */
static int string_int(Scan *s, Column *c, int64_t *out) {
    const char *p = c->span;
    Py_ssize_t n = c->span_len;
    if (c->escaped && unescape(s, c->span, c->span_len, &p, &n)) {
        s->nomem = 1;
        return -1;
    }
    take_gil(s);
    PyObject *text = PyUnicode_DecodeUTF8(p, n, "replace");
    PyObject *v = text ? PyObject_CallOneArg(s->to_int, text) : NULL;
    Py_XDECREF(text);
    *out = v ? PyLong_AsLongLong(v) : -1;
    Py_XDECREF(v);
    int failed = PyErr_Occurred() != NULL;
    drop_gil(s);
    return failed ? -1 : 0;
}

/* Store the pending values as row s->rows; -1 on failure (s->nomem, or a Python exception). */
static int commit_row(Scan *s) {
    if (s->rows == s->cap && grow_rows(s)) {
        s->nomem = 1;
        return -1;
    }
    for (int i = 0; i < s->ncols; i++) {
        Column *c = &s->cols[i];
        if (!is_text(c->kind)) {
            int64_t *slot = (int64_t *)c->data + s->rows;
            *slot = c->seen && !c->is_string ? c->num : c->default_num;
            if (c->seen && c->is_string && string_int(s, c, slot)) return -1;
            continue;
        }
        int32_t code = -1;
        const char *p = c->seen ? c->span : c->default_text; /* the default counts where it is first used */
        Py_ssize_t n = c->seen ? c->span_len : c->default_len;
        if (c->seen && c->escaped && unescape(s, c->span, c->span_len, &p, &n)) {
            s->nomem = 1;
            return -1;
        }
        if (p && (code = intern(&c->interner, p, n)) < 0) {
            s->nomem = 1;
            return -1;
        }
        ((int32_t *)c->data)[s->rows] = code;
    }
    s->rows++;
    return 0;
}

static void reset_row(Scan *s) {
    for (int i = 0; i < s->ncols; i++) s->cols[i].seen = 0;
}

static int scan_elements(Scan *s) {
    skip_ws(s);
    while (s->p < s->end) {
        reset_row(s);
        int bad = 0;
        if (*s->p == '{') {
            if (read_object(s, &s->top, &bad, 0)) return -1;
        } else {
            if (skip_value(s, 0)) return -1;
            bad = 1;
        }
        if (bad) s->skipped++;
        else if (commit_row(s)) return -1;
        skip_ws(s);
        if (s->p >= s->end) break;
        if (*s->p != ',') return fail(s, "expected ',' between elements");
        s->p++;
        skip_ws(s);
        if (s->p >= s->end) return fail(s, "unexpected end after ','");
    }
    return 0;
}

/* ------------------------------------------------------------------ setup and results */

static int add_field(Scan *s, PyObject *spec) {
    PyObject *path, *dflt;
    int kind;
    if (!PyArg_ParseTuple(spec, "O!iO", &PyTuple_Type, &path, &kind, &dflt)) return -1;
    Py_ssize_t depth = PyTuple_GET_SIZE(path);
    if (s->ncols >= MAX_FIELDS || depth < 1 || depth > 2) {
        PyErr_SetString(PyExc_ValueError, "a field path has one or two keys, at most 64 fields");
        return -1;
    }
    int idx = s->ncols++;
    Column *c = &s->cols[idx];
    c->kind = kind & K_KIND_MASK;
    c->nullable = (kind & NULLABLE) != 0;
    if (is_text(c->kind)) {
        if (dflt != Py_None && !PyUnicode_Check(dflt)) {
            PyErr_SetString(PyExc_TypeError, "a text field's default is a str or None");
            return -1;
        }
        if (dflt != Py_None && !(c->default_text = PyUnicode_AsUTF8AndSize(dflt, &c->default_len))) return -1;
    } else {
        c->default_num = PyLong_AsLongLong(dflt);
        if (PyErr_Occurred()) return -1;
    }
    Table *t = &s->top;
    for (Py_ssize_t i = 0; i < depth; i++) {
        Py_ssize_t kl;
        const char *k = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(path, i), &kl);
        if (!k) return -1;
        Entry *e = find_key(t, k, kl);
        if (!e) {
            if (t->count >= MAX_KEYS) {
                PyErr_SetString(PyExc_ValueError, "too many keys");
                return -1;
            }
            e = add_key(t, k, kl);
        }
        if (i == depth - 1) e->field = idx;
        if (i < depth - 1 || c->kind == K_OBJECT) {
            if (!e->child) e->child = &s->children[s->nchildren++];
            t = e->child;
        }
    }
    return 0;
}

/* The distinct values of a text column as str; bytes that are not UTF-8 become U+FFFD. */
static PyObject *uniques(Column *c) {
    PyObject *list = PyList_New(c->interner.count);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < c->interner.count; i++) {
        Unique *u = &c->interner.items[i];
        PyObject *text = PyUnicode_DecodeUTF8(u->ptr, u->len, "replace");
        if (!text) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, text);
    }
    return list;
}

static PyObject *column_result(Scan *s, Column *c) {
    if (!is_text(c->kind)) return PyBytes_FromStringAndSize(c->data, s->rows * sizeof(int64_t));
    int32_t *codes = c->data;
    PyObject *list = uniques(c);
    if (!list) return NULL;
    return Py_BuildValue("(NN)", PyBytes_FromStringAndSize((char *)codes, s->rows * sizeof(int32_t)), list);
}

static void release(Scan *s) {
    for (int i = 0; i < s->ncols; i++) {
        free(s->cols[i].data);
        free(s->cols[i].interner.items);
        free(s->cols[i].interner.slots);
    }
    free(s->arena);
}

static PyObject *results(Scan *s) {
    PyObject *cols = PyList_New(s->ncols);
    if (!cols) return NULL;
    for (int i = 0; i < s->ncols; i++) {
        PyObject *col = column_result(s, &s->cols[i]);
        if (!col) {
            Py_DECREF(cols);
            return NULL;
        }
        PyList_SET_ITEM(cols, i, col);
    }
    return Py_BuildValue("(nnN)", s->rows, s->skipped, cols);
}

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *data;
    PyObject *fields, *to_int;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyBytes_Type, &data, &PyTuple_Type, &fields, &to_int)) return NULL;
    Scan *s = calloc(1, sizeof *s);
    PyObject *out = NULL;
    if (!s) {
        return PyErr_NoMemory();
    }
    s->start = s->p = PyBytes_AS_STRING(data); /* bytes: nobody can change them while the GIL is released */
    s->end = s->start + PyBytes_GET_SIZE(data);
    s->to_int = to_int;
    s->arena_cap = PyBytes_GET_SIZE(data);
    s->arena = malloc(s->arena_cap + 1);
    s->cap = PyBytes_GET_SIZE(data) / 256 + 16;
    if (!s->arena) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++)
        if (add_field(s, PyTuple_GET_ITEM(fields, i))) goto done;
    for (int i = 0; i < s->ncols; i++) {
        s->cols[i].data = malloc(s->cap * width(s->cols[i].kind));
        if (!s->cols[i].data) {
            PyErr_NoMemory();
            goto done;
        }
    }
    drop_gil(s);
    int failed = scan_elements(s);
    take_gil(s);
    if (failed) {
        if (s->nomem) PyErr_NoMemory();
        else if (!PyErr_Occurred())
            PyErr_Format(s->too_deep ? PyExc_RecursionError : PyExc_ValueError, "%s at byte %zd",
                         s->error ? s->error : "invalid JSON", s->error_at);
        goto done;
    }
    out = results(s);
done:
    release(s);
    free(s);
    return out;
}

/* ------------------------------------------------------------------ the host call tree (traceanalyzer/linking.py) */

/* walk(ts, end, lane, is_op, depth, up, op, top, stop): the stack walk over host events sorted by (lane, start,
 * -end). Per event: pop the innermost open event while this one starts at or after its end, then push. The
 * inputs are int64 buffers (is_op: one byte per event); the outputs are filled: depth (int32, open events
 * below it), up (the innermost open event's position, -1 if none), op and top (positions of the innermost and
 * outermost CPU op on the stack with the event, -1 if none) and stop (the position whose start pops it, or its
 * lane's end). */
static PyObject *walk(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer b[9];
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*w*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7], &b[8]))
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t n = b[0].len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t widths[9] = {8, 8, 8, 1, 4, 8, 8, 8, 8};
    for (int i = 0; i < 9; i++)
        if (b[i].len != n * widths[i]) {
            PyErr_SetString(PyExc_ValueError, "walk: buffers of one length (int64, is_op one byte, depth int32)");
            goto done;
        }
    const int64_t *ts = b[0].buf, *end = b[1].buf, *lane = b[2].buf;
    const uint8_t *is_op = b[3].buf;
    int32_t *depth = b[4].buf;
    int64_t *up = b[5].buf, *op = b[6].buf, *top = b[7].buf, *stop = b[8].buf;
    int64_t *stack = malloc((n + 1) * sizeof *stack);
    if (!stack) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    Py_ssize_t sp = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i && lane[i] != lane[i - 1])
            while (sp) stop[stack[--sp]] = i;
        while (sp && ts[i] >= end[stack[sp - 1]]) stop[stack[--sp]] = i;
        int64_t parent = sp ? stack[sp - 1] : -1;
        depth[i] = (int32_t)sp;
        up[i] = parent;
        op[i] = is_op[i] ? i : parent >= 0 ? op[parent] : -1;
        top[i] = parent >= 0 && top[parent] >= 0 ? top[parent] : is_op[i] ? i : -1;
        stack[sp++] = i;
    }
    while (sp) stop[stack[--sp]] = n;
    Py_END_ALLOW_THREADS;
    free(stack);
    out = Py_None;
    Py_INCREF(out);
done:
    for (int i = 0; i < 9; i++) PyBuffer_Release(&b[i]);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(data, fields, to_int) -> (rows, skipped, columns)"},
    {"walk", walk, METH_VARARGS, "walk(ts, end, lane, is_op, depth, up, op, top, stop): the host call tree"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_scan",
    .m_doc = "Columns straight from a JSON array of objects.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__scan(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH)) Py_CLEAR(m);
    return m;
}
