/*
 * `bench --optimize`: the forward optimizer's evaluation (docs/optimize.md, "Evaluation").
 * Leave-one-out over a suite: for each task, the library is rebuilt from the other tasks'
 * lineages, the memory from the blind policy's runs on the other tasks (same budget), and
 * each policy starts from the task's naive kernel with the same budget. All blind runs come
 * first (they are the memory). Every run is a stored optimization, so the evaluation
 * resumes where it stopped and replays from the archive.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "klineage/bench.h"
#include "util/util.h"

static void note(const kl_bench_optimize_options *o, const char *task, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note(const kl_bench_optimize_options *o, const char *task, const char *fmt, ...)
{
    if (!o->progress) return;
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    o->progress(o->progress_user, task, text);
}

/* The figures of one finished run. */
static json_t *run_row(const kl_bench_optimize_options *o, const kl_task *t, const char *doc_json)
{
    json_t *d = json_loads(doc_json, 0, NULL);
    json_t *row = json_object();
    json_object_set(row, "key", json_object_get(d, "key"));
    json_object_set(row, "gate_calls", json_object_get(d, "gate_calls"));
    json_object_set(row, "stop_reason", json_object_get(d, "stop_reason"));
    json_int_t best = json_integer_value(json_object_get(d, "best"));
    json_t *bv = json_array_get(json_object_get(d, "versions"), (size_t)best);
    json_object_set(row, "estimate", json_object_get(bv, "cum"));
    /* the final figure: the returned kernel against the start, judged again in one run */
    double final = 1.0, median = -1;
    const char *device = NULL, *date = NULL;
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(d, "finals"), i, f) {
        json_t *j = json_object_get(f, "judgement");
        if (json_integer_value(json_object_get(f, "version")) == best && json_is_true(json_object_get(j, "pass"))) {
            final = json_number_value(json_object_get(j, "speedup"));
            median = json_number_value(json_object_get(j, "cand_ms"));
            device = json_string_value(json_object_get(j, "device"));
            date = json_string_value(json_object_get(j, "date"));
        }
    }
    json_object_set_new(row, "speedup", json_real(final));
    if (device) json_object_set_new(row, "device", json_string(device));
    if (date) json_object_set_new(row, "date", json_string(date));
    /* the curve: best estimate after each gate call; when 95 % of the final was reached */
    json_t *curve = json_array();
    json_array_append_new(curve, json_real(1.0));
    unsigned compile = 0, correct = 0, other = 0;
    double end = json_number_value(json_object_get(bv, "cum"));
    json_int_t reach = -1;
    json_t *r;
    json_array_foreach(json_object_get(d, "rounds"), i, r) {
        double cum = json_number_value(json_object_get(r, "cum"));
        json_array_append_new(curve, json_real(cum));
        if (reach < 0 && cum >= 0.95 * end) reach = (json_int_t)i + 1;
        json_t *j = json_object_get(r, "judgement");
        if (!json_is_true(json_object_get(j, "pass"))) {
            const char *stage = json_string_value(json_object_get(j, "stage"));
            if (stage && !strcmp(stage, "compile")) compile++;
            else if (stage && !strcmp(stage, "correct")) correct++;
            else other++;
        }
    }
    if (best == 0) reach = 0; /* nothing gained: the start is the final */
    json_object_set_new(row, "curve", curve);
    json_object_set_new(row, "calls_to_95", json_integer(reach < 0 ? 0 : reach));
    json_object_set_new(row, "rejected_compile", json_integer(compile));
    json_object_set_new(row, "rejected_correct", json_integer(correct));
    json_object_set_new(row, "rejected_other", json_integer(other));
    /* against the expert and the vendor: judgements outside the budget */
    if (best > 0 && !o->no_compare) {
        const char *src = json_string_value(json_object_get(bv, "source"));
        char name[160];
        kl_snprintf(name, sizeof name, "%s/opt-%.12s.cu", t->name, json_string_value(json_object_get(bv, "hash")));
        char *cmp = NULL;
        kl_error e = {0};
        if (kl_bench_compare(o->gate, o->store, t, name, src, median, &cmp, &e) == KL_OK) {
            json_t *c = json_loads(cmp, 0, NULL);
            json_object_set(row, "compare", c);
            json_decref(c);
        }
        free(cmp);
    }
    json_decref(d);
    return row;
}

