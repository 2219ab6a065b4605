/*
 * Where the gate's worker processes run (executor.h, docs/cluster.md): here, one at a time
 * (no executor); on the GPUs of this machine, one worker process at a time on each (local, the
 * slots of --gpus); or as tasks of Slurm job arrays (slurm.c). Also the stand-in judge's and the
 * executor's side of opening a gate, and the parallel sections the searches and bench use.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gate/executor.h"
#include "gate/gate_int.h"
#include "gate/worker.h" /* the worker's exit codes */

#define MAX_STRIKES 2        /* a GPU whose failures another GPU does not repeat, this often in a row: dropped */
#define MAX_THREADS 256
#define STAND_IN_MARKER_KIND "stand-in"

typedef struct slot {
    unsigned index;          /* as --gpus listed it (nvidia-smi's index) */
    char uuid[96];
    char model[128];
    char visible[128];       /* CUDA_VISIBLE_DEVICES for its workers */
    bool busy, dropped;
    unsigned strikes, runs;
} slot;

struct kl_executor {
    kl_executor_kind kind;
    bool stand_in;
    volatile sig_atomic_t *interrupt;
    pthread_mutex_t big;     /* held by a parallel section's threads except while a child runs */
    pthread_mutex_t mu;      /* the slots and the notes */
    pthread_cond_t cv;
    slot *slots;
    unsigned nslots;
    kl_strbuf notes;
    kl_slurm *slurm;
    char host[256];
};

static _Thread_local bool tls_holds_big;
static _Thread_local json_t *tls_placement;

static bool interrupted(const kl_executor *e) { return e->interrupt && *e->interrupt; }

void kl_executor_note(kl_executor *e, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&e->mu);
    kl_strbuf_addf(&e->notes, "%s\n", line);
    pthread_mutex_unlock(&e->mu);
    kl_log(KL_LOG_WARN, "%s", line);
}

char *kl_executor_report(kl_executor *e)
{
    if (!e) return NULL;
    pthread_mutex_lock(&e->mu);
    char *s = e->notes.len ? kl_strdup(kl_strbuf_str(&e->notes)) : NULL;
    pthread_mutex_unlock(&e->mu);
    return s;
}

void kl_executor_unlock_for_wait(kl_executor *e, bool *held)
{
    *held = tls_holds_big;
    if (!*held) return;
    tls_holds_big = false;
    pthread_mutex_unlock(&e->big);
}

void kl_executor_relock(kl_executor *e, bool held)
{
    if (!held) return;
    pthread_mutex_lock(&e->big);
    tls_holds_big = true;
}

void kl_executor_set_placement(json_t *where)
{
    json_decref(tls_placement);
    tls_placement = where;
}

json_t *kl_executor_placement(void) { return tls_placement ? json_deep_copy(tls_placement) : NULL; }

/* ---- the GPUs of this machine ------------------------------------------------------------------ */

/* Is `id` (an index or a UUID) in the comma-separated list? */
static bool listed(const char *list, unsigned index, const char *uuid)
{
    char buf[1024];
    kl_snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ') t++;
        char *end;
        unsigned long v = strtoul(t, &end, 10);
        if (end != t && !*end && v == index) return true;
        if (*t && strstr(uuid, t) == uuid) return true; /* a UUID, or a prefix of one */
    }
    return false;
}

