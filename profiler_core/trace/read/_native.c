/* The native trace reader: the traceEvents array of a Kineto trace -> per-event column buffers.
 *
 * parse_events(buffer, max_events, ...) scans the JSON bytes of the traceEvents array (strictly: any text
 * that is not JSON, or a value of a shape this reader does not handle exactly, makes it decline) and
 * returns a dict of writable buffers (one per column, native-endian int64/int32/float64) and the table of
 * raw JSON texts (string literals and raw values) that the string columns index; or a str saying why
 * it declined, in which case profiler_core.trace.read.native leaves the file to the Python reader.
 * The scan runs without the GIL and touches no Python object; the results are built after it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64      /* deeper values decline (the Python reader's recursion limit is far above) */
#define MAX_NUMBER_TEXT 64 /* longer number literals decline */

/* ------------------------------------------------------------------ growable buffers */
typedef struct {
    char *data;
    size_t len, cap;
} buf_t;

static int buf_grow(buf_t *b, size_t n) {
    {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->len + n) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return -1;
        b->data = d;
        b->cap = cap;
    }
    return 0;
}

static inline int buf_push(buf_t *b, const void *v, size_t n) {
    if (b->len + n > b->cap && buf_grow(b, n)) return -1;
    memcpy(b->data + b->len, v, n);
    b->len += n;
    return 0;
}

/* the index of the lowest set bit of m (m != 0) */
static inline int ctz64(uint64_t m) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_ctzll(m);
#else
    int k = 0;
    while (!(m & 1)) {
        m >>= 1;
        k++;
    }
    return k;
#endif
}

/* a[:n] == b[:n], short lengths by word compares (no call) */
static inline int bytes_eq(const char *a, const char *b, size_t n) {
    if (n >= 8 && n <= 16) {
        uint64_t x, y, u, v;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        memcpy(&u, a + n - 8, 8);
        memcpy(&v, b + n - 8, 8);
        return ((x ^ y) | (u ^ v)) == 0;
    }
    if (n >= 4 && n < 8) {
        uint32_t x, y, u, v;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        memcpy(&u, a + n - 4, 4);
        memcpy(&v, b + n - 4, 4);
        return ((x ^ y) | (u ^ v)) == 0;
    }
    if (n < 4) {
        for (size_t i = 0; i < n; i++)
            if (a[i] != b[i]) return 0;
        return 1;
    }
    return memcmp(a, b, n) == 0;
}

/* ------------------------------------------------------------------ the table of raw texts */
typedef struct {
    size_t off;
    size_t len;
} span_t;

typedef struct {
    buf_t spans;      /* span_t per entry */
    int32_t *slots;   /* open addressing: entry index + 1, 0 = empty */
    size_t nslots;
    size_t count;
} table_t;

/* 8 bytes a round, then the tail by fixed-size loads (no call); the top bits mixed down (the table masks
 * the low ones). Only the table's speed depends on it: its entries are numbered in order of appearance */
static inline uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n, w;
    if (n >= 8) {
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            memcpy(&w, p + i, 8);
            h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
            h ^= h >> 32;
        }
        if (i == n) return h ^ (h >> 29);
        memcpy(&w, p + n - 8, 8); /* the last 8 bytes: the tail and some hashed already */
    } else if (n >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + n - 4, 4);
        w = lo | ((uint64_t)hi << 32);
    } else {
        w = n ? p[0] | ((uint64_t)p[n / 2] << 8) | ((uint64_t)p[n - 1] << 16) : 0;
    }
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

/* index of the text base[off:off+len] in the table (added when new); -1 when out of memory */
static int32_t table_intern(table_t *t, const char *base, size_t off, size_t len) {
    if (t->count * 2 + 2 > t->nslots) {
        size_t n = t->nslots ? t->nslots * 2 : 1024;
        int32_t *s = calloc(n, sizeof(int32_t));
        if (!s) return -1;
        span_t *spans = (span_t *)t->spans.data;
        for (size_t i = 0; i < t->count; i++) {
            size_t h = hash_bytes((const unsigned char *)base + spans[i].off, spans[i].len) & (n - 1);
            while (s[h]) h = (h + 1) & (n - 1);
            s[h] = (int32_t)(i + 1);
        }
        free(t->slots);
        t->slots = s;
        t->nslots = n;
    }
    if (t->count >= INT32_MAX - 1) return -1;
    size_t h = hash_bytes((const unsigned char *)base + off, len) & (t->nslots - 1);
    for (;;) {
        int32_t e = t->slots[h];
        if (!e) break;
        span_t *sp = (span_t *)t->spans.data + (e - 1);
        if (sp->len == len && bytes_eq(base + sp->off, base + off, len)) return e - 1;
        h = (h + 1) & (t->nslots - 1);
    }
    span_t sp = {off, len};
    if (buf_push(&t->spans, &sp, sizeof sp)) return -1;
    t->slots[h] = (int32_t)(t->count + 1);
    return (int32_t)t->count++;
}

/* ------------------------------------------------------------------ parsed values */
enum { V_ABSENT = 0, V_NULL, V_INT, V_FLOAT, V_STR, V_OTHER, V_BIG, V_TRIPLE, V_BADTRIPLE };

typedef struct {
    int kind;
    int escaped;      /* a string with a backslash escape */
    int64_t i;
    double d;
    int32_t s;        /* table index of the raw text (strings and raw values), -1 when none */
    size_t off, len;  /* the raw text */
    int32_t xyz[3];
} val_t;

/* how a known key is kept (the names KEYS gives them: event_args' kinds) */
enum { K_INT, K_INT32, K_FLOAT, K_STR, K_RAW, K_TRIPLE, N_HOW };
static const char *HOW_NAME[N_HOW] = {"int64", "int32", "float", "text", "raw", "triple"};
/* which group of events carries a key (the TraceData frame of event_args' table) */
enum { G_EVENTS, G_MEMORY, G_NAMES, N_GROUPS };
static const char *GROUP_NAME[N_GROUPS] = {"events", "memory", "names"};

typedef struct {
    const char *key;
    int how;
    int group;
} argdef_t;

enum {
    A_EXT, A_EXT_LC, A_CORRELATION, A_DEVICE, A_STREAM, A_GRID, A_BLOCK, A_REGISTERS, A_SHARED,
    A_STATIC_SHARED, A_DYNAMIC_SHARED, A_BLOCKS_PER_SM, A_WARPS_PER_SM, A_OCCUPANCY, A_NBYTES,
    A_INPUT_DIMS, A_INPUT_TYPE, A_INPUT_DIMS_OLD, A_CALL_STACK, A_PY_ID, A_PY_PARENT, A_PY_MODULE,
    A_SEQ, A_FWD, A_COLL, A_DTYPE, A_IN_NELEMS, A_OUT_NELEMS, A_GROUP_SIZE, A_PG_NAME,
    A_MEM_BYTES, A_ADDR, A_TOTAL_ALLOC, A_TOTAL_RES, A_DEV_TYPE, A_DEV_ID,
    A_M_NAME, A_M_LABELS, A_M_SORT, A_GRAPH_ID, A_GRAPH_NODE_ID, N_ARGS
};

