/*
 * The Slurm executor (docs/cluster.md): worker children run as tasks of Slurm job arrays on
 * the cluster's GPU nodes. Each child is written to the spool — a folder every node sees — as
 * spool/RUN/bNNNN/tK/{spec.json, stdin}; the array's script runs `klineage-worker --spool-task
 * DIR` on the node, which runs the child and writes DIR/stdout, DIR/stderr and, last, DIR/result.json.
 * This process alone reads the results and writes its store (no SQLite file is ever shared).
 *
 * A batch is one array: children are queued until every call of the running parallel section
 * waits on Slurm, then submitted together. sbatch --requeue lets Slurm requeue tasks of a failed
 * node; a task that leaves the queue without a result is resubmitted (kl_executor_options.retries
 * times). An interrupt cancels (scancel) every array still outstanding, as does closing.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gate/executor.h"
#include "gate/gate_int.h"

#define GONE_GRACE_S 3.0     /* a task gone from the queue without a result: its result file may lag (NFS) */
#define SQUEUE_EVERY_S 2.0

typedef struct task {
    kl_child *c;
    char dir[1024];
    char job[64];            /* "ARRAYID_INDEX" once submitted */
    char array[32];
    unsigned resubmits;
    double gone_since;       /* when squeue first did not list it (0: listed, or not looked) */
    bool done;
    kl_status st;
    kl_error err;
    json_t *placement;
} task;

struct kl_slurm {
    kl_executor *e;
    char *spool, *run_dir, *worker;
    char *partition, *account, *time_limit, *gres, *extra;
    bool stand_in;
    volatile sig_atomic_t *interrupt;
    double poll_s;
    unsigned retries;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int active;              /* threads that may still queue a child (the caller's, outside sections: 1) */
    unsigned waiting;        /* threads blocked in kl_slurm_run */
    task **queue;            /* not yet submitted */
    unsigned nqueue, capqueue;
    task **live;             /* submitted, no result yet */
    unsigned nlive, caplive;
    unsigned batches;
    bool polling;
    double last_squeue;
    char *refused;           /* the cluster refused an array: every later child fails with this */
    kl_strbuf arrays;        /* job ids submitted, one per line (scancel at the end) */
};

static bool interrupted(const kl_slurm *s) { return s->interrupt && *s->interrupt; }

/* A program in PATH, new string, or NULL. */
static char *in_path(const char *prog)
{
    if (strchr(prog, '/')) return access(prog, X_OK) == 0 ? kl_strdup(prog) : NULL;
    const char *path = getenv("PATH");
    char buf[4096];
    kl_snprintf(buf, sizeof buf, "%s", path ? path : "/usr/bin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char *p = kl_path_join(d, prog);
        if (p && access(p, X_OK) == 0) return p;
        free(p);
    }
    return NULL;
}

static char *worker_path(void)
{
    const char *e = getenv("KLINEAGE_WORKER");
    if (e && *e) return kl_strdup(e);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return NULL;
    self[n] = '\0';
    char *dir = kl_path_dirname(self);
    char *w = dir ? kl_path_join(dir, "klineage-worker") : NULL;
    free(dir);
    return w;
}

static char *dup_opt(const char *s) { return s && *s ? kl_strdup(s) : NULL; }