static double geomean_ratio(const json_t *rows, const char *a, const char *b, unsigned *n)
{
    double s = 0;
    *n = 0;
    size_t i;
    json_t *r;
    json_array_foreach((json_t *)rows, i, r) {
        json_t *pa = json_object_get(json_object_get(r, "policies"), a), *pb = json_object_get(json_object_get(r, "policies"), b);
        double x = json_number_value(json_object_get(pa, "speedup")), y = json_number_value(json_object_get(pb, "speedup"));
        if (x > 0 && y > 0) {
            s += log(x / y);
            (*n)++;
        }
    }
    return *n ? exp(s / *n) : -1;
}

static double mean_calls(const json_t *rows, const char *p, unsigned *n)
{
    double s = 0;
    *n = 0;
    size_t i;
    json_t *r;
    json_array_foreach((json_t *)rows, i, r) {
        json_t *x = json_object_get(json_object_get(json_object_get(r, "policies"), p), "calls_to_95");
        if (json_is_integer(x)) {
            s += (double)json_integer_value(x);
            (*n)++;
        }
    }
    return *n ? s / *n : -1;
}

static json_t *summary(const json_t *rows)
{
    json_t *s = json_object();
    unsigned n;
    double r = geomean_ratio(rows, "skills", "blind", &n);
    if (n) json_object_set_new(s, "skills_over_blind", json_real(r));
    r = geomean_ratio(rows, "skills", "memory", &n);
    if (n) json_object_set_new(s, "skills_over_memory", json_real(r));
    r = geomean_ratio(rows, "memory", "blind", &n);
    if (n) json_object_set_new(s, "memory_over_blind", json_real(r));
    double cs = mean_calls(rows, "skills", &n), cb = mean_calls(rows, "blind", &n);
    if (cs >= 0) json_object_set_new(s, "skills_calls_to_95", json_real(cs));
    if (cb >= 0) json_object_set_new(s, "blind_calls_to_95", json_real(cb));
    if (cs >= 0 && cb > 0) json_object_set_new(s, "calls_to_95_ratio", json_real(cs / cb));
    /* tasks where skills reached 60 % of the expert */
    unsigned at60 = 0, with = 0;
    size_t i;
    json_t *row;
    json_array_foreach((json_t *)rows, i, row) {
        json_t *fx = json_object_get(json_object_get(json_object_get(json_object_get(json_object_get(row, "policies"), "skills"),
                                                                     "compare"),
                                                     "expert"),
                                     "fraction");
        if (!json_is_number(fx)) continue;
        with++;
        at60 += json_number_value(fx) >= 0.6;
    }
    if (with) {
        json_object_set_new(s, "skills_tasks_at_60pct_expert", json_integer(at60));
        json_object_set_new(s, "skills_tasks_with_expert", json_integer(with));
    }
    return s;
}

/* One policy's runs, task by task (kl_gate_parallel calls run_policy_task for each). */
typedef struct policy_ctx {
    const kl_bench_optimize_options *o;
    kl_task **tasks;
    const char **names;
    json_t *rows;
    kl_policy policy;
    bool wanted;
    unsigned budget;
} policy_ctx;

static kl_status run_policy_task(void *arg, unsigned i, kl_error *err)
{
    policy_ctx *pc = arg;
    const kl_bench_optimize_options *o = pc->o;
    kl_task **tasks = pc->tasks;
    if (o->interrupt && *o->interrupt) return kl_error_set(err, KL_ERR_INTERRUPTED, "interrupted");
    note(o, tasks[i]->name, "%s policy, %u gate calls%s", kl_policy_name(pc->policy), pc->budget,
         o->leave_one_out ? ", the task left out of the library and the memory" : "");
    kl_optimize_options oo = {0};
    oo.policy = pc->policy;
    oo.budget = pc->budget;
    oo.seed = o->seed ? o->seed : 1;
    oo.leave_out = o->leave_one_out ? tasks[i]->name : NULL;
    oo.memory_tasks = pc->names;
    oo.sanitize_final = true;
    oo.restart_older = o->restart_older;
    oo.ranking = o->ranking;
    oo.rewriter = o->rewriter;
    oo.store = o->store;
    oo.judge = kl_gate_search_judge;
    oo.judge_user = o->gate;
    if (!o->replay) oo.prepare = kl_gate_search_prepare;
    oo.interrupt = o->interrupt;
    char *doc = NULL;
    kl_error e = {0};
    kl_status rs = kl_optimize_run(tasks[i], &oo, &doc, &e);
    json_t *row = json_object_get(json_array_get(pc->rows, i), "policies");
    if (rs == KL_OK) {
        json_t *pr = run_row(o, tasks[i], doc);
        json_object_set_new(pr, "counted", json_boolean(pc->wanted));
        json_object_set_new(row, kl_policy_name(pc->policy), pr);
    } else if (rs == KL_ERR_INTERRUPTED) {
        free(doc);
        return kl_error_set(err, rs, "%s (%s): %s", tasks[i]->name, kl_policy_name(pc->policy), e.message);
    } else {
        json_object_set_new(row, kl_policy_name(pc->policy), json_pack("{s:s}", "error", e.message));
        note(o, tasks[i]->name, "%s policy: %s", kl_policy_name(pc->policy), e.message);
    }
    free(doc);
    return KL_OK;
}