/* The machine's GPUs as nvidia-smi lists them (index, uuid, model). */
static kl_status list_gpus(slot **out, unsigned *n, kl_error *err)
{
    *out = NULL;
    *n = 0;
    kl_child c;
    kl_child_init(&c);
    const char *argv[] = {"nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader", NULL};
    c.argv = argv;
    c.timeout_s = 60;
    c.out_max = 1 << 20;
    kl_status st = kl_child_run(&c, err);
    c.argv = NULL;
    if (st != KL_OK || c.exit_code != 0) {
        char how[128];
        kl_child_describe(&c, how, sizeof how);
        if (st == KL_OK)
            st = kl_error_set(err, KL_ERR_NO_GPU, "--gpus: nvidia-smi could not list the GPUs (%s): %s", how,
                              kl_strbuf_str(&c.err));
        else
            kl_error_prefix(err, "--gpus: nvidia-smi, to list the GPUs");
        kl_child_release(&c);
        return st == KL_ERR_CHILD ? KL_ERR_NO_GPU : st;
    }
    const char *p = kl_strbuf_str(&c.out);
    slot *s = NULL;
    unsigned cnt = 0;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[512];
        kl_snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1), p);
        unsigned idx;
        char uuid[96], model[128];
        if (sscanf(line, "%u , %95[^,] , %127[^\n]", &idx, uuid, model) == 3) {
            slot *ns = realloc(s, (cnt + 1) * sizeof *s);
            if (!ns) {
                free(s);
                kl_child_release(&c);
                return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            }
            s = ns;
            memset(&s[cnt], 0, sizeof s[cnt]);
            s[cnt].index = idx;
            kl_snprintf(s[cnt].uuid, sizeof s[cnt].uuid, "%s", uuid);
            kl_snprintf(s[cnt].model, sizeof s[cnt].model, "%s", model);
            kl_snprintf(s[cnt].visible, sizeof s[cnt].visible, "%s", uuid);
            cnt++;
        }
        p += len;
        if (*p == '\n') p++;
    }
    kl_child_release(&c);
    *out = s;
    *n = cnt;
    return KL_OK;
}

