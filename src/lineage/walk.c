/*
 * The backward walk. At each version: ask the rewriter for every simplification, keep only
 * those that are simpler (fewer recognized optimizations) and pass the gate against the
 * version they came from, move to the one that costs the least time, record everything.
 * The document is saved after every step, so a walk resumes where it stopped.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/skills.h"
#include "klineage/syntax.h"
#include "lineage/lineage_int.h"

typedef struct walk {
    const kl_task *task;
    const kl_lineage_options *opt;
    json_t *doc;
    char key[KL_HASH_HEX];
    kl_error *err;
} walk;

static void progress(const walk *w, kl_walk_event ev, unsigned version, unsigned index, unsigned n,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void progress(const walk *w, kl_walk_event ev, unsigned version, unsigned index, unsigned n,
                     const char *fmt, ...)
{
    if (!w->opt->progress) return;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    w->opt->progress(w->opt->progress_user, ev, version, index, n, text);
}

static bool interrupted(const walk *w) { return w->opt->interrupt && *w->opt->interrupt; }

void kl_lineage_key(const kl_task *task, const char *expert_text, const char *rewriter, bool full,
                    char hex[KL_HASH_HEX])
{
    kl_hasher *h = kl_hasher_new();
    kl_hasher_parts(h, KL_LINEAGE_FORMAT);
    kl_hasher_parts(h, task->name);
    kl_hasher_parts(h, expert_text);
    kl_hasher_parts(h, rewriter);
    if (full) kl_hasher_parts(h, "strategy=full"); /* lazy walks keep the key they always had */
    kl_hasher_finish(h, hex);
}

/* A stable name for a version's text: the gate keys verdicts on it too. */
static void version_name(const kl_task *task, const char *text, char *buf, size_t size)
{
    char hex[KL_HASH_HEX];
    kl_hash_hex(text, strlen(text), hex);
    kl_snprintf(buf, size, "%s/lineage-%.12s.cu", task->name, hex);
}

static kl_status save(walk *w)
{
    char stamp[32];
    kl_utc_stamp(stamp, sizeof stamp);
    json_object_set_new(w->doc, "updated", json_string(stamp));
    char *text = json_dumps(w->doc, JSON_SORT_KEYS | JSON_COMPACT);
    if (!text) return kl_error_set(w->err, KL_ERR_NOMEM, "out of memory");
    kl_status st = kl_store_put(w->opt->store, "lineage", w->key, text, w->err);
    free(text);
    return st;
}

static json_t *judgement_json(const kl_judgement *j)
{
    json_t *o = json_object();
    json_object_set_new(o, "pass", json_boolean(j->pass));
    if (!j->pass) {
        json_object_set_new(o, "stage", json_string(j->stage));
        json_object_set_new(o, "reason", json_string(j->reason));
    }
    json_object_set_new(o, "verdict", json_string(j->key));
    if (j->speedup >= 0) json_object_set_new(o, "speedup", json_real(j->speedup));
    if (j->cand_ms >= 0) json_object_set_new(o, "cand_ms", json_real(j->cand_ms));
    if (j->base_ms >= 0) json_object_set_new(o, "base_ms", json_real(j->base_ms));
    if (j->device[0]) json_object_set_new(o, "device", json_string(j->device));
    if (j->date[0]) json_object_set_new(o, "date", json_string(j->date));
    return o;
}

static kl_status judge(walk *w, const kl_task *task, const char *cand_text, const char *base_name,
                       const char *base_text, unsigned flags, kl_judgement *j)
{
    char name[128];
    version_name(w->task, cand_text, name, sizeof name);
    memset(j, 0, sizeof *j);
    j->speedup = j->cand_ms = j->base_ms = -1;
    return w->opt->judge(w->opt->judge_user, task, name, cand_text, base_name, base_text, flags, j, w->err);
}

/* How many of the optimizations the rewriter recognized are of transform `of` (UINT_MAX when
 * it does not say). */
static unsigned count_of(const kl_candidates *c, const char *of)
{
    if (!of || !c->present_by_transform) return UINT_MAX;
    json_t *d = json_loads(c->present_by_transform, 0, NULL);
    unsigned n = d ? (unsigned)json_integer_value(json_object_get(d, of)) : UINT_MAX;
    json_decref(d);
    return n;
}

/* How many optimizations the rewriter recognizes in text (*n), and of those how many are of
 * transform `of` (*n_of). keep: the proposals themselves (else only counted). */
static kl_status recognized(walk *w, const char *text, const char *name, unsigned *n, kl_candidates *keep,
                            const char *of, unsigned *n_of)
{
    kl_rewrite_request req = {0};
    req.kind = KL_REQ_SIMPLIFY;
    req.source = text;
    req.source_name = name;
    req.task = w->task;
    req.count_only = keep == NULL; /* a proposal's child: only how many it leaves */
    kl_candidates c;
    kl_status st = kl_rewriter_propose(w->opt->rewriter, &req, &c, w->err);
    if (st != KL_OK) return st;
    /* what it recognizes, removable or not: a removal that unblocks another (removing a
     * block reduction lets the grid-stride loop go) is still one optimization fewer */
    *n = c.present > c.count ? c.present : c.count;
    if (n_of) *n_of = count_of(&c, of);
    if (keep)
        *keep = c;
    else
        kl_candidates_free(&c);
    return KL_OK;
}

static const char *doc_str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* Order of preference among admitted proposals: least time lost (highest
 * t_parent/t_child), then transform and site names, so ties break the same way always. */
static bool better(const json_t *a, const json_t *b)
{
    double sa = json_number_value(json_object_get(a, "speedup"));
    double sb = json_number_value(json_object_get(b, "speedup"));
    if (!json_object_get(a, "speedup")) sa = 0;
    if (!json_object_get(b, "speedup")) sb = 0;
    if (sa != sb) return sa > sb;
    int c = strcmp(doc_str(a, "transform"), doc_str(b, "transform"));
    if (c) return c < 0;
    return strcmp(doc_str(a, "site"), doc_str(b, "site")) < 0;
}

static json_t *shape_json(const kl_task *task, const kl_shape *shape)
{
    json_t *s = json_object();
    for (unsigned k = 0; k < task->nsizes; k++) json_object_set_new(s, task->sizes[k], json_integer(shape->values[k]));
    return s;
}

/* {shape, roles}: a shape and the observables of the step's forward site there. */
static json_t *shape_roles(const kl_task *task, const char *child, const kl_fwd_site *fs, const json_t *shape)
{
    json_t *o = json_object();
    json_object_set(o, "shape", (json_t *)shape);
    json_t *obs = NULL;
    kl_error e = {0};
    if (kl_step_observe(task, child, fs, shape, &obs, &e) == KL_OK) json_object_set_new(o, "roles", obs);
    return o;
}

/* A probed step's conditions, from its probes: where the optimized side was wrong (against
 * every shape where it was right: the probes that passed and the task's own check shapes,
 * which the admitted step passed), and where it was slower (against the probes that were not,
 * and the shape the step was measured at, where it showed its gain). Each is written over the
 * sizes by role of the step's forward site (kl_probe_conditions). Derived again whenever a walk
 * is loaded, so stored walks follow the learner. */
