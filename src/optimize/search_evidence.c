/* The search's own evidence for the skills policy (search_int.h): transforms gone stale in this
 * run, the ranking's calibration by the run's gains, the tiers of candidates, the pick, and the
 * judgements made ahead of their round. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optimize/optimize_int.h"
#include "optimize/search_int.h"

/* ---- the run's own evidence (skills) ------------------------------------------------------ */

/* How many times the transform failed since the last new best, when the run defers it; else 0. */
static unsigned stale_count(const search__run *r, const char *transform)
{
    for (unsigned i = 0; i < r->nstale; i++)
        if (!strcmp(r->stale[i], transform)) return r->stale_n[i];
    return 0;
}

bool search__is_stale(const search__run *r, const char *transform) { return stale_count(r, transform) > 0; }

/* The transforms this run has judged OPT_STALE_AFTER times without paying (rejected, or less
 * than min_gain over the version it was applied to) since its last new best: what the cards
 * promised for them did not hold on this kernel as it now stands, so their other proposals go
 * after everything else, even after what the cards defer (cand_tier). A new best changes the
 * kernel, and the slate is clean again. The skills policy only: blind takes its seeded order, memory its retrieved outcomes. */
void search__run_stale(search__run *r)
{
    r->nstale = 0;
    if (r->opt->policy != KL_POLICY_SKILLS) return;
    struct tally {
        const char *t;
        unsigned n;
    } seen[OPT_STALE_MAX];
    unsigned nseen = 0;
    for (size_t k = json_array_size(r->rounds); k-- > 0;) {
        const json_t *o = json_array_get(r->rounds, k);
        const char *res = json_string_value(json_object_get(o, "result"));
        if (res && !strcmp(res, "new best")) break;
        const char *t = json_string_value(json_object_get(json_object_get(o, "candidate"), "transform"));
        const json_t *j = json_object_get(o, "judgement");
        const json_t *g = json_object_get(j, "speedup");
        bool paid = json_is_true(json_object_get(j, "pass")) && json_is_number(g) && json_number_value(g) >= r->min_gain;
        if (!t || paid) continue;
        unsigned i = 0;
        while (i < nseen && strcmp(seen[i].t, t)) i++;
        if (i == nseen) {
            if (nseen == OPT_STALE_MAX) continue;
            seen[nseen++] = (struct tally){t, 0};
        }
        if (++seen[i].n == OPT_STALE_AFTER && r->nstale < OPT_STALE_MAX)
            kl_snprintf(r->stale[r->nstale++], sizeof r->stale[0], "%s", t);
    }
    for (unsigned i = 0; i < r->nstale; i++)
        for (unsigned k = 0; k < nseen; k++)
            if (!strcmp(seen[k].t, r->stale[i])) r->stale_n[i] = seen[k].n;
}

search__step_tally search__tally_step(const opt_version *v, const opt_cand *c)
{
    search__step_tally t = {0, 0, true, 0, 0};
    unsigned best_at = 0;
    for (unsigned i = 0; i < v->ncands; i++) {
        const opt_cand *x = &v->cands[i];
        if (!x->judged || strcmp(x->transform, c->transform) || strcmp(x->site, c->site)) continue;
        if (x->gain <= 0) t.flat = false;
        if (t.n == 0 || x->gain < t.lo) t.lo = x->gain;
        if (t.n == 0 || x->gain > t.hi) t.hi = x->gain, best_at = x->judged_at;
        t.n++;
    }
    if (t.n && t.lo > 0 && t.hi >= t.lo * OPT_PAYS) t.flat = false;
    for (unsigned i = 0; i < v->ncands; i++) {
        const opt_cand *x = &v->cands[i];
        if (x->judged && x->judged_at > best_at && !strcmp(x->transform, c->transform) && !strcmp(x->site, c->site))
            t.misses++;
    }
    return t;
}

