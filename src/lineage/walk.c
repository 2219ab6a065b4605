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

/* A probed step's conditions, from its probes: where the optimized side was wrong (against
 * every shape where it was right: the probes that passed and the task's own check shapes,
 * which the admitted step passed), and where it was slower (against the probes that were not,
 * and the bench shape, where the step was measured at its gain, at least the probing floor).
 * Derived again whenever a walk is loaded, so stored walks follow the learner. */
static void derive_conditions(const kl_task *task, json_t *step)
{
    json_t *probes = json_object_get(step, "probes");
    if (!json_array_size(probes)) return;
    json_t *passed = json_array(), *wrong = json_array(), *slower = json_array(), *faster = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(probes, i, p) {
        json_t *shape = json_object_get(p, "shape");
        const char *broke = doc_str(p, "broke");
        if (!json_is_true(json_object_get(p, "pass"))) {
            json_array_append(wrong, shape);
            continue;
        }
        json_array_append(passed, shape);
        if (!strcmp(broke, "slower"))
            json_array_append(slower, shape);
        else if (json_is_number(json_object_get(p, "speedup")))
            json_array_append(faster, shape);
    }
    for (unsigned c = 0; c < task->nchecks; c++) json_array_append_new(passed, shape_json(task, &task->checks[c]));
    json_array_append_new(faster, shape_json(task, &task->bench));
    json_t *conds = kl_probe_conditions(task, passed, wrong, "wrong");
    json_t *perf = kl_probe_conditions(task, faster, slower, "slower");
    json_array_extend(conds, perf);
    json_decref(perf);
    json_object_set_new(step, "conditions", conds);
    json_decref(passed), json_decref(wrong), json_decref(slower), json_decref(faster);
}

/* Gate the chosen step on the probe shapes: the optimized side (parent) against the
 * simpler (child) as baseline, one derived task per shape. */
