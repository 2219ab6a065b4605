/*
 * The forward search (docs/optimize.md). Best-first over versions: each round judges the
 * untried proposal with the highest cum(version) × E(proposal), those the policy defers (it
 * expects them not to pay) after all others; a candidate that passes and
 * keeps at least KEEP_FLOOR of its parent's speed becomes a version; the beam keeps the
 * fastest few open. The run is a pure function of its inputs and its judgements, so the
 * stored judgements, reused in order, bring a resumed run back to where it stopped.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optimize/optimize_int.h"
#include "optimize/search_int.h"

static const char *const policy_names[KL_POLICY_COUNT] = {"skills", "memory", "blind"};

const char *kl_policy_name(kl_policy policy)
{
    return (unsigned)policy < KL_POLICY_COUNT ? policy_names[policy] : "?";
}

kl_status kl_policy_parse(const char *name, kl_policy *out, kl_error *err)
{
    for (unsigned i = 0; i < KL_POLICY_COUNT; i++)
        if (name && !strcmp(name, policy_names[i])) {
            *out = (kl_policy)i;
            return KL_OK;
        }
    return kl_error_set(err, KL_ERR_INVALID, "unknown policy '%s': expected skills, memory or blind",
                        name ? name : "");
}

uint64_t opt_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* ---- the run --------------------------------------------------------------------------- */

struct kl_judgement;

static void say(search__run *r, kl_optimize_event ev, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(search__run *r, kl_optimize_event ev, const char *fmt, ...)
{
    if (!r->opt->progress) return;
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    kl_optimize_progress p = {(unsigned)json_array_size(r->rounds), r->used, r->budget,
                              r->nversions ? r->versions[r->best].cum : 1.0, text};
    r->opt->progress(r->opt->progress_user, ev, &p);
}

static void version_release(opt_version *v)
{
    free(v->source);
    free(v->params);
    for (unsigned i = 0; i < v->ncands; i++) {
        free(v->cands[i].source);
        free(v->cands[i].transform);
        free(v->cands[i].site);
        free(v->cands[i].params);
        json_decref(v->cands[i].features);
    }
    free(v->cands);
}

void search__cand_name(const kl_task *task, const char *hash, char *buf, size_t size)
{
    kl_snprintf(buf, size, "%s/opt-%.12s.cu", task->name, hash);
}

static kl_status add_version(search__run *r, const char *source, int parent, int round, double gain, const opt_cand *from)
{
    if (r->nversions == r->cap) {
        unsigned cap = r->cap ? r->cap * 2 : 16;
        opt_version *v = realloc(r->versions, cap * sizeof *v);
        if (!v) return kl_error_set(r->err, KL_ERR_NOMEM, "out of memory");
        r->versions = v;
        r->cap = cap;
    }
    opt_version *v = &r->versions[r->nversions];
    memset(v, 0, sizeof *v);
    v->source = kl_strdup(source);
    v->params = kl_strdup(from ? from->params : "{}");
    if (!v->source || !v->params) {
        free(v->source), free(v->params);
        return kl_error_set(r->err, KL_ERR_NOMEM, "out of memory");
    }
    kl_hash_hex(source, strlen(source), v->hash);
    if (parent < 0 && r->start_name)
        kl_snprintf(v->name, sizeof v->name, "%s", r->start_name);
    else
        search__cand_name(r->task, v->hash, v->name, sizeof v->name);
    v->parent = parent;
    v->round = round;
    v->gain = gain;
    v->cum = parent < 0 ? 1.0 : r->versions[parent].cum * gain;
    v->open = true;
    if (from) {
        kl_snprintf(v->transform, sizeof v->transform, "%s", from->transform);
        kl_snprintf(v->card, sizeof v->card, "%s", from->card);
        kl_snprintf(v->site, sizeof v->site, "%s", from->site);
    }
    r->nversions++;
    return KL_OK;
}

static int version_of_hash(const search__run *r, const char *hash)
{
    for (unsigned i = 0; i < r->nversions; i++)
        if (!strcmp(r->versions[i].hash, hash)) return (int)i;
    return -1;
}

/* ---- proposals ---------------------------------------------------------------------------- */

static kl_status take_candidates(search__run *r, opt_version *v, kl_candidates *c)
{
    for (unsigned i = 0; i < c->count; i++) {
        const kl_candidate *k = &c->items[i];
        if (!k->source || !strcmp(k->source, v->source)) continue; /* no change */
        char hash[KL_HASH_HEX];
        kl_hash_hex(k->source, strlen(k->source), hash);
        bool dup = false;
        for (unsigned j = 0; j < v->ncands && !dup; j++) dup = !strcmp(v->cands[j].hash, hash);
        if (dup) continue;
        opt_cand *n = realloc(v->cands, (v->ncands + 1) * sizeof *n);
        if (!n) return kl_error_set(r->err, KL_ERR_NOMEM, "out of memory");
        v->cands = n;
        opt_cand *x = &v->cands[v->ncands];
        memset(x, 0, sizeof *x);
        x->source = kl_strdup(k->source);
        x->transform = kl_strdup(k->transform);
        x->site = kl_strdup(k->site);
        /* parameters in one canonical text: sorted keys, compact */
        json_t *p = json_loads(k->params_json ? k->params_json : "{}", 0, NULL);
        x->params = p ? json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS) : kl_strdup("{}");
        json_decref(p);
        x->features = k->features_json ? json_loads(k->features_json, 0, NULL) : NULL;
        if (!x->source || !x->transform || !x->site || !x->params) {
            free(x->source), free(x->transform), free(x->site), free(x->params);
            json_decref(x->features);
            return kl_error_set(r->err, KL_ERR_NOMEM, "out of memory");
        }
        memcpy(x->hash, hash, sizeof hash);
        kl_snprintf(x->id, sizeof x->id, "%s@%s#%.12s", x->transform, x->site, hash);
        x->expect = 1.0;
        v->ncands++;
    }
    return KL_OK;
}

static kl_status ask(search__run *r, opt_version *v, const char *skill_json)
{
    kl_rewrite_request req = {0};
    req.kind = KL_REQ_APPLY;
    req.source = v->source;
    req.source_name = v->name;
    req.task = r->task;
    req.skill_json = skill_json;
    kl_candidates c;
    kl_status st = kl_rewriter_propose(r->opt->rewriter, &req, &c, r->err);
    if (st == KL_OK) st = take_candidates(r, v, &c);
    kl_candidates_free(&c);
    return st;
}

/* The cards that speak for the most: sorted by their measured gain, at most max of them
 * (for the rewriters that answer one card at a time and cost a request each). */
static unsigned top_cards(const kl_skill_list *lib, unsigned max, const kl_skill **out)
{
    unsigned n = 0;
    for (unsigned i = 0; i < lib->count; i++) {
        kl_skill_summary si;
        kl_skill_summarize(lib->items[i], &si);
        unsigned at = n < max ? n : max;
        while (at > 0) {
            kl_skill_summary so;
            kl_skill_summarize(out[at - 1], &so);
            if (so.best_gain >= si.best_gain) break;
            at--;
        }
        if (at >= max) continue;
        for (unsigned k = (n < max ? n : max - 1); k > at; k--) out[k] = out[k - 1];
        out[at] = lib->items[i];
        if (n < max) n++;
    }
    return n;
}