/* Skills, ranking 4: is c an alternative the run has sampled enough? Its version judged two or more
 * proposals of the same step, and they gained alike (histogram: privatize with 16 copies and with 1,
 * 5.98x both; the other counts waited before anything from the privatized kernel), or the last
 * OPT_STALE_AFTER of them did no better than the best (mark_spread searched the parameters). */
static bool sampled(const opt_version *v, const opt_cand *c)
{
    search__step_tally t = search__tally_step(v, c);
    return t.n >= 2 && (t.flat || t.misses >= OPT_STALE_AFTER);
}

/* Ranking 5: can a variant still lead? Its step's best judgement at its version (tally_step) put
 * that version within OPT_PAYS of the run's best. Once another step overtook it, the variant
 * ranks as any proposal (softmax: after a block per row made 26x from the start, the start's
 * other vector width, a variant of the 1.47x step, still took call 5). Earlier rankings: always. */
static bool variant_live(const search__run *r, const opt_version *v, const opt_cand *c)
{
    if (r->ranking < 5 || r->best < 0) return true;
    search__step_tally t = search__tally_step(v, c);
    return t.n == 0 || v->cum * t.hi * OPT_PAYS >= r->versions[r->best].cum;
}

/* How far back a candidate goes: 0 expected to pay; 1 deferred by the policy (skills: a card
 * measured no gain, or lost, or every card fails here); 2 deferred by this run's own judgements
 * of its transform (run_stale) — after what the cards defer, since what the run saw fail here
 * is stronger evidence than what a card saw elsewhere; 3 (ranking 3) its site does not run at the
 * bench shape (mark_off_path); -2 (ranking 3) a door a step closed (mark_door); -1 (ranking 3,
 * search revision 5) a variant of a step that made a new best (mark_variant); 2 (ranking 4) an
 * alternative the run has sampled (sampled()), unless a step just marked it a door or a variant. */
int search__cand_tier(const search__run *r, const opt_version *v, const opt_cand *c)
{
    if (c->off_path) return 3;
    if (search__is_stale(r, c->transform)) return 2;
    if (c->door) return -2;
    if (c->variant && variant_live(r, v, c)) return -1;
    if (r->ranking >= 4 && r->opt->policy == KL_POLICY_SKILLS && sampled(v, c)) return 2;
    return c->defer ? 1 : 0;
}

/* Skills, ranking 4: E as this run has seen its transform pay. The card's (or the prior's) E
 * counts as one judgement and each passing judgement of the transform in this run as another
 * (the geometric mean of them all): on softmax the vectorize card promised 1.45x at every site
 * and the run's own steps gained 1.47, 1.00, 0.96, 1.03x; what a transform did on this kernel
 * says more than what it did elsewhere, and more the more often it was seen. */
static double expect_run(const search__run *r, const opt_cand *c)
{
    if (r->ranking < 4 || c->expect <= 0) return c->expect;
    for (unsigned i = 0; i < r->ncal; i++)
        if (!strcmp(r->cal[i], c->transform)) return exp((log(c->expect) + r->cal_log[i]) / (1 + r->cal_n[i]));
    return c->expect;
}

/* Ranking 5: E of an alternative of a step this version already judged (the same transform at the
 * same site, other parameters) is at most what the step's best judgement there gained: the run's
 * own measurement of the very step says more than a card (softmax: after vectorize with width 4
 * gained 1.06x at a row loop, the card's 1.15x for width 2 there took a call before fast-math).
 * Where the judgements differ, mark_spread tries the parameters as variants all the same. */
double search__expect_here(const search__run *r, const opt_version *v, const opt_cand *c)
{
    double e = expect_run(r, c);
    if (r->ranking < 5) return e;
    search__step_tally t = search__tally_step(v, c);
    return t.n && t.hi > 0 && t.hi < e ? t.hi : e;
}