static const argdef_t ARGS[N_ARGS] = {
    [A_EXT] = {"External id", K_INT, G_EVENTS},
    [A_EXT_LC] = {"external id", K_INT, G_EVENTS},
    [A_CORRELATION] = {"correlation", K_INT, G_EVENTS},
    [A_DEVICE] = {"device", K_INT, G_EVENTS},
    [A_STREAM] = {"stream", K_INT, G_EVENTS},
    [A_GRID] = {"grid", K_TRIPLE, G_EVENTS},
    [A_BLOCK] = {"block", K_TRIPLE, G_EVENTS},
    [A_REGISTERS] = {"registers per thread", K_INT32, G_EVENTS},
    [A_SHARED] = {"shared memory", K_INT32, G_EVENTS},
    [A_STATIC_SHARED] = {"static shared memory", K_INT32, G_EVENTS},
    [A_DYNAMIC_SHARED] = {"dynamic shared memory", K_INT32, G_EVENTS},
    [A_BLOCKS_PER_SM] = {"blocks per SM", K_FLOAT, G_EVENTS},
    [A_WARPS_PER_SM] = {"warps per SM", K_FLOAT, G_EVENTS},
    [A_OCCUPANCY] = {"est. achieved occupancy %", K_FLOAT, G_EVENTS},
    [A_NBYTES] = {"bytes", K_INT, G_EVENTS},
    [A_INPUT_DIMS] = {"Input Dims", K_RAW, G_EVENTS},
    [A_INPUT_TYPE] = {"Input type", K_RAW, G_EVENTS},
    [A_INPUT_DIMS_OLD] = {"Input dims", K_RAW, G_EVENTS},
    [A_CALL_STACK] = {"Call stack", K_STR, G_EVENTS},
    [A_PY_ID] = {"Python id", K_INT, G_EVENTS},
    [A_PY_PARENT] = {"Python parent id", K_INT, G_EVENTS},
    [A_PY_MODULE] = {"Python module id", K_INT, G_EVENTS},
    [A_SEQ] = {"Sequence number", K_INT, G_EVENTS},
    [A_FWD] = {"Fwd thread id", K_INT, G_EVENTS},
    [A_COLL] = {"Collective name", K_STR, G_EVENTS},
    [A_DTYPE] = {"dtype", K_STR, G_EVENTS},
    [A_IN_NELEMS] = {"In msg nelems", K_INT, G_EVENTS},
    [A_OUT_NELEMS] = {"Out msg nelems", K_INT, G_EVENTS},
    [A_GROUP_SIZE] = {"Group size", K_INT, G_EVENTS},
    [A_PG_NAME] = {"Process Group Name", K_STR, G_EVENTS},
    [A_MEM_BYTES] = {"Bytes", K_INT, G_MEMORY},
    [A_ADDR] = {"Addr", K_INT, G_MEMORY},
    [A_TOTAL_ALLOC] = {"Total Allocated", K_INT, G_MEMORY},
    [A_TOTAL_RES] = {"Total Reserved", K_INT, G_MEMORY},
    [A_DEV_TYPE] = {"Device Type", K_INT, G_MEMORY},
    [A_DEV_ID] = {"Device Id", K_INT, G_MEMORY},
    [A_M_NAME] = {"name", K_RAW, G_NAMES},
    [A_M_LABELS] = {"labels", K_RAW, G_NAMES},
    [A_M_SORT] = {"sort_index", K_RAW, G_NAMES},
    [A_GRAPH_ID] = {"graph id", K_INT, G_EVENTS},
    [A_GRAPH_NODE_ID] = {"graph node id", K_INT, G_EVENTS},
};

enum { F_PH, F_CAT, F_NAME, F_PID, F_TID, F_TS, F_DUR, F_ID, F_BP, F_ARGS, N_FIELDS };
static const char *FIELDS[N_FIELDS] = {"ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "args"};

/* ------------------------------------------------------------------ output columns */
enum { T_I64, T_I32, T_F64 };
typedef struct {
    const char *name;
    int type;
} coldef_t;

/* complete events: the head columns, then 3 slots per events arg (a triple fills 3, any other 1); KEYS
 * says which */
enum { X_IDX, X_TS, X_DUR, X_CAT, X_NAME, X_PID, X_PID_LABEL, X_TID, X_TID_LABEL, X_HEAD };
#define N_X (X_HEAD + 3 * N_ARGS)
static coldef_t X_COLS[N_X] = {
    {"idx", T_I64}, {"ts", T_F64}, {"dur", T_F64}, {"cat", T_I32}, {"name", T_I32},
    {"pid", T_I64}, {"pid_label", T_I32}, {"tid", T_I64}, {"tid_label", T_I32},
};
/* the arg columns' names in every group: `args.{key}` (a triple's `args.{key}_x` ...) */
static char ARG_COLS[N_ARGS][3][64];
/* [memory] instants: the head, then one slot per memory arg */
enum { M_IDX, M_TS, M_PID, M_PID_LABEL, M_TID, M_TID_LABEL, M_HEAD };
#define N_M (M_HEAD + N_ARGS)
static coldef_t M_COLS[N_M] = {
    {"idx", T_I64}, {"ts", T_F64}, {"pid", T_I64}, {"pid_label", T_I32}, {"tid", T_I64}, {"tid_label", T_I32},
};
enum { FL_IDX, FL_TS, FL_CAT, FL_NAME, FL_ID, FL_PH, FL_PID, FL_PID_LABEL, FL_TID, FL_TID_LABEL, FL_BP, N_FL };
static const coldef_t FL_COLS[N_FL] = {
    {"idx", T_I64}, {"ts", T_F64}, {"cat", T_I32}, {"name", T_I32}, {"id", T_I64}, {"ph", T_I32},
    {"pid", T_I64}, {"pid_label", T_I32}, {"tid", T_I64}, {"tid_label", T_I32}, {"bp", T_I32},
};
/* M events: the head, then one slot per names arg (its raw value's table index) */
enum { MD_PID, MD_PID_LABEL, MD_TID, MD_TID_LABEL, MD_NAME, MD_HEAD };
#define N_MD (MD_HEAD + N_ARGS)
static coldef_t MD_COLS[N_MD] = {
    {"pid", T_I64}, {"pid_label", T_I32}, {"tid", T_I64}, {"tid_label", T_I32}, {"name", T_I32},
};
enum { U_PH, N_U };
static const coldef_t U_COLS[N_U] = {{"ph", T_I32}};
static const coldef_t PIECE_COLS[1] = {{"first_start_end", T_I64}};

/* ------------------------------------------------------------------ the parser */
typedef struct {
    const char *base;
    size_t pos, end;
    const char *why; /* the reason to decline, NULL while all is well */
    table_t table;
    buf_t x[N_X], m[N_M], fl[N_FL], md[N_MD], u[N_U];
    int x_active[N_X]; /* arg columns of complete events: stored from the first row with a value */
    uint64_t x_active_args; /* bit k: a column of arg k is stored */
    int32_t last_text[N_FIELDS + N_ARGS]; /* per event key (fields, then args): the table index of its last text, -1 */
    int64_t x_rows;
    buf_t pieces; /* (first event, start, end) int64 triples: byte ranges of about piece_bytes of whole events */
    int64_t entries, max_events;
    size_t piece_bytes, last_end;
    int n_pairs;
    int pairs[N_ARGS][2]; /* (lead, follower) args: the follower is read only where its lead is present */
    int bare;             /* the buffer holds the array's events without its brackets (a piece of it) */
} parser_t;

#define DECLINE(P, WHY)          \
    do {                         \
        if (!(P)->why) (P)->why = (WHY); \
        return -1;               \
    } while (0)

/* 8 bytes at a time where the byte order allows (the first byte in memory is the word's lowest) */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define SWAR 1
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
/* a byte's high bit set where the byte of w is 0: exact for the lowest such byte (the borrow only runs
 * upwards from a zero byte) */
#define ZERO_BYTES(w) (((w) - ONES) & ~(w) & HIGHS)
#else
#define SWAR 0
#endif

static inline void skip_ws(parser_t *p) {
    while (p->pos < p->end) {
        char c = p->base[p->pos];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
            p->pos++;
        else
            break;
    }
}

static inline int peek(parser_t *p) { return p->pos < p->end ? (unsigned char)p->base[p->pos] : -1; }

static unsigned char PLAIN[256]; /* 1 for the bytes a string holds as they are: 0x20..0x7f but '"' and '\\' */

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* parse_string from pos, inside the string that opens at start (the bytes between are plain) */
static int parse_string_rest(parser_t *p, size_t start, size_t *off, size_t *len, int *escaped) {
    const unsigned char *s = (const unsigned char *)p->base;
    while (p->pos < p->end) {
        /* plain ASCII runs first: printable, not a quote or a backslash */
        while (p->pos < p->end && PLAIN[s[p->pos]]) p->pos++;
        if (p->pos >= p->end) break;
        unsigned char c = s[p->pos];
        if (c == '"') {
            p->pos++;
            *off = start;
            *len = p->pos - start;
            return 0;
        }
        if (c < 0x20) DECLINE(p, "a control character in a string");
        if (c == '\\') {
            *escaped = 1;
            if (p->pos + 1 >= p->end) break;
            unsigned char e = s[p->pos + 1];
            if (e == 'u') {
                if (p->pos + 6 > p->end) break;
                int v = 0;
                for (int k = 2; k < 6; k++) {
                    int h = hexval(s[p->pos + k]);
                    if (h < 0) DECLINE(p, "an invalid \\u escape");
                    v = v * 16 + h;
                }
                if (v >= 0xD800 && v <= 0xDFFF) DECLINE(p, "an escaped surrogate");
                p->pos += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0) DECLINE(p, "an invalid escape");
            p->pos += 2;
            continue;
        }
        if (c < 0x80) {
            p->pos++;
            continue;
        }
        /* UTF-8: well-formed sequences only (no overlong forms, no surrogates, at most U+10FFFF) */
        size_t need;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            cp = c & 0x07;
        } else {
            DECLINE(p, "invalid UTF-8");
        }
        if (p->pos + need >= p->end) break;
        for (size_t k = 1; k <= need; k++) {
            unsigned char cc = s[p->pos + k];
            if ((cc & 0xC0) != 0x80) DECLINE(p, "invalid UTF-8");
            cp = (cp << 6) | (cc & 0x3F);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            DECLINE(p, "invalid UTF-8");
        p->pos += need + 1;
    }
    DECLINE(p, "a truncated string");
}

/* a string literal at pos (strict: valid escapes, no control characters, valid UTF-8, no escaped
 * surrogates); its raw text, quotes included, at off and len. Plain ASCII strings end here, the rest
 * (escapes, UTF-8, the last bytes of the buffer) in parse_string_rest */
static inline int parse_string(parser_t *p, size_t *off, size_t *len, int *escaped) {
    const unsigned char *s = (const unsigned char *)p->base;
    size_t i = p->pos, end = p->end;
    if (i >= end || s[i] != '"') DECLINE(p, "a string expected");
    size_t start = i++;
    *escaped = 0;
#if SWAR
    /* 8 bytes a round to the first that is not plain: '"', '\\', < 0x20 or >= 0x80 */
    while (i + 8 <= end) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        uint64_t q = w ^ 0x2222222222222222ULL, b = w ^ 0x5C5C5C5C5C5C5C5CULL;
        uint64_t m = ZERO_BYTES(q) | ZERO_BYTES(b) | ((((w - 0x2020202020202020ULL) & ~w) | w) & HIGHS);
        if (m) {
            i += (size_t)ctz64(m) >> 3;
            if (s[i] == '"') {
                p->pos = i + 1;
                *off = start;
                *len = i + 1 - start;
                return 0;
            }
            break;
        }
        i += 8;
    }
#endif
    p->pos = i;
    return parse_string_rest(p, start, off, len, escaped);
}

