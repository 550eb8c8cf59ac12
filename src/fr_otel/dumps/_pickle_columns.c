/* A Flight Recorder pickle straight to column buffers, without a Python object per value.
 *
 * Unpickling a dump builds a tree of about a hundred thousand small Python objects only
 * for the import to copy them into Arrow columns and free them again: at 8,192 ranks
 * that is two thirds of the CPU time of `fr-otel analyze DUMPS`. This decoder reads the
 * pickle's opcodes into a throwaway tree of C nodes, then writes the entries' fields
 * straight into column buffers (int64 values, validity bitmaps, string offsets) that
 * Python wraps as Arrow arrays without copying, and converts each distinct stack once.
 *
 * It is a fast path, not a second reader. It understands only the opcodes of plain data
 * (dicts, lists, tuples, str, int, float, bool, None, the memo) and only entries whose
 * fields have the types torch writes. Anything else -- an opcode that would import or
 * call something, a truncated or damaged stream, a field of another type, an int past
 * 64 bits -- makes `decode` return None, and the caller reads the file with the general
 * restricted unpickler, which gives the precise error or the tolerant conversion. So
 * nothing this decoder accepts is read differently from the general path, and nothing
 * in a file can make it run code: it has no way to.
 *
 * Every read is bounds-checked against the buffer, the pickle stack and the memo; the
 * only recursion (converting the dump's small non-entry part to Python objects) is
 * depth-limited; and what a pickle can make by referring to one object many times is
 * capped in proportion to its size. So a hostile, cyclic or self-multiplying pickle ends
 * in None, not in a crash or an allocation without end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { K_NONE, K_BOOL, K_INT, K_FLOAT, K_STR, K_LIST, K_TUPLE, K_DICT };

#define F_HASHED 1u      /* `hash` holds the content hash (str, frame dict, stack list) */
#define F_FRAME_BAD 2u   /* a dict that is not a well-formed frame */
#define F_SURROGATES 4u  /* a str holding surrogates: text to Python, not to Arrow */

typedef struct Node {
    uint8_t kind;
    uint8_t flags;
    int16_t field; /* for a str used as an entry key: its field index, -1 none, -2 unknown */
    uint32_t len;  /* str: bytes; list/tuple: items; dict: keys + values */
    uint32_t cap;
    uint64_t hash;
    union {
        int64_t i;
        double f;
        const char *s;
        struct Node **items;
    } u;
} Node;

/* ---- node arena ------------------------------------------------------------------ */

#define CHUNK_NODES 8192

typedef struct Chunk {
    struct Chunk *next;
    size_t used;
    Node nodes[CHUNK_NODES];
} Chunk;

/* Item arrays of lists, tuples and dicts, bump-allocated: a dump has tens of thousands of
 * small containers, and a malloc and free for each cost more than the whole parse. */
typedef struct Block {
    struct Block *next;
    size_t used, cap;
    Node *slots[];
} Block;

#define BLOCK_SLOTS 65536

typedef struct {
    const uint8_t *p, *end;
    Chunk *chunks;
    Block *blocks;
    Node **stack;
    size_t sp, scap;
    size_t *marks;
    size_t mp, mcap;
    Node **memo;
    size_t memo_cap, memo_len;
    size_t size;     /* of the pickle: no memo index of a real one is larger */
    int expands;     /* its entries decode to far more than its size: a pickle bomb */
    size_t nodes;    /* allocated */
    size_t budget;   /* Python objects `to_python` may still make */
} Parser;

static Node NONE_NODE = {K_NONE, 0, -1, 0, 0, 0, {0}};
static Node TRUE_NODE = {K_BOOL, 0, -1, 0, 0, 0, {1}};
static Node FALSE_NODE = {K_BOOL, 0, -1, 0, 0, 0, {0}};

static Node *new_node(Parser *ps, uint8_t kind) {
    if (ps->chunks == NULL || ps->chunks->used == CHUNK_NODES) {
        Chunk *chunk = malloc(sizeof(Chunk));
        if (chunk == NULL) return NULL;
        chunk->next = ps->chunks;
        chunk->used = 0;
        ps->chunks = chunk;
    }
    Node *node = &ps->chunks->nodes[ps->chunks->used++];
    ps->nodes++;
    node->kind = kind;
    node->flags = 0;
    node->field = -2;
    node->len = 0;
    node->cap = 0;
    node->hash = 0;
    node->u.i = 0;
    return node;
}

static int grow(void **buf, size_t *cap, size_t need, size_t item) {
    if (need <= *cap) return 0;
    size_t cap2 = *cap ? *cap : 16;
    while (cap2 < need) cap2 *= 2;
    if (cap2 > ((size_t)1 << 40) / item) return -1;
    void *grown = realloc(*buf, cap2 * item);
    if (grown == NULL) return -1;
    *buf = grown;
    *cap = cap2;
    return 0;
}

