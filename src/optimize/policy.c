/*
 * The three policies: what a proposal is expected to gain (E) and the order of equal
 * scores (docs/optimize.md, "Policies").
 *   skills: the cards of the proposal's transform, matched on this site and task;
 *   memory: the blind policy's earlier attempts on other tasks, nearest by features;
 *   blind:  nothing (E = 1), a seeded random order.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optimize/optimize_int.h"

/* ---- features ---------------------------------------------------------------------------- */

static void flatten(json_t *out, const char *prefix, const json_t *v, unsigned depth)
{
    if (depth > 4) return;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x) {
            char name[128];
            if (*prefix)
                kl_snprintf(name, sizeof name, "%s.%s", prefix, k);
            else
                kl_snprintf(name, sizeof name, "%s", k);
            flatten(out, name, x, depth + 1);
        }
    } else if (json_is_string(v) || json_is_number(v) || json_is_boolean(v)) {
        if (*prefix) json_object_set(out, prefix, (json_t *)v);
    }
    /* arrays (lists of per-item records) are not features to compare */
}

/* The kernel a site id names: "kernel:line[:what]" → "kernel". */
static void site_kernel(const char *site, char *buf, size_t size)
{
    const char *colon = strchr(site, ':');
    size_t n = colon ? (size_t)(colon - site) : strlen(site);
    if (n >= size) n = size - 1;
    memcpy(buf, site, n);
    buf[n] = '\0';
}

static json_t *kernel_features(const kl_model *m, const char *site)
{
    char kname[128];
    site_kernel(site, kname, sizeof kname);
    int fi = m ? kl_model_find_function(m, kname, KL_FUNCTION_KERNEL) : -1;
    if (fi < 0 && m) fi = kl_model_find_function(m, kname, KL_FUNCTION_HOST);
    return fi >= 0 ? kl_model_features(m, (unsigned)fi) : NULL;
}

static json_t *features_with(const kl_model *m, const opt_cand *c)
{
    json_t *out = json_object();
    json_t *kf = kernel_features(m, c->site);
    if (kf) flatten(out, "", kf, 0);
    json_decref(kf);
    if (c->features) flatten(out, "", c->features, 0);
    return out;
}

json_t *opt_candidate_features(const char *version_source, const opt_cand *c)
{
    kl_source *src = NULL;
    kl_model *m = NULL;
    kl_error e = {0};
    if (kl_source_parse_text("<version>", version_source, strlen(version_source), &src, &e) == KL_OK)
        kl_model_build(src, &m, &e);
    json_t *out = features_with(m, c);
    kl_model_free(m);
    kl_source_free(src);
    return out;
}

/* ---- skills ------------------------------------------------------------------------------- */

typedef struct card_verdict {
    kl_truth truth;
    unsigned unlike;     /* failing conditions that only describe the site it was learned at */
    char unlike_pred[160]; /* the first of them */
    char predicate[160]; /* the first failing (or unknown) condition */
    char shape[128];     /* where it was decided ("" for a static condition or a missing transform) */
    char why[200];
    char card_dtype[16], site_dtype[16]; /* a failing `dtype` condition's two sides ("" otherwise) */
} card_verdict;

/* Where a candidate sits: the kernel and line of its site id ("kernel:line[:what]"). */
static void site_of(const opt_cand *c, char *kernel, size_t size, unsigned *line)
{
    const char *colon = strchr(c->site, ':');
    size_t n = colon ? (size_t)(colon - c->site) : strlen(c->site);
    if (n >= size) n = size - 1;
    memcpy(kernel, c->site, n);
    kernel[n] = '\0';
    *line = colon ? (unsigned)strtoul(colon + 1, NULL, 10) : 0;
}

/* The first double-quoted string of text into out ("" when there is none): a condition's value
 * (`dtype == "f32"`) or what a check read (`dtype = "u8"`). */