/* a number at pos (strict JSON grammar): an int64 (V_INT), a bigger integer (V_BIG) or a float; one pass
 * validates it and gathers its digits (the decimal point left out) */
static int parse_number(parser_t *p, val_t *v) {
    const char *s = p->base;
    size_t start = p->pos, i = p->pos, end = p->end;
    int neg = 0, is_float = 0, has_exp = 0;
    size_t digits = 0, frac = 0;
    uint64_t m = 0; /* the digits as an integer: exact while digits <= 19 */
    if (i < end && s[i] == '-') {
        neg = 1;
        i++;
    }
    if (i >= end) DECLINE(p, "a truncated number");
    if (s[i] == '0') {
        i++;
        digits = 1;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < end && s[i] >= '0' && s[i] <= '9') {
            m = m * 10 + (uint64_t)(s[i] - '0');
            digits++;
            i++;
        }
    } else {
        DECLINE(p, "an invalid number");
    }
    size_t int_end = i;
    if (i < end && s[i] == '.') {
        is_float = 1;
        i++;
        size_t d = i;
        while (i < end && s[i] >= '0' && s[i] <= '9') {
            m = m * 10 + (uint64_t)(s[i] - '0');
            i++;
        }
        if (i == d) DECLINE(p, "an invalid number");
        frac = i - d;
        digits += frac;
    }
    if (i < end && (s[i] == 'e' || s[i] == 'E')) {
        is_float = has_exp = 1;
        i++;
        if (i < end && (s[i] == '+' || s[i] == '-')) i++;
        size_t d = i;
        while (i < end && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) DECLINE(p, "an invalid number");
    }
    if (i >= end) DECLINE(p, "a truncated number");
    p->pos = i;
    v->off = start;
    v->len = i - start;
    if (!is_float) {
        if (digits <= 18) { /* below 10**18: an int64 */
            v->kind = V_INT;
            v->i = neg ? -(int64_t)m : (int64_t)m;
            v->d = (double)v->i; /* round to nearest even, as Python's float(int) */
            return 0;
        }
        uint64_t acc = 0;
        int big = 0;
        for (size_t k = start + neg; k < int_end; k++) {
            unsigned d = (unsigned)(s[k] - '0');
            if (acc > (UINT64_MAX - d) / 10) {
                big = 1;
                break;
            }
            acc = acc * 10 + d;
        }
        if (big || (!neg && acc > (uint64_t)INT64_MAX) || (neg && acc > (uint64_t)INT64_MAX + 1)) {
            v->kind = V_BIG;
            return 0;
        }
        v->kind = V_INT;
        v->i = neg ? (int64_t)(0 - acc) : (int64_t)acc;
        v->d = (double)v->i; /* round to nearest even, as Python's float(int) */
        return 0;
    }
    /* no exponent and digits that make at most 2**53: digits / 10**k, both exact doubles, is the
     * correctly rounded value (one IEEE division) */
    if (!has_exp && digits <= 19 && m <= (1ULL << 53)) {
        static const double P10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13,
                                     1e14, 1e15, 1e16, 1e17, 1e18, 1e19};
        double d = (double)m / P10[frac];
        v->kind = V_FLOAT;
        v->d = neg ? -d : d;
        return 0;
    }
    if (v->len >= MAX_NUMBER_TEXT) DECLINE(p, "a number literal too long");
    char tmp[MAX_NUMBER_TEXT];
    memcpy(tmp, s + start, v->len);
    tmp[v->len] = 0;
    char *endp = NULL;
    double d = strtod(tmp, &endp);
    if (endp != tmp + v->len) DECLINE(p, "an invalid number");
    if (!isfinite(d)) DECLINE(p, "a number beyond the float range");
    v->kind = V_FLOAT;
    v->d = d;
    return 0;
}

