/*
 * Optional compiled accelerator for kafkatw.protocol.records: the record loops
 * of the RecordBatch v2 codec in plain CPython C API (Python 3.11+); and two
 * per-record steps of the producer (kafkatw/client/producer.py, producer_batch.py): send's hot
 * path (HotSender) and the on_delivery loop of an acknowledged batch
 * (complete_records).
 *
 * records.py, producer.py and producer_batch.py use it when it imports (see "Compiled
 * accelerator" in docs/design.md) and keep their pure-Python code, which
 * gives the same results; KAFKATW_PURE_PYTHON=1 makes them ignore this module.
 *
 * Every read is bounds-checked against the end of the records region given by
 * the caller; no length read from the wire is trusted.  Whatever these
 * functions do not handle exactly as the Python loops do (varints wider than
 * 64 bits, keys that are not bytes, timestamps that are not ints, ...) they
 * decline: decode_records returns False with nothing appended, encode_records
 * returns NotImplemented, and records.py runs the Python loop instead.
 *
 * The record layout (Kafka protocol guide, "Record"):
 *
 *     length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
 *     keyLength varint (-1: null), key, valueLength varint (-1: null), value,
 *     headersCount varint, headers [keyLength varint, key utf-8,
 *                                   valueLength varint (-1: null), value]
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

static PyObject *CorruptRecordError = NULL;
static PyObject *InvalidRecordError = NULL;
static PyObject *empty_tuple = NULL;

/* ---- varints ----------------------------------------------------------------- */

enum { V_OK = 0, V_TRUNCATED = -1, V_TOO_LONG = -2, V_WIDE = -3 };

/*
 * Read a zig-zag varint at *p (< end).  As records.decode_varint: at most 10
 * bytes; V_WIDE when the 10th byte carries bits beyond the 64th (Python gives
 * a wider int there: the caller declines the batch).
 */
static inline int
read_varint(const unsigned char **pp, const unsigned char *end, int64_t *out)
{
    const unsigned char *p = *pp;
    uint64_t result = 0;
    int shift = 0;
    for (;;) {
        if (p >= end)
            return V_TRUNCATED;
        unsigned int b = *p++;
        if (shift == 63) {
            if (b >= 0x80)
                return V_TOO_LONG;
            if (b > 1)
                return V_WIDE;
        }
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80)
            break;
        shift += 7;
    }
    *pp = p;
    *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
    return V_OK;
}

/*
 * Read a record's nullable length-prefixed field (key, value, header key or
 * value) at *pp: *out and *len are its bytes, NULL and -1 for null.  V_OK, or
 * read_varint's status for the length; V_TRUNCATED also where the bytes run
 * past end.
 */
static inline int
read_nullable_bytes(const unsigned char **pp, const unsigned char *end, const unsigned char **out, int64_t *len)
{
    int status = read_varint(pp, end, len);
    if (status != V_OK)
        return status;
    if (*len < 0) {
        *out = NULL;
        *len = -1;
        return V_OK;
    }
    if (*len > end - *pp)
        return V_TRUNCATED;
    *out = *pp;
    *pp += *len;
    return V_OK;
}

static int
varint_error(int status)
{
    if (status == V_TOO_LONG)
        PyErr_SetString(CorruptRecordError, "varint longer than 10 bytes");
    else
        PyErr_SetString(CorruptRecordError, "records truncated");
    return -1;
}

