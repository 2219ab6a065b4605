/*
 * The worker: one JSON job in, one JSON result out (docs/gate-worker.md). Job "gate" runs
 * a candidate kernel object through the stages correct, determinism, integrity, stream
 * and profile; job "gpu-info" describes the device and measures its ceilings. CUDA is
 * reached only through the device runtime (runtime.h), loaded with dlopen.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "gate/gate_int.h"
#include "gate/measure.h"
#include "gate/sandbox.h"
#include "gate/worker.h"
#include "gate/worker_int.h"
#include "klineage/task.h"

/* ---- errors and JSON helpers ---------------------------------------------------------------- */

int worker__fail(worker__worker *w, int exit_code, const char *cuda, bool sticky, const char *fmt, ...)
{
    if (w->error) return -1; /* the first failure is the one reported */
    char buf[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    w->exit_code = exit_code;
    w->error = json_pack("{s:s, s:s}", "stage", w->stage ? w->stage : "init", "detail", buf);
    if (cuda && *cuda) json_object_set_new(w->error, "cuda", json_string(cuda));
    if (exit_code == KL_WORKER_EXIT_CUDA) json_object_set_new(w->error, "sticky", json_boolean(sticky));
    kl_log(KL_LOG_ERROR, "%s: %s", w->stage ? w->stage : "init", buf);
    return -1;
}

/* A runtime call's result: 0, or the job fails with the runtime's message. */
int worker__rtc(worker__worker *w, int rc, const char *what)
{
    if (rc == KL_RT_OK) return 0;
    if (rc == KL_RT_ERR_NO_DEVICE)
        return worker__fail(w, KL_WORKER_EXIT_NO_GPU, w->rt.error_name(), false, "no CUDA device: %s", w->rt.error());
    if (rc == KL_RT_ERR_NOMEM || rc == KL_RT_ERR_INVALID || rc == KL_RT_ERR_UNAVAILABLE)
        return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s: %s", what, w->rt.error());
    return worker__fail(w, KL_WORKER_EXIT_CUDA, w->rt.error_name(), rc == KL_RT_ERR_STICKY, "%s: %s", what, w->rt.error());
}

int worker__kfail(worker__worker *w, int exit_code, const kl_error *err)
{
    return worker__fail(w, exit_code, NULL, false, "%s", err->message);
}

/* ---- job parsing ----------------------------------------------------------------------------- */

static bool key_in(const char *key, const char *const *allowed)
{
    for (; *allowed; allowed++)
        if (!strcmp(key, *allowed)) return true;
    return false;
}

/* Every key of obj must be allowed: a typo between the two sides fails loudly. */
static int check_keys(worker__worker *w, json_t *obj, const char *where, const char *const *allowed)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        (void)v;
        if (!key_in(key, allowed))
            return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: %s: unknown key \"%s\"", where, key);
    }
    return 0;
}

static int get_string(worker__worker *w, json_t *obj, const char *key, bool required, const char **out)
{
    json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (!v || json_is_null(v)) {
        if (required) return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: key \"%s\" is required (a string)", key);
        return 0;
    }
    if (!json_is_string(v)) return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"%s\" must be a string", key);
    *out = json_string_value(v);
    return 0;
}

static int get_number(worker__worker *w, json_t *obj, const char *where, const char *key, double lo, double hi, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) return 0; /* keep the default */
    if (!json_is_number(v))
        return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: %s\"%s\" must be a number", where, key);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi))
        return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: %s\"%s\" is %g, expected %g to %g", where, key, d, lo, hi);
    *out = d;
    return 0;
}

static int get_bool(worker__worker *w, json_t *obj, const char *where, const char *key, bool *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v) return 0;
    if (!json_is_boolean(v)) return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: %s\"%s\" must be true or false", where, key);
    *out = json_is_true(v);
    return 0;
}

/* A reference predicted to take longer than this (seconds) at a shape is not run there: the
 * baseline stands in (the reference's speed is measured on this host at a small shape). */
#define REFERENCE_BUDGET_S KL_REFERENCE_BUDGET_S
/* Host time inside the candidate's launch beyond the device work it ran that fails the profile
 * (ms), unless the device work takes longer still: work done on the host is not the task's. */
#define HOST_SLACK_MS 1.0
/* A check shape is timed for the reference's speed when its cost.flops is at most this. */
#define REFERENCE_PROBE_FLOPS 5e7
/* … and at least this: a smaller run times the call, not the reference. */
#define REFERENCE_PROBE_MIN_FLOPS 1e5

typedef struct gate_paths {
    const char *task_dir, *cand_path, *base_path, *builtin;
    json_t *bmap;
    json_t *sandbox;            /* {"scratch", "read", "write", "require"}, or NULL: none */
} gate_paths;

static int parse_stages(worker__worker *w, json_t *stages, worker__gate_opts *o)
{
    static const char *const keys[] = {"correct", "determinism", "integrity", "stream", "profile", NULL};
    if (!json_is_object(stages)) return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"stages\" must be an object");
    if (check_keys(w, stages, "stages", keys)) return -1;
    if (get_bool(w, stages, "stages.", "correct", &o->correct) || get_bool(w, stages, "stages.", "determinism", &o->determinism) ||
        get_bool(w, stages, "stages.", "integrity", &o->integrity) || get_bool(w, stages, "stages.", "stream", &o->stream))
        return -1;
    json_t *p = json_object_get(stages, "profile");
    if (!p || json_is_false(p) || json_is_null(p)) {
        o->profile.on = false;
        return 0;
    }
    if (json_is_true(p)) {
        o->profile.on = true;
        return 0;
    }
    if (!json_is_object(p))
        return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"stages.profile\" must be an object, true or false");
    static const char *const pkeys[] = {"shape", "min_reps", "max_reps", "max_seconds", "warmup", "flush_l2",
                                        "settle_rel", NULL};
    if (check_keys(w, p, "stages.profile", pkeys)) return -1;
    o->profile.on = true;
    if (get_string(w, p, "shape", false, &o->profile.shape)) return -1;
    if (!o->profile.shape) o->profile.shape = "bench";
    if (get_number(w, p, "stages.profile.", "min_reps", 1, 100000, &o->profile.min_reps) ||
        get_number(w, p, "stages.profile.", "max_reps", 1, 100000, &o->profile.max_reps) ||
        get_number(w, p, "stages.profile.", "max_seconds", 0.01, 3600, &o->profile.max_seconds) ||
        get_number(w, p, "stages.profile.", "warmup", 0, 1000, &o->profile.warmup) ||
        get_number(w, p, "stages.profile.", "settle_rel", 1e-6, 1, &o->profile.settle_rel) ||
        get_bool(w, p, "stages.profile.", "flush_l2", &o->profile.flush_l2))
        return -1;
    if (o->profile.max_reps < o->profile.min_reps) o->profile.max_reps = o->profile.min_reps;
    return 0;
}

static int parse_shapes(worker__worker *w, json_t *arr)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"shapes\" must be a non-empty array of shape labels");
    w->nshapes = (unsigned)json_array_size(arr);
    w->shapes = calloc(w->nshapes, sizeof *w->shapes);
    if (!w->shapes) return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    for (unsigned i = 0; i < w->nshapes; i++) {
        json_t *s = json_array_get(arr, i);
        const char *label = NULL;
        bool reference = true;
        double seeds = 0;
        if (json_is_string(s)) {
            label = json_string_value(s);
        } else if (json_is_object(s)) {
            static const char *const keys[] = {"label", "reference", "seeds", NULL};
            if (check_keys(w, s, "shapes[]", keys)) return -1;
            json_t *l = json_object_get(s, "label");
            if (!json_is_string(l))
                return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: shapes[%u]: \"label\" must be a string", i);
            label = json_string_value(l);
            if (get_bool(w, s, "shapes[].", "reference", &reference)) return -1;
            if (get_number(w, s, "shapes[].", "seeds", 1, 64, &seeds)) return -1;
        } else {
            return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: shapes[%u] must be a label or {\"label\", \"reference\"}", i);
        }
        w->shapes[i].shape = kl_task_shape(w->task, label);
        if (!w->shapes[i].shape)
            return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: shapes[%u]: task %s has no shape \"%s\"", i,
                        w->task->name ? w->task->name : "?", label);
        w->shapes[i].reference = reference;
        w->shapes[i].seeds = (unsigned)seeds;
    }
    return 0;
}

