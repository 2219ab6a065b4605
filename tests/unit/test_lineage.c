/* src/lineage: the walk (choice, stop, rejections), resume after an interruption at every
 * judgement, determinism, probing into conditions, card extraction and merging.
 * The judge here is the test's own: it reads "OPT:name:factor[:flag]" markers from the
 * kernel text (see tests/data/lineage/markers/expert.cu), so every figure it reports is
 * computed from the text, and the walk's choices can be predicted from the markers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/lineage.h"
#include "klineage/skills.h"
#include "lineage/lineage_int.h"
#include "util/util.h"

typedef struct fake_judge {
    unsigned calls;
    unsigned profiled, bench_vs_baseline, sanitized; /* judgements asking for each flag */
    const char *racy;                 /* the removal of this optimization fails the sanitizer stages */
    unsigned interrupt_after;         /* 0: never */
    volatile sig_atomic_t *interrupt;
} fake_judge;

/* Time of a text: the product of the factors of its markers, inverted (more optimizations,
 * less time): t = 1 / prod(factor). */
static double fake_time(const char *text)
{
    double t = 1.0;
    for (const char *p = strstr(text, "OPT:"); p; p = strstr(p + 4, "OPT:")) {
        const char *colon = strchr(p + 4, ':');
        if (colon) t /= atof(colon + 1);
    }
    return t;
}

/* Does text carry the marker line of `name` with `flag`? */
static bool has_flag(const char *text, const char *flag, char *name, size_t size)
{
    for (const char *p = strstr(text, "OPT:"); p; p = strstr(p + 4, "OPT:")) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        char line[128];
        kl_snprintf(line, sizeof line, "%.*s", (int)n, p);
        if (strstr(line, flag)) {
            if (name) kl_snprintf(name, size, "%s", line);
            return true;
        }
    }
    return false;
}

static kl_status judge_fn(void *user, const kl_task *task, const char *cand_name, const char *cand_text,
                          const char *base_name, const char *base_text, unsigned flags, kl_judgement *out,
                          kl_error *err)
{
    (void)cand_name, (void)base_name, (void)err;
    fake_judge *fj = user;
    fj->calls++;
    if (flags & KL_JUDGE_PROFILE) fj->profiled++;
    if (flags & KL_JUDGE_BENCH_VS_BASELINE) fj->bench_vs_baseline++;
    if (flags & KL_JUDGE_SANITIZE) fj->sanitized++;
    if (fj->interrupt_after && fj->calls >= fj->interrupt_after) *fj->interrupt = 1;
    out->pass = true;
    /* removing a ":bad" line breaks the kernel */
    char line[128];
    if (base_text && has_flag(base_text, ":bad", line, sizeof line) && !strstr(cand_text, line)) {
        out->pass = false;
        kl_snprintf(out->stage, sizeof out->stage, "correct");
        kl_snprintf(out->reason, sizeof out->reason, "rel_l2 0.5 at check[0]");
    }
    /* a ":mod4" line makes the kernel wrong at any check shape where n % 4 != 0 (the task's
     * own checks are all multiples of 4, so only probes find it) */
    if (has_flag(cand_text, ":mod4", NULL, 0))
        for (unsigned c = 0; c < task->nchecks; c++)
            if (task->checks[c].values[0] % 4 != 0) {
                out->pass = false;
                kl_snprintf(out->stage, sizeof out->stage, "correct");
                kl_snprintf(out->reason, sizeof out->reason, "wrong where n %% 4 != 0");
            }
    /* a race the default stages miss: only the sanitizer stages see it */
    char racy[64];
    if (fj->racy && base_text && (flags & KL_JUDGE_SANITIZE)) {
        kl_snprintf(racy, sizeof racy, "OPT:%s:", fj->racy);
        if (strstr(base_text, racy) && !strstr(cand_text, racy) && out->pass) {
            out->pass = false;
            kl_snprintf(out->stage, sizeof out->stage, "sanitize");
            kl_snprintf(out->reason, sizeof out->reason, "racecheck: 1 report");
        }
    }
    kl_hasher *h = kl_hasher_new();
    kl_hasher_parts(h, cand_text);
    kl_hasher_parts(h, (flags & KL_JUDGE_SANITIZE) ? "sanitize" : "");
    kl_hasher_parts(h, base_text);
    kl_hasher_finish(h, out->key);
    out->cand_ms = fake_time(cand_text);
    out->base_ms = base_text ? fake_time(base_text) : -1;
    out->speedup = base_text ? out->base_ms / out->cand_ms : -1;
    kl_snprintf(out->device, sizeof out->device, "test device");
    return KL_OK;
}

