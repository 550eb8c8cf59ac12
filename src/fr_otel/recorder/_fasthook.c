/*
 * The recorder's wrapper around a collective, for the case that repeats: a known group, a
 * known tensor signature, a known call site. See capture.py (Capture._wrapper) for what is
 * recorded and why; this file does exactly that, in C, for that case, and hands every
 * other call to a RecordedCall (below): the Python code records it and fills the caches
 * read here, and the original is called from C, so that no frame of the recorder stands
 * in the traceback of what the collective raises.
 *
 * Why C: the wrapper runs right after the previous collective's wait, when this thread's
 * caches are cold, and each cache line it touches costs about as much as a warm loop's
 * whole call. There the Python wrapper costs several times what a warm loop shows, a
 * share of a small all_reduce's CPU that training notices. So this path executes no
 * bytecode and touches little memory: the ring's mapping is held by a Core object (no
 * attribute lookups per call), the record counter lives in the ring's header, and each
 * hook remembers its last few groups, signatures and call sites in its own struct, in
 * front of the Python dicts.
 *
 * It never raises an error of its own: anything unexpected (a cache miss, a detached ring,
 * an attribute that is not what it should be) clears the error and lets the Python code
 * handle the call, which records it or counts the failure.
 *
 * Slot layout: slot.py (SLOT, 64 bytes, little-endian) defines it; the offsets and state
 * codes below are checked against its layout() at every attach, which refuses a ring
 * whose layout differs (the Python wrapper then records every call).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if PY_VERSION_HEX < 0x030B0000
#error "needs Python 3.11's frame API (PyFrame_GetLasti); 3.10 uses the Python wrapper"
#endif
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ring is little-endian; this path writes host-order integers"
#endif

#define SLOT_SIZE 64
#define RECORD_OFFSET 0
#define GROUP_OFFSET 8
#define SEQ_OFFSET 12
#define P2P_SEQ_OFFSET 20
#define SIGNATURE_OFFSET 28
#define SITE_OFFSET 32
#define PEER_OFFSET 36
#define CREATED_OFFSET 40
#define DONE_OFFSET 48
#define STATE_OFFSET 56
#define SCHEDULED 1
#define STARTED 2
#define COMPLETED 3

/* what slot.layout() must say, key for key */
static const struct {
    const char *key;
    long value;
} compiled_layout[] = {
    {"record_offset", RECORD_OFFSET},   {"group_offset", GROUP_OFFSET},
    {"seq_offset", SEQ_OFFSET},         {"p2p_seq_offset", P2P_SEQ_OFFSET},
    {"signature_offset", SIGNATURE_OFFSET}, {"site_offset", SITE_OFFSET},
    {"peer_offset", PEER_OFFSET},       {"created_ns_offset", CREATED_OFFSET},
    {"done_ns_offset", DONE_OFFSET},    {"state_offset", STATE_OFFSET},
    {"slot_size", SLOT_SIZE},           {"scheduled", SCHEDULED},
    {"started", STARTED},               {"completed", COMPLETED},
};
#define LAYOUT_KEYS (sizeof(compiled_layout) / sizeof(compiled_layout[0]))

/* NULL when `layout` (slot.layout()) is this file's; else a ValueError is set */
static int check_layout(PyObject *layout) {
    if (!PyDict_Check(layout)) {
        PyErr_SetString(PyExc_TypeError, "layout must be slot.layout()'s dict");
        return -1;
    }
    if (PyDict_GET_SIZE(layout) != (Py_ssize_t)LAYOUT_KEYS) {
        PyErr_Format(PyExc_ValueError, "slot layout has %zd keys, the compiled hook knows %d",
                     PyDict_GET_SIZE(layout), (int)LAYOUT_KEYS);
        return -1;
    }
    for (size_t i = 0; i < LAYOUT_KEYS; i++) {
        PyObject *value = PyDict_GetItemString(layout, compiled_layout[i].key);
        long found = value != NULL && PyLong_Check(value) ? PyLong_AsLong(value) : -1;
        if (PyErr_Occurred()) return -1;
        if (found != compiled_layout[i].value) {
            PyErr_Format(PyExc_ValueError, "slot layout: %s is %ld in slot.py, %ld compiled",
                         compiled_layout[i].key, found, compiled_layout[i].value);
            return -1;
        }
    }
    return 0;
}
#define WAYS 4 /* entries per front cache: a loop calls one collective from a few places */

/* what begin() found */
#define NOT_RECORDED 0 /* hand the call to the Python wrapper */
#define RECORDED 1
#define RECORDED_QUEUED 2 /* NCCL-like: finished by torch's FR, not here */

static PyObject *str_writer, *str_shape, *str_dtype, *str_group, *str_async_op;

/* --- Core: the ring every hook of one recorder writes ------------------------------- */

typedef struct {
    PyObject_HEAD
    Py_buffer view; /* the ring's mapping, held while attached */
    int attached;
    int64_t capacity;
    Py_ssize_t header_size;
    Py_ssize_t next_offset; /* where the header keeps the next record id */
    uint64_t epoch;         /* changes on attach, detach and invalidate: caches go stale */
} Core;

static void core_release(Core *core) {
    if (core->attached) {
        PyBuffer_Release(&core->view);
        core->attached = 0;
    }
    core->epoch++;
}