kl_status kl_bench_optimize(const kl_bench_optimize_options *o, char **out_json, kl_error *err)
{
    *out_json = NULL;
    kl_status st = KL_OK;
    unsigned ntasks = o->ntask_dirs;
    kl_task **tasks = calloc(ntasks ? ntasks : 1, sizeof *tasks);
    const char **names = calloc(ntasks + 1, sizeof *names);
    json_t *rows = json_array();
    if (!tasks || !names || !rows) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (unsigned i = 0; i < ntasks; i++) {
        KL_TRY(kl_task_load(o->task_dirs[i], &tasks[i], err));
        names[i] = tasks[i]->name;
    }
    static const kl_policy order[] = {KL_POLICY_BLIND, KL_POLICY_MEMORY, KL_POLICY_SKILLS};
    for (unsigned i = 0; i < ntasks; i++) {
        json_t *row = json_object();
        json_object_set_new(row, "task", json_string(tasks[i]->name));
        json_object_set_new(row, "policies", json_object());
        json_array_append_new(rows, row);
    }
    unsigned budget = o->budget ? o->budget : KL_OPTIMIZE_BUDGET;
    /* the memory of a task: blind runs on the others of this evaluation */
    bool want[KL_POLICY_COUNT], make[KL_POLICY_COUNT];
    for (unsigned k = 0; k < KL_POLICY_COUNT; k++) want[k] = !o->npolicies;
    for (unsigned k = 0; k < o->npolicies; k++) want[o->policies[k]] = true;
    memcpy(make, want, sizeof make);
    if (want[KL_POLICY_MEMORY]) make[KL_POLICY_BLIND] = true; /* the memory is the blind runs */
    for (unsigned p = 0; p < sizeof order / sizeof order[0]; p++) {
        if (!make[order[p]]) continue;
        /* the runs of one policy on different tasks are independent: with several workers (--gpus,
         * Slurm) they run at once, each holding the gate, store and rewriter except while a worker
         * runs; the policies stay in order (the memory is the finished blind runs) */
        policy_ctx pc = {o, tasks, names, rows, order[p], want[order[p]], budget};
        kl_status *sts = calloc(ntasks ? ntasks : 1, sizeof *sts);
        kl_error *errs = calloc(ntasks ? ntasks : 1, sizeof *errs);
        if (!sts || !errs) {
            free(sts);
            free(errs);
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        (void)kl_gate_parallel(o->gate, ntasks, run_policy_task, &pc, sts, errs, NULL);
        for (unsigned i = 0; i < ntasks && st == KL_OK; i++)
            if (sts[i] != KL_OK) st = kl_error_set(err, sts[i], "%s", errs[i].message);
        free(sts);
        free(errs);
        if (st != KL_OK) goto cleanup;
    }
    json_t *doc = json_object();
    json_object_set_new(doc, "budget", json_integer(budget));
    json_object_set_new(doc, "seed", json_integer((json_int_t)(o->seed ? o->seed : 1)));
    json_object_set_new(doc, "leave_one_out", json_boolean(o->leave_one_out));
    json_object_set_new(doc, "summary", summary(rows));
    json_object_set(doc, "tasks", rows);
    *out_json = json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(doc);
    if (!*out_json) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    for (unsigned i = 0; tasks && i < ntasks; i++) kl_task_free(tasks[i]);
    free(tasks);
    free(names);
    json_decref(rows);
    return st;
}

/* ---- the table ------------------------------------------------------------------------------ */

static void fraction_cell(kl_strbuf *sb, const json_t *part)
{
    if (json_is_number(json_object_get(part, "fraction")))
        kl_strbuf_addf(sb, " %.2f |", json_number_value(json_object_get(part, "fraction")));
    else
        kl_strbuf_adds(sb, " – |");
}

char *kl_bench_optimize_markdown(const char *json_text)
{
    json_t *d = json_loads(json_text, 0, NULL);
    if (!json_is_array(json_object_get(d, "tasks"))) {
        json_decref(d);
        return NULL;
    }
    kl_strbuf sb = KL_STRBUF_INIT;
    const char *device = NULL, *date = NULL;
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(d, "tasks"), i, row) {
        const char *k;
        json_t *p;
        json_object_foreach(json_object_get(row, "policies"), k, p) {
            if (!device) device = json_string_value(json_object_get(p, "device"));
            const char *when = json_string_value(json_object_get(p, "date"));
            if (when && (!date || strcmp(when, date) > 0)) date = when; /* ISO 8601: the latest sorts last */
        }
    }
    kl_strbuf_addf(&sb, "Budget %lld gate calls per run%s; device: %s; last measured %s.\n\n",
                   (long long)json_integer_value(json_object_get(d, "budget")),
                   json_is_true(json_object_get(d, "leave_one_out"))
                       ? ", leave-one-out (each task's own lineages out of the library, its runs out of the memory)"
                       : "",
                   device ? device : "unknown", date ? date : "–");
    kl_strbuf_adds(&sb, "| task | policy | speedup over naive | of the expert | of the vendor | calls to 95 % | "
                        "rejected (compile / correct / other) | stop |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
    static const char *const pols[] = {"blind", "memory", "skills"};
    json_array_foreach(json_object_get(d, "tasks"), i, row) {
        for (unsigned q = 0; q < 3; q++) {
            json_t *p = json_object_get(json_object_get(row, "policies"), pols[q]);
            if (!p || json_is_false(json_object_get(p, "counted"))) continue;
            kl_strbuf_addf(&sb, "| %s | %s |", json_string_value(json_object_get(row, "task")), pols[q]);
            if (json_object_get(p, "error")) {
                kl_strbuf_addf(&sb, " %s | | | | | |\n", json_string_value(json_object_get(p, "error")));
                continue;
            }
            kl_strbuf_addf(&sb, " %.2fx |", json_number_value(json_object_get(p, "speedup")));
            const json_t *c = json_object_get(p, "compare");
            fraction_cell(&sb, json_object_get(c, "expert"));
            fraction_cell(&sb, json_object_get(c, "vendor"));
            kl_strbuf_addf(&sb, " %lld | %lld / %lld / %lld | %s |\n",
                           (long long)json_integer_value(json_object_get(p, "calls_to_95")),
                           (long long)json_integer_value(json_object_get(p, "rejected_compile")),
                           (long long)json_integer_value(json_object_get(p, "rejected_correct")),
                           (long long)json_integer_value(json_object_get(p, "rejected_other")),
                           json_string_value(json_object_get(p, "stop_reason")) ?: "–");
        }
    }
    const json_t *s = json_object_get(d, "summary");
    kl_strbuf_adds(&sb, "\n");
    if (json_is_number(json_object_get(s, "skills_over_blind")))
        kl_strbuf_addf(&sb, "Geometric mean of the final speedups, skills / blind: %.2fx.\n",
                       json_number_value(json_object_get(s, "skills_over_blind")));
    if (json_is_number(json_object_get(s, "skills_over_memory")))
        kl_strbuf_addf(&sb, "Geometric mean, skills / memory: %.2fx.\n", json_number_value(json_object_get(s, "skills_over_memory")));
    if (json_is_number(json_object_get(s, "memory_over_blind")))
        kl_strbuf_addf(&sb, "Geometric mean, memory / blind: %.2fx.\n", json_number_value(json_object_get(s, "memory_over_blind")));
    if (json_is_number(json_object_get(s, "calls_to_95_ratio")))
        kl_strbuf_addf(&sb, "Gate calls to reach 95 %% of the final, mean: skills %.1f, blind %.1f (ratio %.2f).\n",
                       json_number_value(json_object_get(s, "skills_calls_to_95")),
                       json_number_value(json_object_get(s, "blind_calls_to_95")),
                       json_number_value(json_object_get(s, "calls_to_95_ratio")));
    if (json_is_integer(json_object_get(s, "skills_tasks_with_expert")))
        kl_strbuf_addf(&sb, "Skills at 60 %% of the expert's speed or more: %lld of %lld tasks.\n",
                       (long long)json_integer_value(json_object_get(s, "skills_tasks_at_60pct_expert")),
                       (long long)json_integer_value(json_object_get(s, "skills_tasks_with_expert")));
    json_decref(d);
    return kl_strbuf_detach(&sb, NULL);
}