typedef struct fixture {
    kl_task *task;
    kl_store *store;
    kl_rewriter *rw;
    char *probe_dir;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    kl_error err = {0};
    const char *data = getenv("KL_TEST_DATA");
    char *dir = kl_path_join(data ? data : "tests/data", "lineage/markers");
    if (kl_task_load(dir, &f->task, &err) != KL_OK) {
        fprintf(stderr, "task: %s\n", err.message);
        free(dir);
        return -1;
    }
    free(dir);
    if (kl_store_open(":memory:", &f->store, &err) != KL_OK) return -1;
    const char *prog = getenv("KL_FAKE_REWRITER");
    char cfg[1024];
    kl_snprintf(cfg, sizeof cfg, "{\"program\": \"%s\", \"timeout_s\": 30}", prog ? prog : "kl_fake_rewriter");
    if (kl_rewriter_open("command", cfg, &f->rw, &err) != KL_OK) {
        fprintf(stderr, "rewriter: %s\n", err.message);
        return -1;
    }
    if (kl_tempdir("lineage-test", &f->probe_dir, &err) != KL_OK) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kl_error err;
    kl_remove_tree(f->probe_dir, &err);
    free(f->probe_dir);
    kl_rewriter_free(f->rw);
    kl_store_close(f->store);
    kl_task_free(f->task);
    free(f);
    return 0;
}

static kl_lineage_options options(fixture *f, fake_judge *fj, volatile sig_atomic_t *flag)
{
    kl_lineage_options o = {0};
    o.rewriter = f->rw;
    o.store = f->store;
    o.judge = judge_fn;
    o.judge_user = fj;
    o.interrupt = flag;
    o.probe_dir = f->probe_dir;
    return o;
}

/* The transforms of the steps, in walk order, joined by commas. */
static void step_names(const char *doc_json, char *buf, size_t size)
{
    json_t *doc = json_loads(doc_json, 0, NULL);
    assert_non_null(doc);
    buf[0] = '\0';
    size_t i;
    json_t *s;
    kl_strbuf sb = KL_STRBUF_INIT;
    json_array_foreach(json_object_get(doc, "steps"), i, s) {
        if (i) kl_strbuf_addc(&sb, ',');
        kl_strbuf_adds(&sb, json_string_value(json_object_get(s, "transform")));
    }
    kl_snprintf(buf, size, "%s", kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    json_decref(doc);
}

static void walk_removes_cheapest_first_and_keeps_rejections(void **state)
{
    fixture *f = *state;
    fake_judge fj = {0};
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = options(f, &fj, &flag);
    o.full = true; /* every proposal at every version */
    char *doc = NULL;
    kl_error err = {0};
    kl_status st = kl_lineage_walk(f->task, &o, &doc, &err);
    if (st != KL_OK) fprintf(stderr, "walk: %s\n", err.message);
    assert_int_equal(st, KL_OK);
    char names[256];
    step_names(doc, names, sizeof names);
    /* removal costs: beta 1.5 < alpha 2.0 < delta 3.0; gamma cannot be removed (bad) */
    assert_string_equal(names, "beta,alpha,delta");
    json_t *d = json_loads(doc, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(d, "state")), "done");
    assert_string_equal(json_string_value(json_object_get(d, "stop_reason")), "nothing more can be removed");
    /* every gamma proposal was rejected at the correct stage, with its reason */
    size_t i;
    json_t *r;
    unsigned gamma = 0;
    json_array_foreach(json_object_get(d, "rejected"), i, r) {
        if (!strcmp(json_string_value(json_object_get(r, "transform")), "gamma")) {
            gamma++;
            assert_string_equal(json_string_value(json_object_get(r, "stage")), "correct");
            assert_non_null(strstr(json_string_value(json_object_get(r, "reason")), "rel_l2"));
        }
    }
    assert_int_equal(gamma, 4); /* proposed at each of the 4 versions */
    /* the root still has gamma, and the first step's gain is the marker's factor */
    json_t *versions = json_object_get(d, "versions");
    assert_int_equal(json_array_size(versions), 4);
    const char *root = json_string_value(json_object_get(json_array_get(versions, 3), "source"));
    assert_non_null(strstr(root, "OPT:gamma"));
    assert_null(strstr(root, "OPT:alpha"));
    double sp = json_number_value(json_object_get(json_array_get(json_object_get(d, "steps"), 0), "speedup"));
    assert_true(fabs(1.0 / sp - 1.5) < 1e-9);
    /* root vs naive was judged */
    assert_non_null(json_object_get(d, "root_vs_naive"));
    json_decref(d);

    char *md = kl_lineage_markdown(doc);
    assert_non_null(md);
    /* forward order: root first, so delta (the last removed) is step 1 */
    char *p1 = strstr(md, "| 1 | delta"), *p3 = strstr(md, "| 3 | beta");
    assert_non_null(p1);
    assert_non_null(p3);
    assert_non_null(strstr(md, "3.00x"));
    free(md);
    free(doc);
}