#define CARDS_PER_REQUEST_BACKEND 8

static bool proposes(const opt_version *v, const char *transform)
{
    for (unsigned i = 0; i < v->ncands; i++)
        if (!strcmp(v->cands[i].transform, transform)) return true;
    return false;
}

/* Skills: a step that closes another transform's door — its parent proposes T, the new version
 * no longer does (softmax: once a row loop is vectorized, row-parallel no longer applies) — leaves
 * T to the parent alone, so the parent's best untried proposal of T, one per step (the highest E),
 * goes before everything else: the order of two steps is part of the "when", and a card learnt
 * elsewhere may not know it. Not for what the cards defer or the run's judgements defer. Runs in
 * expand(), which pick() calls for every open version in index order: a resumed run marks the
 * same doors. */
static void mark_door(search__run *r, unsigned vi)
{
    const opt_version *v = &r->versions[vi];
    if (v->parent < 0) return;
    opt_version *p = &r->versions[v->parent];
    opt_cand *door = NULL;
    for (unsigned i = 0; i < p->ncands; i++) {
        opt_cand *c = &p->cands[i];
        if (c->tried || c->door || c->defer || c->off_path || search__is_stale(r, c->transform) || !strcmp(c->transform, v->transform) ||
            proposes(v, c->transform))
            continue;
        if (!door || c->expect > door->expect || (c->expect == door->expect && c->order < door->order)) door = c;
    }
    if (!door) return;
    for (unsigned i = 0; i < p->ncands; i++)
        if (p->cands[i].door && !p->cands[i].tried && !strcmp(p->cands[i].transform, door->transform)) return;
    door->door = true;
    size_t n = strlen(door->why);
    kl_snprintf(door->why + n, sizeof door->why - n, "%sits door: v%u's %s closes it", n ? "; " : "", vi, v->transform);
}

/* Skills, ranking 3 (search revision 5): a step that made a new best has its parent's best untried
 * variant (the same transform at the same site, other parameters; the highest E) tried next, like
 * a door: what paid here is the likeliest to pay again with other parameters, and the run's own
 * gain says more than a card's. On layernorm a warp per row paid 16x at call 1 and a block per row
 * (0.77 of the expert in the catalog's sequences) was never judged. prune_beam keeps the parent
 * open meanwhile. */
static void mark_variant(search__run *r, unsigned vi)
{
    const opt_version *v = &r->versions[vi];
    if (v->parent < 0 || v->kept || v->gain < r->min_gain) return;
    /* ranking 4: a new best by less than a walk tells from noise says little about its parameters
     * (softmax's runs spent a call on the other width after each 1.03x vectorize step) */
    if (r->ranking >= 4 && v->gain < OPT_PAYS) return;
    /* ranking 5: nor by less than twice that: a variant of a 1.06x step could add a few percent at
     * most, and the call it takes finds more elsewhere (softmax: width 2 after width 4's 1.06x) */
    if (r->ranking >= 5 && v->gain < OPT_PAYS * OPT_PAYS) return;
    opt_version *p = &r->versions[v->parent];
    opt_cand *var = NULL;
    for (unsigned i = 0; i < p->ncands; i++) {
        opt_cand *c = &p->cands[i];
        if (c->tried || c->off_path || strcmp(c->transform, v->transform) || strcmp(c->site, v->site) ||
            !strcmp(c->params, v->params))
            continue;
        if (c->variant) return; /* marked already (a resumed run expands again) */
        if (!var || c->expect > var->expect || (c->expect == var->expect && c->order < var->order)) var = c;
    }
    if (!var) return;
    var->variant = true;
    size_t n = strlen(var->why);
    kl_snprintf(var->why + n, sizeof var->why - n, "%sa variant of v%u's step, which paid %.2fx", n ? "; " : "", vi,
                v->gain);
}

/* Skills, ranking 3: a proposal whose site sits in a function the bench shape does not run (after
 * `specialize`, the general kernel of the dispatch) cannot change what the gate times there; it
 * goes after everything else (cand_tier) and says why. Blur's runs spent their calls on the
 * general kernel's smem-tile while the specialized one ran. The site's function is the site id's
 * first field; a function the task's launch() cannot be followed through stays in place. */
static void mark_off_path(search__run *r, unsigned vi)
{
    opt_version *v = &r->versions[vi];
    kl_source *src = NULL;
    kl_error e = {0};
    if (kl_source_parse_text(v->name, v->source, strlen(v->source), &src, &e) != KL_OK) return;
    char fn[160] = "", last[160] = "";
    int runs = 0;
    for (unsigned i = 0; i < v->ncands; i++) {
        opt_cand *c = &v->cands[i];
        const char *colon = strchr(c->site, ':');
        kl_snprintf(fn, sizeof fn, "%.*s", colon ? (int)(colon - c->site) : (int)strlen(c->site), c->site);
        if (strcmp(fn, last)) {
            runs = kl_skill_runs_at(src, r->task, &r->task->bench, fn);
            kl_snprintf(last, sizeof last, "%s", fn);
        }
        if (runs >= 0) continue;
        c->off_path = true;
        size_t n = strlen(c->why);
        kl_snprintf(c->why + n, sizeof c->why - n, "%s%s does not run at the bench shape", n ? "; " : "", fn);
    }
    kl_source_free(src);
}

/* The proposals of version v, scored by the policy.
 * rules: every applicable site of every transform (the first parameter's values), and with
 *   the skills policy also every card's own parameters at its transform's sites;
 * llm / command: one open request (blind, memory); with the skills policy one request per
 *   card, the cards that gained most first, at most CARDS_PER_REQUEST_BACKEND of them. */
