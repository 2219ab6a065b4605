/* The worker's inputs (worker_int.h): the cache of filled inputs and the reference's outputs per
 * shape, computed on the pool one reference at a time, and the slices of work the pool runs. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "gate/gate_int.h"
#include "gate/measure.h"
#include "gate/sandbox.h"
#include "gate/worker.h"
#include "klineage/task.h"
#include "gate/worker_int.h"

/* ---- the input cache: fills and references on the pool --------------------------------------- */

static void entry_free(worker__worker *w, input_entry *e)
{
    bool dev_ok = w->rt_ready && w->exit_code != KL_WORKER_EXIT_CUDA;
    for (unsigned i = 0; i < w->task->nargs; i++) {
        if (e->inputs) free(e->inputs[i]);
        if (e->ref) free(e->ref[i]);
        if (e->dev && e->dev[i] && dev_ok) w->rt.free(e->dev[i]);
    }
    free(e->dev);
    free(e->digest);
    free(e->inputs);
    free(e->counts);
    free(e->ref);
    free(e);
}

/* After every pool task has finished (kl_pool_stop). */
void worker__inputs_free(worker__worker *w)
{
    while (w->entries) {
        input_entry *e = w->entries;
        w->entries = e->next;
        entry_free(w, e);
    }
}

/* Build (or find in the cache) and load the task's reference, once; a failure is kept and
 * reported by the first stage that needs a reference. With ref_mu held, or before the pool
 * runs anything. */
void worker__reference_load(worker__worker *w)
{
    double t0 = kl_now();
    w->ref_load_tried = true;
    w->ref_load_st = kl_reference_load(w->task, w->cache_dir, &w->ref, &w->ref_load_err);
    /* the sandbox will forbid fork: the reference's runs are forked by a server started now */
    if (w->ref_load_st == KL_OK) w->ref_load_st = kl_reference_serve(w->ref, &w->ref_load_err);
    pthread_mutex_lock(&w->cache_mu);
    w->tm.reference_load += kl_now() - t0;
    pthread_mutex_unlock(&w->cache_mu);
}

/* On the pool: the reference at (e->shape, e->seed), one at a time. */
void worker__reference_task(void *arg)
{
    input_entry *e = arg;
    worker__worker *w = e->w;
    double **outs = calloc(w->task->nargs, sizeof *outs);
    kl_error err = {0};
    kl_status st;
    pthread_mutex_lock(&w->cache_mu);
    bool cancelled = w->cancel;
    pthread_mutex_unlock(&w->cache_mu);
    pthread_mutex_lock(&w->ref_mu);
    if (!w->ref_load_tried && !cancelled) worker__reference_load(w); /* normally done before CUDA started */
    double t0 = kl_now();
    if (cancelled) {
        st = kl_error_set(&err, KL_ERR_INVALID, "the job ended before the reference at %s was needed", e->shape->label);
    } else if (!outs) {
        st = kl_error_set(&err, KL_ERR_NOMEM, "out of memory");
    } else if (w->ref_load_st != KL_OK) {
        st = w->ref_load_st;
        err = w->ref_load_err;
    } else {
        /* inputs as filled; outputs are poisoned by the reference's own shim */
        st = kl_reference_run(w->ref, w->task, e->shape, e->inputs, outs, &err);
        if (st != KL_OK) kl_error_prefix(&err, "the reference at %s", e->shape->label);
    }
    double dt = kl_now() - t0;
    pthread_mutex_unlock(&w->ref_mu);
    kl_log(KL_LOG_DEBUG, "worker: reference at %s seed %llu: %.3f s", e->shape->label, (unsigned long long)e->seed, dt);
    pthread_mutex_lock(&w->cache_mu);
    e->ref_st = st;
    if (st == KL_OK) {
        e->ref = outs;
        outs = NULL;
    } else {
        e->ref_err = err;
    }
    e->ref_done = true;
    w->tm.reference_cpu += dt;
    w->tm.references++;
    pthread_cond_broadcast(&w->cache_cv);
    pthread_mutex_unlock(&w->cache_mu);
    free(outs);
}

/* With cache_mu held: queue e's reference once it is filled and wanted. The reference runs
 * on the pool when there is one, else here (the caller then must not hold cache_mu: see
 * entry_want_ref). */
static bool entry_ref_due(input_entry *e) { return e->filled && e->fill_st == KL_OK && e->want_ref && !e->ref_queued; }