static PyObject *core_attach(PyObject *op, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"map", "capacity", "header_size", "next_offset", "layout", NULL};
    Core *core = (Core *)op;
    PyObject *map, *layout;
    long long capacity;
    Py_ssize_t header_size, next_offset;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OLnnO:attach", names, &map, &capacity,
                                     &header_size, &next_offset, &layout))
        return NULL;
    core_release(core);
    if (check_layout(layout) < 0) return NULL;
    if (capacity <= 0 || header_size < next_offset + 8 || next_offset < 0) {
        PyErr_SetString(PyExc_ValueError, "bad ring geometry");
        return NULL;
    }
    if (PyObject_GetBuffer(map, &core->view, PyBUF_WRITABLE) < 0) return NULL;
    if (core->view.len < header_size + (Py_ssize_t)capacity * SLOT_SIZE) {
        PyBuffer_Release(&core->view);
        PyErr_SetString(PyExc_ValueError, "ring mapping smaller than its capacity");
        return NULL;
    }
    core->attached = 1;
    core->capacity = capacity;
    core->header_size = header_size;
    core->next_offset = next_offset;
    Py_RETURN_NONE;
}

static PyObject *core_detach(PyObject *op, PyObject *unused) {
    core_release((Core *)op);
    Py_RETURN_NONE;
}

static PyObject *core_invalidate(PyObject *op, PyObject *unused) {
    ((Core *)op)->epoch++;
    Py_RETURN_NONE;
}

static PyObject *core_get_attached(PyObject *op, void *unused) {
    return PyBool_FromLong(((Core *)op)->attached);
}

static void core_dealloc(PyObject *op) {
    core_release((Core *)op);
    Py_TYPE(op)->tp_free(op);
}

static PyMethodDef core_methods[] = {
    {"attach", (PyCFunction)(void (*)(void))core_attach, METH_VARARGS | METH_KEYWORDS,
     "Write into this mapping (a ring's mmap) from now on; holds a buffer export."},
    {"detach", core_detach, METH_NOARGS, "Stop writing and release the mapping (before close)."},
    {"invalidate", core_invalidate, METH_NOARGS,
     "Forget every hook's cached groups, signatures and call sites."},
    {NULL}};

static PyGetSetDef core_getset[] = {{"attached", core_get_attached, NULL, NULL, NULL}, {NULL}};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "fr_otel.recorder._fasthook.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The ring the compiled hooks of one recorder write.",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = core_dealloc,
    .tp_methods = core_methods,
    .tp_getset = core_getset,
};

static inline char *slot_at(Core *core, int64_t record) {
    return (char *)core->view.buf + core->header_size + (record % core->capacity) * SLOT_SIZE;
}

static inline int64_t next_record(Core *core) {
    int64_t value;
    memcpy(&value, (char *)core->view.buf + core->next_offset, 8);
    return value;
}

static inline void set_next_record(Core *core, int64_t value) {
    memcpy((char *)core->view.buf + core->next_offset, &value, 8);
}

/* --- FastHook: one patched collective ------------------------------------------------ */

typedef struct {
    PyObject *group; /* borrowed: the Python dicts hold groups until destroy (new epoch) */
    uint64_t epoch;
    Py_ssize_t index;
    int queued;
} GroupEntry;

typedef struct {
    PyObject *shape, *dtype, *out_shape, *out_dtype; /* held */
    uint64_t epoch;
    int32_t signature;
} SignatureEntry;

typedef struct {
    void *frame, *parent; /* identities only: the codes (held) tell a reused address */
    int lasti, parent_lasti;
    PyObject *code, *parent_code;
    uint64_t epoch;
    int32_t site;
} SiteEntry;

typedef struct {
    PyObject_HEAD
    PyObject *dict; /* __name__, __wrapped__ ... as on the Python wrapper */
    vectorcallfunc vectorcall;
    Core *core;
    PyObject *original;
    PyObject *slow;
    PyObject *recorder;
    PyObject *groups;     /* group -> (index, queued) for groups of one backend */
    PyObject *signatures; /* this hook's: tensors' key -> signature index */
    PyObject *owner;      /* [the writer whose indexes `signatures` holds] */
    PyObject *recent;     /* (id frame, lasti, id parent, lasti) -> (site, code, parent code) */
    PyObject *library;    /* id(code) -> is it torch's (or fr_otel's) own frame */
    PyObject *seqs;       /* per group index: () -> the group's collective seq so far */
    PyObject *p2p_seqs;
    PyObject *op_counters; /* per group index: gloo's op counter (), or None */
    PyObject *hidden_ops;  /* per group index: op numbers taken by sends no hook saw */
    PyObject *tensor_type;
    PyObject *settle_later;      /* (writer, record, work) for async ops */
    PyObject *failed;            /* ((record, is_async), exception) */
    PyObject *failed_internally; /* (exception) */
    PyObject *inputs_name;
    PyObject *outputs_name;
    Py_ssize_t group_at, inputs_at, outputs_at, async_at;
    int same;
    GroupEntry group_cache[WAYS];
    SignatureEntry signature_cache[WAYS];
    SiteEntry site_cache[WAYS];
    unsigned group_turn, signature_turn, site_turn; /* round-robin replacement */
    unsigned long long recorded; /* calls this path recorded (the rest went to `slow`) */
} FastHook;

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* time.time_ns()'s clock */
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void put_i64(char *at, int64_t value) { memcpy(at, &value, 8); }
static inline void put_i32(char *at, int32_t value) { memcpy(at, &value, 4); }