static inline Py_ssize_t
uvarint_size(uint64_t v)
{
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint64_t
zigzag(int64_t n)
{
    return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
}

static inline Py_ssize_t
varint_size(int64_t n)
{
    return uvarint_size(zigzag(n));
}

static inline unsigned char *
write_varint(unsigned char *p, int64_t n)
{
    uint64_t v = zigzag(n);
    while (v >= 0x80) {
        *p++ = (unsigned char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

/* base + delta as a Python int, without overflow */
static inline PyObject *
add_int(int64_t base, int64_t delta)
{
    int64_t sum;
    if (!__builtin_add_overflow(base, delta, &sum))
        return PyLong_FromLongLong(sum);
    PyObject *a = PyLong_FromLongLong(base);
    PyObject *b = PyLong_FromLongLong(delta);
    PyObject *r = (a && b) ? PyNumber_Add(a, b) : NULL;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return r;
}

/* ---- decoding ---------------------------------------------------------------- */

static int
header_int64(PyObject *header, Py_ssize_t i, int64_t *out)
{
    PyObject *item = PyTuple_GET_ITEM(header, i);
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "batch header field out of range");
        return -1;
    }
    *out = v;
    return 0;
}

/* A new tuple of type cls (a tuple subclass, or tuple) holding n new references from items. */
static inline PyObject *
new_record(PyTypeObject *cls, PyObject **items, Py_ssize_t n)
{
    PyObject *t;
    if (cls == &PyTuple_Type)
        t = PyTuple_New(n);
    else
        t = cls->tp_alloc(cls, n); /* as tuple's subtype new does */
    if (t == NULL) {
        for (Py_ssize_t i = 0; i < n; i++)
            Py_DECREF(items[i]);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SET_ITEM(t, i, items[i]);
    return t;
}

/*
 * Whether records of cls holding topic, partition and otherwise ints, bytes,
 * None and tuples of those may leave the cyclic garbage collector's lists as
 * soon as they are made.  CPython's collector does this itself for exact
 * tuples of untracked objects at their first collection (_PyTuple_MaybeUntrack);
 * doing it at once spares each young collection the walk over them (the
 * consumer makes hundreds of thousands per second).  Such a record cannot be
 * part of a reference cycle: it is immutable and refers only to atomic objects
 * and its type, and a tuple subclass without a __dict__ or slots of its own
 * (a NamedTuple) has no other references.
 */
static int
untrack_atomic(PyTypeObject *cls, PyObject *topic, PyObject *partition)
{
    if (!PyUnicode_CheckExact(topic) || !PyLong_CheckExact(partition))
        return 0;
    if (cls == &PyTuple_Type)
        return 1;
    /* a subclass whose instances are tuples and nothing more: no __dict__, no slots,
       the tuple's item size, the tuple's traverse or the generic subtype one */
    return cls->tp_dictoffset == 0 && cls->tp_itemsize == PyTuple_Type.tp_itemsize &&
           cls->tp_basicsize == PyTuple_Type.tp_basicsize && cls->tp_weaklistoffset == 0;
}


/* the header fields the record loop needs */
typedef struct {
    int64_t base_offset, attributes, base_ts, max_ts, count;
} batch_fields;

/*
 * Append the records of the region [p, end) of a batch to out (see
 * decode_records).  1: decoded; 0: declined (the Python loop must decode it),
 * nothing appended; -1: an error is set, nothing appended.
 */
static int
decode_region(const unsigned char *p, const unsigned char *end, const batch_fields *b, PyObject *out,
              PyObject *topic, PyObject *partition, PyTypeObject *cls, int as_record)
{
    Py_ssize_t first = PyList_GET_SIZE(out);
    {
        int64_t base_offset = b->base_offset, base_ts = b->base_ts, count = b->count;
        int log_append = (b->attributes & 0x08) != 0;
        /* consumer records hold only str, ints, bytes, None and untracked tuples */
        int untrack_records = !as_record && untrack_atomic(cls, topic, partition);
        PyObject *ts_type = PyLong_FromLong(log_append ? 1 : 0);
        PyObject *max_ts_obj = PyLong_FromLongLong(b->max_ts);
        if (ts_type == NULL || max_ts_obj == NULL) {
            Py_XDECREF(ts_type);
            Py_XDECREF(max_ts_obj);
            return -1;
        }
        int status;
        int64_t v, ts_delta, off_delta;
        int64_t i;
        for (i = 0; i < count; i++) {
            PyObject *key = NULL, *value = NULL, *headers = NULL;
            /* length (skipped: the batch must still end where its last record does), attributes */
            if ((status = read_varint(&p, end, &v)) != V_OK && status != V_WIDE)
                goto corrupt;
            if (status == V_WIDE)
                goto decline;
            p += 1;
            if ((status = read_varint(&p, end, &ts_delta)) != V_OK)
                goto varint_failed;
            if ((status = read_varint(&p, end, &off_delta)) != V_OK)
                goto varint_failed;
            /* key, value (the bytes past end: V_TRUNCATED, "records truncated") */
            const unsigned char *bytes;
            if ((status = read_nullable_bytes(&p, end, &bytes, &v)) != V_OK)
                goto varint_failed;
            key = bytes == NULL ? Py_NewRef(Py_None)
                                : PyBytes_FromStringAndSize((const char *)bytes, (Py_ssize_t)v);
            if (key == NULL)
                goto failed;
            if ((status = read_nullable_bytes(&p, end, &bytes, &v)) != V_OK)
                goto varint_failed_kv;
            value = bytes == NULL ? Py_NewRef(Py_None)
                                  : PyBytes_FromStringAndSize((const char *)bytes, (Py_ssize_t)v);
            if (value == NULL)
                goto failed_kv;
            /* headers */
            if ((status = read_varint(&p, end, &v)) != V_OK)
                goto varint_failed_kv;
            if (v == 0) {
                headers = as_record ? PyList_New(0) : Py_NewRef(empty_tuple);
                if (headers == NULL)
                    goto failed_kv;
            } else {
                int64_t nh = v;
                if (nh < 0) {
                    PyErr_Format(CorruptRecordError, "invalid number of record headers %lld", (long long)nh);
                    goto failed_kv;
                }
                if (nh > (end - p) / 2) /* each header takes two bytes at least */
                    goto truncated_kv;
                headers = PyList_New((Py_ssize_t)nh);
                if (headers == NULL)
                    goto failed_kv;
                for (int64_t h = 0; h < nh; h++) {
                    PyObject *hk, *hv, *pair;
                    if ((status = read_nullable_bytes(&p, end, &bytes, &v)) != V_OK)
                        goto varint_failed_kvh;
                    if (bytes == NULL) {
                        PyErr_SetString(CorruptRecordError, "null header key");
                        goto failed_kvh;
                    }
                    hk = PyUnicode_DecodeUTF8((const char *)bytes, (Py_ssize_t)v, "replace");
                    if (hk == NULL)
                        goto failed_kvh;
                    if ((status = read_nullable_bytes(&p, end, &bytes, &v)) != V_OK) {
                        Py_DECREF(hk);
                        goto varint_failed_kvh;
                    }
                    hv = bytes == NULL ? Py_NewRef(Py_None)
                                       : PyBytes_FromStringAndSize((const char *)bytes, (Py_ssize_t)v);
                    if (hv == NULL) {
                        Py_DECREF(hk);
                        goto failed_kvh;
                    }
                    pair = PyTuple_New(2);
                    if (pair == NULL) {
                        Py_DECREF(hk);
                        Py_DECREF(hv);
                        goto failed_kvh;
                    }
                    PyTuple_SET_ITEM(pair, 0, hk);
                    PyTuple_SET_ITEM(pair, 1, hv);
                    PyObject_GC_UnTrack(pair); /* str and bytes or None: no cycle (see untrack_atomic) */
                    PyList_SET_ITEM(headers, (Py_ssize_t)h, pair);
                }
                if (!as_record) {
                    PyObject *t = PyList_AsTuple(headers);
                    Py_DECREF(headers);
                    headers = t;
                    if (headers == NULL)
                        goto failed_kv;
                    PyObject_GC_UnTrack(headers); /* of untracked pairs */
                }
            }
            /* the record */
            {
                PyObject *offset = add_int(base_offset, off_delta);
                PyObject *timestamp;
                PyObject *record;
                if (offset == NULL)
                    goto failed_kvh;
                timestamp = log_append ? Py_NewRef(max_ts_obj) : add_int(base_ts, ts_delta);
                if (timestamp == NULL) {
                    Py_DECREF(offset);
                    goto failed_kvh;
                }
                if (as_record) {
                    PyObject *items[5] = {offset, timestamp, key, value, headers};
                    record = new_record(cls, items, 5);
                } else {
                    PyObject *items[8] = {Py_NewRef(topic), Py_NewRef(partition), offset, timestamp,
                                          Py_NewRef(ts_type), key, value, headers};
                    record = new_record(cls, items, 8);
                }
                /* new_record took (or released) the references */
                if (record == NULL)
                    goto failed_loop;
                if (untrack_records)
                    PyObject_GC_UnTrack(record);
                if (PyList_Append(out, record) < 0) {
                    Py_DECREF(record);
                    goto failed_loop;
                }
                Py_DECREF(record);
            }
            continue;

        varint_failed_kvh:
            Py_DECREF(headers);
        varint_failed_kv:
            Py_DECREF(key);
            Py_XDECREF(value);
        varint_failed:
            if (status == V_WIDE)
                goto decline;
        corrupt:
            varint_error(status);
            goto failed_loop;
        truncated_kv:
            Py_DECREF(key);
            Py_XDECREF(value);
            PyErr_SetString(CorruptRecordError, "records truncated");
            goto failed_loop;
        failed_kvh:
            Py_DECREF(headers);
        failed_kv:
            Py_DECREF(key);
            Py_XDECREF(value);
        failed:
            goto failed_loop;
        }
        if (p != end) {
            PyErr_Format(CorruptRecordError, "%zd bytes left after %lld records", (Py_ssize_t)(end - p),
                         (long long)count);
            goto failed_loop;
        }
        Py_DECREF(ts_type);
        Py_DECREF(max_ts_obj);
        return 1;

    decline:
        Py_DECREF(ts_type);
        Py_DECREF(max_ts_obj);
        return PyList_SetSlice(out, first, PyList_GET_SIZE(out), NULL) == 0 ? 0 : -1;

    failed_loop:
        Py_DECREF(ts_type);
        Py_DECREF(max_ts_obj);
        {
            /* nothing of this batch stays in out, as with the Python loop's error */
            PyObject *type, *val, *tb;
            PyErr_Fetch(&type, &val, &tb);
            PyList_SetSlice(out, first, PyList_GET_SIZE(out), NULL);
            PyErr_Restore(type, val, tb);
        }
        return -1;
    }

}

PyDoc_STRVAR(decode_records_doc,
"decode_records(data, pos, end, header, out, topic, partition, cls, as_record=False) -> bool\n\n"
"Append the records of data[pos:end] (an uncompressed records region of the batch\n"
"whose unpacked header is header) to out, as records._decode_consumer_records does:\n"
"cls tuples (topic, partition, offset, timestamp_ms, timestamp_type, key, value,\n"
"headers tuple); with as_record, cls tuples (offset, timestamp_ms, key, value,\n"
"headers list), records.Record's fields.  False, with nothing appended, when the\n"
"batch needs the Python loop.  Raises CorruptRecordError as that loop does.");

static PyObject *
decode_records(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t pos, endpos;
    PyObject *header, *out, *topic, *partition;
    PyTypeObject *cls;
    int as_record = 0;
    if (!PyArg_ParseTuple(args, "y*nnO!O!OOO!|p:decode_records", &buf, &pos, &endpos,
                          &PyTuple_Type, &header, &PyList_Type, &out, &topic, &partition,
                          &PyType_Type, &cls, &as_record))
        return NULL;

    PyObject *result = NULL;
    batch_fields b;
    int status;

    if (!PyType_IsSubtype(cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "cls must be a tuple type");
        goto done;
    }
    if (PyTuple_GET_SIZE(header) < 13) {
        PyErr_SetString(PyExc_ValueError, "header must have 13 fields");
        goto done;
    }
    if (pos < 0 || endpos < pos || endpos > buf.len) {
        PyErr_SetString(PyExc_ValueError, "pos and end out of the data");
        goto done;
    }
    if (header_int64(header, 0, &b.base_offset) || header_int64(header, 5, &b.attributes) ||
        header_int64(header, 7, &b.base_ts) || header_int64(header, 8, &b.max_ts) ||
        header_int64(header, 12, &b.count))
        goto done;
    status = decode_region((const unsigned char *)buf.buf + pos, (const unsigned char *)buf.buf + endpos, &b, out,
                           topic, partition, cls, as_record);
    if (status >= 0)
        result = Py_NewRef(status ? Py_True : Py_False);
done:
    PyBuffer_Release(&buf);
    return result;
}

/* ---- a partition's Fetch data ------------------------------------------------ */

static inline int64_t
be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline int32_t
be32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int16_t
be16(const unsigned char *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | p[1]);
}

/* crc32c(part) (the crc32c package's function, crc_fn) into *value; part is a new reference, consumed
 * (NULL: the error making it); -1 with an exception set on any error. */
static int
call_crc(PyObject *crc_fn, PyObject *part, unsigned long long *value)
{
    if (part == NULL)
        return -1;
    PyObject *sum = PyObject_CallOneArg(crc_fn, part);
    Py_DECREF(part);
    if (sum == NULL)
        return -1;
    *value = PyLong_AsUnsignedLongLong(sum);
    Py_DECREF(sum);
    return *value == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
}

/* Remove out[first:] records whose offset (item 2) is below next_offset, up to the first that is not. */
static int
drop_before(PyObject *out, Py_ssize_t first, int64_t next_offset)
{
    PyObject *bound = PyLong_FromLongLong(next_offset);
    if (bound == NULL)
        return -1;
    Py_ssize_t cut = first, n = PyList_GET_SIZE(out);
    while (cut < n) {
        PyObject *record = PyList_GET_ITEM(out, cut);
        PyObject *offset = PySequence_GetItem(record, 2);
        if (offset == NULL) {
            Py_DECREF(bound);
            return -1;
        }
        int below = PyObject_RichCompareBool(offset, bound, Py_LT);
        Py_DECREF(offset);
        if (below < 0) {
            Py_DECREF(bound);
            return -1;
        }
        if (!below)
            break;
        cut++;
    }
    Py_DECREF(bound);
    return cut > first ? PyList_SetSlice(out, first, cut, NULL) : 0;
}

/* The batch walk of decode_fetched and fetched_columns: data's complete batches, checked as
 * records.decode_fetched checks them, those already read and control batches skipped. */
typedef enum {
    WALK_BATCH,      /* a batch to decode: its fields below, its records in [start, stop) */
    WALK_END,        /* no complete batch left */
    WALK_BAD_LENGTH, /* a batch length below 49 */
    WALK_BAD_MAGIC,  /* a magic other than 2 */
    WALK_BAD_CRC,    /* a CRC mismatch */
    WALK_DECOMPRESS_FAILED, /* decompress raised an Exception, still set */
    WALK_NOT_BYTES,  /* decompress returned something other than bytes (no error set) */
    WALK_DECLINE,    /* offsets past 64 bits (no error set) */
    WALK_ERROR,      /* an error is set (KeyboardInterrupt, SystemExit from decompress included) */
} walk_status;

typedef struct {
    /* set by the caller */
    PyObject *data_obj; /* bytes */
    const unsigned char *data;
    Py_ssize_t len;
    int verify_crc;
    PyObject *crc_fn, *decompress_fn;
    Py_ssize_t pos;      /* the next batch */
    int64_t next_offset; /* the caller sets it to after_last once it has read a batch */
    PyObject *view;      /* NULL, or a memoryview of data_obj made for the CRC: the caller releases it */
    /* the batch of the last status: at, batch_end, batch_length and b.base_offset from WALK_BAD_LENGTH on,
     * all from WALK_BAD_CRC on */
    Py_ssize_t at;     /* its position in data (pos is past it once it is WALK_BATCH) */
    int64_t batch_end; /* the position after it */
    int32_t batch_length, last_offset_delta;
    uint32_t crc;
    int64_t after_last; /* its last offset + 1 */
    batch_fields b;
    PyObject *region;   /* WALK_BATCH: the decompressed records (the caller releases them), or NULL: in data */
    const unsigned char *start, *stop; /* WALK_BATCH: its records */
} batch_walk;

static walk_status
walk_next(batch_walk *w)
{
    const unsigned char *data = w->data;
    while (w->pos + 12 <= w->len) {
        Py_ssize_t pos = w->pos;
        int64_t base_offset = be64(data + pos);
        int32_t batch_length = be32(data + pos + 8);
        int64_t batch_end = (int64_t)pos + 12 + batch_length;
        if (batch_end > w->len)
            break; /* a partial trailing batch */
        w->at = pos;
        w->batch_end = batch_end;
        w->batch_length = batch_length;
        w->b.base_offset = base_offset;
        if (batch_length < 49)
            return WALK_BAD_LENGTH;
        if (data[pos + 16] != 2)
            return WALK_BAD_MAGIC;
        uint32_t crc = (uint32_t)be32(data + pos + 17);
        int16_t attributes = be16(data + pos + 21);
        int32_t last_offset_delta = be32(data + pos + 23);
        batch_fields b = {base_offset, attributes, be64(data + pos + 27), be64(data + pos + 35),
                          be32(data + pos + 57)};
        int64_t last, after_last;
        if (__builtin_add_overflow(base_offset, (int64_t)last_offset_delta, &last) ||
            __builtin_add_overflow(last, (int64_t)1, &after_last))
            return WALK_DECLINE;
        if (last < w->next_offset || (attributes & 0x20)) { /* already read, or a control batch */
            if (last >= w->next_offset)
                w->next_offset = after_last;
            w->pos = (Py_ssize_t)batch_end;
            continue;
        }
        w->crc = crc;
        w->last_offset_delta = last_offset_delta;
        w->after_last = after_last;
        w->b = b;
        if (w->verify_crc) {
            if (w->view == NULL && (w->view = PyMemoryView_FromObject(w->data_obj)) == NULL)
                return WALK_ERROR;
            unsigned long long value;
            if (call_crc(w->crc_fn, PySequence_GetSlice(w->view, pos + 21, (Py_ssize_t)batch_end), &value) < 0)
                return WALK_ERROR;
            if (value != crc)
                return WALK_BAD_CRC;
        }
        PyObject *region = NULL;
        const unsigned char *start = data + pos + 61, *stop = data + batch_end;
        int codec = attributes & 0x07;
        if (codec) {
            PyObject *compressed = PyBytes_FromStringAndSize((const char *)start, (Py_ssize_t)(stop - start));
            if (compressed == NULL)
                return WALK_ERROR;
            region = PyObject_CallFunction(w->decompress_fn, "iO", codec, compressed);
            Py_DECREF(compressed);
            if (region == NULL)
                /* KeyboardInterrupt, SystemExit: not the data's fault, not to be lost */
                return PyErr_ExceptionMatches(PyExc_Exception) ? WALK_DECOMPRESS_FAILED : WALK_ERROR;
            if (!PyBytes_Check(region)) {
                Py_DECREF(region);
                return WALK_NOT_BYTES;
            }
            start = (const unsigned char *)PyBytes_AS_STRING(region);
            stop = start + PyBytes_GET_SIZE(region);
        }
        w->region = region;
        w->start = start;
        w->stop = stop;
        w->pos = (Py_ssize_t)batch_end;
        return WALK_BATCH;
    }
    return WALK_END;
}

PyDoc_STRVAR(decode_fetched_doc,
"decode_fetched(data, topic, partition, fetch_offset, cls, verify_crc, crc32c, decompress, python_records)\n"
"-> (records, next_offset) | NotImplemented\n\n"
"records.decode_fetched without aborted transactions, its batch loop included:\n"
"every complete batch of data (bytes) is checked (length, magic, CRC-32C with\n"
"crc32c(memoryview)), decompressed with decompress(codec, bytes), and its records\n"
"decoded; a batch the C record loop declines goes to\n"
"python_records(data, start, end, header, out, topic, partition, cls).  Same\n"
"errors as records.decode_fetched.  NotImplemented (nothing done) when offsets\n"
"do not fit 64 bits.");

static PyObject *
decode_fetched(PyObject *self, PyObject *args)
{
    PyObject *data_obj, *topic, *partition, *fetch_obj, *crc_fn, *decompress_fn, *py_records;
    PyTypeObject *cls;
    int verify_crc;
    if (!PyArg_ParseTuple(args, "O!OOOO!pOOO:decode_fetched", &PyBytes_Type, &data_obj, &topic, &partition,
                          &fetch_obj, &PyType_Type, &cls, &verify_crc, &crc_fn, &decompress_fn, &py_records))
        return NULL;
    if (!PyType_IsSubtype(cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "cls must be a tuple type");
        return NULL;
    }
    if (!PyLong_Check(fetch_obj))
        Py_RETURN_NOTIMPLEMENTED;
    int overflow = 0;
    long long fetch_offset = PyLong_AsLongLongAndOverflow(fetch_obj, &overflow);
    if (fetch_offset == -1 && PyErr_Occurred())
        return NULL;
    if (overflow)
        Py_RETURN_NOTIMPLEMENTED;

    batch_walk w = {.data_obj = data_obj, .data = (const unsigned char *)PyBytes_AS_STRING(data_obj),
                    .len = PyBytes_GET_SIZE(data_obj), .verify_crc = verify_crc, .crc_fn = crc_fn,
                    .decompress_fn = decompress_fn, .next_offset = fetch_offset};
    const unsigned char *data = w.data;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;

    for (;;) {
        walk_status walk = walk_next(&w);
        if (walk == WALK_END)
            break;
        switch (walk) {
        case WALK_BATCH:
            break;
        case WALK_BAD_LENGTH:
            PyErr_Format(CorruptRecordError, "batch at offset %lld has length %d", (long long)w.b.base_offset,
                         (int)w.batch_length);
            goto failed;
        case WALK_BAD_MAGIC:
            PyErr_Format(InvalidRecordError, "batch at offset %lld has magic %d; only v2 is supported",
                         (long long)w.b.base_offset, (int)data[w.at + 16]);
            goto failed;
        case WALK_BAD_CRC:
            PyErr_Format(CorruptRecordError, "CRC mismatch in batch at offset %lld of %S-%S",
                         (long long)w.b.base_offset, topic, partition);
            goto failed;
        case WALK_NOT_BYTES:
            PyErr_SetString(PyExc_TypeError, "decompress must return bytes");
            goto failed;
        case WALK_DECLINE:
            goto decline;
        default: /* WALK_DECOMPRESS_FAILED, WALK_ERROR: raised as they are */
            goto failed;
        }
        Py_ssize_t pos = w.at, first = PyList_GET_SIZE(out);
        PyObject *region = w.region; /* the decompressed records, or NULL: in data */
        int status = decode_region(w.start, w.stop, &w.b, out, topic, partition, cls, 0);
        if (status == 0) { /* the Python loop decodes this batch */
            PyObject *header = Py_BuildValue(
                "(LiiiIhiLLLhii)", (long long)w.b.base_offset, (int)w.batch_length, (int)be32(data + pos + 12),
                (int)(signed char)data[pos + 16], (unsigned int)w.crc, (short)w.b.attributes,
                (int)w.last_offset_delta, (long long)w.b.base_ts, (long long)w.b.max_ts,
                (long long)be64(data + pos + 43), (short)be16(data + pos + 51), (int)be32(data + pos + 53),
                (int)w.b.count);
            PyObject *r = NULL;
            if (header != NULL) {
                PyObject *d = region != NULL ? region : data_obj;
                Py_ssize_t s0 = region != NULL ? 0 : pos + 61;
                Py_ssize_t s1 = region != NULL ? PyBytes_GET_SIZE(region) : (Py_ssize_t)w.batch_end;
                r = PyObject_CallFunction(py_records, "OnnOOOOO", d, s0, s1, header, out, topic, partition,
                                          (PyObject *)cls);
                Py_DECREF(header);
            }
            status = r == NULL ? -1 : 1;
            Py_XDECREF(r);
        }
        Py_XDECREF(region);
        if (status < 0)
            goto failed;
        if (w.b.base_offset < w.next_offset && drop_before(out, first, w.next_offset) < 0)
            goto failed;
        w.next_offset = w.after_last;
    }
    Py_XDECREF(w.view);
    return Py_BuildValue("(NL)", out, (long long)w.next_offset);

decline:
    Py_XDECREF(w.view);
    Py_DECREF(out);
    Py_RETURN_NOTIMPLEMENTED;

failed:
    Py_XDECREF(w.view);
    Py_DECREF(out);
    return NULL;
}

/* ---- encoding ---------------------------------------------------------------- */

#define SMALL_SPAN (1 << 14)

/* One record's parts, checked: what encode_batch's loop accepts without surprise. */
typedef struct {
    const char *key;
    Py_ssize_t key_len; /* -1: null */
    const char *value;
    Py_ssize_t value_len; /* -1: null */
    PyObject *headers;     /* borrowed list or tuple, NULL: none */
    Py_ssize_t headers_size; /* bytes of headersCount and headers */
    int64_t ts_delta;
    Py_ssize_t size;       /* the record's length field */
} record_parts;

/* 1: ok; 0: decline (no error set); -1: error */
static int
bytes_or_none(PyObject *o, const char **data, Py_ssize_t *len)
{
    if (o == Py_None) {
        *data = NULL;
        *len = -1;
        return 1;
    }
    if (!PyBytes_CheckExact(o)) /* a subclass could answer len() its own way */
        return 0;
    *data = PyBytes_AS_STRING(o);
    *len = PyBytes_GET_SIZE(o);
    return 1;
}

/* the UTF-8 of a header key (str) or the key itself (bytes); 0: decline */
static int
header_key(PyObject *hk, const char **data, Py_ssize_t *len)
{
    if (PyUnicode_CheckExact(hk)) {
        *data = PyUnicode_AsUTF8AndSize(hk, len);
        if (*data == NULL) {
            PyErr_Clear(); /* Python's loop raises its own error for it */
            return 0;
        }
        return 1;
    }
    if (PyBytes_CheckExact(hk)) {
        *data = PyBytes_AS_STRING(hk);
        *len = PyBytes_GET_SIZE(hk);
        return 1;
    }
    return 0;
}

/* Check one record and size it; 1 ok, 0 decline, -1 error. */
static int
size_record(PyObject *rec, int64_t base_ts, int64_t offset_delta, record_parts *r, int64_t *max_ts)
{
    if (!PyTuple_CheckExact(rec) || PyTuple_GET_SIZE(rec) != 4)
        return 0;
    if (!bytes_or_none(PyTuple_GET_ITEM(rec, 0), &r->key, &r->key_len) ||
        !bytes_or_none(PyTuple_GET_ITEM(rec, 1), &r->value, &r->value_len))
        return 0;
    PyObject *ts = PyTuple_GET_ITEM(rec, 3);
    int64_t t;
    if (ts == Py_None) {
        t = base_ts;
    } else {
        if (!PyLong_Check(ts))
            return 0;
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(ts, &overflow);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (overflow)
            return 0;
        t = v;
        if (t > *max_ts)
            *max_ts = t;
    }
    if (__builtin_sub_overflow(t, base_ts, &r->ts_delta))
        return 0;
    PyObject *headers = PyTuple_GET_ITEM(rec, 2);
    Py_ssize_t size = 1 + varint_size(r->ts_delta) + varint_size(offset_delta);
    size += r->key_len < 0 ? 1 : varint_size(r->key_len) + r->key_len;
    size += r->value_len < 0 ? 1 : varint_size(r->value_len) + r->value_len;
    r->headers = NULL;
    r->headers_size = 1;
    if (headers != Py_None) {
        if (!PyList_CheckExact(headers) && !PyTuple_CheckExact(headers))
            return 0;
        Py_ssize_t nh = PySequence_Fast_GET_SIZE(headers);
        if (nh >= SMALL_SPAN)
            return 0;
        if (nh > 0) {
            PyObject **items = PySequence_Fast_ITEMS(headers);
            Py_ssize_t hsize = varint_size(nh);
            for (Py_ssize_t h = 0; h < nh; h++) {
                PyObject *pair = items[h];
                const char *hk, *hv;
                Py_ssize_t hk_len, hv_len;
                if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
                    return 0;
                if (!header_key(PyTuple_GET_ITEM(pair, 0), &hk, &hk_len) ||
                    !bytes_or_none(PyTuple_GET_ITEM(pair, 1), &hv, &hv_len))
                    return 0;
                hsize += varint_size(hk_len) + hk_len;
                hsize += hv_len < 0 ? 1 : varint_size(hv_len) + hv_len;
            }
            r->headers = headers;
            r->headers_size = hsize;
        }
    }
    r->size = size + r->headers_size;
    return 1;
}

static unsigned char *
write_record(unsigned char *p, const record_parts *r, int64_t offset_delta)
{
    p = write_varint(p, r->size);
    *p++ = 0;
    p = write_varint(p, r->ts_delta);
    p = write_varint(p, offset_delta);
    if (r->key_len < 0) {
        *p++ = 1;
    } else {
        p = write_varint(p, r->key_len);
        memcpy(p, r->key, r->key_len);
        p += r->key_len;
    }
    if (r->value_len < 0) {
        *p++ = 1;
    } else {
        p = write_varint(p, r->value_len);
        memcpy(p, r->value, r->value_len);
        p += r->value_len;
    }
    if (r->headers == NULL) {
        *p++ = 0;
    } else {
        Py_ssize_t nh = PySequence_Fast_GET_SIZE(r->headers);
        PyObject **items = PySequence_Fast_ITEMS(r->headers);
        p = write_varint(p, nh);
        for (Py_ssize_t h = 0; h < nh; h++) {
            const char *hk = NULL, *hv = NULL;
            Py_ssize_t hk_len = 0, hv_len = -1;
            /* checked by size_record; the UTF-8 is cached in the str */
            header_key(PyTuple_GET_ITEM(items[h], 0), &hk, &hk_len);
            bytes_or_none(PyTuple_GET_ITEM(items[h], 1), &hv, &hv_len);
            p = write_varint(p, hk_len);
            memcpy(p, hk, hk_len);
            p += hk_len;
            if (hv_len < 0) {
                *p++ = 1;
            } else {
                p = write_varint(p, hv_len);
                memcpy(p, hv, hv_len);
                p += hv_len;
            }
        }
    }
    return p;
}

PyDoc_STRVAR(encode_records_doc,
"encode_records(records, base_ts) -> (body, max_ts) | NotImplemented\n\n"
"The records region of records.encode_batch for records ((key, value, headers,\n"
"timestamp_ms) tuples; offset deltas their positions) and base_ts (the first\n"
"record's timestamp), byte for byte, and the batch's maxTimestamp.\n"
"NotImplemented for input it leaves to the Python loop (keys or values that are\n"
"not bytes or None, records that are not 4-tuples, timestamps that are not ints\n"
"or whose deltas do not fit 64 bits, ...).");

static PyObject *
encode_records(PyObject *self, PyObject *args)
{
    PyObject *records, *base_obj;
    if (!PyArg_ParseTuple(args, "OO:encode_records", &records, &base_obj))
        return NULL;
    if (!PyLong_Check(base_obj) || (!PyList_Check(records) && !PyTuple_Check(records)))
        Py_RETURN_NOTIMPLEMENTED;
    int overflow = 0;
    long long base_ll = PyLong_AsLongLongAndOverflow(base_obj, &overflow);
    if (base_ll == -1 && PyErr_Occurred())
        return NULL;
    if (overflow)
        Py_RETURN_NOTIMPLEMENTED;
    int64_t base_ts = base_ll, max_ts = base_ll;

    /* a tuple of the records holds each of them (and so their keys, values and
       headers): the bytes pointers and the cached UTF-8 of str keys stay valid */
    PyObject *held = PySequence_Tuple(records);
    if (held == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(held);
    PyObject *result = NULL;
    record_parts *parts = PyMem_Malloc(sizeof(record_parts) * (n > 0 ? n : 1));
    if (parts == NULL) {
        Py_DECREF(held);
        return PyErr_NoMemory();
    }
    PyObject **items = PySequence_Fast_ITEMS(held);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int ok = size_record(items[i], base_ts, i, &parts[i], &max_ts);
        if (ok < 0)
            goto done;
        if (ok == 0) {
            result = Py_NewRef(Py_NotImplemented);
            goto done;
        }
        total += varint_size(parts[i].size) + parts[i].size;
    }
    {
        PyObject *body = PyBytes_FromStringAndSize(NULL, total);
        if (body == NULL)
            goto done;
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(body);
        for (Py_ssize_t i = 0; i < n; i++)
            p = write_record(p, &parts[i], i);
        if (p != (unsigned char *)PyBytes_AS_STRING(body) + total) {
            Py_DECREF(body);
            PyErr_SetString(PyExc_SystemError, "encode_records: size mismatch");
            goto done;
        }
        result = Py_BuildValue("(NL)", body, (long long)max_ts);
    }
done:
    PyMem_Free(parts);
    Py_DECREF(held);
    return result;
}

/* ---- the producer's send hot path ------------------------------------------------ */

/*
 * HotSender(hot, slow, batch_type, deferred_type, add_callback, seal, overhead):
 * a callable with Producer.send's signature that does what the hot path at
 * the top of Producer.send does (kafkatw/client/producer.py) for a call of
 * the form send(topic, value) or send(topic, value, on_delivery=f), value
 * exact bytes, when hot[topic] is a batch with room for it:
 *
 *     batch.room -= len(value) + overhead; batch.records.append(value)
 *     d = object.__new__(deferred_type); batch.deferreds.append(d)
 *     batch.callbacks.append(on_delivery), or add_callback(batch, on_delivery)
 *         when batch.callbacks is None and on_delivery is not None
 *     seal(batch.state, batch) when the room reached 0
 *     return d
 *
 * Every other call goes to slow (the Python Producer.send, bound) unchanged.
 * The batch's __slots__ are read and written through their offsets, taken
 * from batch_type's member descriptors; a batch of another type goes to slow.
 */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *hot;
    PyObject *slow;
    PyTypeObject *batch_type;
    PyTypeObject *deferred_type;
    PyObject *add_callback;
    PyObject *seal;
    Py_ssize_t overhead;
    Py_ssize_t off_room, off_records, off_deferreds, off_callbacks, off_state;
} HotSender;

static PyObject *str_on_delivery = NULL;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static int
slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *out)
{
    PyObject *descr = PyDict_GetItemString(type->tp_dict, name); /* borrowed */
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "HotSender: %s.%s is not a slot", type->tp_name, name);
        return -1;
    }
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "HotSender: %s.%s is not a writable object slot", type->tp_name, name);
        return -1;
    }
    *out = member->offset;
    return 0;
}