static int match_literal(parser_t *p, const char *lit) {
    size_t n = strlen(lit);
    if (p->pos + n > p->end || memcmp(p->base + p->pos, lit, n) != 0) DECLINE(p, "invalid JSON");
    p->pos += n;
    return 0;
}

/* a number at pos validated and skipped, its value not made: the numbers parse_number cannot decline
 * (integers; no exponent and at most 19 digits) here, the others by parse_number */
static inline int skip_number(parser_t *p) {
    const char *s = p->base;
    size_t i = p->pos, end = p->end, digits = 0;
    if (i < end && s[i] == '-') i++;
    if (i >= end) DECLINE(p, "a truncated number");
    if (s[i] == '0') {
        i++;
        digits = 1;
    } else if (s[i] >= '1' && s[i] <= '9') {
        size_t d = i;
        while (i < end && s[i] >= '0' && s[i] <= '9') i++;
        digits = i - d;
    } else {
        DECLINE(p, "an invalid number");
    }
    if (i < end && s[i] == '.') {
        i++;
        size_t d = i;
        while (i < end && s[i] >= '0' && s[i] <= '9') i++;
        if (i == d) DECLINE(p, "an invalid number");
        digits += i - d;
        if (digits > 19) goto full;
    }
    if (i < end && (s[i] == 'e' || s[i] == 'E')) goto full;
    if (i >= end) DECLINE(p, "a truncated number");
    p->pos = i;
    return 0;
full: {
    val_t v;
    return parse_number(p, &v);
}
}

/* an array or object at pos (nested `depth` deep), validated and skipped: one loop over its values, the
 * closing bracket of each open container on a stack */
static int skip_container(parser_t *p, int depth) {
    char closers[MAX_DEPTH + 2];
    int top = 0; /* containers open */
    int c;
enter: /* at '{' or '[' */
    if (depth + top > MAX_DEPTH) DECLINE(p, "values nested too deeply");
    closers[top++] = p->base[p->pos++] == '{' ? '}' : ']';
    skip_ws(p);
    if (peek(p) == closers[top - 1]) {
        p->pos++;
        goto closed;
    }
element:
    if (closers[top - 1] == '}') {
        size_t off, len;
        int esc;
        if (parse_string(p, &off, &len, &esc)) return -1;
        skip_ws(p);
        if (peek(p) != ':') DECLINE(p, "invalid JSON (':' expected)");
        p->pos++;
        skip_ws(p);
    }
    c = peek(p);
    switch (c) {
        case '{':
        case '[':
            goto enter;
        case '"': {
            size_t off, len;
            int esc;
            if (parse_string(p, &off, &len, &esc)) return -1;
            break;
        }
        case 't':
            if (match_literal(p, "true")) return -1;
            break;
        case 'f':
            if (match_literal(p, "false")) return -1;
            break;
        case 'n':
            if (match_literal(p, "null")) return -1;
            break;
        default:
            if (!(c == '-' || (c >= '0' && c <= '9'))) DECLINE(p, "invalid JSON (a value expected)");
            if (skip_number(p)) return -1;
            break;
    }
after_value:
    skip_ws(p);
    c = peek(p);
    if (c == ',') {
        p->pos++;
        skip_ws(p);
        goto element;
    }
    if (c != closers[top - 1]) DECLINE(p, "invalid JSON (',' or a closing bracket expected)");
    p->pos++;
closed:
    if (--top == 0) return 0;
    goto after_value;
}

static int skip_value(parser_t *p, int depth) {
    int c = peek(p);
    size_t off, len;
    int esc;
    switch (c) {
        case '{':
        case '[':
            return skip_container(p, depth);
        case '"':
            return parse_string(p, &off, &len, &esc);
        case 't':
            return match_literal(p, "true");
        case 'f':
            return match_literal(p, "false");
        case 'n':
            return match_literal(p, "null");
        default:
            if (c == '-' || (c >= '0' && c <= '9')) return skip_number(p);
            DECLINE(p, "invalid JSON (a value expected)");
    }
}

/* any value at pos into *v; strings (and with `raw`, any value) get a table index */
static int parse_value(parser_t *p, val_t *v, int raw, int depth, int slot) {
    memset(v, 0, sizeof *v);
    v->s = -1;
    int c = peek(p);
    size_t start = p->pos;
    if (c == '"') {
        if (parse_string(p, &v->off, &v->len, &v->escaped)) return -1;
        v->kind = V_STR;
    } else if (c == 'n') {
        if (match_literal(p, "null")) return -1;
        v->kind = V_NULL;
        return 0;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        if (parse_number(p, v)) return -1;
        if (!raw) return 0;
    } else {
        if (skip_value(p, depth)) return -1;
        v->kind = V_OTHER;
        v->off = start;
        v->len = p->pos - start;
        if (!raw) return 0;
    }
    /* the text of this key in an earlier event, often the same (ph, cat): its index without the hash */
    int32_t last = p->last_text[slot];
    if (last >= 0) {
        const span_t *sp = (const span_t *)p->table.spans.data + last;
        if (sp->len == v->len && bytes_eq(p->base + sp->off, p->base + v->off, v->len)) {
            v->s = last;
            return 0;
        }
    }
    v->s = table_intern(&p->table, p->base, v->off, v->len);
    if (v->s < 0) DECLINE(p, "out of memory");
    p->last_text[slot] = v->s;
    return 0;
}

/* [x, y, z] of int32s at pos into v (V_TRIPLE), else the value skipped (V_BADTRIPLE) */
static int parse_triple(parser_t *p, val_t *v, int depth) {
    memset(v, 0, sizeof *v);
    v->s = -1;
    size_t start = p->pos;
    int c = peek(p);
    if (c == 'n') {
        if (match_literal(p, "null")) return -1;
        v->kind = V_NULL;
        return 0;
    }
    if (c == '[') {
        p->pos++;
        int k = 0;
        for (;; k++) {
            skip_ws(p);
            val_t e;
            int ec = peek(p);
            if (k >= 3 || !(ec == '-' || (ec >= '0' && ec <= '9'))) break;
            if (parse_number(p, &e)) return -1;
            if (e.kind != V_INT || e.i < INT32_MIN || e.i > INT32_MAX) break;
            v->xyz[k] = (int32_t)e.i;
            skip_ws(p);
            if (peek(p) == ',') {
                p->pos++;
                continue;
            }
            if (peek(p) == ']' && k == 2) {
                p->pos++;
                v->kind = V_TRIPLE;
                return 0;
            }
            break;
        }
        p->pos = start;
    }
    if (skip_value(p, depth)) return -1;
    v->kind = V_BADTRIPLE;
    return 0;
}

static size_t ARG_LEN[N_ARGS], FIELD_LEN[N_FIELDS];

/* the known keys found by a hash of (length, first byte, last byte): open addressing, index + 1 (0 = empty) */
#define KEY_SLOTS 256
#define KEY_UNESCAPED_MAX 64 /* bytes of an escaped key undone at most (known keys are shorter) */
static unsigned char ARG_SLOT[KEY_SLOTS], FIELD_SLOT[KEY_SLOTS];

static inline unsigned key_hash(const char *k, size_t n) {
    return ((unsigned)n * 37u + (unsigned char)k[0] * 11u + (unsigned char)k[n - 1]) & (KEY_SLOTS - 1);
}