/* The argument at `position`, or the keyword `name`: borrowed, NULL if absent. */
static PyObject *argument(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                          Py_ssize_t position, PyObject *name) {
    if (nargs > position) return args[position];
    if (kwnames == NULL || name == NULL) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (PyTuple_GET_ITEM(kwnames, i) == name) return args[nargs + i];
    }
    for (Py_ssize_t i = 0; i < count; i++) { /* keywords need not be interned */
        if (PyUnicode_Compare(PyTuple_GET_ITEM(kwnames, i), name) == 0) return args[nargs + i];
    }
    if (PyErr_Occurred()) PyErr_Clear();
    return NULL;
}

/* The group's (index, queued): 1 if known, 0 if not (no error set). */
static int known_group(FastHook *self, PyObject *group, Py_ssize_t *index, int *queued) {
    uint64_t epoch = self->core->epoch;
    for (int i = 0; i < WAYS; i++) {
        GroupEntry *entry = &self->group_cache[i];
        if (entry->group == group && entry->epoch == epoch) {
            *index = entry->index;
            *queued = entry->queued;
            return 1;
        }
    }
    PyObject *known = PyDict_GetItemWithError(self->groups, group);
    if (known == NULL || !PyTuple_Check(known) || PyTuple_GET_SIZE(known) != 2) return 0;
    *index = PyLong_AsSsize_t(PyTuple_GET_ITEM(known, 0));
    *queued = PyObject_IsTrue(PyTuple_GET_ITEM(known, 1));
    if (*index < 0 || *queued < 0) return 0;
    GroupEntry *entry = &self->group_cache[self->group_turn++ % WAYS];
    entry->group = group;
    entry->epoch = epoch;
    entry->index = *index;
    entry->queued = *queued;
    return 1;
}

/* The getters behind the tensor type's ``shape`` and ``dtype``, called directly: the
 * generic attribute lookup around them cost about as much as they do, on every call. Both
 * are getset descriptors of torch's C base class, data descriptors that an instance
 * cannot shadow; looked up again whenever the type changes (its version tag). */
typedef struct {
    PyTypeObject *type; /* borrowed: the hooks hold it */
    unsigned int version;
    PyGetSetDef *shape, *dtype; /* NULL: not plain getset descriptors (PyObject_GetAttr) */
} TensorGetters;

static TensorGetters tensor_getters;

static PyGetSetDef *getset_of(PyTypeObject *type, PyObject *name) {
    PyObject *found = _PyType_Lookup(type, name); /* borrowed */
    if (found == NULL || !Py_IS_TYPE(found, &PyGetSetDescr_Type)) return NULL;
    PyGetSetDescrObject *descr = (PyGetSetDescrObject *)found;
    if (descr->d_getset->get == NULL || !PyType_IsSubtype(type, PyDescr_TYPE(descr)))
        return NULL;
    return descr->d_getset;
}

static PyObject *get_field(PyObject *value, PyGetSetDef *getset, PyObject *name) {
    return getset != NULL ? getset->get(value, getset->closure) : PyObject_GetAttr(value, name);
}

/* shape and dtype (new references) of an exact torch.Tensor: 1, or 0 (no error set). */
static int tensor_fields(FastHook *self, PyObject *value, PyObject **shape, PyObject **dtype) {
    *shape = *dtype = NULL;
    if (value == NULL || (PyObject *)Py_TYPE(value) != self->tensor_type) return 0;
    PyTypeObject *type = Py_TYPE(value);
    if (tensor_getters.type != type || tensor_getters.version != type->tp_version_tag ||
        !PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)) {
        tensor_getters.type = type;
        tensor_getters.shape = getset_of(type, str_shape);
        tensor_getters.dtype = getset_of(type, str_dtype);
        /* the lookups give the type a valid tag; without one, looked up on every call */
        tensor_getters.version = type->tp_version_tag;
    }
    *shape = get_field(value, tensor_getters.shape, str_shape);
    if (*shape == NULL) return 0;
    *dtype = get_field(value, tensor_getters.dtype, str_dtype);
    if (*dtype == NULL) {
        Py_CLEAR(*shape);
        return 0;
    }
    return 1;
}

static int same_shape(PyObject *cached, PyObject *shape) {
    if (cached == NULL || shape == NULL) return cached == shape;
    return cached == shape || PyObject_RichCompareBool(cached, shape, Py_EQ) == 1;
}

/* The signature index of these tensors, if the Python wrapper has interned it: >= 0, or
 * -1 (no error set). out_shape and out_dtype are NULL for ops of one tensor. */