static void quoted(const char *text, char *out, size_t size)
{
    out[0] = '\0';
    const char *a = text ? strchr(text, '"') : NULL;
    const char *b = a ? strchr(a + 1, '"') : NULL;
    if (b) kl_snprintf(out, size, "%.*s", (int)(b - a - 1), a + 1);
}

/* The site features a card was learned at (anchor.pattern.site_features), or NULL. */
static const json_t *card_site_features(const kl_skill *card)
{
    return json_object_get(json_object_get(json_object_get(kl_skill_doc(card), "anchor"), "pattern"), "site_features");
}

/* A card against a candidate site, through the one forward match of the skills stage
 * (kl_skill_match_site): static conditions on the site's observables and features, speed
 * conditions at the bench shape, correctness conditions at every check shape, `requires`
 * against the transforms present. The first failing condition (else the first unknown) is
 * kept to say why. */
static kl_status match_card(const kl_skill *card, const kl_source *src, const kl_task *task, unsigned ranking,
                            const opt_cand *c, const char *const *present, unsigned npresent, card_verdict *out,
                            kl_error *err)
{
    memset(out, 0, sizeof *out);
    char kernel[128];
    unsigned line = 0;
    site_of(c, kernel, sizeof kernel, &line);
    char *features = c->features ? json_dumps(c->features, JSON_COMPACT) : NULL;
    kl_skill_site site = {kernel, line, features};
    kl_skill_match_result m;
    kl_status st = kl_skill_match_site(card, src, task, &site, NULL, present, npresent, &m, err);
    free(features);
    if (st != KL_OK) return st;
    /* A static condition on one of the rule's own features of the site the card was learned at
     * (anchor.pattern.site_features: its form, its guard, how it returns) describes that site; the
     * rule checks what it needs itself before it proposes, and the gate checks the result. Failing
     * here, it makes the card unlike this site (it speaks at half weight each), not wrong for it.
     * Ranking 4: so does its element type (`dtype`): the rule picks what depends on the type
     * itself (vector widths by element size, tensor cores only where the type has them) before it
     * proposes, and the gate judges the result, so a card measured on bf16 is evidence from
     * elsewhere on f32, not a condition shown to fail there (sgemm's smem-tile and register-tile
     * waited behind every noise step for hgemm's `dtype == "bf16"`; histogram's bytes waited so
     * for vectorize). The card's other observables (access, reduction…), speed and correctness
     * conditions and `requires` fail as ever. */
    const json_t *described = card_site_features(card);
    bool hard = m.nmissing > 0, unknown = m.requires_unknown;
    for (unsigned i = 0; i < m.nchecks; i++) {
        kl_skill_check *ck = &m.checks[i];
        if (ck->truth == KL_TRUTH_UNKNOWN) unknown = true;
        if (ck->truth != KL_TRUTH_FAILS) continue;
        char name[64];
        size_t n = strcspn(ck->predicate, " =!<>%");
        kl_snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), ck->predicate);
        if (ck->kind && !strcmp(ck->kind, "static") &&
            (json_object_get(described, name) || (ranking >= 4 && !strcmp(name, "dtype")))) {
            if (out->unlike++ == 0) kl_snprintf(out->unlike_pred, sizeof out->unlike_pred, "%s", ck->predicate);
            if (!strcmp(name, "dtype")) {
                quoted(ck->predicate, out->card_dtype, sizeof out->card_dtype);
                quoted(ck->why, out->site_dtype, sizeof out->site_dtype);
            }
            ck->truth = KL_TRUTH_HOLDS; /* not a failure of the card: counted as unlike */
            continue;
        }
        hard = true;
    }
    out->truth = hard ? KL_TRUTH_FAILS : unknown ? KL_TRUTH_UNKNOWN : KL_TRUTH_HOLDS;
    for (int pass = 0; pass < 2 && !out->predicate[0]; pass++) {
        kl_truth want = pass == 0 ? KL_TRUTH_FAILS : KL_TRUTH_UNKNOWN;
        for (unsigned i = 0; i < m.nchecks; i++) {
            if (m.checks[i].truth != want) continue;
            kl_snprintf(out->predicate, sizeof out->predicate, "%s", m.checks[i].predicate);
            kl_snprintf(out->why, sizeof out->why, "%s", m.checks[i].why);
            kl_snprintf(out->shape, sizeof out->shape, "%s", m.checks[i].shape);
            break;
        }
        if (pass == 0 && !out->predicate[0] && m.nmissing) {
            kl_snprintf(out->predicate, sizeof out->predicate, "requires %s", m.missing[0]);
            kl_snprintf(out->why, sizeof out->why, "%s is not present in this kernel", m.missing[0]);
        }
    }
    kl_skill_match_release(&m);
    return KL_OK;
}