static void key_table(unsigned char *slots, const char *const *keys, const size_t *lens, int n) {
    memset(slots, 0, KEY_SLOTS);
    for (int k = 0; k < n; k++) {
        unsigned h = key_hash(keys[k], lens[k]);
        while (slots[h]) h = (h + 1) & (KEY_SLOTS - 1);
        slots[h] = (unsigned char)(k + 1);
    }
}

/* the index of the key whose string literal (quotes included) is base[off:off+len], -1 when unknown */
static inline int key_lookup(const unsigned char *slots, const char *const *keys, const size_t *lens, const char *k,
                             size_t n) {
    for (unsigned h = key_hash(k, n); slots[h]; h = (h + 1) & (KEY_SLOTS - 1)) {
        int i = slots[h] - 1;
        if (lens[i] == n && bytes_eq(k, keys[i], n)) return i;
    }
    return -1;
}

/* the known key (index) that the key string at off, len (quotes included) names, -1 for none; with `escaped`,
 * its escapes are undone first (parse_string checked them), as a JSON decoder reads the key: known keys are
 * short ASCII, so a key that decodes longer or to other characters names none */
static inline int key_find(const parser_t *p, const unsigned char *slots, const char *const *keys, const size_t *lens,
                           size_t off, size_t len, int escaped) {
    if (len <= 2) return -1;
    const char *k = p->base + off + 1;
    size_t n = len - 2;
    if (!escaped) return key_lookup(slots, keys, lens, k, n);
    char buf[KEY_UNESCAPED_MAX];
    size_t m = 0;
    for (size_t i = 0; i < n; m++) {
        if (m == sizeof buf) return -1;
        unsigned char c = (unsigned char)k[i];
        if (c != '\\') {
            if (c >= 0x80) return -1;
            buf[m] = (char)c;
            i++;
            continue;
        }
        unsigned char e = (unsigned char)k[i + 1];
        if (e == 'u') {
            int v = 0;
            for (size_t q = 2; q < 6; q++) v = v * 16 + hexval((unsigned char)k[i + q]);
            if (v >= 0x80) return -1;
            buf[m] = (char)v;
            i += 6;
            continue;
        }
        buf[m] = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : (char)e;
        i += 2;
    }
    return m ? key_lookup(slots, keys, lens, buf, m) : -1;
}

static const char *ARG_KEYS[N_ARGS];

typedef struct {
    val_t f[N_FIELDS];
    val_t a[N_ARGS];
    int args_object;
    uint64_t amask; /* the args the event has (bit k: a[k] is not V_ABSENT) */
} event_t;

typedef char n_args_fit_a_mask[N_ARGS <= 64 ? 1 : -1];

/* bit k for each arg of the events group */
static uint64_t EVENT_ARGS_MASK;

/* a text of plain decimal digits in an integer arg ("4096"): the Python reader reads it as int() does */
static void digits_to_int(parser_t *p, val_t *v) {
    const char *t = p->base + v->off + 1;
    size_t n = v->len - 2, k = 0;
    int neg = 0;
    if (v->escaped || n == 0) return;
    if (t[0] == '-') {
        neg = 1;
        k = 1;
    }
    if (n - k == 0 || n - k > 18) return;
    int64_t acc = 0;
    for (; k < n; k++) {
        if (t[k] < '0' || t[k] > '9') return;
        acc = acc * 10 + (t[k] - '0');
    }
    v->kind = V_INT;
    v->i = neg ? -acc : acc;
    v->d = (double)v->i;
}

static int parse_args(parser_t *p, event_t *ev) {
    /* at '{' */
    p->pos++;
    ev->args_object = 1;
    skip_ws(p);
    if (peek(p) == '}') {
        p->pos++;
        return 0;
    }
    for (;;) {
        size_t off, len;
        int esc;
        if (parse_string(p, &off, &len, &esc)) return -1;
        skip_ws(p);
        if (peek(p) != ':') DECLINE(p, "invalid JSON (':' expected)");
        p->pos++;
        skip_ws(p);
        int which = key_find(p, ARG_SLOT, ARG_KEYS, ARG_LEN, off, len, esc);
        if (which < 0) {
            if (skip_value(p, 3)) return -1;
        } else {
            val_t *v = &ev->a[which];
            if (v->kind != V_ABSENT) DECLINE(p, "a repeated key in args");
            ev->amask |= (uint64_t)1 << which;
            int how = ARGS[which].how;
            int r = how == K_TRIPLE ? parse_triple(p, v, 3) : parse_value(p, v, how == K_RAW, 3, N_FIELDS + which);
            if (r) return -1;
            if (v->kind == V_ABSENT) v->kind = V_OTHER; /* never absent once seen */
            if ((how == K_INT || how == K_INT32) && v->kind == V_STR) digits_to_int(p, v);
        }
        skip_ws(p);
        int c = peek(p);
        if (c == ',') {
            p->pos++;
            skip_ws(p);
            continue;
        }
        if (c == '}') {
            p->pos++;
            return 0;
        }
        DECLINE(p, "invalid JSON in args");
    }
}

static int parse_event(parser_t *p, event_t *ev) {
    /* ev holds the previous event: only the args it had are reset */
    for (int k = 0; k < N_FIELDS; k++) ev->f[k].kind = V_ABSENT;
    for (uint64_t m = ev->amask; m; m &= m - 1) ev->a[ctz64(m)].kind = V_ABSENT;
    ev->amask = 0;
    ev->args_object = 0;
    if (peek(p) != '{') DECLINE(p, "an entry of traceEvents that is not an object");
    p->pos++;
    skip_ws(p);
    if (peek(p) == '}') {
        p->pos++;
        return 0;
    }
    for (;;) {
        size_t off, len;
        int esc;
        if (parse_string(p, &off, &len, &esc)) return -1;
        skip_ws(p);
        if (peek(p) != ':') DECLINE(p, "invalid JSON (':' expected)");
        p->pos++;
        skip_ws(p);
        int which = key_find(p, FIELD_SLOT, FIELDS, FIELD_LEN, off, len, esc);
        if (which < 0) {
            if (skip_value(p, 2)) return -1;
        } else {
            val_t *v = &ev->f[which];
            if (v->kind != V_ABSENT) DECLINE(p, "a repeated key in an event");
            if (which == F_ARGS) {
                if (peek(p) == '{') {
                    if (parse_args(p, ev)) return -1;
                    v->kind = V_OTHER;
                } else {
                    DECLINE(p, "args that is not an object");
                }
            } else {
                if (parse_value(p, v, 0, 2, which)) return -1;
            }
        }
        skip_ws(p);
        int c = peek(p);
        if (c == ',') {
            p->pos++;
            skip_ws(p);
            continue;
        }
        if (c == '}') {
            p->pos++;
            return 0;
        }
        DECLINE(p, "invalid JSON in an event");
    }
}

/* ------------------------------------------------------------------ events -> rows */
#define PUT(P, B, T, V)                                                                   \
    do {                                                                                  \
        buf_t *_b = &(B);                                                                 \
        if (_b->len + sizeof(T) > _b->cap && buf_grow(_b, sizeof(T))) DECLINE(P, "out of memory"); \
        *(T *)(void *)(_b->data + _b->len) = (V);                                         \
        _b->len += sizeof(T);                                                             \
    } while (0)

static const double MAX_US = 4611686018427387.904; /* 2**62 / 1000, as columns._MAX_US */

/* pid or tid: an int64, or a text label (its table index; the value 0 until Python codes it) */
static int put_label(parser_t *p, buf_t *value, buf_t *label, const val_t *v) {
    if (v->kind == V_INT) {
        PUT(p, *value, int64_t, v->i);
        PUT(p, *label, int32_t, -1);
        return 0;
    }
    if (v->kind == V_STR) {
        PUT(p, *value, int64_t, 0);
        PUT(p, *label, int32_t, v->s);
        return 0;
    }
    DECLINE(p, "a pid or tid that is not an integer or a text");
}

