/*
 * The stand-in judge (docs/cluster.md, "The stand-in judge"): a testing tool that gives every
 * command that judges a verdict computed from the text alone — no GPU, no nvcc — so a whole
 * session script, a walk, an optimization or an executor can be exercised on a machine without
 * a GPU. Its verdicts name the device "stand-in" (their keys never meet a measured verdict's),
 * say "stand_in": true, and carry no figure that could pass for a measurement: the times are a
 * fixed function of the syntax features of each kernel.
 *
 * Without an executor the figures are computed in this process. With one (--gpus, Slurm) the
 * candidate and baseline texts are written to the cache (the stand-in's "objects") and a worker
 * process computes them (klineage-worker, job "stand-in"), so the executors' machinery runs
 * for real: one process per judgement, per slot, restarted and retried as for the gate.
 *
 * Test markers, in a comment of the candidate (acted on only by a worker process):
 *   klineage-stand-in: wrong        fails the correct stage
 *   klineage-stand-in: crash        the worker kills itself (SIGKILL: no handler, a sanitizer's
 *                                   included, can turn it into an exit code)
 *   klineage-stand-in: hang         the worker sleeps past any time limit
 *   klineage-stand-in: sleep=S      the worker takes S seconds (at most 600)
 *   klineage-stand-in: crash-on=I   the worker dies when its slot's CUDA_VISIBLE_DEVICES is I
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gate/executor.h"
#include "gate/gate_int.h"
#include "gate/worker.h"
#include "klineage/syntax.h"

#define STAND_IN_JOB "stand-in"

/* What one syntax feature is worth to the stand-in: time is divided by the factor when the
 * feature is there (counted features: per use, up to `cap` uses). Made up, fixed, documented. */
typedef struct stand_in_factor {
    const char *feature;
    double factor;
    unsigned cap;              /* 0: a flag (true or > 0 counts once) */
} stand_in_factor;

static const stand_in_factor factors[] = {
    {"uses_shared", 1.6, 0},          {"uses_shuffle", 1.8, 0},       {"uses_vector_loads", 1.4, 0},
    {"unrolled_loops", 1.05, 4},      {"has_launch_bounds", 1.02, 0}, {"restrict_pointer_params", 1.01, 4},
    {"uses_math_intrinsics", 1.1, 0}, {"uses_mma", 3.0, 0},           {"uses_cp_async", 1.3, 0},
    {"has_grid_stride_loop", 1.1, 0}, {"uses_warp_vote", 1.1, 0},     {"uses_ldg", 1.05, 0},
};

static double feature_factor(const json_t *feat)
{
    double f = 1.0;
    for (size_t i = 0; i < sizeof factors / sizeof factors[0]; i++) {
        const json_t *v = json_object_get(feat, factors[i].feature);
        double n = json_is_true(v) ? 1 : json_is_integer(v) ? (double)json_integer_value(v) : 0;
        if (n <= 0) continue;
        if (factors[i].cap && n > factors[i].cap) n = factors[i].cap;
        f *= factors[i].cap ? pow(factors[i].factor, n) : factors[i].factor;
    }
    return f;
}

/* The bench shape's nominal time: bytes at 500 GB/s or flops at 2 TFLOP/s, whichever is
 * longer; 1 ms when the task gives no cost. */
static double nominal_ms(const kl_task *task)
{
    int64_t bytes = -1, flops = -1;
    kl_error ignore;
    if (task->cost_bytes) (void)kl_task_eval(task, &task->bench, task->cost_bytes, &bytes, &ignore);
    if (task->cost_flops) (void)kl_task_eval(task, &task->bench, task->cost_flops, &flops, &ignore);
    double ms = 0;
    if (bytes > 0) ms = (double)bytes / 500e9 * 1e3;
    if (flops > 0 && (double)flops / 2e12 * 1e3 > ms) ms = (double)flops / 2e12 * 1e3;
    return ms > 0 ? ms : 1.0;
}