static int parse_seeds(worker__worker *w, json_t *arr)
{
    if (!arr) {
        w->nseeds = 2;
        w->seeds = calloc(2, sizeof *w->seeds);
        if (!w->seeds) return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
        w->seeds[0] = 1234;
        w->seeds[1] = 5678;
        return 0;
    }
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"seeds\" must be a non-empty array of integers");
    w->nseeds = (unsigned)json_array_size(arr);
    w->seeds = calloc(w->nseeds, sizeof *w->seeds);
    if (!w->seeds) return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    for (unsigned i = 0; i < w->nseeds; i++) {
        json_t *s = json_array_get(arr, i);
        if (!json_is_integer(s) || json_integer_value(s) < 0)
            return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: seeds[%u] must be a non-negative integer", i);
        w->seeds[i] = (uint64_t)json_integer_value(s);
    }
    return 0;
}

/* ---- launchers -------------------------------------------------------------------------------- */

static int find_arg(const kl_task *t, const char *name, bool scalar, unsigned nth)
{
    /* by name (case-insensitive), else the nth argument of the kind */
    unsigned seen = 0;
    for (unsigned i = 0; i < t->nargs; i++)
        if (t->args[i].name && !strcasecmp(t->args[i].name, name) && ((t->args[i].dtype == KL_DTYPE_NONE) == scalar))
            return (int)i;
    for (unsigned i = 0; i < t->nargs; i++) {
        if ((t->args[i].dtype == KL_DTYPE_NONE) != scalar) continue;
        if (seen++ == nth) return (int)i;
    }
    return -1;
}

/* A vendor baseline takes the task's GEMM arguments: A, B (inputs), C (output), M, N, K. */
static int setup_builtin(worker__worker *w, worker__launcher *L, const char *name, json_t *map)
{
    const kl_task *t = w->task;
    if (!strcmp(name, "cublas-sgemm")) L->builtin = BUILTIN_SGEMM;
    else if (!strcmp(name, "cublas-bf16gemm")) L->builtin = BUILTIN_BF16GEMM;
    else
        return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false,
                    "job: baseline_builtin \"%s\" is not one of cublas-sgemm, cublas-bf16gemm", name);
    L->builtin_name = name;
    const char *names[6] = {"A", "B", "C", "M", "N", "K"};
    int idx[6];
    for (int i = 0; i < 6; i++) {
        const char *want = names[i];
        if (map) {
            json_t *v = json_object_get(map, names[i]);
            if (v && !json_is_string(v))
                return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: baseline_args.%s must be an argument name", names[i]);
            if (v) want = json_string_value(v);
        }
        idx[i] = find_arg(t, want, i >= 3, (unsigned)(i % 3));
        if (idx[i] < 0)
            return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "%s: task %s has no argument for GEMM operand %s", name,
                        t->name ? t->name : "?", names[i]);
    }
    L->ga = (unsigned)idx[0];
    L->gb = (unsigned)idx[1];
    L->gc = (unsigned)idx[2];
    L->gm = (unsigned)idx[3];
    L->gn = (unsigned)idx[4];
    L->gk = (unsigned)idx[5];
    kl_dtype ta = t->args[L->ga].dtype, tb = t->args[L->gb].dtype, tc = t->args[L->gc].dtype;
    kl_dtype want_in = L->builtin == BUILTIN_SGEMM ? KL_DTYPE_F32 : KL_DTYPE_BF16;
    bool c_ok = L->builtin == BUILTIN_SGEMM ? tc == KL_DTYPE_F32 : (tc == KL_DTYPE_F32 || tc == KL_DTYPE_BF16);
    if (ta != want_in || tb != want_in || !c_ok || t->args[L->gc].role == KL_ROLE_IN)
        return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false,
                    "%s: task %s's operands are %s x %s -> %s; it needs %s inputs and a %s output", name,
                    t->name ? t->name : "?", kl_dtype_name(ta), kl_dtype_name(tb), kl_dtype_name(tc),
                    kl_dtype_name(want_in), L->builtin == BUILTIN_SGEMM ? "f32" : "f32 or bf16");
    int rc = w->rt.cublas_available();
    if (!rc) return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s: %s", name, w->rt.error());
    L->present = true;
    return 0;
}

/* Launch L on the worker's stream with set's arguments; checks the launch error. */
int worker__launch(worker__worker *w, worker__launcher *L, worker__argset *set)
{
    int rc;
    if (L->builtin) {
        int M = set->scalars[L->gm], N = set->scalars[L->gn], K = set->scalars[L->gk];
        if (L->builtin == BUILTIN_SGEMM)
            rc = w->rt.cublas_sgemm(set->args[L->ga], set->args[L->gb], set->args[L->gc], M, N, K, w->stream);
        else
            rc = w->rt.cublas_bf16gemm(set->args[L->ga], set->args[L->gb], set->args[L->gc],
                                       w->task->args[L->gc].dtype == KL_DTYPE_F32, M, N, K, w->stream);
        return worker__rtc(w, rc, L->builtin_name);
    }
    int shim_rc = L->obj.launch(set->args, w->stream);
    rc = w->rt.check();
    if (rc != KL_RT_OK) {
        char what[128];
        kl_snprintf(what, sizeof what, "the %s's launch()", L->role);
        return worker__rtc(w, rc, what);
    }
    if (shim_rc != 0)
        return worker__fail(w, KL_WORKER_EXIT_CUDA, NULL, false, "the %s's launch() left CUDA error %d", L->role, shim_rc);
    return 0;
}

/* ---- buffers ---------------------------------------------------------------------------------- */

/* Host buffers this large are page-locked (readbacks at the bus's speed); smaller ones are
 * plain malloc: pinning costs more than it saves there. */
#define PINNED_MIN_BYTES ((size_t)1 << 20)

/* A device buffer, or a host buffer (pinned when large), of exactly `bytes`: a released one
 * of that size when there is one, else a new one. NULL with w->error set on failure. */
static void *buf_get(worker__worker *w, bool device, size_t bytes, const char *what)
{
    if (!bytes) bytes = 1;
    for (cached_buf *c = w->buffers; c; c = c->next)
        if (!c->in_use && c->device == device && c->bytes == bytes) {
            c->in_use = true;
            w->tm.buffers_reused++;
            return c->ptr;
        }
    cached_buf *c = calloc(1, sizeof *c);
    if (!c) {
        worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
        return NULL;
    }
    c->bytes = bytes;
    c->device = device;
    if (device) {
        if (worker__rtc(w, w->rt.malloc(&c->ptr, bytes), what)) {
            free(c);
            return NULL;
        }
    } else if (bytes >= PINNED_MIN_BYTES && w->rt.host_alloc(&c->ptr, bytes) == KL_RT_OK) {
        c->pinned = true;
    } else {
        c->ptr = malloc(bytes);
        if (!c->ptr) {
            worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s: out of host memory for %zu bytes", what, bytes);
            free(c);
            return NULL;
        }
    }
    c->in_use = true;
    c->next = w->buffers;
    w->buffers = c;
    w->tm.buffers_allocated++;
    return c->ptr;
}

static void buf_put(worker__worker *w, void *ptr)
{
    if (!ptr) return;
    for (cached_buf *c = w->buffers; c; c = c->next)
        if (c->ptr == ptr) {
            c->in_use = false;
            return;
        }
}

