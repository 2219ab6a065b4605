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

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/lineage.h"
#include "klineage/skills.h"
#include "klineage/syntax.h"
#include "lineage/lineage_int.h"
#include "util/util.h"

typedef struct fake_judge {
    unsigned calls;
    unsigned profiled, bench_vs_baseline, sanitized; /* judgements asking for each flag */
    const char *racy;                 /* the removal of this optimization fails the sanitizer stages */
    unsigned interrupt_after;         /* 0: never */
    volatile sig_atomic_t *interrupt;
} fake_judge;

/* The function a marker is in: the name before the first '(' of the last line above it that
 * starts at column 0 with a letter and holds a '(' (as tests/helpers/kl_fake_rewriter.c reads it). */
static void marker_function(const char *text, const char *at, char *name, size_t size)
{
    name[0] = '\0';
    for (const char *p = text; p < at;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *paren = memchr(p, '(', n);
        if ((isalpha((unsigned char)*p) || *p == '_') && paren && strncmp(p, "template", 8) != 0) {
            const char *b = paren;
            while (b > p && (isalnum((unsigned char)b[-1]) || b[-1] == '_')) b--;
            if (b < paren) kl_snprintf(name, size, "%.*s", (int)(paren - b), b);
        }
        if (!e) break;
        p = e + 1;
    }
}

/* Time of a text at the task's bench shape: the product of the factors of its markers
 * ("OPT:name:factor" and the unremovable "BASE:factor"), inverted (more optimizations, less
 * time): t = 1 / prod(factor) — counting only the markers of functions that launch() runs at
 * that shape (a kernel the shape does not launch costs nothing and gains nothing). */
