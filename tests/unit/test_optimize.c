/* src/optimize: the forward search with a deterministic stand-in judge.
 *
 * The judge here reads the rules catalog's own analysis of each candidate: a kernel's time is
 * 1 / (product of a factor per optimization the catalog sees present in it), so every gain
 * the search sees is computed from the text, and the test can predict what each policy does.
 * Transforms listed as broken fail at "correct". Cards are written here, and the runs go into
 * an in-memory store. */
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

#include "klineage/optimize.h"
#include "klineage/rewrite.h"
#include "klineage/skills.h"
#include "optimize/optimize_int.h"
#include "util/util.h"

typedef struct factor {
    const char *transform;
    double factor;
} factor;

/* What each optimization the catalog recognizes is worth to the stand-in judge. */
static const factor factors[] = {
    {"row-parallel", 6.0}, {"fast-math", 1.3}, {"vectorize", 1.5}, {"unroll", 1.02},
    {"launch-bounds", 1.01}, {"restrict", 1.0}, {"specialize", 1.1}, {"grid-stride", 0.8},
    {"block-size", 0.97},
};

typedef struct stand_in {
    unsigned calls;
    unsigned finals;          /* judgements asked with KL_JUDGE_SANITIZE */
    unsigned interrupt_after; /* 0: never */
    volatile sig_atomic_t *interrupt;
    const char *broken;       /* a transform whose presence fails at "correct", or NULL */
    bool blocks_matter;       /* __launch_bounds__(T, N) is worth 1 + N / 2 more (parameters that matter) */
    double final_factor;      /* 0, or what the final check measures beside the search (noise that misled it) */
} stand_in;

/* With stand_in.blocks_matter: what the minimum of blocks per multiprocessor is worth. */
static double blocks_factor(const char *text)
{
    const char *lb = strstr(text, "__launch_bounds__(");
    const char *comma = lb ? strchr(lb, ',') : NULL;
    const char *close = lb ? strchr(lb, ')') : NULL;
    return comma && close && comma < close ? 1 + atof(comma + 1) / 2 : 1;
}

/* What time_of found for a text (the catalog's analysis is the slow part of the stand-in: a run
 * judges the same versions again and again as baselines). Keyed by the text's hash, the task and
 * the broken transform; the answer is a function of those alone. */
typedef struct timed {
    char key[KL_HASH_HEX + 96];
    double t;
    bool bad;
} timed;
static timed memo[2048];
static unsigned nmemo;

static double analyse(const kl_task *task, const char *text, const char *broken, bool *bad);

static double time_of(const kl_task *task, const char *text, const char *broken, bool *bad)
{
    char hex[KL_HASH_HEX], key[sizeof memo[0].key];
    kl_hash_hex(text, strlen(text), hex);
    kl_snprintf(key, sizeof key, "%s|%s|%s", hex, task->name, broken ? broken : "");
    for (unsigned i = 0; i < nmemo; i++)
        if (!strcmp(memo[i].key, key)) {
            *bad = memo[i].bad;
            return memo[i].t;
        }
    double t = analyse(task, text, broken, bad);
    if (nmemo < sizeof memo / sizeof memo[0]) {
        kl_snprintf(memo[nmemo].key, sizeof memo[nmemo].key, "%s", key);
        memo[nmemo].t = t;
        memo[nmemo].bad = *bad;
        nmemo++;
    }
    return t;
}

static double analyse(const kl_task *task, const char *text, const char *broken, bool *bad)
{
    char *json = NULL;
    kl_error e = {0};
    double t = 1.0;
    *bad = false;
    if (kl_rules_list("stand-in.cu", text, strlen(text), task, NULL, &json, &e) != KL_OK) return 1.0;
    json_t *sites = json_loads(json, 0, NULL);
    free(json);
    size_t i;
    json_t *s;
    json_array_foreach(sites, i, s) {
        if (strcmp(json_string_value(json_object_get(s, "direction")), "present")) continue;
        const char *tr = json_string_value(json_object_get(s, "transform"));
        if (broken && !strcmp(tr, broken)) *bad = true;
        for (size_t k = 0; k < sizeof factors / sizeof factors[0]; k++)
            if (!strcmp(factors[k].transform, tr)) t /= factors[k].factor;
    }
    json_decref(sites);
    return t;
}

static kl_status stand_in_judge(void *user, const kl_task *task, const char *cand_name, const char *cand_text,
                                const char *base_name, const char *base_text, unsigned flags, kl_judgement *out,
                                kl_error *err)
{
    (void)cand_name, (void)base_name, (void)err;
    stand_in *si = user;
    si->calls++;
    if (flags & KL_JUDGE_SANITIZE) si->finals++;
    if (si->interrupt_after && si->calls >= si->interrupt_after) *si->interrupt = 1;
    bool bad = false, base_bad = false;
    double tc = time_of(task, cand_text, si->broken, &bad);
    double tb = time_of(task, base_text, NULL, &base_bad);
    if (si->blocks_matter) {
        tc /= blocks_factor(cand_text);
        tb /= blocks_factor(base_text);
    }
    out->pass = !bad;
    if (bad) {
        kl_snprintf(out->stage, sizeof out->stage, "correct");
        kl_snprintf(out->reason, sizeof out->reason, "rel_l2 0.5 at check[0]");
    }
    if ((flags & KL_JUDGE_SANITIZE) && si->final_factor > 0) tc /= si->final_factor;
    out->speedup = tb / tc;
    out->cand_ms = tc;
    out->base_ms = tb;
    kl_hash_hex(cand_text, strlen(cand_text), out->key);
    kl_snprintf(out->device, sizeof out->device, "stand-in");
    return KL_OK;
}

typedef struct fixture {
    kl_task *task;
    kl_store *store;
    kl_rewriter *rw;
    char dir[512];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    kl_error err = {0};
    const char *src = getenv("KL_SOURCE_DIR");
    assert_non_null(src);
    kl_snprintf(f->dir, sizeof f->dir, "%s/tasks/softmax", src);
    assert_int_equal(kl_task_load(f->dir, &f->task, &err), KL_OK);
    assert_int_equal(kl_store_open(":memory:", &f->store, &err), KL_OK);
    assert_int_equal(kl_rewriter_open("rules", NULL, &f->rw, &err), KL_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    kl_rewriter_free(f->rw);
    kl_store_close(f->store);
    kl_task_free(f->task);
    free(f);
    return 0;
}

static kl_optimize_options options(fixture *f, stand_in *si, kl_policy policy, unsigned budget)
{
    kl_optimize_options o = {0};
    o.policy = policy;
    o.budget = budget;
    o.seed = 1;
    o.sanitize_final = true;
    o.rewriter = f->rw;
    o.store = f->store;
    o.judge = stand_in_judge;
    o.judge_user = si;
    return o;
}

/* A card of `transform` that gained `gain` at the bench shape, with optional conditions
 * (a JSON array text) and lineage path (a JSON object text). */
static bool put_card(fixture *f, const char *id, const char *transform, double gain, const char *preconditions,
                     const char *path)
{
    bool path_kept = path != NULL;
    char text[2048];
    kl_snprintf(text, sizeof text,
                "{\"id\": \"%s\", \"transform\": \"%s\", \"intent\": \"test card\","
                " \"preconditions\": %s,"
                " \"effect\": [{\"label\": \"bench\", \"speedup\": %g, \"shape\": {\"rows\": 8192, \"cols\": 8192}}],"
                " \"evidence\": {\"task\": \"other\", \"lineages\": [\"%s-lineage\"]}%s%s}",
                id, transform, preconditions ? preconditions : "[]", gain, id, path ? ", \"x-path\": " : "",
                path ? path : "");
    /* the card format has no "path" key yet in every build: the test puts it as an x- key and
     * the optimizer reads "path"; copy it across */
    json_t *d = json_loads(text, 0, NULL);
    assert_non_null(d);
    if (path) {
        json_object_set(d, "path", json_object_get(d, "x-path"));
        json_object_del(d, "x-path");
    }
    char *t = json_dumps(d, JSON_COMPACT);
    json_decref(d);
    kl_error err = {0};
    kl_skill *card = NULL;
    kl_status st = kl_skill_parse(t, id, &card, &err);
    if (st != KL_OK) {
        /* a build whose card format does not know "path": keep it as an x- key */
        d = json_loads(t, 0, NULL);
        json_object_set(d, "x-path", json_object_get(d, "path"));
        json_object_del(d, "path");
        free(t);
        t = json_dumps(d, JSON_COMPACT);
        json_decref(d);
        st = kl_skill_parse(t, id, &card, &err);
        path_kept = false;
    }
    assert_int_equal(st, KL_OK);
    kl_skill_free(card);
    assert_int_equal(kl_skill_put(f->store, t, &err), KL_OK);
    free(t);
    return path_kept;
}

static json_t *run_doc(fixture *f, kl_optimize_options *o, kl_status want)
{
    kl_error err = {0};
    char *doc = NULL;
    kl_status st = kl_optimize_run(f->task, o, &doc, &err);
    if (st != want) fail_msg("kl_optimize_run: %s (%s)", kl_strerror(st), err.message);
    json_t *d = doc ? json_loads(doc, 0, NULL) : NULL;
    free(doc);
    return d;
}

static const char *round_str(const json_t *d, size_t r, const char *key)
{
    return json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(d, "rounds"), r),
                                                             "candidate"),
                                             key));
}

/* The run's Markdown report says `text`. */
static void assert_report_says(const json_t *d, const char *text)
{
    char *json = json_dumps(d, 0), *md = kl_optimize_markdown(json);
    assert_non_null(md);
    if (!strstr(md, text)) fail_msg("the report does not say \"%s\"", text);
    free(json), free(md);
}

/* ---- the budget ------------------------------------------------------------------------------ */

static void test_budget_is_spent_exactly(void **state)
{
    fixture *f = *state;
    for (unsigned budget = 2; budget <= 9; budget += 7) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_BLIND, budget);
        o.restart = true;
        json_t *d = run_doc(f, &o, KL_OK);
        assert_string_equal(json_string_value(json_object_get(d, "state")), "done");
        assert_int_equal(json_integer_value(json_object_get(d, "gate_calls")), si.calls);
        assert_true(si.calls <= budget);
        /* every round is a judgement, and one call is kept for the final check */
        assert_int_equal(json_array_size(json_object_get(d, "rounds")), budget - 1);
        if (json_integer_value(json_object_get(d, "best")) > 0) {
            assert_int_equal(si.calls, budget);
            assert_int_equal(si.finals, 1);
        }
        assert_string_equal(json_string_value(json_object_get(d, "stop_reason")), "budget");
        json_decref(d);
    }
}