static long known_signature(FastHook *self, PyObject *shape, PyObject *dtype,
                            PyObject *out_shape, PyObject *out_dtype) {
    uint64_t epoch = self->core->epoch;
    for (int i = 0; i < WAYS; i++) {
        SignatureEntry *entry = &self->signature_cache[i];
        if (entry->epoch == epoch && entry->dtype == dtype && entry->out_dtype == out_dtype &&
            same_shape(entry->shape, shape) && same_shape(entry->out_shape, out_shape))
            return entry->signature;
    }
    if (PyErr_Occurred()) return -1;
    /* the Python wrapper's dict, keyed as it keys it: (shape, dtype) or both pairs */
    long signature = -1;
    PyObject *writer = PyObject_GetAttr(self->recorder, str_writer);
    PyObject *key = NULL;
    if (writer == NULL || PyList_GET_SIZE(self->owner) != 1 ||
        PyList_GET_ITEM(self->owner, 0) != writer)
        goto done; /* indexes of another writer: the Python wrapper resets them */
    key = out_shape == NULL ? Py_BuildValue("(OO)", shape, dtype)
                            : Py_BuildValue("((OO)(OO))", shape, dtype, out_shape, out_dtype);
    if (key == NULL) goto done;
    PyObject *value = PyDict_GetItemWithError(self->signatures, key);
    if (value == NULL) goto done;
    signature = PyLong_AsLong(value);
    if (signature < 0 || signature > INT32_MAX) {
        signature = -1;
        goto done;
    }
    SignatureEntry *entry = &self->signature_cache[self->signature_turn++ % WAYS];
    Py_INCREF(shape);
    Py_INCREF(dtype);
    Py_XINCREF(out_shape);
    Py_XINCREF(out_dtype);
    Py_XSETREF(entry->shape, shape);
    Py_XSETREF(entry->dtype, dtype);
    Py_XSETREF(entry->out_shape, out_shape);
    Py_XSETREF(entry->out_dtype, out_dtype);
    entry->epoch = epoch;
    entry->signature = (int32_t)signature;
done:
    Py_XDECREF(key);
    Py_XDECREF(writer);
    return signature;
}

/* The call site of the calling frame, if the Python wrapper has seen it: >= 0, or -1 (no
 * error set). A training loop issues its collectives from one long-lived frame, at a few
 * places, and the stack above a live frame cannot change: the caller and its parent
 * (identity, code, instruction offset) find the site again (see capture.py). */
static long known_site(FastHook *self) {
    PyFrameObject *frame = PyEval_GetFrame(); /* borrowed: the caller's frame */
    if (frame == NULL) return -1;
    uint64_t epoch = self->core->epoch;
    long site = -1;
    PyCodeObject *code = PyFrame_GetCode(frame);
    PyFrameObject *parent = PyFrame_GetBack(frame);
    PyCodeObject *parent_code = parent != NULL ? PyFrame_GetCode(parent) : NULL;
    int lasti = PyFrame_GetLasti(frame);
    int parent_lasti = parent != NULL ? PyFrame_GetLasti(parent) : -1;
    PyObject *code_id = NULL, *quick = NULL;
    for (int i = 0; i < WAYS; i++) {
        SiteEntry *entry = &self->site_cache[i];
        if (entry->frame == frame && entry->lasti == lasti && entry->parent == parent &&
            entry->parent_lasti == parent_lasti && entry->epoch == epoch &&
            entry->code == (PyObject *)code && entry->parent_code == (PyObject *)parent_code) {
            site = entry->site;
            goto done;
        }
    }
    /* only a user frame: torch's own frames in between need the Python walk */
    code_id = PyLong_FromVoidPtr(code);
    if (code_id == NULL || PyDict_GetItemWithError(self->library, code_id) != Py_False)
        goto done;
    quick = Py_BuildValue("(NiNi)", PyLong_FromVoidPtr(frame), lasti,
                          parent != NULL ? PyLong_FromVoidPtr(parent) : PyLong_FromLong(0),
                          parent_lasti);
    if (quick == NULL) goto done;
    PyObject *hit = PyDict_GetItemWithError(self->recent, quick);
    /* a dead frame's id can be reused by a new frame: the codes must match too */
    if (hit == NULL || !PyTuple_Check(hit) || PyTuple_GET_SIZE(hit) != 3) goto done;
    if (PyTuple_GET_ITEM(hit, 1) != (PyObject *)code) goto done;
    if (PyTuple_GET_ITEM(hit, 2) != (parent_code != NULL ? (PyObject *)parent_code : Py_None))
        goto done;
    site = PyLong_AsLong(PyTuple_GET_ITEM(hit, 0));
    if (site < 0 || site > INT32_MAX) {
        site = -1;
        goto done;
    }
    SiteEntry *entry = &self->site_cache[self->site_turn++ % WAYS];
    Py_INCREF(code);
    Py_XINCREF(parent_code);
    Py_XSETREF(entry->code, (PyObject *)code);
    Py_XSETREF(entry->parent_code, (PyObject *)parent_code);
    entry->frame = frame;
    entry->parent = parent;
    entry->lasti = lasti;
    entry->parent_lasti = parent_lasti;
    entry->epoch = epoch;
    entry->site = (int32_t)site;
done:
    Py_XDECREF(quick);
    Py_XDECREF(code_id);
    Py_XDECREF(parent_code);
    Py_XDECREF(parent);
    Py_XDECREF(code);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        site = -1;
    }
    return site;
}

/* Record the start of a call the caches know everything about. Returns NOT_RECORDED
 * (nothing changed, no error set), RECORDED or RECORDED_QUEUED with *record set. */