static double fake_time(const kl_task *task, const char *text)
{
    kl_source *src = NULL;
    kl_error err = {0};
    if (task && kl_source_parse_text("judged.cu", text, strlen(text), &src, &err) != KL_OK) src = NULL;
    double t = 1.0;
    static const char *const marks[] = {"OPT:", "BASE:"};
    for (unsigned m = 0; m < 2; m++)
        for (const char *p = strstr(text, marks[m]); p; p = strstr(p + 4, marks[m])) {
            const char *num = m == 0 ? strchr(p + 4, ':') : p + 4; /* the ':' before the factor */
            if (!num) continue;
            if (src) {
                char fn[96];
                marker_function(text, p, fn, sizeof fn);
                if (fn[0] && kl_skill_runs_at(src, task, &task->bench, fn) < 0) continue;
            }
            double factor = atof(num + 1);
            /* ":slowbelow=N": this optimization makes the kernel slower where n < N */
            const char *eol = strchr(p, '\n'), *sb = strstr(p, ":slowbelow=");
            if (sb && (!eol || sb < eol) && task && task->bench.values[0] < atoll(sb + 11)) factor = 1.0 / factor;
            t /= factor;
        }
    kl_source_free(src);
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
    out->cand_ms = fake_time(task, cand_text);
    out->base_ms = base_text ? fake_time(task, base_text) : -1;
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

/* judge_many as a pool would call it: counted, then one by one through the fake judge */
static unsigned batches, batched;
static kl_status judge_many_fn(void *user, const kl_task *task, unsigned n, const kl_judge_request *reqs,
                               kl_judgement *outs, unsigned *done, kl_error *err)
{
    batches++;
    batched += n;
    return kl_judge_many_sequential(judge_fn, user, task, n, reqs, outs, done, err);
}

static void a_versions_proposals_are_judged_in_one_batch(void **state)
{
    fixture *f = *state;
    char names[2][256];
    unsigned calls[2];
    for (int k = 0; k < 2; k++) {
        fake_judge fj = {0};
        volatile sig_atomic_t flag = 0;
        kl_lineage_options o = options(f, &fj, &flag);
        o.full = true;
        o.restart = true;
        if (k == 1) o.judge_many = judge_many_fn;
        batches = batched = 0;
        char *doc = NULL;
        kl_error err = {0};
        kl_status st = kl_lineage_walk(f->task, &o, &doc, &err);
        if (st != KL_OK) fail_msg("walk %d: %s", k, err.message);
        step_names(doc, names[k], sizeof names[k]);
        calls[k] = fj.calls;
        free(doc);
    }
    /* the same walk, with the same judgements, most of them asked for in batches */
    assert_string_equal(names[0], names[1]);
    assert_int_equal(calls[0], calls[1]);
    assert_true(batches >= 1);
    assert_true(batched >= 2 * batches);
    assert_true(batched <= calls[1]);
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
    /* the root's acc[UNROLL] partial sums fold into one first (accumulators) */
    assert_string_equal(names, "accumulators,block-reduce,grid-stride");
    /* 5: also the block sum's shared tree, sequential addressing (tree-addressing; block-reduce
     * removes it with the helper), and the partial sums in acc[UNROLL] (accumulators) */
    assert_int_equal(recognized_at(d, 0), 5);
    /* one element per thread into one accumulator, one atomic per thread (block-reduce's `v += e`
     * is `mine += acc` once accumulators has folded acc[UNROLL]) */
    assert_non_null(strstr(root_of(d), "if (j < (size_t)n) acc += x[j];"));
    assert_non_null(strstr(root_of(d), "atomicAdd(out, acc);"));
    assert_null(strstr(root_of(d), "g_blocks_done"));
    json_decref(d);
}

/* A removal that leaves as many optimizations as before is still simpler when one of its own
 * kind is gone: the sgemm register tile holds shared tiles staged through lambdas (recognized by
 * smem-tile's lambda form, not removable there: the transposed A tile is stored at `a_k + e`);
 * removing the register tile writes them as the classic tiles, and the walk goes on to the naive
 * loop. */
static void removal_revealing_what_it_held_is_simpler(void **state)
{
    (void)state;
    json_t *d = walk_rules_from("sgemm", "sgemm_root.cu");
    char *text = json_dumps(d, 0);
    char names[256];
    step_names(text, names, sizeof names);
    free(text);
    assert_string_equal(names, "register-tile,smem-tile");
    assert_int_equal(recognized_at(d, 0), 2);
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

/* {shape, roles} items for kl_probe_conditions: a task size n that is the contiguous axis, the
 * independent rows a 64th of it. */
static json_t *items(const int *ns, unsigned count)
{
    json_t *a = json_array();
    for (unsigned i = 0; i < count; i++)
        json_array_append_new(a, json_pack("{s:{s:i}, s:{s:i, s:i, s:i}}", "shape", "n", ns[i], "roles",
                                           "contiguous_extent", ns[i], "independent_rows", ns[i] / 64 + 1,
                                           "elements", ns[i]));
    return a;
}

/* Conditions are over sizes by role, never the task's size names. Slower at the small probes, not
 * at the bench shape (where the step was measured at its gain): a threshold on the independent
 * rows (speed looks at the work first) with the bracket the evidence leaves, and no modulus (any
 * divisor of the bench size would "explain" it). */
static void speed_conditions_are_thresholds_against_the_bench_shape(void **state)
{
    (void)state;
    static const int fast[] = {1048576}, slow[] = {100, 1021};
    json_t *faster = items(fast, 1), *slower = items(slow, 2);
    json_t *c = kl_probe_conditions(faster, slower, "slower");
    assert_int_equal(json_array_size(c), 1);
    json_t *c0 = json_array_get(c, 0);
    assert_string_equal(json_string_value(json_object_get(c0, "predicate")), "independent_rows >= 16385");
    assert_string_equal(json_string_value(json_object_get(c0, "kind")), "probed-perf");
    json_t *br = json_object_get(c0, "bracket");
    assert_int_equal(json_integer_value(json_object_get(br, "fails")), 1021 / 64 + 1);
    assert_int_equal(json_integer_value(json_object_get(br, "holds")), 16385);
    assert_non_null(strstr(json_string_value(json_object_get(c0, "because")), "the boundary lies between"));
    assert_non_null(strstr(json_string_value(json_object_get(c0, "because")), "as do contiguous_extent"));
    char *ctext = json_dumps(c, 0);
    assert_null(strstr(ctext, "\"n >="));
    free(ctext);
    json_decref(c);
    /* for correctness the modulus is still learned, over the contiguous axis */
    static const int ok[] = {1024, 4096}, bad[] = {1021};
    json_t *passed = items(ok, 2), *wrong = items(bad, 1);
    c = kl_probe_conditions(passed, wrong, "wrong");
    assert_string_equal(json_string_value(json_object_get(json_array_get(c, 0), "predicate")),
                        "contiguous_extent % 256 == 0");
    json_decref(c);
    /* nothing separates: unexplained */
    static const int mix_ok[] = {100, 4096}, mix_bad[] = {1021};
    json_t *p2 = items(mix_ok, 2), *w2 = items(mix_bad, 1);
    json_object_set_new(json_object_get(json_array_get(p2, 0), "roles"), "contiguous_extent", json_integer(1021));
    c = kl_probe_conditions(p2, w2, "slower");
    assert_int_equal(json_array_size(c), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(c, 0), "kind")), "unexplained");
    json_decref(c);
    json_decref(faster), json_decref(slower), json_decref(passed), json_decref(wrong), json_decref(p2), json_decref(w2);
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
    /* beta (":mod4") is wrong at n = 1021 and n = 3: the condition is learned over the extent of the
     * contiguous axis of the site (n for a vector), not over the task's size n */
    json_t *conds = json_object_get(beta, "conditions");
    size_t i;
    json_t *c;
    bool found = false;
    json_array_foreach(conds, i, c) {
        const char *p = json_string_value(json_object_get(c, "predicate"));
        if (p && !strcmp(p, "contiguous_extent % 4 == 0")) found = true;
        assert_false(p && kl_str_starts(p, "n "));
    }
    assert_true(found);
    json_decref(d);

    kl_extract_stats xs;
    assert_int_equal(kl_lineage_extract_skills(f->store, f->task, doc, &xs, &err), KL_OK);
    assert_int_equal(xs.steps, 3);
    assert_int_equal(xs.cards, 3);
    assert_int_equal(xs.new_cards, 3);
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
    /* beta was removed first: the simpler side still had alpha and delta, but nothing showed beta
     * needs them (no removal of theirs was rejected while beta was there): requires nothing; the
     * lineage path says what came before it forward (delta, then alpha) */
    assert_int_equal(json_array_size(json_object_get(cj, "requires")), 0);
    json_t *lp = json_array_get(json_object_get(json_object_get(cj, "path"), "lineages"), 0);
    assert_int_equal(json_integer_value(json_object_get(lp, "step")), 3);
    assert_int_equal(json_array_size(json_object_get(lp, "before")), 2);
    assert_true(kl_str_starts(json_string_value(json_array_get(json_object_get(lp, "before"), 0)), "delta-"));
    assert_int_equal(json_array_size(json_object_get(lp, "after")), 0);
    json_t *follows = json_object_get(json_object_get(cj, "path"), "follows");
    assert_string_equal(json_string_value(json_object_get(json_array_get(follows, 0), "transform")), "alpha");
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


/* A walk of tests/data/lineage/dispatch (expert: the given file) with the fake judge, which
 * counts a marker only where launch() runs its function. */
static json_t *walk_dispatch(fixture *f, const char *expert_file, fake_judge *fj)
{
    const char *data = getenv("KL_TEST_DATA");
    char *dir = kl_path_join(data ? data : "tests/data", "lineage/dispatch");
    char *expert = kl_path_join(dir, expert_file);
    kl_task *task = NULL;
    kl_error err = {0};
    if (kl_task_load(dir, &task, &err) != KL_OK) fail_msg("%s", err.message);
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = options(f, fj, &flag);
    o.expert_path = expert;
    o.restart = true;
    char *doc = NULL;
    kl_status st = kl_lineage_walk(task, &o, &doc, &err);
    if (st != KL_OK) fail_msg("walk: %s", err.message);
    json_t *d = json_loads(doc, 0, NULL);
    assert_non_null(d);
    /* its cards: effects where the code ran */
    kl_extract_stats xs;
    if (kl_lineage_extract_skills(f->store, task, doc, &xs, &err) != KL_OK) fail_msg("%s", err.message);
    free(doc), free(expert), free(dir);
    kl_task_free(task);
    return d;
}

static double step_gain(const json_t *d, size_t k)
{
    return 1.0 / json_number_value(json_object_get(json_array_get(json_object_get(d, "steps"), k), "speedup"));
}

/* Gains where the code runs. The bench shape (n = 2048) runs the dispatch's fast kernel; the
 * general kernel's optimizations are deferred while the dispatch can be removed, the fast
 * path's are peeled before it, so each step is credited with what it changes at the bench
 * shape, and the gains multiply to the expert's speedup over the root. */
static void a_dispatch_is_removed_after_its_fast_path_and_before_its_general_path(void **state)
{
    fixture *f = *state;
    fake_judge fj = {0};
    json_t *d = walk_dispatch(f, "expert.cu", &fj);
    char *text = json_dumps(d, 0);
    char names[256];
    step_names(text, names, sizeof names);
    free(text);
    assert_string_equal(names, "fastopt,specialize,genunroll,rowpar");
    assert_true(fabs(step_gain(d, 0) - 1.5) < 1e-9);
    assert_true(fabs(step_gain(d, 1) - 4.0 / 3.3) < 1e-9); /* fast kernel over the general one, as it stands */
    assert_true(fabs(step_gain(d, 2) - 1.1) < 1e-9);
    assert_true(fabs(step_gain(d, 3) - 3.0) < 1e-9);
    double product = 1;
    for (size_t k = 0; k < 4; k++) product *= step_gain(d, k);
    assert_true(fabs(product - 6.0) < 1e-9); /* 4 x 1.5 over 1: the expert over the root */
    /* the general path's proposals were deferred at the first versions, and said why */
    json_t *v0 = json_array_get(json_object_get(d, "versions"), 0);
    assert_int_equal(json_array_size(json_object_get(v0, "deferred")), 2);
    assert_non_null(strstr(json_string_value(json_object_get(json_array_get(json_object_get(v0, "deferred"), 0), "why")),
                           "does not run at the bench shape"));
    /* no step was measured anywhere but the bench shape */
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(d, "steps"), i, s) assert_null(json_object_get(s, "shape"));
    json_decref(d);
}