/* Walk a built-in task from a recorded intermediate version (tests/data/lineage/FILE) with the
 * rules rewriter and the fake judge; returns the lineage document (json_decref). */
static json_t *walk_rules_from(const char *task_name, const char *file)
{
    const char *src = getenv("KL_SOURCE_DIR");
    const char *data = getenv("KL_TEST_DATA");
    char rel[128];
    kl_snprintf(rel, sizeof rel, "tasks/%s", task_name);
    char *tdir = kl_path_join(src ? src : ".", rel);
    kl_snprintf(rel, sizeof rel, "lineage/%s", file);
    char *expert = kl_path_join(data ? data : "tests/data", rel);
    kl_error err = {0};
    kl_task *task = NULL;
    assert_int_equal(kl_task_load(tdir, &task, &err), KL_OK);
    kl_store *store = NULL;
    assert_int_equal(kl_store_open(":memory:", &store, &err), KL_OK);
    kl_rewriter *rules = NULL;
    assert_int_equal(kl_rewriter_open("rules", NULL, &rules, &err), KL_OK);
    fake_judge fj = {0};
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = {0};
    o.rewriter = rules;
    o.store = store;
    o.judge = judge_fn;
    o.judge_user = &fj;
    o.interrupt = &flag;
    o.expert_path = expert;
    char *doc = NULL;
    kl_status st = kl_lineage_walk(task, &o, &doc, &err);
    if (st != KL_OK) fprintf(stderr, "walk: %s\n", err.message);
    assert_int_equal(st, KL_OK);
    json_t *d = json_loads(doc, 0, NULL);
    assert_non_null(d);
    free(doc);
    kl_rewriter_free(rules);
    kl_store_close(store);
    kl_task_free(task);
    free(tdir);
    free(expert);
    return d;
}

static const char *root_of(json_t *d)
{
    json_t *versions = json_object_get(d, "versions");
    return json_string_value(json_object_get(json_array_get(versions, json_array_size(versions) - 1), "source"));
}

static json_int_t recognized_at(json_t *d, size_t version)
{
    return json_integer_value(json_object_get(json_array_get(json_object_get(d, "versions"), version), "recognized"));
}

/* "Simpler" counts every optimization the rewriter recognizes, removable or not: removing the
 * block reduction (one recognized site fewer, though it makes the grid-stride loop removable)
 * is a step, and the walk ends at one atomicAdd per element. */
static void a_removal_that_unblocks_another_is_simpler(void **state)
{
    (void)state;
    json_t *d = walk_rules_from("reduce_sum", "reduce_sum_root.cu");
    char *text = json_dumps(d, 0);
    char names[256];
    step_names(text, names, sizeof names);
    free(text);
    assert_string_equal(names, "block-reduce,grid-stride");
    assert_int_equal(recognized_at(d, 0), 3);
    assert_non_null(strstr(root_of(d), "atomicAdd(out, x[j])"));
    assert_null(strstr(root_of(d), "g_blocks_done"));
    json_decref(d);
}

/* A removal that leaves as many optimizations as before is still simpler when one of its own
 * kind is gone: the sgemm register tile hides the shared tiles it holds; removing it shows
 * them, and the walk goes on to the naive loop. */