static int begin(FastHook *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                 int64_t *record, int *is_async) {
    Core *core = self->core;
    if (!core->attached) return NOT_RECORDED; /* the Python wrapper opens the ring */
    int outcome = NOT_RECORDED;
    PyObject *shape = NULL, *dtype = NULL, *out_shape = NULL, *out_dtype = NULL;
    PyObject *seq_value = NULL;
    Py_ssize_t index;
    int queued;
    PyObject *group = argument(args, nargs, kwnames, self->group_at, str_group);
    if (!known_group(self, group != NULL ? group : Py_None, &index, &queued)) goto done;
    if (index >= PyList_GET_SIZE(self->seqs) || index >= PyList_GET_SIZE(self->p2p_seqs) ||
        index >= PyList_GET_SIZE(self->op_counters) || index >= PyList_GET_SIZE(self->hidden_ops))
        goto done;

    PyObject *inputs = argument(args, nargs, kwnames, self->inputs_at, self->inputs_name);
    if (!tensor_fields(self, inputs, &shape, &dtype)) goto done;
    if (!self->same) {
        PyObject *outputs = argument(args, nargs, kwnames, self->outputs_at, self->outputs_name);
        if (!tensor_fields(self, outputs, &out_shape, &out_dtype)) goto done;
    }
    long signature = known_signature(self, shape, dtype, out_shape, out_dtype);
    if (signature < 0) goto done;
    long site = known_site(self);
    if (site < 0) goto done;

    int async_flag = 0;
    PyObject *async_op = argument(args, nargs, kwnames, self->async_at, str_async_op);
    if (async_op != NULL && (async_flag = PyObject_IsTrue(async_op)) < 0) goto done;
    /* torch's own ordinal (the one its Flight Recorder writes), asked before the call.
     * On gloo it is the op number less the sends and receives (capture._without_p2p),
     * worked out here: that Python function's frame costs more than the count itself */
    PyObject *op_counter = PyList_GET_ITEM(self->op_counters, index);
    PyObject *counter = op_counter != Py_None ? op_counter : PyList_GET_ITEM(self->seqs, index);
    Py_INCREF(counter);
    seq_value = PyObject_CallNoArgs(counter);
    Py_DECREF(counter);
    if (seq_value == NULL) goto done;
    int64_t p2p_seq = PyLong_AsLongLong(PyList_GET_ITEM(self->p2p_seqs, index));
    int64_t seq = PyLong_AsLongLong(seq_value) + 1;
    if (op_counter != Py_None)
        seq -= p2p_seq + PyLong_AsLongLong(PyList_GET_ITEM(self->hidden_ops, index));
    if (PyErr_Occurred()) goto done;

    int64_t at = next_record(core);
    if (at < 0) goto done; /* the header is in a shared file: never write outside the ring */
    char *slot = slot_at(core, at);
    put_i64(slot + RECORD_OFFSET, at);
    put_i32(slot + GROUP_OFFSET, (int32_t)index);
    put_i64(slot + SEQ_OFFSET, seq);
    put_i64(slot + P2P_SEQ_OFFSET, p2p_seq);
    put_i32(slot + SIGNATURE_OFFSET, (int32_t)signature);
    put_i32(slot + SITE_OFFSET, (int32_t)site);
    put_i32(slot + PEER_OFFSET, -1); /* peer: collectives have none */
    put_i64(slot + CREATED_OFFSET, now_ns());
    put_i64(slot + DONE_OFFSET, 0);
    /* NCCL marks even an async op's future complete once it is queued: only torch's FR
     * knows when it ran (frmerge reads it at flush time) */
    slot[STATE_OFFSET] = queued ? SCHEDULED : STARTED;
    memset(slot + STATE_OFFSET + 1, 0, SLOT_SIZE - STATE_OFFSET - 1);
    /* only now: a reader that sees the new count finds the slot written */
    set_next_record(core, at + 1);
    *record = at;
    *is_async = async_flag;
    self->recorded++;
    outcome = queued ? RECORDED_QUEUED : RECORDED;
done:
    Py_XDECREF(seq_value);
    Py_XDECREF(shape);
    Py_XDECREF(dtype);
    Py_XDECREF(out_shape);
    Py_XDECREF(out_dtype);
    if (PyErr_Occurred()) PyErr_Clear();
    return outcome;
}

static void call_quietly(PyObject *function, PyObject *arguments) {
    if (arguments == NULL) {
        PyErr_Clear();
        return;
    }
    PyObject *result = PyObject_Call(function, arguments, NULL);
    Py_DECREF(arguments);
    if (result == NULL) PyErr_Clear();
    Py_XDECREF(result);
}

/* Mark a finished call's slot, or hand an async work to the Python side. */
static void finish(FastHook *self, int64_t record, int is_async, PyObject *result) {
    Core *core = self->core;
    if (!core->attached) return; /* the ring was closed at exit during the call */
    if (is_async && result != Py_None) {
        PyObject *writer = PyObject_GetAttr(self->recorder, str_writer);
        if (writer != NULL && writer != Py_None) {
            PyObject *arguments = Py_BuildValue("(OLO)", writer, (long long)record, result);
            if (arguments != NULL) {
                PyObject *done = PyObject_Call(self->settle_later, arguments, NULL);
                Py_DECREF(arguments);
                Py_XDECREF(done);
            }
        }
        Py_XDECREF(writer);
        if (PyErr_Occurred()) { /* counted by the Python side, never raised */
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            PyErr_NormalizeException(&type, &value, &traceback);
            call_quietly(self->failed_internally, value != NULL ? PyTuple_Pack(1, value) : NULL);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
        }
        return;
    }
    /* the slot is still this record's unless a whole ring of records began since */
    if (next_record(core) - record <= core->capacity) {
        char *slot = slot_at(core, record);
        put_i64(slot + DONE_OFFSET, now_ns());
        slot[STATE_OFFSET] = COMPLETED;
    }
}