/* With no dispatch to remove first, a step in a function the bench shape does not run is
 * measured at a shape that runs it (n > 4096 here), and its card says so (label "path"). */
static void a_step_off_the_bench_path_is_measured_where_it_runs(void **state)
{
    fixture *f = *state;
    fake_judge fj = {0};
    json_t *d = walk_dispatch(f, "expert_fixed.cu", &fj);
    char *text = json_dumps(d, 0);
    char names[256];
    step_names(text, names, sizeof names);
    free(text);
    assert_string_equal(names, "genunroll,fastopt,rowpar");
    json_t *steps = json_object_get(d, "steps");
    json_t *g = json_array_get(steps, 0), *r = json_array_get(steps, 2);
    assert_true(fabs(step_gain(d, 0) - 1.1) < 1e-9); /* at the bench shape it would be 1.00 */
    assert_true(fabs(step_gain(d, 2) - 3.0) < 1e-9);
    json_int_t n = json_integer_value(json_object_get(json_object_get(g, "shape"), "n"));
    assert_true(n > 4096);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(r, "shape"), "n")), n);
    assert_string_equal(json_string_value(json_object_get(g, "path_function")), "general_kernel");
    assert_null(json_object_get(json_array_get(steps, 1), "shape")); /* the fast path: at the bench shape */
    /* the card of rowpar: its gain where the code ran, labelled so */
    char *card = NULL;
    kl_error err = {0};
    assert_int_equal(kl_store_each(f->store, "skill", "rowpar-", first_doc, &card, &err), KL_OK);
    assert_non_null(card);
    json_t *cj = json_loads(card, 0, NULL);
    json_t *e0 = json_array_get(json_object_get(cj, "effect"), 0);
    assert_string_equal(json_string_value(json_object_get(e0, "label")), "path");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(e0, "shape"), "n")), n);
    assert_true(fabs(json_number_value(json_object_get(e0, "speedup")) - 3.0) < 1e-9);
    assert_true(json_is_true(json_object_get(json_object_get(e0, "context"), "runs_at_shape")));
    json_decref(cj);
    free(card);
    json_decref(d);
}