static PyObject *
hot_sender_call(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    HotSender *self = (HotSender *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *on_delivery = Py_None;
    if (nargs != 2)
        goto slow;
    if (kwnames != NULL) {
        if (PyTuple_GET_SIZE(kwnames) != 1)
            goto slow;
        PyObject *name = PyTuple_GET_ITEM(kwnames, 0);
        if (name != str_on_delivery && !(PyUnicode_Check(name) && PyUnicode_Compare(name, str_on_delivery) == 0))
            goto slow;
        on_delivery = args[2];
    }
    PyObject *topic = args[0], *value = args[1];
    if (!PyBytes_CheckExact(value))
        goto slow;
    /* The record's Deferred before anything is read: allocating it may run a
     * GC pass and with it Python code (finalizers, weakref and gc callbacks)
     * that sends too, seals the batch or replaces its lists (a keyed send to
     * its partition does).  After it nothing runs Python code until
     * add_callback, so the batch and its slots read below stay valid. */
    PyObject *d = PyBaseObject_Type.tp_new(self->deferred_type, empty_tuple, NULL);
    if (d == NULL)
        return NULL;
    PyObject *batch = PyDict_GetItemWithError(self->hot, topic); /* borrowed */
    if (batch == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(d);
            return NULL;
        }
        goto slow_d;
    }
    if (!Py_IS_TYPE(batch, self->batch_type))
        goto slow_d;
    PyObject *room_obj = SLOT(batch, self->off_room);
    PyObject *records = SLOT(batch, self->off_records);
    PyObject *deferreds = SLOT(batch, self->off_deferreds);
    PyObject *callbacks = SLOT(batch, self->off_callbacks);
    if (room_obj == NULL || !PyLong_CheckExact(room_obj) || records == NULL || !PyList_CheckExact(records)
            || deferreds == NULL || !PyList_CheckExact(deferreds) || callbacks == NULL
            || (callbacks != Py_None && !PyList_CheckExact(callbacks)))
        goto slow_d;
    Py_ssize_t room = PyLong_AsSsize_t(room_obj);
    if (room == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto slow_d;
    }
    room -= PyBytes_GET_SIZE(value) + self->overhead;
    if (room < 0)
        goto slow_d;
    PyObject *new_room = PyLong_FromSsize_t(room); /* not a GC object: no collection */
    if (new_room == NULL) {
        Py_DECREF(d);
        return NULL;
    }
    Py_INCREF(batch); /* the calls below run Python code */
    SLOT(batch, self->off_room) = new_room;
    Py_DECREF(room_obj);
    if (PyList_Append(records, value) < 0 || PyList_Append(deferreds, d) < 0)
        goto error;
    if (callbacks != Py_None) {
        if (PyList_Append(callbacks, on_delivery) < 0)
            goto error;
    }
    else if (on_delivery != Py_None) {
        PyObject *r = PyObject_CallFunctionObjArgs(self->add_callback, batch, on_delivery, NULL);
        if (r == NULL)
            goto error;
        Py_DECREF(r);
    }
    if (room == 0) { /* batch_size reached */
        PyObject *state = SLOT(batch, self->off_state);
        if (state == NULL) {
            PyErr_SetString(PyExc_AttributeError, "state");
            goto error;
        }
        PyObject *r = PyObject_CallFunctionObjArgs(self->seal, state, batch, NULL);
        if (r == NULL)
            goto error;
        Py_DECREF(r);
    }
    Py_DECREF(batch);
    return d;
error:
    Py_DECREF(batch);
    Py_DECREF(d);
    return NULL;
slow_d:
    Py_DECREF(d);
slow:
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *
hot_sender_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *hot, *slow, *batch_type, *deferred_type, *add_callback, *seal;
    Py_ssize_t overhead;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "HotSender takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!OO!O!OOn:HotSender", &PyDict_Type, &hot, &slow, &PyType_Type, &batch_type,
                          &PyType_Type, &deferred_type, &add_callback, &seal, &overhead))
        return NULL;
    HotSender *self = (HotSender *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = hot_sender_call;
    self->hot = Py_NewRef(hot);
    self->slow = Py_NewRef(slow);
    self->batch_type = (PyTypeObject *)Py_NewRef(batch_type);
    self->deferred_type = (PyTypeObject *)Py_NewRef(deferred_type);
    self->add_callback = Py_NewRef(add_callback);
    self->seal = Py_NewRef(seal);
    self->overhead = overhead;
    PyTypeObject *bt = (PyTypeObject *)batch_type;
    if (slot_offset(bt, "room", &self->off_room) < 0 || slot_offset(bt, "records", &self->off_records) < 0
            || slot_offset(bt, "deferreds", &self->off_deferreds) < 0
            || slot_offset(bt, "callbacks", &self->off_callbacks) < 0
            || slot_offset(bt, "state", &self->off_state) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
hot_sender_traverse(HotSender *self, visitproc visit, void *arg)
{
    Py_VISIT(self->hot);
    Py_VISIT(self->slow);
    Py_VISIT(self->batch_type);
    Py_VISIT(self->deferred_type);
    Py_VISIT(self->add_callback);
    Py_VISIT(self->seal);
    return 0;
}

static int
hot_sender_clear(HotSender *self)
{
    Py_CLEAR(self->hot);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->batch_type);
    Py_CLEAR(self->deferred_type);
    Py_CLEAR(self->add_callback);
    Py_CLEAR(self->seal);
    return 0;
}

static void
hot_sender_dealloc(HotSender *self)
{
    PyObject_GC_UnTrack(self);
    hot_sender_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
hot_sender_slow(HotSender *self, void *closure)
{
    return Py_NewRef(self->slow ? self->slow : Py_None);
}

static PyGetSetDef hot_sender_getset[] = {
    {"slow", (getter)hot_sender_slow, NULL, "the callable every other call goes to", NULL},
    {NULL},
};

PyDoc_STRVAR(hot_sender_doc,
"HotSender(hot, slow, batch_type, deferred_type, add_callback, seal, overhead)\n\n"
"Producer.send's hot path in C (see kafkatw/client/producer.py); every other call goes to slow.");

static PyTypeObject HotSenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafkatw.protocol._speedups.HotSender",
    .tp_basicsize = sizeof(HotSender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(HotSender, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = hot_sender_new,
    .tp_traverse = (traverseproc)hot_sender_traverse,
    .tp_clear = (inquiry)hot_sender_clear,
    .tp_dealloc = (destructor)hot_sender_dealloc,
    .tp_getset = hot_sender_getset,
    .tp_doc = hot_sender_doc,
};

/*
 * complete_records(deferreds, callbacks, metadata_type, topic, partition,
 *                  base_offset, ts, stamps, fire_record, on_delivery_failed)
 *
 * The loop of deliver_records (kafkatw/client/producer_batch.py)
 * for an acknowledged batch: for record i,
 *
 *     m = metadata_type(topic, partition, offset_i, stamps[i] if stamps is not None else ts)
 *         (offset_i: base_offset + i, or base_offset when it is negative)
 *     callbacks[i](m, None) when callbacks[i] is not None; an Exception it
 *         raises goes to on_delivery_failed(exception, topic, partition)
 *     fire_record(d, m) when somebody but the list references deferreds[i]
 *
 * metadata_type is a tuple subclass of four fields (RecordMetadata).
 */
static PyObject *
new_metadata(PyTypeObject *type, PyObject *topic, PyObject *partition, long long offset, PyObject *ts)
{
    PyObject *off = PyLong_FromLongLong(offset);
    if (off == NULL)
        return NULL;
    PyObject *m = type->tp_alloc(type, 4);
    if (m == NULL) {
        Py_DECREF(off);
        return NULL;
    }
    PyTuple_SET_ITEM(m, 0, Py_NewRef(topic));
    PyTuple_SET_ITEM(m, 1, Py_NewRef(partition));
    PyTuple_SET_ITEM(m, 2, off);
    PyTuple_SET_ITEM(m, 3, Py_NewRef(ts));
    return m;
}

PyDoc_STRVAR(complete_records_doc,
"complete_records(deferreds, callbacks, metadata_type, topic, partition, base_offset, ts, stamps,\n"
"                 fire_record, on_delivery_failed) -> None\n\n"
"The per-record loop of deliver_records (kafkatw/client/producer_batch.py).");

static PyObject *
complete_records(PyObject *module, PyObject *args)
{
    PyObject *deferreds, *callbacks, *topic, *partition, *ts, *stamps, *fire_record, *failed;
    PyTypeObject *type;
    long long base_offset;
    if (!PyArg_ParseTuple(args, "O!O!O!OOLOOOO:complete_records", &PyList_Type, &deferreds, &PyList_Type,
                          &callbacks, &PyType_Type, &type, &topic, &partition, &base_offset, &ts, &stamps,
                          &fire_record, &failed))
        return NULL;
    if (!PyType_IsSubtype(type, &PyTuple_Type) || type->tp_itemsize != sizeof(PyObject *)) {
        PyErr_SetString(PyExc_TypeError, "complete_records: metadata_type must be a tuple subclass");
        return NULL;
    }
    if (stamps != Py_None && !PyList_Check(stamps)) {
        PyErr_SetString(PyExc_TypeError, "complete_records: stamps must be a list or None");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(deferreds); i++) {
        PyObject *d = Py_NewRef(PyList_GET_ITEM(deferreds, i));
        PyObject *on_delivery = i < PyList_GET_SIZE(callbacks) ? PyList_GET_ITEM(callbacks, i) : Py_None;
        PyObject *stamp = ts;
        if (stamps != Py_None) {
            if (i >= PyList_GET_SIZE(stamps)) {
                Py_DECREF(d);
                PyErr_SetString(PyExc_IndexError, "complete_records: fewer stamps than records");
                return NULL;
            }
            stamp = PyList_GET_ITEM(stamps, i);
        }
        long long offset = base_offset >= 0 ? base_offset + i : base_offset;
        PyObject *m = NULL;
        if (on_delivery != Py_None) {
            Py_INCREF(on_delivery);
            Py_INCREF(stamp);
            m = new_metadata(type, topic, partition, offset, stamp);
            Py_DECREF(stamp);
            if (m == NULL) {
                Py_DECREF(on_delivery);
                Py_DECREF(d);
                return NULL;
            }
            PyObject *call_args[2] = {m, Py_None};
            PyObject *r = PyObject_Vectorcall(on_delivery, call_args, 2, NULL);
            Py_DECREF(on_delivery);
            if (r != NULL) {
                Py_DECREF(r);
            }
            else if (PyErr_ExceptionMatches(PyExc_Exception)) {
                PyObject *t, *v, *tb;
                PyErr_Fetch(&t, &v, &tb);
                PyErr_NormalizeException(&t, &v, &tb);
                if (tb != NULL)
                    PyException_SetTraceback(v, tb);
                PyObject *lr = PyObject_CallFunctionObjArgs(failed, v, topic, partition, NULL);
                Py_XDECREF(t);
                Py_XDECREF(v);
                Py_XDECREF(tb);
                if (lr == NULL) {
                    Py_DECREF(m);
                    Py_DECREF(d);
                    return NULL;
                }
                Py_DECREF(lr);
            }
            else {
                Py_DECREF(m);
                Py_DECREF(d);
                return NULL;
            }
        }
        /* the list's reference and ours: nobody else holds it, and firing it cannot be observed */
        if (Py_REFCNT(d) > 2) {
            if (m == NULL) {
                Py_INCREF(stamp);
                m = new_metadata(type, topic, partition, offset, stamp);
                Py_DECREF(stamp);
                if (m == NULL) {
                    Py_DECREF(d);
                    return NULL;
                }
            }
            PyObject *r = PyObject_CallFunctionObjArgs(fire_record, d, m, NULL);
            if (r == NULL) {
                Py_DECREF(m);
                Py_DECREF(d);
                return NULL;
            }
            Py_DECREF(r);
        }
        Py_XDECREF(m);
        Py_DECREF(d);
    }
    Py_RETURN_NONE;
}

/*
 * encode_value_batch(values, timestamp_ms, attributes, producer_id, producer_epoch,
 *                    base_sequence, crc32c) -> bytes, or NotImplemented
 *
 * records.encode_value_batch without compression: a whole RecordBatch v2
 * (base offset 0, partition leader epoch -1) of records with a null key, no
 * headers, timestamp delta 0 and the values of `values` (a list of bytes),
 * written in one pass into one bytes object; crc32c(memoryview) gives the
 * CRC-32C of the part after the CRC field.  NotImplemented: a value that is
 * not bytes (records.py then runs its Python loop).
 */
static inline unsigned char *
put_be(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xFF);
        v >>= 8;
    }
    return p + bytes;
}

PyDoc_STRVAR(encode_value_batch_doc,
"encode_value_batch(values, timestamp_ms, attributes, producer_id, producer_epoch, base_sequence, crc32c)\n"
"    -> bytes or NotImplemented\n\n"
"records.encode_value_batch without compression, in one pass (same bytes).");

static PyObject *
encode_value_batch(PyObject *module, PyObject *args)
{
    PyObject *values, *crc_func, *numbers[5];
    if (!PyArg_ParseTuple(args, "O!OOOOOO:encode_value_batch", &PyList_Type, &values, &numbers[0], &numbers[1],
                          &numbers[2], &numbers[3], &numbers[4], &crc_func))
        return NULL;
    /* timestamp_ms int64, attributes int16, producer_id int64, producer_epoch int16, base_sequence int32;
     * anything else (not an int, out of range) is left to Python's struct, with its errors */
    static const long long lows[5] = {INT64_MIN, INT16_MIN, INT64_MIN, INT16_MIN, INT32_MIN};
    static const long long highs[5] = {INT64_MAX, INT16_MAX, INT64_MAX, INT16_MAX, INT32_MAX};
    long long v[5];
    for (int k = 0; k < 5; k++) {
        int overflow = 0;
        if (!PyLong_Check(numbers[k]))
            Py_RETURN_NOTIMPLEMENTED;
        v[k] = PyLong_AsLongLongAndOverflow(numbers[k], &overflow);
        if (v[k] == -1 && PyErr_Occurred())
            return NULL;
        if (overflow || v[k] < lows[k] || v[k] > highs[k])
            Py_RETURN_NOTIMPLEMENTED;
    }
    long long timestamp_ms = v[0], producer_id = v[2];
    int attributes = (int)v[1], producer_epoch = (int)v[3], base_sequence = (int)v[4];
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (n == 0 || n > INT32_MAX)
        Py_RETURN_NOTIMPLEMENTED;  /* Python's ValueError, or struct's error */
    Py_ssize_t total = 61;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(values, i);
        if (!PyBytes_CheckExact(v))
            Py_RETURN_NOTIMPLEMENTED;
        Py_ssize_t len = PyBytes_GET_SIZE(v);
        Py_ssize_t size = 4 + varint_size(i) + varint_size(len) + len;
        total += varint_size(size) + size;
    }
    if (total - 12 > INT32_MAX)
        Py_RETURN_NOTIMPLEMENTED;  /* struct's error, from Python */
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    unsigned char *start = (unsigned char *)PyBytes_AS_STRING(out);
    unsigned char *p = start;
    p = put_be(p, 0, 8);                                  /* base offset */
    p = put_be(p, (uint32_t)(total - 12), 4);             /* batch length */
    p = put_be(p, (uint32_t)-1, 4);                       /* partition leader epoch */
    *p++ = 2;                                             /* magic */
    p += 4;                                               /* CRC, below */
    p = put_be(p, (uint16_t)attributes, 2);
    p = put_be(p, (uint32_t)(n - 1), 4);                  /* last offset delta */
    p = put_be(p, (uint64_t)timestamp_ms, 8);             /* base timestamp */
    p = put_be(p, (uint64_t)timestamp_ms, 8);             /* max timestamp */
    p = put_be(p, (uint64_t)producer_id, 8);
    p = put_be(p, (uint16_t)producer_epoch, 2);
    p = put_be(p, (uint32_t)base_sequence, 4);
    p = put_be(p, (uint32_t)n, 4);                        /* records count */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(values, i);
        Py_ssize_t len = PyBytes_GET_SIZE(v);
        Py_ssize_t size = 4 + varint_size(i) + varint_size(len) + len;
        p = write_varint(p, size);
        *p++ = 0;                                         /* attributes */
        *p++ = 0;                                         /* timestamp delta 0 */
        p = write_varint(p, i);                           /* offset delta */
        *p++ = 1;                                         /* key length -1 */
        p = write_varint(p, len);
        memcpy(p, PyBytes_AS_STRING(v), len);
        p += len;
        *p++ = 0;                                         /* headers count */
    }
    if (p != start + total) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_SystemError, "encode_value_batch: size mismatch");
        return NULL;
    }
    unsigned long long value;
    if (call_crc(crc_func, PyMemoryView_FromMemory((char *)start + 21, total - 21, PyBUF_READ), &value) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    put_be(start + 17, (uint32_t)value, 4);
    return out;
}