/* The stand-in's time for a kernel file, or a compile failure in why. */
static bool text_time(const kl_task *task, const char *name, const char *text, double *ms, char *why, size_t size)
{
    kl_source *src = NULL;
    kl_model *m = NULL;
    kl_error e = {0};
    bool ok = false;
    if (kl_source_parse_text(name, text, strlen(text), &src, &e) != KL_OK) {
        kl_snprintf(why, size, "stand-in: %s", e.message);
        return false;
    }
    if (kl_source_partial(src)) {
        kl_span where;
        char msg[256] = "";
        kl_source_error(src, 0, &where, msg, sizeof msg);
        kl_snprintf(why, size, "stand-in: %s:%u:%u: error: %s (the text does not parse)", name, where.line,
                    where.column, msg);
        goto cleanup;
    }
    if (kl_model_build(src, &m, &e) != KL_OK) {
        kl_snprintf(why, size, "stand-in: %s", e.message);
        goto cleanup;
    }
    unsigned nf = 0, nk = 0, nl = 0;
    const kl_function *fs = kl_model_functions(m, &nf);
    (void)kl_model_launches(m, &nl);
    double sum = 0;
    for (unsigned i = 0; i < nf; i++) {
        if (fs[i].kind != KL_FUNCTION_KERNEL) continue;
        json_t *feat = kl_model_features(m, i);
        sum += 1.0 / feature_factor(feat);
        json_decref(feat);
        nk++;
    }
    if (!nk) {
        kl_snprintf(why, size, "stand-in: %s defines no __global__ kernel", name);
        goto cleanup;
    }
    /* a fixed jitter of at most ±0.5 %% from the text, so no two texts tie */
    char hex[KL_HASH_HEX];
    kl_hash_hex(text, strlen(text), hex);
    double jitter = 1.0 + ((double)(strtoul((char[]){hex[0], hex[1], hex[2], hex[3], 0}, NULL, 16) % 1001) - 500) * 1e-5;
    *ms = (nominal_ms(task) * sum / nk + 0.002 * (nl > 1 ? nl - 1 : 0)) * jitter;
    ok = true;
cleanup:
    kl_model_free(m);
    kl_source_free(src);
    return ok;
}

static bool has_marker(const char *text, const char *what)
{
    for (const char *p = text ? strstr(text, KL_STAND_IN_MARK) : NULL; p; p = strstr(p + 1, KL_STAND_IN_MARK)) {
        const char *q = p + strlen(KL_STAND_IN_MARK);
        while (*q == ' ') q++;
        if (!strncmp(q, what, strlen(what))) return true;
    }
    return false;
}

static const char *marker_value(const char *text, const char *what)
{
    for (const char *p = text ? strstr(text, KL_STAND_IN_MARK) : NULL; p; p = strstr(p + 1, KL_STAND_IN_MARK)) {
        const char *q = p + strlen(KL_STAND_IN_MARK);
        while (*q == ' ') q++;
        if (!strncmp(q, what, strlen(what)) && q[strlen(what)] == '=') return q + strlen(what) + 1;
    }
    return NULL;
}

/* The figures: {"compile": {"ok", "reason"?}, "correct": {"ok", "reason"?}, "candidate_ms",
 * "baseline_ms"?}. */
static json_t *figures(const kl_task *task, const char *cand_name, const char *cand_text, const char *base_name,
                       const char *base_text)
{
    char why[768];
    double tc = -1, tb = -1;
    json_t *r = json_object();
    bool ok = text_time(task, cand_name, cand_text, &tc, why, sizeof why);
    json_object_set_new(r, "compile", ok ? json_pack("{s:b}", "ok", 1) : json_pack("{s:b, s:s}", "ok", 0, "reason", why));
    if (!ok) return r;
    if (has_marker(cand_text, "wrong"))
        json_object_set_new(r, "correct", json_pack("{s:b, s:s}", "ok", 0, "reason",
                                                    "stand-in: the text is marked wrong (" KL_STAND_IN_MARK " wrong)"));
    else
        json_object_set_new(r, "correct", json_pack("{s:b}", "ok", 1));
    json_object_set_new(r, "candidate_ms", json_real(tc));
    if (base_text && text_time(task, base_name ? base_name : "baseline", base_text, &tb, why, sizeof why))
        json_object_set_new(r, "baseline_ms", json_real(tb));
    return r;
}

/* ---- the worker side ------------------------------------------------------------------------- */

bool kl_stand_in_is_job(const char *job)
{
    json_t *j = json_loads(job ? job : "", 0, NULL);
    bool yes = j && json_is_string(json_object_get(j, "job")) &&
               !strcmp(json_string_value(json_object_get(j, "job")), STAND_IN_JOB);
    json_decref(j);
    return yes;
}