static int ts_of(parser_t *p, const val_t *v, double *out) {
    if (v->kind != V_INT && v->kind != V_FLOAT) DECLINE(p, "a ts that is not a number");
    if (!(fabs(v->d) < MAX_US)) DECLINE(p, "a ts beyond the int64 ns range");
    *out = v->d;
    return 0;
}

/* a text field (cat, name, bp): a string's table index, -1 when absent or null */
static int text_of(parser_t *p, const val_t *v, int32_t *out) {
    if (v->kind == V_ABSENT || v->kind == V_NULL) {
        *out = -1;
        return 0;
    }
    if (v->kind != V_STR) DECLINE(p, "a cat, name or bp that is not a text");
    *out = v->s;
    return 0;
}

static int int_arg(parser_t *p, const val_t *v, int64_t lo, int64_t hi, int64_t missing, int64_t *out) {
    if (v->kind == V_ABSENT || v->kind == V_NULL) {
        *out = missing;
        return 0;
    }
    if (v->kind != V_INT || v->i < lo || v->i > hi) DECLINE(p, "an integer arg of another type or range");
    *out = v->i;
    return 0;
}

/* absent, null, or an integer arg's missing value -1 */
static int arg_missing(const val_t *v, int k) {
    if (v->kind == V_ABSENT || v->kind == V_NULL) return 1;
    return (ARGS[k].how == K_INT || ARGS[k].how == K_INT32) && v->kind == V_INT && v->i == -1;
}

/* every known arg of the event checked for its type, whatever the event's phase */
static int check_args(parser_t *p, const event_t *ev) {
    for (uint64_t m = ev->amask; m; m &= m - 1) {
        int k = ctz64(m);
        const val_t *v = &ev->a[k];
        if (v->kind == V_ABSENT || v->kind == V_NULL) continue;
        switch (ARGS[k].how) {
            case K_INT:
                if (v->kind != V_INT) DECLINE(p, "an integer arg of another type");
                break;
            case K_INT32:
                if (v->kind != V_INT || v->i < INT32_MIN || v->i > INT32_MAX)
                    DECLINE(p, "an int32 arg of another type or range");
                break;
            case K_FLOAT:
                if (v->kind != V_INT && v->kind != V_FLOAT) DECLINE(p, "a float arg of another type");
                break;
            case K_STR:
                if (v->kind != V_STR) DECLINE(p, "a text arg of another type");
                break;
            case K_TRIPLE:
                if (v->kind != V_TRIPLE) DECLINE(p, "a grid or block that is not 3 int32s");
                break;
            default:
                break;
        }
    }
    /* an arg the Python reader reads only where its lead arg is in the same piece of events */
    for (int k = 0; k < p->n_pairs; k++) {
        int lead = p->pairs[k][0], follower = p->pairs[k][1];
        if (!((ev->amask >> follower) & 1)) continue; /* an absent follower is missing */
        if (arg_missing(&ev->a[lead], lead) && !arg_missing(&ev->a[follower], follower))
            DECLINE(p, "an arg without the arg Kineto writes it with");
    }
    return 0;
}

static int64_t ival(const val_t *v, int64_t missing) { return v->kind == V_INT ? v->i : missing; }
static double fval(const val_t *v) { return (v->kind == V_INT || v->kind == V_FLOAT) ? v->d : NAN; }
static int32_t sval(const val_t *v) { return (v->kind == V_ABSENT || v->kind == V_NULL) ? -1 : v->s; }

/* an arg column's value for the current complete event: nothing stored while the column has only
 * missing values, the missing value of the earlier rows written when its first value comes */
static inline int put_opt(parser_t *p, int k, const void *value, const void *missing, size_t size) {
    buf_t *b = &p->x[k];
    if (!p->x_active[k]) {
        if (memcmp(value, missing, size) == 0) return 0;
        size_t rows = (size_t)p->x_rows;
        if (rows && buf_grow(b, rows * size)) DECLINE(p, "out of memory");
        for (size_t r = 0; r < rows; r++) memcpy(b->data + r * size, missing, size);
        b->len = rows * size;
        p->x_active[k] = 1;
        p->x_active_args |= (uint64_t)1 << ((k - X_HEAD) / 3);
    }
    if (buf_push(b, value, size)) DECLINE(p, "out of memory");
    return 0;
}

#define OPT(K, T, V, MISSING)                                                     \
    do {                                                                          \
        T _v = (V), _m = (MISSING);                                               \
        if (put_opt(p, (K), &_v, &_m, sizeof(T))) return -1;                      \
    } while (0)

static int emit_complete(parser_t *p, const event_t *ev, int64_t idx) {
    const val_t *f = ev->f, *a = ev->a;
    double ts, dur = NAN;
    int32_t cat, name;
    if (ts_of(p, &f[F_TS], &ts) || text_of(p, &f[F_CAT], &cat) || text_of(p, &f[F_NAME], &name)) return -1;
    if (f[F_DUR].kind == V_INT || f[F_DUR].kind == V_FLOAT) {
        dur = f[F_DUR].d;
        if (!(fabs(dur) < MAX_US)) DECLINE(p, "a dur beyond the int64 ns range");
    } else if (f[F_DUR].kind != V_ABSENT && f[F_DUR].kind != V_NULL) {
        DECLINE(p, "a dur that is not a number");
    }
    buf_t *x = p->x;
    PUT(p, x[X_IDX], int64_t, idx);
    PUT(p, x[X_TS], double, ts);
    PUT(p, x[X_DUR], double, dur);
    PUT(p, x[X_CAT], int32_t, cat);
    PUT(p, x[X_NAME], int32_t, name);
    if (put_label(p, &x[X_PID], &x[X_PID_LABEL], &f[F_PID])) return -1;
    if (put_label(p, &x[X_TID], &x[X_TID_LABEL], &f[F_TID])) return -1;
    /* only the args the event has or whose columns are stored: put_opt stores nothing for the others */
    for (uint64_t m = (ev->amask | p->x_active_args) & EVENT_ARGS_MASK; m; m &= m - 1) {
        int k = ctz64(m);
        const val_t *v = &a[k];
        int at = X_HEAD + 3 * k;
        switch (ARGS[k].how) {
            case K_INT:
                OPT(at, int64_t, ival(v, -1), -1);
                break;
            case K_INT32:
                OPT(at, int32_t, (int32_t)ival(v, -1), -1);
                break;
            case K_FLOAT:
                OPT(at, double, fval(v), NAN);
                break;
            case K_TRIPLE:
                for (int j = 0; j < 3; j++) OPT(at + j, int32_t, v->kind == V_TRIPLE ? v->xyz[j] : 0, 0);
                break;
            default: /* K_STR, K_RAW */
                OPT(at, int32_t, sval(v), -1);
                break;
        }
    }
    p->x_rows++;
    return 0;
}

