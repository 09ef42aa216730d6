/* The op tree's nesting pass in C (optional; op_tree.py's numpy code is the reference and the fallback).

   depths(group, start, end, depth, candidate) -> bool, over the nodes in tree order (group codes ascending,
   then start ascending within a group):
     depth[i]     = how many earlier nodes of i's group are still open at start[i] (end[j] > start[i]);
     candidate[i] = the last earlier node (of any group) whose depth is depth[i] - 1, else -1.
   These are the numbers op_tree.py counts with searches and level passes; it repairs and merges from them
   alike. group, depth and candidate are all int32 or all int64; start and end int64. Returns False, writing
   nothing further, when the nodes are not in tree order (the caller then counts in numpy).

   pair_codes(pid, tid, codes): codes[i] = the rank of (pid[i], tid[i]) among the distinct pairs in (pid, tid)
   order (int64 arrays), as op_tree.group_codes numbers threads; one pass with a hash table of the pairs.

   Both loops run without the GIL. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    int64_t *v;
    size_t n, cap;
} heap_t;

static int heap_push(heap_t *h, int64_t x) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        int64_t *v = realloc(h->v, cap * sizeof *v);
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (h->v[up] <= x) break;
        h->v[i] = h->v[up];
        i = up;
    }
    h->v[i] = x;
    return 0;
}

static void heap_pop(heap_t *h) {
    int64_t x = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h->v[c + 1] < h->v[c]) c++;
        if (h->v[c] >= x) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n) h->v[i] = x;
}

/* 1: done; 0: not in tree order; -1: out of memory */
#define DEPTHS(T)                                                                                              \
    static int depths_##T(const T *grp, const int64_t *start, const int64_t *end, T *depth, T *cand,           \
                          Py_ssize_t n) {                                                                      \
        heap_t h = {0};                                                                                        \
        Py_ssize_t *last = NULL, cap = 0;                                                                      \
        int ok = 1;                                                                                            \
        for (Py_ssize_t i = 0; i < n; i++) {                                                                   \
            if (i > 0) {                                                                                       \
                if (grp[i] != grp[i - 1]) {                                                                    \
                    if (grp[i] < grp[i - 1]) {                                                                 \
                        ok = 0;                                                                                \
                        break;                                                                                 \
                    }                                                                                          \
                    h.n = 0;                                                                                   \
                } else if (start[i] < start[i - 1]) {                                                          \
                    ok = 0;                                                                                    \
                    break;                                                                                     \
                }                                                                                              \
            }                                                                                                  \
            while (h.n > 0 && h.v[0] <= start[i]) heap_pop(&h);                                                \
            Py_ssize_t d = (Py_ssize_t)h.n;                                                                    \
            if (d >= cap) {                                                                                    \
                Py_ssize_t ncap = cap ? 2 * cap : 64;                                                          \
                while (ncap <= d) ncap *= 2;                                                                   \
                Py_ssize_t *nl = realloc(last, (size_t)ncap * sizeof *nl);                                     \
                if (!nl) {                                                                                     \
                    ok = -1;                                                                                   \
                    break;                                                                                     \
                }                                                                                              \
                for (Py_ssize_t k = cap; k < ncap; k++) nl[k] = -1;                                            \
                last = nl;                                                                                     \
                cap = ncap;                                                                                    \
            }                                                                                                  \
            depth[i] = (T)d;                                                                                   \
            cand[i] = (T)(d > 0 ? last[d - 1] : -1);                                                           \
            last[d] = i;                                                                                       \
            if (heap_push(&h, end[i]) < 0) {                                                                   \
                ok = -1;                                                                                       \
                break;                                                                                         \
            }                                                                                                  \
        }                                                                                                      \
        free(h.v);                                                                                             \
        free(last);                                                                                            \
        return ok;                                                                                             \
    }

DEPTHS(int32_t)
DEPTHS(int64_t)

static int get(PyObject *o, Py_buffer *b, int writable, Py_ssize_t item, const char *name) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (b->itemsize != item || b->len % item != 0) {
        PyErr_Format(PyExc_ValueError, "%s must hold items of %zd bytes", name, item);
        PyBuffer_Release(b);
        return -1;
    }
    return 0;
}