/* At the end of the job. Device memory is left to the context's end when it is lost. */
static void buffers_free(worker__worker *w)
{
    bool dev_ok = w->rt_ready && w->exit_code != KL_WORKER_EXIT_CUDA;
    while (w->buffers) {
        cached_buf *c = w->buffers;
        w->buffers = c->next;
        if (c->device) {
            if (dev_ok) w->rt.free(c->ptr);
        } else if (c->pinned) {
            if (dev_ok) w->rt.host_free(c->ptr);
        } else {
            free(c->ptr);
        }
        free(c);
    }
}

/* ---- argument sets --------------------------------------------------------------------------- */

#define GUARD_BYTE 0xA5

void worker__argset_release(worker__worker *w, worker__argset *s)
{
    unsigned n = w->task ? w->task->nargs : 0;
    double t0 = kl_now();
    for (unsigned i = 0; i < n; i++) {
        if (s->got) buf_put(w, s->got[i]);
        if (s->scratch) free(s->scratch[i]);
        if (s->dev) buf_put(w, s->dev[i].base);
    }
    free(s->counts);
    free(s->bytes);
    free(s->host);
    free(s->got);
    free(s->scratch);
    free(s->dev);
    free(s->scalars);
    free(s->args);
    memset(s, 0, sizeof *s);
    w->tm.release += kl_now() - t0;
}

/* Allocate host and device buffers for `shape`, each tensor `shift` bytes into its
 * allocation with guard zones on both sides. */
int worker__argset_init(worker__worker *w, worker__argset *s, const kl_shape *shape, size_t shift)
{
    const kl_task *t = w->task;
    unsigned n = t->nargs;
    kl_error err = {0};
    double t0 = kl_now();
    memset(s, 0, sizeof *s);
    s->shape = shape;
    s->shift = shift;
    s->counts = calloc(n, sizeof *s->counts);
    s->bytes = calloc(n, sizeof *s->bytes);
    s->host = calloc(n, sizeof *s->host);
    s->got = calloc(n, sizeof *s->got);
    s->scratch = calloc(n, sizeof *s->scratch);
    s->dev = calloc(n, sizeof *s->dev);
    s->scalars = calloc(n, sizeof *s->scalars);
    s->args = calloc(n, sizeof *s->args);
    if (!s->counts || !s->bytes || !s->host || !s->got || !s->scratch || !s->dev || !s->scalars || !s->args)
        return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    for (unsigned i = 0; i < n; i++) {
        const kl_arg *a = &t->args[i];
        if (a->dtype == KL_DTYPE_NONE) {
            if (kl_task_arg_value(t, shape, i, &s->scalars[i], &err) != KL_OK) return worker__kfail(w, KL_WORKER_EXIT_HARNESS, &err);
            s->args[i] = &s->scalars[i];
            continue;
        }
        if (kl_task_arg_count(t, shape, i, &s->counts[i], &err) != KL_OK) return worker__kfail(w, KL_WORKER_EXIT_HARNESS, &err);
        size_t es = kl_dtype_size(a->dtype);
        if (s->counts[i] < 0 || (uint64_t)s->counts[i] > (SIZE_MAX / 2) / es)
            return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s at %s: %lld elements do not fit in memory", a->name,
                        shape->label, (long long)s->counts[i]);
        size_t bytes = (size_t)s->counts[i] * es;
        s->bytes[i] = bytes;
        char what[160];
        if (a->role != KL_ROLE_IN) {
            kl_snprintf(what, sizeof what, "%s at %s", a->name, shape->label);
            if (!(s->got[i] = buf_get(w, false, bytes, what))) return -1;
        }
        worker__dbuf *d = &s->dev[i];
        d->bytes = bytes;
        d->shift = shift;
        /* under a sanitizer the tensor's last byte is its allocation's last byte: a read one
         * element past it is outside every allocation, which memcheck reports (inside a guard
         * zone it would be silent) */
        d->alloc = w->tight ? (bytes ? bytes : 1) : shift + ((bytes + 255) & ~(size_t)255) + GUARD_BYTES;
        if (w->tight) d->shift = shift = 0;
        kl_snprintf(what, sizeof what, "allocating %s at %s", a->name, shape->label);
        if (!(d->base = buf_get(w, true, d->alloc, what))) return -1;
        d->ptr = (char *)d->base + shift;
        s->args[i] = d->ptr;
    }
    w->tm.alloc += kl_now() - t0;
    return 0;
}


/* The inputs from the task's distributions (host only): the input cache's buffers for
 * (shape, seed), filled once per job. */
int worker__argset_fill(worker__worker *w, worker__argset *s, uint64_t seed)
{
    input_entry *e;
    if (worker__inputs_get(w, s->shape, seed, &e)) return -1;
    for (unsigned i = 0; i < w->task->nargs; i++) {
        const kl_arg *a = &w->task->args[i];
        if (a->dtype == KL_DTYPE_NONE || a->role == KL_ROLE_OUT) continue;
        s->host[i] = e->inputs[i];
    }
    s->seed = seed;
    s->filled = true;
    s->entry = e;
    return 0;
}

/* The entry's inputs on the device, once: the pristine copies every trial is restored from
 * (a device-to-device copy instead of a host upload) and their digests. */
static int entry_to_device(worker__worker *w, input_entry *e)
{
    if (e->on_device) return 0;
    const kl_task *t = w->task;
    double t0 = kl_now();
    if (!e->dev) e->dev = calloc(t->nargs, sizeof *e->dev);
    if (!e->digest) e->digest = calloc(t->nargs, sizeof *e->digest);
    if (!e->dev || !e->digest) return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    for (unsigned i = 0; i < t->nargs; i++) {
        if (!e->inputs[i] || e->dev[i]) continue;
        size_t bytes = (size_t)e->counts[i] * kl_dtype_size(t->args[i].dtype);
        if (worker__rtc(w, w->rt.malloc(&e->dev[i], bytes), "allocating the device copy of an input")) return -1;
        if (bytes && worker__rtc(w, w->rt.h2d(e->dev[i], e->inputs[i], bytes), "copying an input to the device")) return -1;
        if (worker__rtc(w, w->rt.digest(e->dev[i], bytes, &e->digest[i]), "computing an input's digest")) return -1;
    }
    e->on_device = true;
    w->tm.device_inputs += kl_now() - t0;
    return 0;
}

/* Device buffers: guards, inputs as filled (from their pristine device copies), outputs
 * poisoned with pass's byte. */
int worker__argset_upload(worker__worker *w, worker__argset *s, int pass)
{
    if (s->entry && entry_to_device(w, s->entry)) return -1;
    double t0 = kl_now();
    for (unsigned i = 0; i < w->task->nargs; i++) {
        const kl_arg *a = &w->task->args[i];
        if (a->dtype == KL_DTYPE_NONE) continue;
        worker__dbuf *d = &s->dev[i];
        if (worker__rtc(w, w->rt.memset(d->base, GUARD_BYTE, d->alloc), "writing guard zones")) return -1;
        if (a->role == KL_ROLE_OUT) {
            if (worker__rtc(w, w->rt.memset(d->ptr, kl_poison_byte(a->dtype, pass), d->bytes), "poisoning an output")) return -1;
        } else if (d->bytes && s->entry && s->entry->dev[i]) {
            if (worker__rtc(w, w->rt.d2d(d->ptr, s->entry->dev[i], d->bytes), "restoring an input on the device")) return -1;
        } else if (d->bytes) {
            if (worker__rtc(w, w->rt.h2d(d->ptr, s->host[i], d->bytes), "copying an input to the device")) return -1;
        }
    }
    w->tm.upload += kl_now() - t0;
    return 0;
}