/* The geometric mean of a card's measured gains where its walk measured the step (labels
 * "bench" and "path": the bench shape, or a shape that runs the step's path; all rows when
 * there is none), and the share of its recorded contexts where it hurt (risks). Ranking 4 adds
 * the gains its roundtrip admission measured (`admission.trials`, the card applied forward from
 * the card alone, on its own lineage and on other tasks; a left-out task's trials are taken out
 * of the card before it gets here, kl_skill_list_load_excluding): restrict's walk measured 1.15x
 * and 1.00x, its trials 1.00x and 1.02x, and a card that promised 1.07x kept sgemm's runs on
 * restrict steps while smem-tile waited. */
static void card_gain(const kl_skill *card, unsigned ranking, double *gain, double *hurt, unsigned *count)
{
    const json_t *doc = kl_skill_doc(card);
    const json_t *eff = json_object_get(doc, "effect");
    double sum = 0;
    unsigned n = 0;
    for (int pass = 0; pass < 2 && n == 0; pass++) {
        size_t i;
        json_t *e;
        json_array_foreach((json_t *)eff, i, e) {
            const char *label = json_string_value(json_object_get(e, "label"));
            if (pass == 0 && label && strcmp(label, "bench") && strcmp(label, "path")) continue;
            double s = json_number_value(json_object_get(e, "speedup"));
            if (s > 0) {
                sum += log(s);
                n++;
            }
        }
    }
    if (ranking >= 4) {
        size_t i;
        json_t *t;
        json_array_foreach(json_object_get(json_object_get(doc, "admission"), "trials"), i, t) {
            double s = json_number_value(json_object_get(t, "gain"));
            if (s > 0) {
                sum += log(s);
                n++;
            }
        }
    }
    *gain = n ? exp(sum / n) : 1.0;
    *count = n;
    size_t risks = json_array_size(json_object_get(doc, "risks"));
    size_t neff = json_array_size(eff);
    *hurt = risks + neff ? (double)risks / (double)(risks + neff) : 0;
}

/* Does card follow, in its lineage's forward order, the step that made the version (its card
 * id or its transform)? Read from the card's lineage path (docs/skill-card.md, "path"). */
static bool card_follows(const kl_skill *card, const char *prev_card, const char *prev_transform)
{
    const json_t *path = json_object_get(kl_skill_doc(card), "path");
    static const char *const keys[] = {"after", "follows", "previous"};
    for (unsigned k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(path, keys[k]), i, x) {
            const char *s = json_is_string(x) ? json_string_value(x)
                                              : json_string_value(json_object_get(x, "transform"));
            const char *id = json_is_object(x) ? json_string_value(json_object_get(x, "card")) : NULL;
            if (s && ((prev_card && *prev_card && !strcmp(s, prev_card)) ||
                      (prev_transform && *prev_transform && !strcmp(s, prev_transform))))
                return true;
            if (id && prev_card && *prev_card && !strcmp(id, prev_card)) return true;
        }
    }
    return false;
}

static bool card_admitted(const kl_skill *card)
{
    const char *s = json_string_value(json_object_get(json_object_get(kl_skill_doc(card), "admission"), "status"));
    return s && !strcmp(s, "admitted");
}