static Node *new_container(Parser *ps, uint8_t kind) {
    Node *node = new_node(ps, kind);
    if (node != NULL) node->u.items = NULL;
    return node;
}

static int add_items(Parser *ps, Node *container, Node **items, size_t count) {
    size_t len = container->len, cap = container->cap, need = len + count;
    if (count == 0) return 0; /* APPENDS right after its mark */
    if (need > UINT32_MAX) return -1;
    if (need > cap) {
        size_t cap2 = cap ? cap * 2 : 4;
        if (cap2 < need) cap2 = need;
        if (cap2 > UINT32_MAX) cap2 = UINT32_MAX;
        Block *block = ps->blocks;
        if (block != NULL && cap && container->u.items + cap == block->slots + block->used &&
            block->used - cap + cap2 <= block->cap) {
            block->used += cap2 - cap; /* the last array allocated: grown where it is */
        } else {
            if (block == NULL || block->cap - block->used < cap2) {
                size_t slots = cap2 > BLOCK_SLOTS ? cap2 : BLOCK_SLOTS;
                block = malloc(sizeof(Block) + slots * sizeof(Node *));
                if (block == NULL) return -1;
                block->next = ps->blocks;
                block->used = 0;
                block->cap = slots;
                ps->blocks = block;
            }
            Node **moved = block->slots + block->used;
            block->used += cap2;
            if (len) memcpy(moved, container->u.items, len * sizeof(Node *));
            container->u.items = moved;
        }
        container->cap = (uint32_t)cap2;
    }
    memcpy(container->u.items + len, items, count * sizeof(Node *));
    container->len = (uint32_t)need;
    return 0;
}

static void parser_free(Parser *ps) {
    while (ps->blocks != NULL) {
        Block *next = ps->blocks->next;
        free(ps->blocks);
        ps->blocks = next;
    }
    while (ps->chunks != NULL) {
        Chunk *next = ps->chunks->next;
        free(ps->chunks);
        ps->chunks = next;
    }
    free(ps->stack);
    free(ps->marks);
    free(ps->memo);
}

/* ---- the opcodes of plain data ----------------------------------------------------- */

static int push(Parser *ps, Node *node) {
    if (node == NULL) return -1;
    if (grow((void **)&ps->stack, &ps->scap, ps->sp + 1, sizeof(Node *)) < 0) return -1;
    ps->stack[ps->sp++] = node;
    return 0;
}

static size_t floor_of_stack(Parser *ps) { return ps->mp ? ps->marks[ps->mp - 1] : 0; }

static Node *pop(Parser *ps) {
    if (ps->sp <= floor_of_stack(ps)) return NULL;
    return ps->stack[--ps->sp];
}

static Node *top(Parser *ps) {
    if (ps->sp <= floor_of_stack(ps)) return NULL;
    return ps->stack[ps->sp - 1];
}

static int take(Parser *ps, size_t n, const uint8_t **out) {
    if ((size_t)(ps->end - ps->p) < n) return -1;
    *out = ps->p;
    ps->p += n;
    return 0;
}