kl_status search__expand(search__run *r, unsigned vi)
{
    opt_version *v = &r->versions[vi];
    if (v->expanded) return KL_OK;
    bool rules = !strcmp(kl_rewriter_name(r->opt->rewriter), "rules");
    bool skills = r->opt->policy == KL_POLICY_SKILLS && r->pc.library;
    kl_status st = KL_OK;
    if (rules || !skills) st = ask(r, v, NULL);
    if (st == KL_OK && skills) {
        const kl_skill_list *lib = r->pc.library;
        const kl_skill *chosen[CARDS_PER_REQUEST_BACKEND];
        unsigned n = rules ? lib->count : top_cards(lib, CARDS_PER_REQUEST_BACKEND, chosen);
        for (unsigned i = 0; i < n && st == KL_OK; i++) {
            const kl_skill *card = rules ? lib->items[i] : chosen[i];
            const json_t *params = json_object_get(kl_skill_doc(card), "params");
            /* rules: a card adds proposals only through parameters the grid lacks */
            if (rules && (!json_is_object(params) || json_object_size(params) == 0)) continue;
            char *text = kl_skill_to_json(card);
            if (!text) return kl_error_set(r->err, KL_ERR_NOMEM, "out of memory");
            st = ask(r, &r->versions[vi], text);
            free(text);
        }
    }
    if (st != KL_OK) return st;
    v = &r->versions[vi];
    v->expanded = true;
    /* a candidate identical to a version already reached is never judged again */
    for (unsigned i = 0; i < v->ncands; i++)
        if (version_of_hash(r, v->cands[i].hash) >= 0) v->cands[i].tried = true;
    /* a version kept for a step that did not pay is its parent plus that step: an edit the parent
     * also proposes (same transform, site and parameters) is the parent's to judge, not judged
     * again from here (else every kept step re-opens its parent's whole list, and noise steps
     * multiply: histogram's runs spent 35 of 40 calls so) */
    if (v->kept && v->parent >= 0) {
        const opt_version *p = &r->versions[v->parent];
        for (unsigned i = 0; i < v->ncands; i++) {
            opt_cand *c = &v->cands[i];
            for (unsigned k = 0; k < p->ncands && !c->tried; k++)
                if (!strcmp(c->transform, p->cands[k].transform) && !strcmp(c->site, p->cands[k].site) &&
                    !strcmp(c->params, p->cands[k].params))
                    c->tried = true;
        }
    }
    st = opt_policy_score(&r->pc, r->versions, r->nversions, vi, r->err);
    if (st == KL_OK && r->opt->policy == KL_POLICY_SKILLS && r->ranking >= 3) {
        mark_off_path(r, vi);
        mark_door(r, vi);
        mark_variant(r, vi);
    }
    return st;
}

/* ---- the document ------------------------------------------------------------------------ */

json_t *search__judgement_json(const kl_judgement *j)
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

static void judgement_from_json(const json_t *o, kl_judgement *j)
{
    memset(j, 0, sizeof *j);
    j->pass = json_is_true(json_object_get(o, "pass"));
    kl_snprintf(j->stage, sizeof j->stage, "%s", json_string_value(json_object_get(o, "stage")) ?: "");
    kl_snprintf(j->reason, sizeof j->reason, "%s", json_string_value(json_object_get(o, "reason")) ?: "");
    kl_snprintf(j->key, sizeof j->key, "%s", json_string_value(json_object_get(o, "verdict")) ?: "");
    kl_snprintf(j->device, sizeof j->device, "%s", json_string_value(json_object_get(o, "device")) ?: "");
    kl_snprintf(j->date, sizeof j->date, "%s", json_string_value(json_object_get(o, "date")) ?: "");
    json_t *x;
    j->speedup = json_is_number(x = json_object_get(o, "speedup")) ? json_number_value(x) : -1;
    j->cand_ms = json_is_number(x = json_object_get(o, "cand_ms")) ? json_number_value(x) : -1;
    j->base_ms = json_is_number(x = json_object_get(o, "base_ms")) ? json_number_value(x) : -1;
}

static json_t *versions_json(const search__run *r)
{
    json_t *a = json_array();
    for (unsigned i = 0; i < r->nversions; i++) {
        const opt_version *v = &r->versions[i];
        json_t *o = json_object();
        json_object_set_new(o, "index", json_integer(i));
        json_object_set_new(o, "hash", json_string(v->hash));
        json_object_set_new(o, "parent", v->parent < 0 ? json_null() : json_integer(v->parent));
        json_object_set_new(o, "round", json_integer(v->round));
        json_object_set_new(o, "gain", json_real(v->gain));
        json_object_set_new(o, "cum", json_real(v->cum));
        if (v->parent >= 0) {
            json_object_set_new(o, "transform", json_string(v->transform));
            json_object_set_new(o, "site", json_string(v->site));
            json_object_set_new(o, "params", json_loads(v->params, 0, NULL) ?: json_object());
            if (v->card[0]) json_object_set_new(o, "card", json_string(v->card));
        }
        json_object_set_new(o, "source", json_string(v->source));
        json_array_append_new(a, o);
    }
    return a;
}

static kl_status save(search__run *r)
{
    char stamp[32];
    kl_utc_stamp(stamp, sizeof stamp);
    json_object_set_new(r->doc, "updated", json_string(stamp));
    json_object_set_new(r->doc, "gate_calls", json_integer(r->used));
    json_object_set(r->doc, "rounds", r->rounds);
    json_object_set(r->doc, "skipped", r->skipped);
    json_object_set(r->doc, "finals", r->finals);
    json_object_set_new(r->doc, "versions", versions_json(r));
    json_object_set_new(r->doc, "best", json_integer(r->best));
    if (r->opt->judge_many && r->opt->ahead > 1)
        json_object_set_new(r->doc, "ahead", json_pack("{s:i, s:i, s:i}", "width", (json_int_t)r->opt->ahead, "judged",
                                                       (json_int_t)r->ahead_made, "used", (json_int_t)r->ahead_used));
    char *text = json_dumps(r->doc, JSON_SORT_KEYS | JSON_COMPACT);
    if (!text) return kl_error_set(r->err, KL_ERR_NOMEM, "out of memory");
    kl_status st = kl_store_put(r->opt->store, "optimize", r->key, text, r->err);
    free(text);
    return st;
}

/* A fingerprint of the cards a run may use: their ids and texts. */
static void library_fingerprint(const kl_skill_list *lib, char hex[KL_HASH_HEX])
{
    kl_hasher *h = kl_hasher_new();
    kl_hasher_parts(h, "library");
    for (unsigned i = 0; lib && i < lib->count; i++) {
        char *t = kl_skill_to_json(lib->items[i]);
        kl_hasher_parts(h, t ? t : "");
        free(t);
    }
    kl_hasher_finish(h, hex);
}

static void run_key(search__run *r, const char *start_text, const char *lib_hex, const char *mem_hex)
{
    const kl_optimize_options *o = r->opt;
    char num[160];
    kl_hasher *h = kl_hasher_new();
    kl_hasher_parts(h, KL_OPTIMIZE_FORMAT);
    kl_hasher_parts(h, r->task->name);
    kl_hasher_parts(h, r->start_name);
    kl_hasher_parts(h, start_text);
    kl_hasher_parts(h, kl_policy_name(o->policy));
    /* the skills ranking's revision: a run stored under an earlier ranking is another run */
    if (o->policy == KL_POLICY_SKILLS) {
        kl_snprintf(num, sizeof num, OPT_SKILLS_RANKING_PREFIX "%u", r->ranking);
        kl_hasher_parts(h, num);
    }
    kl_hasher_parts(h, kl_rewriter_name(o->rewriter));
    kl_snprintf(num, sizeof num, "seed=%llu budget=%u beam=%u patience=%u min_gain=%.4f admitted=%d sanitize=%d",
                (unsigned long long)o->seed, r->budget, r->beam, o->patience, r->min_gain, o->admitted_only,
                o->sanitize_final);
    kl_hasher_parts(h, num);
    kl_hasher_parts(h, o->leave_out ? o->leave_out : "");
    kl_hasher_parts(h, lib_hex);
    kl_hasher_parts(h, mem_hex);
    kl_hasher_finish(h, r->key);
}