static void test_budget_too_small_is_refused(void **state)
{
    fixture *f = *state;
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_BLIND, 1);
    kl_error err = {0};
    assert_int_equal(kl_optimize_run(f->task, &o, NULL, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "budget of 1"));
    assert_int_equal(si.calls, 0);
}

/* ---- the skills policy -------------------------------------------------------------------- */

/* The rounds of a run in the cards' order: not closed doors nor variants of a step that paid
 * (ranking 3 tries those first, test_a_step_that_closes_a_door and
 * test_a_winning_steps_variants_keep_its_parent_open): their indices into d's rounds, at most max. */
static size_t in_card_order(const json_t *d, size_t *idx, size_t max)
{
    size_t n = 0, i;
    json_t *r;
    json_array_foreach(json_object_get(d, "rounds"), i, r) {
        const json_t *c = json_object_get(r, "candidate");
        if (json_is_true(json_object_get(c, "door")) || json_is_true(json_object_get(c, "variant"))) continue;
        if (n < max) idx[n++] = i;
    }
    return n;
}

static void test_skills_rank_by_card_gain(void **state)
{
    fixture *f = *state;
    put_card(f, "fast-math-t1", "fast-math", 1.3, NULL, NULL);
    put_card(f, "row-parallel-t1", "row-parallel", 6.0, NULL, NULL);
    put_card(f, "launch-bounds-t1", "launch-bounds", 1.01, NULL, NULL);
    for (unsigned ranking = 2; ranking <= 3; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 8);
        o.ranking = ranking;
        json_t *d = run_doc(f, &o, KL_OK);
        size_t ix[16];
        assert_true(in_card_order(d, ix, 16) >= 3);
        if (ranking == 2) assert_int_equal(ix[2], 2);
        /* the card that gained most is tried first, then the next */
        assert_int_equal(ix[0], 0);
        assert_string_equal(round_str(d, 0, "transform"), "row-parallel");
        assert_string_equal(round_str(d, 0, "card"), "row-parallel-t1");
        assert_string_equal(round_str(d, ix[1], "transform"), "fast-math");
        /* then a proposal no card speaks for, before the card whose gain is noise (1.01x), which is
         * deferred: tried after every proposal expected to pay, from whatever version */
        assert_string_not_equal(round_str(d, ix[2], "transform"), "launch-bounds");
        assert_non_null(strstr(round_str(d, ix[2], "why"), "no card of"));
        assert_null(json_object_get(json_object_get(json_array_get(json_object_get(d, "rounds"), ix[2]), "candidate"),
                                    "deferred"));
        /* the returned kernel holds both */
        double cum = json_number_value(json_object_get(json_array_get(json_object_get(d, "versions"),
                                                                      (size_t)json_integer_value(json_object_get(d, "best"))),
                                                       "cum"));
        assert_true(cum > 6.0 * 1.3 * 0.99);
        json_decref(d);
    }
}

static void test_failing_condition_skips_the_card(void **state)
{
    fixture *f = *state;
    /* softmax's check shapes include cols = 1 and 1023: a condition cols % 4 == 0 fails there */
    put_card(f, "fast-math-mod4", "fast-math", 1.3,
             "[{\"predicate\": \"cols % 4 == 0\", \"kind\": \"probed\", \"verified\": true}]", NULL);
    put_card(f, "row-parallel-t1", "row-parallel", 6.0, NULL, NULL);
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 40);
    json_t *d = run_doc(f, &o, KL_OK);
    /* the trace says which card was skipped, for which predicate, at which shape */
    json_t *sk = json_object_get(d, "skipped");
    bool found = false;
    size_t i;
    json_t *s;
    json_array_foreach(sk, i, s) {
        if (strcmp(json_string_value(json_object_get(s, "card")), "fast-math-mod4")) continue;
        found = true;
        assert_string_equal(json_string_value(json_object_get(s, "predicate")), "cols % 4 == 0");
        /* the first shape where it fails: "check[k] {rows=…, cols=…}" with cols not a multiple of 4 */
        const char *shape = json_string_value(json_object_get(s, "shape"));
        assert_non_null(shape);
        const char *cols = strstr(shape, "cols=");
        assert_non_null(cols);
        assert_true(atol(cols + 5) % 4 != 0);
    }
    assert_true(found);
    /* and the card was never tried: its transform's proposals come last, as the catalog's own,
     * ranked as a loss, saying which card failed for which predicate */
    json_t *r;
    assert_string_equal(round_str(d, 0, "transform"), "row-parallel");
    size_t fast = 0;
    json_array_foreach(json_object_get(d, "rounds"), i, r) {
        if (strcmp(round_str(d, i, "transform"), "fast-math")) continue;
        fast++;
        assert_null(round_str(d, i, "card"));
        assert_non_null(strstr(round_str(d, i, "why"), "fast-math-mod4: cols % 4 == 0"));
        const json_t *cand = json_object_get(r, "candidate");
        assert_true(json_number_value(json_object_get(cand, "expect")) < 1.0);
        assert_true(json_is_true(json_object_get(cand, "deferred")));
    }
    /* with budget to spare it is still tried: the frontier does not empty while the catalog has work */
    assert_true(fast > 0);
    /* the report says so too */
    char *text = json_dumps(d, 0);
    char *md = kl_optimize_markdown(text);
    assert_non_null(md);
    assert_non_null(strstr(md, "fast-math-mod4"));
    assert_non_null(strstr(md, "cols % 4 == 0"));
    free(md);
    free(text);
    json_decref(d);
}

/* A card whose static condition is one of the rule's own features of the site it was learned
 * at (its anchor.pattern.site_features: here, how the kernel returns) still speaks where that
 * feature differs, at half weight, and says it is unlike the site; the same condition on an
 * observable the card states (dtype) skips it as ever. */
static void test_a_card_unlike_the_site_still_speaks(void **state)
{
    fixture *f = *state;
    static const char *const cards[] = {
        "{\"id\": \"row-parallel-ret\", \"transform\": \"row-parallel\", \"intent\": \"test card\","
        " \"anchor\": {\"kernel\": \"k\", \"site\": \"k:3\", \"pattern\": {\"transform\": \"row-parallel\","
        " \"site_features\": {\"early_return\": true}}},"
        " \"preconditions\": [{\"predicate\": \"early_return == true\", \"kind\": \"static\", \"verified\": true}],"
        " \"effect\": [{\"label\": \"bench\", \"speedup\": 6.0}], \"evidence\": {\"task\": \"other\"}}",
        "{\"id\": \"fast-math-f64\", \"transform\": \"fast-math\", \"intent\": \"test card\","
        " \"anchor\": {\"kernel\": \"k\", \"site\": \"k:3\", \"pattern\": {\"transform\": \"fast-math\","
        " \"site_features\": {\"early_return\": true}}},"
        " \"preconditions\": [{\"predicate\": \"dtype == \\\"f64\\\"\", \"kind\": \"static\", \"verified\": true}],"
        " \"effect\": [{\"label\": \"bench\", \"speedup\": 9.0}], \"evidence\": {\"task\": \"other\"}}",
    };
    kl_error err = {0};
    for (unsigned i = 0; i < 2; i++) assert_int_equal(kl_skill_put(f->store, cards[i], &err), KL_OK);
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 4);
    o.ranking = 3; /* ranking 4 reads a card's dtype as unlike too (test_ranking4_a_cards_dtype_is_unlike) */
    json_t *d = run_doc(f, &o, KL_OK);
    /* softmax's naive kernel guards its row with an if block, not a return: the row-parallel card
     * is unlike it, speaks all the same and goes first */
    assert_string_equal(round_str(d, 0, "transform"), "row-parallel");
    assert_string_equal(round_str(d, 0, "card"), "row-parallel-ret");
    assert_non_null(strstr(round_str(d, 0, "why"), "unlike the site it was learned at (early_return == true)"));
    double e = json_number_value(json_object_get(json_object_get(json_array_get(json_object_get(d, "rounds"), 0),
                                                                 "candidate"),
                                                 "expect"));
    assert_true(e > 1.05 && e < 6.0); /* at half weight: 1 + (6 - 1) / 2 */
    assert_true(fabs(e - 3.5) < 1e-9);
    /* the f32 kernel fails the f64 card: skipped, said so */
    bool skipped = false;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(d, "skipped"), i, s) skipped |= !strcmp(json_string_value(json_object_get(s, "card")), "fast-math-f64");
    assert_true(skipped);
    json_array_foreach(json_object_get(d, "skipped"), i, s) assert_string_not_equal(json_string_value(json_object_get(s, "card")), "row-parallel-ret");
    json_decref(d);
}

static void test_unknown_condition_ranks_lower(void **state)
{
    fixture *f = *state;
    /* same gain, one card with a condition on a feature no kernel has: it comes second */
    put_card(f, "fast-math-unknown", "fast-math", 1.3,
             "[{\"predicate\": \"no_such_feature == 1\", \"kind\": \"static\", \"verified\": true}]", NULL);
    put_card(f, "restrict-t1", "restrict", 1.25, NULL, NULL);
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 6);
    json_t *d = run_doc(f, &o, KL_OK);
    /* every restrict proposal (restrict has two: with and without __ldg) before fast-math */
    size_t r = 0;
    while (r < json_array_size(json_object_get(d, "rounds")) && !strcmp(round_str(d, r, "transform"), "restrict")) r++;
    assert_true(r >= 1);
    assert_true(r < json_array_size(json_object_get(d, "rounds")));
    assert_string_equal(round_str(d, r, "transform"), "fast-math");
    assert_non_null(strstr(round_str(d, r, "why"), "unknown"));
    json_decref(d);
}

static void test_lineage_path_is_followed(void **state)
{
    fixture *f = *state;
    /* after row-parallel, the card that came next in its lineage (unroll, 1.2) goes before a
     * card that gained more elsewhere (fast-math, 1.3) — under either ranking, a closed door
     * aside */
    put_card(f, "row-parallel-t1", "row-parallel", 6.0, NULL, NULL);
    put_card(f, "fast-math-t1", "fast-math", 1.3, NULL, NULL);
    if (!put_card(f, "unroll-t1", "unroll", 1.2, NULL, "{\"follows\": [{\"transform\": \"row-parallel\"}]}"))
        skip(); /* this build's card format has no "path" (docs/skill-card.md) */
    for (unsigned ranking = 2; ranking <= 3; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 6);
        o.ranking = ranking;
        json_t *d = run_doc(f, &o, KL_OK);
        size_t ix[16];
        assert_true(in_card_order(d, ix, 16) >= 2);
        assert_string_equal(round_str(d, ix[0], "transform"), "row-parallel");
        assert_string_equal(round_str(d, ix[1], "transform"), "unroll");
        json_decref(d);
    }
}