static uint64_t little_endian(const uint8_t *b, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static int memo_put(Parser *ps, size_t index, Node *node) {
    /* a pickler numbers its memo from 0, one index per object it wrote: an index past the
     * pickle's own size is a hostile one, and would only make this allocate */
    if (node == NULL || index > ps->size) return -1;
    if (index >= ps->memo_cap) {
        size_t old = ps->memo_cap;
        if (grow((void **)&ps->memo, &ps->memo_cap, index + 1, sizeof(Node *)) < 0) return -1;
        memset(ps->memo + old, 0, (ps->memo_cap - old) * sizeof(Node *));
    }
    ps->memo_len += ps->memo[index] == NULL;
    ps->memo[index] = node;
    return 0;
}

static Node *memo_get(Parser *ps, size_t index) {
    return index < ps->memo_cap ? ps->memo[index] : NULL;
}

/* 1: valid UTF-8; 2: valid but for surrogates (which Python's pickle reads, by
 * "surrogatepass", and Arrow's strings do not hold); 0: not text. */
static int utf8_check(const uint8_t *s, size_t n) {
    int result = 1;
    size_t i = 0;
    while (i < n) {
        uint64_t word;
        if (n - i >= 8 && (memcpy(&word, s + i, 8), (word & 0x8080808080808080ull) == 0)) {
            i += 8; /* eight ASCII bytes */
            continue;
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t extra;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            extra = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            extra = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            extra = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (n - i <= extra) return 0;
        for (size_t k = 1; k <= extra; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((extra == 2 && cp < 0x800) || (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        if (extra == 2 && cp >= 0xD800 && cp <= 0xDFFF) result = 2;
        i += extra + 1;
    }
    return result;
}

static Node *string_node(Parser *ps, size_t n) {
    const uint8_t *s;
    if (n > UINT32_MAX || take(ps, n, &s) < 0) return NULL;
    /* Python's unpickler refuses a str that is not UTF-8: so does this one */
    int text = utf8_check(s, n);
    if (text == 0) return NULL;
    Node *node = new_node(ps, K_STR);
    if (node == NULL) return NULL;
    node->u.s = (const char *)s;
    node->len = (uint32_t)n;
    if (text == 2) node->flags |= F_SURROGATES;
    return node;
}

static Node *int_node(Parser *ps, int64_t v) {
    Node *node = new_node(ps, K_INT);
    if (node != NULL) node->u.i = v;
    return node;
}

/* The items since the last mark, which is removed. */
static int since_mark(Parser *ps, Node ***items, size_t *count) {
    if (ps->mp == 0) return -1;
    size_t mark = ps->marks[--ps->mp];
    *items = ps->stack + mark;
    *count = ps->sp - mark;
    ps->sp = mark;
    return 0;
}

static Node *collect(Parser *ps, uint8_t kind, Node **items, size_t count) {
    Node *node = new_container(ps, kind);
    if (node == NULL || (count && add_items(ps, node, items, count) < 0)) return NULL;
    return node;
}

static Node *parse(Parser *ps) {
    for (;;) {
        const uint8_t *b;
        if (take(ps, 1, &b) < 0) return NULL;
        Node **items;
        size_t count;
        Node *node;
        switch (b[0]) {
        case 0x80: /* PROTO */
            if (take(ps, 1, &b) < 0 || b[0] < 2 || b[0] > 5) return NULL;
            break;
        case 0x95: /* FRAME: advisory */
            if (take(ps, 8, &b) < 0) return NULL;
            break;
        case '.': /* STOP */
            return pop(ps);
        case '}':
            if (push(ps, new_container(ps, K_DICT)) < 0) return NULL;
            break;
        case ']':
            if (push(ps, new_container(ps, K_LIST)) < 0) return NULL;
            break;
        case ')':
            if (push(ps, new_container(ps, K_TUPLE)) < 0) return NULL;
            break;
        case '(':
            if (grow((void **)&ps->marks, &ps->mcap, ps->mp + 1, sizeof(size_t)) < 0) return NULL;
            ps->marks[ps->mp++] = ps->sp;
            break;
        case 'd':
        case 'l':
        case 't': {
            if (since_mark(ps, &items, &count) < 0) return NULL;
            uint8_t kind = b[0] == 'd' ? K_DICT : b[0] == 'l' ? K_LIST : K_TUPLE;
            if (kind == K_DICT && count % 2) return NULL;
            if (push(ps, collect(ps, kind, items, count)) < 0) return NULL;
            break;
        }
        case 0x85:
        case 0x86:
        case 0x87: /* TUPLE1..3 */
            count = (size_t)(b[0] - 0x84);
            if (ps->sp < floor_of_stack(ps) + count) return NULL;
            ps->sp -= count;
            if (push(ps, collect(ps, K_TUPLE, ps->stack + ps->sp, count)) < 0) return NULL;
            break;
        case 'a': { /* APPEND */
            Node *value = pop(ps), *list = top(ps);
            if (value == NULL || list == NULL || list->kind != K_LIST) return NULL;
            if (add_items(ps, list, &value, 1) < 0) return NULL;
            break;
        }
        case 'e': /* APPENDS */
            if (since_mark(ps, &items, &count) < 0) return NULL;
            node = top(ps);
            if (node == NULL || node->kind != K_LIST || add_items(ps, node, items, count) < 0)
                return NULL;
            break;
        case 's': { /* SETITEM */
            Node *pair[2];
            pair[1] = pop(ps);
            pair[0] = pop(ps);
            node = top(ps);
            if (pair[0] == NULL || pair[1] == NULL || node == NULL || node->kind != K_DICT)
                return NULL;
            if (add_items(ps, node, pair, 2) < 0) return NULL;
            break;
        }
        case 'u': /* SETITEMS */
            if (since_mark(ps, &items, &count) < 0 || count % 2) return NULL;
            node = top(ps);
            if (node == NULL || node->kind != K_DICT || add_items(ps, node, items, count) < 0)
                return NULL;
            break;
        case 'X': /* BINUNICODE */
            if (take(ps, 4, &b) < 0 || push(ps, string_node(ps, little_endian(b, 4))) < 0)
                return NULL;
            break;
        case 0x8c: /* SHORT_BINUNICODE */
            if (take(ps, 1, &b) < 0 || push(ps, string_node(ps, b[0])) < 0) return NULL;
            break;
        case 0x8d: /* BINUNICODE8 */
            if (take(ps, 8, &b) < 0 || push(ps, string_node(ps, little_endian(b, 8))) < 0)
                return NULL;
            break;
        case 'J': /* BININT */
            if (take(ps, 4, &b) < 0) return NULL;
            if (push(ps, int_node(ps, (int32_t)(uint32_t)little_endian(b, 4))) < 0) return NULL;
            break;
        case 'K': /* BININT1 */
            if (take(ps, 1, &b) < 0 || push(ps, int_node(ps, b[0])) < 0) return NULL;
            break;
        case 'M': /* BININT2 */
            if (take(ps, 2, &b) < 0 || push(ps, int_node(ps, (int64_t)little_endian(b, 2))) < 0)
                return NULL;
            break;
        case 0x8a: { /* LONG1: two's complement, little-endian */
            if (take(ps, 1, &b) < 0) return NULL;
            size_t n = b[0];
            if (n > 8 || take(ps, n, &b) < 0) return NULL; /* past 64 bits: the general path */
            uint64_t v = little_endian(b, n);
            if (n && n < 8 && (b[n - 1] & 0x80)) v |= ~(uint64_t)0 << (8 * n);
            if (push(ps, int_node(ps, (int64_t)v)) < 0) return NULL;
            break;
        }
        case 'G': { /* BINFLOAT: big-endian double */
            if (take(ps, 8, &b) < 0) return NULL;
            uint64_t bits = 0;
            for (int i = 0; i < 8; i++) bits = (bits << 8) | b[i];
            node = new_node(ps, K_FLOAT);
            if (node == NULL) return NULL;
            memcpy(&node->u.f, &bits, sizeof(double));
            if (push(ps, node) < 0) return NULL;
            break;
        }
        case 'N':
            if (push(ps, &NONE_NODE) < 0) return NULL;
            break;
        case 0x88:
            if (push(ps, &TRUE_NODE) < 0) return NULL;
            break;
        case 0x89:
            if (push(ps, &FALSE_NODE) < 0) return NULL;
            break;
        case 'q': /* BINPUT */
            if (take(ps, 1, &b) < 0 || memo_put(ps, b[0], top(ps)) < 0) return NULL;
            break;
        case 'r': /* LONG_BINPUT */
            if (take(ps, 4, &b) < 0 || memo_put(ps, little_endian(b, 4), top(ps)) < 0)
                return NULL;
            break;
        case 0x94: /* MEMOIZE: at len(memo) */
            if (memo_put(ps, ps->memo_len, top(ps)) < 0) return NULL;
            break;
        case 'h': /* BINGET */
            if (take(ps, 1, &b) < 0 || push(ps, memo_get(ps, b[0])) < 0) return NULL;
            break;
        case 'j': /* LONG_BINGET */
            if (take(ps, 4, &b) < 0 || push(ps, memo_get(ps, little_endian(b, 4))) < 0)
                return NULL;
            break;
        case '0': /* POP */
            if (pop(ps) == NULL) return NULL;
            break;
        case '1': /* POP_MARK */
            if (since_mark(ps, &items, &count) < 0) return NULL;
            break;
        case '2': /* DUP */
            if (push(ps, top(ps)) < 0) return NULL;
            break;
        default: /* globals, reduce, bytes, persistent ids, text protocol: not ours */
            return NULL;
        }
    }
}

/* ---- strings ------------------------------------------------------------------------ */

/* A str whose bytes can go into an Arrow string column as they are (checked when read). */
static int plain_str(Node *node) { return node->kind == K_STR && !(node->flags & F_SURROGATES); }

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h;
}

static uint64_t str_hash(Node *node) {
    if (!(node->flags & F_HASHED)) {
        uint64_t h = 1469598103934665603ull;
        for (uint32_t i = 0; i < node->len; i++) h = (h ^ (uint8_t)node->u.s[i]) * 1099511628211ull;
        node->hash = h;
        node->flags |= F_HASHED;
    }
    return node->hash;
}

static int str_equal(Node *a, Node *b) {
    return a == b || (a->len == b->len && memcmp(a->u.s, b->u.s, a->len) == 0);
}

static int key_is(Node *key, const char *name, size_t n) {
    return key->kind == K_STR && key->len == n && memcmp(key->u.s, name, n) == 0;
}

/* ---- Python objects for the dump's small non-entry part ------------------------------ */

/* The memo lets a pickle refer to one object many times, and a tree of shared lists
 * doubles at every level: converting each reference anew would never end. The budget
 * (a few objects per node) stops that well before memory runs out; a real dump's
 * non-entry part is a small tree and stays far within it. */
static PyObject *dict_to_python(Parser *ps, Node *node, int depth, const char *skip);

static PyObject *to_python(Parser *ps, Node *node, int depth) {
    if (depth > 64 || ps->budget == 0) return NULL;
    ps->budget--;
    switch (node->kind) {
    case K_NONE:
        Py_RETURN_NONE;
    case K_BOOL:
        return PyBool_FromLong((long)node->u.i);
    case K_INT:
        return PyLong_FromLongLong(node->u.i);
    case K_FLOAT:
        return PyFloat_FromDouble(node->u.f);
    case K_STR:
        return PyUnicode_DecodeUTF8(node->u.s, node->len, "surrogatepass");
    case K_LIST:
    case K_TUPLE: {
        PyObject *out = node->kind == K_LIST ? PyList_New(node->len) : PyTuple_New(node->len);
        if (out == NULL) return NULL;
        for (uint32_t i = 0; i < node->len; i++) {
            PyObject *item = to_python(ps, node->u.items[i], depth + 1);
            if (item == NULL) {
                Py_DECREF(out);
                return NULL;
            }
            if (node->kind == K_LIST)
                PyList_SET_ITEM(out, i, item);
            else
                PyTuple_SET_ITEM(out, i, item);
        }
        return out;
    }
    case K_DICT:
        return dict_to_python(ps, node, depth, NULL);
    }
    return NULL;
}

/* A dict node as a Python dict, leaving out the key `skip` (NULL: none). */
static PyObject *dict_to_python(Parser *ps, Node *node, int depth, const char *skip) {
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    for (uint32_t i = 0; i + 1 < node->len; i += 2) {
        if (skip != NULL && key_is(node->u.items[i], skip, strlen(skip))) continue;
        PyObject *key = to_python(ps, node->u.items[i], depth + 1);
        PyObject *value = key ? to_python(ps, node->u.items[i + 1], depth + 1) : NULL;
        int bad = value == NULL || PyDict_SetItem(out, key, value) < 0;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (bad) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

/* ---- columns ------------------------------------------------------------------------ */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_add(Buf *buf, const void *bytes, size_t n) {
    if (grow((void **)&buf->data, &buf->cap, buf->len + n, 1) < 0) return -1;
    memcpy(buf->data + buf->len, bytes, n);
    buf->len += n;
    return 0;
}

static int buf_int32(Buf *buf, size_t value) {
    if (value > INT32_MAX) return -1; /* Arrow's 32-bit offsets would wrap */
    int32_t v = (int32_t)value;
    return buf_add(buf, &v, sizeof v);
}

enum { C_INT, C_STR, C_FLOAT, C_BOOL, C_STR_LIST, C_SIZES, C_FRAMES };

typedef struct {
    const char *name;
    int type;
} FieldSpec;

/* The entry fields torch writes, as parse.py's _RAW_ENTRY lists them. */
static const FieldSpec FIELDS[] = {
    {"record_id", C_INT},
    {"pg_id", C_INT},
    {"collective_seq_id", C_INT},
    {"p2p_seq_id", C_INT},
    {"op_id", C_INT},
    {"time_created_ns", C_INT},
    {"time_discovered_started_ns", C_INT},
    {"time_discovered_completed_ns", C_INT},
    {"timeout_ms", C_INT},
    {"profiling_name", C_STR},
    {"state", C_STR},
    {"thread_name", C_STR},
    {"thread_id", C_STR},
    {"process_group", C_STR_LIST},
    {"duration_ms", C_FLOAT},
    {"input_sizes", C_SIZES},
    {"input_dtypes", C_STR_LIST},
    {"output_sizes", C_SIZES},
    {"output_dtypes", C_STR_LIST},
    {"retired", C_BOOL},
    {"is_p2p", C_BOOL},
    {"frames", C_FRAMES},
};
#define N_FIELDS ((int)(sizeof(FIELDS) / sizeof(FIELDS[0])))
#define F_RECORD_ID 0
#define F_PROFILING_NAME 9
#define F_PROCESS_GROUP 13

typedef struct {
    uint8_t *valid; /* bitmap, one bit a row */
    size_t nulls;
    Buf values;  /* int64 / double / bitmap / int32 offsets */
    Buf data;    /* string bytes, or the inner offsets of a list */
    Buf data2;   /* the innermost values of sizes, or string bytes of a str list */
} Column;

static int field_of(Node *key) {
    if (key->kind != K_STR) return -3;
    if (key->field != -2) return key->field;
    key->field = -1;
    for (int f = 0; f < N_FIELDS; f++)
        if (key_is(key, FIELDS[f].name, strlen(FIELDS[f].name))) key->field = (int16_t)f;
    return key->field;
}

static void set_null(Column *col, size_t row) {
    col->valid[row / 8] &= (uint8_t) ~(1u << (row % 8));
    col->nulls++;
}

static int is_seq(Node *node) { return node->kind == K_LIST || node->kind == K_TUPLE; }

/* list<string>: offsets in `values`, inner offsets in `data`, bytes in `data2` */
static int add_str_list(Column *col, Node *seq) {
    for (uint32_t i = 0; i < seq->len; i++) {
        Node *s = seq->u.items[i];
        if (!plain_str(s) || buf_add(&col->data2, s->u.s, s->len) < 0 ||
            buf_int32(&col->data, col->data2.len) < 0)
            return -1;
    }
    return buf_int32(&col->values, col->data.len / 4 - 1);
}

/* list<list<int64>>: offsets in `values`, inner offsets in `data`, values in `data2` */
static int add_sizes(Column *col, Node *seq) {
    for (uint32_t i = 0; i < seq->len; i++) {
        Node *shape = seq->u.items[i];
        if (!is_seq(shape)) return -1;
        for (uint32_t k = 0; k < shape->len; k++) {
            Node *dim = shape->u.items[k];
            if (dim->kind != K_INT || buf_add(&col->data2, &dim->u.i, 8) < 0) return -1;
        }
        if (buf_int32(&col->data, col->data2.len / 8) < 0) return -1;
    }
    return buf_int32(&col->values, col->data.len / 4 - 1);
}

/* ---- stacks: each distinct one converted once -------------------------------------- */

typedef struct {
    Node *name, *filename, *line;
} Frame;

static int frame_of(Node *dict, Frame *out) {
    if (dict->kind != K_DICT || (dict->flags & F_FRAME_BAD)) return -1;
    Frame frame = {NULL, NULL, NULL};
    for (uint32_t i = 0; i + 1 < dict->len; i += 2) {
        Node *key = dict->u.items[i];
        if (key_is(key, "name", 4))
            frame.name = dict->u.items[i + 1];
        else if (key_is(key, "filename", 8))
            frame.filename = dict->u.items[i + 1];
        else if (key_is(key, "line", 4))
            frame.line = dict->u.items[i + 1];
        else if (key->kind != K_STR) {
            dict->flags |= F_FRAME_BAD;
            return -1;
        }
    }
    if (frame.name == NULL || frame.filename == NULL || frame.line == NULL ||
        !plain_str(frame.name) || !plain_str(frame.filename) || frame.line->kind != K_INT) {
        dict->flags |= F_FRAME_BAD;
        return -1;
    }
    *out = frame;
    return 0;
}

static int stack_hash(Node *stack, uint64_t *out) {
    if (stack->flags & F_HASHED) {
        *out = stack->hash;
        return 0;
    }
    uint64_t h = 0x84222325cbf29ce4ull ^ stack->len;
    for (uint32_t i = 0; i < stack->len; i++) {
        Node *dict = stack->u.items[i];
        Frame frame;
        if (frame_of(dict, &frame) < 0) return -1;
        if (!(dict->flags & F_HASHED)) {
            uint64_t fh = mix(mix(str_hash(frame.name), str_hash(frame.filename)),
                              (uint64_t)frame.line->u.i);
            dict->hash = fh;
            dict->flags |= F_HASHED;
        }
        h = mix(h, dict->hash);
    }
    stack->hash = h;
    stack->flags |= F_HASHED;
    *out = h;
    return 0;
}

static int same_stack(Node *a, Node *b) {
    if (a == b) return 1;
    if (a->len != b->len) return 0;
    for (uint32_t i = 0; i < a->len; i++) {
        Node *x = a->u.items[i], *y = b->u.items[i];
        if (x == y) continue;
        Frame fx, fy;
        if (frame_of(x, &fx) < 0 || frame_of(y, &fy) < 0) return 0;
        if (!str_equal(fx.name, fy.name) || !str_equal(fx.filename, fy.filename) ||
            fx.line->u.i != fy.line->u.i)
            return 0;
    }
    return 1;
}

typedef struct {
    Node **slots; /* open addressing over distinct stacks */
    int32_t *codes;
    size_t cap, count;
    Node **unique;
} Stacks;

static int stack_code(Stacks *st, Node *stack, int32_t *code) {
    uint64_t h;
    if (stack_hash(stack, &h) < 0) return -1;
    if ((st->count + 1) * 2 > st->cap) {
        size_t cap = st->cap ? st->cap * 2 : 64;
        Node **slots = calloc(cap, sizeof(Node *));
        int32_t *codes = calloc(cap, sizeof(int32_t));
        Node **unique = realloc(st->unique, cap / 2 * sizeof(Node *));
        if (slots == NULL || codes == NULL || unique == NULL) {
            free(slots);
            free(codes);
            if (unique != NULL) st->unique = unique;
            return -1;
        }
        st->unique = unique;
        for (size_t i = 0; i < st->cap; i++) {
            if (st->slots[i] == NULL) continue;
            size_t j = st->slots[i]->hash & (cap - 1);
            while (slots[j] != NULL) j = (j + 1) & (cap - 1);
            slots[j] = st->slots[i];
            codes[j] = st->codes[i];
        }
        free(st->slots);
        free(st->codes);
        st->slots = slots;
        st->codes = codes;
        st->cap = cap;
    }
    size_t j = h & (st->cap - 1);
    while (st->slots[j] != NULL) {
        if (st->slots[j]->hash == h && same_stack(st->slots[j], stack)) {
            *code = st->codes[j];
            return 0;
        }
        j = (j + 1) & (st->cap - 1);
    }
    st->slots[j] = stack;
    st->codes[j] = (int32_t)st->count;
    st->unique[st->count] = stack;
    *code = (int32_t)st->count++;
    return 0;
}

static PyObject *stack_to_python(Node *stack) {
    PyObject *frames = PyList_New(stack->len);
    if (frames == NULL) return NULL;
    for (uint32_t i = 0; i < stack->len; i++) {
        Frame frame;
        frame_of(stack->u.items[i], &frame); /* checked when hashed */
        PyObject *dict = Py_BuildValue(
            "{s:s#,s:s#,s:L}", "name", frame.name->u.s, (Py_ssize_t)frame.name->len, "filename",
            frame.filename->u.s, (Py_ssize_t)frame.filename->len, "line",
            (long long)frame.line->u.i);
        if (dict == NULL) {
            Py_DECREF(frames);
            return NULL;
        }
        PyList_SET_ITEM(frames, i, dict);
    }
    return frames;
}

/* ---- the entries -------------------------------------------------------------------- */

static PyObject *bytes_of(const void *data, size_t n) {
    return PyBytes_FromStringAndSize(data ? (const char *)data : "", (Py_ssize_t)n);
}

/* (validity bitmap or None, null count, values, data, data2) for Python to wrap */
static PyObject *column_to_python(Column *col, size_t n) {
    PyObject *valid;
    if (col->nulls) {
        valid = bytes_of(col->valid, (n + 7) / 8);
    } else {
        valid = Py_None;
        Py_INCREF(valid);
    }
    if (valid == NULL) return NULL;
    return Py_BuildValue("(Nny#y#y#)", valid, (Py_ssize_t)col->nulls,
                         col->values.data ? col->values.data : "", (Py_ssize_t)col->values.len,
                         col->data.data ? col->data.data : "", (Py_ssize_t)col->data.len,
                         col->data2.data ? col->data2.data : "", (Py_ssize_t)col->data2.len);
}

static int add_value(Column *col, int type, Node *value, size_t row, Stacks *stacks) {
    if (value == NULL || value->kind == K_NONE) {
        set_null(col, row);
        switch (type) {
        case C_INT:
        case C_FLOAT: {
            int64_t zero = 0;
            return buf_add(&col->values, &zero, 8);
        }
        case C_STR:
            return buf_int32(&col->values, col->data.len);
        case C_STR_LIST:
        case C_SIZES:
            return buf_int32(&col->values, col->data.len / 4 - 1);
        case C_FRAMES: {
            int32_t none = 0;
            return buf_add(&col->values, &none, 4);
        }
        default: /* C_BOOL: its bits are preset to 0 */
            return 0;
        }
    }
    switch (type) {
    case C_INT:
        if (value->kind != K_INT) return -1;
        return buf_add(&col->values, &value->u.i, 8);
    case C_FLOAT:
        if (value->kind != K_FLOAT) return -1;
        return buf_add(&col->values, &value->u.f, 8);
    case C_STR:
        if (!plain_str(value) || buf_add(&col->data, value->u.s, value->len) < 0) return -1;
        return buf_int32(&col->values, col->data.len);
    case C_BOOL:
        if (value->kind != K_BOOL) return -1;
        if (value->u.i) ((uint8_t *)col->values.data)[row / 8] |= (uint8_t)(1u << (row % 8));
        return 0;
    case C_STR_LIST:
        return is_seq(value) ? add_str_list(col, value) : -1;
    case C_SIZES:
        return is_seq(value) ? add_sizes(col, value) : -1;
    case C_FRAMES: {
        int32_t code;
        if (value->kind != K_LIST || stack_code(stacks, value, &code) < 0) return -1;
        return buf_add(&col->values, &code, 4);
    }
    }
    return -1;
}

static int start_columns(Column *cols, size_t n) {
    size_t bitmap = (n + 7) / 8;
    for (int f = 0; f < N_FIELDS; f++) {
        Column *col = &cols[f];
        col->valid = malloc(bitmap ? bitmap : 1);
        if (col->valid == NULL) return -1;
        memset(col->valid, 0xFF, bitmap);
        int type = FIELDS[f].type;
        if (type == C_BOOL) {
            if (grow((void **)&col->values.data, &col->values.cap, bitmap ? bitmap : 1, 1) < 0)
                return -1;
            memset(col->values.data, 0, bitmap);
            col->values.len = bitmap;
        } else if (type == C_STR) {
            if (buf_int32(&col->values, 0) < 0) return -1;
        } else if (type == C_STR_LIST || type == C_SIZES) {
            if (buf_int32(&col->values, 0) < 0 || buf_int32(&col->data, 0) < 0) return -1;
        }
    }
    return 0;
}

static void free_columns(Column *cols) {
    for (int f = 0; f < N_FIELDS; f++) {
        free(cols[f].valid);
        free(cols[f].values.data);
        free(cols[f].data.data);
        free(cols[f].data2.data);
    }
}

static int fill_columns(Column *cols, Node *entries, Stacks *stacks, size_t size) {
    Node *slot[N_FIELDS];
    /* The memo can also make one list of sizes or strings appear in every entry, many
     * times over: a few kilobytes that would decode to gigabytes. Real dumps decode to a
     * few times their size; past 64 times (and a floor for tiny ones), this declines:
     * parse.EXPANSION_FACTOR and EXPANSION_FLOOR, which the general path keeps. */
    size_t limit = 64 * size + ((size_t)1 << 24);
    for (uint32_t row = 0; row < entries->len; row++) {
        Node *entry = entries->u.items[row];
        if (entry->kind != K_DICT) return -1;
        for (int f = 0; f < N_FIELDS; f++) slot[f] = NULL;
        for (uint32_t i = 0; i + 1 < entry->len; i += 2) {
            int f = field_of(entry->u.items[i]);
            if (f == -3) return -1;
            if (f >= 0) slot[f] = entry->u.items[i + 1]; /* the last of a repeated key */
        }
        /* an entry without these is an error the general path words */
        if (slot[F_RECORD_ID] == NULL || slot[F_PROCESS_GROUP] == NULL ||
            slot[F_PROFILING_NAME] == NULL)
            return -1;
        size_t decoded = 0;
        for (int f = 0; f < N_FIELDS; f++) {
            if (add_value(&cols[f], FIELDS[f].type, slot[f], row, stacks) < 0) return -1;
            decoded += cols[f].data.len + cols[f].data2.len;
        }
        if (decoded > limit) return -2;
    }
    return 0;
}

static PyObject *decode_tree(Parser *ps, Node *root) {
    if (root->kind != K_DICT) return NULL;
    Node *entries = NULL;
    int has_version = 0, has_config = 0;
    for (uint32_t i = 0; i + 1 < root->len; i += 2) {
        Node *key = root->u.items[i];
        if (key_is(key, "entries", 7)) entries = root->u.items[i + 1];
        has_version |= key_is(key, "version", 7);
        has_config |= key_is(key, "pg_config", 9);
    }
    if (!has_version || !has_config || (entries != NULL && entries->kind != K_LIST))
        return NULL; /* not a dump: the general path says what it is */

    ps->budget = 4 * ps->nodes + 1024;
    PyObject *rest = dict_to_python(ps, root, 0, "entries");
    if (rest == NULL) return NULL;

    size_t n = entries ? entries->len : 0;
    Column cols[N_FIELDS];
    memset(cols, 0, sizeof cols);
    Stacks stacks = {NULL, NULL, 0, 0, NULL};
    PyObject *out = NULL, *columns = NULL, *unique = NULL;
    int filled = start_columns(cols, n);
    if (filled == 0 && entries) filled = fill_columns(cols, entries, &stacks, ps->size);
    ps->expands = filled == -2;
    if (filled < 0) goto done;
    columns = PyDict_New();
    if (columns == NULL) goto done;
    for (int f = 0; f < N_FIELDS; f++) {
        PyObject *col = column_to_python(&cols[f], n);
        if (col == NULL || PyDict_SetItemString(columns, FIELDS[f].name, col) < 0) {
            Py_XDECREF(col);
            goto done;
        }
        Py_DECREF(col);
    }
    unique = PyList_New((Py_ssize_t)stacks.count);
    if (unique == NULL) goto done;
    for (size_t i = 0; i < stacks.count; i++) {
        PyObject *stack = stack_to_python(stacks.unique[i]);
        if (stack == NULL) goto done;
        PyList_SET_ITEM(unique, (Py_ssize_t)i, stack);
    }
    out = Py_BuildValue("(OnOO)", rest, (Py_ssize_t)n, columns, unique);
done:
    Py_XDECREF(columns);
    Py_XDECREF(unique);
    Py_DECREF(rest);
    free_columns(cols);
    free(stacks.slots);
    free(stacks.codes);
    free(stacks.unique);
    return out;
}

static PyObject *decode(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Parser ps;
    memset(&ps, 0, sizeof ps);
    ps.p = view.buf;
    ps.end = ps.p + view.len;
    ps.size = (size_t)view.len;
    PyObject *out = NULL;
    Node *root = parse(&ps);
    if (root != NULL) out = decode_tree(&ps, root);
    parser_free(&ps);
    PyBuffer_Release(&view);
    if (out == NULL) {
        PyErr_Clear();
        /* the general path would expand it too, into gigabytes: say so instead */
        if (ps.expands) return PyUnicode_FromString("expands");
        /* not ours to read (or out of memory): the general path decides */
        Py_RETURN_NONE;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_O,
     "decode(data) -> (dump without entries, n, columns, stacks), None or 'expands':"
     " see columnar.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pickle_columns", NULL, -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pickle_columns(void) { return PyModule_Create(&module); }