int kl_stand_in_worker_run(const char *job, char **result)
{
    *result = NULL;
    int code = KL_WORKER_EXIT_OK;
    kl_error e = {0};
    kl_task *task = NULL;
    char *cand = NULL, *base = NULL;
    json_t *j = json_loads(job, 0, NULL), *r = NULL;
    const char *dir = json_string_value(json_object_get(j, "task_dir"));
    const char *cpath = json_string_value(json_object_get(j, "candidate"));
    const char *bpath = json_string_value(json_object_get(j, "baseline"));
    if (!dir || !cpath) {
        r = json_pack("{s:s, s:{s:s, s:s}}", "job", STAND_IN_JOB, "error", "stage", "job", "detail",
                      "a stand-in job needs task_dir and candidate");
        code = KL_WORKER_EXIT_JOB;
        goto done;
    }
    if (kl_task_load(dir, &task, &e) != KL_OK || kl_file_read(cpath, 0, &cand, NULL, &e) != KL_OK ||
        (bpath && kl_file_read(bpath, 0, &base, NULL, &e) != KL_OK)) {
        r = json_pack("{s:s, s:{s:s, s:s}}", "job", STAND_IN_JOB, "error", "stage", "init", "detail", e.message);
        code = KL_WORKER_EXIT_HARNESS;
        goto done;
    }
    /* the test markers: what a broken GPU or a bad kernel does to a worker */
    const char *on = marker_value(cand, "crash-on");
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (has_marker(cand, "crash") && !on) raise(SIGKILL);
    if (on && vis && (size_t)atoi(on) == (size_t)atoi(vis) && strspn(on, "0123456789") > 0) raise(SIGKILL);
    if (has_marker(cand, "hang"))
        for (;;) pause();
    const char *sl = marker_value(cand, "sleep");
    if (sl) {
        double s = atof(sl);
        if (s > 600) s = 600;
        if (s > 0) {
            struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
            while (nanosleep(&ts, &ts) != 0) {}
        }
    }
    const char *cname = json_string_value(json_object_get(j, "candidate_name"));
    const char *bname = json_string_value(json_object_get(j, "baseline_name"));
    r = json_pack("{s:s, s:o}", "job", STAND_IN_JOB, "stand_in",
                  figures(task, cname ? cname : cpath, cand, bname ? bname : bpath, base));
done:
    *result = r ? json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(r);
    json_decref(j);
    kl_task_free(task);
    free(cand);
    free(base);
    return code;
}

/* ---- the parent side ------------------------------------------------------------------------- */

/* Write text into the cache as the stand-in's "object" (content-addressed); new path. */
static kl_status put_object(const kl_gate *gate, const char *text, char **path, kl_error *err)
{
    *path = NULL;
    char hex[KL_HASH_HEX], name[96];
    kl_hash_hex(text, strlen(text), hex);
    char *dir = kl_path_join(gate->cache_dir, "stand-in");
    kl_snprintf(name, sizeof name, "src-%.32s.cu", hex);
    char *p = dir ? kl_path_join(dir, name) : NULL;
    kl_status st = KL_OK;
    if (!p) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    } else if (!kl_file_exists(p)) {
        st = kl_mkdirs(dir, err);
        if (st == KL_OK) st = kl_file_write(p, text, strlen(text), err);
    }
    free(dir);
    if (st == KL_OK) *path = p;
    else free(p);
    return st;
}

/* The figures from a worker process on the executor's slot; a worker that ended badly is a
 * figures object with the end as the correct stage's reason (as the gate reports a killed
 * worker), and a worker that could not judge (harness, job) an error. */