kl_status kl_slurm_open(kl_executor *e, const kl_executor_options *opt, bool stand_in,
                        volatile sig_atomic_t *interrupt, kl_slurm **out, kl_error *err)
{
    *out = NULL;
    static const char *const progs[] = {"sbatch", "squeue", "scancel"};
    for (unsigned i = 0; i < 3; i++) {
        char *p = in_path(progs[i]);
        free(p);
        if (!p)
            return kl_error_set(err, KL_ERR_NOT_FOUND,
                                "--executor slurm: %s is not on PATH: this machine needs Slurm's client commands "
                                "(sbatch, squeue, scancel) and a slurm.conf naming the cluster",
                                progs[i]);
    }
    kl_slurm *s = calloc(1, sizeof *s);
    if (!s) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    s->e = e;
    s->stand_in = stand_in;
    s->interrupt = interrupt;
    s->poll_s = opt->poll_s > 0 ? opt->poll_s : 0.5;
    s->retries = opt->retries ? opt->retries : 2;
    s->active = 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    kl_strbuf_init(&s->arrays, 0);
    s->partition = dup_opt(opt->partition);
    s->account = dup_opt(opt->account);
    s->time_limit = dup_opt(opt->time_limit);
    s->gres = dup_opt(opt->gres);
    s->extra = dup_opt(opt->sbatch_args);
    kl_status st = KL_OK;
    const char *spool = opt->spool && *opt->spool ? opt->spool : getenv("KLINEAGE_SPOOL");
    if (!spool || !*spool) spool = "klineage-spool";
    KL_TRY(kl_mkdirs(spool, err));
    s->spool = realpath(spool, NULL);
    s->worker = worker_path();
    if (!s->spool || !s->worker) {
        st = kl_error_set(err, KL_ERR_NOT_FOUND, "--executor slurm: cannot resolve the spool %s or the worker", spool);
        goto cleanup;
    }
    if (access(s->worker, X_OK) != 0) {
        st = kl_error_set(err, KL_ERR_NOT_FOUND, "%s: the worker the nodes run is missing (set $KLINEAGE_WORKER)",
                          s->worker);
        goto cleanup;
    }
    char host[256] = "", name[512], stamp[32];
    gethostname(host, sizeof host - 1);
    kl_utc_stamp(stamp, sizeof stamp);
    for (char *p = stamp; *p; p++)
        if (*p == ':') *p = '-';
    kl_snprintf(name, sizeof name, "run-%s-%s-%ld", stamp, host, (long)getpid());
    s->run_dir = kl_path_join(s->spool, name);
    if (!s->run_dir) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    KL_TRY(kl_mkdirs(s->run_dir, err));
cleanup:
    if (st != KL_OK) {
        kl_slurm_close(s);
        return st;
    }
    *out = s;
    return KL_OK;
}

/* Run a Slurm command, capturing its output; KL_OK when it ran (see c->exit_code). */
static kl_status run_cmd(const char *const *argv, kl_child *c, kl_error *err)
{
    kl_child_init(c);
    c->argv = argv;
    c->timeout_s = 120;
    c->out_max = 4 << 20;
    kl_status st = kl_child_run(c, err);
    c->argv = NULL;
    return st;
}

/* scancel the arrays in `ids` (one per line). */
static void cancel_arrays(const char *ids)
{
    const char *argv[66];
    unsigned n = 0;
    argv[n++] = "scancel";
    char *copy = kl_strdup(ids ? ids : "");
    char *save = NULL;
    for (char *t = copy ? strtok_r(copy, "\n", &save) : NULL; t && n < 64; t = strtok_r(NULL, "\n", &save))
        argv[n++] = t;
    argv[n] = NULL;
    if (n > 1) {
        kl_child c;
        kl_error ignore;
        if (run_cmd(argv, &c, &ignore) == KL_OK) kl_child_release(&c);
    }
    free(copy);
}