static bool params_equal(const char *cand_params, const json_t *card_params)
{
    if (!json_is_object(card_params) || json_object_size(card_params) == 0) return true;
    char *t = json_dumps(card_params, JSON_COMPACT | JSON_SORT_KEYS);
    bool same = t && !strcmp(t, cand_params);
    free(t);
    return same;
}

/* Bytes of an element type as the observables name it: bits after the letters, times the lanes
 * after an `x` ("f32" 4, "u8" 1, "bf16" 2, "f32x4" 16); 0 when the name says neither. */
static unsigned dtype_bytes(const char *name)
{
    const char *p = name;
    while (*p && (*p < '0' || *p > '9')) p++;
    char *end;
    unsigned long bits = strtoul(p, &end, 10);
    if (!*p || bits == 0 || bits % 8) return 0;
    unsigned long lanes = *end == 'x' ? strtoul(end + 1, NULL, 10) : 1;
    return lanes ? (unsigned)(bits / 8 * lanes) : 0;
}

/* Ranking 5: the card's parameters in bytes where a vector width is one of them and the card was
 * measured on another element type. A card measured with `width` 4 on f32 (16-byte loads) speaks
 * for `width` 16 on bytes, not for `width` 4 (histogram's u8 runs tried 4, then 8, then 16, each a
 * new best). 1: the same (every other parameter equal, and width × element size); 0: not; -1: the
 * comparison does not apply (no width, the same or an unknown element type). */
static int params_equal_bytes(const char *cand_params, const json_t *card_params, const card_verdict *cv)
{
    unsigned cb = dtype_bytes(cv->card_dtype), sb = dtype_bytes(cv->site_dtype);
    if (!cb || !sb || !strcmp(cv->card_dtype, cv->site_dtype) || !json_is_object(card_params) ||
        !json_is_string(json_object_get(card_params, "width")))
        return -1;
    json_t *cand = json_loads(cand_params, 0, NULL);
    if (!cand || !json_is_string(json_object_get(cand, "width"))) {
        json_decref(cand);
        return -1;
    }
    bool same = json_object_size(cand) == json_object_size(card_params);
    const char *k;
    json_t *x;
    json_object_foreach(cand, k, x) {
        if (!same) break;
        const json_t *y = json_object_get(card_params, k);
        if (!y) same = false;
        else if (!strcmp(k, "width")) {
            unsigned long wx = strtoul(json_string_value(x), NULL, 10), wy = strtoul(json_string_value(y), NULL, 10);
            same = wx && wy && wx * sb == wy * cb;
        } else same = json_equal(x, y);
    }
    json_decref(cand);
    return same;
}

/* Ranking 5: is the card of another shape of its transform than the candidate's site? A rule
 * that names its algorithm in the site feature `shape` (smem-tile: a GEMM's operand tiles, a
 * stencil's halo tile, a row tile) has one card per shape, and a card of GEMM tiles says nothing
 * of a stencil: its conditions (the reduction loop's contiguous access) describe the other
 * algorithm. Such a card neither speaks for the site nor fails there. */
static bool other_shape(const kl_skill *card, const opt_cand *c)
{
    const json_t *learned = json_object_get(card_site_features(card), "shape");
    const json_t *here = c->features ? json_object_get(c->features, "shape") : NULL;
    return learned && here && !json_equal(learned, here);
}

/* The transforms the rules catalog sees present in a version (for `requires`), into out[]
 * (strings owned by *doc). */