/* The slots of --gpus: "all" or a list of indices (or UUIDs). */
static kl_status local_slots(kl_executor *e, const char *gpus, kl_error *err)
{
    if (!gpus || !*gpus) gpus = "";
    if (e->stand_in) {
        /* the stand-in's slots stand for GPUs: "all" is one per CPU, a list names them */
        unsigned n = 0;
        unsigned idx[256];
        if (!strcmp(gpus, "all") || !*gpus) {
            long cpus = sysconf(_SC_NPROCESSORS_ONLN);
            n = !*gpus ? 1 : cpus < 1 ? 1 : cpus > 256 ? 256 : (unsigned)cpus;
            for (unsigned i = 0; i < n; i++) idx[i] = i;
        } else {
            char buf[1024];
            kl_snprintf(buf, sizeof buf, "%s", gpus);
            char *save = NULL;
            for (char *t = strtok_r(buf, ",", &save); t && n < 256; t = strtok_r(NULL, ",", &save)) {
                char *end;
                unsigned long v = strtoul(t, &end, 10);
                if (end == t || *end || v > 1023)
                    return kl_error_set(err, KL_ERR_INVALID, "--gpus %s: '%s' is not a GPU index", gpus, t);
                idx[n++] = (unsigned)v;
            }
        }
        e->slots = calloc(n ? n : 1, sizeof *e->slots);
        if (!e->slots) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        for (unsigned i = 0; i < n; i++) {
            e->slots[i].index = idx[i];
            kl_snprintf(e->slots[i].uuid, sizeof e->slots[i].uuid, "stand-in-%u", idx[i]);
            kl_snprintf(e->slots[i].model, sizeof e->slots[i].model, "%s", KL_STAND_IN_DEVICE);
            kl_snprintf(e->slots[i].visible, sizeof e->slots[i].visible, "%u", idx[i]);
        }
        e->nslots = n;
        return KL_OK;
    }
    if (!*gpus) { /* one slot: the default device, as without an executor */
        e->slots = calloc(1, sizeof *e->slots);
        if (!e->slots) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        kl_snprintf(e->slots[0].model, sizeof e->slots[0].model, "?");
        e->nslots = 1;
        return KL_OK;
    }
    slot *all = NULL;
    unsigned nall = 0;
    kl_status st = list_gpus(&all, &nall, err);
    if (st != KL_OK) return st;
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    e->slots = calloc(nall + 256, sizeof *e->slots);
    if (!e->slots) {
        free(all);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    if (!strcmp(gpus, "all")) {
        /* every GPU this process may use: CUDA_VISIBLE_DEVICES narrows it, as it would CUDA */
        for (unsigned i = 0; i < nall; i++)
            if (!visible || !*visible || listed(visible, all[i].index, all[i].uuid)) e->slots[e->nslots++] = all[i];
    } else {
        /* in the order given; a GPU named twice gets two workers (they share it: for tests, their
         * timings disturb each other) */
        char buf[1024];
        kl_snprintf(buf, sizeof buf, "%s", gpus);
        char *save = NULL;
        for (char *t = strtok_r(buf, ",", &save); t && e->nslots < nall + 256; t = strtok_r(NULL, ",", &save)) {
            int found = -1;
            for (unsigned i = 0; i < nall && found < 0; i++)
                if (listed(t, all[i].index, all[i].uuid)) found = (int)i;
            if (found < 0) {
                free(all);
                return kl_error_set(err, KL_ERR_NO_GPU, "--gpus %s: there is no GPU '%s' on this machine (nvidia-smi lists %u)",
                                    gpus, t, nall);
            }
            e->slots[e->nslots++] = all[found];
        }
    }
    free(all);
    if (!e->nslots)
        return kl_error_set(err, KL_ERR_NO_GPU, "--gpus %s: no GPU this process may use (CUDA_VISIBLE_DEVICES=%s)", gpus,
                            visible ? visible : "");
    /* one model: a verdict's key names the device model, so a pool of two models would file one's
     * timings under the other's name */
    for (unsigned i = 1; i < e->nslots; i++)
        if (strcmp(e->slots[i].model, e->slots[0].model))
            return kl_error_set(err, KL_ERR_INVALID,
                                "--gpus %s: GPU %u is an %s and GPU %u an %s; a pool holds GPUs of one model (verdicts "
                                "are keyed by the model): choose them with --gpus",
                                gpus, e->slots[0].index, e->slots[0].model, e->slots[i].index, e->slots[i].model);
    return KL_OK;
}

kl_status kl_executor_open(const kl_executor_options *opt, bool stand_in, volatile sig_atomic_t *interrupt,
                           kl_executor **out, kl_error *err)
{
    *out = NULL;
    kl_executor *e = calloc(1, sizeof *e);
    if (!e) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    e->kind = opt->kind;
    e->stand_in = stand_in;
    e->interrupt = interrupt;
    pthread_mutex_init(&e->big, NULL);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    kl_strbuf_init(&e->notes, 1 << 20);
    if (gethostname(e->host, sizeof e->host - 1) != 0) kl_snprintf(e->host, sizeof e->host, "?");
    kl_status st;
    if (opt->kind == KL_EXECUTOR_SLURM) {
        if (opt->gpus && *opt->gpus) {
            kl_executor_close(e);
            return kl_error_set(err, KL_ERR_INVALID,
                                "--gpus chooses GPUs of this machine; with --executor slurm the cluster chooses them "
                                "(--slurm-gres)");
        }
        st = kl_slurm_open(e, opt, stand_in, interrupt, &e->slurm, err);
    } else {
        st = local_slots(e, opt->gpus, err);
    }
    if (st != KL_OK) {
        kl_executor_close(e);
        return st;
    }
    *out = e;
    return KL_OK;
}

void kl_executor_close(kl_executor *e)
{
    if (!e) return;
    kl_slurm_close(e->slurm);
    free(e->slots);
    kl_strbuf_release(&e->notes);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->big);
    free(e);
    kl_executor_set_placement(NULL);
}

unsigned kl_executor_width(const kl_executor *e)
{
    if (!e) return 1;
    if (e->kind == KL_EXECUTOR_SLURM) return MAX_THREADS;
    unsigned live = 0;
    for (unsigned i = 0; i < e->nslots; i++) live += !e->slots[i].dropped;
    return live ? live : 1;
}

bool kl_executor_remote(const kl_executor *e) { return e && e->kind == KL_EXECUTOR_SLURM; }

/* ---- running a child on a GPU of this machine -------------------------------------------------- */