/* Ranking 5: E with the benefit of the doubt its card's evidence leaves, among what the cards
 * defer: a card's gain averages `evidence` measurements, each uncertain by about the gate's noise
 * band (OPT_PAYS), so the bound is E × OPT_PAYS^(2/√n). Restrict's card averaged a dozen gains
 * near 1.00x — it is noise; grid-stride's, with histogram left out, one (reduce_sum's tail loop,
 * 1.00x) — it may be anything, and was 30x on histogram while restrict, launch-bounds and unroll
 * went first. */
static double expect_doubt(const search__run *r, const opt_version *v, const opt_cand *c)
{
    double e = search__expect_here(r, v, c);
    if (r->ranking < 5 || c->evidence == 0) return e;
    return e * pow(OPT_PAYS, 2.0 / sqrt((double)c->evidence));
}

/* Skills, ranking 4: how many times the run judged the transform since its last new best. */
static unsigned turns(const search__run *r, const char *transform)
{
    for (unsigned i = 0; i < r->nturn; i++)
        if (!strcmp(r->turn[i], transform)) return r->turn_n[i];
    return 0;
}

/* What each transform gained in this run's passing judgements (expect_run), and how many times
 * each was judged since the last new best (turns). Read from the rounds, so a resumed run
 * computes the same. */
void search__run_calibrate(search__run *r)
{
    r->ncal = r->nturn = 0;
    if (r->opt->policy != KL_POLICY_SKILLS || r->ranking < 4) return;
    size_t k;
    json_t *o;
    json_array_foreach(r->rounds, k, o) {
        const char *t = json_string_value(json_object_get(json_object_get(o, "candidate"), "transform"));
        const char *res = json_string_value(json_object_get(o, "result"));
        if (res && !strcmp(res, "new best")) r->nturn = 0;
        else if (t) {
            unsigned i = 0;
            while (i < r->nturn && strcmp(r->turn[i], t)) i++;
            if (i == r->nturn && r->nturn < OPT_STALE_MAX) {
                kl_snprintf(r->turn[r->nturn], sizeof r->turn[0], "%s", t);
                r->turn_n[r->nturn++] = 0;
            }
            if (i < r->nturn) r->turn_n[i]++;
        }
        const json_t *j = json_object_get(o, "judgement");
        double g = json_number_value(json_object_get(j, "speedup"));
        if (!t || !json_is_true(json_object_get(j, "pass")) || !(g > 0)) continue;
        unsigned i = 0;
        while (i < r->ncal && strcmp(r->cal[i], t)) i++;
        if (i == r->ncal) {
            if (r->ncal == OPT_STALE_MAX) continue;
            kl_snprintf(r->cal[r->ncal], sizeof r->cal[0], "%s", t);
            r->cal_log[r->ncal] = 0;
            r->cal_n[r->ncal++] = 0;
        }
        r->cal_log[i] += log(g);
        r->cal_n[i]++;
    }
}

/* Does candidate x of version vx go before y of vy? The lower tier (cand_tier) from whatever
 * version; among what the run defers, the transform that failed fewer times; then cum × E; then
 * the faster version, the lower version, the policy's order. */