static int emit_memory(parser_t *p, const event_t *ev, int64_t idx) {
    const val_t *f = ev->f, *a = ev->a;
    double ts;
    if (ts_of(p, &f[F_TS], &ts)) return -1;
    buf_t *m = p->m;
    PUT(p, m[M_IDX], int64_t, idx);
    PUT(p, m[M_TS], double, ts);
    if (put_label(p, &m[M_PID], &m[M_PID_LABEL], &f[F_PID])) return -1;
    if (put_label(p, &m[M_TID], &m[M_TID_LABEL], &f[F_TID])) return -1;
    for (int k = 0; k < N_ARGS; k++) {
        if (ARGS[k].group != G_MEMORY) continue;
        int64_t v;
        if (ARGS[k].how != K_INT) DECLINE(p, "a memory arg that is not an integer");
        if (int_arg(p, &a[k], INT64_MIN, INT64_MAX, -1, &v)) return -1;
        PUT(p, m[M_HEAD + k], int64_t, v);
    }
    return 0;
}

static int emit_flow(parser_t *p, const event_t *ev, int64_t idx) {
    const val_t *f = ev->f;
    double ts;
    int32_t cat, name, bp;
    int64_t id;
    if (ts_of(p, &f[F_TS], &ts) || text_of(p, &f[F_CAT], &cat) || text_of(p, &f[F_NAME], &name) ||
        text_of(p, &f[F_BP], &bp))
        return -1;
    if (int_arg(p, &f[F_ID], INT64_MIN, INT64_MAX, -1, &id)) return -1;
    buf_t *fl = p->fl;
    PUT(p, fl[FL_IDX], int64_t, idx);
    PUT(p, fl[FL_TS], double, ts);
    PUT(p, fl[FL_CAT], int32_t, cat);
    PUT(p, fl[FL_NAME], int32_t, name);
    PUT(p, fl[FL_ID], int64_t, id);
    PUT(p, fl[FL_PH], int32_t, f[F_PH].s);
    if (put_label(p, &fl[FL_PID], &fl[FL_PID_LABEL], &f[F_PID])) return -1;
    if (put_label(p, &fl[FL_TID], &fl[FL_TID_LABEL], &f[F_TID])) return -1;
    PUT(p, fl[FL_BP], int32_t, bp);
    return 0;
}

static int emit_metadata(parser_t *p, const event_t *ev) {
    const val_t *f = ev->f, *a = ev->a;
    int32_t name;
    if (text_of(p, &f[F_NAME], &name)) return -1;
    buf_t *md = p->md;
    if (put_label(p, &md[MD_PID], &md[MD_PID_LABEL], &f[F_PID])) return -1;
    if (put_label(p, &md[MD_TID], &md[MD_TID_LABEL], &f[F_TID])) return -1;
    PUT(p, md[MD_NAME], int32_t, name);
    for (int k = 0; k < N_ARGS; k++)
        if (ARGS[k].group == G_NAMES) PUT(p, md[MD_HEAD + k], int32_t, sval(&a[k]));
    return 0;
}

static int emit(parser_t *p, const event_t *ev, int64_t idx) {
    const val_t *ph = &ev->f[F_PH];
    if (ph->kind != V_STR || ph->escaped) DECLINE(p, "an event without a plain text ph");
    if (check_args(p, ev)) return -1;
    const char *t = p->base + ph->off + 1;
    size_t n = ph->len - 2;
    if (n == 1 && t[0] == 'X') return emit_complete(p, ev, idx);
    if (n == 1 && (t[0] == 'i' || t[0] == 'I')) {
        const val_t *name = &ev->f[F_NAME];
        if (name->kind == V_STR && name->escaped) DECLINE(p, "an instant with an escaped name");
        if (name->kind == V_STR && name->len == 10 && memcmp(p->base + name->off, "\"[memory]\"", 10) == 0)
            return emit_memory(p, ev, idx);
        return 0; /* other instants make no rows */
    }
    if (n == 1 && (t[0] == 's' || t[0] == 'f' || t[0] == 't')) return emit_flow(p, ev, idx);
    if (n == 1 && t[0] == 'M') return emit_metadata(p, ev);
    PUT(p, p->u[U_PH], int32_t, ph->s);
    return 0;
}

/* the whole buffer: one JSON array of events, then only whitespace; or, bare, the events of a piece of
 * one (comma-separated, no brackets), the last one ending the buffer */
static int parse_all(parser_t *p) {
    skip_ws(p);
    if (!p->bare) {
        if (peek(p) != '[') DECLINE(p, "traceEvents is not an array");
        p->pos++;
        skip_ws(p);
    }
    if (peek(p) == (p->bare ? -1 : ']')) {
        if (!p->bare) p->pos++;
    } else {
        int64_t piece_first = 0;
        size_t piece_start = p->pos;
        event_t ev;
        memset(&ev, 0, sizeof ev); /* every kind V_ABSENT */
        for (;;) {
            if (++p->entries > p->max_events) DECLINE(p, "more events than the memory budget holds");
            size_t at = p->pos;
            if (p->entries - 1 > piece_first && at - piece_start >= p->piece_bytes) {
                int64_t piece[3] = {piece_first, (int64_t)piece_start, (int64_t)p->last_end};
                if (buf_push(&p->pieces, piece, sizeof piece)) DECLINE(p, "out of memory");
                piece_first = p->entries - 1;
                piece_start = at;
            }
            if (parse_event(p, &ev)) return -1;
            p->last_end = p->pos;
            if (emit(p, &ev, p->entries - 1)) return -1;
            skip_ws(p);
            int c = peek(p);
            if (c == ',') {
                p->pos++;
                skip_ws(p);
                continue;
            }
            if (c == (p->bare ? -1 : ']')) {
                if (!p->bare) p->pos++;
                int64_t piece[3] = {piece_first, (int64_t)piece_start, (int64_t)p->last_end};
                if (buf_push(&p->pieces, piece, sizeof piece)) DECLINE(p, "out of memory");
                break;
            }
            DECLINE(p, "invalid JSON between events");
        }
    }
    skip_ws(p);
    if (p->pos != p->end) DECLINE(p, "text after the events array");
    return 0;
}

/* ------------------------------------------------------------------ Python side */
static void parser_free(parser_t *p) {
    buf_t *groups[] = {p->x, p->m, p->fl, p->md, p->u};
    int sizes[] = {N_X, N_M, N_FL, N_MD, N_U};
    for (int g = 0; g < 5; g++)
        for (int k = 0; k < sizes[g]; k++) free(groups[g][k].data);
    free(p->table.spans.data);
    free(p->table.slots);
    free(p->pieces.data);
}

/* a column's memory handed to Python as it is (a writable buffer freed with the object): no copy */
typedef struct {
    PyObject_HEAD char *data;
    Py_ssize_t len;
} Block;

static int block_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Block *b = (Block *)self;
    return PyBuffer_FillInfo(view, self, b->data, b->len, 0, flags);
}

static void block_dealloc(PyObject *self) {
    free(((Block *)self)->data);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs block_as_buffer = {block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "profiler_core.trace.read._native.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "the memory of one column (a writable buffer)",
};

/* a Block owning b's memory (b is left empty) */
static PyObject *block_of(buf_t *b) {
    Block *o = PyObject_New(Block, &BlockType);
    if (!o) return NULL;
    char *data = b->data;
    if (!data || b->len == 0) {
        free(data);
        data = malloc(1);
        if (!data) {
            o->data = NULL;
            Py_DECREF(o);
            return PyErr_NoMemory();
        }
    } else if (b->len < b->cap) {
        char *shrunk = realloc(data, b->len); /* give back the growth slack */
        if (shrunk) data = shrunk;
    }
    o->data = data;
    o->len = (Py_ssize_t)b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)o;
}

static PyObject *columns_dict(buf_t *bufs, const coldef_t *defs, int n) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int k = 0; k < n; k++) {
        if (!defs[k].name) continue; /* a slot no arg uses */
        PyObject *b = block_of(&bufs[k]);
        if (!b || PyDict_SetItemString(d, defs[k].name, b) < 0) {
            Py_XDECREF(b);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(b);
    }
    return d;
}