static void entry_queue_ref(worker__worker *w, input_entry *e)
{
    kl_error ignore;
    if (w->pool && kl_pool_submit(w->pool, worker__reference_task, e, &ignore) == KL_OK) return;
    worker__reference_task(e);
}

/* Called once per tensor when its fill is complete (on the pool thread that finished it). */
static void entry_tensor_done(void *ctx, kl_status st, const kl_error *err)
{
    input_entry *e = ctx;
    worker__worker *w = e->w;
    pthread_mutex_lock(&w->cache_mu);
    if (st != KL_OK && e->fill_st == KL_OK) {
        e->fill_st = st;
        e->fill_err = *err;
    }
    bool queue = false;
    if (--e->fills_left == 0) {
        e->filled = true;
        w->tm.fills++;
        if (entry_ref_due(e)) e->ref_queued = queue = true;
        pthread_cond_broadcast(&w->cache_cv);
    }
    pthread_mutex_unlock(&w->cache_mu);
    if (queue) entry_queue_ref(w, e);
}

/* Find the entry of (shape, seed), or create it and queue its fills (and its reference when
 * want_ref). Never waits. -1 (w->error set) on a harness failure. */
int worker__inputs_schedule(worker__worker *w, const kl_shape *shape, uint64_t seed, bool want_ref, input_entry **out)
{
    *out = NULL;
    pthread_mutex_lock(&w->cache_mu);
    for (input_entry *e = w->entries; e; e = e->next)
        if (e->shape == shape && e->seed == seed) {
            *out = e;
            break;
        }
    bool queue = false;
    if (*out && want_ref && !(*out)->want_ref) {
        (*out)->want_ref = true;
        if (entry_ref_due(*out)) (*out)->ref_queued = queue = true;
    }
    pthread_mutex_unlock(&w->cache_mu);
    if (queue) entry_queue_ref(w, *out);
    if (*out) return 0;

    const kl_task *t = w->task;
    input_entry *e = calloc(1, sizeof *e);
    if (e) {
        e->inputs = calloc(t->nargs, sizeof *e->inputs);
        e->counts = calloc(t->nargs, sizeof *e->counts);
    }
    if (!e || !e->inputs || !e->counts) {
        if (e) free(e->inputs), free(e->counts);
        free(e);
        return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    }
    e->w = w;
    e->shape = shape;
    e->seed = seed;
    e->want_ref = want_ref;
    e->fill_st = e->ref_st = KL_OK;
    kl_error err = {0};
    unsigned tensors = 0;
    for (unsigned i = 0; i < t->nargs; i++) {
        const kl_arg *a = &t->args[i];
        if (a->dtype == KL_DTYPE_NONE || a->role == KL_ROLE_OUT) continue;
        if (kl_task_arg_count(t, shape, i, &e->counts[i], &err) != KL_OK) {
            entry_free(w, e);
            return worker__kfail(w, KL_WORKER_EXIT_HARNESS, &err);
        }
        size_t es = kl_dtype_size(a->dtype);
        if (e->counts[i] < 0 || (uint64_t)e->counts[i] > (SIZE_MAX / 2) / es) {
            entry_free(w, e);
            return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s at %s: %lld elements do not fit in memory", a->name,
                        shape->label, (long long)e->counts[i]);
        }
        size_t bytes = (size_t)e->counts[i] * es;
        e->inputs[i] = malloc(bytes ? bytes : 1);
        if (!e->inputs[i]) {
            entry_free(w, e);
            return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "%s at %s: out of host memory for %zu bytes", a->name,
                        shape->label, bytes);
        }
        tensors++;
    }
    /* one count for the scheduling itself, so that no fill completes the entry early */
    e->fills_left = tensors + 1;
    pthread_mutex_lock(&w->cache_mu);
    e->next = w->entries;
    w->entries = e;
    pthread_mutex_unlock(&w->cache_mu);
    for (unsigned i = 0; i < t->nargs; i++) {
        if (!e->inputs[i]) continue;
        kl_error ferr = {0};
        if (kl_fill_submit(w->pool, t, shape, i, seed, e->inputs[i], e->counts[i], entry_tensor_done, e, &ferr) != KL_OK)
            entry_tensor_done(e, ferr.status ? ferr.status : KL_ERR_NOMEM, &ferr);
    }
    kl_error none = {0};
    entry_tensor_done(e, KL_OK, &none);
    *out = e;
    return 0;
}

/* With cache_mu held: wait for the pool until w->deadline. false when it passed: the job is
 * abandoned as the harness's failure (a slow reference or fill is never the candidate's), and
 * the pool is left running as the worker exits. */