static bool cand_before(const search__run *r, unsigned vx, const opt_cand *x, unsigned vy, const opt_cand *y)
{
    const opt_version *a = &r->versions[vx], *b = &r->versions[vy];
    int tx = search__cand_tier(r, a, x), ty = search__cand_tier(r, b, y);
    if (tx != ty) return tx < ty;
    if (tx == 2 && r->ranking >= 3) {
        unsigned nx = stale_count(r, x->transform), ny = stale_count(r, y->transform);
        if (nx != ny) return nx < ny;
    }
    /* ranking 4: among what the cards defer (noise where they were measured), the transform this
     * run judged fewer times since its last new best goes first: the cards cannot tell them apart
     * (1.02x against 1.00x), and histogram's runs judged restrict, launch-bounds and unroll twice
     * each before grid-stride once (30x) */
    if (tx == 1 && r->ranking >= 4) {
        unsigned nx = turns(r, x->transform), ny = turns(r, y->transform);
        if (nx != ny) return nx < ny;
        if (r->ranking >= 5) {
            double dx = a->cum * expect_doubt(r, a, x), dy = b->cum * expect_doubt(r, b, y);
            if (dx > dy * (1 + 1e-12)) return true;
            if (dy > dx * (1 + 1e-12)) return false;
        }
    }
    double mx = a->cum * search__expect_here(r, a, x), my = b->cum * search__expect_here(r, b, y);
    if (mx > my * (1 + 1e-12)) return true;
    if (my > mx * (1 + 1e-12)) return false;
    if (a->cum != b->cum) return a->cum > b->cum;
    if (vx != vy) return vx < vy;
    double ex = search__expect_here(r, a, x), ey = search__expect_here(r, b, y);
    if (ex != ey) return ex > ey;
    return x->order < y->order;
}

/* The next untried candidate of version vi in the policy's order, or -1. */
static int next_of(const search__run *r, unsigned vi)
{
    const opt_version *v = &r->versions[vi];
    int best = -1;
    for (unsigned i = 0; i < v->ncands; i++) {
        const opt_cand *c = &v->cands[i];
        if (c->tried) continue;
        if (best < 0 || cand_before(r, vi, c, vi, &v->cands[best])) best = (int)i;
    }
    return best;
}

/* The (version, candidate) with the highest cum × E; ties: the faster version, then the newer. */
kl_status search__pick(search__run *r, int *pv, int *pc)
{
    *pv = *pc = -1;
    /* every open version expanded first: expanding one can open a door at its parent */
    for (unsigned i = 0; i < r->nversions; i++) {
        if (!r->versions[i].open) continue;
        kl_status st = search__expand(r, i);
        if (st != KL_OK) return st;
    }
    for (unsigned i = 0; i < r->nversions; i++) {
        if (!r->versions[i].open) continue;
        int c = next_of(r, i);
        if (c < 0) {
            r->versions[i].open = false; /* nothing left to try from it */
            continue;
        }
        if (*pv < 0 || cand_before(r, i, &r->versions[i].cands[c], (unsigned)*pv, &r->versions[*pv].cands[*pc])) {
            *pv = (int)i;
            *pc = c;
        }
    }
    return KL_OK;
}

/* Up to n (version, candidate) pairs in the order the search would take them if no judgement
 * changed anything: the untried candidates of the open versions in pick()'s order. */
typedef struct pair {
    unsigned v, c;
} pair;

static int pair_before(const search__run *r, const pair *a, const pair *b)
{
    return cand_before(r, a->v, &r->versions[a->v].cands[a->c], b->v, &r->versions[b->v].cands[b->c]);
}

static unsigned pick_ahead(search__run *r, pair *out, unsigned n)
{
    unsigned k = 0;
    for (unsigned i = 0; i < r->nversions; i++) {
        const opt_version *v = &r->versions[i];
        if (!v->open || !v->expanded) continue;
        for (unsigned c = 0; c < v->ncands; c++) {
            if (v->cands[c].tried) continue;
            pair p = {i, c};
            unsigned at = k < n ? k : n;
            while (at > 0 && pair_before(r, &p, &out[at - 1])) at--;
            if (at >= n) continue;
            for (unsigned q = (k < n ? k : n - 1); q > at; q--) out[q] = out[q - 1];
            out[at] = p;
            if (k < n) k++;
        }
    }
    return k;
}

void search__ahead_key(unsigned vi, const char *hash, char *buf, size_t size)
{
    kl_snprintf(buf, size, "%u:%s", vi, hash);
}

/* Judge the next candidates at once (several GPUs): the one the search takes now, vi/ci, and
 * those after it in the order the search would take them. Their judgements wait in r->ahead. */