static PyObject *depths(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    Py_buffer b[5];
    int got = 0;
    PyObject *out = NULL;
    Py_buffer probe;
    if (PyObject_GetBuffer(o[0], &probe, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    Py_ssize_t small = probe.itemsize;
    PyBuffer_Release(&probe);
    if (small != 4 && small != 8) {
        PyErr_SetString(PyExc_ValueError, "depths: group must be int32 or int64");
        return NULL;
    }
    const Py_ssize_t items[5] = {small, 8, 8, small, small};
    const char *names[5] = {"group", "start", "end", "depth", "candidate"};
    for (; got < 5; got++)
        if (get(o[got], &b[got], got >= 3, items[got], names[got]) < 0) goto done;
    Py_ssize_t n = b[0].len / small;
    for (int k = 1; k < 5; k++)
        if (b[k].len / items[k] != n) {
            PyErr_SetString(PyExc_ValueError, "depths: arrays of different lengths");
            goto done;
        }
    int r;
    Py_BEGIN_ALLOW_THREADS;
    if (small == 4)
        r = depths_int32_t(b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, n);
    else
        r = depths_int64_t(b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, n);
    Py_END_ALLOW_THREADS;
    if (r < 0)
        PyErr_NoMemory();
    else
        out = PyBool_FromLong(r);
done:
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    return out;
}

typedef struct {
    int64_t pid, tid;
    int64_t code; /* first-seen number; its rank after the sort */
} pair_t;

static int pair_cmp(const void *a, const void *b) {
    const pair_t *x = a, *y = b;
    if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    return 0;
}

static inline uint64_t pair_hash(int64_t a, int64_t b) {
    uint64_t h = (uint64_t)a * 0x9E3779B97F4A7C15ull ^ ((uint64_t)b + 0x632BE59BD9B4E019ull);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
}

/* 0: done; -1: out of memory */
static int pair_codes_run(const int64_t *pid, const int64_t *tid, int64_t *codes, Py_ssize_t n) {
    size_t cap = 64, count = 0;
    int64_t *slot = malloc(cap * sizeof *slot); /* index into pairs, or -1 */
    pair_t *pairs = malloc((cap / 2) * sizeof *pairs);
    int64_t *rank = NULL;
    int rc = -1;
    if (!slot || !pairs) goto out;
    for (size_t k = 0; k < cap; k++) slot[k] = -1;
    int64_t last = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (last >= 0 && pairs[last].pid == pid[i] && pairs[last].tid == tid[i]) {
            codes[i] = last;
            continue;
        }
        size_t mask = cap - 1, k = (size_t)pair_hash(pid[i], tid[i]) & mask;
        while (slot[k] >= 0 && !(pairs[slot[k]].pid == pid[i] && pairs[slot[k]].tid == tid[i])) k = (k + 1) & mask;
        if (slot[k] < 0) {
            if (2 * (count + 1) > cap) { /* grow: at most half full */
                size_t ncap = 2 * cap;
                int64_t *ns = malloc(ncap * sizeof *ns);
                pair_t *np_ = realloc(pairs, (ncap / 2) * sizeof *np_);
                if (!ns || !np_) {
                    free(ns);
                    if (np_) pairs = np_;
                    goto out;
                }
                pairs = np_;
                for (size_t j = 0; j < ncap; j++) ns[j] = -1;
                for (size_t c = 0; c < count; c++) {
                    size_t j = (size_t)pair_hash(pairs[c].pid, pairs[c].tid) & (ncap - 1);
                    while (ns[j] >= 0) j = (j + 1) & (ncap - 1);
                    ns[j] = (int64_t)c;
                }
                free(slot);
                slot = ns;
                cap = ncap;
                mask = cap - 1;
                k = (size_t)pair_hash(pid[i], tid[i]) & mask;
                while (slot[k] >= 0) k = (k + 1) & mask;
            }
            pairs[count] = (pair_t){pid[i], tid[i], (int64_t)count};
            slot[k] = (int64_t)count++;
        }
        last = slot[k];
        codes[i] = last;
    }
    qsort(pairs, count, sizeof *pairs, pair_cmp);
    rank = malloc((count ? count : 1) * sizeof *rank);
    if (!rank) goto out;
    for (size_t r = 0; r < count; r++) rank[pairs[r].code] = (int64_t)r;
    for (Py_ssize_t i = 0; i < n; i++) codes[i] = rank[codes[i]];
    rc = 0;
out:
    free(slot);
    free(pairs);
    free(rank);
    return rc;
}

static PyObject *pair_codes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[3];
    if (!PyArg_ParseTuple(args, "OOO", &o[0], &o[1], &o[2])) return NULL;
    Py_buffer b[3];
    int got = 0, r = 0;
    PyObject *out = NULL;
    const char *names[3] = {"pid", "tid", "codes"};
    for (; got < 3; got++)
        if (get(o[got], &b[got], got == 2, 8, names[got]) < 0) goto done;
    Py_ssize_t n = b[0].len / 8;
    if (b[1].len / 8 != n || b[2].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "pair_codes: arrays of different lengths");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS;
    r = pair_codes_run(b[0].buf, b[1].buf, b[2].buf, n);
    Py_END_ALLOW_THREADS;
    if (r < 0)
        PyErr_NoMemory();
    else
        out = Py_NewRef(Py_None);
done:
    for (int k = 0; k < got; k++) PyBuffer_Release(&b[k]);
    return out;
}

static PyMethodDef methods[] = {
    {"depths", depths, METH_VARARGS,
     "depths(group, start, end, depth, candidate) -> bool: each node's depth and candidate parent, nodes in tree "
     "order (False, when they are not)"},
    {"pair_codes", pair_codes, METH_VARARGS,
     "pair_codes(pid, tid, codes): codes[i] = the rank of (pid[i], tid[i]) among the distinct pairs (int64 arrays)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tree", "The op tree's nesting pass (see op_tree.py).",
                                    -1, methods};

PyMODINIT_FUNC PyInit__tree(void) { return PyModule_Create(&module); }