static void derive_conditions(const kl_task *task, const json_t *doc, json_t *step)
{
    json_t *probes = json_object_get(step, "probes");
    if (!json_array_size(probes)) return;
    json_t *versions = json_object_get(doc, "versions");
    const char *parent = doc_str(json_array_get(versions, (size_t)json_integer_value(json_object_get(step, "from"))), "source");
    const char *child = doc_str(json_array_get(versions, (size_t)json_integer_value(json_object_get(step, "to"))), "source");
    kl_fwd_site fs;
    kl_error e = {0};
    if (kl_step_forward_site(task, parent, child, doc_str(step, "transform"), doc_str(step, "site"), &fs, &e) != KL_OK)
        return;
    json_t *passed = json_array(), *wrong = json_array(), *slower = json_array(), *faster = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(probes, i, p) {
        json_t *shape = json_object_get(p, "shape");
        const char *broke = doc_str(p, "broke");
        json_t *sr = shape_roles(task, child, &fs, shape);
        if (!json_is_true(json_object_get(p, "pass"))) {
            json_array_append_new(wrong, sr);
            continue;
        }
        json_array_append(passed, sr);
        if (!strcmp(broke, "slower"))
            json_array_append(slower, sr);
        else if (json_is_number(json_object_get(p, "speedup")))
            json_array_append(faster, sr);
        json_decref(sr);
    }
    for (unsigned c = 0; c < task->nchecks; c++) {
        json_t *sh = shape_json(task, &task->checks[c]);
        json_array_append_new(passed, shape_roles(task, child, &fs, sh));
        json_decref(sh);
    }
    /* where the step showed its gain: the bench shape, or the shape that runs its path */
    json_t *at = json_object_get(step, "shape");
    json_t *sh = json_is_object(at) ? json_incref(at) : shape_json(task, &task->bench);
    json_array_append_new(faster, shape_roles(task, child, &fs, sh));
    json_decref(sh);
    json_t *conds = kl_probe_conditions(passed, wrong, "wrong");
    json_t *perf = kl_probe_conditions(faster, slower, "slower");
    json_array_extend(conds, perf);
    json_decref(perf);
    json_object_set_new(step, "conditions", conds);
    json_decref(passed), json_decref(wrong), json_decref(slower), json_decref(faster);
    kl_fwd_site_release(&fs);
}

/* Where derived tasks (probes, path shapes) are written: the option, else the cache. New string. */
static char *probe_dir(const walk *w)
{
    if (w->opt->probe_dir) return kl_strdup(w->opt->probe_dir);
    char *cache = kl_cache_dir();
    char *dir = cache ? kl_path_join(cache, "probe") : NULL;
    free(cache);
    return dir;
}

/* Gate the chosen step on the probe shapes: the optimized side (parent) against the
 * simpler (child) as baseline, one derived task per shape. */
/* Gate the optimized side (parent) against the simpler (child) at one shape, in a derived task
 * whose check and bench shapes are that shape; *out: the probe record {shape, pass, speedup, …,
 * broke}. */
static kl_status probe_one(walk *w, const json_t *shape, const char *parent, const char *child, const char *dir,
                           json_t **out)
{
    *out = NULL;
    char child_name[128];
    version_name(w->task, child, child_name, sizeof child_name);
    char *tdir = NULL;
    kl_task *pt = NULL;
    kl_status st = kl_probe_task_dir(w->task, shape, false, dir, &tdir, w->err);
    if (st == KL_OK) st = kl_task_load(tdir, &pt, w->err);
    free(tdir);
    if (st != KL_OK) {
        kl_task_free(pt);
        return st;
    }
    kl_judgement j;
    st = judge(w, pt, parent, child_name, child, KL_JUDGE_PROFILE, &j);
    kl_task_free(pt);
    if (st != KL_OK) return st;
    if (j.unmeasured) return kl_error_set(w->err, KL_ERR_UNMEASURED, "probe at a shape has no recorded verdict: %s", j.reason);
    json_t *p = judgement_json(&j);
    json_object_set(p, "shape", (json_t *)shape);
    if (!j.pass)
        json_object_set_new(p, "broke", json_string(!strcmp(j.stage, "compile") ? "compile"
                                                    : !strcmp(j.stage, "correct") ? "wrong"
                                                                                   : "crash"));
    else if (j.speedup >= 0 && j.speedup < KL_SLOWER_BELOW) /* speedup here = t_child / t_parent: the gain */
        json_object_set_new(p, "broke", json_string("slower"));
    *out = p;
    return KL_OK;
}

/* Bisect each slowdown the probes found: a probe slower than the simpler side varied one size of
 * the base shape (the largest check shape); between its value and the bench shape's value of that
 * size (where the step showed its gain), halve the interval geometrically w->opt->bisect times,
 * each point a probe marked "bisect", so the condition states a bracket no wider than the last
 * two points rather than the distance between two probe values. */
static kl_status bisect_step(walk *w, json_t *step, const char *parent, const char *child, unsigned version,
                             const char *dir)
{
    json_t *probes = json_object_get(step, "probes");
    if (!json_is_array(probes) || !w->opt->bisect) return KL_OK;
    json_t *base = kl_probe_base_shape(w->task);
    size_t n0 = json_array_size(probes);
    kl_status st = KL_OK;
    /* per size: the largest value a slower probe had (the nearest to the boundary from below) */
    for (unsigned axis = 0; axis < w->task->nsizes && st == KL_OK; axis++) {
        const char *size = w->task->sizes[axis];
        double lo = -1;
        for (size_t i = 0; i < n0; i++) {
            json_t *p = json_array_get(probes, i);
            if (strcmp(doc_str(p, "broke"), "slower") != 0 || json_is_true(json_object_get(p, "bisect"))) continue;
            json_t *shape = json_object_get(p, "shape");
            bool only_this = true;
            for (unsigned k = 0; k < w->task->nsizes; k++)
                if (k != axis && json_integer_value(json_object_get(shape, w->task->sizes[k])) !=
                                     json_integer_value(json_object_get(base, w->task->sizes[k])))
                    only_this = false;
            double v = (double)json_integer_value(json_object_get(shape, size));
            if (only_this && v != (double)json_integer_value(json_object_get(base, size)) && v > lo) lo = v;
        }
        double hi = (double)w->task->bench.values[axis];
        if (lo < 1 || hi <= lo) continue;
        for (unsigned b = 0; b < w->opt->bisect; b++) {
            json_int_t m = (json_int_t)(sqrt(lo * hi) + 0.5);
            if (m <= (json_int_t)lo || m >= (json_int_t)hi) break;
            json_t *at = json_deep_copy(base);
            json_object_set_new(at, size, json_integer(m));
            if (!kl_probe_shape_ok(w->task, at)) {
                json_decref(at);
                break;
            }
            if (interrupted(w)) {
                json_decref(at);
                st = kl_error_set(w->err, KL_ERR_INTERRUPTED, "interrupted while probing");
                break;
            }
            char *shape_text = json_dumps(at, JSON_SORT_KEYS | JSON_COMPACT);
            progress(w, KL_WALK_PROBE, version, b + 1, w->opt->bisect, "bisect %s", shape_text ? shape_text : "?");
            free(shape_text);
            json_t *rec = NULL;
            st = probe_one(w, at, parent, child, dir, &rec);
            json_decref(at);
            if (st != KL_OK) break;
            json_object_set_new(rec, "bisect", json_true());
            const char *broke = doc_str(rec, "broke");
            bool slower = !strcmp(broke, "slower"), failed = *broke && !slower;
            json_array_append_new(probes, rec);
            if (failed) break;
            if (slower) lo = (double)m;
            else hi = (double)m;
        }
    }
    json_decref(base);
    return st;
}

/* Gate the chosen step on the probe shapes: the optimized side (parent) against the
 * simpler (child) as baseline, one derived task per shape; then bisect the slowdowns. */