void kl_slurm_close(kl_slurm *s)
{
    if (!s) return;
    /* whatever is still outstanding: cancelled (an interrupted run, an error) */
    pthread_mutex_lock(&s->mu);
    kl_strbuf ids = KL_STRBUF_INIT;
    for (unsigned i = 0; i < s->nlive; i++) kl_strbuf_addf(&ids, "%s\n", s->live[i]->job);
    pthread_mutex_unlock(&s->mu);
    if (ids.len) cancel_arrays(kl_strbuf_str(&ids));
    kl_strbuf_release(&ids);
    free(s->queue);
    free(s->live);
    free(s->spool);
    free(s->run_dir);
    free(s->worker);
    free(s->partition);
    free(s->account);
    free(s->time_limit);
    free(s->gres);
    free(s->extra);
    free(s->refused);
    kl_strbuf_release(&s->arrays);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void kl_slurm_section(kl_slurm *s, int delta)
{
    pthread_mutex_lock(&s->mu);
    s->active += delta;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static bool push(task ***arr, unsigned *n, unsigned *cap, task *t)
{
    if (*n == *cap) {
        unsigned nc = *cap ? *cap * 2 : 16;
        task **na = realloc(*arr, nc * sizeof *na);
        if (!na) return false;
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*n)++] = t;
    return true;
}

static void finish(kl_slurm *s, task *t, kl_status st, const kl_error *err)
{
    t->done = true;
    t->st = st;
    if (err) t->err = *err;
    pthread_cond_broadcast(&s->cv);
}

/* ---- submission (s->mu held) ------------------------------------------------------------------- */

static kl_status write_spec(const task *t, kl_error *err)
{
    kl_status st = kl_mkdirs(t->dir, err);
    if (st != KL_OK) return st;
    const kl_child *c = t->c;
    json_t *argv = json_array(), *env = json_array();
    for (const char *const *a = c->argv; a && *a; a++) json_array_append_new(argv, json_string(*a));
    for (const char *const *a = c->env; a && *a; a++) json_array_append_new(env, json_string(*a));
    char cwd[4096];
    const char *dir = c->dir ? c->dir : getcwd(cwd, sizeof cwd);
    json_t *spec = json_pack("{s:o, s:o, s:b, s:f, s:I, s:I, s:s?}", "argv", argv, "env", env, "stdin",
                             c->stdin_data != NULL, "timeout_s", c->timeout_s, "out_max", (json_int_t)c->out_max,
                             "err_max", (json_int_t)c->err_max, "dir", dir);
    char *text = spec ? json_dumps(spec, JSON_INDENT(1)) : NULL;
    json_decref(spec);
    if (!text) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    char *p = kl_path_join(t->dir, "spec.json");
    char *in = kl_path_join(t->dir, "stdin");
    char *res = kl_path_join(t->dir, "result.json");
    if (!p || !in || !res) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    if (st == KL_OK && res) unlink(res); /* a resubmission starts clean */
    if (st == KL_OK && c->stdin_data) st = kl_file_write(in, c->stdin_data, c->stdin_len, err);
    if (st == KL_OK) st = kl_file_write(p, text, strlen(text), err);
    free(p);
    free(in);
    free(res);
    free(text);
    return st;
}

/* Submit every queued child as one job array. */
static void submit(kl_slurm *s)
{
    if (!s->nqueue) return;
    kl_error err = {0};
    kl_status st = KL_OK;
    unsigned n = s->nqueue;
    task **batch = s->queue;
    s->queue = NULL;
    s->nqueue = s->capqueue = 0;
    if (s->refused) {
        kl_error_set(&err, KL_ERR_CHILD, "%s", s->refused);
        for (unsigned i = 0; i < n; i++) finish(s, batch[i], KL_ERR_CHILD, &err);
        free(batch);
        return;
    }
    unsigned b = ++s->batches;
    char bname[32];
    kl_snprintf(bname, sizeof bname, "b%04u", b);
    char *bdir = kl_path_join(s->run_dir, bname);
    double longest = 0;
    for (unsigned i = 0; bdir && st == KL_OK && i < n; i++) {
        kl_snprintf(batch[i]->dir, sizeof batch[i]->dir, "%s/t%u", bdir, i);
        batch[i]->gone_since = 0;
        st = write_spec(batch[i], &err);
        double tl = batch[i]->c->timeout_s > 0 ? batch[i]->c->timeout_s : 600;
        if (tl > longest) longest = tl;
    }
    char *script = bdir ? kl_path_join(bdir, "job.sh") : NULL;
    if (!bdir || !script) st = kl_error_set(&err, KL_ERR_NOMEM, "out of memory");
    if (st == KL_OK) {
        kl_strbuf sh = KL_STRBUF_INIT;
        kl_strbuf_addf(&sh, "#!/bin/sh\n# klineage: one worker child per array task (docs/cluster.md)\n"
                            "exec '%s' --spool-task '%s/t'\"$SLURM_ARRAY_TASK_ID\"\n",
                       s->worker, bdir);
        st = kl_file_write(script, kl_strbuf_str(&sh), sh.len, &err);
        kl_strbuf_release(&sh);
    }
    kl_child c;
    kl_child_init(&c);
    if (st == KL_OK) {
        /* Slurm's time limit from the gate's: the longest child's limit, half again for the node's
         * start and the worker's own, and a minute */
        char tbuf[32], arr[64], outp[1200];
        if (!s->time_limit) kl_snprintf(tbuf, sizeof tbuf, "%u", (unsigned)ceil((longest * 1.5 + 60) / 60));
        kl_snprintf(arr, sizeof arr, "--array=0-%u", n - 1);
        kl_snprintf(outp, sizeof outp, "--output=%s/t%%a/slurm.out", bdir);
        const char *argv[96];
        unsigned k = 0;
        char tl[64], part[256], acct[256], gres[256];
        argv[k++] = "sbatch";
        argv[k++] = "--parsable";
        argv[k++] = "--job-name=klineage";
        argv[k++] = "--requeue";
        argv[k++] = arr;
        argv[k++] = outp;
        kl_snprintf(tl, sizeof tl, "--time=%s", s->time_limit ? s->time_limit : tbuf);
        argv[k++] = tl;
        if (s->partition) kl_snprintf(part, sizeof part, "--partition=%s", s->partition), argv[k++] = part;
        if (s->account) kl_snprintf(acct, sizeof acct, "--account=%s", s->account), argv[k++] = acct;
        if (s->gres || !s->stand_in)
            kl_snprintf(gres, sizeof gres, "--gres=%s", s->gres ? s->gres : "gpu:1"), argv[k++] = gres;
        char *extra = s->extra ? kl_strdup(s->extra) : NULL;
        char *save = NULL;
        for (char *t = extra ? strtok_r(extra, " ", &save) : NULL; t && k < 90; t = strtok_r(NULL, " ", &save))
            argv[k++] = t;
        argv[k++] = script;
        argv[k] = NULL;
        st = run_cmd(argv, &c, &err);
        free(extra);
        if (st == KL_OK && c.exit_code != 0) {
            char how[128];
            kl_child_describe(&c, how, sizeof how);
            const char *why = kl_strbuf_str(&c.err);
            size_t wl = strlen(why);
            while (wl && why[wl - 1] == '\n') wl--;
            kl_strbuf r = KL_STRBUF_INIT;
            kl_strbuf_addf(&r, "the cluster refused the job array (sbatch %s): %.*s", how, (int)wl,
                           wl ? why : "no reason given");
            free(s->refused);
            s->refused = kl_strbuf_detach(&r, NULL);
            st = kl_error_set(&err, KL_ERR_CHILD, "%s", s->refused ? s->refused : "the cluster refused the job array");
        } else if (st == KL_OK) {
            const char *o = kl_strbuf_str(&c.out);
            size_t idl = strspn(o, "0123456789");
            if (!idl) {
                st = kl_error_set(&err, KL_ERR_CHILD, "sbatch answered without a job id: %s", o);
            } else {
                char id[32];
                kl_snprintf(id, sizeof id, "%.*s", (int)(idl < 31 ? idl : 31), o);
                kl_strbuf_addf(&s->arrays, "%s\n", id);
                for (unsigned i = 0; i < n; i++) {
                    kl_snprintf(batch[i]->array, sizeof batch[i]->array, "%s", id);
                    kl_snprintf(batch[i]->job, sizeof batch[i]->job, "%s_%u", id, i);
                    if (!push(&s->live, &s->nlive, &s->caplive, batch[i])) {
                        kl_error oom;
                        kl_error_set(&oom, KL_ERR_NOMEM, "out of memory");
                        finish(s, batch[i], KL_ERR_NOMEM, &oom);
                    }
                }
            }
        }
    }
    kl_child_release(&c);
    if (st != KL_OK)
        for (unsigned i = 0; i < n; i++)
            if (!batch[i]->done && !batch[i]->job[0]) finish(s, batch[i], st, &err);
    free(batch);
    free(bdir);
    free(script);
}

/* ---- results (polling; not under s->mu) --------------------------------------------------------- */

static bool read_into(const char *dir, const char *name, size_t max, kl_strbuf *sb)
{
    char *p = kl_path_join(dir, name);
    char *text = NULL;
    size_t len = 0;
    kl_error ignore;
    bool ok = p && kl_file_read(p, 0, &text, &len, &ignore) == KL_OK;
    free(p);
    if (!ok) return false;
    kl_strbuf_init(sb, max ? max : (size_t)16 << 20);
    kl_strbuf_add(sb, text, len);
    free(text);
    return true;
}

/* The task's result when it is there: fills its child's end. */
static bool collect(task *t)
{
    char *p = kl_path_join(t->dir, "result.json");
    char *text = NULL;
    kl_error ignore;
    bool there = p && kl_file_read(p, 0, &text, NULL, &ignore) == KL_OK;
    free(p);
    if (!there) return false;
    json_t *r = json_loads(text, 0, NULL);
    free(text);
    if (!json_is_object(r)) {
        json_decref(r);
        return false; /* half-written on a file system without atomic renames: next round */
    }
    kl_child *c = t->c;
    kl_child_release(c);
    if (!read_into(t->dir, "stdout", c->out_max, &c->out)) kl_strbuf_init(&c->out, 0);
    if (!read_into(t->dir, "stderr", c->err_max, &c->err)) kl_strbuf_init(&c->err, 0);
    c->exit_code = (int)json_integer_value(json_object_get(r, "exit_code"));
    c->term_signal = (int)json_integer_value(json_object_get(r, "term_signal"));
    c->timed_out = json_is_true(json_object_get(r, "timed_out"));
    c->wall_s = json_number_value(json_object_get(r, "wall_s"));
    json_t *where = json_pack("{s:s, s:O?, s:s, s:O?, s:O?, s:i}", "executor", "slurm", "host",
                              json_object_get(r, "host"), "job", t->job, "gpu", json_object_get(r, "gpu"),
                              "restarts", json_object_get(r, "restarts"), "resubmits", (int)t->resubmits);
    json_decref(t->placement);
    t->placement = where;
    json_decref(r);
    return true;
}

/* The array tasks squeue still lists ("ID_K" lines), or NULL when squeue could not say. */
static char *queued_tasks(kl_slurm *s, task **live, unsigned n)
{
    kl_strbuf ids = KL_STRBUF_INIT;
    for (unsigned i = 0; i < n; i++)
        if (!strstr(kl_strbuf_str(&ids), live[i]->array)) kl_strbuf_addf(&ids, "%s%s", ids.len ? "," : "", live[i]->array);
    const char *argv[] = {"squeue", "-h", "-r", "-o", "%i", "-j", kl_strbuf_str(&ids), NULL};
    kl_child c;
    kl_error err;
    char *out = NULL;
    if (run_cmd(argv, &c, &err) == KL_OK) {
        if (c.exit_code == 0) out = kl_strdup(kl_strbuf_str(&c.out));
        else if (strstr(kl_strbuf_str(&c.err), "Invalid job id")) out = kl_strdup(""); /* all gone, purged */
        kl_child_release(&c);
    }
    kl_strbuf_release(&ids);
    (void)s;
    return out;
}

static bool listed_in(const char *lines, const char *job)
{
    size_t n = strlen(job);
    for (const char *p = strstr(lines, job); p; p = strstr(p + 1, job))
        if ((p == lines || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0' || p[n] == ' ')) return true;
    return false;
}

/* One look at the spool and the queue. Called with s->mu held and s->polling set; drops the lock
 * while it reads files and runs squeue. */
static void poll_round(kl_slurm *s)
{
    unsigned n = s->nlive;
    task **snap = n ? malloc(n * sizeof *snap) : NULL;
    if (n && !snap) return;
    if (n) memcpy(snap, s->live, n * sizeof *snap);
    bool look_queue = n && kl_now() - s->last_squeue >= SQUEUE_EVERY_S;
    if (look_queue) s->last_squeue = kl_now();
    pthread_mutex_unlock(&s->mu);
    bool *got = n ? calloc(n, sizeof *got) : NULL;
    for (unsigned i = 0; got && i < n; i++) got[i] = collect(snap[i]);
    char *queued = look_queue ? queued_tasks(s, snap, n) : NULL;
    pthread_mutex_lock(&s->mu);
    double now = kl_now();
    for (unsigned i = 0; got && i < n; i++) {
        task *t = snap[i];
        bool gone = false;
        if (!got[i] && queued) {
            if (listed_in(queued, t->job)) t->gone_since = 0;
            else if (!t->gone_since) t->gone_since = now;
            else if (now - t->gone_since >= GONE_GRACE_S) gone = true;
        }
        if (!got[i] && !gone) continue;
        /* off the live list */
        for (unsigned k = 0; k < s->nlive; k++)
            if (s->live[k] == t) {
                s->live[k] = s->live[--s->nlive];
                break;
            }
        if (got[i]) {
            finish(s, t, KL_OK, NULL);
        } else if (t->resubmits < s->retries) {
            t->resubmits++;
            kl_executor_note(s->e, "Slurm task %s ended without a result (a node failed, or the job was killed): "
                                   "resubmitted (%u of %u); its log: %s/slurm.out",
                             t->job, t->resubmits, s->retries, t->dir);
            t->job[0] = '\0';
            push(&s->queue, &s->nqueue, &s->capqueue, t);
        } else {
            kl_error e;
            kl_error_set(&e, KL_ERR_CHILD, "the Slurm task %s ended without a result %u times; its log: %s/slurm.out",
                         t->job, t->resubmits + 1, t->dir);
            finish(s, t, KL_ERR_CHILD, &e);
        }
    }
    free(queued);
    free(got);
    free(snap);
}

/* Interrupted: cancel everything outstanding, fail every waiting child. (s->mu held.) */
static void cancel_all(kl_slurm *s)
{
    kl_strbuf ids = KL_STRBUF_INIT;
    for (unsigned i = 0; i < s->nlive; i++)
        if (!strstr(kl_strbuf_str(&ids), s->live[i]->array)) kl_strbuf_addf(&ids, "%s\n", s->live[i]->array);
    kl_error e;
    kl_error_set(&e, KL_ERR_INTERRUPTED, "interrupted: the Slurm jobs still outstanding were cancelled");
    for (unsigned i = 0; i < s->nlive; i++) finish(s, s->live[i], KL_ERR_INTERRUPTED, &e);
    for (unsigned i = 0; i < s->nqueue; i++) finish(s, s->queue[i], KL_ERR_INTERRUPTED, &e);
    s->nlive = s->nqueue = 0;
    if (ids.len) {
        pthread_mutex_unlock(&s->mu);
        cancel_arrays(kl_strbuf_str(&ids));
        pthread_mutex_lock(&s->mu);
    }
    kl_strbuf_release(&ids);
}

kl_status kl_slurm_run(kl_slurm *s, kl_child *c, kl_error *err)
{
    bool held;
    kl_executor_unlock_for_wait(s->e, &held);
    task *t = calloc(1, sizeof *t);
    kl_status st = KL_OK;
    if (!t) {
        kl_executor_relock(s->e, held);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    t->c = c;
    pthread_mutex_lock(&s->mu);
    if (!push(&s->queue, &s->nqueue, &s->capqueue, t)) {
        pthread_mutex_unlock(&s->mu);
        free(t);
        kl_executor_relock(s->e, held);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    s->waiting++;
    while (!t->done) {
        if (interrupted(s) && !s->polling) { /* a poll round reads the tasks without the lock */
            cancel_all(s);
            break;
        }
        if (s->nqueue && (int)s->waiting >= s->active) submit(s);
        if (t->done) break;
        if (!s->polling && s->nlive) {
            s->polling = true;
            poll_round(s);
            s->polling = false;
            pthread_cond_broadcast(&s->cv);
            if (t->done) break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = (long)(s->poll_s * 1e9);
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec += ns % 1000000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    s->waiting--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    st = t->st;
    if (st != KL_OK && err) *err = t->err;
    if (t->placement) kl_executor_set_placement(json_incref(t->placement));
    json_decref(t->placement);
    free(t);
    kl_executor_relock(s->e, held);
    return st;
}

/* ---- the node side ---------------------------------------------------------------------------------- */

static json_t *node_gpu(void)
{
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (access("/dev/nvidia0", F_OK) != 0) return NULL;
    const char *argv[] = {"nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader", "-i",
                          vis && *vis ? vis : "0", NULL};
    kl_child c;
    kl_error ignore;
    json_t *g = NULL;
    if (run_cmd(argv, &c, &ignore) == KL_OK && c.exit_code == 0) {
        unsigned idx;
        char uuid[96], model[128];
        if (sscanf(kl_strbuf_str(&c.out), "%u , %95[^,] , %127[^\n]", &idx, uuid, model) == 3)
            g = json_pack("{s:i, s:s, s:s}", "index", (int)idx, "uuid", uuid, "model", model);
        kl_child_release(&c);
    }
    return g;
}

int kl_slurm_task_main(const char *dir)
{
    char *p = kl_path_join(dir, "spec.json"), *text = NULL, *in = NULL;
    kl_error err = {0};
    json_t *spec = NULL;
    const char **argv = NULL, **env = NULL;
    int rc = 1;
    kl_child c;
    kl_child_init(&c);
    if (!p || kl_file_read(p, 0, &text, NULL, &err) != KL_OK || !(spec = json_loads(text, 0, NULL))) {
        fprintf(stderr, "klineage-worker --spool-task: %s: %s\n", p ? p : dir, err.message[0] ? err.message : "not JSON");
        goto cleanup;
    }
    json_t *ja = json_object_get(spec, "argv"), *je = json_object_get(spec, "env");
    argv = calloc(json_array_size(ja) + 1, sizeof *argv);
    env = calloc(json_array_size(je) + 1, sizeof *env);
    if (!argv || !env || !json_array_size(ja)) goto cleanup;
    for (size_t i = 0; i < json_array_size(ja); i++) argv[i] = json_string_value(json_array_get(ja, i));
    for (size_t i = 0; i < json_array_size(je); i++) env[i] = json_string_value(json_array_get(je, i));
    size_t inlen = 0;
    if (json_is_true(json_object_get(spec, "stdin"))) {
        char *ip = kl_path_join(dir, "stdin");
        if (!ip || kl_file_read(ip, 0, &in, &inlen, &err) != KL_OK) {
            fprintf(stderr, "klineage-worker --spool-task: %s\n", err.message);
            free(ip);
            goto cleanup;
        }
        free(ip);
    }
    c.argv = argv;
    c.env = env;
    c.dir = json_string_value(json_object_get(spec, "dir"));
    c.stdin_data = in;
    c.stdin_len = inlen;
    c.timeout_s = json_number_value(json_object_get(spec, "timeout_s"));
    c.out_max = (size_t)json_integer_value(json_object_get(spec, "out_max"));
    c.err_max = (size_t)json_integer_value(json_object_get(spec, "err_max"));
    if (c.dir && access(c.dir, F_OK) != 0) c.dir = NULL; /* the submitting host's folder may not exist here */
    if (kl_child_run(&c, &err) != KL_OK) {
        fprintf(stderr, "klineage-worker --spool-task: %s\n", err.message);
        goto cleanup;
    }
    char *op = kl_path_join(dir, "stdout"), *ep = kl_path_join(dir, "stderr"), *rp = kl_path_join(dir, "result.json");
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    const char *restarts = getenv("SLURM_RESTART_COUNT");
    json_t *r = json_pack("{s:i, s:i, s:b, s:f, s:s, s:i}", "exit_code", c.exit_code, "term_signal", c.term_signal,
                          "timed_out", c.timed_out, "wall_s", c.wall_s, "host", host, "restarts",
                          restarts ? atoi(restarts) : 0);
    json_t *g = node_gpu();
    if (g) json_object_set_new(r, "gpu", g);
    char *rt = r ? json_dumps(r, JSON_COMPACT) : NULL;
    json_decref(r);
    if (op && ep && rp && rt && kl_file_write(op, c.out.buf ? c.out.buf : "", c.out.len, &err) == KL_OK &&
        kl_file_write(ep, c.err.buf ? c.err.buf : "", c.err.len, &err) == KL_OK &&
        kl_file_write(rp, rt, strlen(rt), &err) == KL_OK)
        rc = 0;
    else
        fprintf(stderr, "klineage-worker --spool-task: cannot write the result: %s\n", err.message);
    free(op);
    free(ep);
    free(rp);
    free(rt);
cleanup:
    c.argv = NULL;
    c.env = NULL;
    kl_child_release(&c);
    json_decref(spec);
    free(argv);
    free(env);
    free(text);
    free(in);
    free(p);
    return rc;
}