static void test_empty_library_is_an_error(void **state)
{
    fixture *f = *state;
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 5);
    kl_error err = {0};
    assert_int_equal(kl_optimize_run(f->task, &o, NULL, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "no cards"));
    assert_int_equal(si.calls, 0);
}

static void test_leave_out_drops_a_tasks_cards(void **state)
{
    fixture *f = *state;
    put_card(f, "row-parallel-t1", "row-parallel", 6.0, NULL, NULL); /* evidence.task "other" */
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 4);
    o.leave_out = "other";
    kl_error err = {0};
    /* the only lineage's task is left out: nothing remains */
    assert_int_equal(kl_optimize_run(f->task, &o, NULL, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "left-out"));
    o.leave_out = "elsewhere";
    json_t *d = run_doc(f, &o, KL_OK);
    assert_string_equal(round_str(d, 0, "card"), "row-parallel-t1");
    json_decref(d);
}

/* ---- blind and memory -------------------------------------------------------------------- */

static void test_blind_order_is_seeded(void **state)
{
    fixture *f = *state;
    char seq[3][512];
    for (int k = 0; k < 3; k++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_BLIND, 6);
        o.seed = k == 2 ? 2 : 1;
        o.restart = true;
        json_t *d = run_doc(f, &o, KL_OK);
        kl_strbuf sb = KL_STRBUF_INIT;
        for (size_t r = 0; r < json_array_size(json_object_get(d, "rounds")); r++)
            kl_strbuf_addf(&sb, "%s;", round_str(d, r, "id"));
        kl_snprintf(seq[k], sizeof seq[k], "%s", kl_strbuf_str(&sb));
        kl_strbuf_release(&sb);
        json_decref(d);
    }
    assert_string_equal(seq[0], seq[1]);     /* same seed, same run */
    assert_string_not_equal(seq[0], seq[2]); /* another seed, another order */
}

/* A round's (transform, site, parameters) as one string. */
static void edit_of(const json_t *round, char *buf, size_t size)
{
    const json_t *c = json_object_get(round, "candidate");
    char *p = json_dumps(json_object_get(c, "params"), JSON_COMPACT | JSON_SORT_KEYS);
    kl_snprintf(buf, size, "%s@%s %s", json_string_value(json_object_get(c, "transform")),
                json_string_value(json_object_get(c, "site")), p ? p : "");
    free(p);
}

static void test_noise_steps_do_not_multiply(void **state)
{
    fixture *f = *state;
    /* blind: launch-bounds (1.01x, four parameter values) and restrict (1.00x) pass without a new
     * best; each becomes a kept version */
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_BLIND, 48);
    o.restart = true;
    json_t *d = run_doc(f, &o, KL_OK);
    assert_int_equal(json_integer_value(json_object_get(d, "search")), OPT_SEARCH_REVISION);
    json_t *rounds = json_object_get(d, "rounds");
    size_t n = json_array_size(rounds);
    /* version -> (parent, result, variant) from the rounds that made them */
    json_int_t parent[64], variant[64];
    bool kept[64] = {0};
    for (size_t v = 0; v < 64; v++) parent[v] = -1, variant[v] = -1;
    size_t nkept = 0, nvariants = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *r = json_array_get(rounds, i);
        json_int_t v = json_integer_value(json_object_get(r, "version"));
        if (!json_is_integer(json_object_get(r, "version")) || v >= 64) continue;
        parent[v] = json_integer_value(json_object_get(r, "from"));
        kept[v] = !strcmp(json_string_value(json_object_get(r, "result")), "kept");
        nkept += kept[v];
        if (json_is_integer(json_object_get(r, "variant_of"))) {
            variant[v] = json_integer_value(json_object_get(r, "variant_of"));
            nvariants++;
            /* a variant is the same step as the version it is a variant of, from the same version */
            assert_int_equal(parent[variant[v]], parent[v]);
        }
    }
    assert_true(nkept >= 2);
    assert_true(nvariants >= 1);
    for (size_t i = 0; i < n; i++) {
        json_t *r = json_array_get(rounds, i);
        json_int_t from = json_integer_value(json_object_get(r, "from"));
        /* nothing is searched from a variant */
        assert_true(from >= 64 || variant[from] < 0);
        if (from >= 64 || !kept[from]) continue;
        /* from a kept version, no edit its parent was also judged on */
        char mine[600], theirs[600];
        edit_of(r, mine, sizeof mine);
        for (size_t k = 0; k < n; k++) {
            json_t *q = json_array_get(rounds, k);
            if (json_integer_value(json_object_get(q, "from")) != parent[from]) continue;
            edit_of(q, theirs, sizeof theirs);
            if (!strcmp(mine, theirs)) fail_msg("round %zu judges %s from kept v%lld, as its parent v%lld did in round %zu", i + 1, mine, (long long)from, (long long)parent[from], k + 1);
        }
    }
    /* the report says which version is a variant */
    char *text = json_dumps(d, 0);
    char *md = kl_optimize_markdown(text);
    assert_non_null(strstr(md, "a variant of v"));
    free(md);
    free(text);
    json_decref(d);
}

/* The skills policy reads its own run: cards that promise much (2x) for transforms that gain
 * nothing here (launch-bounds 1.01x, unroll 1.02x, restrict 1.00x to the stand-in) are not
 * judged again and again while proposals no card speaks for (row-parallel, 6x) wait: a
 * transform judged twice since the last new best without paying is deferred, and a new best
 * cleans the slate. */
static void test_a_transform_that_did_not_pay_here_waits(void **state)
{
    fixture *f = *state;
    put_card(f, "launch-bounds-t1", "launch-bounds", 2.0, NULL, NULL);
    put_card(f, "unroll-t1", "unroll", 2.0, NULL, NULL);
    put_card(f, "restrict-t1", "restrict", 2.0, NULL, NULL);
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 24);
    /* ranking 4: under ranking 5 an alternative of a step judged at 1.01x expects 1.01x
     * (expect_here), so the run seldom judges a transform twice without paying and this deferral
     * is rarely reached; the mechanism is the same in both */
    o.ranking = 4;
    json_t *d = run_doc(f, &o, KL_OK);
    json_t *rounds = json_object_get(d, "rounds");
    size_t n = json_array_size(rounds), first_best = n;
    for (size_t i = 0; i < n && first_best == n; i++)
        if (!strcmp(json_string_value(json_object_get(json_array_get(rounds, i), "result")), "new best")) first_best = i;
    /* something paid, and before it no transform was judged a third time without paying */
    assert_true(first_best < 8);
    const char *names[3] = {"launch-bounds", "unroll", "restrict"};
    for (unsigned t = 0; t < 3; t++) {
        unsigned seen = 0;
        for (size_t i = 0; i < first_best; i++) seen += !strcmp(round_str(d, i, "transform"), names[t]);
        if (seen > 2) fail_msg("%s judged %u times before the first new best (round %zu)", names[t], seen, first_best + 1);
    }
    /* the rounds that made it there said which transforms were advised against */
    bool again = false;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_object_get(json_array_get(rounds, i), "candidate");
        /* after the new best the promising cards are tried again on the new kernel */
        if (i > first_best)
            for (unsigned t = 0; t < 3; t++) again |= !strcmp(json_string_value(json_object_get(c, "transform")), names[t]);
    }
    assert_true(again);
    /* the run says what its own judgements advised against, and the report shows it */
    bool said = false;
    for (size_t i = 0; i < n; i++)
        said |= json_array_size(json_object_get(json_array_get(rounds, i), "deferred_after")) > 0;
    assert_true(said);
    assert_report_says(d, "Deferred by this run's own judgements");
    json_decref(d);
}

/* What the run saw fail goes after what the cards defer: every transform proposed on softmax's
 * naive kernel has a card measured at noise (all deferred), launch-bounds' a little above the
 * others (1.04x, so first among them), and launch-bounds gains nothing here; once it has been
 * judged twice without paying, the other deferred transforms go first — among them row-parallel,
 * which pays (6x). */
static void test_what_the_run_saw_fail_goes_after_what_cards_defer(void **state)
{
    fixture *f = *state;
    static const char *const others[] = {"block-size", "fast-math", "grid-stride", "restrict", "row-parallel", "vectorize"};
    put_card(f, "launch-bounds-t1", "launch-bounds", 1.04, NULL, NULL);
    char id[64];
    for (unsigned i = 0; i < sizeof others / sizeof others[0]; i++) {
        kl_snprintf(id, sizeof id, "%s-t1", others[i]);
        put_card(f, id, others[i], 1.0, NULL, NULL);
    }
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 24);
    json_t *d = run_doc(f, &o, KL_OK);
    json_t *rounds = json_object_get(d, "rounds");
    /* every proposal is deferred by its card */
    assert_true(json_is_true(json_object_get(json_object_get(json_array_get(rounds, 0), "candidate"), "deferred")));
    assert_string_equal(round_str(d, 0, "transform"), "launch-bounds");
    unsigned lb = 0;
    size_t i;
    json_t *r;
    json_array_foreach(rounds, i, r) {
        if (!strcmp(json_string_value(json_object_get(r, "result")), "new best")) break;
        if (!strcmp(round_str(d, i, "transform"), "launch-bounds")) lb++;
    }
    if (lb > 2) fail_msg("launch-bounds judged %u times before the first new best", lb);
    json_decref(d);
}

/* Ranking 3: a step that closes another transform's door has that door tried at the parent next.
 * On softmax's naive kernel a card promises vectorize 2x and none speaks for row-parallel (E =
 * 1.05); once a row loop is vectorized, row-parallel no longer applies (the catalog says the loop
 * is inside a condition), so the run tries row-parallel from the start right after, where it pays
 * 6x (ranking 5, the default, keeps the doors: a run that does not say gets it). Under ranking 2
 * the door is not seen: row-parallel waits behind every vectorize step. The two rankings are two
 * runs (the ranking is part of the key). */