kl_status search__judge_ahead(search__run *r, unsigned vi, unsigned ci)
{
    unsigned n = r->opt->ahead;
    if (!r->opt->judge_many || n < 2) return KL_OK;
    char key[200];
    search__ahead_key(vi, r->versions[vi].cands[ci].hash, key, sizeof key);
    if (json_object_get(r->ahead, key)) return KL_OK; /* judged with the last batch */
    pair *ps = calloc(n, sizeof *ps);
    kl_judge_request *reqs = calloc(n, sizeof *reqs);
    kl_judgement *outs = calloc(n, sizeof *outs);
    char(*names)[128] = calloc(n, sizeof *names);
    kl_status st = KL_OK;
    if (!ps || !reqs || !outs || !names) {
        st = kl_error_set(r->err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    unsigned k = pick_ahead(r, ps, n), m = 0;
    for (unsigned i = 0; i < k; i++) {
        const opt_version *v = &r->versions[ps[i].v];
        const opt_cand *c = &v->cands[ps[i].c];
        search__ahead_key(ps[i].v, c->hash, key, sizeof key);
        if (json_object_get(r->ahead, key)) continue;
        search__cand_name(r->task, c->hash, names[m], sizeof names[m]);
        reqs[m] = (kl_judge_request){names[m], c->source, v->name, v->source, KL_JUDGE_PROFILE | KL_JUDGE_BENCH_VS_BASELINE};
        ps[m] = ps[i];
        m++;
    }
    unsigned done = 0;
    kl_error e = {0};
    for (unsigned i = 0; i < m; i++) outs[i].speedup = outs[i].cand_ms = outs[i].base_ms = -1;
    kl_status js = m ? r->opt->judge_many(r->opt->judge_user, r->task, m, reqs, outs, &done, &e) : KL_OK;
    if (js == KL_OK) done = m;
    for (unsigned i = 0; i < done; i++) {
        if (outs[i].unmeasured) continue; /* asked again, one by one, when the search gets there */
        search__ahead_key(ps[i].v, r->versions[ps[i].v].cands[ps[i].c].hash, key, sizeof key);
        json_object_set_new(r->ahead, key, search__judgement_json(&outs[i]));
        r->ahead_made++;
    }
    /* a failure of the batch is what judging one by one would meet at request `done`: that
     * request is judged again on its own when the search reaches it, and fails there */
cleanup:
    free(ps), free(reqs), free(outs), free(names);
    return st;
}

/* Compile the next few candidates of v in the order they will be judged. */
kl_status search__prepare(search__run *r, unsigned vi)
{
    if (!r->opt->prepare) return KL_OK;
    opt_version *v = &r->versions[vi];
    unsigned batch = r->opt->prepare_batch ? r->opt->prepare_batch : 16;
    const char **names = calloc(batch, sizeof *names), **texts = calloc(batch, sizeof *texts);
    char(*nb)[128] = calloc(batch, sizeof *nb);
    kl_status st = KL_OK;
    if (!names || !texts || !nb) {
        st = kl_error_set(r->err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    /* the untried, unprepared candidates, best first */
    unsigned n = 0;
    for (; n < batch; n++) {
        int best = -1;
        for (unsigned i = 0; i < v->ncands; i++) {
            const opt_cand *c = &v->cands[i];
            if (c->tried || c->prepared) continue;
            if (best < 0 || cand_before(r, vi, c, vi, &v->cands[best])) best = (int)i;
        }
        if (best < 0) break;
        v->cands[best].prepared = true;
        search__cand_name(r->task, v->cands[best].hash, nb[n], sizeof nb[n]);
        names[n] = nb[n];
        texts[n] = v->cands[best].source;
    }
    if (n) st = r->opt->prepare(r->opt->judge_user, r->task, n, names, texts, r->err);
cleanup:
    free(names), free(texts), free(nb);
    return st;
}
