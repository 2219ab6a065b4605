/* The worker's pool of host threads (worker.h): input fills and float64 references run on it
 * while the GPU is busy with something else. Plain pthreads; no CUDA here. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gate/worker.h"

typedef struct pool_task {
    void (*fn)(void *);
    void *arg;
    struct pool_task *next;
} pool_task;

struct kl_pool {
    pthread_mutex_t mu;
    pthread_cond_t work, idle;
    pool_task *head, *tail;
    unsigned busy;             /* tasks running now */
    double busy_s;             /* seconds spent in tasks, summed over the threads */
    bool stopping;
    unsigned n;
    pthread_t *threads;
    void (*hook)(void *);      /* run once by each thread before its next task (kl_pool_set_hook) */
    void *hook_arg;
    unsigned hook_gen;
};

static void *pool_main(void *arg)
{
    kl_pool *p = arg;
    unsigned hook_done = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stopping) pthread_cond_wait(&p->work, &p->mu);
        pool_task *t = p->head;
        if (!t) break; /* stopping, and nothing left */
        p->head = t->next;
        if (!p->head) p->tail = NULL;
        p->busy++;
        void (*hook)(void *) = hook_done != p->hook_gen ? p->hook : NULL;
        void *hook_arg = p->hook_arg;
        hook_done = p->hook_gen;
        pthread_mutex_unlock(&p->mu);
        if (hook) hook(hook_arg);
        double t0 = kl_now();
        t->fn(t->arg);
        double dt = kl_now() - t0;
        free(t);
        pthread_mutex_lock(&p->mu);
        p->busy_s += dt;
        p->busy--;
        if (!p->head && !p->busy) pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

kl_status kl_pool_start(unsigned nthreads, kl_pool **out, kl_error *err)
{
    *out = NULL;
    if (nthreads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        nthreads = cpus < 1 ? 1 : cpus > KL_POOL_MAX_THREADS ? KL_POOL_MAX_THREADS : (unsigned)cpus;
    }
    kl_pool *p = calloc(1, sizeof *p);
    if (!p || !(p->threads = calloc(nthreads, sizeof *p->threads))) {
        free(p);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory for a pool of %u threads", nthreads);
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->idle, NULL);
    /* a reference may keep large arrays on its stack: give each thread as much as a main
     * thread usually has (64 MiB of address space, touched only as used) */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)64 << 20);
    for (unsigned i = 0; i < nthreads; i++) {
        int rc = pthread_create(&p->threads[i], &attr, pool_main, p);
        if (rc != 0) {
            pthread_attr_destroy(&attr);
            kl_pool_stop(p);
            return kl_error_set(err, KL_ERR_CHILD, "cannot start the worker's thread %u: %s", i + 1, strerror(rc));
        }
        pthread_setname_np(p->threads[i], "kl-pool");
        p->n++;
    }
    pthread_attr_destroy(&attr);
    *out = p;
    return KL_OK;
}

unsigned kl_pool_threads(const kl_pool *p) { return p ? p->n : 0; }

void kl_pool_set_hook(kl_pool *p, void (*fn)(void *), void *arg)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->hook = fn;
    p->hook_arg = arg;
    p->hook_gen++;
    pthread_mutex_unlock(&p->mu);
}

double kl_pool_busy_seconds(kl_pool *p)
{
    if (!p) return 0;
    pthread_mutex_lock(&p->mu);
    double s = p->busy_s;
    pthread_mutex_unlock(&p->mu);
    return s;
}

kl_status kl_pool_submit(kl_pool *p, void (*fn)(void *), void *arg, kl_error *err)
{
    pool_task *t = malloc(sizeof *t);
    if (!t) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    t->fn = fn;
    t->arg = arg;
    t->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->tail) p->tail->next = t;
    else p->head = t;
    p->tail = t;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    return KL_OK;
}

void kl_pool_wait_idle(kl_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    while (p->head || p->busy) pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void kl_pool_stop(kl_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->n; i++) pthread_join(p->threads[i], NULL);
    while (p->head) { /* only when no thread could start */
        pool_task *t = p->head;
        p->head = t->next;
        t->fn(t->arg);
        free(t);
    }
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->idle);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}

/* ---- fills in chunks ------------------------------------------------------------------------ */

typedef struct fill_job {
    pthread_mutex_t mu;
    unsigned left;
    kl_status st;
    kl_error err;
    void (*done)(void *ctx, kl_status st, const kl_error *err);
    void *ctx;
    struct fill_chunk *chunks;
} fill_job;