static kl_status worker_figures(kl_gate *gate, const kl_task *task, const char *cand_name, const char *cand_text,
                                const char *base_name, const char *base_text, double timeout_s, json_t **out,
                                kl_error *err)
{
    *out = NULL;
    char *cpath = NULL, *bpath = NULL, *job = NULL;
    kl_child c;
    kl_child_init(&c);
    kl_status st = KL_OK;
    KL_TRY(kl_gate_worker(gate, err));
    KL_TRY(put_object(gate, cand_text, &cpath, err));
    if (base_text) KL_TRY(put_object(gate, base_text, &bpath, err));
    json_t *jj = json_pack("{s:s, s:s, s:s, s:s?, s:s, s:s?}", "job", STAND_IN_JOB, "task_dir", task->dir,
                           "candidate", cpath, "baseline", bpath, "candidate_name", cand_name, "baseline_name",
                           base_name);
    job = jj ? json_dumps(jj, JSON_COMPACT) : NULL;
    json_decref(jj);
    if (!job) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    const char *argv[] = {gate->worker, NULL};
    c.argv = argv;
    c.stdin_data = job;
    c.stdin_len = strlen(job);
    c.timeout_s = timeout_s;
    st = kl_gate_run_child(gate, &c, err);
    c.argv = NULL;
    if (st != KL_OK) goto cleanup;
    json_t *res = json_loads(kl_strbuf_str(&c.out), 0, NULL);
    json_t *fig = json_object_get(res, "stand_in");
    if (!c.timed_out && !c.term_signal && c.exit_code == 0 && json_is_object(fig)) {
        *out = json_incref(fig);
    } else if (!c.timed_out && !c.term_signal && (c.exit_code == KL_WORKER_EXIT_JOB || c.exit_code == KL_WORKER_EXIT_HARNESS)) {
        const char *d = json_string_value(json_object_get(json_object_get(res, "error"), "detail"));
        st = kl_error_set(err, KL_ERR_CHILD, "the stand-in worker could not judge: %s", d ? d : kl_strbuf_str(&c.err));
    } else {
        char how[128], why[256];
        kl_gate_child_reason(&c, how, sizeof how);
        kl_snprintf(why, sizeof why, "the worker was %s", how);
        if (!c.timed_out && !c.term_signal) kl_snprintf(why, sizeof why, "the worker ended with %s", how);
        *out = json_pack("{s:{s:b}, s:{s:b, s:s}}", "compile", "ok", 1, "correct", "ok", 0, "reason", why);
    }
    json_decref(res);
cleanup:
    kl_child_release(&c);
    free(cpath);
    free(bpath);
    free(job);
    return st;
}

static json_t *skip(const char *why) { return json_pack("{s:s}", "skipped", why); }