/* the index of a known key, -1 when the scan does not know it */
static int arg_index(const char *key) {
    for (int k = 0; k < N_ARGS; k++)
        if (strcmp(ARGS[k].key, key) == 0) return k;
    return -1;
}

/* p->pairs from a sequence of (lead key, follower key); NULL, or why the scan cannot honour them */
static const char *set_pairs(parser_t *p, PyObject *pairs) {
    PyObject *seq = PySequence_Fast(pairs, "pairs must be a sequence of (lead key, follower key)");
    if (!seq) return "pairs";
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char *why = NULL;
    if (n > N_ARGS) why = "more arg pairs than the scan holds";
    for (Py_ssize_t i = 0; !why && i < n; i++) {
        const char *lead, *follower;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ss", &lead, &follower)) {
            why = "pairs";
            break;
        }
        int a = arg_index(lead), b = arg_index(follower);
        if (a < 0 || b < 0) {
            why = "an arg pair of a key the scan does not know";
            break;
        }
        p->pairs[i][0] = a;
        p->pairs[i][1] = b;
        p->n_pairs = (int)i + 1;
    }
    Py_DECREF(seq);
    return why;
}

static PyObject *parse_events(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    long long max_events;
    Py_ssize_t piece_bytes;
    PyObject *pairs;
    int bare = 0;
    if (!PyArg_ParseTuple(args, "y*LnO|p", &view, &max_events, &piece_bytes, &pairs, &bare)) return NULL;
    struct lconv *lc = localeconv();
    if (!lc || strcmp(lc->decimal_point, ".") != 0) {
        PyBuffer_Release(&view);
        return PyUnicode_FromString("a locale whose decimal point is not '.'");
    }
    parser_t *p = calloc(1, sizeof(parser_t));
    if (!p) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    p->base = view.buf;
    p->end = (size_t)view.len;
    p->max_events = max_events;
    p->bare = bare;
    for (int k = 0; k < N_FIELDS + N_ARGS; k++) p->last_text[k] = -1;
    p->piece_bytes = piece_bytes > 0 ? (size_t)piece_bytes : 1;
    const char *bad_pairs = set_pairs(p, pairs);
    if (bad_pairs) {
        free(p);
        PyBuffer_Release(&view);
        return PyErr_Occurred() ? NULL : PyUnicode_FromString(bad_pairs);
    }
    Py_BEGIN_ALLOW_THREADS;
    parse_all(p);
    Py_END_ALLOW_THREADS;
    PyObject *out = NULL;
    if (p->why) {
        out = PyUnicode_FromString(p->why);
        goto done;
    }
    out = PyDict_New();
    if (!out) goto done;
    struct {
        const char *key;
        buf_t *bufs;
        const coldef_t *defs;
        int n;
    } groups[] = {{"complete", p->x, X_COLS, N_X}, {"memory", p->m, M_COLS, N_M}, {"flows", p->fl, FL_COLS, N_FL},
                  {"metadata", p->md, MD_COLS, N_MD}, {"unsupported", p->u, U_COLS, N_U},
                  {"pieces", &p->pieces, PIECE_COLS, 1}};
    for (size_t g = 0; g < sizeof groups / sizeof groups[0]; g++) {
        PyObject *d = columns_dict(groups[g].bufs, groups[g].defs, groups[g].n);
        if (!d || PyDict_SetItemString(out, groups[g].key, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(d);
    }
    size_t count = p->table.count;
    PyObject *texts = PyList_New((Py_ssize_t)count);
    if (!texts) {
        Py_CLEAR(out);
        goto done;
    }
    span_t *spans = (span_t *)p->table.spans.data;
    for (size_t k = 0; k < count; k++) {
        PyObject *b = PyBytes_FromStringAndSize(p->base + spans[k].off, (Py_ssize_t)spans[k].len);
        if (!b) {
            Py_DECREF(texts);
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(texts, (Py_ssize_t)k, b);
    }
    PyObject *entries = PyLong_FromLongLong(p->entries);
    if (!entries || PyDict_SetItemString(out, "texts", texts) < 0 || PyDict_SetItemString(out, "entries", entries) < 0)
        Py_CLEAR(out);
    Py_DECREF(texts);
    Py_XDECREF(entries);
done:
    parser_free(p);
    free(p);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"parse_events", parse_events, METH_VARARGS,
     "parse_events(buffer, max_events, piece_bytes, pairs, bare=False) -> dict of column buffers, texts and "
     "pieces, or a str: why it declined. pairs: (lead key, follower key) of args read only together; bare: the "
     "buffer holds events of the array without its brackets"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "The native trace reader (see native.py).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__native(void) {
    for (int k = 0; k < N_ARGS; k++) ARG_LEN[k] = strlen(ARGS[k].key);
    for (int c = 0x20; c < 0x80; c++) PLAIN[c] = c != '"' && c != '\\';
    for (int k = 0; k < N_FIELDS; k++) FIELD_LEN[k] = strlen(FIELDS[k]);
    for (int k = 0; k < N_ARGS; k++) ARG_KEYS[k] = ARGS[k].key;
    EVENT_ARGS_MASK = 0;
    for (int k = 0; k < N_ARGS; k++)
        if (ARGS[k].group == G_EVENTS) EVENT_ARGS_MASK |= (uint64_t)1 << k;
    key_table(ARG_SLOT, ARG_KEYS, ARG_LEN, N_ARGS);
    key_table(FIELD_SLOT, FIELDS, FIELD_LEN, N_FIELDS);
    for (int k = 0; k < N_ARGS; k++) {
        int t = ARGS[k].how == K_FLOAT ? T_F64 : ARGS[k].how == K_INT ? T_I64 : T_I32;
        if (ARGS[k].group == G_EVENTS) {
            int n = ARGS[k].how == K_TRIPLE ? 3 : 1;
            for (int j = 0; j < n; j++) {
                if (n == 3)
                    snprintf(ARG_COLS[k][j], sizeof ARG_COLS[k][j], "args.%s_%c", ARGS[k].key, "xyz"[j]);
                else
                    snprintf(ARG_COLS[k][j], sizeof ARG_COLS[k][j], "args.%s", ARGS[k].key);
                X_COLS[X_HEAD + 3 * k + j] = (coldef_t){ARG_COLS[k][j], t};
            }
        } else {
            snprintf(ARG_COLS[k][0], sizeof ARG_COLS[k][0], "args.%s", ARGS[k].key);
            if (ARGS[k].group == G_MEMORY)
                M_COLS[M_HEAD + k] = (coldef_t){ARG_COLS[k][0], T_I64};
            else
                MD_COLS[MD_HEAD + k] = (coldef_t){ARG_COLS[k][0], T_I32};
        }
    }
    if (PyType_Ready(&BlockType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    /* KEYS: (key, how it is kept, the group of events that carries it) of every arg the scan knows */
    PyObject *keys = PyTuple_New(N_ARGS);
    if (!keys) {
        Py_DECREF(m);
        return NULL;
    }
    for (int k = 0; k < N_ARGS; k++) {
        PyObject *row = Py_BuildValue("(sss)", ARGS[k].key, HOW_NAME[ARGS[k].how], GROUP_NAME[ARGS[k].group]);
        if (!row) {
            Py_DECREF(keys);
            Py_DECREF(m);
            return NULL;
        }
        PyTuple_SET_ITEM(keys, k, row);
    }
    if (PyModule_AddObject(m, "KEYS", keys) < 0) {
        Py_DECREF(keys);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