/* function(token, value), for its effect: 0, or -1 with the error left set where it raised
 * what is not an Exception (KeyboardInterrupt, SystemExit: the user's, not the recorder's).
 * An Exception it raised is dropped: the Python side counts its own errors. */
static int notify(PyObject *function, PyObject *token, PyObject *value) {
    PyObject *done = PyObject_CallFunctionObjArgs(function, token, value, NULL);
    if (done != NULL) {
        Py_DECREF(done);
        return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
    return 0;
}

/* failed(token, exception) with the pending exception (the original's), which stays
 * pending; a NULL token (it could not be built) skips the call. */
static void report_failure(PyObject *failed, PyObject *token) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL) PyException_SetTraceback(value, traceback);
    if (token == NULL || value == NULL) {
        PyErr_Clear();
    } else if (notify(failed, token, value) < 0) {
        /* the user's interrupt while failed() ran: it goes on, the collective's error as
         * its context, as Python itself would chain them */
        PyObject *now_type, *now_value, *now_traceback;
        PyErr_Fetch(&now_type, &now_value, &now_traceback);
        PyErr_NormalizeException(&now_type, &now_value, &now_traceback);
        if (now_value != NULL) {
            PyException_SetContext(now_value, value); /* steals value */
        } else {
            Py_DECREF(value);
        }
        Py_XDECREF(type);
        Py_XDECREF(traceback);
        PyErr_Restore(now_type, now_value, now_traceback);
        return;
    }
    PyErr_Restore(type, value, traceback);
}

static PyObject *hook_call(PyObject *callable, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames) {
    FastHook *self = (FastHook *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    int64_t record = -1;
    int is_async = 0;
    int outcome = begin(self, args, nargs, kwnames, &record, &is_async);
    if (outcome == NOT_RECORDED) return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
    PyObject *result = PyObject_Vectorcall(self->original, args, nargsf, kwnames);
    if (outcome == RECORDED_QUEUED) return result;
    if (result == NULL) {
        if (PyErr_ExceptionMatches(PyExc_Exception)) {
            PyObject *token =
                Py_BuildValue("(LO)", (long long)record, is_async ? Py_True : Py_False);
            report_failure(self->failed, token);
            Py_XDECREF(token);
        }
        return NULL;
    }
    finish(self, record, is_async, result);
    return result;
}

/* the argument names, interned, so that argument() mostly matches keywords by identity */
static int set_names(FastHook *self, PyObject *inputs_name, PyObject *outputs_name) {
    PyObject *names[2] = {inputs_name, outputs_name};
    PyObject **targets[2] = {&self->inputs_name, &self->outputs_name};
    for (int i = 0; i < 2; i++) {
        PyObject *name = names[i];
        if (name == Py_None) {
            Py_CLEAR(*targets[i]);
            continue;
        }
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "argument names must be str or None");
            return -1;
        }
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        Py_XSETREF(*targets[i], name);
    }
    return 0;
}

/* FastHook(state): every field read from one object (capture.HookState), by name */
static int hook_init(PyObject *op, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"state", NULL};
    FastHook *self = (FastHook *)op;
    PyObject *state;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:FastHook", keywords, &state)) return -1;
    struct {
        const char *name;
        PyObject **target;
        PyTypeObject *type; /* NULL: any object */
    } objects[] = {
        {"core", (PyObject **)&self->core, &CoreType},
        {"original", &self->original, NULL},
        {"slow", &self->slow, NULL},
        {"recorder", &self->recorder, NULL},
        {"groups", &self->groups, &PyDict_Type},
        {"signatures", &self->signatures, &PyDict_Type},
        {"owner", &self->owner, &PyList_Type},
        {"recent", &self->recent, &PyDict_Type},
        {"library", &self->library, &PyDict_Type},
        {"seqs", &self->seqs, &PyList_Type},
        {"p2p_seqs", &self->p2p_seqs, &PyList_Type},
        {"op_counters", &self->op_counters, &PyList_Type},
        {"hidden_ops", &self->hidden_ops, &PyList_Type},
        {"tensor_type", &self->tensor_type, NULL},
        {"settle_later", &self->settle_later, NULL},
        {"failed", &self->failed, NULL},
        {"failed_internally", &self->failed_internally, NULL},
    };
    enum { N_OBJECTS = sizeof(objects) / sizeof(objects[0]) };
    PyObject *values[N_OBJECTS] = {NULL};
    for (int i = 0; i < N_OBJECTS; i++) {
        values[i] = PyObject_GetAttrString(state, objects[i].name);
        if (values[i] == NULL) goto fail;
        if (objects[i].type != NULL && !PyObject_TypeCheck(values[i], objects[i].type)) {
            PyErr_Format(PyExc_TypeError, "FastHook state.%s must be %s, not %s",
                         objects[i].name, objects[i].type->tp_name, Py_TYPE(values[i])->tp_name);
            goto fail;
        }
    }
    struct {
        const char *name;
        Py_ssize_t *target;
    } indexes[] = {{"group_at", &self->group_at},
                   {"inputs_at", &self->inputs_at},
                   {"outputs_at", &self->outputs_at},
                   {"async_at", &self->async_at}};
    Py_ssize_t found[4];
    for (int i = 0; i < 4; i++) {
        PyObject *value = PyObject_GetAttrString(state, indexes[i].name);
        if (value == NULL) goto fail;
        found[i] = PyLong_AsSsize_t(value);
        Py_DECREF(value);
        if (found[i] == -1 && PyErr_Occurred()) goto fail;
    }
    PyObject *same_value = PyObject_GetAttrString(state, "same");
    int same = same_value == NULL ? -1 : PyObject_IsTrue(same_value);
    Py_XDECREF(same_value);
    if (same < 0) goto fail;
    PyObject *inputs_name = PyObject_GetAttrString(state, "inputs_name");
    PyObject *outputs_name = inputs_name ? PyObject_GetAttrString(state, "outputs_name") : NULL;
    if (outputs_name == NULL) {
        Py_XDECREF(inputs_name);
        goto fail;
    }
    for (int i = 0; i < N_OBJECTS; i++) Py_XSETREF(*objects[i].target, values[i]); /* steals */
    for (int i = 0; i < 4; i++) *indexes[i].target = found[i];
    self->same = same;
    int named = set_names(self, inputs_name, outputs_name);
    Py_DECREF(inputs_name);
    Py_DECREF(outputs_name);
    if (named < 0) return -1;
    self->vectorcall = hook_call;
    return 0;