/* Read the outputs back (after a stream-only synchronize: the readback stream waits for nothing). */
int worker__argset_read(worker__worker *w, worker__argset *s)
{
    double t0 = kl_now();
    for (unsigned i = 0; i < w->task->nargs; i++) {
        const kl_arg *a = &w->task->args[i];
        if (a->dtype == KL_DTYPE_NONE || a->role == KL_ROLE_IN || !s->bytes[i]) continue;
        if (worker__rtc(w, w->rt.d2h(s->got[i], s->dev[i].ptr, s->bytes[i]), "reading an output back")) return -1;
    }
    w->tm.readback += kl_now() - t0;
    return 0;
}

static void integrity_note(worker__worker *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void integrity_note(worker__worker *w, const char *fmt, ...)
{
    if (!w->integrity_ok) return; /* the first fault is the one reported */
    w->integrity_ok = false;
    va_list ap;
    va_start(ap, fmt);
    kl_strbuf_vaddf(&w->integrity_detail, fmt, ap);
    va_end(ap);
}

/* Input i of s changed? Its digest on the device against the pristine copy's; only when they
 * differ is the input read back and compared with the host's, element by element, to say
 * where. */
static int input_unchanged(worker__worker *w, worker__argset *s, unsigned i, const char *who)
{
    const kl_arg *a = &w->task->args[i];
    worker__dbuf *d = &s->dev[i];
    if (s->entry && s->entry->on_device && s->entry->dev[i]) {
        uint64_t now;
        if (worker__rtc(w, w->rt.digest(d->ptr, d->bytes, &now), "computing an input's digest")) return -1;
        if (now == s->entry->digest[i]) return 0;
    }
    if (!s->scratch[i] && !(s->scratch[i] = malloc(d->bytes ? d->bytes : 1)))
        return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s at %s: out of host memory for %zu bytes", a->name,
                    s->shape->label, d->bytes);
    if (worker__rtc(w, w->rt.d2h(s->scratch[i], d->ptr, d->bytes), "reading an input back")) return -1;
    int64_t first;
    int64_t ndiff = kl_compare_bits(a->dtype, s->scratch[i], s->host[i], s->counts[i], &first);
    if (ndiff)
        integrity_note(w, "input '%s' changed by the %s at %s (seed %llu): %lld elements, first at %lld", a->name, who,
                       s->shape->label, (unsigned long long)s->seed, (long long)ndiff, (long long)first);
    else if (s->entry && s->entry->on_device)
        integrity_note(w, "input '%s' at %s (seed %llu): the device copy it is restored from was changed by the %s "
                          "(it no longer matches its digest)",
                       a->name, s->shape->label, (unsigned long long)s->seed, who);
    return 0;
}

/* Inputs unchanged, guard zones intact (after a launch, device synchronized). */
static int argset_integrity(worker__worker *w, worker__argset *s, const char *who)
{
    if (!w->integrity_on) return 0;
    double t0 = kl_now();
    w->integrity_launches++;
    unsigned char guard[2 * GUARD_BYTES + 512];
    for (unsigned i = 0; i < w->task->nargs; i++) {
        const kl_arg *a = &w->task->args[i];
        if (a->dtype == KL_DTYPE_NONE) continue;
        worker__dbuf *d = &s->dev[i];
        if (a->role == KL_ROLE_IN && d->bytes && input_unchanged(w, s, i, who)) return -1;
        /* the guard before (the shift, up to the guard size) and after the data */
        size_t before = d->shift < GUARD_BYTES ? d->shift : GUARD_BYTES;
        size_t after = d->alloc - d->shift - d->bytes;
        if (after > sizeof guard - GUARD_BYTES) after = sizeof guard - GUARD_BYTES;
        if (before && worker__rtc(w, w->rt.d2h(guard, (char *)d->ptr - before, before), "reading a guard zone")) return -1;
        if (after && worker__rtc(w, w->rt.d2h(guard + before, (char *)d->ptr + d->bytes, after), "reading a guard zone")) return -1;
        for (size_t k = 0; k < before + after; k++) {
            if (guard[k] != GUARD_BYTE) {
                bool pre = k < before;
                integrity_note(w, "the %s wrote %s '%s' at %s (byte %s%zu)", who,
                               pre ? "before the start of" : "past the end of", a->name, s->shape->label, pre ? "-" : "+",
                               pre ? before - k : k - before);
                break;
            }
        }
    }
    w->tm.integrity += kl_now() - t0;
    return 0;
}

/* Before a candidate's launch: the SMs' shared memory filled with w->smem_byte (then reset to
 * 0xFF for the next), so that a kernel reading shared memory it never wrote reads a poison,
 * whatever ran before it (alone on the GPU or beside other gates). A failure to poison is
 * not the candidate's: it is logged and weakens the evidence (the verdict is not stored). */
static int smem_poison(worker__worker *w, worker__launcher *L)
{
    if (L != &w->cand || !w->poison_smem) return 0;
    int byte = w->smem_byte;
    w->smem_byte = 0xFF;
    if (byte < 0) return 0;
    int rc = w->rt.smem_poison(byte);
    if (rc == KL_RT_OK) {
        w->smem_poisoned++;
        return 0;
    }
    if (rc == KL_RT_ERR_STICKY) return worker__rtc(w, rc, "poisoning shared memory");
    if (!w->smem_poison_failed) kl_log(KL_LOG_WARN, "poisoning shared memory failed: %s", w->rt.error());
    w->smem_poison_failed = true;
    return 0;
}

/* Run L on s (already uploaded): launch, synchronize only the worker's stream, read back. */
int worker__run_once(worker__worker *w, worker__launcher *L, worker__argset *s)
{
    double t0 = kl_now();
    if (smem_poison(w, L)) return -1;
    if (worker__rtc(w, w->rt.device_sync(), "synchronizing before the launch")) return -1;
    if (worker__launch(w, L, s)) return -1;
    if (worker__rtc(w, w->rt.stream_sync(w->stream), "synchronizing the launch stream")) return -1;
    w->tm.launch += kl_now() - t0;
    if (worker__argset_read(w, s)) return -1;
    if (worker__rtc(w, w->rt.device_sync(), "synchronizing the device after the launch")) return -1;
    if (L == &w->cand && argset_integrity(w, s, "candidate")) return -1;
    return 0;
}

/* ---- hygiene: threads and interposition ---------------------------------------------------- */

/* Threads the CUDA driver and CUPTI start lazily are named by them; anything else that
 * appeared after the candidate was loaded is the candidate's. */
static int hygiene_check(worker__worker *w, const char *when)
{
    kl_thread_set now;
    kl_error err = {0};
    if (kl_threads_list(&now, &err) != KL_OK) return worker__kfail(w, KL_WORKER_EXIT_HARNESS, &err);
    kl_strbuf list = KL_STRBUF_INIT;
    unsigned extra = kl_threads_new(&w->threads0, &now, true, &list);
    if (extra && w->hygiene_ok) {
        w->hygiene_ok = false;
        kl_strbuf_addf(&w->hygiene_detail, "the candidate started %u thread%s %s: %s", extra, extra == 1 ? "" : "s", when,
                       kl_strbuf_str(&list));
    }
    kl_strbuf_release(&list);
    kl_threads_free(&now);
    kl_strbuf why = KL_STRBUF_INIT;
    if (!kl_symbols_check(&w->rt, &w->syms0, &w->cand.obj, &why) && w->hygiene_ok) {
        w->hygiene_ok = false;
        kl_strbuf_addf(&w->hygiene_detail, "the candidate interposes the harness's symbols (%s): %s", when,
                       kl_strbuf_str(&why));
    }
    kl_strbuf_release(&why);
    json_t *h = json_object_get(w->result, "hygiene");
    json_object_set_new(h, "ok", json_boolean(w->hygiene_ok));
    json_object_set_new(h, "detail", json_string(w->hygiene_ok ? "no threads started, no harness symbol interposed"
                                                               : kl_strbuf_str(&w->hygiene_detail)));
    return 0;
}