static unsigned present_transforms(const opt_version *ver, const kl_task *task, json_t **doc, const char **out,
                                   unsigned max)
{
    char *json = NULL;
    kl_error e = {0};
    *doc = NULL;
    if (kl_rules_list(ver->name, ver->source, strlen(ver->source), task, NULL, &json, &e) != KL_OK) return 0;
    *doc = json_loads(json, 0, NULL);
    free(json);
    unsigned n = 0;
    size_t i;
    json_t *s;
    json_array_foreach(*doc, i, s) {
        /* present, or present and refused for removal: the optimization is there all the same */
        const char *dir = json_string_value(json_object_get(s, "direction"));
        const char *refused = json_string_value(json_object_get(s, "refused"));
        const char *t = json_string_value(json_object_get(s, "transform"));
        bool present = dir && (!strcmp(dir, "present") || (!strcmp(dir, "refused") && refused && !strcmp(refused, "remove")));
        if (!present || !t) continue;
        bool had = false;
        for (unsigned k = 0; k < n && !had; k++) had = !strcmp(out[k], t);
        if (!had && n < max) out[n++] = t;
    }
    return n;
}

/* E of a proposal no card speaks for: an optimization whose conditions are all unknown,
 * ranked as if it might just pay. Below every card that paid where its conditions hold, above
 * every card whose measured gain is noise (launch-bounds at 1.00x: "this did not pay where it
 * was measured"). */
#define OPT_PRIOR_UNKNOWN OPT_PAYS
/* E of a proposal whose transform's every card fails here: the cards are not tried (their
 * evidence does not apply), the catalog's proposal stays, ranked as if it might just lose —
 * after every proposal with no evidence against it, so a budget that outlasts the evidence is
 * still spent, and the frontier does not empty while the catalog has work left. */
#define OPT_PRIOR_AGAINST (1.0 / OPT_PAYS)

/* Was card already recorded as skipped at this version and site? */
static bool skip_known(const json_t *skipped, unsigned v, const char *card, const char *site)
{
    size_t i;
    json_t *s;
    json_array_foreach((json_t *)skipped, i, s) {
        if (json_integer_value(json_object_get(s, "version")) != (json_int_t)v) continue;
        const char *c = json_string_value(json_object_get(s, "card"));
        const char *t = json_string_value(json_object_get(s, "site"));
        if (c && t && !strcmp(c, card) && !strcmp(t, site)) return true;
    }
    return false;
}