static void test_a_step_that_closes_a_door(void **state)
{
    fixture *f = *state;
    put_card(f, "vectorize-t1", "vectorize", 2.0, NULL, NULL);
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 8);
    json_t *d = run_doc(f, &o, KL_OK);
    assert_int_equal(json_integer_value(json_object_get(d, "ranking")), KL_OPTIMIZE_RANKING);
    assert_string_equal(round_str(d, 0, "transform"), "vectorize");
    assert_string_equal(round_str(d, 1, "transform"), "row-parallel");
    json_t *r1 = json_array_get(json_object_get(d, "rounds"), 1);
    assert_int_equal(json_integer_value(json_object_get(r1, "from")), 0);
    assert_true(json_is_true(json_object_get(json_object_get(r1, "candidate"), "door")));
    assert_non_null(strstr(round_str(d, 1, "why"), "its door: v1's vectorize closes it"));
    assert_report_says(d, "Tried first because a step closed its door");
    assert_report_says(d, "; ranking 5");
    const char *key3 = json_string_value(json_object_get(d, "key"));
    char k3[128];
    kl_snprintf(k3, sizeof k3, "%s", key3);
    json_decref(d);

    stand_in s2 = {0};
    kl_optimize_options o2 = options(f, &s2, KL_POLICY_SKILLS, 8);
    o2.ranking = 2;
    d = run_doc(f, &o2, KL_OK);
    assert_int_equal(json_integer_value(json_object_get(d, "ranking")), 2);
    assert_true(strcmp(json_string_value(json_object_get(d, "key")), k3) != 0);
    assert_int_not_equal(s2.calls, 0); /* judged anew, not served from the default ranking's run */
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(d, "rounds"), i, r) {
        assert_false(json_is_true(json_object_get(json_object_get(r, "candidate"), "door")));
    }
    assert_string_equal(round_str(d, 1, "transform"), "vectorize");
    json_decref(d);

    /* a ranking that does not exist is refused before anything is judged */
    stand_in s3 = {0};
    kl_optimize_options o3 = options(f, &s3, KL_POLICY_SKILLS, 8);
    o3.ranking = 6;
    d = run_doc(f, &o3, KL_ERR_INVALID);
    assert_int_equal(s3.calls, 0);
    json_decref(d);
}

/* Ranking 3: among the transforms the run's own judgements defer, the one that failed fewer times
 * since the last new best goes first; ranking 2 orders them by the cards' promise alone. A copy
 * kernel where nothing pays (launch-bounds 1.01x and restrict 1.0x to the stand-in, under
 * --min-gain; grid-stride and block-size slower), cards promising launch-bounds 3x and restrict
 * 2x: once they are deferred, ranking 3 takes the deferred transforms in turns, ranking 2 goes
 * back to launch-bounds first. */
static void test_deferred_transforms_take_turns(void **state)
{
    fixture *f = *state;
    put_card(f, "launch-bounds-t1", "launch-bounds", 3.0, NULL, NULL);
    put_card(f, "restrict-t1", "restrict", 2.0, NULL, NULL);
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("opt", &dir, &err), KL_OK);
    char *path = kl_path_join(dir, "copy.cu");
    const char *text = "#include <cuda_runtime.h>\n\n#define BLOCK 256\n\n"
                       "__global__ void copy_rows(const float* x, float* y, int rows, int cols)\n{\n"
                       "    int i = blockIdx.x * BLOCK + threadIdx.x;\n"
                       "    if (i < rows * cols) y[i] = x[i];\n}\n\n"
                       "extern \"C\" void launch(const float* x, float* y, int rows, int cols, cudaStream_t stream)\n{\n"
                       "    copy_rows<<<(rows * cols + BLOCK - 1) / BLOCK, BLOCK, 0, stream>>>(x, y, rows, cols);\n}\n";
    assert_int_equal(kl_file_write(path, text, strlen(text), &err), KL_OK);
    unsigned longest[4] = {0};
    for (unsigned ranking = 2; ranking <= 3; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 16);
        o.ranking = ranking;
        o.from_path = path;
        json_t *d = run_doc(f, &o, KL_OK);
        json_t *rounds = json_object_get(d, "rounds");
        /* the longest stretch of one deferred transform judged again and again */
        unsigned run = 0;
        const char *prev = "";
        for (size_t i = 0; i < json_array_size(rounds); i++) {
            const json_t *c = json_object_get(json_array_get(rounds, i), "candidate");
            assert_string_not_equal(json_string_value(json_object_get(json_array_get(rounds, i), "result")), "new best");
            const char *t = json_string_value(json_object_get(c, "transform"));
            if (!json_is_true(json_object_get(c, "stale"))) {
                prev = "";
                continue;
            }
            run = strcmp(t, prev) ? 1 : run + 1;
            prev = t;
            if (run > longest[ranking]) longest[ranking] = run;
        }
        json_decref(d);
    }
    /* both rankings reached the deferred tier; ranking 3 never judged one deferred transform twice
     * in a row while another waited with as few failures (here: launch-bounds, grid-stride and
     * block-size in turns), ranking 2 judged launch-bounds again first (its card promises most) */
    assert_true(longest[2] >= 2);
    assert_int_equal(longest[3], 1);
    free(path);
    kl_remove_tree(dir, &err);
    free(dir);
}

/* Ranking 3: a proposal in a function the bench shape does not run (the short-row kernel of a
 * dispatch, at cols = 8192) goes after every other and says why; ranking 2 mixes them in. A kernel
 * of our own: two copies of a one-thread-per-row softmax behind `if (cols <= 32)`. */
static void test_a_site_off_the_bench_path_goes_last(void **state)
{
    fixture *f = *state;
    put_card(f, "fast-math-t1", "fast-math", 1.3, NULL, NULL);
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("opt", &dir, &err), KL_OK);
    char *path = kl_path_join(dir, "two.cu");
    static const char body[] =
        "(const float* in, float* out, int rows, int cols)\n{\n"
        "    int r = blockIdx.x * 128 + threadIdx.x;\n"
        "    if (r >= rows) return;\n"
        "    float m = in[r * cols];\n"
        "    for (int c = 1; c < cols; c++) m = fmaxf(m, in[r * cols + c]);\n"
        "    float s = 0.0f;\n"
        "    for (int c = 0; c < cols; c++) s += expf(in[r * cols + c] - m);\n"
        "    for (int c = 0; c < cols; c++) out[r * cols + c] = expf(in[r * cols + c] - m) / s;\n}\n\n";
    char text[4096];
    kl_snprintf(text, sizeof text,
                "#include <cuda_runtime.h>\n\n__global__ void narrow_rows%s__global__ void wide_rows%s"
                "extern \"C\" void launch(const float* x, float* y, int rows, int cols, cudaStream_t st)\n{\n"
                "    if (cols <= 32) narrow_rows<<<(rows + 127) / 128, 128, 0, st>>>(x, y, rows, cols);\n"
                "    else wide_rows<<<(rows + 127) / 128, 128, 0, st>>>(x, y, rows, cols);\n}\n",
                body, body);
    assert_int_equal(kl_file_write(path, text, strlen(text), &err), KL_OK);
    unsigned off_before_on[4] = {0};
    for (unsigned ranking = 2; ranking <= 3; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 10);
        o.ranking = ranking;
        o.from_path = path;
        json_t *d = run_doc(f, &o, KL_OK);
        json_t *rounds = json_object_get(d, "rounds");
        assert_true(json_array_size(rounds) > 0);
        bool on_after = false;
        for (size_t i = json_array_size(rounds); i-- > 0;) {
            const char *site = round_str(d, i, "site");
            const char *why = round_str(d, i, "why");
            assert_non_null(site);
            bool off = !strncmp(site, "narrow_rows:", 12);
            if (!off) on_after = true;
            else if (on_after) off_before_on[ranking]++;
            if (ranking == 3) {
                if (off != (why && strstr(why, "narrow_rows does not run at the bench shape") != NULL))
                    fail_msg("round %zu at %s: why '%s'", i, site, why ? why : "");
            }
        }
        json_decref(d);
    }
    /* ranking 2 judged the short-row kernel's sites among the others; ranking 3 only after them */
    assert_true(off_before_on[2] > 0);
    assert_int_equal(off_before_on[3], 0);
    free(path);
    kl_remove_tree(dir, &err);
    free(dir);
}

/* Search revision 5 (skills, ranking 3): a step that made a new best has its parent's best untried
 * variant (other parameters) tried next, and the parent stays open meanwhile. A card promises
 * row-parallel 6x; its first variant pays at call 1, and noise steps (launch-bounds, restrict, with
 * cards promising 1.3x) would be kept as versions faster than the start and, with a beam of 2,
 * close it: the other unit of row-parallel is judged from the start at call 2. */
static void test_a_winning_steps_variants_keep_its_parent_open(void **state)
{
    fixture *f = *state;
    put_card(f, "row-parallel-t1", "row-parallel", 6.0, NULL, NULL);
    put_card(f, "launch-bounds-t1", "launch-bounds", 1.3, NULL, NULL);
    put_card(f, "restrict-t1", "restrict", 1.3, NULL, NULL);
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 24);
    o.beam = 2;
    json_t *d = run_doc(f, &o, KL_OK);
    assert_string_equal(round_str(d, 0, "transform"), "row-parallel");
    char first[256];
    char *p0 = json_dumps(json_object_get(json_object_get(json_array_get(json_object_get(d, "rounds"), 0), "candidate"),
                                          "params"),
                          JSON_COMPACT | JSON_SORT_KEYS);
    kl_snprintf(first, sizeof first, "%s", p0 ? p0 : "");
    free(p0);
    bool variant = false, kept = false;
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(d, "rounds"), i, r) {
        if (i == 0) continue;
        const json_t *c = json_object_get(r, "candidate");
        if (!strcmp(json_string_value(json_object_get(r, "result")), "kept")) kept = true;
        char *p = json_dumps(json_object_get(c, "params"), JSON_COMPACT | JSON_SORT_KEYS);
        if (json_integer_value(json_object_get(r, "from")) == 0 &&
            !strcmp(json_string_value(json_object_get(c, "transform")), "row-parallel") && p && strcmp(p, first))
            variant = true;
        free(p);
    }
    assert_true(kept);    /* the beam filled with noise steps */
    assert_true(variant); /* and the start's other row-parallel was judged all the same */
    /* right after the step (a door row-parallel closed may go first) */
    size_t vr = 0;
    json_array_foreach(json_object_get(d, "rounds"), i, r) {
        if (json_is_true(json_object_get(json_object_get(r, "candidate"), "variant"))) {
            vr = i;
            break;
        }
    }
    assert_true(vr >= 1 && vr <= 2);
    json_t *r1 = json_array_get(json_object_get(d, "rounds"), vr);
    assert_string_equal(round_str(d, vr, "transform"), "row-parallel");
    assert_int_equal(json_integer_value(json_object_get(r1, "from")), 0);
    assert_non_null(strstr(round_str(d, vr, "why"), "a variant of v1's step, which paid"));
    assert_report_says(d, "Tried next as a variant of a step that made a new best");
    json_decref(d);
}