/* ---- jobs ------------------------------------------------------------------------------------ */

static int device_doc(worker__worker *w)
{
    kl_rt_device d;
    if (worker__rtc(w, w->rt.device_info(&d), "reading the device's properties")) return -1;
    char cc[16];
    kl_snprintf(cc, sizeof cc, "%d.%d", d.cc_major, d.cc_minor);
    json_object_set_new(w->result, "device",
                        json_pack("{s:s, s:i, s:s, s:i, s:i, s:I, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "name", d.name,
                                  "ordinal", d.ordinal, "cc", cc, "sms", d.sms, "l2_bytes", d.l2_bytes, "mem_bytes",
                                  (json_int_t)d.mem_bytes, "clock_khz", d.clock_khz, "mem_clock_khz", d.mem_clock_khz,
                                  "mem_bus_bits", d.mem_bus_bits, "driver", d.driver_version, "runtime",
                                  d.runtime_version, "smem_per_block_optin", d.smem_per_block_optin, "regs_per_sm",
                                  d.regs_per_sm));
    return 0;
}

static int parse_gpu_info_job(worker__worker *w, double *reps)
{
    static const char *const keys[] = {"job", "runtime", "nvcc", "arch", "cache_dir", "device", "reps", NULL};
    if (check_keys(w, w->job, "gpu-info", keys)) return -1;
    *reps = 20;
    return get_number(w, w->job, "", "reps", 1, 10000, reps);
}

static int job_gpu_info(worker__worker *w, double reps)
{
    w->stage = "ceilings";
    int timer = KL_RT_TIMER_NONE;
    if (worker__rtc(w, w->rt.timer_init(1, &timer), "starting the timer")) return -1;
    json_object_set_new(w->result, "timer", json_string(timer == KL_RT_TIMER_CUPTI ? "cupti" : "events"));
    if (timer != KL_RT_TIMER_CUPTI) json_object_set_new(w->result, "timer_note", json_string(w->rt.error()));
    kl_rt_ceilings c;
    if (worker__rtc(w, w->rt.ceilings_measure((unsigned)reps, &c), "measuring the ceilings")) return -1;
    json_object_set_new(w->result, "ceilings",
                        json_pack("{s:o, s:o, s:o, s:i, s:I, s:s, s:s, s:s}", "copy_gbs", worker__jreal(c.copy_gbs), "fma_tflops",
                                  worker__jreal(c.fma_tflops), "tensor_tflops", worker__jreal(c.tensor_tflops), "reps", (int)c.reps,
                                  "copy_bytes", (json_int_t)c.copy_bytes, "copy",
                                  "cudaMemcpyAsync device to device, bytes read + written", "fma",
                                  "f32 FMA chains, 2 flops per FMA", "tensor",
                                  "mma.sync.m16n8k16 bf16 x bf16 + f32 (not wgmma: a floor on the tensor peak)"));
    json_object_set_new(w->result, "cublas", json_boolean(w->rt.cublas_available()));
    return 0;
}

/* Everything of a gate job that is plain JSON, checked before CUDA is touched. */
static int parse_gate_job(worker__worker *w, worker__gate_opts *op, gate_paths *gp)
{
    static const char *const keys[] = {"job", "runtime", "nvcc", "arch", "cache_dir", "device", "task_dir",
                                       "candidate", "baseline", "baseline_builtin", "baseline_args", "shapes",
                                       "seeds", "stages", "reference_max_flops", "ceilings", "ceiling_slack",
                                       "timer", "stream_margin_us", "tight", "poison_smem", "deadline_s",
                                       "reference_budget_s", "host_slack_ms", "sandbox", NULL};
    if (check_keys(w, w->job, "gate", keys)) return -1;
    worker__gate_opts o;
    memset(&o, 0, sizeof o);
    memset(gp, 0, sizeof *gp);
    o.correct = o.determinism = o.integrity = o.stream = true;
    o.profile = (worker__profile_opts){true, "bench", 20, 200, 1.5, 3, 0.01, true};
    o.reference_max_flops = -1;
    o.slack_bytes = 1.25;
    o.slack_flops = 2.0;
    o.want_cupti = true;
    o.stream_margin_us = 10;
    o.poison_smem = true;
    o.reference_budget_s = REFERENCE_BUDGET_S;
    o.host_slack_ms = HOST_SLACK_MS;

    const char *timer_s;
    if (get_string(w, w->job, "task_dir", true, &gp->task_dir) || get_string(w, w->job, "candidate", true, &gp->cand_path) ||
        get_string(w, w->job, "baseline", false, &gp->base_path) ||
        get_string(w, w->job, "baseline_builtin", false, &gp->builtin) || get_string(w, w->job, "timer", false, &timer_s))
        return -1;
    if (gp->base_path && gp->builtin)
        return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: give \"baseline\" or \"baseline_builtin\", not both");
    if (timer_s) {
        if (!strcmp(timer_s, "events")) o.want_cupti = false;
        else if (strcmp(timer_s, "cupti"))
            return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"timer\" is cupti or events, not \"%s\"", timer_s);
    }
    json_t *stages = json_object_get(w->job, "stages");
    if (stages && parse_stages(w, stages, &o)) return -1;
    if (get_number(w, w->job, "", "reference_max_flops", 0, 1e30, &o.reference_max_flops) ||
        get_number(w, w->job, "", "stream_margin_us", 0, 1e6, &o.stream_margin_us) ||
        get_bool(w, w->job, "", "tight", &o.tight) || get_bool(w, w->job, "", "poison_smem", &o.poison_smem) ||
        get_number(w, w->job, "", "deadline_s", 0, 1e6, &o.deadline_s) ||
        get_number(w, w->job, "", "reference_budget_s", 0, 1e6, &o.reference_budget_s) ||
        get_number(w, w->job, "", "host_slack_ms", 0, 1e6, &o.host_slack_ms))
        return -1;
    json_t *ceil = json_object_get(w->job, "ceilings");
    if (ceil) {
        static const char *const ck[] = {"copy_gbs", "fma_tflops", "tensor_tflops", NULL};
        if (!json_is_object(ceil)) return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"ceilings\" must be an object");
        if (check_keys(w, ceil, "ceilings", ck) || get_number(w, ceil, "ceilings.", "copy_gbs", 0, 1e9, &o.copy_gbs) ||
            get_number(w, ceil, "ceilings.", "fma_tflops", 0, 1e9, &o.fma_tflops) ||
            get_number(w, ceil, "ceilings.", "tensor_tflops", 0, 1e9, &o.tensor_tflops))
            return -1;
    }
    json_t *slack = json_object_get(w->job, "ceiling_slack");
    if (slack) {
        static const char *const sk[] = {"bytes", "flops", NULL};
        if (!json_is_object(slack)) return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"ceiling_slack\" must be an object");
        if (check_keys(w, slack, "ceiling_slack", sk) || get_number(w, slack, "ceiling_slack.", "bytes", 1, 100, &o.slack_bytes) ||
            get_number(w, slack, "ceiling_slack.", "flops", 1, 100, &o.slack_flops))
            return -1;
    }

    json_t *shapes = json_object_get(w->job, "shapes");
    if (!json_is_array(shapes) || json_array_size(shapes) == 0)
        return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"shapes\" must be a non-empty array of shape labels");
    gp->bmap = json_object_get(w->job, "baseline_args");
    if (gp->bmap && !json_is_object(gp->bmap))
        return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"baseline_args\" must be an object");
    gp->sandbox = json_object_get(w->job, "sandbox");
    if (gp->sandbox) {
        static const char *const sk[] = {"scratch", "read", "write", "require", NULL};
        if (!json_is_object(gp->sandbox)) return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"sandbox\" must be an object");
        if (check_keys(w, gp->sandbox, "sandbox", sk)) return -1;
        const char *scratch;
        if (get_string(w, gp->sandbox, "scratch", true, &scratch)) return -1;
        const char *lists[] = {"read", "write"};
        for (int k = 0; k < 2; k++) {
            json_t *a = json_object_get(gp->sandbox, lists[k]), *v;
            size_t i;
            if (a && !json_is_array(a))
                return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: sandbox.%s must be an array of paths", lists[k]);
            json_array_foreach(a, i, v) if (!json_is_string(v))
                return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: sandbox.%s[%zu] must be a path", lists[k], i);
        }
    }
    *op = o;
    return 0;
}