/* ---- one round ---------------------------------------------------------------------------- */

/* The judgement of candidate c against version v: from the stored run when it reaches that
 * far, else from the judge. */
static kl_status judge_round(search__run *r, unsigned vi, opt_cand *c, kl_judgement *j)
{
    size_t k = json_array_size(r->rounds);
    if (k < json_array_size(r->stored_rounds)) {
        const json_t *s = json_array_get(r->stored_rounds, k);
        const char *id = json_string_value(json_object_get(json_object_get(s, "candidate"), "id"));
        json_int_t from = json_integer_value(json_object_get(s, "from"));
        if (!id || strcmp(id, c->id) || from != (json_int_t)vi)
            return kl_error_set(r->err, KL_ERR_INVALID,
                                "the stored run %.12s judged %s from version %lld in round %zu, but this one "
                                "proposes %s from version %u there (the rewriter, the library or the memory "
                                "changed): start again with --restart",
                                r->key, id ? id : "?", (long long)from, k + 1, c->id, vi);
        judgement_from_json(json_object_get(s, "judgement"), j);
        return KL_OK;
    }
    char key[200];
    search__ahead_key(vi, c->hash, key, sizeof key);
    const json_t *early = json_object_get(r->ahead, key);
    if (early) { /* judged ahead, with an earlier batch */
        judgement_from_json(early, j);
        r->ahead_used++;
        return KL_OK;
    }
    memset(j, 0, sizeof *j);
    j->speedup = j->cand_ms = j->base_ms = -1;
    char name[128];
    search__cand_name(r->task, c->hash, name, sizeof name);
    const opt_version *v = &r->versions[vi];
    return r->opt->judge(r->opt->judge_user, r->task, name, c->source, v->name, v->source,
                         KL_JUDGE_PROFILE | KL_JUDGE_BENCH_VS_BASELINE, j, r->err);
}

/* Skills, ranking 4: after a judgement of candidate c of version vi, when the same step's
 * judgements there differ (tally_step: not flat, by OPT_PAYS or more, or one was rejected), its
 * parameters matter: the next untried proposal of the step (the highest E) is tried next, as a
 * variant, until OPT_STALE_AFTER in a row do no better than the best of them. hgemm's tensor-core
 * tiles from the naive kernel gained 3.4, 17.1, 10.5, 34.2 and 55.6x: a run that stopped after two
 * kept 17.1x. */
static void mark_spread(search__run *r, unsigned vi, const opt_cand *c)
{
    if (r->opt->policy != KL_POLICY_SKILLS || r->ranking < 4) return;
    opt_version *v = &r->versions[vi];
    search__step_tally t = search__tally_step(v, c);
    if (t.n < 2 || t.flat || t.misses >= OPT_STALE_AFTER) return;
    opt_cand *next = NULL;
    for (unsigned i = 0; i < v->ncands; i++) {
        opt_cand *x = &v->cands[i];
        if (x->tried || x->off_path || strcmp(x->transform, c->transform) || strcmp(x->site, c->site)) continue;
        if (x->variant) return; /* marked already */
        if (!next || x->expect > next->expect || (x->expect == next->expect && x->order < next->order)) next = x;
    }
    if (!next) return;
    next->variant = true;
    size_t n = strlen(next->why);
    kl_snprintf(next->why + n, sizeof next->why - n, "%sthe step's parameters matter here (%.2f to %.2fx so far)",
                n ? "; " : "", t.lo, t.hi);
}

/* Does version v hold an untried variant of a step that made a new best (mark_variant)? */
static bool holds_variant(const opt_version *v)
{
    for (unsigned i = 0; i < v->ncands; i++)
        if (v->cands[i].variant && !v->cands[i].tried) return true;
    return false;
}

/* The beam keeps the fastest r->beam versions open, and besides them every version that holds an
 * untried variant of a step that made a new best (mark_variant; search revision 5) until it is
 * judged: on layernorm a warp per row paid 16x from the start, and the kept noise steps after it
 * pushed the start out of the beam before a block per row was judged. */
static void prune_beam(search__run *r)
{
    /* the beam counts the open versions that hold no untried variant */
    unsigned n = 0;
    for (unsigned i = 0; i < r->nversions; i++)
        n += r->versions[i].open && !holds_variant(&r->versions[i]);
    while (n > r->beam) {
        int worst = -1;
        for (unsigned i = 0; i < r->nversions; i++)
            if (r->versions[i].open && (int)i != r->best && (worst < 0 || r->versions[i].cum <= r->versions[worst].cum) &&
                !holds_variant(&r->versions[i]))
                worst = (int)i;
        if (worst < 0) break;
        r->versions[worst].open = false;
        n--;
    }
}