/* ---- ranking 4 ------------------------------------------------------------------------------- */

static double round_num(const json_t *d, size_t r, const char *key)
{
    return json_number_value(
        json_object_get(json_object_get(json_array_get(json_object_get(d, "rounds"), r), "candidate"), key));
}

/* Ranking 4: a card's element type is where it was measured, not a condition shown to fail: the
 * f64 card speaks on softmax's f32 kernel at half weight and says it is unlike the site; ranking 3
 * skips it (test_a_card_unlike_the_site_still_speaks). */
static void test_ranking4_a_cards_dtype_is_unlike(void **state)
{
    fixture *f = *state;
    kl_error err = {0};
    assert_int_equal(kl_skill_put(f->store,
                                  "{\"id\": \"fast-math-f64\", \"transform\": \"fast-math\", \"intent\": \"test card\","
                                  " \"preconditions\": [{\"predicate\": \"dtype == \\\"f64\\\"\", \"kind\": \"static\","
                                  " \"verified\": true}], \"effect\": [{\"label\": \"bench\", \"speedup\": 9.0}],"
                                  " \"evidence\": {\"task\": \"other\"}}",
                                  &err),
                     KL_OK);
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 3);
    o.ranking = 4;
    json_t *d = run_doc(f, &o, KL_OK);
    assert_string_equal(round_str(d, 0, "transform"), "fast-math");
    assert_string_equal(round_str(d, 0, "card"), "fast-math-f64");
    assert_non_null(strstr(round_str(d, 0, "why"), "unlike the site it was learned at (dtype == \"f64\")"));
    assert_true(fabs(round_num(d, 0, "expect") - 5.0) < 1e-9); /* 1 + (9 - 1) / 2 */
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(d, "skipped"), i, s)
        assert_string_not_equal(json_string_value(json_object_get(s, "card")), "fast-math-f64");
    json_decref(d);
    /* the same library under ranking 3: skipped, never the card of a round */
    stand_in s3 = {0};
    kl_optimize_options o3 = options(f, &s3, KL_POLICY_SKILLS, 3);
    o3.ranking = 3;
    d = run_doc(f, &o3, KL_OK);
    bool skipped = false;
    json_array_foreach(json_object_get(d, "skipped"), i, s)
        skipped |= !strcmp(json_string_value(json_object_get(s, "card")), "fast-math-f64");
    assert_true(skipped);
    json_array_foreach(json_object_get(d, "rounds"), i, s) assert_null(round_str(d, i, "card"));
    json_decref(d);
}

/* Ranking 4: the gains a card's roundtrip admission measured join its walk's: a card that gained
 * 1.3x once and about nothing in three trials is noise, deferred behind what no card speaks for;
 * ranking 3 reads the walk alone and tries it first. */
static void test_ranking4_admission_trials_join_the_gain(void **state)
{
    fixture *f = *state;
    kl_error err = {0};
    assert_int_equal(kl_skill_put(f->store,
                                  "{\"id\": \"launch-bounds-tr\", \"transform\": \"launch-bounds\", \"intent\": \"test card\","
                                  " \"preconditions\": [], \"effect\": [{\"label\": \"bench\", \"speedup\": 1.3}],"
                                  " \"evidence\": {\"task\": \"other\"}, \"admission\": {\"status\": \"rejected\", \"trials\": ["
                                  "{\"task\": \"a\", \"site\": \"k:1\", \"gain\": 0.95, \"verdict\": \"lost\"},"
                                  "{\"task\": \"b\", \"site\": \"k:1\", \"gain\": 0.95, \"verdict\": \"lost\"},"
                                  "{\"task\": \"c\", \"site\": \"k:1\", \"gain\": 0.95, \"verdict\": \"lost\"}]}}",
                                  &err),
                     KL_OK);
    for (unsigned ranking = 3; ranking <= 4; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 3);
        o.ranking = ranking;
        json_t *d = run_doc(f, &o, KL_OK);
        if (ranking == 3) {
            assert_string_equal(round_str(d, 0, "transform"), "launch-bounds");
            assert_non_null(strstr(round_str(d, 0, "why"), "gain 1.30x"));
        } else {
            /* (1.3 x 0.95^3)^(1/4) = 1.03: below what a walk tells from noise */
            assert_string_not_equal(round_str(d, 0, "transform"), "launch-bounds");
            size_t i;
            json_t *r;
            json_array_foreach(json_object_get(d, "rounds"), i, r) {
                if (strcmp(round_str(d, i, "transform"), "launch-bounds")) continue;
                assert_non_null(strstr(round_str(d, i, "why"), "gain 1.03x"));
                assert_true(json_is_true(json_object_get(json_object_get(r, "candidate"), "deferred")));
            }
        }
        json_decref(d);
    }
}

/* Ranking 4: a new best by less than a walk tells from noise (OPT_PAYS) has no variant tried
 * next; ranking 3 tries one after any new best. The stand-in's launch-bounds pays 1.01x, a new
 * best with min_gain 1.005. */
static void test_ranking4_no_variant_after_a_noise_step(void **state)
{
    fixture *f = *state;
    put_card(f, "launch-bounds-t1", "launch-bounds", 1.5, NULL, NULL);
    for (unsigned ranking = 3; ranking <= 4; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 3);
        o.ranking = ranking;
        o.min_gain = 1.005;
        json_t *d = run_doc(f, &o, KL_OK);
        assert_string_equal(round_str(d, 0, "transform"), "launch-bounds");
        assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(d, "rounds"), 0), "result")),
                            "new best");
        bool variant = json_is_true(
            json_object_get(json_object_get(json_array_get(json_object_get(d, "rounds"), 1), "candidate"), "variant"));
        assert_int_equal(variant, ranking == 3);
        json_decref(d);
    }
}

/* Ranking 4: once a version has judged two proposals of one transform at one site (the step and
 * its variant), its others there wait with what the run's own judgements defer ("sampled"): a
 * card promises launch-bounds 1.5x, the stand-in pays 1.01x whatever the minimum of blocks (a new
 * best with min_gain 1.005), and ranking 3 judges the start's third launch-bounds next. */
static void test_ranking4_a_sampled_steps_alternatives_wait(void **state)
{
    fixture *f = *state;
    put_card(f, "launch-bounds-t1", "launch-bounds", 1.5, NULL, NULL);
    unsigned third[5] = {0};
    for (unsigned ranking = 3; ranking <= 4; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 8);
        o.ranking = ranking;
        o.min_gain = 1.005;
        json_t *d = run_doc(f, &o, KL_OK);
        size_t i, nlb = 0;
        json_t *r;
        json_array_foreach(json_object_get(d, "rounds"), i, r) {
            if (json_integer_value(json_object_get(r, "from")) != 0 || strcmp(round_str(d, i, "transform"), "launch-bounds"))
                continue;
            if (++nlb == 3) {
                third[ranking] = (unsigned)i + 1;
                assert_int_equal(json_is_true(json_object_get(json_object_get(r, "candidate"), "sampled")), ranking == 4);
            }
        }
        char *text = json_dumps(d, 0), *md = kl_optimize_markdown(text);
        if (ranking == 4 && third[4]) assert_non_null(strstr(md, "Waited as an alternative already sampled"));
        if (ranking == 3) assert_null(strstr(md, "Waited as an alternative already sampled"));
        free(text), free(md);
        if (!third[ranking]) third[ranking] = 99; /* never judged within the budget */
        json_decref(d);
    }
    assert_int_equal(third[3], 3);
    assert_true(third[4] > 3);
}

/* Ranking 4: when a step's judgements at one version differ (here launch-bounds' minimum of blocks
 * is worth 1 + N / 2 to the stand-in), its parameters matter, and its next proposal there is tried
 * next, as a variant (mark_spread), until two in a row do no better than the best of them. */
static void test_ranking4_parameters_that_matter_are_searched(void **state)
{
    fixture *f = *state;
    put_card(f, "launch-bounds-t1", "launch-bounds", 1.5, NULL, NULL);
    stand_in si = {0};
    si.blocks_matter = true;
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 8);
    o.ranking = 4;
    json_t *d = run_doc(f, &o, KL_OK);
    size_t i, n = 0, spread = 0;
    json_t *r;
    json_array_foreach(json_object_get(d, "rounds"), i, r) {
        if (json_integer_value(json_object_get(r, "from")) != 0 || strcmp(round_str(d, i, "transform"), "launch-bounds"))
            continue;
        n++;
        assert_true(i < n + 1); /* one after another from the start (a door may come between) */
        if (strstr(round_str(d, i, "why"), "the step's parameters matter here")) {
            spread++;
            assert_true(json_is_true(json_object_get(json_object_get(r, "candidate"), "variant")));
        }
    }
    assert_true(n >= 3);
    assert_true(spread >= 1);
    assert_report_says(d, "Searched next because the step's judgements differed");
    json_decref(d);
}

/* Ranking 4: among what the cards defer, the transform judged fewer times since the last new best
 * goes first. Every transform's card measured noise here (launch-bounds 1.04x, the rest 1.00x):
 * ranking 3 judges launch-bounds' parameters one after another, ranking 4 takes the deferred
 * transforms in turns. */
static void test_ranking4_deferred_transforms_take_turns(void **state)
{
    fixture *f = *state;
    static const char *const noise[] = {"vectorize", "row-parallel", "fast-math", "grid-stride", "block-size",
                                        "unroll", "row-cache", "specialize", "restrict"};
    char id[64];
    for (unsigned i = 0; i < sizeof noise / sizeof noise[0]; i++) {
        kl_snprintf(id, sizeof id, "%s-noise", noise[i]);
        put_card(f, id, noise[i], 1.0, NULL, NULL);
    }
    put_card(f, "launch-bounds-noise", "launch-bounds", 1.04, NULL, NULL);
    for (unsigned ranking = 3; ranking <= 4; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 3);
        o.ranking = ranking;
        o.beam = 1;
        json_t *d = run_doc(f, &o, KL_OK);
        /* the first judgement: the card that promised most; it does not pay (kept, 1.01x) */
        assert_string_equal(round_str(d, 0, "transform"), "launch-bounds");
        assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(d, "rounds"), 0), "result")),
                            "kept");
        assert_true(json_is_true(json_object_get(json_object_get(json_array_get(json_object_get(d, "rounds"), 1),
                                                                 "candidate"),
                                                 "deferred")));
        /* the second: launch-bounds again under ranking 3, another deferred transform under ranking 4 */
        if (ranking == 3) assert_string_equal(round_str(d, 1, "transform"), "launch-bounds");
        else assert_string_not_equal(round_str(d, 1, "transform"), "launch-bounds");
        json_decref(d);
    }
}