static bool cache_wait(worker__worker *w, const char *what, const kl_shape *shape)
{
    if (!w->deadline) {
        pthread_cond_wait(&w->cache_cv, &w->cache_mu);
        return true;
    }
    double left = w->deadline - kl_now();
    if (left > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double end = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + left;
        ts.tv_sec = (time_t)end;
        ts.tv_nsec = (long)((end - (double)ts.tv_sec) * 1e9);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        if (pthread_cond_timedwait(&w->cache_cv, &w->cache_mu, &ts) == 0 || kl_now() < w->deadline) return true;
    }
    w->abandon = true;
    pthread_mutex_unlock(&w->cache_mu);
    worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false,
         "the %s at %s did not finish within the worker's time (%.0f s): a slow reference is the task's "
         "limit, not the candidate's failure (set reference_max_flops in task.json, or a longer --timeout)",
         what, shape->label, w->deadline - w->tm.start);
    pthread_mutex_lock(&w->cache_mu);
    return false;
}

/* The inputs of (shape, seed), waiting for their fill. */
int worker__inputs_get(worker__worker *w, const kl_shape *shape, uint64_t seed, input_entry **out)
{
    input_entry *e;
    if (worker__inputs_schedule(w, shape, seed, false, &e)) return -1;
    double t0 = kl_now();
    pthread_mutex_lock(&w->cache_mu);
    while (!e->filled)
        if (!cache_wait(w, "inputs' fill", shape)) {
            pthread_mutex_unlock(&w->cache_mu);
            return -1;
        }
    kl_status st = e->fill_st;
    kl_error err = e->fill_err;
    pthread_mutex_unlock(&w->cache_mu);
    w->tm.wait_inputs += kl_now() - t0;
    if (st != KL_OK) return worker__kfail(w, KL_WORKER_EXIT_HARNESS, &err);
    *out = e;
    return 0;
}

/* The reference's outputs for (s->shape, s->seed), computed once per job. */
static int reference_get(worker__worker *w, worker__argset *s, double ***outs)
{
    input_entry *e;
    if (worker__inputs_schedule(w, s->shape, s->seed, true, &e)) return -1;
    double t0 = kl_now();
    pthread_mutex_lock(&w->cache_mu);
    while (!e->ref_done && !(e->filled && e->fill_st != KL_OK))
        if (!cache_wait(w, "reference", s->shape)) {
            pthread_mutex_unlock(&w->cache_mu);
            return -1;
        }
    kl_status st = e->fill_st != KL_OK ? e->fill_st : e->ref_st;
    kl_error err = e->fill_st != KL_OK ? e->fill_err : e->ref_err;
    pthread_mutex_unlock(&w->cache_mu);
    w->tm.wait_reference += kl_now() - t0;
    if (st != KL_OK) return worker__kfail(w, KL_WORKER_EXIT_HARNESS, &err);
    *outs = e->ref;
    return 0;
}

/* ---- slices on the pool ----------------------------------------------------------------------- */

/* One batch of slices: the pool's threads and the calling thread take slices until none are
 * left, so a pool busy with a reference never holds the caller up for more than its own share.
 * The batch lives until its last user lets go (a pool task may start after the work is done). */
typedef struct par_batch {
    void (*fn)(void *arg, unsigned k);
    void *arg;
    unsigned n, next, done, users;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} par_batch;

static void par_release(par_batch *b)
{
    pthread_mutex_lock(&b->mu);
    bool last = --b->users == 0;
    pthread_mutex_unlock(&b->mu);
    if (!last) return;
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}

static void par_take(par_batch *b)
{
    for (;;) {
        pthread_mutex_lock(&b->mu);
        if (b->next >= b->n) {
            pthread_mutex_unlock(&b->mu);
            return;
        }
        unsigned k = b->next++;
        pthread_mutex_unlock(&b->mu);
        b->fn(b->arg, k);
        pthread_mutex_lock(&b->mu);
        if (++b->done == b->n) pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
    }
}

static void par_task(void *arg)
{
    par_take(arg);
    par_release(arg);
}