static void removal_revealing_what_it_held_is_simpler(void **state)
{
    (void)state;
    json_t *d = walk_rules_from("sgemm", "sgemm_root.cu");
    char *text = json_dumps(d, 0);
    char names[256];
    step_names(text, names, sizeof names);
    free(text);
    assert_string_equal(names, "register-tile,smem-tile");
    assert_int_equal(recognized_at(d, 0), 1);
    assert_int_equal(recognized_at(d, 1), 1);
    assert_null(strstr(root_of(d), "__shared__"));
    assert_non_null(strstr(root_of(d), "acc += A["));
    json_decref(d);
}

/* A removal that passes the default stages but fails the sanitizer stages (a race) is never
 * admitted: the walk takes the next best, and keeps the racy one among the rejections. */
static void racy_removal_is_not_admitted(void **state)
{
    fixture *f = *state;
    fake_judge fj = {0};
    fj.racy = "beta";
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = options(f, &fj, &flag);
    char *doc = NULL;
    kl_error err = {0};
    assert_int_equal(kl_lineage_walk(f->task, &o, &doc, &err), KL_OK);
    char names[256];
    step_names(doc, names, sizeof names);
    assert_null(strstr(names, "beta"));
    assert_string_equal(names, "alpha,delta");
    json_t *d = json_loads(doc, 0, NULL);
    size_t i;
    json_t *r;
    bool seen = false;
    json_array_foreach(json_object_get(d, "rejected"), i, r)
        if (!strcmp(json_string_value(json_object_get(r, "transform")), "beta") &&
            !strcmp(json_string_value(json_object_get(r, "stage")), "sanitize"))
            seen = true;
    assert_true(seen);
    /* every step's verdict is the sanitized one */
    json_array_foreach(json_object_get(d, "steps"), i, r) assert_non_null(json_object_get(r, "verdict"));
    json_decref(d);
    free(doc);
}

/* Lazy (the default): the same lineage as full, with fewer judgements; a proposal judged at
 * an earlier version is ranked by that judgement and judged again only when it ranks best;
 * one rejected earlier is judged again before the walk gives up. */
static void lazy_walk_takes_the_same_steps_with_fewer_judgements(void **state)
{
    fixture *f = *state;
    fake_judge full = {0}, lazy = {0};
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = options(f, &full, &flag);
    o.full = true;
    char *d_full = NULL, *d_lazy = NULL;
    kl_error err = {0};
    assert_int_equal(kl_lineage_walk(f->task, &o, &d_full, &err), KL_OK);
    o = options(f, &lazy, &flag);
    assert_int_equal(kl_lineage_walk(f->task, &o, &d_lazy, &err), KL_OK);
    char a[256], b[256];
    step_names(d_full, a, sizeof a);
    step_names(d_lazy, b, sizeof b);
    assert_string_equal(a, b);
    /* full: 4 + 3 + 2 + 1 proposals; lazy: 4 at the expert, then one per version
     * (alpha, delta: each judged again when it ranks best; gamma at the root, where it
     * is all that is left) */
    assert_int_equal(full.calls - lazy.calls, 3);
    /* every judgement is timed; proposals are checked at the bench shape against their parent,
     * the expert (against naive, at the start) and the root (against naive, at the end) against
     * the reference */
    assert_int_equal(full.profiled, full.calls);
    /* 10 proposals, and each of the 3 admitted judged again with the sanitizer stages */
    assert_int_equal(full.sanitized, 3);
    assert_int_equal(lazy.sanitized, 3);
    assert_int_equal(full.bench_vs_baseline, 10 + 3);
    assert_int_equal(full.calls - full.bench_vs_baseline, 2);
    json_t *d = json_loads(d_lazy, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(d, "strategy")), "lazy");
    json_t *v1 = json_array_get(json_object_get(d, "versions"), 1);
    /* one proposal judged, and judged again with the sanitizer stages before it was admitted */
    assert_int_equal(json_integer_value(json_object_get(v1, "judged")), 2);
    /* at version 1, delta and gamma were ranked by their judgements at version 0 */
    json_t *est = json_object_get(v1, "estimated");
    assert_int_equal(json_array_size(est), 2);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(est, 0), "estimate_from")), 0);
    unsigned gamma = 0;
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(d, "rejected"), i, r)
        if (!strcmp(json_string_value(json_object_get(r, "transform")), "gamma")) gamma++;
    assert_int_equal(gamma, 2); /* at the expert, and again at the root before giving up */
    json_decref(d);
    /* the two walks are stored under different keys: both are there */
    char *again = NULL;
    assert_int_equal(kl_lineage_load(f->store, f->task, NULL, "command", true, &again, &err), KL_OK);
    free(again);
    free(d_full), free(d_lazy);
}