/* Ranking 4: E as the run has seen the transform pay: a card promises vectorize 3x, the stand-in
 * pays 1.5x; the next vectorize proposal is ranked at the geometric mean of its own E and the
 * run's gains so far, and the round says so (expect_run). */
static void test_ranking4_the_runs_own_gains_calibrate_e(void **state)
{
    fixture *f = *state;
    put_card(f, "vectorize-t1", "vectorize", 3.0, NULL, NULL);
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 8);
    o.ranking = 4;
    json_t *d = run_doc(f, &o, KL_OK);
    double logs = 0;
    unsigned n = 0, checked = 0;
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(d, "rounds"), i, r) {
        if (strcmp(round_str(d, i, "transform"), "vectorize")) continue;
        double e = round_num(d, i, "expect");
        if (n == 0) {
            assert_null(json_object_get(json_object_get(r, "candidate"), "expect_run"));
        } else {
            assert_true(fabs(round_num(d, i, "expect_run") - exp((log(e) + logs) / (1 + n))) < 1e-9);
            checked++;
        }
        const json_t *j = json_object_get(r, "judgement");
        if (json_is_true(json_object_get(j, "pass"))) {
            logs += log(json_number_value(json_object_get(j, "speedup")));
            n++;
        }
    }
    assert_true(checked >= 1);
    json_decref(d);
}

/* A card of `transform` whose gain averages n measurements of `gain` (n bench rows). */
static void put_card_n(fixture *f, const char *id, const char *transform, double gain, unsigned n,
                       const char *preconditions, const char *site_features, const char *params)
{
    json_t *eff = json_array();
    for (unsigned i = 0; i < n; i++)
        json_array_append_new(eff, json_pack("{s:s, s:f}", "label", "bench", "speedup", gain));
    json_error_t je;
    json_t *d = json_pack_ex(&je, 0, "{s:s, s:s, s:s, s:o, s:o, s:{s:s}}", "id", id, "transform", transform, "intent",
                             "test card", "preconditions", json_loads(preconditions ? preconditions : "[]", 0, NULL),
                             "effect", eff, "evidence", "task", "other");
    assert_non_null(d);
    if (site_features)
        json_object_set_new(d, "anchor", json_pack("{s:s, s:{s:s, s:o}}", "kernel", "k", "pattern", "transform", transform,
                                                   "site_features", json_loads(site_features, 0, NULL)));
    if (params) json_object_set_new(d, "params", json_loads(params, 0, NULL));
    char *t = json_dumps(d, JSON_COMPACT);
    json_decref(d);
    kl_error err = {0};
    assert_int_equal(kl_skill_put(f->store, t, &err), KL_OK);
    free(t);
}

/* Ranking 5: once another step from the same version overtook a winning step, that step's variant
 * is not tried first any more (variant_live). Vectorize (the card's 2x; the stand-in pays 1.5x)
 * wins first and marks its other width at the start as a variant; row-parallel, whose door the
 * vectorized loop closed, makes 6x from the start; ranking 4 still tries the start's other width
 * as a variant (after the doors), ranking 5 ranks it as any proposal of the 1x start. */
static void test_ranking5_an_overtaken_variant_waits(void **state)
{
    fixture *f = *state;
    put_card(f, "vectorize-t1", "vectorize", 2.0, NULL, NULL);
    for (unsigned ranking = 4; ranking <= 5; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 10);
        o.ranking = ranking;
        json_t *d = run_doc(f, &o, KL_OK);
        assert_string_equal(round_str(d, 0, "transform"), "vectorize");
        assert_string_equal(round_str(d, 1, "transform"), "row-parallel");
        assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(d, "rounds"), 1), "result")),
                            "new best");
        bool variant_tried = false;
        size_t i;
        json_t *r;
        json_array_foreach(json_object_get(d, "rounds"), i, r) {
            if (i < 2 || json_integer_value(json_object_get(r, "from")) != 0 ||
                strcmp(round_str(d, i, "transform"), "vectorize"))
                continue;
            variant_tried |= json_is_true(json_object_get(json_object_get(r, "candidate"), "variant")) &&
                             !json_is_true(json_object_get(json_object_get(r, "candidate"), "door"));
        }
        assert_int_equal(variant_tried, ranking == 4);
        json_decref(d);
    }
}

/* Ranking 5: a step that paid less than OPT_PAYS² has no variant tried next (ranking 4: OPT_PAYS).
 * The stand-in's fast-math pays 1.3x under this card; with min_gain 1.005 a launch-bounds step of
 * 1.01x... is below both; here the step is vectorize scaled to pay 1.08x by a slow factor table. */
static void test_ranking5_no_variant_after_a_small_step(void **state)
{
    fixture *f = *state;
    put_card(f, "launch-bounds-t1", "launch-bounds", 1.5, NULL, NULL);
    stand_in si = {0};
    si.blocks_matter = true; /* __launch_bounds__(T, N): 1 + N / 2; the first preset's N decides */
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 3);
    o.ranking = 5;
    o.min_gain = 1.005;
    json_t *d = run_doc(f, &o, KL_OK);
    assert_string_equal(round_str(d, 0, "transform"), "launch-bounds");
    double g = json_number_value(
        json_object_get(json_object_get(json_array_get(json_object_get(d, "rounds"), 0), "judgement"), "speedup"));
    bool variant = json_is_true(
        json_object_get(json_object_get(json_array_get(json_object_get(d, "rounds"), 1), "candidate"), "variant"));
    /* a variant follows exactly when the step paid OPT_PAYS² or more */
    assert_int_equal(variant, g >= OPT_PAYS * OPT_PAYS);
    json_decref(d);
}

/* Ranking 5: E of an alternative of a step its version already judged is at most the gain the step
 * made there: the card promises vectorize 3x, the stand-in pays 1.5x; the other width at the same
 * loop is ranked at 1.5x (expect_run), not at the card's calibrated promise as under ranking 4. */
static void test_ranking5_an_alternative_expects_its_siblings_gain(void **state)
{
    fixture *f = *state;
    put_card(f, "vectorize-t1", "vectorize", 3.0, NULL, NULL);
    unsigned checked = 0;
    for (unsigned ranking = 4; ranking <= 5; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 12);
        o.ranking = ranking;
        json_t *d = run_doc(f, &o, KL_OK);
        json_t *rounds = json_object_get(d, "rounds");
        size_t i, k;
        json_t *r, *q;
        json_array_foreach(rounds, i, r) {
            if (strcmp(round_str(d, i, "transform"), "vectorize")) continue;
            /* an earlier judgement of the same step (site) from the same version */
            double sib = 0;
            json_array_foreach(rounds, k, q) {
                if (k >= i) break;
                if (json_integer_value(json_object_get(q, "from")) != json_integer_value(json_object_get(r, "from")) ||
                    strcmp(round_str(d, k, "transform"), "vectorize") || strcmp(round_str(d, k, "site"), round_str(d, i, "site")))
                    continue;
                double g = json_number_value(json_object_get(json_object_get(q, "judgement"), "speedup"));
                if (g > sib) sib = g;
            }
            if (sib <= 0) continue;
            double e = round_num(d, i, "expect_run");
            if (ranking == 5) assert_true(e <= sib + 1e-9);
            else assert_true(e > sib);
            checked++;
        }
        json_decref(d);
    }
    assert_true(checked >= 2);
}

/* Ranking 5: among what the cards defer, a card measured once is given the benefit of the doubt
 * over one measured a dozen times (expect_doubt): restrict's card gained 1.00x once, launch-bounds'
 * 1.02x twelve times, every other transform's 1.00x twelve times; ranking 4 judges launch-bounds
 * first (the higher E), ranking 5 restrict. */
static void test_ranking5_thin_evidence_goes_first_among_deferred(void **state)
{
    fixture *f = *state;
    static const char *const noise[] = {"vectorize", "row-parallel", "fast-math", "grid-stride", "block-size",
                                        "row-cache", "specialize", "unroll"};
    char id[64];
    for (unsigned i = 0; i < sizeof noise / sizeof noise[0]; i++) {
        kl_snprintf(id, sizeof id, "%s-noise", noise[i]);
        put_card_n(f, id, noise[i], 1.0, 12, NULL, NULL, NULL);
    }
    put_card_n(f, "launch-bounds-noise", "launch-bounds", 1.02, 12, NULL, NULL, NULL);
    put_card_n(f, "restrict-once", "restrict", 1.0, 1, NULL, NULL, NULL);
    for (unsigned ranking = 4; ranking <= 5; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 2);
        o.ranking = ranking;
        o.beam = 1;
        json_t *d = run_doc(f, &o, KL_OK);
        assert_true(json_is_true(json_object_get(json_object_get(json_array_get(json_object_get(d, "rounds"), 0),
                                                                 "candidate"),
                                                 "deferred")));
        assert_string_equal(round_str(d, 0, "transform"), ranking == 4 ? "launch-bounds" : "restrict");
        json_decref(d);
    }
}

/* Ranking 5: a vector width is compared in bytes: a card measured with width 2 on f64 (16-byte
 * loads) speaks with "its parameters" for width 4 on softmax's f32 rows, and with "other
 * parameters" for width 2 (ranking 4 the other way round). */
static void test_ranking5_a_vector_width_is_read_in_bytes(void **state)
{
    fixture *f = *state;
    put_card_n(f, "vectorize-f64", "vectorize", 3.0, 1,
               "[{\"predicate\": \"dtype == \\\"f64\\\"\", \"kind\": \"static\", \"verified\": true}]", NULL,
               "{\"width\": \"2\"}");
    for (unsigned ranking = 4; ranking <= 5; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 2);
        o.ranking = ranking;
        json_t *d = run_doc(f, &o, KL_OK);
        assert_string_equal(round_str(d, 0, "transform"), "vectorize");
        json_t *params = json_object_get(json_object_get(json_array_get(json_object_get(d, "rounds"), 0), "candidate"),
                                         "params");
        const char *w = json_string_value(json_object_get(params, "width"));
        assert_non_null(w);
        assert_string_equal(w, ranking == 4 ? "2" : "4");
        assert_non_null(strstr(round_str(d, 0, "why"), "its parameters"));
        json_decref(d);
    }
}