static kl_status score_skills(opt_policy_ctx *pc, const opt_version *versions, unsigned v, const kl_source *src,
                              kl_error *err)
{
    opt_version *ver = (opt_version *)&versions[v];
    const char *present[64];
    json_t *present_doc = NULL;
    unsigned npresent = present_transforms(ver, pc->task, &present_doc, present, 64);
    kl_status st = KL_OK;
    for (unsigned i = 0; i < ver->ncands; i++) {
        opt_cand *c = &ver->cands[i];
        c->evidence = 0;
        double best = -1, best_gain = 1;
        const char *best_card = NULL;
        char best_why[256] = "", fail_why[256] = "";
        unsigned ncards = 0, nfail = 0, nother = 0, best_n = 0;
        for (unsigned k = 0; k < pc->library->count; k++) {
            const kl_skill *card = pc->library->items[k];
            if (strcmp(kl_skill_transform(card), c->transform)) continue;
            if (pc->admitted_only && !card_admitted(card)) continue;
            if (pc->ranking >= 5 && other_shape(card, c)) {
                nother++;
                continue;
            }
            ncards++;
            card_verdict cv;
            st = match_card(card, src, pc->task, pc->ranking, c, present, npresent, &cv, err);
            if (st != KL_OK) break;
            if (cv.truth == KL_TRUTH_FAILS) {
                if (nfail++ == 0)
                    kl_snprintf(fail_why, sizeof fail_why, "%s: %s%s%s", kl_skill_id(card), cv.predicate,
                                cv.shape[0] ? " at " : "", cv.shape);
                if (skip_known(pc->skipped, v, kl_skill_id(card), c->site)) continue;
                json_t *s = json_object();
                json_object_set_new(s, "version", json_integer(v));
                json_object_set_new(s, "site", json_string(c->site));
                json_object_set_new(s, "transform", json_string(c->transform));
                json_object_set_new(s, "card", json_string(kl_skill_id(card)));
                json_object_set_new(s, "predicate", json_string(cv.predicate));
                if (cv.shape[0]) json_object_set_new(s, "shape", json_string(cv.shape));
                json_object_set_new(s, "why", json_string(cv.why));
                json_array_append_new(pc->skipped, s);
                continue;
            }
            double g, hurt;
            unsigned gn;
            card_gain(card, pc->ranking, &g, &hurt, &gn);
            double w = (cv.truth == KL_TRUTH_HOLDS ? 1.0 : 0.5) * (1.0 - hurt / 2) * pow(0.5, cv.unlike);
            const json_t *card_params = json_object_get(kl_skill_doc(card), "params");
            int in_bytes = pc->ranking >= 5 ? params_equal_bytes(c->params, card_params, &cv) : -1;
            bool same_params = in_bytes >= 0 ? in_bytes == 1 : params_equal(c->params, card_params);
            if (!same_params) w *= 0.8;
            double e = g >= 1 ? 1 + (g - 1) * w : g;
            bool follows = v > 0 && card_follows(card, ver->card, ver->transform);
            if (follows && g >= OPT_PAYS) e *= 1.25;
            if (e > best) {
                best = e;
                best_gain = g;
                best_n = gn;
                best_card = kl_skill_id(card);
                char unlike[200] = "";
                if (cv.unlike)
                    kl_snprintf(unlike, sizeof unlike, ", unlike the site it was learned at (%s%s)", cv.unlike_pred,
                                cv.unlike > 1 ? ", …" : "");
                kl_snprintf(best_why, sizeof best_why, "card %s (%s%s%s): gain %.2fx, %s%s%s", kl_skill_id(card),
                            kl_truth_name(cv.truth), cv.truth == KL_TRUTH_UNKNOWN ? ", ranked lower" : "", unlike, g,
                            same_params ? "its parameters" : "other parameters", follows ? ", follows the last step in its lineage" : "",
                            hurt > 0 ? ", hurt in some contexts" : "");
            }
        }
        if (st != KL_OK) break;
        c->order = (double)(opt_mix64(pc->seed ^ opt_mix64(strtoull(c->hash + 48, NULL, 16))) >> 11) * 0x1.0p-53;
        if (best_card) {
            c->expect = best;
            c->defer = best_gain < OPT_PAYS; /* its card measured noise, or a loss */
            c->evidence = best_n;
            kl_snprintf(c->card, sizeof c->card, "%s", best_card);
            kl_snprintf(c->why, sizeof c->why, "%s", best_why);
        } else if (ncards && nfail == ncards) {
            c->expect = OPT_PRIOR_AGAINST;
            c->defer = true;
            kl_snprintf(c->why, sizeof c->why, "every card of %s fails here (%u; %s): the catalog's proposal, tried last",
                        c->transform, ncards, fail_why);
        } else if (nother) {
            c->expect = OPT_PRIOR_UNKNOWN;
            kl_snprintf(c->why, sizeof c->why,
                        "no card of %s for a %s site (its %u card(s) are of another shape): unknown, ranked as if it "
                        "just paid (%.2fx)",
                        c->transform, json_string_value(json_object_get(c->features, "shape")) ?: "such", nother,
                        OPT_PRIOR_UNKNOWN);
        } else {
            c->expect = OPT_PRIOR_UNKNOWN;
            kl_snprintf(c->why, sizeof c->why, "no card of %s: unknown, ranked as if it just paid (%.2fx)", c->transform,
                        OPT_PRIOR_UNKNOWN);
        }
    }
    json_decref(present_doc);
    return st;
}

/* ---- memory -------------------------------------------------------------------------------- */