/* The reference's speed on this host, measured at the largest referenced job shape of at most
 * REFERENCE_PROBE_FLOPS (its reference is needed anyway: it is computed here, before the pool
 * starts, and kept); every shape whose reference would then take longer than the budget is
 * checked against the baseline instead. Recorded in the result's "reference_speed". */
static int reference_budget(worker__worker *w, const worker__gate_opts *o)
{
    const char *cost = w->task->cost_flops;
    if (!cost || !(o->reference_budget_s > 0) || w->ref_load_st != KL_OK) return 0;
    const kl_shape *probe = NULL;
    double probe_flops = -1;
    for (unsigned k = 0; k < w->nshapes; k++) {
        double f = worker__shape_cost(w, w->shapes[k].shape, cost);
        if (w->shapes[k].reference && f <= REFERENCE_PROBE_FLOPS && f > probe_flops) {
            probe = w->shapes[k].shape;
            probe_flops = f;
        }
    }
    if (!probe || probe_flops < REFERENCE_PROBE_MIN_FLOPS) return 0; /* too small to time */
    input_entry *e;
    if (worker__inputs_get(w, probe, w->seeds[0], &e)) return -1; /* no pool yet: filled here */
    pthread_mutex_lock(&w->cache_mu);
    bool run = !e->ref_queued;
    e->want_ref = e->ref_queued = true;
    pthread_mutex_unlock(&w->cache_mu);
    double t0 = kl_now();
    if (run) worker__reference_task(e);
    double dt = kl_now() - t0;
    if (e->ref_st != KL_OK) return 0; /* reported by the stage that needs it */
    /* the call alone, as its child timed it: a fork's fixed cost is no part of the speed */
    if (run && kl_reference_last_seconds(w->ref) > 0) dt = kl_reference_last_seconds(w->ref);
    if (dt < 1e-4) dt = 1e-4;          /* a clock's grain: a fast reference is not infinitely fast */
    double speed = probe_flops / dt, limit = speed * o->reference_budget_s;
    json_t *moved = json_array();
    for (unsigned k = 0; k < w->nshapes; k++) {
        double f = worker__shape_cost(w, w->shapes[k].shape, cost);
        if (!w->shapes[k].reference || !(f > limit)) continue;
        w->shapes[k].reference = false;
        json_array_append_new(moved, json_pack("{s:s, s:f, s:f}", "shape", w->shapes[k].shape->label, "flops", f,
                                               "predicted_s", f / speed));
    }
    json_object_set_new(w->result, "reference_speed",
                        json_pack("{s:s, s:f, s:f, s:f, s:f, s:f, s:o}", "shape", probe->label, "flops", probe_flops,
                                  "seconds", dt, "flops_per_s", speed, "budget_s", o->reference_budget_s,
                                  "limit_flops", limit, "against_baseline", moved));
    return 0;
}

/* Before CUDA starts: the task, the shapes and seeds, the reference object, the pool, and
 * every (shape, seed) the correct stage will use queued for filling and for the reference,
 * so that the host work overlaps the CUDA context's start and the GPU stages. A task that
 * does not load is left to job_gate to report (after the device was looked for). */
static void apply_opts(worker__worker *w, const worker__gate_opts *o)
{
    w->tight = o->tight;
    w->poison_smem = o->poison_smem && !o->tight; /* the sanitizer runs check shared memory themselves */
    w->smem_byte = 0xFF;
    w->deadline = o->deadline_s > 0 ? w->tm.start + o->deadline_s : 0;
}

static int gate_prepare(worker__worker *w, const worker__gate_opts *o, const gate_paths *gp)
{
    double t0 = kl_now();
    kl_error err = {0};
    apply_opts(w, o);
    if (kl_task_load(gp->task_dir, &w->task, &err) != KL_OK) {
        w->task = NULL;
        return 0;
    }
    w->stage = "job";
    if (parse_shapes(w, json_object_get(w->job, "shapes")) || parse_seeds(w, json_object_get(w->job, "seeds"))) return -1;
    worker__apply_reference_limit(w, o);
    w->stage = "init";
    bool any_ref = false;
    for (unsigned k = 0; k < w->nshapes; k++) any_ref |= w->shapes[k].reference;
    if (any_ref && o->correct) worker__reference_load(w);
    if (any_ref && o->correct && reference_budget(w, o)) return -1;
    if (kl_pool_start(0, &w->pool, &err) != KL_OK) {
        kl_log(KL_LOG_WARN, "%s; filling inputs on one thread", err.message);
        w->pool = NULL;
    }
    w->task_prepared = true;
    if (o->correct)
        for (unsigned k = 0; k < w->nshapes; k++)
            for (unsigned si = 0; si < worker__shape_seeds(w, &w->shapes[k]); si++) {
                input_entry *e;
                if (worker__inputs_schedule(w, w->shapes[k].shape, w->seeds[si], w->shapes[k].reference, &e)) return -1;
            }
    w->tm.inputs_start = kl_now() - t0;
    return 0;
}

/* On a pool thread started before the sandbox: it joins the Landlock domain before its next
 * task (seccomp already covers it: the filter went to every thread). */
static void pool_join_sandbox(void *arg)
{
    worker__worker *w = arg;
    kl_error err = {0};
    if (kl_sandbox_join(&w->sandbox, &err) != KL_OK) kl_log(KL_LOG_WARN, "%s", err.message);
}

static const char **string_list(json_t *a)
{
    size_t n = json_array_size(a);
    const char **out = calloc(n + 1, sizeof *out);
    for (size_t i = 0; out && i < n; i++) out[i] = json_string_value(json_array_get(a, i));
    return out;
}

/* The sandbox, before the first untrusted object (baseline or candidate) is loaded: the harness
 * (CUDA, CUPTI, cuBLAS, the reference, the pool) is up by then and needs nothing it forbids.
 * What is in force goes to the result's "sandbox". Not in force where the kernel does not offer
 * it, said so (a harness failure when the job requires it). */
static bool process_sandboxed;

bool kl_worker_sandboxed(void) { return process_sandboxed; }

static int sandbox_enter(worker__worker *w, json_t *spec)
{
    json_t *doc = json_object();
    json_object_set_new(w->result, "sandbox", doc);
    if (!spec) {
        json_object_set_new(doc, "applied", json_false());
        json_object_set_new(doc, "detail", json_string("not asked for"));
        return 0;
    }
    const char **rd = string_list(json_object_get(spec, "read"));
    const char **wr = string_list(json_object_get(spec, "write"));
    kl_sandbox_policy pol = {json_string_value(json_object_get(spec, "scratch")), rd, wr, true};
    kl_error err = {0};
    kl_status st = rd && wr ? kl_sandbox_apply(&pol, &w->sandbox, &err) : kl_error_set(&err, KL_ERR_NOMEM, "out of memory");
    free(rd);
    free(wr);
    bool require = json_is_true(json_object_get(spec, "require"));
    w->sandboxed = st == KL_OK && (w->sandbox.landlock || w->sandbox.seccomp);
    process_sandboxed |= st == KL_OK;
    json_object_set_new(doc, "applied", json_boolean(w->sandboxed));
    json_object_set_new(doc, "landlock", json_boolean(w->sandbox.landlock));
    json_object_set_new(doc, "landlock_abi", json_integer(w->sandbox.landlock_abi));
    json_object_set_new(doc, "seccomp", json_boolean(w->sandbox.seccomp));
    json_object_set_new(doc, "rlimits", json_boolean(w->sandbox.rlimits));
    json_object_set_new(doc, "detail", json_string(st == KL_OK ? w->sandbox.detail : err.message));
    if (st == KL_OK && w->sandbox.landlock && w->pool) kl_pool_set_hook(w->pool, pool_join_sandbox, w);
    if (require && (st != KL_OK || !w->sandbox.landlock || !w->sandbox.seccomp))
        return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "the sandbox is required and not in force: %s",
                    st == KL_OK ? w->sandbox.detail : err.message);
    if (st != KL_OK) kl_log(KL_LOG_WARN, "the sandbox could not be applied: %s", err.message);
    return 0;
}