/* Ranking 5: a card of another shape of its transform (smem-tile's GEMM tiles, here its only card)
 * does not speak for a site of another shape: on blur's 2-D stencil its failing GEMM condition no
 * longer skips it there (ranking 4: skipped, and the proposal "tried last" as every card fails);
 * the proposal is one no card speaks for. */
static void test_ranking5_a_card_of_another_shape_is_silent(void **state)
{
    fixture *f = *state;
    kl_error err = {0};
    kl_task *blur = NULL;
    char dir[600];
    kl_snprintf(dir, sizeof dir, "%s/../blur", f->dir);
    assert_int_equal(kl_task_load(dir, &blur, &err), KL_OK);
    put_card_n(f, "smem-tile-gemm", "smem-tile", 3.0, 4,
               "[{\"predicate\": \"loop_access == \\\"contiguous\\\"\", \"kind\": \"static\", \"verified\": true}]",
               "{\"shape\": \"gemm\"}", NULL);
    for (unsigned ranking = 4; ranking <= 5; ranking++) {
        stand_in si = {0};
        kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 3);
        o.ranking = ranking;
        char *doc = NULL;
        assert_int_equal(kl_optimize_run(blur, &o, &doc, &err), KL_OK);
        json_t *d = json_loads(doc, 0, NULL);
        free(doc);
        size_t i;
        json_t *r;
        bool skipped = false;
        json_array_foreach(json_object_get(d, "skipped"), i, r)
            skipped |= !strcmp(json_string_value(json_object_get(r, "card")), "smem-tile-gemm");
        assert_int_equal(skipped, ranking == 4);
        json_array_foreach(json_object_get(d, "rounds"), i, r) {
            if (strcmp(round_str(d, i, "transform"), "smem-tile")) continue;
            const char *why = round_str(d, i, "why");
            if (ranking == 4) assert_non_null(strstr(why, "every card of smem-tile fails here"));
            else assert_non_null(strstr(why, "its 1 card(s) are of another shape"));
        }
        json_decref(d);
    }
    kl_task_free(blur);
}

static void test_memory_prefers_what_paid_elsewhere(void **state)
{
    fixture *f = *state;
    /* a blind run on another task (layernorm) is the memory */
    kl_task *other = NULL;
    kl_error err = {0};
    char dir[600];
    kl_snprintf(dir, sizeof dir, "%s/../layernorm", f->dir);
    assert_int_equal(kl_task_load(dir, &other, &err), KL_OK);
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_BLIND, 12);
    char *doc = NULL;
    assert_int_equal(kl_optimize_run(other, &o, &doc, &err), KL_OK);
    free(doc);
    kl_task_free(other);
    char *mem = NULL;
    assert_int_equal(kl_optimize_memory_json(f->store, "softmax", NULL, 0, NULL, &mem, &err), KL_OK);
    json_t *m = json_loads(mem, 0, NULL);
    free(mem);
    assert_true(json_array_size(m) > 0);
    /* the best gain the memory holds for a transform that can be placed on softmax's naive kernel */
    json_decref(m);
    /* the memory is made of runs with the same budget only */
    assert_int_equal(kl_optimize_memory_json(f->store, "softmax", NULL, 11, NULL, &mem, &err), KL_OK);
    assert_string_equal(mem, "[]");
    free(mem);
    stand_in s2 = {0};
    kl_optimize_options o2 = options(f, &s2, KL_POLICY_MEMORY, 12);
    json_t *d = run_doc(f, &o2, KL_OK);
    /* row-parallel paid 6x on layernorm in the stand-in: the memory tries it first */
    assert_string_equal(round_str(d, 0, "transform"), "row-parallel");
    assert_non_null(strstr(round_str(d, 0, "why"), "memory:"));
    /* leaving layernorm out leaves the memory empty: the order is then the seeded one */
    json_decref(d);
    assert_int_equal(kl_optimize_memory_json(f->store, "softmax", "layernorm", 0, NULL, &mem, &err), KL_OK);
    assert_string_equal(mem, "[]");
    free(mem);
}

/* ---- resume --------------------------------------------------------------------------------- */

static char *result_of(json_t *d)
{
    /* what must not change across a resume: the rounds, the versions and the result */
    json_t *x = json_object();
    json_object_set(x, "rounds", json_object_get(d, "rounds"));
    json_object_set(x, "best", json_object_get(d, "best"));
    json_object_set(x, "finals", json_object_get(d, "finals"));
    json_object_set(x, "gate_calls", json_object_get(d, "gate_calls"));
    json_t *vs = json_deep_copy(json_object_get(d, "versions"));
    json_object_set_new(x, "versions", vs);
    char *t = json_dumps(x, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(x);
    return t;
}

static void test_resume_after_every_judgement(void **state)
{
    fixture *f = *state;
    const unsigned budget = 8;
    stand_in whole = {0};
    kl_optimize_options o = options(f, &whole, KL_POLICY_BLIND, budget);
    json_t *d = run_doc(f, &o, KL_OK);
    char *want = result_of(d);
    json_decref(d);
    for (unsigned k = 1; k < whole.calls; k++) {
        volatile sig_atomic_t flag = 0;
        stand_in first = {0};
        first.interrupt_after = k;
        first.interrupt = &flag;
        kl_optimize_options a = options(f, &first, KL_POLICY_BLIND, budget);
        a.restart = true;
        a.interrupt = &flag;
        json_t *part = run_doc(f, &a, KL_ERR_INTERRUPTED);
        json_decref(part);
        stand_in rest = {0};
        kl_optimize_options b = options(f, &rest, KL_POLICY_BLIND, budget);
        json_t *again = run_doc(f, &b, KL_OK);
        char *got = result_of(again);
        assert_string_equal(got, want);
        /* nothing judged twice: the stored judgements were reused */
        assert_int_equal(first.calls + rest.calls, whole.calls);
        free(got);
        json_decref(again);
    }
    free(want);
}

static void test_finished_run_is_served_again(void **state)
{
    fixture *f = *state;
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_BLIND, 5);
    json_t *d1 = run_doc(f, &o, KL_OK);
    unsigned calls = si.calls;
    json_t *d2 = run_doc(f, &o, KL_OK);
    assert_int_equal(si.calls, calls); /* no new judgement */
    char *a = result_of(d1), *b = result_of(d2);
    assert_string_equal(a, b);
    /* the report of both is the same, byte for byte */
    char *t1 = json_dumps(d1, 0), *t2 = json_dumps(d2, 0);
    char *m1 = kl_optimize_markdown(t1), *m2 = kl_optimize_markdown(t2);
    assert_string_equal(m1, m2);
    free(a), free(b), free(t1), free(t2), free(m1), free(m2);
    json_decref(d1);
    json_decref(d2);
}

/* A run stored by another revision of the search: a finished one is served as it was, its report
 * saying so; --restart-older runs it again; an unfinished one is refused. */
static void test_a_run_of_another_search_revision(void **state)
{
    fixture *f = *state;
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_BLIND, 5);
    json_t *d1 = run_doc(f, &o, KL_OK);
    const char *key = json_string_value(json_object_get(d1, "key"));
    assert_non_null(key);
    /* as revision 1 stored it: no "search" */
    json_t *old = json_deep_copy(d1);
    json_object_del(old, "search");
    char *text = json_dumps(old, JSON_COMPACT);
    kl_error err = {0};
    assert_int_equal(kl_store_put(f->store, "optimize", key, text, &err), KL_OK);
    free(text);
    unsigned calls = si.calls;
    json_t *d2 = run_doc(f, &o, KL_OK);
    assert_int_equal(si.calls, calls); /* served */
    char *t2 = json_dumps(d2, 0), *m2 = kl_optimize_markdown(t2);
    /* the revision this build searches with is what a fresh run stores */
    json_int_t now = json_integer_value(json_object_get(d1, "search"));
    assert_true(now >= 2);
    char said[96];
    kl_snprintf(said, sizeof said, "Made by search revision 1; this build searches with revision %lld", (long long)now);
    assert_non_null(strstr(m2, said));
    free(t2), free(m2);
    /* --restart-older: judged again, stored as this revision */
    o.restart_older = true;
    json_t *d3 = run_doc(f, &o, KL_OK);
    assert_true(si.calls > calls);
    assert_int_equal(json_integer_value(json_object_get(d3, "search")), now);
    /* an unfinished run of revision 1 is refused without it */
    o.restart_older = false;
    json_object_set_new(old, "state", json_string("running"));
    text = json_dumps(old, JSON_COMPACT);
    assert_int_equal(kl_store_put(f->store, "optimize", key, text, &err), KL_OK);
    free(text);
    kl_error e = {0};
    assert_int_equal(kl_optimize_run(f->task, &o, NULL, &e), KL_ERR_INVALID);
    assert_non_null(strstr(e.message, "begun by search revision 1"));
    assert_non_null(strstr(e.message, "--restart-older"));
    json_decref(old);
    json_decref(d1), json_decref(d2), json_decref(d3);
}

/* Several GPUs: the next candidates judged at once give the very same run, and a judgement made
 * ahead is counted when the search uses it. */
static kl_status stand_in_many(void *user, const kl_task *task, unsigned n, const kl_judge_request *reqs,
                               kl_judgement *outs, unsigned *done, kl_error *err)
{
    return kl_judge_many_sequential(stand_in_judge, user, task, n, reqs, outs, done, err);
}

static void test_judging_ahead_gives_the_same_run(void **state)
{
    fixture *f = *state;
    put_card(f, "row-parallel-t1", "row-parallel", 6.0, NULL, NULL);
    put_card(f, "fast-math-t1", "fast-math", 1.3, NULL, NULL);
    for (int p = 0; p < 2; p++) {
        kl_policy policy = p ? KL_POLICY_SKILLS : KL_POLICY_BLIND;
        stand_in one = {0}, many = {0};
        kl_optimize_options a = options(f, &one, policy, 9);
        a.restart = true;
        json_t *d1 = run_doc(f, &a, KL_OK);
        kl_optimize_options b = options(f, &many, policy, 9);
        b.restart = true;
        b.judge_many = stand_in_many;
        b.ahead = 4;
        json_t *d2 = run_doc(f, &b, KL_OK);
        char *r1 = result_of(d1), *r2 = result_of(d2);
        assert_string_equal(r1, r2);
        /* judged ahead: more judgements asked of the judge than the budget counts */
        json_t *ah = json_object_get(d2, "ahead");
        assert_true(json_is_object(ah));
        json_int_t judged = json_integer_value(json_object_get(ah, "judged"));
        json_int_t used = json_integer_value(json_object_get(ah, "used"));
        assert_true(used > 0 && used <= judged);
        assert_int_equal(json_integer_value(json_object_get(d2, "gate_calls")), one.calls);
        assert_true(many.calls >= one.calls);
        free(r1), free(r2);
        json_decref(d1);
        json_decref(d2);
    }
}