/* ---- Arrow columns for the Spark source --------------------------------------- */

/*
 * fetched_columns: the buffers of the Spark source's Arrow columns
 * (kafkatw/spark/_source.py) straight from a partition's Fetch data, with no
 * Python object per record: the batch loop of decode_fetched and the record
 * loop of decode_region, writing into growable buffers.
 */

/* an exact int fitting int64 into *out: 1; anything else: 0 (decline); errors are cleared */
static inline int
exact_int64(PyObject *o, int64_t *out)
{
    if (!PyLong_CheckExact(o))
        return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = v;
    return 1;
}

/*
 * A growable buffer: a bytearray whose size is its capacity while it is
 * filled (len bytes used), cut to len when taken, so that the Arrow buffer
 * made over it (pyarrow.py_buffer) is the memory written here, not a copy.
 */
typedef struct {
    PyObject *obj; /* NULL until the first reserve */
    char *p;
    Py_ssize_t len, cap;
} gbuf;

static int
gbuf_reserve(gbuf *b, Py_ssize_t extra)
{
    if (extra <= b->cap - b->len)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < extra) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    if (b->obj == NULL) {
        if ((b->obj = PyByteArray_FromStringAndSize(NULL, cap)) == NULL)
            return -1;
    } else if (PyByteArray_Resize(b->obj, cap) < 0) {
        return -1;
    }
    b->p = PyByteArray_AS_STRING(b->obj);
    b->cap = cap;
    return 0;
}