static kl_status probe_step(walk *w, json_t *step, const char *parent, const char *child, unsigned version)
{
    json_t *shapes = kl_probe_shapes(w->task, w->opt->probes);
    json_t *probes = json_array();
    char *dir = NULL;
    kl_status st = KL_OK;
    if (w->opt->probe_dir) {
        dir = kl_strdup(w->opt->probe_dir);
    } else {
        char *cache = kl_cache_dir();
        dir = cache ? kl_path_join(cache, "probe") : NULL;
        free(cache);
    }
    if (!dir) {
        st = kl_error_set(w->err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    char child_name[128];
    version_name(w->task, child, child_name, sizeof child_name);
    size_t i;
    json_t *shape;
    json_array_foreach(shapes, i, shape) {
        if (interrupted(w)) {
            st = kl_error_set(w->err, KL_ERR_INTERRUPTED, "interrupted while probing");
            goto cleanup;
        }
        char *tdir = NULL;
        kl_task *pt = NULL;
        st = kl_probe_task_dir(w->task, shape, dir, &tdir, w->err);
        if (st == KL_OK) st = kl_task_load(tdir, &pt, w->err);
        free(tdir);
        if (st != KL_OK) {
            kl_task_free(pt);
            goto cleanup;
        }
        char *shape_text = json_dumps(shape, JSON_SORT_KEYS | JSON_COMPACT);
        progress(w, KL_WALK_PROBE, version, (unsigned)i + 1, (unsigned)json_array_size(shapes), "probe %s",
                 shape_text ? shape_text : "?");
        free(shape_text);
        kl_judgement j;
        st = judge(w, pt, parent, child_name, child, KL_JUDGE_PROFILE, &j);
        kl_task_free(pt);
        if (st != KL_OK) goto cleanup;
        if (j.unmeasured) {
            st = kl_error_set(w->err, KL_ERR_UNMEASURED, "probe at a shape has no recorded verdict: %s", j.reason);
            goto cleanup;
        }
        json_t *p = judgement_json(&j);
        json_object_set(p, "shape", shape);
        if (!j.pass)
            json_object_set_new(p, "broke", json_string(!strcmp(j.stage, "compile") ? "compile"
                                                        : !strcmp(j.stage, "correct") ? "wrong"
                                                                                       : "crash"));
        else if (j.speedup >= 0 && j.speedup < 0.95) /* speedup here = t_child / t_parent: the gain */
            json_object_set_new(p, "broke", json_string("slower"));
        json_array_append_new(probes, p);
    }
    json_object_set_new(step, "probes", probes);
    probes = NULL;
    derive_conditions(w->task, step);
cleanup:
    free(dir);
    json_decref(shapes);
    json_decref(probes);
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

static void proposal_id(const char *transform, const char *parent, const char *child, char *buf, size_t size)
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
    const json_t *est;  /* the latest judgement from an earlier version (borrowed), or NULL */
} prop;

static kl_status record_prop(walk *w, unsigned version, prop *pp, unsigned index, unsigned n, const kl_judgement *jp);

/* Judge proposal c against the version text; o receives the record (pass, verdict, speedup …). */
static kl_status judge_prop(walk *w, unsigned version, const char *text, const char *name, prop *pp,
                            unsigned index, unsigned n)
{
    kl_judgement j;
    kl_status st = judge(w, w->task, pp->c->source, name, text, KL_JUDGE_PROFILE | KL_JUDGE_BENCH_VS_BASELINE, &j);
    return st == KL_OK ? record_prop(w, version, pp, index, n, &j) : st;
}

/* Judge the proposals pp[idx[0..m)] at once (opt->judge_many) and record them in that order, as
 * judge_prop one by one would: a failure stops at the proposal it belongs to. */
static kl_status judge_props_many(walk *w, unsigned version, const char *text, const char *name, prop *pp,
                                  const unsigned *idx, unsigned m, unsigned n, unsigned *judged)
{
    kl_judge_request *reqs = calloc(m ? m : 1, sizeof *reqs);
    kl_judgement *outs = calloc(m ? m : 1, sizeof *outs);
    char (*names)[128] = calloc(m ? m : 1, sizeof *names);
    kl_status st = KL_OK;
    unsigned done = 0;
    if (!reqs || !outs || !names) {
        st = kl_error_set(w->err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (unsigned k = 0; k < m; k++) {
        version_name(w->task, pp[idx[k]].c->source, names[k], sizeof names[k]);
        reqs[k] = (kl_judge_request){names[k], pp[idx[k]].c->source, name, text,
                                     KL_JUDGE_PROFILE | KL_JUDGE_BENCH_VS_BASELINE};
    }
    kl_status jst = w->opt->judge_many(w->opt->judge_user, w->task, m, reqs, outs, &done, w->err);
    for (unsigned k = 0; k < done && k < m; k++) {
        st = record_prop(w, version, &pp[idx[k]], idx[k] + 1, n, &outs[k]);
        if (st != KL_OK) goto cleanup;
        ++*judged;
    }
    st = jst;
cleanup:
    free(reqs);
    free(outs);
    free(names);
    return st;
}

/* Record a judgement of proposal pp (progress, the estimate for later versions). */
static kl_status record_prop(walk *w, unsigned version, prop *pp, unsigned index, unsigned n, const kl_judgement *jp)
{
    const kl_candidate *c = pp->c;
    kl_judgement j = *jp;
    json_t *o = json_object();
    json_object_set_new(o, "version", json_integer(version));
    json_object_set_new(o, "transform", json_string(c->transform));
    json_object_set_new(o, "site", json_string(c->site));
    json_object_set_new(o, "note", json_string(c->note));
    json_t *params = json_loads(c->params_json, 0, NULL);
    json_object_set_new(o, "params", params ? params : json_object());
    json_t *feat = c->features_json ? json_loads(c->features_json, 0, NULL) : NULL;
    if (feat) json_object_set_new(o, "features", feat);
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
        proposal_id(c->transform, text, c->source, p->id, sizeof p->id);
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

    /* compile what will be judged now, in parallel */
    if (w->opt->prepare && np) {
        const char **names = calloc(np, sizeof *names), **texts = calloc(np, sizeof *texts);
        char (*buf)[128] = calloc(np, sizeof *buf);
        unsigned m = 0;
        if (names && texts && buf) {
            for (unsigned i = 0; i < np; i++) {
                if (pp[i].est) continue;
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

    unsigned judged = 0, reused = 0;
    if (w->opt->judge_many && np) { /* the proposals never judged are independent: all at once */
        unsigned *idx = calloc(np, sizeof *idx), m = 0;
        if (!idx) {
            st = kl_error_set(w->err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        for (unsigned i = 0; i < np; i++)
            if (!pp[i].est) idx[m++] = i;
        st = interrupted(w) && m ? kl_error_set(w->err, KL_ERR_INTERRUPTED, "interrupted at version %u", version)
                                 : judge_props_many(w, version, text, name, pp, idx, m, np, &judged);
        free(idx);
        if (st == KL_ERR_INTERRUPTED) kl_error_set(w->err, st, "interrupted at version %u", version);
        if (st != KL_OK) goto cleanup;
    }
    for (unsigned i = 0; i < np && !w->opt->judge_many; i++) {
        if (pp[i].est) continue;
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
        for (unsigned i = 0; i < np; i++)
            if (prop_pass(&pp[i]) && (!best || better(prop_view(&pp[i]), prop_view(best)))) best = &pp[i];
        if (!best) {
            /* nothing passes as far as we know: judge again what was rejected earlier */
            bool any = false;
            for (unsigned i = 0; i < np; i++) {
                if (pp[i].fresh) continue;
                if (interrupted(w)) {
                    st = kl_error_set(w->err, KL_ERR_INTERRUPTED, "interrupted at version %u", version);
                    goto cleanup;
                }
                st = judge_prop(w, version, text, name, &pp[i], i + 1, np);
                if (st != KL_OK) goto cleanup;
                judged++, any = true;
            }
            if (!any) break;
            continue;
        }
        if (best->fresh) break;
        if (interrupted(w)) {
            st = kl_error_set(w->err, KL_ERR_INTERRUPTED, "interrupted at version %u", version);
            goto cleanup;
        }
        st = judge_prop(w, version, text, name, best, (unsigned)(best - pp) + 1, np);
        if (st != KL_OK) goto cleanup;
        judged++;
    }
    json_t *not_judged = json_array();
    for (unsigned i = 0; i < np; i++) {
        if (pp[i].fresh) {
            json_t *o = pp[i].fresh;
            pp[i].fresh = NULL;
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

    if (json_array_size(admitted) == 0) goto cleanup;
    json_t *best = NULL;
    size_t k;
    json_t *a;
    json_array_foreach(admitted, k, a) if (!best || better(a, best)) best = a;

    const char *child = doc_str(best, "source");
    json_t *step = json_object();
    json_object_set_new(step, "from", json_integer(version));
    json_object_set_new(step, "to", json_integer(version + 1));
    const char *keys[] = {"transform", "site", "note", "params", "features", "verdict", "speedup", "cand_ms", "base_ms", "device", "date"};
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
    json_array_append_new(json_object_get(w->doc, "steps"), step);
    progress(w, KL_WALK_STEP, version + 1, 0, 0, "step %u: removed %s at %s", version + 1,
             doc_str(step, "transform"), doc_str(step, "site"));
    *moved = true;
cleanup:
    if (pp)
        for (unsigned i = 0; i < np; i++) json_decref(pp[i].fresh);
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
            return KL_OK;
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
        json_array_foreach(json_object_get(w.doc, "steps"), k, step) derive_conditions(task, step);
    }
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