kl_status kl_stand_in_judge(kl_gate *gate, const kl_task *task, const char *key, const char *cand_name,
                            const char *cand_text, const char *base_name, const char *base_text, const char *shapes,
                            const char *stages, const kl_judge_options *opt, kl_verdict **out, kl_error *err)
{
    *out = NULL;
    kl_status st = KL_OK;
    json_t *fig = NULL, *doc = NULL;
    if (gate->store && !opt->refresh) {
        char *json = NULL;
        st = kl_store_get(gate->store, "verdict", key, &json, err);
        if (st == KL_OK) {
            st = kl_verdict_parse(json, out, err);
            free(json);
            if (st == KL_OK) (*out)->cached = true;
            return st;
        }
        if (st != KL_ERR_NOT_FOUND) return st;
        kl_error_clear(err);
        st = KL_OK;
    }
    if (opt->baseline_builtin) base_text = NULL; /* the stand-in knows no vendor kernel */
    double timeout = opt->timeout_s > 0 ? opt->timeout_s : gate->run_timeout_s;
    double t0 = kl_now();
    if (gate->exec) KL_TRY(worker_figures(gate, task, cand_name, cand_text, base_name, base_text, timeout, &fig, err));
    else fig = figures(task, cand_name, cand_text, base_name, base_text);
    if (!fig) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    char stamp[32], ch[KL_HASH_HEX], bh[KL_HASH_HEX] = "";
    kl_utc_stamp(stamp, sizeof stamp);
    kl_hash_hex(cand_text, strlen(cand_text), ch);
    if (base_text) kl_hash_hex(base_text, strlen(base_text), bh);
    json_t *shape_list = json_array();
    for (unsigned i = 0; i < task->nchecks; i++) json_array_append_new(shape_list, json_string(task->checks[i].label));
    json_array_append_new(shape_list, json_string(task->bench.label));
    doc = json_pack("{s:s, s:s, s:s, s:b, s:{s:s, s:s}, s:{s:s, s:s}, s:o, s:{s:s, s:b}, s:{s:s, s:s, s:s}, "
                    "s:o, s:s, s:{}}",
                    "format", KL_VERDICT_FORMAT, "key", key, "date", stamp, "stand_in", 1, "task", "name",
                    task->name ? task->name : "?", "dir", task->dir ? task->dir : "?", "candidate", "name", cand_name,
                    "hash", ch, "baseline",
                    base_text ? json_pack("{s:s, s:s}", "name", base_name ? base_name : "baseline", "hash", bh)
                              : json_null(),
                    "device", "name", KL_STAND_IN_DEVICE, "stand_in", 1, "toolchain", "nvcc", "none", "arch", "none",
                    "text", KL_STAND_IN_TOOLCHAIN, "shapes", shape_list, "stages_asked", stages, "stages");
    if (!doc) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    (void)shapes;
    json_t *sg = json_object_get(doc, "stages");
    const char *failed = NULL, *reason = NULL;
    json_t *cs = json_object_get(fig, "compile");
    json_t *compile = json_pack("{s:b, s:b, s:s, s:[]}", "ok", json_is_true(json_object_get(cs, "ok")), "stand_in", 1,
                                "detail", "stand-in: parsed, not compiled", "kernels");
    if (!json_is_true(json_object_get(cs, "ok"))) {
        failed = "compile";
        reason = json_string_value(json_object_get(cs, "reason"));
        json_object_set(compile, "reason", json_object_get(cs, "reason"));
    }
    json_object_set_new(sg, "compile", compile);
    json_t *cr = json_object_get(fig, "correct");
    if (!failed && !json_is_true(json_object_get(cr, "ok"))) {
        failed = "correct";
        reason = json_string_value(json_object_get(cr, "reason"));
        json_object_set_new(sg, "correct", json_pack("{s:b, s:b, s:O}", "ok", 0, "stand_in", 1, "reason",
                                                     json_object_get(cr, "reason")));
    } else if (!failed) {
        json_object_set_new(sg, "correct", json_pack("{s:b, s:b, s:[], s:s}", "ok", 1, "stand_in", 1, "trials", "note",
                                                     "stand-in: nothing ran; taken as correct"));
    }
    const char *later = failed ? "an earlier stage failed" : "stand-in: nothing ran";
    json_object_set_new(sg, "determinism", skip(later));
    json_object_set_new(sg, "integrity", skip(later));
    json_object_set_new(sg, "stream", skip(later));
    if (!failed && !opt->no_profile) {
        double tc = json_number_value(json_object_get(fig, "candidate_ms"));
        json_t *bm = json_object_get(fig, "baseline_ms");
        json_t *prof = json_pack("{s:b, s:b, s:s, s:s, s:i, s:{s:f}}", "ok", 1, "stand_in", 1, "timer", "stand-in",
                                 "shape", task->bench.label, "reps", 0, "candidate", "median_ms", tc);
        if (json_is_number(bm)) {
            json_object_set_new(prof, "baseline", json_pack("{s:f, s:s}", "median_ms", json_number_value(bm), "name",
                                                            base_name ? base_name : "baseline"));
            json_object_set_new(prof, "speedup", json_real(json_number_value(bm) / tc));
        }
        json_object_set_new(sg, "profile", prof);
    } else {
        json_object_set_new(sg, "profile", skip(failed ? later : "not asked for"));
    }
    if (opt->sanitize && !failed)
        json_object_set_new(sg, "sanitize", json_pack("{s:b, s:b, s:s, s:[]}", "ok", 1, "stand_in", 1, "detail",
                                                      "stand-in: no sanitizer ran", "tools"));
    else
        json_object_set_new(sg, "sanitize", skip(opt->sanitize ? later : "not asked for"));
    json_object_set_new(doc, "pass", json_boolean(!failed));
    json_object_set_new(doc, "failed_stage", failed ? json_string(failed) : json_null());
    json_object_set_new(doc, "reason", failed ? json_string(reason ? reason : "failed") : json_null());
    json_t *run = json_pack("{s:s, s:f}", "worker", gate->exec ? "stand-in worker" : "stand-in, in process", "seconds",
                            kl_now() - t0);
    json_t *placed = gate->exec ? kl_executor_placement() : NULL;
    if (placed) json_object_set_new(run, "placement", placed);
    json_object_set_new(doc, "run", run);
    if (gate->store) {
        char *text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
        if (!text) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        st = kl_store_put(gate->store, "verdict", key, text, err);
        free(text);
        if (st != KL_OK) goto cleanup;
    }
    st = kl_verdict_from_json(doc, out, err);
    doc = NULL;
cleanup:
    json_decref(fig);
    json_decref(doc);
    return st;
}