static kl_status probe_step(walk *w, json_t *step, const char *parent, const char *child, unsigned version)
{
    json_t *shapes = kl_probe_shapes(w->task, w->opt->probes);
    json_t *probes = json_array();
    char *dir = probe_dir(w);
    kl_status st = KL_OK;
    if (!dir) {
        st = kl_error_set(w->err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    size_t i;
    json_t *shape;
    json_array_foreach(shapes, i, shape) {
        if (interrupted(w)) {
            st = kl_error_set(w->err, KL_ERR_INTERRUPTED, "interrupted while probing");
            goto cleanup;
        }
        char *shape_text = json_dumps(shape, JSON_SORT_KEYS | JSON_COMPACT);
        progress(w, KL_WALK_PROBE, version, (unsigned)i + 1, (unsigned)json_array_size(shapes), "probe %s",
                 shape_text ? shape_text : "?");
        free(shape_text);
        json_t *p = NULL;
        if ((st = probe_one(w, shape, parent, child, dir, &p)) != KL_OK) goto cleanup;
        json_array_append_new(probes, p);
    }
    json_object_set_new(step, "probes", probes);
    probes = NULL;
    st = bisect_step(w, step, parent, child, version, dir);
cleanup:
    free(dir);
    json_decref(shapes);
    json_decref(probes);
    return st;
}

/* A stored walk whose slowdowns were not bisected yet (it was probed before bisection, or with
 * --bisect 0): bisect them now, step by step, the walk saved after each. */
static kl_status bisect_stored(walk *w)
{
    if (!w->opt->bisect) return KL_OK;
    json_t *versions = json_object_get(w->doc, "versions");
    char *dir = probe_dir(w);
    if (!dir) return kl_error_set(w->err, KL_ERR_NOMEM, "out of memory");
    kl_status st = KL_OK;
    size_t k;
    json_t *step;
    json_array_foreach(json_object_get(w->doc, "steps"), k, step) {
        json_t *probes = json_object_get(step, "probes");
        bool slower = false, bisected = false;
        size_t i;
        json_t *p;
        json_array_foreach(probes, i, p) {
            if (!strcmp(doc_str(p, "broke"), "slower") && !json_is_true(json_object_get(p, "bisect"))) slower = true;
            if (json_is_true(json_object_get(p, "bisect"))) bisected = true;
        }
        if (!slower || bisected || json_object_get(step, "bisect_note")) continue;
        size_t from = (size_t)json_integer_value(json_object_get(step, "from"));
        const char *parent = doc_str(json_array_get(versions, from), "source");
        const char *child = doc_str(json_array_get(versions, from + 1), "source");
        size_t before = json_array_size(probes);
        progress(w, KL_WALK_PROBE, (unsigned)from, 0, 0, "bisecting the slowdowns of %s", doc_str(step, "transform"));
        st = bisect_step(w, step, parent, child, (unsigned)from, dir);
        if (st != KL_OK) break;
        if (json_array_size(probes) == before) {
            /* nothing could be bisected (the interval was too narrow or too costly): say so, once */
            json_t *none = json_object();
            json_object_set_new(none, "bisect", json_true());
            json_object_set_new(none, "none", json_string("no point between the slowdown and the bench shape to probe"));
            json_object_set_new(step, "bisect_note", none);
        }
        derive_conditions(w->task, w->doc, step);
        if ((st = save(w)) != KL_OK) break;
    }
    free(dir);
    return st;
}

/* A proposal's identity: its transform, where its edit starts in the version's text and a
 * hash of what it removes and inserts (the edit is the span between the longest common
 * prefix and suffix of parent and child). Site ids carry line numbers and sites may look
 * alike (every `#pragma unroll`), so neither alone identifies a proposal across versions;
 * when a step is taken, every other estimate's offset is moved by that step's edit
 * (shift_estimates), and estimates whose edit overlaps it are dropped. */
static void edit_span(const char *parent, const char *child, size_t *start, size_t *pend, size_t *cend)
{
    size_t pl = strlen(parent), cl = strlen(child), p = 0, s = 0;
    while (p < pl && p < cl && parent[p] == child[p]) p++;
    while (s < pl - p && s < cl - p && parent[pl - 1 - s] == child[cl - 1 - s]) s++;
    *start = p, *pend = pl - s, *cend = cl - s;
}

static void proposal_id_at(const char *transform, size_t start, const char *removed, size_t rlen,
                           const char *inserted, size_t ilen, char *buf, size_t size)
{
    kl_hasher *h = kl_hasher_new();
    kl_hasher_parts(h, transform);
    char *x = kl_strndup(removed, rlen), *y = kl_strndup(inserted, ilen);
    kl_hasher_parts(h, x ? x : "");
    kl_hasher_parts(h, y ? y : "");
    free(x), free(y);
    char hex[KL_HASH_HEX];
    kl_hasher_finish(h, hex);
    kl_snprintf(buf, size, "%s@%zu:%.16s", transform, start, hex);
}

void kl_proposal_id(const char *transform, const char *parent, const char *child, char *buf, size_t size)
{
    size_t a, pe, ce;
    edit_span(parent, child, &a, &pe, &ce);
    proposal_id_at(transform, a, parent + a, pe - a, child + a, ce - a, buf, size);
}

/* After the step parent -> child: keep the estimates whose edits lie wholly before or after
 * the step's edit, their offsets moved to the child's text. */
static void shift_estimates(walk *w, const char *parent, const char *child)
{
    json_t *est = json_object_get(w->doc, "estimates");
    if (!est) return;
    size_t a, pe, ce;
    edit_span(parent, child, &a, &pe, &ce);
    json_int_t delta = (json_int_t)ce - (json_int_t)pe;
    json_t *moved = json_object();
    const char *key;
    json_t *e;
    json_object_foreach(est, key, e) {
        json_int_t s0 = json_integer_value(json_object_get(e, "start"));
        json_int_t s1 = json_integer_value(json_object_get(e, "end"));
        if (s1 <= (json_int_t)a) {
            json_object_set(moved, key, e);
        } else if (s0 >= (json_int_t)pe) {
            json_t *c = json_deep_copy(e);
            json_object_set_new(c, "start", json_integer(s0 + delta));
            json_object_set_new(c, "end", json_integer(s1 + delta));
            const char *at = strchr(key, '@'), *colon = at ? strchr(at, ':') : NULL;
            char nk[256];
            if (at && colon)
                kl_snprintf(nk, sizeof nk, "%.*s@%lld%s", (int)(at - key), key, (long long)(s0 + delta), colon);
            else
                kl_snprintf(nk, sizeof nk, "%s", key);
            json_object_set_new(moved, nk, c);
        }
    }
    json_object_set_new(w->doc, "estimates", moved);
}

/* One proposal of a version while it is being decided. */
typedef struct prop {
    const kl_candidate *c;
    char id[160];
    size_t start, end;      /* the edit's span in the version's text */
    unsigned n_child;
    json_t *fresh;      /* judged at this version (owned), or NULL */
    bool sanitize;      /* judged again with the sanitizer stages before it is admitted */
    const json_t *est;  /* the latest judgement from an earlier version (borrowed), or NULL */
    char fn[128];       /* the function its site is in */
    bool off_path;      /* that function does not run at the bench shape */
    bool deferred;      /* off the path while a dispatch that guards it can be removed first */
    json_t *path_shape; /* judged at this shape, where its function runs (owned), or NULL */
    json_t *inside;     /* specialize: the functions only its specialized path runs (owned) */
    bool has_pre;       /* pre holds its judgement, made in the version's batch (judge_many) */
    kl_judgement pre;
} prop;

/* The functions of text that only the specialized path of a dispatch runs: the specialized
 * kernels (the rules' "specialized") and the helpers only they call. */
static json_t *specialized_functions(const char *text, const char *features_json)
{
    json_t *out = json_array();
    json_t *f = features_json ? json_loads(features_json, 0, NULL) : NULL;
    json_t *spec = json_object_get(f, "specialized");
    const char *general = json_string_value(json_object_get(f, "general"));
    kl_source *src = NULL;
    kl_model *m = NULL;
    kl_error e = {0};
    if (!json_array_size(spec) || kl_source_parse_text("version.cu", text, strlen(text), &src, &e) != KL_OK ||
        kl_model_build(src, &m, &e) != KL_OK)
        goto cleanup;
    json_t *gcalls = NULL;
    int gi = general ? kl_model_find_function(m, general, KL_FUNCTION_KERNEL) : -1;
    json_t *gf = gi >= 0 ? kl_model_features(m, (unsigned)gi) : NULL;
    gcalls = json_object_get(gf, "calls");
    size_t i, j;
    json_t *k, *c, *g;
    json_array_foreach(spec, i, k) {
        json_array_append(out, k);
        int ki = kl_model_find_function(m, json_string_value(k), KL_FUNCTION_KERNEL);
        json_t *kf = ki >= 0 ? kl_model_features(m, (unsigned)ki) : NULL;
        json_array_foreach(json_object_get(kf, "calls"), j, c) {
            bool shared = false;
            size_t q;
            json_array_foreach(gcalls, q, g) if (json_equal(g, c)) shared = true;
            if (!shared) json_array_append(out, c);
        }
        json_decref(kf);
    }
    json_decref(gf);
cleanup:
    kl_model_free(m);
    kl_source_free(src);
    json_decref(f);
    return out;
}

static bool names_has(const json_t *names, const char *name)
{
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n) if (json_is_string(n) && !strcmp(json_string_value(n), name)) return true;
    return false;
}

/* Judge proposal c against the version text; o receives the record (pass, verdict, speedup …). */
static kl_status judge_prop(walk *w, unsigned version, const char *text, const char *name, prop *pp,
                            unsigned index, unsigned n)
{
    const kl_candidate *c = pp->c;
    json_t *o = json_object();
    json_object_set_new(o, "version", json_integer(version));
    json_object_set_new(o, "transform", json_string(c->transform));
    json_object_set_new(o, "site", json_string(c->site));
    json_object_set_new(o, "note", json_string(c->note));
    json_t *params = json_loads(c->params_json, 0, NULL);
    json_object_set_new(o, "params", params ? params : json_object());
    json_t *feat = c->features_json ? json_loads(c->features_json, 0, NULL) : NULL;
    if (feat) json_object_set_new(o, "features", feat);
    kl_judgement j;
    kl_task *pt = NULL;
    kl_status st = KL_OK;
    if (pp->path_shape) {
        /* its function does not run at the bench shape: measured where it runs, checked at the
         * task's own check shapes as every proposal is */
        char *dir = probe_dir(w), *tdir = NULL;
        st = dir ? kl_probe_task_dir(w->task, pp->path_shape, true, dir, &tdir, w->err)
                 : kl_error_set(w->err, KL_ERR_NOMEM, "out of memory");
        if (st == KL_OK) st = kl_task_load(tdir, &pt, w->err);
        free(dir), free(tdir);
        json_object_set(o, "shape", pp->path_shape);
        json_object_set_new(o, "path_function", json_string(pp->fn));
    }
    if (st == KL_OK && pp->has_pre && !pt && !pp->sanitize) {
        j = pp->pre; /* judged in the version's batch: the same request */
        pp->has_pre = false;
    } else if (st == KL_OK) {
        st = judge(w, pt ? pt : w->task, c->source, name, text, KL_JUDGE_PROFILE | KL_JUDGE_BENCH_VS_BASELINE | (pp->sanitize ? KL_JUDGE_SANITIZE : 0), &j);
    }
    kl_task_free(pt);
    if (st != KL_OK) {
        json_decref(o);
        return st;
    }
    if (j.unmeasured) {
        json_decref(o);
        return kl_error_set(w->err, KL_ERR_UNMEASURED, "%s@%s: no recorded verdict: %s", c->transform, c->site,
                            j.reason);
    }
    json_t *jj = judgement_json(&j);
    json_object_update(o, jj);
    json_decref(jj);
    json_object_set_new(o, "recognized", json_integer(pp->n_child));
    json_object_set_new(o, "id", json_string(pp->id));
    if (j.pass)
        progress(w, KL_WALK_JUDGED, version, index, n, "%s@%s admitted (parent/child time %.3f)", c->transform,
                 c->site, j.speedup);
    else
        progress(w, KL_WALK_JUDGED, version, index, n, "%s@%s rejected at %s: %s", c->transform, c->site, j.stage,
                 j.reason);
    /* the latest judgement of this proposal, for later versions (lazy strategy) */
    json_t *est = json_object_get(w->doc, "estimates");
    if (!est) {
        est = json_object();
        json_object_set_new(w->doc, "estimates", est);
    }
    json_t *e = json_object();
    json_object_set_new(e, "version", json_integer(version));
    json_object_set_new(e, "pass", json_boolean(j.pass));
    if (j.speedup >= 0) json_object_set_new(e, "speedup", json_real(j.speedup));
    json_object_set_new(e, "transform", json_string(c->transform));
    json_object_set_new(e, "site", json_string(c->site));
    json_object_set_new(e, "start", json_integer((json_int_t)pp->start));
    json_object_set_new(e, "end", json_integer((json_int_t)pp->end));
    json_object_set(est, pp->id, e);
    json_decref(e);
    if (pp->sanitize) json_object_set_new(o, "sanitized", json_true());
    json_decref(pp->fresh);
    pp->fresh = o;
    return KL_OK;
}

/* The judgement that ranks a proposal now: fresh, else the estimate. */
static const json_t *prop_view(const prop *p) { return p->fresh ? p->fresh : p->est; }
static bool prop_pass(const prop *p)
{
    const json_t *v = prop_view(p);
    return v && json_is_true(json_object_get(v, "pass"));
}

/* May p be chosen now? Not a deferred proposal; not a dispatch's removal while a proposal that
 * passes (as far as is known) sits inside its specialized path: that path is peeled first, so
 * the dispatch is not credited with what is inside it. */
static bool eligible(const prop *pp, unsigned np, const prop *p)
{
    if (p->deferred) return false;
    if (!p->inside) return true;
    for (unsigned i = 0; i < np; i++) {
        const prop *q = &pp[i];
        if (q == p || q->deferred || !prop_pass(q)) continue;
        if (names_has(p->inside, q->fn)) return false;
    }
    return true;
}

/* One version: propose, judge, choose. *moved false when nothing could be admitted.
 *
 * Strategy "full" judges every proposal at every version. Strategy "lazy" (the default)
 * judges every proposal it has never judged; a proposal judged at an earlier version keeps
 * that judgement as an estimate and is judged again, against this version, only when it
 * becomes the best candidate (lazy greedy: the admitted step is always a fresh judgement
 * and the best of all fresh judgements and estimates). Proposals rejected earlier are judged
 * again before the walk concludes that nothing more can be removed. */
static kl_status walk_version(walk *w, unsigned version, bool *moved)
{
    *moved = false;
    json_t *versions = json_object_get(w->doc, "versions");
    json_t *cur = json_array_get(versions, version);
    const char *text = doc_str(cur, "source");
    char name[128];
    version_name(w->task, text, name, sizeof name);

    kl_candidates props = {0};
    unsigned n_here = 0;
    kl_status st = recognized(w, text, name, &n_here, &props, NULL, NULL);
    if (st != KL_OK) return st;
    json_object_set_new(cur, "recognized", json_integer(n_here));
    progress(w, KL_WALK_PROPOSALS, version, 0, props.count, "%u simplifications proposed", props.count);

    json_t *rejected = json_object_get(w->doc, "rejected");
    for (unsigned r = 0; r < props.nrejected; r++) {
        json_t *o = json_object();
        json_object_set_new(o, "version", json_integer(version));
        json_object_set_new(o, "transform", json_string(props.rejected[r].transform));
        json_object_set_new(o, "site", json_string(props.rejected[r].site));
        json_object_set_new(o, "stage", json_string("rewrite"));
        json_object_set_new(o, "reason", json_string(props.rejected[r].reason));
        json_array_append_new(rejected, o);
    }

    json_t *admitted = json_array();
    prop *pp = calloc(props.count ? props.count : 1, sizeof *pp);
    unsigned np = 0;
    if (!pp) {
        st = kl_error_set(w->err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    /* simpler? (one recognized optimization fewer) */
    json_t *estimates = json_object_get(w->doc, "estimates");
    for (unsigned i = 0; i < props.count; i++) {
        const kl_candidate *c = &props.items[i];
        unsigned n_child = 0, of_child = UINT_MAX, of_here = count_of(&props, c->transform);
        st = recognized(w, c->source, name, &n_child, NULL, c->transform, &of_child);
        if (st != KL_OK) goto cleanup;
        /* simpler: fewer optimizations recognized; or as many, when one of the removed kind is
         * gone and the one that appeared was inside it (a register tile hides its shared tiles
         * until it is taken apart) */
        bool simpler = n_child < n_here || (n_child == n_here && of_here != UINT_MAX && of_child < of_here);
        if (!simpler) {
            json_t *o = json_object();
            json_object_set_new(o, "version", json_integer(version));
            json_object_set_new(o, "transform", json_string(c->transform));
            json_object_set_new(o, "site", json_string(c->site));
            json_object_set_new(o, "stage", json_string("simpler"));
            char why[160];
            kl_snprintf(why, sizeof why, "not simpler: %u recognized optimizations after, %u before", n_child, n_here);
            json_object_set_new(o, "reason", json_string(why));
            json_array_append_new(rejected, o);
            progress(w, KL_WALK_JUDGED, version, i + 1, props.count, "%s@%s rejected: %s", c->transform, c->site, why);
            continue;
        }
        prop *p = &pp[np++];
        p->c = c;
        p->n_child = n_child;
        kl_proposal_id(c->transform, text, c->source, p->id, sizeof p->id);
        size_t pe_, ce_;
        edit_span(text, c->source, &p->start, &pe_, &ce_);
        p->end = pe_;
        if (!w->opt->full && estimates) {
            const json_t *e = json_object_get(estimates, p->id);
            /* only judgements from earlier versions are estimates; one from this version
             * (a resumed walk) is simply judged again and found in the verdict cache */
            if (e && json_integer_value(json_object_get(e, "version")) < (json_int_t)version) p->est = e;
        }
    }

    /* Gains where the code runs. A proposal in a function the bench shape does not run (the
     * general path of a dispatch, at a shape that takes the specialized one) is deferred while
     * the dispatch can be removed first (then the general path runs at the bench shape), else
     * measured at a shape that runs it. A dispatch is removed only after the optimizations
     * inside its specialized path are peeled (ranking: eligible()). */
    {
        kl_source *vsrc = NULL;
        kl_error perr = {0};
        bool dispatch = false;
        for (unsigned i = 0; i < np; i++) dispatch |= !strcmp(pp[i].c->transform, "specialize");
        if (kl_source_parse_text(name, text, strlen(text), &vsrc, &perr) == KL_OK) {
            for (unsigned i = 0; i < np; i++) {
                prop *p = &pp[i];
                const char *colon = strchr(p->c->site, ':');
                kl_snprintf(p->fn, sizeof p->fn, "%.*s", colon ? (int)(colon - p->c->site) : (int)strlen(p->c->site),
                            p->c->site);
                if (!strcmp(p->c->transform, "specialize"))
                    p->inside = specialized_functions(text, p->c->features_json);
                p->off_path = kl_skill_runs_at(vsrc, w->task, &w->task->bench, p->fn) < 0;
                if (!p->off_path) continue;
                if (dispatch && strcmp(p->c->transform, "specialize") != 0) {
                    p->deferred = true;
                } else {
                    p->path_shape = kl_path_shape(w->task, text, p->fn);
                    p->est = NULL; /* an estimate from the bench shape says nothing here */
                }
            }
            kl_source_free(vsrc);
        }
    }
    json_t *deferred = json_array();
    for (unsigned i = 0; i < np; i++)
        if (pp[i].deferred) {
            json_t *o = json_object();
            json_object_set_new(o, "transform", json_string(pp[i].c->transform));
            json_object_set_new(o, "site", json_string(pp[i].c->site));
            json_object_set_new(o, "why", json_string("its function does not run at the bench shape; the dispatch that "
                                                      "guards it is removed first"));
            json_array_append_new(deferred, o);
            progress(w, KL_WALK_JUDGED, version, i + 1, np, "%s@%s deferred: %s does not run at the bench shape",
                     pp[i].c->transform, pp[i].c->site, pp[i].fn);
        }
    if (json_array_size(deferred)) json_object_set_new(cur, "deferred", deferred);
    else json_decref(deferred);

    /* compile what will be judged now, in parallel */
    if (w->opt->prepare && np) {
        const char **names = calloc(np, sizeof *names), **texts = calloc(np, sizeof *texts);
        char (*buf)[128] = calloc(np, sizeof *buf);
        unsigned m = 0;
        if (names && texts && buf) {
            for (unsigned i = 0; i < np; i++) {
                if (pp[i].est || pp[i].deferred || pp[i].path_shape) continue;
                version_name(w->task, pp[i].c->source, buf[m], sizeof buf[m]);
                names[m] = buf[m];
                texts[m] = pp[i].c->source;
                m++;
            }
            kl_error perr = {0};
            /* a failure here is not the walk's: each judgement reports its own compile */
            if (m) (void)w->opt->prepare(w->opt->judge_user, w->task, m, names, texts, &perr);
        }
        free(names), free(texts), free(buf);
    }

    /* where the gate has several workers (--gpus, Slurm), the proposals judged now are judged at
     * once, wherever a worker is free; the loop below then takes their judgements in its order,
     * so the walk is the one judging them one by one makes. A failed batch leaves the rest to
     * the loop, which meets the same failure where it belongs. */
    if (w->opt->judge_many && np > 1) {
        kl_judge_request *reqs = calloc(np, sizeof *reqs);
        kl_judgement *outs = calloc(np, sizeof *outs);
        char (*buf)[128] = calloc(np, sizeof *buf);
        unsigned *of = calloc(np, sizeof *of), m = 0, done = 0;
        if (reqs && outs && buf && of) {
            for (unsigned i = 0; i < np; i++) {
                if (pp[i].est || pp[i].deferred || pp[i].path_shape || pp[i].sanitize) continue;
                version_name(w->task, pp[i].c->source, buf[m], sizeof buf[m]);
                reqs[m] = (kl_judge_request){buf[m], pp[i].c->source, name, text,
                                             KL_JUDGE_PROFILE | KL_JUDGE_BENCH_VS_BASELINE};
                outs[m].speedup = outs[m].cand_ms = outs[m].base_ms = -1;
                of[m++] = i;
            }
            kl_error berr = {0};
            if (m > 1) {
                kl_status bs = w->opt->judge_many(w->opt->judge_user, w->task, m, reqs, outs, &done, &berr);
                if (bs == KL_OK) done = m;
                for (unsigned k = 0; k < done; k++) {
                    pp[of[k]].pre = outs[k];
                    pp[of[k]].has_pre = true;
                }
            }
        }
        free(reqs), free(outs), free(buf), free(of);
    }

    unsigned judged = 0, reused = 0;
    prop *chosen = NULL;
    for (unsigned i = 0; i < np; i++) {
        if (pp[i].est || pp[i].deferred) continue;
        if (interrupted(w)) {
            st = kl_error_set(w->err, KL_ERR_INTERRUPTED, "interrupted at version %u", version);
            goto cleanup;
        }
        st = judge_prop(w, version, text, name, &pp[i], i + 1, np);
        if (st != KL_OK) goto cleanup;
        judged++;
    }
    /* lazy: judge the best candidate again until the best is a fresh judgement */
    for (;;) {
        prop *best = NULL;
        for (int pass = 0; pass < 2 && !best; pass++) /* the eligible first, then any that passes */
            for (unsigned i = 0; i < np; i++)
                if (prop_pass(&pp[i]) && !pp[i].deferred && (pass || eligible(pp, np, &pp[i])) &&
                    (!best || better(prop_view(&pp[i]), prop_view(best))))
                    best = &pp[i];
        if (!best) {
            /* nothing passes as far as we know: judge again what was rejected earlier */
            bool any = false;
            for (unsigned i = 0; i < np; i++) {
                if (pp[i].fresh || pp[i].deferred) continue;
                if (interrupted(w)) {
                    st = kl_error_set(w->err, KL_ERR_INTERRUPTED, "interrupted at version %u", version);
                    goto cleanup;
                }
                st = judge_prop(w, version, text, name, &pp[i], i + 1, np);
                if (st != KL_OK) goto cleanup;
                judged++, any = true;
            }
            if (!any) {
                /* the dispatch could not be removed: what it deferred is measured where it runs */
                for (unsigned i = 0; i < np; i++) {
                    if (!pp[i].deferred) continue;
                    pp[i].deferred = false;
                    pp[i].path_shape = kl_path_shape(w->task, text, pp[i].fn);
                    pp[i].est = NULL;
                    if (interrupted(w)) {
                        st = kl_error_set(w->err, KL_ERR_INTERRUPTED, "interrupted at version %u", version);
                        goto cleanup;
                    }
                    st = judge_prop(w, version, text, name, &pp[i], i + 1, np);
                    if (st != KL_OK) goto cleanup;
                    judged++, any = true;
                }
                json_object_del(cur, "deferred");
            }
            if (!any) break;
            continue;
        }
        /* the best is admitted only once it also passed the sanitizer stages (a race the
         * default stages miss); failing them, it drops out and the next best is tried */
        if (best->fresh && json_is_true(json_object_get(best->fresh, "sanitized"))) {
            chosen = best;
            break;
        }
        best->sanitize = best->fresh != NULL;
        if (interrupted(w)) {
            st = kl_error_set(w->err, KL_ERR_INTERRUPTED, "interrupted at version %u", version);
            goto cleanup;
        }
        st = judge_prop(w, version, text, name, best, (unsigned)(best - pp) + 1, np);
        if (st != KL_OK) goto cleanup;
        judged++;
    }
    json_t *not_judged = json_array(), *chosen_o = NULL;
    for (unsigned i = 0; i < np; i++) {
        if (pp[i].fresh) {
            json_t *o = pp[i].fresh;
            pp[i].fresh = NULL;
            if (&pp[i] == chosen) chosen_o = o;
            if (json_is_true(json_object_get(o, "pass"))) {
                json_object_set_new(o, "source", json_string(pp[i].c->source));
                json_array_append_new(admitted, o);
            } else {
                json_array_append_new(rejected, o);
            }
        } else if (pp[i].est) {
            json_t *o = json_object();
            json_object_set_new(o, "transform", json_string(pp[i].c->transform));
            json_object_set_new(o, "site", json_string(pp[i].c->site));
            json_object_set_new(o, "estimate_from", json_object_get(pp[i].est, "version")
                                                        ? json_deep_copy(json_object_get(pp[i].est, "version"))
                                                        : json_null());
            if (json_object_get(pp[i].est, "speedup"))
                json_object_set_new(o, "speedup", json_deep_copy(json_object_get(pp[i].est, "speedup")));
            json_object_set_new(o, "pass", json_deep_copy(json_object_get(pp[i].est, "pass")));
            json_array_append_new(not_judged, o);
            reused++;
        }
    }
    json_object_set_new(cur, "judged", json_integer(judged));
    if (json_array_size(not_judged))
        json_object_set_new(cur, "estimated", not_judged);
    else
        json_decref(not_judged);
    if (reused)
        progress(w, KL_WALK_PROPOSALS, version, 0, np, "%u judged, %u ranked by earlier judgements", judged, reused);

    if (json_array_size(admitted) == 0 || !chosen_o) goto cleanup;
    json_t *best = chosen_o;
    size_t k;
    json_t *a;

    const char *child = doc_str(best, "source");
    json_t *step = json_object();
    json_object_set_new(step, "from", json_integer(version));
    json_object_set_new(step, "to", json_integer(version + 1));
    const char *keys[] = {"transform", "site", "note", "params", "features", "verdict", "speedup", "cand_ms",
                          "base_ms", "device", "date", "shape", "path_function"};
    for (unsigned q = 0; q < sizeof keys / sizeof keys[0]; q++)
        if (json_object_get(best, keys[q])) json_object_set(step, keys[q], json_object_get(best, keys[q]));
    char *hb = NULL, *ha = NULL;
    unsigned line = 0;
    kl_text_hunk(child, text, &hb, &ha, &line); /* before = simpler, after = optimized */
    json_t *diff = json_object();
    json_object_set_new(diff, "before", json_string(hb ? hb : ""));
    json_object_set_new(diff, "after", json_string(ha ? ha : ""));
    json_object_set_new(diff, "line", json_integer(line));
    json_object_set_new(step, "diff", diff);
    free(hb), free(ha);
    json_object_set_new(step, "alternatives", json_integer((json_int_t)json_array_size(admitted) - 1));
    /* Other admitted proposals are evidence too: kept, without their text. */
    json_array_foreach(admitted, k, a) {
        if (a == best) continue;
        json_t *o = json_deep_copy(a);
        json_object_del(o, "source");
        json_object_set_new(o, "stage", json_string("chosen-other"));
        json_object_set_new(o, "reason", json_string("admitted, but another simplification cost less time"));
        json_array_append_new(rejected, o);
    }

    double sp = json_number_value(json_object_get(step, "speedup"));
    double gain = sp > 0 ? 1.0 / sp : 0; /* t(child) / t(parent): what the optimization gives */
    if (w->opt->probes && w->opt->probe_min_gain > 0 && gain < w->opt->probe_min_gain) {
        char why[160];
        kl_snprintf(why, sizeof why, "not probed: the gain (%.3fx) is below %.2fx", gain, w->opt->probe_min_gain);
        json_object_set_new(step, "probe_skipped", json_string(why));
        progress(w, KL_WALK_PROBE, version, 0, 0, "%s: %s", doc_str(step, "transform"), why);
    } else if (w->opt->probes) {
        progress(w, KL_WALK_PROBE, version, 0, w->opt->probes, "probing %s", doc_str(step, "transform"));
        st = probe_step(w, step, text, child, version);
        if (st != KL_OK) {
            json_decref(step);
            goto cleanup;
        }
    }

    shift_estimates(w, text, child);
    json_t *v = json_object();
    char hex[KL_HASH_HEX];
    kl_hash_hex(child, strlen(child), hex);
    json_object_set_new(v, "index", json_integer(version + 1));
    json_object_set_new(v, "hash", json_string(hex));
    json_object_set_new(v, "source", json_string(child));
    json_object_set_new(v, "recognized", json_object_get(best, "recognized") ? json_deep_copy(json_object_get(best, "recognized")) : json_integer(0));
    json_array_append_new(versions, v);
    derive_conditions(w->task, w->doc, step); /* over the simpler version's sizes by role */
    json_array_append_new(json_object_get(w->doc, "steps"), step);
    progress(w, KL_WALK_STEP, version + 1, 0, 0, "step %u: removed %s at %s", version + 1,
             doc_str(step, "transform"), doc_str(step, "site"));
    *moved = true;
cleanup:
    if (pp)
        for (unsigned i = 0; i < np; i++) {
            json_decref(pp[i].fresh);
            json_decref(pp[i].path_shape);
            json_decref(pp[i].inside);
        }
    free(pp);
    json_decref(admitted);
    kl_candidates_free(&props);
    return st;
}

static kl_status load_or_start(walk *w, const char *expert_name, const char *expert_text)
{
    char *text = NULL;
    kl_status st = KL_OK;
    if (!w->opt->restart) {
        st = kl_store_get(w->opt->store, "lineage", w->key, &text, w->err);
        if (st == KL_OK) {
            json_error_t je;
            w->doc = json_loads(text, 0, &je);
            free(text);
            if (!w->doc || !json_is_array(json_object_get(w->doc, "versions")) ||
                json_array_size(json_object_get(w->doc, "versions")) == 0)
                return kl_error_set(w->err, KL_ERR_PARSE, "stored lineage %.12s is damaged: %s", w->key,
                                    w->doc ? "no versions" : je.text);
            json_t *rules = json_object_get(w->doc, "walk_rules");
            if (!w->opt->restart_older || (json_is_integer(rules) && json_integer_value(rules) >= KL_WALK_RULES))
                return KL_OK;
            /* made with earlier rules: walked again (a walk of the current rules resumes instead) */
            progress(w, KL_WALK_START, 0, 0, 0, "the stored walk was made with earlier walk rules: walking again");
            json_decref(w->doc);
            w->doc = NULL;
            st = KL_ERR_NOT_FOUND; /* as if none were stored */
        }
        if (st != KL_ERR_NOT_FOUND) return st;
        kl_error_clear(w->err);
    }
    w->doc = json_object();
    json_object_set_new(w->doc, "format", json_string(KL_LINEAGE_FORMAT));
    json_object_set_new(w->doc, "key", json_string(w->key));
    json_object_set_new(w->doc, "task", json_string(w->task->name));
    json_object_set_new(w->doc, "task_dir", json_string(w->task->dir));
    json_object_set_new(w->doc, "expert", json_string(expert_name));
    json_object_set_new(w->doc, "rewriter", json_string(kl_rewriter_name(w->opt->rewriter)));
    json_object_set_new(w->doc, "strategy", json_string(w->opt->full ? "full" : "lazy"));
    /* what decides which shapes are probed: a walk recomputed from recorded verdicts must ask
     * for the same (kl_lineage_recorded_options) */
    json_object_set_new(w->doc, "options",
                        json_pack("{s:i, s:f}", "probes", (json_int_t)w->opt->probes, "probe_min_gain",
                                  w->opt->probe_min_gain));
    json_object_set_new(w->doc, "walk_rules", json_integer(KL_WALK_RULES));
    json_object_set_new(w->doc, "state", json_string("walking"));
    json_t *bench = json_object();
    for (unsigned k = 0; k < w->task->nsizes; k++)
        json_object_set_new(bench, w->task->sizes[k], json_integer(w->task->bench.values[k]));
    json_object_set_new(w->doc, "bench", bench);
    char stamp[32];
    kl_utc_stamp(stamp, sizeof stamp);
    json_object_set_new(w->doc, "started", json_string(stamp));
    json_t *v0 = json_object();
    char hex[KL_HASH_HEX];
    kl_hash_hex(expert_text, strlen(expert_text), hex);
    json_object_set_new(v0, "index", json_integer(0));
    json_object_set_new(v0, "hash", json_string(hex));
    json_object_set_new(v0, "source", json_string(expert_text));
    json_t *versions = json_array();
    json_array_append_new(versions, v0);
    json_object_set_new(w->doc, "versions", versions);
    json_object_set_new(w->doc, "steps", json_array());
    json_object_set_new(w->doc, "rejected", json_array());
    return KL_OK;
}

/* The expert must pass the gate before anything is learned from it. */
static kl_status judge_expert(walk *w, const char *naive_name, const char *naive_text)
{
    if (json_object_get(w->doc, "expert_verdict")) return KL_OK;
    const char *text = doc_str(json_array_get(json_object_get(w->doc, "versions"), 0), "source");
    kl_judgement j;
    kl_status st = judge(w, w->task, text, naive_name, naive_text, KL_JUDGE_PROFILE, &j);
    if (st != KL_OK) return st;
    if (j.unmeasured) return kl_error_set(w->err, KL_ERR_UNMEASURED, "the expert has no recorded verdict: %s", j.reason);
    if (!j.pass)
        return kl_error_set(w->err, KL_ERR_INVALID, "%s: the expert does not pass the gate (%s: %s)",
                            doc_str(w->doc, "expert"), j.stage, j.reason);
    json_object_set_new(w->doc, "expert_verdict", judgement_json(&j));
    return save(w);
}

/* The verdicts against the naive kernel hold for the naive text they were judged with: the
 * document keeps its hash, and a naive.cu edited since is judged again at both ends (a
 * document from before the hash was kept counts as current). */
static void forget_stale_naive(walk *w, const char *naive_text)
{
    if (!naive_text) return;
    char hex[KL_HASH_HEX];
    kl_hash_hex(naive_text, strlen(naive_text), hex);
    const char *had = doc_str(w->doc, "naive_sha256");
    if (*had && strcmp(had, hex) != 0) {
        json_object_del(w->doc, "expert_verdict");
        json_object_del(w->doc, "root_vs_naive");
        progress(w, KL_WALK_START, 0, 0, 0, "the naive kernel changed since the walk judged it: judging again");
    }
    json_object_set_new(w->doc, "naive_sha256", json_string(hex));
}

static kl_status finish(walk *w, const char *naive_name, const char *naive_text)
{
    json_t *versions = json_object_get(w->doc, "versions");
    const char *root = doc_str(json_array_get(versions, json_array_size(versions) - 1), "source");
    if (naive_text && !json_object_get(w->doc, "root_vs_naive")) {
        kl_judgement j;
        kl_status st = judge(w, w->task, root, naive_name, naive_text, KL_JUDGE_PROFILE, &j);
        if (st != KL_OK) return st;
        if (j.unmeasured)
            return kl_error_set(w->err, KL_ERR_UNMEASURED, "the root has no recorded verdict against naive: %s", j.reason);
        json_object_set_new(w->doc, "root_vs_naive", judgement_json(&j));
    }
    json_object_set_new(w->doc, "state", json_string("done"));
    return save(w);
}

kl_status kl_lineage_walk(const kl_task *task, const kl_lineage_options *opt, char **doc_json, kl_error *err)
{
    if (doc_json) *doc_json = NULL;
    if (!opt || !opt->rewriter || !opt->store || !opt->judge)
        return kl_error_set(err, KL_ERR_INVALID, "lineage: a rewriter, a store and a judge are required");
    walk w = {task, opt, NULL, {0}, err};
    char *expert_path = NULL, *expert_text = NULL, *naive_path = NULL, *naive_text = NULL;
    kl_status st = KL_OK;
    if (opt->expert_path) {
        expert_path = kl_strdup(opt->expert_path);
    } else if (task->expert) {
        expert_path = kl_task_path(task, task->expert);
    } else {
        return kl_error_set(err, KL_ERR_INVALID, "%s/task.json: no \"expert\" kernel and no --expert given", task->dir);
    }
    KL_TRY(kl_file_read(expert_path, KL_SOURCE_MAX, &expert_text, NULL, err));
    if (task->naive) {
        naive_path = kl_task_path(task, task->naive);
        KL_TRY(kl_file_read(naive_path, KL_SOURCE_MAX, &naive_text, NULL, err));
    }
    kl_lineage_key(task, expert_text, kl_rewriter_name(opt->rewriter), opt->full, w.key);
    KL_TRY(load_or_start(&w, expert_path, expert_text));
    progress(&w, KL_WALK_START, 0, 0, 0, "walking %s from %s (%zu step(s) stored)", task->name, expert_path,
             json_array_size(json_object_get(w.doc, "steps")));
    forget_stale_naive(&w, naive_text);
    {
        size_t k;
        json_t *step;
        json_array_foreach(json_object_get(w.doc, "steps"), k, step) derive_conditions(task, w.doc, step);
    }
    if (opt->bisect) {
        /* the walk says it was bisected, so that a recomputation bisects alike */
        json_t *o = json_object_get(w.doc, "options");
        if (json_is_object(o) && json_integer_value(json_object_get(o, "bisect")) < (json_int_t)opt->bisect)
            json_object_set_new(o, "bisect", json_integer(opt->bisect));
    }
    KL_TRY(bisect_stored(&w));
    /* a finished walk taken up again: the rewriter may see more to remove than when it ended;
     * both ends are judged against the naive kernel again */
    if (opt->reopen && !strcmp(doc_str(w.doc, "state"), "done") &&
        !strcmp(doc_str(w.doc, "stop_reason"), "nothing more can be removed")) {
        json_object_set_new(w.doc, "state", json_string("walking"));
        json_object_del(w.doc, "stop_reason");
        json_object_del(w.doc, "root_vs_naive");
        json_object_del(w.doc, "expert_verdict");
        progress(&w, KL_WALK_START, 0, 0, 0, "taking the finished walk up again at version %zu",
                 json_array_size(json_object_get(w.doc, "versions")) - 1);
    }
    KL_TRY(judge_expert(&w, naive_path, naive_text));

    unsigned max_steps = opt->max_steps ? opt->max_steps : 64;
    if (strcmp(doc_str(w.doc, "state"), "done") != 0) {
        for (;;) {
            json_t *versions = json_object_get(w.doc, "versions");
            unsigned version = (unsigned)json_array_size(versions) - 1;
            if (version >= max_steps) {
                json_object_set_new(w.doc, "stop_reason", json_string("the step limit was reached"));
                break;
            }
            bool moved = false;
            st = walk_version(&w, version, &moved);
            if (st != KL_OK) goto cleanup;
            KL_TRY(save(&w));
            progress(&w, KL_WALK_STORED, version + (moved ? 1 : 0), 0, 0, "the walk stored");
            if (!moved) {
                json_object_set_new(w.doc, "stop_reason", json_string("nothing more can be removed"));
                break;
            }
        }
        KL_TRY(finish(&w, naive_path, naive_text));
    } else if (naive_text && !json_object_get(w.doc, "root_vs_naive")) {
        KL_TRY(finish(&w, naive_path, naive_text)); /* done, but the naive kernel changed since */
    }
    progress(&w, KL_WALK_DONE, 0, 0, 0, "%zu step(s)", json_array_size(json_object_get(w.doc, "steps")));
cleanup:
    if (w.doc && doc_json) *doc_json = json_dumps(w.doc, JSON_SORT_KEYS | JSON_INDENT(2));
    json_decref(w.doc);
    free(expert_path), free(expert_text), free(naive_path), free(naive_text);
    return st;
}

kl_status kl_lineage_load(kl_store *store, const kl_task *task, const char *expert_path, const char *rewriter,
                          bool full, char **doc_json, kl_error *err)
{
    char *path = expert_path ? kl_strdup(expert_path) : task->expert ? kl_task_path(task, task->expert) : NULL;
    if (!path) return kl_error_set(err, KL_ERR_INVALID, "%s: no expert kernel", task->dir);
    char *text = NULL;
    kl_status st = kl_file_read(path, KL_SOURCE_MAX, &text, NULL, err);
    free(path);
    if (st != KL_OK) return st;
    char key[KL_HASH_HEX];
    kl_lineage_key(task, text, rewriter, full, key);
    free(text);
    return kl_store_get(store, "lineage", key, doc_json, err);
}

/* The bisection a stored walk shows: the most bisection probes one step holds along one size
 * (a bisection stops early at a failure or a narrow interval, the same way when recomputed; the
 * most over the walk is the count it was made with, or a count that gives the same probes). The
 * probes along one size share the values of every other size (the probing's base shape): they
 * are counted by (size, the other sizes' values). */
static unsigned bisect_shown(const json_t *doc)
{
    unsigned most = 0;
    size_t i, k;
    json_t *step, *p;
    json_array_foreach(json_object_get(doc, "steps"), i, step) {
        json_t *count = json_object();
        json_array_foreach(json_object_get(step, "probes"), k, p) {
            json_t *shape = json_object_get(p, "shape");
            if (!json_is_true(json_object_get(p, "bisect")) || !json_is_object(shape)) continue;
            const char *size;
            json_t *v;
            json_object_foreach(shape, size, v) {
                json_t *others = json_deep_copy(shape);
                json_object_del(others, size);
                char *ot = json_dumps(others, JSON_COMPACT | JSON_SORT_KEYS);
                json_decref(others);
                char key[512];
                kl_snprintf(key, sizeof key, "%s|%s", size, ot ? ot : "");
                free(ot);
                json_int_t n = json_integer_value(json_object_get(count, key)) + 1;
                json_object_set_new(count, key, json_integer(n));
                if ((unsigned)n > most) most = (unsigned)n;
            }
        }
        json_decref(count);
    }
    return most;
}

void kl_lineage_recorded_options(const char *doc_json, unsigned *probes, double *probe_min_gain, unsigned *bisect)
{
    json_t *doc = doc_json ? json_loads(doc_json, 0, NULL) : NULL;
    json_t *o = json_object_get(doc, "options");
    if (bisect) {
        if (json_is_integer(json_object_get(o, "bisect"))) {
            json_int_t n = json_integer_value(json_object_get(o, "bisect"));
            *bisect = n < 0 ? 0 : n > 16 ? 16 : (unsigned)n;
        } else {
            unsigned n = bisect_shown(doc);
            if (n) *bisect = n > 16 ? 16 : n; /* the most --bisect takes */
        }
    }
    if (json_is_integer(json_object_get(o, "probes")) && json_is_number(json_object_get(o, "probe_min_gain"))) {
        json_int_t n = json_integer_value(json_object_get(o, "probes"));
        *probes = n < 0 ? 0 : n > 64 ? 64 : (unsigned)n;
        *probe_min_gain = json_number_value(json_object_get(o, "probe_min_gain"));
        json_decref(doc);
        return;
    }
    /* A walk stored before its options were: the most probes a step holds, and the threshold a
     * skipped step's note names ("not probed: the gain (1.005x) is below 1.05x", written above). */
    size_t i;
    json_t *step;
    bool any = false;
    unsigned most = 0;
    json_array_foreach(json_object_get(doc, "steps"), i, step) {
        json_t *pr = json_object_get(step, "probes");
        if (json_is_array(pr)) {
            any = true;
            if (json_array_size(pr) > most) most = (unsigned)json_array_size(pr);
        }
        const char *skipped = json_string_value(json_object_get(step, "probe_skipped"));
        const char *below = skipped ? strstr(skipped, " is below ") : NULL;
        double g;
        if (below && sscanf(below, " is below %lfx", &g) == 1 && g > 0) {
            any = true;
            *probe_min_gain = g;
        }
    }
    if (any) *probes = most;
    json_decref(doc);
}