static kl_status one_round(search__run *r, unsigned vi, unsigned ci)
{
    opt_version *v = &r->versions[vi];
    opt_cand *c = &v->cands[ci];
    if (!c->prepared) {
        kl_status st = search__prepare(r, vi);
        if (st != KL_OK) return st;
        v = &r->versions[vi];
        c = &v->cands[ci];
    }
    kl_judgement j;
    kl_status st = KL_OK;
    if (json_array_size(r->rounds) >= json_array_size(r->stored_rounds)) {
        st = search__judge_ahead(r, vi, ci);
        if (st != KL_OK) return st;
        v = &r->versions[vi];
        c = &v->cands[ci];
    }
    st = judge_round(r, vi, c, &j);
    if (st != KL_OK) return st;
    if (j.unmeasured)
        return kl_error_set(r->err, KL_ERR_UNMEASURED, "%s from version %u: no recorded verdict: %s", c->id, vi,
                            j.reason);
    bool was_sampled = search__cand_tier(r, v, c) == 2 && !search__is_stale(r, c->transform);
    double e_run = search__expect_here(r, v, c);
    c->tried = c->judged = true;
    r->used++;
    c->judged_at = (unsigned)json_array_size(r->rounds) + 1;
    c->gain = j.pass && j.speedup > 0 ? j.speedup : 0;
    unsigned round = (unsigned)json_array_size(r->rounds) + 1;
    json_t *o = json_object();
    json_object_set_new(o, "round", json_integer(round));
    json_object_set_new(o, "from", json_integer(vi));
    json_t *cj = json_object();
    json_object_set_new(cj, "id", json_string(c->id));
    json_object_set_new(cj, "transform", json_string(c->transform));
    json_object_set_new(cj, "site", json_string(c->site));
    json_object_set_new(cj, "params", json_loads(c->params, 0, NULL) ?: json_object());
    if (c->card[0]) json_object_set_new(cj, "card", json_string(c->card));
    json_object_set_new(cj, "expect", json_real(c->expect));
    if (c->defer) json_object_set_new(cj, "deferred", json_true());
    if (search__is_stale(r, c->transform)) json_object_set_new(cj, "stale", json_true());
    if (c->door) json_object_set_new(cj, "door", json_true());
    if (c->variant) json_object_set_new(cj, "variant", json_true());
    if (was_sampled) json_object_set_new(cj, "sampled", json_true());
    if (r->ranking >= 4 && r->opt->policy == KL_POLICY_SKILLS && e_run != c->expect)
        json_object_set_new(cj, "expect_run", json_real(e_run));
    json_object_set_new(cj, "why", json_string(c->why));
    if (c->features) json_object_set(cj, "features", c->features);
    json_t *kf = opt_candidate_features(v->source, c);
    if (kf) json_object_set_new(cj, "observed", kf);
    json_object_set_new(o, "candidate", cj);
    json_object_set_new(o, "judgement", search__judgement_json(&j));
    double gain = j.pass && j.speedup > 0 ? j.speedup : 0;
    const char *result = "rejected";
    if (j.pass) {
        double cum = v->cum * gain;
        bool new_best = cum > r->versions[r->best].cum * r->min_gain;
        if (gain >= KL_OPTIMIZE_KEEP_FLOOR || new_best) {
            int dup = version_of_hash(r, c->hash);
            if (dup < 0) {
                st = add_version(r, c->source, (int)vi, (int)round, gain, c);
                if (st != KL_OK) {
                    json_decref(o);
                    return st;
                }
                v = &r->versions[vi];
                json_object_set_new(o, "version", json_integer(r->nversions - 1));
                if (new_best) r->best = (int)r->nversions - 1;
                result = new_best ? "new best" : "kept";
                opt_version *nv = &r->versions[r->nversions - 1];
                nv->kept = !new_best;
                /* the same step with other parameters as a version already reached from here, and no
                 * faster than it: a variant, not a new place to search from */
                for (unsigned w = 0; nv->kept && w + 1 < r->nversions; w++) {
                    const opt_version *x = &r->versions[w];
                    if (x->parent == (int)vi && !strcmp(x->transform, nv->transform) && !strcmp(x->site, nv->site) &&
                        x->cum * r->min_gain >= nv->cum) {
                        nv->open = false;
                        json_object_set_new(o, "variant_of", json_integer(w));
                        break;
                    }
                }
            } else {
                result = "duplicate";
            }
        } else {
            result = "slower";
        }
        if (!new_best) r->since_best++;
        else r->since_best = 0;
    } else {
        r->since_best++;
    }
    json_object_set_new(o, "result", json_string(result));
    json_object_set_new(o, "cum", json_real(r->versions[r->best].cum));
    json_array_append_new(r->rounds, o);
    char before[OPT_STALE_MAX][64];
    unsigned nbefore = r->nstale;
    memcpy(before, r->stale, sizeof before);
    search__run_stale(r);
    search__run_calibrate(r);
    mark_spread(r, vi, &r->versions[vi].cands[ci]);
    json_t *now_stale = json_array();
    for (unsigned i = 0; i < r->nstale; i++) {
        bool was = false;
        for (unsigned k = 0; k < nbefore && !was; k++) was = !strcmp(before[k], r->stale[i]);
        if (!was) json_array_append_new(now_stale, json_string(r->stale[i]));
    }
    if (json_array_size(now_stale)) json_object_set(o, "deferred_after", now_stale);
    json_decref(now_stale);
    prune_beam(r);
    if (j.pass)
        say(r, KL_OPT_ROUND, "round %u: %s from v%u passed, gain %.3fx (%s); best %.3fx", round, c->id, vi, gain,
            result, r->versions[r->best].cum);
    else
        say(r, KL_OPT_ROUND, "round %u: %s from v%u rejected at %s: %s; best %.3fx", round, c->id, vi, j.stage,
            j.reason, r->versions[r->best].cum);
    return save(r);
}

/* ---- the end: the returned kernel, checked again from scratch ---------------------------- */

/* A final check that passed the gate but measured the version no faster than the start: the
 * search's gains to it were within the measurement's noise, and so, most likely, were those of
 * the slower versions built from the same steps. The start is returned, and no further gate
 * call is spent on them (a replayed run needs none that was not recorded). */
static bool final_slower(const json_t *f)
{
    const json_t *j = json_object_get(f, "judgement");
    double g = json_number_value(json_object_get(j, "speedup"));
    return json_is_true(json_object_get(j, "pass")) && g > 0 && g < 1.0; /* 0 or less: not timed */
}

static void return_start_slower(search__run *r, const json_t *f)
{
    char note[200];
    kl_snprintf(note, sizeof note,
                "the fastest version, v%lld, took %.2fx the start's time when checked again from scratch: its "
                "gains were within the noise, and the start is returned",
                (long long)json_integer_value(json_object_get(f, "version")),
                1.0 / json_number_value(json_object_get(json_object_get(f, "judgement"), "speedup")));
    r->best = 0;
    json_object_set_new(r->doc, "final_note", json_string(note));
}

/* A final among `finals` (of `version`, or any when it is negative) that was slower than the
 * start: the start is returned, and true. */
static bool start_if_slower(search__run *r, const json_t *finals, json_int_t version)
{
    size_t k;
    json_t *f;
    json_array_foreach(finals, k, f) if (final_slower(f) &&
                                         (version < 0 || json_integer_value(json_object_get(f, "version")) == version)) {
        return_start_slower(r, f);
        return true;
    }
    return false;
}