static void walk_is_deterministic(void **state)
{
    fixture *f = *state;
    fake_judge a = {0}, b = {0};
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = options(f, &a, &flag);
    o.restart = true;
    char *d1 = NULL, *d2 = NULL;
    kl_error err = {0};
    assert_int_equal(kl_lineage_walk(f->task, &o, &d1, &err), KL_OK);
    o.judge_user = &b;
    assert_int_equal(kl_lineage_walk(f->task, &o, &d2, &err), KL_OK);
    json_t *j1 = json_loads(d1, 0, NULL), *j2 = json_loads(d2, 0, NULL);
    json_object_del(j1, "updated"), json_object_del(j2, "updated");
    json_object_del(j1, "started"), json_object_del(j2, "started");
    assert_true(json_equal(j1, j2));
    assert_int_equal(a.calls, b.calls);
    json_decref(j1), json_decref(j2);
    free(d1), free(d2);
}

/* --continue: a walk that ended with nothing more to remove is taken up at its last version;
 * with nothing new to remove it ends the same, judging only the root against naive again. */
static void finished_walk_taken_up_again(void **state)
{
    fixture *f = *state;
    fake_judge a = {0}, b = {0}, c = {0};
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = options(f, &a, &flag);
    o.restart = true;
    char *d1 = NULL, *d2 = NULL, *d3 = NULL;
    kl_error err = {0};
    assert_int_equal(kl_lineage_walk(f->task, &o, &d1, &err), KL_OK);
    o.restart = false;
    o.judge_user = &b;
    assert_int_equal(kl_lineage_walk(f->task, &o, &d2, &err), KL_OK);
    assert_int_equal(b.calls, 0); /* done: served as stored */
    o.reopen = true;
    o.judge_user = &c;
    assert_int_equal(kl_lineage_walk(f->task, &o, &d3, &err), KL_OK);
    json_t *j1 = json_loads(d1, 0, NULL), *j3 = json_loads(d3, 0, NULL);
    assert_true(json_equal(json_object_get(j1, "steps"), json_object_get(j3, "steps")));
    assert_string_equal(json_string_value(json_object_get(j3, "state")), "done");
    assert_string_equal(json_string_value(json_object_get(j3, "stop_reason")), "nothing more can be removed");
    assert_non_null(json_object_get(j3, "root_vs_naive"));
    assert_true(c.calls >= 1);
    assert_true(c.calls < a.calls);
    json_decref(j1), json_decref(j3);
    free(d1), free(d2), free(d3);
}

/* A naive.cu edited after a walk finished: a plain run judges the expert and the root against
 * it again (two judgements, nothing else), and the document keeps the new naive's hash. */