typedef struct fill_chunk {
    fill_job *job;
    const kl_task *task;
    const kl_shape *shape;
    unsigned arg;
    uint64_t seed;
    void *buf;                 /* where element `first` goes */
    int64_t first, count;
} fill_chunk;

static void fill_chunk_run(void *arg)
{
    fill_chunk *c = arg;
    kl_error e = {0};
    kl_status st = kl_task_fill_range(c->task, c->shape, c->arg, c->seed, c->buf, c->first, c->count, &e);
    fill_job *j = c->job;
    pthread_mutex_lock(&j->mu);
    if (st != KL_OK && j->st == KL_OK) {
        j->st = st;
        j->err = e;
    }
    bool last = --j->left == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last) return;
    /* the last chunk: nothing else touches the job now */
    j->done(j->ctx, j->st, &j->err);
    pthread_mutex_destroy(&j->mu);
    free(j->chunks);
    free(j);
}

kl_status kl_fill_submit(kl_pool *p, const kl_task *task, const kl_shape *shape, unsigned arg, uint64_t seed, void *buf,
                         int64_t count, void (*done)(void *ctx, kl_status st, const kl_error *err), void *ctx,
                         kl_error *err)
{
    int64_t want;
    kl_status st = kl_task_arg_count(task, shape, arg, &want, err);
    if (st != KL_OK) return st;
    if (count != want)
        return kl_error_set(err, KL_ERR_INVALID, "%s: the buffer holds %lld elements, the tensor has %lld at %s",
                            task->args[arg].name, (long long)count, (long long)want, shape->label);
    size_t es = kl_dtype_size(task->args[arg].dtype);
    unsigned nchunks = count > 0 ? (unsigned)((count + KL_FILL_CHUNK - 1) / KL_FILL_CHUNK) : 1;
    fill_job *job = calloc(1, sizeof *job);
    fill_chunk *chunks = calloc(nchunks, sizeof *chunks);
    if (!job || !chunks) {
        free(job);
        free(chunks);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&job->mu, NULL);
    job->st = KL_OK;
    job->left = nchunks;
    job->done = done;
    job->ctx = ctx;
    job->chunks = chunks;
    for (unsigned i = 0; i < nchunks; i++) {
        fill_chunk *c = &chunks[i];
        c->job = job;
        c->task = task;
        c->shape = shape;
        c->arg = arg;
        c->seed = seed;
        c->first = (int64_t)i * KL_FILL_CHUNK;
        c->count = count - c->first < KL_FILL_CHUNK ? count - c->first : KL_FILL_CHUNK;
        c->buf = (char *)buf + (size_t)c->first * es;
    }
    /* queue them all first: the last chunk to finish frees the job */
    for (unsigned i = 0; i < nchunks; i++)
        if (!p || kl_pool_submit(p, fill_chunk_run, &chunks[i], NULL) != KL_OK) fill_chunk_run(&chunks[i]);
    return KL_OK;
}

typedef struct fill_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    kl_status st;
    kl_error err;
} fill_wait;

static void fill_waited(void *ctx, kl_status st, const kl_error *err)
{
    fill_wait *fw = ctx;
    pthread_mutex_lock(&fw->mu);
    fw->st = st;
    if (st != KL_OK) fw->err = *err;
    fw->done = true;
    pthread_cond_signal(&fw->cv);
    pthread_mutex_unlock(&fw->mu);
}

kl_status kl_fill_parallel(kl_pool *p, const kl_task *task, const kl_shape *shape, unsigned arg, uint64_t seed, void *buf,
                           int64_t count, kl_error *err)
{
    fill_wait fw;
    memset(&fw, 0, sizeof fw);
    pthread_mutex_init(&fw.mu, NULL);
    pthread_cond_init(&fw.cv, NULL);
    kl_status st = kl_fill_submit(p, task, shape, arg, seed, buf, count, fill_waited, &fw, err);
    if (st == KL_OK) {
        pthread_mutex_lock(&fw.mu);
        while (!fw.done) pthread_cond_wait(&fw.cv, &fw.mu);
        pthread_mutex_unlock(&fw.mu);
        st = fw.st;
        if (st != KL_OK && err) *err = fw.err;
    }
    pthread_cond_destroy(&fw.cv);
    pthread_mutex_destroy(&fw.mu);
    return st;
}