/* A slowdown the probes find is bisected between the largest size where it was slower and the
 * bench shape's: the condition states the bracket the bisection left (n < 5000 is slower here:
 * probes at 1021 and below, then 32719, 5780 and 2429). */
static void probing_bisects_a_slowdown_and_states_the_bracket(void **state)
{
    fixture *f = *state;
    fake_judge fj = {0};
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = options(f, &fj, &flag);
    o.restart = true;
    o.probes = 4;
    o.bisect = 3;
    char *expert = kl_path_join(f->task->dir, "expert_slow.cu");
    o.expert_path = expert;
    char *doc = NULL;
    kl_error err = {0};
    if (kl_lineage_walk(f->task, &o, &doc, &err) != KL_OK) fail_msg("walk: %s", err.message);
    json_t *d = json_loads(doc, 0, NULL);
    json_t *step = json_array_get(json_object_get(d, "steps"), 0);
    unsigned bisects = 0;
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(step, "probes"), i, p) if (json_is_true(json_object_get(p, "bisect"))) bisects++;
    assert_int_equal(bisects, 3);
    bool found = false;
    json_array_foreach(json_object_get(step, "conditions"), i, p) {
        const char *pred = json_string_value(json_object_get(p, "predicate"));
        if (!pred || strcmp(pred, "independent_rows >= 5780") != 0) continue;
        found = true;
        json_t *br = json_object_get(p, "bracket");
        assert_int_equal(json_integer_value(json_object_get(br, "fails")), 2429);
        assert_int_equal(json_integer_value(json_object_get(br, "holds")), 5780);
    }
    if (!found) {
        char *t = json_dumps(json_object_get(step, "conditions"), JSON_INDENT(1));
        fprintf(stderr, "%s\n", t);
        free(t);
    }
    assert_true(found);
    json_decref(d);
    free(doc);
    /* a stored walk probed without bisection is bisected when asked, and only once */
    fake_judge a = {0}, b = {0}, c = {0};
    o = options(f, &a, &flag);
    o.restart = true;
    o.probes = 4;
    o.expert_path = expert;
    assert_int_equal(kl_lineage_walk(f->task, &o, &doc, &err), KL_OK);
    free(doc);
    o.restart = false;
    o.bisect = 3;
    o.judge_user = &b;
    assert_int_equal(kl_lineage_walk(f->task, &o, &doc, &err), KL_OK);
    assert_int_equal(b.calls, 3);
    free(doc);
    o.judge_user = &c;
    assert_int_equal(kl_lineage_walk(f->task, &o, &doc, &err), KL_OK);
    assert_int_equal(c.calls, 0);
    free(doc);
    free(expert);
}