/* The child's environment: its own entries and CUDA_VISIBLE_DEVICES for the slot. */
static const char **slot_env(const kl_child *c, const slot *s, char *buf, size_t size)
{
    unsigned n = 0;
    for (const char *const *p = c->env; p && *p; p++) n++;
    const char **env = calloc(n + 2, sizeof *env);
    if (!env) return NULL;
    unsigned k = 0;
    for (const char *const *p = c->env; p && *p; p++)
        if (strncmp(*p, "CUDA_VISIBLE_DEVICES=", 21)) env[k++] = *p;
    if (s->visible[0]) {
        kl_snprintf(buf, size, "CUDA_VISIBLE_DEVICES=%s", s->visible);
        env[k++] = buf;
    }
    env[k] = NULL;
    return env;
}

/* An end that is not clearly the candidate's: the process was killed or timed out (a GPU can
 * hang), or the worker found no GPU or failed in its harness. */
static bool doubtful(const kl_child *c)
{
    return c->timed_out || c->term_signal || c->exit_code == KL_WORKER_EXIT_NO_GPU ||
           c->exit_code == KL_WORKER_EXIT_HARNESS;
}

static unsigned live_slots(const kl_executor *e, int except)
{
    unsigned n = 0;
    for (unsigned i = 0; i < e->nslots; i++) n += !e->slots[i].dropped && (int)i != except;
    return n;
}