static kl_status final_check(search__run *r, bool *done)
{
    *done = start_if_slower(r, r->finals, -1);
    if (*done) return KL_OK;
    /* candidates for the result, fastest first; a version already refused is not tried again */
    for (;;) {
        int best = -1;
        for (unsigned i = 1; i < r->nversions; i++) {
            bool refused = false;
            size_t k;
            json_t *f;
            json_array_foreach(r->finals, k, f) refused |= json_integer_value(json_object_get(f, "version")) == (json_int_t)i &&
                                                          !json_is_true(json_object_get(json_object_get(f, "judgement"), "pass"));
            if (refused || r->versions[i].cum <= 1.0) continue;
            if (best < 0 || r->versions[i].cum > r->versions[best].cum) best = (int)i;
        }
        if (best < 0) {
            r->best = 0; /* nothing faster than the start survived */
            *done = true;
            return KL_OK;
        }
        /* a final already judged? */
        size_t k;
        json_t *f;
        json_array_foreach(r->finals, k, f) if (json_integer_value(json_object_get(f, "version")) == best &&
                                                  json_is_true(json_object_get(json_object_get(f, "judgement"), "pass"))) {
            r->best = best;
            *done = true;
            return KL_OK;
        }
        if (r->used >= r->budget) {
            /* no call left to check it: the start is what can be returned */
            r->best = 0;
            json_object_set_new(r->doc, "final_note",
                                json_string("no gate call was left to check the fastest version again: the start is returned"));
            *done = true;
            return KL_OK;
        }
        if (r->opt->interrupt && *r->opt->interrupt)
            return kl_error_set(r->err, KL_ERR_INTERRUPTED, "interrupted before the final check");
        const opt_version *v = &r->versions[best], *s = &r->versions[0];
        kl_judgement j;
        size_t nf = json_array_size(r->finals);
        const json_t *stored = NULL;
        /* the finals of a stored run come after its rounds */
        if (json_array_size(r->stored_rounds) <= json_array_size(r->rounds)) {
            json_t *sf = json_object_get(r->doc, "stored_finals");
            if (nf < json_array_size(sf) &&
                json_integer_value(json_object_get(json_array_get(sf, nf), "version")) == best)
                stored = json_object_get(json_array_get(sf, nf), "judgement");
        }
        if (stored) {
            judgement_from_json(stored, &j);
        } else {
            memset(&j, 0, sizeof j);
            j.speedup = j.cand_ms = j.base_ms = -1;
            unsigned flags = KL_JUDGE_PROFILE | (r->opt->sanitize_final ? KL_JUDGE_SANITIZE : 0);
            kl_status st = r->opt->judge(r->opt->judge_user, r->task, v->name, v->source, s->name, s->source, flags,
                                         &j, r->err);
            if (st != KL_OK) return st;
            if (j.unmeasured)
                return kl_error_set(r->err, KL_ERR_UNMEASURED, "the final check of version %d: no recorded verdict: %s",
                                    best, j.reason);
        }
        r->used++;
        json_t *o = json_object();
        json_object_set_new(o, "version", json_integer(best));
        json_object_set_new(o, "sanitize", json_boolean(r->opt->sanitize_final));
        json_object_set_new(o, "judgement", search__judgement_json(&j));
        json_array_append_new(r->finals, o);
        if (j.pass)
            say(r, KL_OPT_NOTE, "final check of v%d against the start: passed, %.3fx", best, j.speedup);
        else
            say(r, KL_OPT_NOTE, "final check of v%d against the start: rejected at %s: %s", best, j.stage, j.reason);
        if (final_slower(o)) {
            return_start_slower(r, o);
            say(r, KL_OPT_NOTE, "v%d is no faster than the start: the start is returned", best);
        }
        kl_status st = save(r);
        if (st != KL_OK) return st;
        if (j.pass) {
            if (!final_slower(o)) r->best = best;
            *done = true;
            return KL_OK;
        }
    }
}

/* A replayed run that met a missing verdict (begun here, or taken up from an earlier replay that
 * stopped at the same place): the archive often holds the same run made with another library or
 * memory (cards the store holds and the archive does not — learned here, or left by an older
 * archive — change the library's fingerprint and so the run's key). Say so, with both
 * fingerprints, rather than leave the reader with one candidate's missing verdict. */
typedef struct other_run {
    const search__run *r;
    const json_t *lib, *mem; /* this run's */
    char found[160];
    char when[40]; /* the found run's last update: the newest finished one is named */
} other_run;

static bool same_str(const json_t *a, const json_t *b)
{
    const char *x = json_string_value(a), *y = json_string_value(b);
    return (!x && !y) || (x && y && !strcmp(x, y));
}

static bool find_other_run(const char *key, const char *json, void *user)
{
    other_run *o = user;
    const search__run *r = o->r;
    (void)key;
    json_t *d = json_loads(json, 0, NULL);
    if (!d) return true;
    const json_t *pol = json_object_get(r->doc, "policy");
    bool same = same_str(json_object_get(d, "task"), json_object_get(r->doc, "task")) &&
                same_str(json_object_get(d, "start"), json_object_get(r->doc, "start")) &&
                same_str(json_object_get(d, "policy"), pol) &&
                same_str(json_object_get(d, "leave_out"), json_object_get(r->doc, "leave_out")) &&
                json_equal(json_object_get(d, "budget"), json_object_get(r->doc, "budget")) &&
                json_equal(json_object_get(d, "seed"), json_object_get(r->doc, "seed")) &&
                json_integer_value(json_object_get(d, "search")) == OPT_SEARCH_REVISION &&
                (r->opt->policy != KL_POLICY_SKILLS ||
                 json_equal(json_object_get(d, "ranking"), json_object_get(r->doc, "ranking")));
    const json_t *lib = json_object_get(d, "library"), *mem = json_object_get(d, "memory");
    const char *state = json_string_value(json_object_get(d, "state"));
    const char *when = json_string_value(json_object_get(d, "updated"));
    same = same && state && !strcmp(state, "done") && when && strcmp(when, o->when) > 0; /* the newest */
    if (same && (!json_equal(lib, o->lib) || !json_equal(mem, o->mem))) {
        kl_snprintf(o->when, sizeof o->when, "%s", when);
        bool by_lib = !json_equal(lib, o->lib);
        const json_t *theirs = by_lib ? lib : mem, *ours = by_lib ? o->lib : o->mem;
        const char *count = by_lib ? "cards" : "records";
        kl_snprintf(o->found, sizeof o->found, "%s of %lld %s (%.12s; this store's: %lld, %.12s)",
                    by_lib ? "a library" : "a memory", (long long)json_integer_value(json_object_get(theirs, count)),
                    count, json_string_value(json_object_get(theirs, "fingerprint")) ?: "?",
                    (long long)json_integer_value(json_object_get(ours, count)),
                    json_string_value(json_object_get(ours, "fingerprint")) ?: "?");
    }
    json_decref(d);
    return true;
}

static void explain_other_run(const search__run *r)
{
    if (!r->doc) return;
    other_run o = {r, json_object_get(r->doc, "library"), json_object_get(r->doc, "memory"), "", ""};
    kl_error ignore = {0};
    if (kl_store_each(r->opt->store, "optimize", NULL, find_other_run, &o, &ignore) != KL_OK || !o.found[0]) return;
    char was[KL_ERROR_MAX];
    kl_snprintf(was, sizeof was, "%s", r->err->message);
    kl_error_set(r->err, KL_ERR_UNMEASURED,
                 "%s; the store holds this run, finished, made with %s: it has skill cards or runs that the archive did "
                 "not have when the run was recorded (learned here, or left by an older archive) — replay into a "
                 "fresh store (--db FILE)",
                 was, o.found);
}

/* ---- entry -------------------------------------------------------------------------------- */

json_int_t opt_search_revision(const json_t *doc)
{
    const json_t *v = json_object_get(doc, "search");
    return json_is_integer(v) ? json_integer_value(v) : 1;
}