fail:
    for (int i = 0; i < N_OBJECTS; i++) Py_XDECREF(values[i]);
    return -1;
}

static PyObject *hook_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    FastHook *self = (FastHook *)type->tp_alloc(type, 0);
    if (self != NULL) self->vectorcall = hook_call;
    return (PyObject *)self;
}

static PyObject *hook_vectorcall_unready(PyObject *callable, PyObject *const *args,
                                         size_t nargsf, PyObject *kwnames) {
    PyErr_SetString(PyExc_TypeError, "FastHook was not initialised");
    return NULL;
}

static int hook_traverse(PyObject *op, visitproc visit, void *arg) {
    FastHook *self = (FastHook *)op;
    Py_VISIT(self->dict);
    Py_VISIT(self->core);
    Py_VISIT(self->original);
    Py_VISIT(self->slow);
    Py_VISIT(self->recorder);
    Py_VISIT(self->groups);
    Py_VISIT(self->signatures);
    Py_VISIT(self->owner);
    Py_VISIT(self->recent);
    Py_VISIT(self->library);
    Py_VISIT(self->seqs);
    Py_VISIT(self->p2p_seqs);
    Py_VISIT(self->op_counters);
    Py_VISIT(self->hidden_ops);
    Py_VISIT(self->tensor_type);
    Py_VISIT(self->settle_later);
    Py_VISIT(self->failed);
    Py_VISIT(self->failed_internally);
    return 0;
}

static int hook_clear(PyObject *op) {
    FastHook *self = (FastHook *)op;
    self->vectorcall = hook_vectorcall_unready;
    Py_CLEAR(self->dict);
    Py_CLEAR(self->core);
    Py_CLEAR(self->original);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->recorder);
    Py_CLEAR(self->groups);
    Py_CLEAR(self->signatures);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->recent);
    Py_CLEAR(self->library);
    Py_CLEAR(self->seqs);
    Py_CLEAR(self->p2p_seqs);
    Py_CLEAR(self->op_counters);
    Py_CLEAR(self->hidden_ops);
    Py_CLEAR(self->tensor_type);
    Py_CLEAR(self->settle_later);
    Py_CLEAR(self->failed);
    Py_CLEAR(self->failed_internally);
    Py_CLEAR(self->inputs_name);
    Py_CLEAR(self->outputs_name);
    for (int i = 0; i < WAYS; i++) {
        SignatureEntry *signature = &self->signature_cache[i];
        Py_CLEAR(signature->shape);
        Py_CLEAR(signature->dtype);
        Py_CLEAR(signature->out_shape);
        Py_CLEAR(signature->out_dtype);
        Py_CLEAR(self->site_cache[i].code);
        Py_CLEAR(self->site_cache[i].parent_code);
        self->group_cache[i].group = NULL;
    }
    return 0;
}

/* tp_dealloc of this file's collectable types: their own tp_clear, then free */
static void gc_dealloc(PyObject *op) {
    PyObject_GC_UnTrack(op);
    Py_TYPE(op)->tp_clear(op);
    Py_TYPE(op)->tp_free(op);
}

static PyMemberDef hook_members[] = {
    {"recorded", T_ULONGLONG, offsetof(FastHook, recorded), READONLY,
     "Calls recorded here; the others were handed to the Python wrapper."},
    {NULL}};

static PyGetSetDef hook_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL}, {NULL}};

/* The slots of this file's callables (type T): patched in for a torch function, so called
 * by vectorcall, with a __dict__ for __name__, __wrapped__ ..., and collectable. */
#define PATCHED_CALLABLE(T)                                                                \
    .tp_basicsize = sizeof(T),                                                             \
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,      \
    .tp_dealloc = gc_dealloc, .tp_call = PyVectorcall_Call,                                \
    .tp_vectorcall_offset = offsetof(T, vectorcall), .tp_dictoffset = offsetof(T, dict),   \
    .tp_getset = hook_getset

static PyTypeObject FastHookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "fr_otel.recorder._fasthook.FastHook",
    PATCHED_CALLABLE(FastHook),
    .tp_doc = "A collective's recorder wrapper: the repeating case in C (see capture.py).",
    .tp_new = hook_new,
    .tp_init = hook_init,
    .tp_traverse = hook_traverse,
    .tp_clear = hook_clear,
    .tp_members = hook_members,
};