/* ---- what is returned ------------------------------------------------------------------ */

static void test_broken_candidates_are_not_returned(void **state)
{
    fixture *f = *state;
    stand_in si = {0};
    si.broken = "row-parallel"; /* the biggest gain, but wrong */
    put_card(f, "row-parallel-t1", "row-parallel", 6.0, NULL, NULL);
    put_card(f, "fast-math-t1", "fast-math", 1.3, NULL, NULL);
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 5);
    json_t *d = run_doc(f, &o, KL_OK);
    assert_string_equal(round_str(d, 0, "transform"), "row-parallel");
    json_t *j = json_object_get(json_array_get(json_object_get(d, "rounds"), 0), "judgement");
    assert_false(json_is_true(json_object_get(j, "pass")));
    char *t = json_dumps(d, 0);
    char *best = kl_optimize_best_source(t);
    assert_non_null(best);
    bool bad = false;
    time_of(f->task, best, "row-parallel", &bad);
    assert_false(bad);
    free(best);
    free(t);
    json_decref(d);
}

/* The search's gains were noise: checked again from scratch, the fastest version is slower than
 * the start. The start is returned, saying why, and no other version is checked (those are built
 * from the same steps; a replayed run has no recorded verdict for them). */
static void test_a_final_check_slower_than_the_start_returns_the_start(void **state)
{
    fixture *f = *state;
    stand_in si = {0};
    si.final_factor = 0.01; /* every version measures 100x slower in the final check */
    put_card(f, "fast-math-t1", "fast-math", 1.3, NULL, NULL);
    put_card(f, "vectorize-t1", "vectorize", 1.5, NULL, NULL);
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 6);
    json_t *d = run_doc(f, &o, KL_OK);
    assert_string_equal(json_string_value(json_object_get(d, "state")), "done");
    assert_int_equal(json_integer_value(json_object_get(d, "best")), 0);
    assert_int_equal(si.finals, 1);
    assert_int_equal(json_array_size(json_object_get(d, "finals")), 1);
    const char *note = json_string_value(json_object_get(d, "final_note"));
    assert_non_null(note);
    assert_non_null(strstr(note, "the start is returned"));
    assert_report_says(d, "Returned: the start (the fastest version");
    char *t = json_dumps(d, 0), *best = kl_optimize_best_source(t);
    assert_non_null(best);
    assert_string_equal(best, json_string_value(json_object_get(json_array_get(json_object_get(d, "versions"), 0),
                                                                "source")));
    free(best), free(t);
    /* the stored run, served again, returns the start too, with no further judgement */
    unsigned calls = si.calls;
    o.restart = false;
    json_t *again = run_doc(f, &o, KL_OK);
    assert_int_equal(si.calls, calls);
    assert_int_equal(json_integer_value(json_object_get(again, "best")), 0);
    json_decref(again);
    json_decref(d);
}

/* ---- other rewriters ------------------------------------------------------------------------ */

/* A `command` rewriter (the sample program) answers one card per request: the skills policy
 * asks once per card, the best first; blind asks one open request per version. */
static void test_command_rewriter_gets_one_card_per_request(void **state)
{
    fixture *f = *state;
    const char *prog = getenv("KL_SAMPLE_REWRITER");
    assert_non_null(prog);
    char cfg[1024];
    kl_snprintf(cfg, sizeof cfg, "{\"program\": \"%s\"}", prog);
    kl_rewriter *cmd = NULL;
    kl_error err = {0};
    assert_int_equal(kl_rewriter_open("command", cfg, &cmd, &err), KL_OK);
    put_card(f, "restrict-t1", "restrict", 1.3, NULL, NULL);
    put_card(f, "unroll-t1", "unroll", 1.1, NULL, NULL);
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_SKILLS, 3);
    o.rewriter = cmd;
    json_t *d = run_doc(f, &o, KL_OK);
    kl_rewriter_usage u;
    kl_rewriter_usage_get(cmd, &u);
    unsigned versions = (unsigned)json_array_size(json_object_get(d, "versions"));
    /* two cards, one request each, for every version expanded (at most every version) */
    assert_true(u.proposals >= 2 && u.proposals % 2 == 0 && u.proposals <= 2 * versions);
    assert_string_equal(round_str(d, 0, "card"), "restrict-t1");
    json_decref(d);
    kl_rewriter_free(cmd);
    /* blind: one open request per version expanded */
    assert_int_equal(kl_rewriter_open("command", cfg, &cmd, &err), KL_OK);
    stand_in s2 = {0};
    kl_optimize_options b = options(f, &s2, KL_POLICY_BLIND, 3);
    b.rewriter = cmd;
    d = run_doc(f, &b, KL_OK);
    kl_rewriter_usage_get(cmd, &u);
    assert_true(u.proposals >= 1 && u.proposals <= json_array_size(json_object_get(d, "versions")));
    json_decref(d);
    kl_rewriter_free(cmd);
}

/* ---- bad input ---------------------------------------------------------------------------- */

static void test_start_with_another_signature(void **state)
{
    fixture *f = *state;
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("opt", &dir, &err), KL_OK);
    char *path = kl_path_join(dir, "other.cu");
    const char *text = "#include <cuda_runtime.h>\n__global__ void k(float* a) { a[0] = 1; }\n"
                       "extern \"C\" void launch(float* a, cudaStream_t s) { k<<<1, 1, 0, s>>>(a); }\n";
    assert_int_equal(kl_file_write(path, text, strlen(text), &err), KL_OK);
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_BLIND, 5);
    o.from_path = path;
    assert_int_equal(kl_optimize_run(f->task, &o, NULL, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "other.cu:3"));
    assert_non_null(strstr(err.message, "launch() takes 2 parameter(s)"));
    assert_int_equal(si.calls, 0);
    free(path);
    kl_remove_tree(dir, &err);
    free(dir);
}

static void test_task_without_naive(void **state)
{
    fixture *f = *state;
    char *dir = NULL;
    kl_error err = {0};
    assert_int_equal(kl_tempdir("opt", &dir, &err), KL_OK);
    /* softmax's task.json without "naive" */
    char *tj = kl_path_join(f->dir, "task.json"), *text = NULL;
    assert_int_equal(kl_file_read(tj, 0, &text, NULL, &err), KL_OK);
    json_t *d = json_loads(text, 0, NULL);
    json_object_del(d, "naive");
    char *out = json_dumps(d, JSON_INDENT(2));
    char *dst = kl_path_join(dir, "task.json");
    assert_int_equal(kl_file_write(dst, out, strlen(out), &err), KL_OK);
    char *ref = kl_path_join(f->dir, "reference.c"), *rtext = NULL, *rdst = kl_path_join(dir, "reference.c");
    assert_int_equal(kl_file_read(ref, 0, &rtext, NULL, &err), KL_OK);
    assert_int_equal(kl_file_write(rdst, rtext, strlen(rtext), &err), KL_OK);
    char *exp = kl_path_join(f->dir, "expert.cu"), *etext = NULL, *edst = kl_path_join(dir, "expert.cu");
    assert_int_equal(kl_file_read(exp, 0, &etext, NULL, &err), KL_OK);
    assert_int_equal(kl_file_write(edst, etext, strlen(etext), &err), KL_OK);
    kl_task *t = NULL;
    assert_int_equal(kl_task_load(dir, &t, &err), KL_OK);
    stand_in si = {0};
    kl_optimize_options o = options(f, &si, KL_POLICY_BLIND, 5);
    assert_int_equal(kl_optimize_run(t, &o, NULL, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "no \"naive\" kernel"));
    kl_task_free(t);
    json_decref(d);
    free(tj), free(text), free(out), free(dst), free(ref), free(rtext), free(rdst), free(exp), free(etext), free(edst);
    kl_remove_tree(dir, &err);
    free(dir);
}

static void test_policy_names(void **state)
{
    (void)state;
    kl_policy p;
    kl_error err = {0};
    for (unsigned i = 0; i < KL_POLICY_COUNT; i++) {
        assert_int_equal(kl_policy_parse(kl_policy_name((kl_policy)i), &p, &err), KL_OK);
        assert_int_equal(p, i);
    }
    assert_int_equal(kl_policy_parse("greedy", &p, &err), KL_ERR_INVALID);
    assert_non_null(strstr(err.message, "skills, memory or blind"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_names),
        cmocka_unit_test_setup_teardown(test_budget_is_spent_exactly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget_too_small_is_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_skills_rank_by_card_gain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failing_condition_skips_the_card, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_condition_ranks_lower, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_card_unlike_the_site_still_speaks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lineage_path_is_followed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_library_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leave_out_drops_a_tasks_cards, setup, teardown),
        cmocka_unit_test_setup_teardown(test_noise_steps_do_not_multiply, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_transform_that_did_not_pay_here_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_what_the_run_saw_fail_goes_after_what_cards_defer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_step_that_closes_a_door, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deferred_transforms_take_turns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_site_off_the_bench_path_goes_last, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_winning_steps_variants_keep_its_parent_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking4_a_cards_dtype_is_unlike, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking4_admission_trials_join_the_gain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking4_no_variant_after_a_noise_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking4_a_sampled_steps_alternatives_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking4_the_runs_own_gains_calibrate_e, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking4_parameters_that_matter_are_searched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking4_deferred_transforms_take_turns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking5_an_overtaken_variant_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking5_no_variant_after_a_small_step, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking5_an_alternative_expects_its_siblings_gain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking5_thin_evidence_goes_first_among_deferred, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking5_a_vector_width_is_read_in_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranking5_a_card_of_another_shape_is_silent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_run_of_another_search_revision, setup, teardown),
        cmocka_unit_test_setup_teardown(test_blind_order_is_seeded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_prefers_what_paid_elsewhere, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_after_every_judgement, setup, teardown),
        cmocka_unit_test_setup_teardown(test_finished_run_is_served_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_judging_ahead_gives_the_same_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_broken_candidates_are_not_returned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_final_check_slower_than_the_start_returns_the_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_command_rewriter_gets_one_card_per_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_start_with_another_signature, setup, teardown),
        cmocka_unit_test_setup_teardown(test_task_without_naive, setup, teardown),
    };
    if (getenv("KL_TEST_FILTER")) cmocka_set_test_filter(getenv("KL_TEST_FILTER")); /* one test by hand */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