/* the bytearray of the len bytes written (a new reference); the buffer is empty again */
static PyObject *
gbuf_take(gbuf *b)
{
    PyObject *obj = b->obj;
    if (obj == NULL)
        return PyByteArray_FromStringAndSize(NULL, 0);
    if (PyByteArray_Resize(obj, b->len) < 0)
        return NULL;
    b->obj = NULL;
    b->p = NULL;
    b->len = b->cap = 0;
    return obj;
}

static void
gbuf_free(gbuf *b)
{
    Py_CLEAR(b->obj);
    b->p = NULL;
    b->len = b->cap = 0;
}

/* a binary column being built: validity bits, int32 offsets (the first one written at init), data */
typedef struct {
    gbuf bits, offsets, data;
    Py_ssize_t count, nulls;
} gcol;

static int
gcol_init(gcol *c)
{
    memset(c, 0, sizeof(*c));
    if (gbuf_reserve(&c->offsets, 4) < 0)
        return -1;
    memset(c->offsets.p, 0, 4);
    c->offsets.len = 4;
    return 0;
}

static void
gcol_free(gcol *c)
{
    gbuf_free(&c->bits);
    gbuf_free(&c->offsets);
    gbuf_free(&c->data);
    memset(c, 0, sizeof(*c));
}

/* append one item (len < 0: null); 0, or -1 with an error set; 1: the column passed 2 GiB (decline) */
static inline int
gcol_put(gcol *c, const unsigned char *data, int64_t len)
{
    if (len > INT32_MAX - c->data.len)
        return 1;
    if ((c->count & 7) == 0) {
        if (gbuf_reserve(&c->bits, 1) < 0)
            return -1;
        c->bits.p[c->bits.len++] = 0;
    }
    if (gbuf_reserve(&c->offsets, 4) < 0)
        return -1;
    if (len >= 0) {
        if (len > 0) { /* not for an empty item: data.p is NULL until the first reserve (memcpy's UB) */
            if (gbuf_reserve(&c->data, (Py_ssize_t)len) < 0)
                return -1;
            memcpy(c->data.p + c->data.len, data, (size_t)len);
            c->data.len += (Py_ssize_t)len;
        }
        c->bits.p[c->count >> 3] |= (char)(1 << (c->count & 7));
    } else {
        c->nulls++;
    }
    int32_t end = (int32_t)c->data.len;
    memcpy(c->offsets.p + c->offsets.len, &end, 4);
    c->offsets.len += 4;
    c->count++;
    return 0;
}