/* Take a free slot (not `avoid` when another lives); -1 with st set when none can be had. */
static int take_slot(kl_executor *e, int avoid, kl_status *st, kl_error *err)
{
    pthread_mutex_lock(&e->mu);
    int got = -1;
    for (;;) {
        if (interrupted(e)) {
            *st = kl_error_set(err, KL_ERR_INTERRUPTED, "interrupted");
            break;
        }
        if (!live_slots(e, avoid)) {
            *st = kl_error_set(err, KL_ERR_CHILD, "no GPU left in the pool: %s",
                               e->notes.len ? kl_strbuf_str(&e->notes) : "every one was dropped");
            break;
        }
        for (unsigned i = 0; i < e->nslots && got < 0; i++)
            if (!e->slots[i].dropped && !e->slots[i].busy && (int)i != avoid) got = (int)i;
        if (got >= 0) {
            e->slots[got].busy = true;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
    return got;
}

static void give_slot(kl_executor *e, int s, bool good)
{
    pthread_mutex_lock(&e->mu);
    e->slots[s].busy = false;
    e->slots[s].runs++;
    if (good) e->slots[s].strikes = 0;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static json_t *slot_json(const kl_executor *e, const slot *s, unsigned attempts, const char *first_end)
{
    json_t *o = json_pack("{s:s, s:s, s:i, s:{s:i, s:s, s:s}, s:i}", "executor", "local", "host", e->host, "slot",
                          (int)(s - e->slots), "gpu", "index", (int)s->index, "uuid", s->uuid[0] ? s->uuid : "default",
                          "model", s->model, "attempts", (int)attempts);
    if (o && first_end) json_object_set_new(o, "first_attempt", json_string(first_end));
    return o;
}

static kl_status local_run(kl_executor *e, kl_child *c, kl_error *err)
{
    bool held;
    kl_executor_unlock_for_wait(e, &held);
    kl_status st = KL_OK;
    int avoid = -1;
    char first_end[256] = "";
    for (unsigned attempt = 0; attempt < 2; attempt++) {
        int s = take_slot(e, avoid, &st, err);
        if (s < 0) break;
        char envbuf[160];
        const char **env = slot_env(c, &e->slots[s], envbuf, sizeof envbuf);
        if (!env) {
            give_slot(e, s, false);
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            break;
        }
        const char *const *own_env = c->env;
        kl_child_release(c); /* a retry starts with empty outputs */
        c->env = env;
        st = kl_child_run(c, err);
        c->env = own_env;
        free(env);
        bool bad = st == KL_OK && doubtful(c);
        give_slot(e, s, st == KL_OK && !bad);
        if (st != KL_OK) break;
        if (attempt == 0) {
            kl_executor_set_placement(slot_json(e, &e->slots[s], 1, NULL));
            pthread_mutex_lock(&e->mu);
            bool elsewhere = live_slots(e, s) > 0;
            pthread_mutex_unlock(&e->mu);
            if (!bad || !elsewhere) break;
            char how[128];
            kl_child_describe(c, how, sizeof how);
            kl_snprintf(first_end, sizeof first_end, "GPU %u: %s", e->slots[s].index, how);
            avoid = s; /* once more, on another GPU */
            continue;
        }
        /* the retry: a GPU whose failure the other GPU does not repeat is at fault */
        slot *was = &e->slots[avoid];
        kl_executor_set_placement(slot_json(e, &e->slots[s], 2, first_end));
        if (!bad) {
            pthread_mutex_lock(&e->mu);
            bool drop = ++was->strikes >= MAX_STRIKES && !was->dropped;
            if (drop) was->dropped = true;
            pthread_mutex_unlock(&e->mu);
            if (drop)
                kl_executor_note(e,
                                 "GPU %u (%s, %s) dropped from the pool: %u judgements in a row failed there (last: %s) "
                                 "and passed on another GPU",
                                 was->index, was->uuid, was->model, MAX_STRIKES, first_end);
        }
    }
    kl_executor_relock(e, held);
    return st;
}

kl_status kl_executor_run(kl_executor *e, kl_child *c, kl_error *err)
{
    if (interrupted(e)) return kl_error_set(err, KL_ERR_INTERRUPTED, "interrupted");
    if (e->kind == KL_EXECUTOR_SLURM) return kl_slurm_run(e->slurm, c, err);
    return local_run(e, c, err);
}

kl_status kl_gate_run_child(kl_gate *gate, kl_child *c, kl_error *err)
{
    if (!gate->exec) return kl_child_run(c, err);
    return kl_executor_run(gate->exec, c, err);
}

/* ---- parallel sections --------------------------------------------------------------------------- */

typedef struct section {
    kl_executor *e;
    unsigned n, next;
    kl_gate_task_fn fn;
    void *arg;
    kl_status *sts;
    kl_error *errs;
} section;

static void *section_main(void *p)
{
    section *s = p;
    kl_executor *e = s->e;
    pthread_mutex_lock(&e->big);
    tls_holds_big = true;
    for (;;) {
        unsigned i = s->next++; /* under the big lock */
        if (i >= s->n) break;
        kl_error *ei = &s->errs[i];
        kl_error_clear(ei);
        s->sts[i] = s->fn(s->arg, i, ei);
    }
    tls_holds_big = false;
    pthread_mutex_unlock(&e->big);
    if (e->slurm) kl_slurm_section(e->slurm, -1);
    kl_executor_set_placement(NULL);
    return NULL;
}

kl_status kl_executor_parallel(kl_executor *e, unsigned n, kl_gate_task_fn fn, void *arg, kl_status *sts,
                               kl_error *errs, kl_error *err)
{
    kl_status st = KL_OK;
    kl_error *own = NULL;
    if (!errs) {
        own = calloc(n ? n : 1, sizeof *own);
        if (!own) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        errs = own;
    }
    unsigned width = kl_executor_width(e);
    unsigned nthreads = !e || width <= 1 || n <= 1 ? 1 : n < width * 2 ? n : width * 2;
    if (e && e->kind == KL_EXECUTOR_SLURM) nthreads = n < MAX_THREADS ? n : MAX_THREADS;
    if (nthreads > MAX_THREADS) nthreads = MAX_THREADS;
    if (nthreads <= 1) {
        for (unsigned i = 0; i < n; i++) {
            kl_error_clear(&errs[i]);
            sts[i] = fn(arg, i, &errs[i]);
        }
    } else {
        section s = {e, n, 0, fn, arg, sts, errs};
        pthread_t *th = calloc(nthreads, sizeof *th);
        if (!th) {
            free(own);
            return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        }
        bool held;
        kl_executor_unlock_for_wait(e, &held); /* a section inside a section: its calls take the lock */
        if (e->slurm) kl_slurm_section(e->slurm, (int)nthreads - 1); /* this thread waits; they work */
        unsigned started = 0;
        for (; started < nthreads; started++)
            if (pthread_create(&th[started], NULL, section_main, &s) != 0) break;
        if (e->slurm && started < nthreads) kl_slurm_section(e->slurm, -(int)(nthreads - started));
        if (!started) { /* no thread at all: do the work here */
            kl_executor_relock(e, held);
            if (e->slurm) kl_slurm_section(e->slurm, 1);
            held = false;
            for (unsigned i = 0; i < n; i++) sts[i] = fn(arg, i, &errs[i]);
        }
        for (unsigned i = 0; i < started; i++) pthread_join(th[i], NULL);
        free(th);
        if (started) {
            if (e->slurm) kl_slurm_section(e->slurm, 1);
            kl_executor_relock(e, held);
        }
    }
    for (unsigned i = 0; i < n; i++)
        if (sts[i] != KL_OK) {
            st = sts[i];
            if (err) *err = errs[i];
            break;
        }
    free(own);
    return st;
}

/* ---- the gate's side ----------------------------------------------------------------------------- */

kl_status kl_gate_open_executor(kl_gate *g, const kl_gate_options *opt, kl_error *err)
{
    kl_status st = KL_OK;
    if (opt->stand_in) {
        if (opt->mode != KL_GATE_LIVE)
            return kl_error_set(err, KL_ERR_INVALID,
                                "the stand-in judge measures nothing: it can neither replay recorded verdicts nor "
                                "record its own (use --measure live, the default)");
        free(g->gpu_key);
        g->gpu_key = kl_strdup(KL_STAND_IN_DEVICE);
        if (!g->gpu_key) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        /* mark the store: a measuring gate never opens it, so nothing judged here passes for a
         * measurement (a walk's or a run's key names no device) */
        if (g->store) {
            char *json = NULL;
            st = kl_store_get(g->store, STAND_IN_MARKER_KIND, "store", &json, err);
            free(json);
            if (st == KL_ERR_NOT_FOUND) {
                kl_error_clear(err);
                char stamp[32], text[256];
                kl_utc_stamp(stamp, sizeof stamp);
                kl_snprintf(text, sizeof text,
                            "{\"stand_in\": true, \"since\": \"%s\", \"note\": \"judged by the stand-in judge: no "
                            "verdict here is a measurement\"}",
                            stamp);
                st = kl_store_put(g->store, STAND_IN_MARKER_KIND, "store", text, err);
            }
            if (st != KL_OK) return st;
        }
    } else if (g->store) {
        char *json = NULL;
        st = kl_store_get(g->store, STAND_IN_MARKER_KIND, "store", &json, err);
        free(json);
        if (st == KL_OK)
            return kl_error_set(err, KL_ERR_INVALID,
                                "this store holds the stand-in judge's verdicts (a store used with --judge stand-in): "
                                "they are not measurements; use another --db for measured work");
        if (st != KL_ERR_NOT_FOUND) return st;
        kl_error_clear(err);
        st = KL_OK;
    }
    if (opt->executor) st = kl_executor_open(opt->executor, opt->stand_in, opt->interrupt, &g->exec, err);
    return st;
}

unsigned kl_gate_workers(const kl_gate *gate) { return gate && gate->exec ? kl_executor_width(gate->exec) : 1; }

kl_status kl_gate_parallel(kl_gate *gate, unsigned n, kl_gate_task_fn fn, void *arg, kl_status *sts, kl_error *errs,
                           kl_error *err)
{
    if (!gate || !gate->exec) {
        kl_status st = KL_OK;
        for (unsigned i = 0; i < n; i++) {
            kl_error tmp = {0};
            kl_error *ei = errs ? &errs[i] : &tmp;
            kl_error_clear(ei);
            sts[i] = fn(arg, i, ei);
            if (sts[i] != KL_OK && st == KL_OK) {
                st = sts[i];
                if (err) *err = *ei;
            }
        }
        return st;
    }
    return kl_executor_parallel(gate->exec, n, fn, arg, sts, errs, err);
}

char *kl_gate_executor_report(kl_gate *gate) { return gate ? kl_executor_report(gate->exec) : NULL; }