static void changed_naive_is_judged_again(void **state)
{
    fixture *f = *state;
    kl_error err = {0};
    char *dir = NULL;
    assert_int_equal(kl_tempdir("lineage-naive", &dir, &err), KL_OK);
    static const char *const files[] = {"task.json", "expert.cu", "naive.cu", "reference.c"};
    for (unsigned i = 0; i < 4; i++) {
        char *from = kl_path_join(f->task->dir, files[i]), *to = kl_path_join(dir, files[i]), *text = NULL;
        size_t len = 0;
        assert_int_equal(kl_file_read(from, 1 << 20, &text, &len, &err), KL_OK);
        assert_int_equal(kl_file_write(to, text, len, &err), KL_OK);
        free(from), free(to), free(text);
    }
    kl_task *task = NULL;
    assert_int_equal(kl_task_load(dir, &task, &err), KL_OK);
    fake_judge a = {0}, b = {0};
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = options(f, &a, &flag);
    o.restart = true;
    char *d1 = NULL, *d2 = NULL;
    assert_int_equal(kl_lineage_walk(task, &o, &d1, &err), KL_OK);

    char *naive = kl_path_join(dir, "naive.cu");
    static const char faster[] = "// OPT:naive:2 (the fake judge halves its time)\n";
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(kl_file_read(naive, 1 << 20, &text, &len, &err), KL_OK);
    kl_strbuf sb;
    kl_strbuf_init(&sb, 0);
    kl_strbuf_adds(&sb, faster);
    kl_strbuf_adds(&sb, text);
    char *edited = kl_strbuf_detach(&sb, NULL);
    assert_int_equal(kl_file_write(naive, edited, strlen(edited), &err), KL_OK);
    o.restart = false;
    o.judge_user = &b;
    assert_int_equal(kl_lineage_walk(task, &o, &d2, &err), KL_OK);
    assert_int_equal(b.calls, 2); /* the expert and the root, against the new naive */
    json_t *j1 = json_loads(d1, 0, NULL), *j2 = json_loads(d2, 0, NULL);
    assert_true(json_equal(json_object_get(j1, "steps"), json_object_get(j2, "steps")));
    double r1 = json_number_value(json_object_get(json_object_get(j1, "root_vs_naive"), "speedup"));
    double r2 = json_number_value(json_object_get(json_object_get(j2, "root_vs_naive"), "speedup"));
    assert_true(fabs(r2 - r1 / 2) < 1e-9);
    assert_string_not_equal(json_string_value(json_object_get(j1, "naive_sha256")),
                            json_string_value(json_object_get(j2, "naive_sha256")));
    json_decref(j1), json_decref(j2);
    free(d1), free(d2), free(naive), free(text), free(edited);
    kl_task_free(task);
    kl_remove_tree(dir, &err);
    free(dir);
}

/* Interrupt after every possible judgement; each time, resume to the end: the same lineage
 * as an uninterrupted walk, and no step twice. */
static void walk_resumes_after_interruption_at_every_point(void **state)
{
    fixture *f = *state;
    fake_judge full = {0};
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = options(f, &full, &flag);
    o.restart = true;
    char *ref = NULL;
    kl_error err = {0};
    assert_int_equal(kl_lineage_walk(f->task, &o, &ref, &err), KL_OK);
    char ref_names[256];
    step_names(ref, ref_names, sizeof ref_names);
    unsigned total = full.calls;
    assert_true(total > 5);

    for (unsigned k = 1; k < total; k++) {
        fake_judge fj = {0};
        flag = 0;
        fj.interrupt_after = k;
        fj.interrupt = &flag;
        kl_lineage_options oi = options(f, &fj, &flag);
        oi.restart = true;
        char *part = NULL;
        kl_status st = kl_lineage_walk(f->task, &oi, &part, &err);
        free(part);
        if (st == KL_OK) continue; /* the interruption came after the last judgement that checks it */
        assert_int_equal(st, KL_ERR_INTERRUPTED);
        flag = 0;
        fake_judge rest = {0};
        kl_lineage_options orr = options(f, &rest, &flag);
        char *done = NULL;
        assert_int_equal(kl_lineage_walk(f->task, &orr, &done, &err), KL_OK);
        char names[256];
        step_names(done, names, sizeof names);
        assert_string_equal(names, ref_names);
        /* nothing was judged twice across the two runs beyond the version in progress */
        assert_true(fj.calls + rest.calls <= total + 8);
        free(done);
    }
    free(ref);
}

/* Store visitor: keep a copy of the first document, stop. */
static bool first_doc(const char *key, const char *json, void *user)
{
    (void)key;
    *(char **)user = kl_strdup(json);
    return false;
}

/* Slower at the small probes, not at the bench shape (where the step was measured at its
 * gain): a size threshold, and no modulus (any divisor of the bench size would "explain" it). */
static void speed_conditions_are_thresholds_against_the_bench_shape(void **state)
{
    fixture *f = *state;
    json_t *faster = json_pack("[{s:i}]", "n", 1048576);
    json_t *slower = json_pack("[{s:i}, {s:i}]", "n", 100, "n", 1021);
    json_t *c = kl_probe_conditions(f->task, faster, slower, "slower");
    assert_int_equal(json_array_size(c), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(c, 0), "predicate")), "n >= 1048576");
    assert_string_equal(json_string_value(json_object_get(json_array_get(c, 0), "kind")), "probed-perf");
    json_decref(c);
    /* for correctness the modulus is still learned */
    json_t *passed = json_pack("[{s:i}, {s:i}]", "n", 1024, "n", 4096), *wrong = json_pack("[{s:i}]", "n", 1021);
    c = kl_probe_conditions(f->task, passed, wrong, "wrong");
    assert_string_equal(json_string_value(json_object_get(json_array_get(c, 0), "predicate")), "n % 256 == 0");
    json_decref(c);
    json_decref(faster), json_decref(slower), json_decref(passed), json_decref(wrong);
}