/* a binary column's (validity bitmap or None, null count, int32 offsets, data), bytearrays */
static PyObject *
gcol_tuple(gcol *c)
{
    PyObject *bits = c->nulls ? gbuf_take(&c->bits) : Py_NewRef(Py_None);
    PyObject *offsets = gbuf_take(&c->offsets);
    PyObject *data = gbuf_take(&c->data);
    if (bits == NULL || offsets == NULL || data == NULL) {
        Py_XDECREF(bits);
        Py_XDECREF(offsets);
        Py_XDECREF(data);
        return NULL;
    }
    return Py_BuildValue("(NnNN)", bits, c->nulls, offsets, data);
}

typedef struct {
    gcol key, value, hkey, hvalue;
    gbuf offsets, stamps, types, lists;
    int include_headers;
    int64_t start, end;       /* the offsets wanted: [start, end) */
    int64_t last;             /* the last offset kept (offsets must not go down) */
    int any;
} columns;

static void
columns_free(columns *c)
{
    gcol_free(&c->key);
    gcol_free(&c->value);
    gcol_free(&c->hkey);
    gcol_free(&c->hvalue);
    gbuf_free(&c->offsets);
    gbuf_free(&c->stamps);
    gbuf_free(&c->types);
    gbuf_free(&c->lists);
}

/* whether [p, p + n) is UTF-8 that Python's strict decoder takes (so that its str encodes back to it) */
static int
valid_utf8(const unsigned char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] >= 0x80) {
            PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
            if (s == NULL) {
                PyErr_Clear();
                return 0;
            }
            Py_DECREF(s);
            return 1;
        }
    }
    return 1;
}

enum { C_OK = 0, C_ERROR = -1, C_DECLINE = 1 };

/*
 * Add the records of the region [p, end) of a batch with offsets at or after
 * keep_from (and in [start, end)) to the columns.  C_DECLINE for anything
 * decode_region would not decode as it is (errors included: the caller's
 * Python path raises them).
 */