static int job_gate(worker__worker *w, const worker__gate_opts *op, const gate_paths *gp)
{
    worker__gate_opts o = *op;
    const char *task_dir = gp->task_dir, *cand_path = gp->cand_path, *base_path = gp->base_path, *builtin = gp->builtin;
    json_t *bmap = gp->bmap;
    w->stage = "task";
    kl_error err = {0};
    if (!w->task_prepared) {
        apply_opts(w, &o);
        if (kl_task_load(task_dir, &w->task, &err) != KL_OK) return worker__kfail(w, KL_WORKER_EXIT_HARNESS, &err);
        if (parse_shapes(w, json_object_get(w->job, "shapes")) || parse_seeds(w, json_object_get(w->job, "seeds")))
            return -1;
        worker__apply_reference_limit(w, &o);
    }
    w->tol.rel_l2 = w->task->rel_l2;
    w->tol.max_abs = w->task->max_abs;
    w->tol.exact = w->task->exact;

    /* the harness first: timer (CUPTI's thread), stream, cuBLAS (only for a builtin baseline);
     * then the snapshot. The pool's threads were started before it (prepare), so they are
     * the harness's too. */
    w->stage = "init";
    double t = kl_now();
    if (worker__rtc(w, w->rt.timer_init(o.want_cupti, &w->timer), "starting the timer")) return -1;
    if (o.want_cupti && w->timer != KL_RT_TIMER_CUPTI)
        json_object_set_new(w->result, "timer_note", json_string(w->rt.error()));
    w->tm.cupti_init = kl_now() - t;
    t = kl_now();
    if (worker__rtc(w, w->rt.stream_create(&w->stream, 0), "creating the launch stream")) return -1;
    w->tm.stream_create = kl_now() - t;
    w->cand.role = "candidate";
    w->base.role = "baseline";
    t = kl_now();
    if (builtin && setup_builtin(w, &w->base, builtin, bmap)) return -1;
    w->tm.cublas_init = kl_now() - t;
    if (sandbox_enter(w, gp->sandbox)) return -1;
    if (base_path) {
        w->stage = "load";
        t = kl_now();
        if (kl_shim_object_load(base_path, &w->base.obj, &err) != KL_OK) {
            kl_error_prefix(&err, "baseline");
            return worker__kfail(w, KL_WORKER_EXIT_HARNESS, &err);
        }
        w->base.present = true;
        w->tm.baseline_load = kl_now() - t;
    }
    t = kl_now();
    if (kl_threads_list(&w->threads0, &err) != KL_OK) return worker__kfail(w, KL_WORKER_EXIT_HARNESS, &err);
    kl_symbols_snapshot(&w->rt, &w->syms0);
    w->tm.snapshot = kl_now() - t;

    w->stage = "load";
    json_object_set_new(w->result, "hygiene", json_pack("{s:b, s:s}", "ok", 1, "detail", "pending"));
    w->hygiene_ok = true;
    t = kl_now();
    if (kl_shim_object_load(cand_path, &w->cand.obj, &err) != KL_OK) {
        json_object_set_new(w->result, "load", json_pack("{s:b, s:s}", "ok", 0, "detail", err.message));
        json_object_del(w->result, "hygiene");
        return 0;
    }
    w->cand.present = true;
    w->tm.candidate_load = kl_now() - t;
    json_object_set_new(w->result, "load", json_pack("{s:b, s:s}", "ok", 1, "detail", "the shim answered klineage-shim-1"));
    if (hygiene_check(w, "when loaded")) return -1;
    if (!w->hygiene_ok) return 0;

    w->integrity_on = o.integrity;
    w->integrity_ok = true;
    bool ok = true;
    if (o.correct) {
        t = kl_now();
        int rc = worker__stage_correct(w, &o, &ok);
        w->tm.correct = kl_now() - t;
        if (rc) return -1;
        if (hygiene_check(w, "while running")) return -1;
        if (!w->hygiene_ok || !ok) goto integrity;
    }
    if (o.determinism) {
        t = kl_now();
        int rc = worker__stage_determinism(w, &o, &ok);
        w->tm.determinism = kl_now() - t;
        if (rc) return -1;
        if (!ok) goto integrity;
    }
integrity:
    if (o.integrity) {
        json_object_set_new(w->result, "integrity",
                            json_pack("{s:b, s:s, s:i}", "ok", w->integrity_ok, "detail",
                                      w->integrity_ok ? "inputs unchanged and guard zones intact after every launch"
                                                      : kl_strbuf_str(&w->integrity_detail),
                                      "launches", (int)w->integrity_launches));
        if (!w->integrity_ok) ok = false;
    }
    if (!ok || !w->hygiene_ok) return hygiene_check(w, "while running");
    if (o.stream) {
        const kl_shape *a, *b, *largest;
        worker__pick_shapes(w, &a, &b, &largest);
        const kl_shape *sh = o.profile.on && kl_task_shape(w->task, o.profile.shape) ? kl_task_shape(w->task, o.profile.shape)
                                                                                      : largest;
        t = kl_now();
        int rc = worker__stage_stream(w, &o, sh, &ok);
        w->tm.stream = kl_now() - t;
        if (rc) return -1;
        if (!ok) return hygiene_check(w, "while running");
    }
    if (o.profile.on) {
        t = kl_now();
        int rc = worker__stage_profile(w, &o, &ok);
        w->tm.profile = kl_now() - t;
        if (rc) return -1;
    }
    w->stage = "finish";
    t = kl_now();
    if (worker__rtc(w, w->rt.device_sync(), "the final device synchronize")) return -1;
    if (worker__rtc(w, w->rt.check(), "the final error check")) return -1;
    int rc = hygiene_check(w, "while running");
    w->tm.finish = kl_now() - t;
    return rc;
}

static int setup_cache_dir(worker__worker *w)
{
    const char *cache;
    if (get_string(w, w->job, "cache_dir", false, &cache)) return -1;
    w->cache_dir = cache ? kl_strdup(cache) : kl_cache_dir();
    if (!w->cache_dir) return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    return 0;
}

static int setup_runtime(worker__worker *w)
{
    const char *rt_path, *nvcc, *arch;
    if (get_string(w, w->job, "runtime", false, &rt_path) || get_string(w, w->job, "nvcc", false, &nvcc) ||
        get_string(w, w->job, "arch", false, &arch))
        return -1;
    double dev = 0;
    if (get_number(w, w->job, "", "device", 0, 1024, &dev)) return -1;
    char *built = NULL;
    kl_error err = {0};
    if (!rt_path && (!nvcc || !arch))
        return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false,
                    "job: give \"runtime\" (the device runtime's object), or \"nvcc\" and \"arch\" to build it");
    w->stage = "init";
    double t = kl_now();
    if (!rt_path) {
        if (kl_runtime_build(nvcc, arch, w->cache_dir, &built, &err) != KL_OK) return worker__kfail(w, KL_WORKER_EXIT_HARNESS, &err);
        rt_path = built;
    }
    kl_status st = kl_rt_api_load(rt_path, &w->rt, &err);
    free(built);
    w->tm.runtime_load = kl_now() - t;
    if (st != KL_OK) return worker__kfail(w, KL_WORKER_EXIT_HARNESS, &err);
    t = kl_now();
    int rc = w->rt.init((int)dev);
    w->tm.cuda_init = kl_now() - t;
    if (rc == KL_RT_ERR_NO_DEVICE) return worker__fail(w, KL_WORKER_EXIT_NO_GPU, w->rt.error_name(), false, "no CUDA device: %s", w->rt.error());
    if (worker__rtc(w, rc, "initialising CUDA")) return -1;
    w->rt_ready = true;
    t = kl_now();
    rc = device_doc(w);
    w->tm.device_info = kl_now() - t;
    return rc;
}