/* --- RecordedCall: the original called from C, between Python's two halves ---------- */

/* Whatever Python frame is on the stack while the collective runs stands in the traceback
 * of every exception it raises (a gloo timeout, a peer gone, a size mismatch), and people
 * blame what their traceback shows. So the Python code that records a call the C path
 * does not know runs in two halves, before(*args, **kwargs) -> token and after(token,
 * result) or failed(token, exception), and this object calls the original between them:
 * a call from C adds no traceback entry. A None token: nothing to finish, the original is
 * just called. failed() gets every exception, KeyboardInterrupt included (a guard must be
 * let go however the call ends); the halves catch their own errors, and one that escapes
 * them anyway is dropped (an Exception) or goes on (anything else: the user's). */

enum { ORIGINAL, BEFORE, AFTER, FAILED, PARTS }; /* RecordedCall's arguments, in order */

typedef struct {
    PyObject_HEAD
    PyObject *dict; /* __name__, __wrapped__ ... as on a Python function */
    vectorcallfunc vectorcall;
    PyObject *parts[PARTS];
} RecordedCall;

static PyObject *recorded_call(PyObject *callable, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
    PyObject *const *parts = ((RecordedCall *)callable)->parts;
    PyObject *token = PyObject_Vectorcall(parts[BEFORE], args, nargsf, kwnames);
    if (token == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception)) return NULL;
        PyErr_Clear(); /* never the recorder's error in training: the call goes unrecorded */
        return PyObject_Vectorcall(parts[ORIGINAL], args, nargsf, kwnames);
    }
    if (token == Py_None) {
        Py_DECREF(token);
        return PyObject_Vectorcall(parts[ORIGINAL], args, nargsf, kwnames);
    }
    PyObject *result = PyObject_Vectorcall(parts[ORIGINAL], args, nargsf, kwnames);
    if (result == NULL) {
        report_failure(parts[FAILED], token);
    } else if (notify(parts[AFTER], token, result) < 0) {
        Py_CLEAR(result);
    }
    Py_DECREF(token);
    return result;
}

static PyObject *recorded_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    RecordedCall *self = (RecordedCall *)type->tp_alloc(type, 0);
    if (self != NULL) self->vectorcall = hook_vectorcall_unready;
    return (PyObject *)self;
}

static int recorded_init(PyObject *op, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"original", "before", "after", "failed", NULL};
    RecordedCall *self = (RecordedCall *)op;
    PyObject *parts[PARTS];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO:RecordedCall", keywords,
                                     &parts[ORIGINAL], &parts[BEFORE], &parts[AFTER],
                                     &parts[FAILED]))
        return -1;
    for (int i = 0; i < PARTS; i++) {
        if (!PyCallable_Check(parts[i])) {
            PyErr_Format(PyExc_TypeError, "RecordedCall: %s must be callable", keywords[i]);
            return -1;
        }
    }
    for (int i = 0; i < PARTS; i++) {
        Py_INCREF(parts[i]);
        Py_XSETREF(self->parts[i], parts[i]);
    }
    self->vectorcall = recorded_call;
    return 0;
}

static int recorded_traverse(PyObject *op, visitproc visit, void *arg) {
    RecordedCall *self = (RecordedCall *)op;
    Py_VISIT(self->dict);
    for (int i = 0; i < PARTS; i++) Py_VISIT(self->parts[i]);
    return 0;
}

static int recorded_clear(PyObject *op) {
    RecordedCall *self = (RecordedCall *)op;
    self->vectorcall = hook_vectorcall_unready;
    Py_CLEAR(self->dict);
    for (int i = 0; i < PARTS; i++) Py_CLEAR(self->parts[i]);
    return 0;
}

static PyTypeObject RecordedCallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "fr_otel.recorder._fasthook.RecordedCall",
    PATCHED_CALLABLE(RecordedCall),
    .tp_doc = "RecordedCall(original, before, after, failed): the original called from C "
              "between the two halves of the Python code that records it, so that no "
              "frame of the recorder is in the traceback of what the original raises.",
    .tp_new = recorded_new,
    .tp_init = recorded_init,
    .tp_traverse = recorded_traverse,
    .tp_clear = recorded_clear,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fr_otel.recorder._fasthook",
    .m_doc = "The recorder's collective wrapper, repeating case, in C.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__fasthook(void) {
    if (PyType_Ready(&CoreType) < 0 || PyType_Ready(&FastHookType) < 0 ||
        PyType_Ready(&RecordedCallType) < 0)
        return NULL;
    struct {
        PyObject **target;
        const char *text;
    } names[] = {{&str_writer, "ring"},
                 {&str_shape, "shape"},
                 {&str_dtype, "dtype"},
                 {&str_group, "group"},
                 {&str_async_op, "async_op"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i].target = PyUnicode_InternFromString(names[i].text);
        if (*names[i].target == NULL) return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&CoreType);
    Py_INCREF(&FastHookType);
    Py_INCREF(&RecordedCallType);
    if (PyModule_AddObject(m, "Core", (PyObject *)&CoreType) < 0 ||
        PyModule_AddObject(m, "FastHook", (PyObject *)&FastHookType) < 0 ||
        PyModule_AddObject(m, "RecordedCall", (PyObject *)&RecordedCallType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