/* Jaccard similarity of two flat feature objects over their name=value pairs. */
static double jaccard(const json_t *a, const json_t *b)
{
    size_t inter = 0, uni = 0;
    const char *k;
    json_t *x;
    json_object_foreach((json_t *)a, k, x) {
        json_t *y = json_object_get(b, k);
        uni++;
        if (y && json_equal(x, y)) inter++;
    }
    json_object_foreach((json_t *)b, k, x) {
        json_t *y = json_object_get(a, k);
        if (!y || !json_equal(x, y)) uni++;
    }
    return uni ? (double)inter / (double)uni : 0;
}

#define MEMORY_K 5

static kl_status score_memory(opt_policy_ctx *pc, const opt_version *versions, unsigned v, const kl_model *m,
                              kl_error *err)
{
    (void)err;
    opt_version *ver = (opt_version *)&versions[v];
    for (unsigned i = 0; i < ver->ncands; i++) {
        opt_cand *c = &ver->cands[i];
        c->order = (double)(opt_mix64(pc->seed ^ opt_mix64(strtoull(c->hash + 48, NULL, 16))) >> 11) * 0x1.0p-53;
        json_t *feat = features_with(m, c);
        double sim[MEMORY_K] = {0}, lg[MEMORY_K] = {0};
        unsigned n = 0, seen = 0;
        size_t r;
        json_t *rec;
        json_array_foreach(pc->memory, r, rec) {
            if (strcmp(json_string_value(json_object_get(rec, "transform")) ?: "", c->transform)) continue;
            seen++;
            double s = jaccard(feat, json_object_get(rec, "features"));
            const char *rp = json_string_value(json_object_get(rec, "params"));
            if (rp && !strcmp(rp, c->params)) s += 0.25;
            if (s <= 0) continue;
            double g = json_is_true(json_object_get(rec, "pass")) ? json_number_value(json_object_get(rec, "gain")) : 0.5;
            if (g <= 0) g = 0.5;
            /* keep the MEMORY_K most similar, the earlier record first on ties */
            unsigned at = n < MEMORY_K ? n : MEMORY_K;
            while (at > 0 && sim[at - 1] < s) at--;
            if (at >= MEMORY_K) continue;
            for (unsigned q = (n < MEMORY_K ? n : MEMORY_K - 1); q > at; q--) sim[q] = sim[q - 1], lg[q] = lg[q - 1];
            sim[at] = s;
            lg[at] = log(g);
            if (n < MEMORY_K) n++;
        }
        json_decref(feat);
        if (!n) {
            c->expect = 1.0;
            kl_snprintf(c->why, sizeof c->why, "memory: no earlier attempt of %s%s", c->transform,
                        seen ? " on a similar site" : "");
            continue;
        }
        double sw = 0, sl = 0;
        for (unsigned q = 0; q < n; q++) sw += sim[q], sl += sim[q] * lg[q];
        c->expect = exp(sl / sw);
        kl_snprintf(c->why, sizeof c->why, "memory: %u similar attempt(s) of %s (similarity %.2f-%.2f), weighted gain %.2fx",
                    n, c->transform, sim[n - 1], sim[0], c->expect);
    }
    return KL_OK;
}