static int
columns_region(columns *c, const unsigned char *p, const unsigned char *end, const batch_fields *b,
               int64_t keep_from)
{
    int log_append = (b->attributes & 0x08) != 0;
    int dropping = keep_from != INT64_MIN;
    int64_t v, ts_delta, off_delta;
    int s;
    for (int64_t i = 0; i < b->count; i++) {
        if (read_varint(&p, end, &v) != V_OK) /* length */
            return C_DECLINE;
        if (p >= end)
            return C_DECLINE;
        p += 1; /* attributes */
        if (read_varint(&p, end, &ts_delta) != V_OK || read_varint(&p, end, &off_delta) != V_OK)
            return C_DECLINE;
        int64_t offset, timestamp;
        if (__builtin_add_overflow(b->base_offset, off_delta, &offset))
            return C_DECLINE;
        if (log_append)
            timestamp = b->max_ts;
        else if (__builtin_add_overflow(b->base_ts, ts_delta, &timestamp))
            return C_DECLINE;
        /* decode_fetched drops the records before keep_from at the batch's start (drop_before) */
        int keep = 0;
        if (!dropping || offset >= keep_from) {
            dropping = 0;
            if (c->any && offset < c->last)
                return C_DECLINE; /* offsets going down: _to_arrow's bisection would cut elsewhere */
            c->any = 1;
            c->last = offset;
            keep = offset >= c->start && offset < c->end;
        }
        const unsigned char *key, *value;
        int64_t key_len, value_len;
        if (read_nullable_bytes(&p, end, &key, &key_len) != V_OK ||
            read_nullable_bytes(&p, end, &value, &value_len) != V_OK)
            return C_DECLINE;
        int64_t nh;
        if (read_varint(&p, end, &nh) != V_OK || nh < 0 || nh > (end - p) / 2)
            return C_DECLINE;
        if (keep) {
            if (gbuf_reserve(&c->offsets, 8) < 0 || gbuf_reserve(&c->stamps, 8) < 0 ||
                gbuf_reserve(&c->types, 4) < 0)
                return C_ERROR;
            int64_t us = (int64_t)((uint64_t)timestamp * 1000u); /* Arrow's multiply wraps */
            int32_t type = log_append;
            memcpy(c->offsets.p + c->offsets.len, &offset, 8);
            memcpy(c->stamps.p + c->stamps.len, &us, 8);
            memcpy(c->types.p + c->types.len, &type, 4);
            c->offsets.len += 8;
            c->stamps.len += 8;
            c->types.len += 4;
            if ((s = gcol_put(&c->key, key, key_len)) != 0 ||
                (s = gcol_put(&c->value, value, value_len)) != 0)
                return s < 0 ? C_ERROR : C_DECLINE;
        }
        for (int64_t h = 0; h < nh; h++) {
            int64_t hk_len, hv_len;
            const unsigned char *hk, *hv;
            if (read_nullable_bytes(&p, end, &hk, &hk_len) != V_OK || hk == NULL ||
                read_nullable_bytes(&p, end, &hv, &hv_len) != V_OK)
                return C_DECLINE; /* a null header key is the decoder's error */
            if (keep && c->include_headers) {
                if (!valid_utf8(hk, (Py_ssize_t)hk_len))
                    return C_DECLINE; /* the decoder replaces what is not UTF-8 */
                if ((s = gcol_put(&c->hkey, hk, hk_len)) != 0 ||
                    (s = gcol_put(&c->hvalue, hv, hv_len)) != 0)
                    return s < 0 ? C_ERROR : C_DECLINE;
            }
        }
        if (keep && c->include_headers) {
            if (c->hkey.count > INT32_MAX || gbuf_reserve(&c->lists, 4) < 0)
                return c->hkey.count > INT32_MAX ? C_DECLINE : C_ERROR;
            int32_t n = (int32_t)c->hkey.count;
            memcpy(c->lists.p + c->lists.len, &n, 4);
            c->lists.len += 4;
        }
    }
    return p == end ? C_OK : C_DECLINE;
}

PyDoc_STRVAR(fetched_columns_doc,
"fetched_columns(data, fetch_offset, start, end, include_headers, verify_crc, crc32c, decompress)\n"
"-> tuple | NotImplemented\n\n"
"The buffers of the Spark source's Arrow columns (kafkatw/spark/_source.py)\n"
"for the records that records.decode_fetched(data, ..., fetch_offset, ...,\n"
"verify_crc) (no aborted transactions) gives with offsets in [start, end),\n"
"decoded from data (bytes) without making them: the same batch checks and the\n"
"same records.  The result is (key, value, offsets, timestamps_us,\n"
"timestamp_types, headers) where key and value are (validity bitmap or None,\n"
"null count, int32 offsets, data) of a binary column, offsets and\n"
"timestamps_us (timestamp_ms * 1000, wrapping as Arrow's multiply does) are\n"
"int64 buffers, timestamp_types an int32 buffer, and headers None (without\n"
"include_headers) or (int32 list offsets, (None, 0, key offsets, key data),\n"
"(validity or None, null count, value offsets, value data)).\n"
"Buffers are bytearrays in native byte order.\n"
"NotImplemented (nothing done) for whatever the Python path must do itself,\n"
"errors included (it raises them): a corrupt or truncated batch, a CRC\n"
"mismatch, a magic other than 2, a failed decompression, varints or offsets\n"
"past 64 bits, header keys that are not UTF-8, offsets going down, a column\n"
"past 2 GiB.");

static PyObject *
fetched_columns(PyObject *module, PyObject *args)
{
    PyObject *data_obj, *crc_fn, *decompress_fn, *fetch_obj, *start_obj, *stop_obj;
    int64_t fetch_offset, start, stop;
    int include_headers, verify_crc;
    if (!PyArg_ParseTuple(args, "O!OOOppOO:fetched_columns", &PyBytes_Type, &data_obj, &fetch_obj, &start_obj,
                          &stop_obj, &include_headers, &verify_crc, &crc_fn, &decompress_fn))
        return NULL;
    if (!exact_int64(fetch_obj, &fetch_offset) || !exact_int64(start_obj, &start) || !exact_int64(stop_obj, &stop))
        Py_RETURN_NOTIMPLEMENTED; /* offsets past 64 bits: the Python path's */
    batch_walk w = {.data_obj = data_obj, .data = (const unsigned char *)PyBytes_AS_STRING(data_obj),
                    .len = PyBytes_GET_SIZE(data_obj), .verify_crc = verify_crc, .crc_fn = crc_fn,
                    .decompress_fn = decompress_fn, .next_offset = fetch_offset};
    PyObject *result = NULL;
    int status = C_OK;
    columns c;
    memset(&c, 0, sizeof(c));
    c.include_headers = include_headers;
    c.start = start;
    c.end = stop;
    if (gcol_init(&c.key) < 0 || gcol_init(&c.value) < 0 || gcol_init(&c.hkey) < 0 || gcol_init(&c.hvalue) < 0 ||
        gbuf_reserve(&c.lists, 4) < 0)
        goto failed;
    memset(c.lists.p, 0, 4);
    c.lists.len = 4;

    for (;;) {
        walk_status walk = walk_next(&w);
        if (walk == WALK_END)
            break;
        if (walk == WALK_ERROR)
            goto failed;
        if (walk != WALK_BATCH) { /* the Python path raises the error */
            PyErr_Clear(); /* that of WALK_DECOMPRESS_FAILED */
            goto decline;
        }
        status = columns_region(&c, w.start, w.stop, &w.b,
                                w.b.base_offset < w.next_offset ? w.next_offset : INT64_MIN);
        Py_XDECREF(w.region);
        if (status == C_ERROR)
            goto failed;
        if (status == C_DECLINE)
            goto decline;
        w.next_offset = w.after_last;
    }
    {
        PyObject *k = gcol_tuple(&c.key), *v = gcol_tuple(&c.value), *hs = NULL;
        if (include_headers) {
            PyObject *lists = gbuf_take(&c.lists), *hk = gcol_tuple(&c.hkey), *hv = gcol_tuple(&c.hvalue);
            if (lists != NULL && hk != NULL && hv != NULL)
                hs = Py_BuildValue("(NNN)", lists, hk, hv);
            else {
                Py_XDECREF(lists);
                Py_XDECREF(hk);
                Py_XDECREF(hv);
            }
        } else {
            hs = Py_NewRef(Py_None);
        }
        PyObject *o = gbuf_take(&c.offsets), *t = gbuf_take(&c.stamps), *y = gbuf_take(&c.types);
        if (k != NULL && v != NULL && hs != NULL && o != NULL && t != NULL && y != NULL)
            result = Py_BuildValue("(NNNNNN)", k, v, o, t, y, hs);
        else {
            Py_XDECREF(k);
            Py_XDECREF(v);
            Py_XDECREF(hs);
            Py_XDECREF(o);
            Py_XDECREF(t);
            Py_XDECREF(y);
        }
    }
    goto done;

decline:
    result = Py_NewRef(Py_NotImplemented);
    goto done;
failed:
    result = NULL;
done:
    Py_XDECREF(w.view);
    columns_free(&c);
    return result;
}

/* ---- a Produce run's appends (kafkatw/storage/log.py) --------------------------- */

/*
 * append_simple_batches: the loop of PartitionLog.append_many over the items
 * that are one whole, valid RecordBatch v2 without producer id, not a control
 * batch, at most copy_max bytes (what a producer without idempotence sends).
 * The checks are parse_batch_headers' one-batch checks, as the Python loop
 * makes them; the first item that fails one (or is not a buffer, or would take
 * the offsets past 64 bits) ends the loop, and append_many's Python code takes
 * it.  The batch header's layout (Kafka protocol guide, "RecordBatch"):
 *
 *     baseOffset int64 0, batchLength int32 8, partitionLeaderEpoch int32 12,
 *     magic int8 16, crc uint32 17, attributes int16 21, lastOffsetDelta int32 23,
 *     baseTimestamp int64 27, maxTimestamp int64 35, producerId int64 43,
 *     producerEpoch int16 51, baseSequence int32 53, recordsCount int32 57
 */

/* frame[pos:end] as a view of frame (sliced directly when frame is a memoryview). */
static PyObject *
view_slice(PyObject *frame, Py_ssize_t pos, Py_ssize_t end)
{
    if (PyMemoryView_Check(frame))
        return PySequence_GetSlice(frame, pos, end);
    PyObject *view = PyMemoryView_FromObject(frame);
    if (view == NULL)
        return NULL;
    PyObject *part = PySequence_GetSlice(view, pos, end);
    Py_DECREF(view);
    return part;
}

/* Whether obj's batch at p (total bytes) passes the one-batch checks; -1: an error from crc32c. */
static int
simple_batch_ok(PyObject *obj, const unsigned char *p, Py_ssize_t total, long long max_bytes, PyObject *crc_fn)
{
    int32_t batch_length = be32(p + 8);
    int32_t last_delta = be32(p + 23);
    int32_t count = be32(p + 57);
    if ((int64_t)batch_length + 12 != (int64_t)total || p[16] != 2 || batch_length < 49 ||
        (max_bytes >= 0 && total > max_bytes) || count <= 0 || (int64_t)count != (int64_t)last_delta + 1 ||
        be64(p + 43) >= 0 || (be16(p + 21) & 0x20))
        return 0;
    unsigned long long value; /* crc32c(memoryview(records)[CRC_START:]), as Python */
    if (call_crc(crc_fn, view_slice(obj, 21, total), &value) < 0)
        return -1;
    return value == (uint32_t)be32(p + 17);
}