static void probing_learns_divisibility_and_cards_carry_it(void **state)
{
    fixture *f = *state;
    fake_judge fj = {0};
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = options(f, &fj, &flag);
    o.restart = true;
    o.probes = 4;
    char *doc = NULL;
    kl_error err = {0};
    kl_status st = kl_lineage_walk(f->task, &o, &doc, &err);
    if (st != KL_OK) fprintf(stderr, "walk: %s\n", err.message);
    assert_int_equal(st, KL_OK);
    if (getenv("KL_TEST_VERBOSE")) fprintf(stderr, "%s\n", doc);
    json_t *d = json_loads(doc, 0, NULL);
    json_t *beta = json_array_get(json_object_get(d, "steps"), 0);
    assert_string_equal(json_string_value(json_object_get(beta, "transform")), "beta");
    json_t *probes = json_object_get(beta, "probes");
    assert_true(json_array_size(probes) >= 2);
    /* beta (":mod4") is wrong at n = 1021 and n = 3: the condition n % 4 == 0 is learned */
    json_t *conds = json_object_get(beta, "conditions");
    size_t i;
    json_t *c;
    bool found = false;
    json_array_foreach(conds, i, c) {
        const char *p = json_string_value(json_object_get(c, "predicate"));
        if (p && !strcmp(p, "n % 4 == 0")) found = true;
    }
    assert_true(found);
    json_decref(d);

    unsigned n = 0;
    assert_int_equal(kl_lineage_extract_skills(f->store, doc, &n, &err), KL_OK);
    assert_int_equal(n, 3);
    /* the beta card: a probed precondition, risks pointing at verdicts, requires the rest */
    char *card = NULL;
    assert_int_equal(kl_store_each(f->store, "skill", "beta-", first_doc, &card, &err), KL_OK);
    assert_non_null(card);
    json_t *cj = json_loads(card, 0, NULL);
    assert_non_null(cj);
    bool probed = false;
    json_array_foreach(json_object_get(cj, "preconditions"), i, c)
        if (!strcmp(json_string_value(json_object_get(c, "kind")), "probed")) probed = true;
    assert_true(probed);
    assert_true(json_array_size(json_object_get(cj, "risks")) >= 1);
    json_t *risk = json_array_get(json_object_get(cj, "risks"), 0);
    assert_string_equal(json_string_value(json_object_get(risk, "broke")), "wrong");
    assert_int_equal(strlen(json_string_value(json_object_get(risk, "verdict"))), 64);
    /* beta was removed first, so the simpler side still had alpha and delta */
    assert_int_equal(json_array_size(json_object_get(cj, "requires")), 2);
    /* effect: the measured gain, reversed (1.5x) */
    double gain = json_number_value(json_object_get(json_array_get(json_object_get(cj, "effect"), 0), "speedup"));
    assert_true(fabs(gain - 1.5) < 1e-9);
    json_decref(cj);
    free(card);
    free(doc);
}

/* Steps that gain less than --probe-min-gain are not probed, and say so; the others are. */
static void probing_skips_steps_within_the_gain_floor(void **state)
{
    fixture *f = *state;
    fake_judge fj = {0};
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = options(f, &fj, &flag);
    o.restart = true;
    o.probes = 2;
    o.probe_min_gain = 1.6; /* beta gains 1.5: skipped; alpha 2.0 and delta 3.0: probed */
    char *doc = NULL;
    kl_error err = {0};
    assert_int_equal(kl_lineage_walk(f->task, &o, &doc, &err), KL_OK);
    json_t *d = json_loads(doc, 0, NULL);
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(d, "steps"), i, s) {
        const char *t = json_string_value(json_object_get(s, "transform"));
        bool skipped = json_object_get(s, "probe_skipped") != NULL;
        assert_int_equal(skipped, !strcmp(t, "beta"));
        assert_int_equal(json_array_size(json_object_get(s, "probes")), skipped ? 0 : 2);
    }
    json_decref(d);
    free(doc);
}