/* Roundtrip admission: each card applied forward, from the card alone, to the simpler version of
 * its own lineage and judged: the stand-in judge gives back the gains the walk measured, so the
 * cards are admitted; a card whose gain is within the floor is not tried, and says why. */
static void admission_applies_each_card_to_its_own_lineage(void **state)
{
    fixture *f = *state;
    fake_judge fj = {0};
    volatile sig_atomic_t flag = 0;
    kl_lineage_options o = options(f, &fj, &flag);
    o.restart = true;
    char *doc = NULL;
    kl_error err = {0};
    assert_int_equal(kl_lineage_walk(f->task, &o, &doc, &err), KL_OK);
    kl_extract_stats xs;
    assert_int_equal(kl_lineage_extract_skills(f->store, f->task, doc, &xs, &err), KL_OK);
    free(doc);
    fake_judge aj = {0};
    kl_admit_options ao = {0};
    ao.store = f->store;
    ao.rewriter = f->rw;
    ao.judge = judge_fn;
    ao.judge_user = &aj;
    const kl_task *tasks[] = {f->task};
    ao.tasks = tasks;
    ao.ntasks = 1;
    ao.min_gain = 1.6; /* beta gains 1.5: not tried */
    ao.probe_dir = f->probe_dir;
    char *report = NULL;
    if (kl_lineage_admit(&ao, &report, &err) != KL_OK) fail_msg("admit: %s", err.message);
    json_t *r = json_loads(report, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(r, "admitted")), 2);
    assert_int_equal(json_integer_value(json_object_get(r, "untried")), 1);
    assert_int_equal(aj.calls, 2);
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(r, "cards"), i, row) {
        const char *t = json_string_value(json_object_get(row, "transform"));
        json_t *adm = json_object_get(row, "admission");
        json_t *t0 = json_array_get(json_object_get(adm, "trials"), 0);
        if (!strcmp(t, "beta")) {
            assert_string_equal(json_string_value(json_object_get(adm, "status")), "untried");
            assert_non_null(strstr(json_string_value(json_object_get(t0, "detail")), "within noise"));
        } else {
            assert_string_equal(json_string_value(json_object_get(adm, "status")), "admitted");
            assert_string_equal(json_string_value(json_object_get(t0, "verdict")), "reproduced");
            assert_true(json_is_true(json_object_get(t0, "own")));
            double g = json_number_value(json_object_get(t0, "gain")), rec = json_number_value(json_object_get(t0, "recorded"));
            assert_true(fabs(g - rec) < 1e-9);
        }
    }
    json_decref(r);
    free(report);
    /* the admission is on the stored cards, and the library can be limited to them */
    kl_skill_list list = KL_SKILL_LIST_INIT;
    assert_int_equal(kl_skill_list_load(f->store, &list, &err), KL_OK);
    kl_skill_list_keep_admitted(&list);
    assert_int_equal(list.count, 2);
    kl_skill_list_release(&list);
}