static void par_run(void *ctx, unsigned n, void (*fn)(void *arg, unsigned k), void *arg)
{
    worker__worker *w = ctx;
    par_batch *b = calloc(1, sizeof *b);
    if (!b) {
        for (unsigned k = 0; k < n; k++) fn(arg, k);
        return;
    }
    b->fn = fn;
    b->arg = arg;
    b->n = n;
    b->users = 1;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    unsigned helpers = kl_pool_threads(w->pool) < n - 1 ? kl_pool_threads(w->pool) : n - 1;
    for (unsigned i = 0; i < helpers; i++) {
        kl_error ignore;
        pthread_mutex_lock(&b->mu);
        b->users++;
        pthread_mutex_unlock(&b->mu);
        if (kl_pool_submit(w->pool, par_task, b, &ignore) != KL_OK) {
            par_release(b);
            break;
        }
    }
    par_take(b);
    pthread_mutex_lock(&b->mu);
    while (b->done < b->n) pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
    par_release(b);
}

/* Compare s's outputs with the reference (or with `against`, another argset's outputs, with
 * twice the tolerance), in slices on the pool. Appends per-output documents to outputs_json; *ok. */
int worker__compare_outputs(worker__worker *w, worker__argset *s, worker__argset *against, int pass, json_t *outputs_json, bool *ok)
{
    double **ref = NULL;
    if (!against && reference_get(w, s, &ref)) return -1;
    double t0 = kl_now();
    *ok = true;
    kl_error err = {0};
    unsigned threads = kl_pool_threads(w->pool);
    kl_parallel par = {par_run, w, threads ? 2 * (threads + 1) : 1};
    for (unsigned i = 0; i < w->task->nargs; i++) {
        const kl_arg *a = &w->task->args[i];
        if (a->dtype == KL_DTYPE_NONE || a->role == KL_ROLE_IN) continue;
        kl_compare_result r;
        unsigned char poison[8];
        memset(poison, kl_poison_byte(a->dtype, pass), sizeof poison);
        kl_status st;
        if (against) {
            kl_tolerance tol2 = w->tol;
            tol2.rel_l2 *= 2;
            if (tol2.max_abs >= 0) tol2.max_abs *= 2;
            st = kl_compare_par(a->dtype, s->got[i], NULL, against->got[i], s->counts[i], &tol2, NULL,
                                threads ? &par : NULL, &r, &err);
        } else {
            st = kl_compare_par(a->dtype, s->got[i], ref[i], NULL, s->counts[i], &w->tol,
                                a->role == KL_ROLE_OUT ? poison : NULL, threads ? &par : NULL, &r, &err);
        }
        if (st != KL_OK) return worker__kfail(w, KL_WORKER_EXIT_HARNESS, &err);
        if (!r.ok) *ok = false;
        json_t *o = json_pack("{s:s, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:s}", "arg", a->name, "rel_l2",
                              worker__jreal(r.rel_l2), "max_abs", worker__jreal(r.max_abs), "first_bad", (json_int_t)r.first_bad, "nan",
                              (json_int_t)r.nan, "inf", (json_int_t)r.inf, "unwritten", (json_int_t)r.unwritten,
                              "mismatched", (json_int_t)r.mismatched, "count", (json_int_t)r.count, "ok", r.ok,
                              "detail", r.detail);
        if (outputs_json && o) json_array_append_new(outputs_json, o);
        else json_decref(o);
    }
    w->tm.compare += kl_now() - t0;
    return 0;
}

double worker__shape_cost(worker__worker *w, const kl_shape *shape, const char *expr)
{
    int64_t v;
    kl_error err = {0};
    if (!expr || kl_task_eval(w->task, shape, expr, &v, &err) != KL_OK) return -1;
    return (double)v;
}

int64_t worker__shape_elements(worker__worker *w, const kl_shape *shape)
{
    int64_t total = 0, c;
    kl_error err = {0};
    for (unsigned i = 0; i < w->task->nargs; i++)
        if (w->task->args[i].dtype != KL_DTYPE_NONE && kl_task_arg_count(w->task, shape, i, &c, &err) == KL_OK) total += c;
    return total;
}

/* Shapes whose cost.flops is past reference_max_flops are checked against the baseline. */
void worker__apply_reference_limit(worker__worker *w, const worker__gate_opts *o)
{
    if (o->reference_max_flops < 0) return;
    for (unsigned k = 0; k < w->nshapes; k++) {
        double f = worker__shape_cost(w, w->shapes[k].shape, w->task->cost_flops);
        if (f > o->reference_max_flops) w->shapes[k].reference = false;
    }
}

/* The job's seeds the correct stage runs at this shape. */
unsigned worker__shape_seeds(const worker__worker *w, const worker__shape_req *req)
{
    return req->seeds && req->seeds < w->nseeds ? req->seeds : w->nseeds;
}