static void merge_keeps_agreement_and_shows_contradictions(void **state)
{
    (void)state;
    const char *a = "{\"id\":\"vectorize-abc123\",\"preconditions\":[{\"predicate\":\"cols % 4 == 0\",\"kind\":\"probed\","
                    "\"evidence\":[\"e1\"]},{\"predicate\":\"rows >= 132\",\"kind\":\"probed\"}],"
                    "\"evidence\":{\"lineages\":[\"L1\"],\"verdicts\":[\"v1\"]},\"effect\":[{\"speedup\":1.5}],"
                    "\"risks\":[],\"probes\":{\"count\":4,\"failures\":1}}";
    const char *b = "{\"id\":\"vectorize-abc123\",\"preconditions\":[{\"predicate\":\"cols % 4 == 0\",\"kind\":\"probed\","
                    "\"evidence\":[\"e2\"]}],"
                    "\"evidence\":{\"lineages\":[\"L2\"],\"verdicts\":[\"v2\"]},\"effect\":[{\"speedup\":1.3}],"
                    "\"risks\":[{\"broke\":\"wrong\"}],\"probes\":{\"count\":5,\"failures\":0}}";
    char *m = NULL;
    kl_error err = {0};
    assert_int_equal(kl_skill_merge(a, b, &m, &err), KL_OK);
    json_t *j = json_loads(m, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(j, "preconditions")), 1);
    json_t *kept = json_array_get(json_object_get(j, "preconditions"), 0);
    assert_string_equal(json_string_value(json_object_get(kept, "predicate")), "cols % 4 == 0");
    assert_int_equal(json_array_size(json_object_get(kept, "evidence")), 2);
    json_t *contra = json_object_get(j, "contradictions");
    assert_int_equal(json_array_size(contra), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(contra, 0), "predicate")), "rows >= 132");
    assert_string_equal(json_string_value(json_object_get(json_array_get(contra, 0), "held_in")), "L1");
    assert_int_equal(json_array_size(json_object_get(j, "effect")), 2);
    assert_int_equal(json_array_size(json_object_get(json_object_get(j, "evidence"), "lineages")), 2);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "probes"), "count")), 9);
    assert_int_equal(json_array_size(json_object_get(j, "risks")), 1);
    json_decref(j);
    free(m);
    /* different ids do not merge */
    const char *c = "{\"id\":\"unroll-000000\"}";
    assert_int_equal(kl_skill_merge(a, c, &m, &err), KL_ERR_INVALID);
}

static void hunk_shows_the_changed_lines_with_context(void **state)
{
    (void)state;
    char *b = NULL, *a = NULL;
    unsigned line = 0;
    kl_text_hunk("one\ntwo\nthree\nfour\n", "one\ntwo\nTHREE\nfour\n", &b, &a, &line);
    assert_string_equal(b, "two\nthree\nfour\n");
    assert_string_equal(a, "two\nTHREE\nfour\n");
    assert_int_equal(line, 2);
    free(b), free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hunk_shows_the_changed_lines_with_context),
        cmocka_unit_test(merge_keeps_agreement_and_shows_contradictions),
        cmocka_unit_test_setup_teardown(walk_removes_cheapest_first_and_keeps_rejections, setup, teardown),
        cmocka_unit_test_setup_teardown(racy_removal_is_not_admitted, setup, teardown),
        cmocka_unit_test_setup_teardown(lazy_walk_takes_the_same_steps_with_fewer_judgements, setup, teardown),
        cmocka_unit_test(a_removal_that_unblocks_another_is_simpler),
        cmocka_unit_test(removal_revealing_what_it_held_is_simpler),
        cmocka_unit_test_setup_teardown(walk_is_deterministic, setup, teardown),
        cmocka_unit_test_setup_teardown(finished_walk_taken_up_again, setup, teardown),
        cmocka_unit_test_setup_teardown(changed_naive_is_judged_again, setup, teardown),
        cmocka_unit_test_setup_teardown(walk_resumes_after_interruption_at_every_point, setup, teardown),
        cmocka_unit_test_setup_teardown(speed_conditions_are_thresholds_against_the_bench_shape, setup, teardown),
        cmocka_unit_test_setup_teardown(probing_learns_divisibility_and_cards_carry_it, setup, teardown),
        cmocka_unit_test_setup_teardown(probing_skips_steps_within_the_gain_floor, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