static kl_status start_doc(search__run *r, const char *start_text, const char *lib_hex, unsigned ncards,
                           const char *mem_hex, unsigned nmem)
{
    char *text = NULL;
    kl_status st = KL_OK;
    if (!r->opt->restart) {
        st = kl_store_get(r->opt->store, "optimize", r->key, &text, r->err);
        if (st == KL_OK) {
            json_error_t je;
            r->doc = json_loads(text, 0, &je);
            free(text);
            if (!json_is_object(r->doc) || !json_is_array(json_object_get(r->doc, "rounds")))
                return kl_error_set(r->err, KL_ERR_PARSE, "stored run %.12s is damaged (%s): start again with --restart",
                                    r->key, r->doc ? "no rounds" : je.text);
            r->stored_rounds = json_incref(json_object_get(r->doc, "rounds"));
            json_object_set(r->doc, "stored_finals", json_object_get(r->doc, "finals"));
            const char *state = json_string_value(json_object_get(r->doc, "state"));
            json_int_t rev = opt_search_revision(r->doc);
            if (rev != OPT_SEARCH_REVISION && r->opt->restart_older) {
                /* made by another search: start again (what it judged stays in the verdict store) */
                json_decref(r->doc), json_decref(r->stored_rounds);
                r->doc = NULL, r->stored_rounds = NULL;
                goto fresh;
            }
            if (rev != OPT_SEARCH_REVISION && !(state && !strcmp(state, "done")))
                return kl_error_set(r->err, KL_ERR_INVALID,
                                    "stored run %.12s was begun by search revision %lld and this build searches with "
                                    "revision %d (docs/optimize.md): start again with --restart or --restart-older",
                                    r->key, (long long)rev, OPT_SEARCH_REVISION);
            if (state && !strcmp(state, "paused")) { /* a run stopped by its time limit goes on */
                json_object_set_new(r->doc, "state", json_string("running"));
                json_object_del(r->doc, "stop_reason");
            }
            return KL_OK;
        }
        if (st != KL_ERR_NOT_FOUND) return st;
        kl_error_clear(r->err);
    }
fresh:;
    const kl_optimize_options *o = r->opt;
    r->doc = json_object();
    json_object_set_new(r->doc, "format", json_string(KL_OPTIMIZE_FORMAT));
    json_object_set_new(r->doc, "search", json_integer(OPT_SEARCH_REVISION));
    if (r->opt->policy == KL_POLICY_SKILLS) json_object_set_new(r->doc, "ranking", json_integer(r->ranking));
    json_object_set_new(r->doc, "key", json_string(r->key));
    json_object_set_new(r->doc, "task", json_string(r->task->name));
    json_object_set_new(r->doc, "task_dir", json_string(r->task->dir));
    json_object_set_new(r->doc, "start", json_string(r->start_path));
    json_object_set_new(r->doc, "policy", json_string(kl_policy_name(o->policy)));
    json_object_set_new(r->doc, "rewriter", json_string(kl_rewriter_name(o->rewriter)));
    json_object_set_new(r->doc, "seed", json_integer((json_int_t)o->seed));
    json_object_set_new(r->doc, "budget", json_integer(r->budget));
    json_object_set_new(r->doc, "beam", json_integer(r->beam));
    json_object_set_new(r->doc, "patience", json_integer(o->patience));
    json_object_set_new(r->doc, "min_gain", json_real(r->min_gain));
    json_object_set_new(r->doc, "sanitize_final", json_boolean(o->sanitize_final));
    if (o->leave_out) json_object_set_new(r->doc, "leave_out", json_string(o->leave_out));
    json_object_set_new(r->doc, "admitted_only", json_boolean(o->admitted_only));
    json_t *lib = json_object();
    json_object_set_new(lib, "cards", json_integer(ncards));
    json_object_set_new(lib, "fingerprint", json_string(lib_hex));
    json_object_set_new(r->doc, "library", lib);
    json_t *mem = json_object();
    json_object_set_new(mem, "records", json_integer(nmem));
    json_object_set_new(mem, "fingerprint", json_string(mem_hex));
    json_object_set_new(r->doc, "memory", mem);
    json_t *b = json_object();
    for (unsigned k = 0; k < r->task->nsizes; k++)
        json_object_set_new(b, r->task->sizes[k], json_integer(r->task->bench.values[k]));
    json_object_set_new(r->doc, "bench", b);
    char stamp[32];
    kl_utc_stamp(stamp, sizeof stamp);
    json_object_set_new(r->doc, "started", json_string(stamp));
    json_object_set_new(r->doc, "state", json_string("running"));
    (void)start_text;
    return KL_OK;
}

static kl_status check_start(search__run *r, const char *start_text)
{
    /* the start must define the task's launch(): the same parameter count as the task's args
     * plus the stream */
    kl_source *src = NULL;
    kl_model *m = NULL;
    kl_status st = kl_source_parse_text(r->start_path, start_text, strlen(start_text), &src, r->err);
    if (st != KL_OK) return st;
    st = kl_model_build(src, &m, r->err);
    if (st == KL_OK) {
        int fi = kl_model_launch_function(m);
        unsigned nf = 0;
        const kl_function *fs = kl_model_functions(m, &nf);
        if (fi < 0)
            st = kl_error_set(r->err, KL_ERR_INVALID, "%s: no extern \"C\" launch() function: the start must be a kernel "
                                                      "file of task %s (docs/task-format.md)",
                              r->start_path, r->task->name);
        else if (fs[fi].nparams != r->task->nargs + 1)
            st = kl_error_set(r->err, KL_ERR_INVALID,
                              "%s:%u: launch() takes %u parameter(s); task %s expects %u (its %u args and a "
                              "cudaStream_t)",
                              r->start_path, fs[fi].span.line, fs[fi].nparams, r->task->name, r->task->nargs + 1,
                              r->task->nargs);
    }
    kl_model_free(m);
    kl_source_free(src);
    return st;
}