/* The summary says how the root compares with the naive kernel in words that fit the ratio: a
 * root 1565x faster is not "0.00x"; each step's share of the expert's speedup, in log terms. */
static void summary_states_ratios_and_shares(void **state)
{
    (void)state;
    const char *doc = "{\"task\":\"t\",\"expert\":\"e.cu\",\"rewriter\":\"rules\",\"state\":\"done\","
                      "\"expert_verdict\":{\"speedup\":100.0},\"root_vs_naive\":{\"speedup\":1565.0},"
                      "\"steps\":[{\"transform\":\"b\",\"site\":\"k:2\",\"speedup\":0.1},"
                      "{\"transform\":\"a\",\"site\":\"k:1\",\"speedup\":0.1,\"shape\":{\"n\":8192}}],\"rejected\":[]}";
    char *md = kl_lineage_markdown(doc), *md2 = NULL;
    assert_non_null(md);
    assert_null(strstr(md, " 0.00x"));
    assert_non_null(strstr(md, "The root is 1565x faster than the naive kernel: it takes 0.00064x its time"));
    assert_non_null(strstr(md, "| 10.00x | 50 % | path: n=8192 |"));
    assert_non_null(strstr(md, "| 10.00x | 50 % | bench |"));
    assert_non_null(strstr(md, "carries 50 % of the expert's 100x over the naive kernel"));
    /* a root a little slower than naive: "takes 1.03x" */
    char *d2 = kl_strdup(doc);
    char *at = strstr(d2, "1565.0");
    memcpy(at, "0.9700", 6);
    md2 = kl_lineage_markdown(d2);
    assert_non_null(strstr(md2, "The root takes 1.03x the naive kernel's time"));
    free(md2), free(d2);
    free(md);
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
        cmocka_unit_test(summary_states_ratios_and_shares),
        cmocka_unit_test(merge_keeps_agreement_and_shows_contradictions),
        cmocka_unit_test_setup_teardown(walk_removes_cheapest_first_and_keeps_rejections, setup, teardown),
        cmocka_unit_test_setup_teardown(racy_removal_is_not_admitted, setup, teardown),
        cmocka_unit_test_setup_teardown(a_versions_proposals_are_judged_in_one_batch, setup, teardown),
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
        cmocka_unit_test_setup_teardown(a_dispatch_is_removed_after_its_fast_path_and_before_its_general_path, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_step_off_the_bench_path_is_measured_where_it_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(probing_bisects_a_slowdown_and_states_the_bracket, setup, teardown),
        cmocka_unit_test_setup_teardown(admission_applies_each_card_to_its_own_lineage, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