/* The result's "timings": where the worker's time went, in seconds (docs/gate-worker.md). */
static json_t *timings_doc(worker__worker *w)
{
    const worker_times *t = &w->tm;
    json_t *d = json_object();
#define TSET(key, v) json_object_set_new(d, key, json_real(round((v) * 1e6) / 1e6))
    TSET("total", kl_now() - t->start);
    TSET("parse", t->parse);
    TSET("inputs_start", t->inputs_start);
    TSET("runtime_load", t->runtime_load);
    TSET("cuda_init", t->cuda_init);
    TSET("device_info", t->device_info);
    TSET("cupti_init", t->cupti_init);
    TSET("stream_create", t->stream_create);
    TSET("cublas_init", t->cublas_init);
    TSET("baseline_load", t->baseline_load);
    TSET("snapshot", t->snapshot);
    TSET("candidate_load", t->candidate_load);
    TSET("correct", t->correct);
    TSET("determinism", t->determinism);
    TSET("stream", t->stream);
    TSET("profile", t->profile);
    TSET("finish", t->finish);
    /* inside the stages above */
    TSET("alloc", t->alloc);
    TSET("release", t->release);
    TSET("upload", t->upload);
    TSET("launch", t->launch);
    TSET("readback", t->readback);
    TSET("integrity", t->integrity);
    TSET("compare", t->compare);
    TSET("wait_inputs", t->wait_inputs);
    TSET("wait_reference", t->wait_reference);
    TSET("device_inputs", t->device_inputs);
    json_object_set_new(d, "buffers_reused", json_integer(t->buffers_reused));
    json_object_set_new(d, "buffers_allocated", json_integer(t->buffers_allocated));
    /* on the pool, summed over its threads */
    pthread_mutex_lock(&w->cache_mu);
    double ref_cpu = t->reference_cpu, ref_load = t->reference_load;
    unsigned fills = t->fills, refs = t->references;
    pthread_mutex_unlock(&w->cache_mu);
    double busy = kl_pool_busy_seconds(w->pool);
    TSET("reference_load", ref_load);
    TSET("references_cpu", ref_cpu);
    json_object_set_new(d, "references", json_integer(refs));
    TSET("fills_cpu", busy > ref_cpu ? busy - ref_cpu : 0);
    json_object_set_new(d, "fills", json_integer(fills));
    json_object_set_new(d, "pool_threads", json_integer(kl_pool_threads(w->pool)));
    /* the profile stage */
    TSET("profile_setup", t->profile_setup);
    TSET("profile_warmup", t->profile_warmup);
    TSET("profile_timed", t->profile_timed);
    json_object_set_new(d, "profile_reps", json_integer(t->profile_reps));
    json_object_set_new(d, "profile_batches", json_integer(t->profile_batches));
    if (t->profile_retries) json_object_set_new(d, "profile_retries", json_integer(t->profile_retries));
    json_object_set_new(d, "profile_stopped", json_string(t->profile_stopped ? t->profile_stopped : ""));
    json_object_set_new(d, "profile_median_rse", worker__jreal(t->profile_rse));
#undef TSET
    return d;
}

int kl_worker_run(const char *job, size_t len, char **result)
{
    worker__worker W;
    worker__worker *w = &W;
    memset(w, 0, sizeof *w);
    w->tm.start = kl_now();
    pthread_mutex_init(&w->cache_mu, NULL);
    pthread_cond_init(&w->cache_cv, NULL);
    pthread_mutex_init(&w->ref_mu, NULL);
    w->ref_load_st = KL_OK;
    kl_strbuf_init(&w->integrity_detail, 1024);
    kl_strbuf_init(&w->hygiene_detail, 1024);
    w->result = json_object();
    w->sandbox.ruleset_fd = -1;
    w->exit_code = KL_WORKER_EXIT_OK;
    w->stage = "job";
    json_error_t jerr;
    w->job = json_loadb(job, len, JSON_REJECT_DUPLICATES, &jerr);
    int rc = 0;
    if (!w->job) {
        rc = worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: line %d, column %d: %s", jerr.line, jerr.column, jerr.text);
    } else if (!json_is_object(w->job)) {
        rc = worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: expected a JSON object");
    } else {
        const char *kind = NULL;
        rc = get_string(w, w->job, "job", true, &kind);
        if (!rc && strcmp(kind, "gate") && strcmp(kind, "gpu-info"))
            rc = worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: \"job\" is gate or gpu-info, not \"%s\"", kind);
        bool gate = !rc && !strcmp(kind, "gate");
        worker__gate_opts o;
        gate_paths gp;
        double reps = 0;
        if (!rc) {
            json_object_set_new(w->result, "job", json_string(kind));
            rc = gate ? parse_gate_job(w, &o, &gp) : parse_gpu_info_job(w, &reps);
        }
        if (!rc) rc = setup_cache_dir(w);
        w->tm.parse = kl_now() - w->tm.start;
        if (!rc && gate) rc = gate_prepare(w, &o, &gp);
        if (!rc) rc = setup_runtime(w);
        if (!rc) rc = gate ? job_gate(w, &o, &gp) : job_gpu_info(w, reps);
    }
    (void)rc;
    json_object_set_new(w->result, "timings", timings_doc(w));
    json_object_set_new(w->result, "error", w->error ? w->error : json_null());
    w->error = NULL;
    *result = json_dumps(w->result, JSON_INDENT(1) | JSON_REAL_PRECISION(9));

    /* release: the pool first (it may still be filling), then device memory (a sticky
     * context refuses, which is fine) */
    pthread_mutex_lock(&w->cache_mu);
    w->cancel = true; /* references still queued are not computed */
    pthread_mutex_unlock(&w->cache_mu);
    if (w->abandon) {
        /* a reference is still running past the deadline: the result is out; the process ends
         * (main exits at once) without waiting for it or freeing what it uses */
        json_decref(w->result);
        json_decref(w->job);
        return w->exit_code;
    }
    kl_pool_stop(w->pool);
    w->pool = NULL;
    if (w->task) worker__inputs_free(w);
    buffers_free(w);
    if (w->stream && w->rt_ready && w->exit_code != KL_WORKER_EXIT_CUDA) w->rt.stream_destroy(w->stream);
    kl_shim_object_unload(&w->cand.obj);
    kl_shim_object_unload(&w->base.obj);
    kl_reference_free(w->ref);
    kl_task_free(w->task);
    if (w->rt_ready && w->exit_code != KL_WORKER_EXIT_CUDA) w->rt.fini();
    kl_rt_api_unload(&w->rt);
    kl_threads_free(&w->threads0);
    free(w->shapes);
    free(w->seeds);
    free(w->cache_dir);
    kl_strbuf_release(&w->integrity_detail);
    kl_strbuf_release(&w->hygiene_detail);
    kl_sandbox_release(&w->sandbox);
    pthread_mutex_destroy(&w->ref_mu);
    pthread_cond_destroy(&w->cache_cv);
    pthread_mutex_destroy(&w->cache_mu);
    json_decref(w->job);
    json_decref(w->result);
    if (!*result) return KL_WORKER_EXIT_HARNESS;
    return w->exit_code;
}