kl_status kl_optimize_run(const kl_task *task, const kl_optimize_options *opt, char **doc_json, kl_error *err)
{
    if (doc_json) *doc_json = NULL;
    if (!task || !opt || !opt->rewriter || !opt->store || !opt->judge)
        return kl_error_set(err, KL_ERR_INVALID, "optimize: a task, a rewriter, a store and a judge are required");
    search__run r;
    memset(&r, 0, sizeof r);
    r.task = task;
    r.opt = opt;
    r.err = err;
    r.budget = opt->budget ? opt->budget : KL_OPTIMIZE_BUDGET;
    r.beam = opt->beam ? opt->beam : KL_OPTIMIZE_BEAM;
    r.ranking = opt->ranking ? opt->ranking : KL_OPTIMIZE_RANKING;
    r.min_gain = opt->min_gain > 0 ? opt->min_gain : KL_OPTIMIZE_MIN_GAIN;
    r.t0 = kl_now();
    kl_skill_list own = KL_SKILL_LIST_INIT;
    char *start_text = NULL, *mem_text = NULL;
    kl_status st = KL_OK;
    if (r.ranking < 2 || r.ranking > 5) {
        st = kl_error_set(err, KL_ERR_INVALID, "the skills ranking %u is not one of 2, 3, 4 and 5 (docs/optimize.md)",
                          r.ranking);
        goto cleanup;
    }
    if (r.budget < 2) {
        st = kl_error_set(err, KL_ERR_INVALID,
                          "a budget of %u gate call(s) leaves none for the search (one is kept for the final check "
                          "of the returned kernel): give 2 or more",
                          r.budget);
        goto cleanup;
    }
    if (opt->from_path) {
        r.start_path = kl_strdup(opt->from_path);
    } else if (task->naive) {
        r.start_path = kl_task_path(task, task->naive);
    } else {
        st = kl_error_set(err, KL_ERR_INVALID, "%s/task.json: no \"naive\" kernel to start from: give --from FILE",
                          task->dir);
        goto cleanup;
    }
    if (!r.start_path) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    r.start_name = kl_strdup(r.start_path);
    KL_TRY(kl_file_read(r.start_path, KL_SOURCE_MAX, &start_text, NULL, err));
    KL_TRY(check_start(&r, start_text));

    /* what the policy draws on */
    r.pc.policy = opt->policy;
    r.pc.task = task;
    r.pc.seed = opt->seed;
    r.pc.ranking = r.ranking;
    r.pc.admitted_only = opt->admitted_only;
    unsigned ncards = 0, nmem = 0;
    char lib_hex[KL_HASH_HEX] = "", mem_hex[KL_HASH_HEX] = "";
    if (opt->policy == KL_POLICY_SKILLS) {
        const kl_skill_list *lib = opt->library;
        if (!lib) {
            KL_TRY(kl_skill_list_load_excluding(opt->store, opt->leave_out, &own, err));
            if (opt->admitted_only) kl_skill_list_keep_admitted(&own);
            lib = &own;
        }
        r.pc.library = lib;
        ncards = lib->count;
        if (!ncards) {
            st = kl_error_set(err, KL_ERR_INVALID,
                              "the skills policy has no cards: the library is empty%s (walk experts with 'klineage "
                              "lineage TASK_DIR', or use --policy blind)",
                              opt->leave_out ? " once the left-out task's lineages are taken out" : "");
            goto cleanup;
        }
        library_fingerprint(lib, lib_hex);
    }
    if (opt->policy == KL_POLICY_MEMORY) {
        KL_TRY(kl_optimize_memory_json(opt->store, task->name, opt->leave_out, r.budget, opt->memory_tasks, &mem_text, err));
        r.memory = json_loads(mem_text, 0, NULL);
        if (!r.memory) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        nmem = (unsigned)json_array_size(r.memory);
        kl_hash_hex(mem_text, strlen(mem_text), mem_hex);
        r.pc.memory = r.memory;
    }
    run_key(&r, start_text, lib_hex, mem_hex);
    KL_TRY(start_doc(&r, start_text, lib_hex, ncards, mem_hex, nmem));
    r.rounds = json_array();
    r.ahead = json_object();
    r.skipped = json_array();
    r.finals = json_array();
    r.pc.skipped = r.skipped;
    KL_TRY(add_version(&r, start_text, -1, 0, 1.0, NULL));
    r.best = 0;

    const char *state = json_string_value(json_object_get(r.doc, "state"));
    if (state && !strcmp(state, "done")) {
        /* a finished run: what it stored is the answer */
        json_int_t rev = opt_search_revision(r.doc);
        if (rev != OPT_SEARCH_REVISION)
            say(&r, KL_OPT_NOTE,
                "run %.12s is stored as done, by search revision %lld (this build searches with revision %d): "
                "showing it as it was (--restart to run it again)",
                r.key, (long long)rev, OPT_SEARCH_REVISION);
        else
            say(&r, KL_OPT_NOTE, "run %.12s is stored as done: showing it (--restart to run it again)", r.key);
        /* a run stored before a final check slower than the start returned the start: it returns
         * the start now (final_slower), from what it stored */
        json_int_t sb = json_integer_value(json_object_get(r.doc, "best"));
        if (sb > 0 && start_if_slower(&r, json_object_get(r.doc, "finals"), sb)) {
            json_object_set_new(r.doc, "best", json_integer(0));
            say(&r, KL_OPT_NOTE, "v%lld was no faster than the start in its final check: the start is returned",
                (long long)sb);
        }
        goto out;
    }
    say(&r, KL_OPT_START, "optimizing %s from %s with the %s policy, %u gate call(s)%s", task->name, r.start_path,
        kl_policy_name(opt->policy), r.budget,
        json_array_size(r.stored_rounds) ? " (resuming the stored run)" : "");

    const char *stop = NULL;
    for (;;) {
        if (r.used + 1 >= r.budget) {
            stop = "budget";
            break;
        }
        if (opt->patience && r.since_best >= opt->patience) {
            stop = "patience";
            break;
        }
        bool replaying = json_array_size(r.rounds) < json_array_size(r.stored_rounds);
        if (!replaying && opt->interrupt && *opt->interrupt) {
            st = kl_error_set(err, KL_ERR_INTERRUPTED, "interrupted after %u gate call(s)", r.used);
            save(&r);
            goto out;
        }
        if (!replaying && opt->time_s > 0 && kl_now() - r.t0 >= opt->time_s) {
            json_object_set_new(r.doc, "state", json_string("paused"));
            json_object_set_new(r.doc, "stop_reason", json_string("time limit"));
            KL_TRY(save(&r));
            say(&r, KL_OPT_NOTE, "the time limit (%.0f s) was reached: run the same command to go on", opt->time_s);
            goto out;
        }
        int vi, ci;
        KL_TRY(search__pick(&r, &vi, &ci));
        if (vi < 0) {
            stop = "nothing left to try";
            break;
        }
        st = one_round(&r, (unsigned)vi, (unsigned)ci);
        if (st == KL_ERR_UNMEASURED) {
            explain_other_run(&r);
            save(&r);
            goto out;
        }
        if (st != KL_OK) goto cleanup;
    }
    bool done = false;
    st = final_check(&r, &done);
    if (st != KL_OK) {
        save(&r);
        goto out;
    }
    json_object_set_new(r.doc, "stop_reason", json_string(stop));
    json_object_set_new(r.doc, "state", json_string("done"));
    json_object_del(r.doc, "stored_finals");
    json_object_set_new(r.doc, "elapsed_s", json_real(kl_now() - r.t0));
    KL_TRY(save(&r));
    say(&r, KL_OPT_DONE, "done (%s): %u gate call(s), best %.3fx over the start", stop, r.used,
        r.versions[r.best].cum);
out:
    if (doc_json && r.doc) {
        json_t *copy = json_deep_copy(r.doc);
        json_object_del(copy, "stored_finals");
        *doc_json = json_dumps(copy, JSON_SORT_KEYS | JSON_INDENT(2));
        json_decref(copy);
    }
cleanup:
    for (unsigned i = 0; i < r.nversions; i++) version_release(&r.versions[i]);
    free(r.versions);
    json_decref(r.doc);
    json_decref(r.stored_rounds);
    json_decref(r.rounds);
    json_decref(r.ahead);
    json_decref(r.skipped);
    json_decref(r.finals);
    json_decref(r.memory);
    kl_skill_list_release(&own);
    free(r.start_path);
    free(r.start_name);
    free(start_text);
    free(mem_text);
    return st;
}

char *kl_optimize_best_source(const char *doc_json)
{
    json_t *d = doc_json ? json_loads(doc_json, 0, NULL) : NULL;
    json_int_t b = json_integer_value(json_object_get(d, "best"));
    const char *s = json_string_value(json_object_get(json_array_get(json_object_get(d, "versions"), (size_t)b), "source"));
    char *out = s ? kl_strdup(s) : NULL;
    json_decref(d);
    return out;
}