PyDoc_STRVAR(append_simple_batches_doc,
"append_simple_batches(records_list, i, next_offset, leader_epoch, max_bytes, copy_max, data, patched,\n"
"                      group, out, base, header_cls, crc32c) -> (i, next_offset, base)\n\n"
"PartitionLog.append_many's loop from records_list[i] over the items that are one\n"
"whole, valid RecordBatch v2 without producer id, not a control batch, of at most\n"
"copy_max bytes (max_bytes: max.message.bytes, -1 for none): each one's bytes\n"
"with baseOffset next_offset and partitionLeaderEpoch leader_epoch are appended\n"
"to the bytearray data, its header_cls header (position base) to patched,\n"
"(len(out), item, end offset, end position, 1) to group and None to out.\n"
"Returns where it stopped (the first item it leaves to Python, or\n"
"len(records_list)), the next offset and the position after the last item.\n"
"Items are read as bytes (bytes, bytearray, or a memoryview of bytes, as a Produce\n"
"request's records are); max_bytes must not be negative but -1.");

static PyObject *
append_simple_batches(PyObject *self, PyObject *args)
{
    PyObject *records_list, *data, *patched, *group, *out, *crc_fn;
    PyTypeObject *header_cls;
    Py_ssize_t i, copy_max, base;
    long long next_offset, max_bytes;
    int leader_epoch;
    if (!PyArg_ParseTuple(args, "O!nLiLnO!O!O!O!nO!O:append_simple_batches", &PyList_Type, &records_list, &i,
                          &next_offset, &leader_epoch, &max_bytes, &copy_max, &PyByteArray_Type, &data,
                          &PyList_Type, &patched, &PyList_Type, &group, &PyList_Type, &out, &base,
                          &PyType_Type, &header_cls, &crc_fn))
        return NULL;
    if (!PyType_IsSubtype(header_cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "header_cls must be a tuple type");
        return NULL;
    }
    if (i < 0)
        i = 0;
    for (; i < PyList_GET_SIZE(records_list); i++) {
        PyObject *obj = PyList_GET_ITEM(records_list, i);
        Py_buffer buf;
        if (PyObject_GetBuffer(obj, &buf, PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            break;
        }
        const unsigned char *p = buf.buf;
        Py_ssize_t total = buf.len;
        if (total < 61 || total > copy_max) {
            PyBuffer_Release(&buf);
            break;
        }
        int32_t count = be32(p + 57);
        if (count > 0 && next_offset > INT64_MAX - count) {
            PyBuffer_Release(&buf);
            break;
        }
        int ok = simple_batch_ok(obj, p, total, max_bytes, crc_fn);
        if (ok <= 0) {
            PyBuffer_Release(&buf);
            if (ok < 0)
                return NULL;
            break;
        }
        Py_ssize_t size = PyByteArray_GET_SIZE(data);
        if (PyByteArray_Resize(data, size + total) < 0) {
            PyBuffer_Release(&buf);
            return NULL;
        }
        unsigned char *d = (unsigned char *)PyByteArray_AS_STRING(data) + size;
        put_be(d, (uint64_t)next_offset, 8);
        memcpy(d + 8, p + 8, 4);
        put_be(d + 12, (uint32_t)leader_epoch, 4);
        memcpy(d + 16, p + 16, (size_t)(total - 16));
        PyObject *items[14] = {
            PyLong_FromSsize_t(base), PyLong_FromSsize_t(total), PyLong_FromLongLong(next_offset),
            PyLong_FromLong(leader_epoch), PyLong_FromLong(2), PyLong_FromUnsignedLong((uint32_t)be32(p + 17)),
            PyLong_FromLong(be16(p + 21)), PyLong_FromLong(be32(p + 23)), PyLong_FromLongLong(be64(p + 27)),
            PyLong_FromLongLong(be64(p + 35)), PyLong_FromLongLong(be64(p + 43)), PyLong_FromLong(be16(p + 51)),
            PyLong_FromLong(be32(p + 53)), PyLong_FromLong(count),
        };
        PyBuffer_Release(&buf);
        for (int k = 0; k < 14; k++) {
            if (items[k] == NULL) {
                for (int m = 0; m < 14; m++)
                    Py_XDECREF(items[m]);
                return NULL;
            }
        }
        PyObject *header = new_record(header_cls, items, 14);
        if (header == NULL)
            return NULL;
        int failed = PyList_Append(patched, header);
        Py_DECREF(header);
        if (failed)
            return NULL;
        next_offset += count;
        base += total;
        PyObject *entry = Py_BuildValue("(nOLni)", PyList_GET_SIZE(out), obj, next_offset, base, 1);
        if (entry == NULL)
            return NULL;
        failed = PyList_Append(group, entry);
        Py_DECREF(entry);
        if (failed || PyList_Append(out, Py_None) < 0)
            return NULL;
    }
    return Py_BuildValue("(nLn)", i, next_offset, base);
}

/* ---- the broker's one-partition Produce requests (kafkatw/protocol/messages.py) --- */

PyDoc_STRVAR(decode_simple_produce_doc,
"decode_simple_produce(frame, pos, flexible) -> (acks, timeout_ms, topic, partition, records) or None\n\n"
"kafkatw.protocol.messages.decode_simple_produce compiled, with the same results:\n"
"the body at pos of a ProduceRequest v3-v9 (flexible: v9) with no transactional id,\n"
"one topic and one partition (records a view of frame, None when null); None for any\n"
"other shape and for anything that does not parse.  frame is read as bytes (bytes,\n"
"bytearray, or a memoryview of bytes, as the broker's frames are).");

static PyObject *
decode_simple_produce(PyObject *self, PyObject *args)
{
    PyObject *frame;
    Py_ssize_t pos;
    int flexible;
    if (!PyArg_ParseTuple(args, "Onp:decode_simple_produce", &frame, &pos, &flexible))
        return NULL;
    Py_buffer buf;
    if (PyObject_GetBuffer(frame, &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = buf.buf;
    Py_ssize_t n = buf.len, name, name_end, records_pos, records_end;
    int acks, partition, timeout, null_records;
    if (pos < 0 || pos > n) /* (Python's negative indexes count from the end: its decoder refuses them too) */
        goto none;
    if (flexible) {
        /* transactional id (compact nullable string: 0 = null), acks int16, timeout int32,
         * topics (compact array: 2 = one) and the name's length + 1 as one-byte varints */
        if (n - pos < 9 || p[pos] != 0)
            goto none;
        acks = be16(p + pos + 1);
        timeout = be32(p + pos + 3);
        if (p[pos + 7] != 2 || p[pos + 8] == 0 || p[pos + 8] & 0x80)
            goto none;
        name = pos + 9;
        name_end = name + p[pos + 8] - 1;
        /* partitions (compact array: 2 = one), index int32 */
        if (name_end + 5 > n || p[name_end] != 2)
            goto none;
        partition = be32(p + name_end + 1);
        /* records: compact nullable bytes (length + 1, 0 = null), an unsigned varint of at most 6 bytes */
        Py_ssize_t at = name_end + 5;
        long long size = 0;
        for (int shift = 0;; shift += 7) {
            if (shift > 35 || at >= n)
                goto none;
            unsigned char byte = p[at++];
            size |= (long long)(byte & 0x7F) << shift;
            if (!(byte & 0x80))
                break;
        }
        records_pos = at;
        null_records = size == 0;
        if (size - 1 > n - at)
            goto none;
        records_end = null_records ? at : at + (Py_ssize_t)(size - 1);
        /* then three empty tagged fields (the partition's, the topic's, the request's), and the end */
        if (records_end + 3 != n || p[n - 3] != 0 || p[n - 2] != 0 || p[n - 1] != 0)
            goto none;
    } else {
        /* transactional id length int16 (-1: null), acks int16, timeout int32, topics int32, name length int16 */
        if (n - pos < 14 || be16(p + pos) != -1 || be32(p + pos + 8) != 1 || be16(p + pos + 12) < 0)
            goto none;
        acks = be16(p + pos + 2);
        timeout = be32(p + pos + 4);
        name = pos + 14;
        name_end = name + be16(p + pos + 12);
        /* partitions int32 (one), index int32, records length int32 (-1: null) */
        if (name_end + 12 > n || be32(p + name_end) != 1 || be32(p + name_end + 8) < -1)
            goto none;
        partition = be32(p + name_end + 4);
        int32_t size = be32(p + name_end + 8);
        records_pos = name_end + 12;
        null_records = size < 0;
        if (!null_records && size > n - records_pos)
            goto none;
        records_end = null_records ? records_pos : records_pos + size;
        if (records_end != n)
            goto none;
    }
    PyObject *topic = PyUnicode_DecodeUTF8((const char *)p + name, name_end - name, "strict");
    PyBuffer_Release(&buf);
    if (topic == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *records;
    if (null_records)
        records = Py_NewRef(Py_None);
    else if ((records = view_slice(frame, records_pos, records_end)) == NULL) {
        Py_DECREF(topic);
        return NULL;
    }
    return Py_BuildValue("(iiNiN)", acks, timeout, topic, partition, records);
none:
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
}

/* ---- module ------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS, decode_records_doc},
    {"decode_fetched", decode_fetched, METH_VARARGS, decode_fetched_doc},
    {"encode_records", encode_records, METH_VARARGS, encode_records_doc},
    {"complete_records", complete_records, METH_VARARGS, complete_records_doc},
    {"encode_value_batch", encode_value_batch, METH_VARARGS, encode_value_batch_doc},
    {"fetched_columns", fetched_columns, METH_VARARGS, fetched_columns_doc},
    {"append_simple_batches", append_simple_batches, METH_VARARGS, append_simple_batches_doc},
    {"decode_simple_produce", decode_simple_produce, METH_VARARGS, decode_simple_produce_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kafkatw.protocol._speedups",
    "Compiled record loops for kafkatw.protocol.records and the producer's per-record steps"
    " (optional; same results as their Python code).",
    -1, methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    PyObject *errors = PyImport_ImportModule("kafkatw.errors");
    if (errors == NULL)
        return NULL;
    CorruptRecordError = PyObject_GetAttrString(errors, "CorruptRecordError");
    InvalidRecordError = PyObject_GetAttrString(errors, "InvalidRecordError");
    Py_DECREF(errors);
    if (CorruptRecordError == NULL || InvalidRecordError == NULL)
        return NULL;
    empty_tuple = PyTuple_New(0);
    if (empty_tuple == NULL)
        return NULL;
    str_on_delivery = PyUnicode_InternFromString("on_delivery");
    if (str_on_delivery == NULL)
        return NULL;
    if (PyType_Ready(&HotSenderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "HotSender", (PyObject *)&HotSenderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