static bool memory_visit(const char *key, const char *json, void *user)
{
    (void)key;
    json_t **ctx = user; /* [0] out array, [1] {task, leave_out} */
    json_t *d = json_loads(json, 0, NULL);
    if (!d) return true;
    const char *policy = json_string_value(json_object_get(d, "policy"));
    const char *state = json_string_value(json_object_get(d, "state"));
    const char *task = json_string_value(json_object_get(d, "task"));
    const char *skip1 = json_string_value(json_object_get(ctx[1], "task"));
    const char *skip2 = json_string_value(json_object_get(ctx[1], "leave_out"));
    json_int_t budget = json_integer_value(json_object_get(ctx[1], "budget"));
    const json_t *only = json_object_get(ctx[1], "tasks");
    bool listed = !only;
    size_t q;
    json_t *name;
    json_array_foreach((json_t *)only, q, name) listed |= task && !strcmp(json_string_value(name), task);
    if (policy && !strcmp(policy, "blind") && state && !strcmp(state, "done") && task && listed &&
        (!budget || json_integer_value(json_object_get(d, "budget")) == budget) &&
        !(skip1 && !strcmp(task, skip1)) && !(skip2 && !strcmp(task, skip2))) {
        size_t i;
        json_t *r;
        json_array_foreach(json_object_get(d, "rounds"), i, r) {
            json_t *c = json_object_get(r, "candidate"), *j = json_object_get(r, "judgement");
            json_t *o = json_object();
            json_object_set_new(o, "task", json_string(task));
            json_object_set(o, "transform", json_object_get(c, "transform"));
            char *p = json_dumps(json_object_get(c, "params"), JSON_COMPACT | JSON_SORT_KEYS);
            json_object_set_new(o, "params", json_string(p ? p : "{}"));
            free(p);
            json_object_set(o, "features", json_object_get(c, "observed") ?: json_object());
            bool pass = json_is_true(json_object_get(j, "pass"));
            json_object_set_new(o, "pass", json_boolean(pass));
            if (pass && json_is_number(json_object_get(j, "speedup")))
                json_object_set(o, "gain", json_object_get(j, "speedup"));
            if (!pass) json_object_set(o, "stage", json_object_get(j, "stage"));
            json_array_append_new(ctx[0], o);
        }
    }
    json_decref(d);
    return true;
}

kl_status kl_optimize_memory_json(kl_store *store, const char *task_name, const char *leave_out, unsigned budget,
                                  const char *const *tasks, char **json, kl_error *err)
{
    *json = NULL;
    json_t *ctx[2] = {json_array(), json_object()};
    if (task_name) json_object_set_new(ctx[1], "task", json_string(task_name));
    if (leave_out) json_object_set_new(ctx[1], "leave_out", json_string(leave_out));
    if (budget) json_object_set_new(ctx[1], "budget", json_integer(budget));
    if (tasks) {
        json_t *a = json_array();
        for (const char *const *t = tasks; *t; t++) json_array_append_new(a, json_string(*t));
        json_object_set_new(ctx[1], "tasks", a);
    }
    kl_status st = kl_store_each(store, "optimize", NULL, memory_visit, ctx, err);
    if (st == KL_OK) {
        *json = json_dumps(ctx[0], JSON_COMPACT | JSON_SORT_KEYS);
        if (!*json) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    json_decref(ctx[0]);
    json_decref(ctx[1]);
    return st;
}

/* ---- blind ------------------------------------------------------------------------------- */

static void score_blind(opt_policy_ctx *pc, const opt_version *versions, unsigned v)
{
    opt_version *ver = (opt_version *)&versions[v];
    for (unsigned i = 0; i < ver->ncands; i++) {
        opt_cand *c = &ver->cands[i];
        c->expect = 1.0;
        c->order = (double)(opt_mix64(pc->seed ^ opt_mix64(strtoull(c->hash + 48, NULL, 16))) >> 11) * 0x1.0p-53;
        kl_snprintf(c->why, sizeof c->why, "blind: seeded random order");
    }
}

kl_status opt_policy_score(opt_policy_ctx *pc, const opt_version *versions, unsigned nversions, unsigned v,
                           kl_error *err)
{
    (void)nversions;
    if (pc->policy == KL_POLICY_BLIND) {
        score_blind(pc, versions, v);
        return KL_OK;
    }
    kl_source *src = NULL;
    kl_model *m = NULL;
    kl_error e = {0};
    if (kl_source_parse_text(versions[v].name, versions[v].source, strlen(versions[v].source), &src, &e) == KL_OK)
        kl_model_build(src, &m, &e);
    kl_status st = pc->policy == KL_POLICY_SKILLS ? score_skills(pc, versions, v, src, err)
                                                  : score_memory(pc, versions, v, m, err);
    kl_model_free(m);
    kl_source_free(src);
    return st;
}
