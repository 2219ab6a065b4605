/*
 * Roundtrip admission (docs/skill-card.md, "Admission"): each card applied forward, from the card
 * alone, by a rewriter — to the simpler version of its own lineage (where the walk took the step)
 * and, where its conditions hold, to the naive kernels of other tasks — and judged by the gate
 * against the version it was applied to. A card is admitted when a trial reproduces its gain.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/skills.h"
#include "lineage/lineage_int.h"

/* One trial to judge: a candidate text against its base, on a task. */
typedef struct trial {
    unsigned card;           /* index into the library */
    const kl_task *task;     /* borrowed */
    kl_task *path_task;      /* owned: the lineage's path shape, when the step was measured there */
    char *cand, *base;       /* owned texts */
    char site[160];
    double recorded;         /* the card's gain in that context (<= 0: none) */
    bool own;
    json_t *result;          /* the trial record (owned) once judged or decided */
} trial;

typedef struct admit {
    const kl_admit_options *o;
    kl_skill_list lib;
    trial *t;
    unsigned n, cap;
    kl_error *err;
} admit;

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* A site of kl_rules_list's answer by the way the transform is found there: "present" or
 * "applicable", a site the rules refuse to rewrite included ("refused": "remove" is a present
 * optimization, "apply" a site of the transform all the same); "" for anything else. */
static const char *site_way(const json_t *s)
{
    const char *dir = json_string_value(json_object_get(s, "direction"));
    const char *refused = json_string_value(json_object_get(s, "refused"));
    if (!dir) return "";
    if (strcmp(dir, "refused") != 0) return dir;
    return !refused ? "" : !strcmp(refused, "remove") ? "present" : !strcmp(refused, "apply") ? "applicable" : "";
}

static trial *new_trial(admit *a, unsigned card)
{
    if (a->n == a->cap) {
        unsigned cap = a->cap ? a->cap * 2 : 64;
        trial *t = realloc(a->t, cap * sizeof *t);
        if (!t) return NULL;
        a->t = t;
        a->cap = cap;
    }
    trial *t = &a->t[a->n++];
    memset(t, 0, sizeof *t);
    t->card = card;
    return t;
}

static json_t *record(const char *task, const char *site, const char *verdict, const char *detail, bool own)
{
    json_t *r = json_object();
    json_object_set_new(r, "task", json_string(task));
    json_object_set_new(r, "site", json_string(site));
    json_object_set_new(r, "verdict", json_string(verdict));
    if (detail && *detail) json_object_set_new(r, "detail", json_string(detail));
    json_object_set_new(r, "own", json_boolean(own));
    return r;
}

static const kl_task *task_named(const admit *a, const char *name)
{
    for (unsigned i = 0; i < a->o->ntasks; i++)
        if (!strcmp(a->o->tasks[i]->name, name)) return a->o->tasks[i];
    return NULL;
}

/* The card's recorded gain in a lineage (its bench or path effect there), else its best. */
static double recorded_gain(const json_t *card, const char *lineage)
{
    double best = -1, mine = -1;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(card, "effect"), i, e) {
        if (!strcmp(str(e, "label"), "probe")) continue;
        double g = json_number_value(json_object_get(e, "speedup"));
        if (g > best) best = g;
        if (lineage && !strcmp(str(e, "lineage"), lineage) && g > mine) mine = g;
    }
    return mine > 0 ? mine : best;
}

/* Apply the card to text with the rewriter; *out the candidate at `site` (or the first when site
 * is NULL or not among them), *why the rewriter's refusal when there is none. */
static kl_status apply_card(admit *a, const kl_skill *card, const kl_task *task, const char *text, const char *site,
                            char **out, char *got_site, size_t got_size, char *why, size_t why_size)
{
    *out = NULL;
    why[0] = got_site[0] = '\0';
    char *cj = kl_skill_to_json(card);
    if (!cj) return kl_error_set(a->err, KL_ERR_NOMEM, "out of memory");
    kl_rewrite_request req = {0};
    req.kind = KL_REQ_APPLY;
    req.source = text;
    req.source_name = "admit.cu";
    req.task = task;
    req.skill_json = cj;
    req.transform = kl_skill_transform(card);
    kl_candidates c = {0};
    kl_status st = kl_rewriter_propose(a->o->rewriter, &req, &c, a->err);
    free(cj);
    if (st != KL_OK) return st;
    int pick = -1;
    for (unsigned i = 0; i < c.count && pick < 0; i++)
        if (site && !strcmp(c.items[i].site, site)) pick = (int)i;
    if (pick < 0 && c.count) pick = 0;
    if (pick >= 0) {
        *out = kl_strdup(c.items[pick].source);
        kl_snprintf(got_site, got_size, "%s", c.items[pick].site);
    } else if (c.nrejected) {
        if (*c.rejected[0].site)
            kl_snprintf(why, why_size, "%s: %s", c.rejected[0].site, c.rejected[0].reason);
        else
            kl_snprintf(why, why_size, "%s", c.rejected[0].reason);
    } else {
        kl_snprintf(why, why_size, "the rewriter proposed nothing");
    }
    kl_candidates_free(&c);
    return KL_OK;
}

/* The own trial: the card applied to the simpler version of a lineage it came from. */
static kl_status own_trial(admit *a, unsigned ci)
{
    const kl_skill *card = a->lib.items[ci];
    const json_t *doc = kl_skill_doc(card);
    size_t i;
    json_t *l;
    json_array_foreach(json_object_get(json_object_get(doc, "path"), "lineages"), i, l) {
        const kl_task *task = task_named(a, str(l, "task"));
        if (!task) continue;
        char *ltext = NULL;
        kl_status st = kl_store_get(a->o->store, "lineage", str(l, "lineage"), &ltext, a->err);
        if (st == KL_ERR_NOT_FOUND) {
            kl_error_clear(a->err);
            continue;
        }
        if (st != KL_OK) return st;
        json_t *ld = json_loads(ltext, 0, NULL);
        free(ltext);
        json_t *steps = json_object_get(ld, "steps");
        json_int_t n = (json_int_t)json_array_size(steps), pos = json_integer_value(json_object_get(l, "step"));
        json_t *step = pos >= 1 && pos <= n ? json_array_get(steps, (size_t)(n - pos)) : NULL;
        if (!step) {
            json_decref(ld);
            continue;
        }
        const json_t *vs = json_object_get(ld, "versions");
        const char *child = str(json_array_get(vs, (size_t)json_integer_value(json_object_get(step, "to"))), "source");
        const char *fsite = str(json_object_get(json_object_get(doc, "anchor"), "forward"), "site");
        char *cand = NULL, got[160], why[400];
        st = apply_card(a, card, task, child, *fsite ? fsite : NULL, &cand, got, sizeof got, why, sizeof why);
        if (st != KL_OK) {
            json_decref(ld);
            return st;
        }
        trial *t = new_trial(a, ci);
        if (!t) {
            free(cand);
            json_decref(ld);
            return kl_error_set(a->err, KL_ERR_NOMEM, "out of memory");
        }
        t->task = task;
        t->own = true;
        t->recorded = recorded_gain(doc, str(l, "lineage"));
        kl_snprintf(t->site, sizeof t->site, "%s", cand ? got : fsite);
        if (!cand) {
            char d[500];
            kl_snprintf(d, sizeof d, "not applied to its own lineage's simpler version: %s", why);
            t->result = record(task->name, t->site, "failed", d, true);
        } else {
            t->cand = cand;
            t->base = kl_strdup(child);
            json_t *shape = json_object_get(step, "shape");
            if (json_is_object(shape)) {
                /* the step was measured where its code runs: so is the trial */
                char *tdir = NULL, *dir = NULL;
                if (a->o->probe_dir) {
                    dir = kl_strdup(a->o->probe_dir);
                } else {
                    char *cache = kl_cache_dir();
                    dir = cache ? kl_path_join(cache, "probe") : NULL;
                    free(cache);
                }
                if (dir && kl_probe_task_dir(task, shape, true, dir, &tdir, a->err) == KL_OK)
                    (void)kl_task_load(tdir, &t->path_task, a->err);
                kl_error_clear(a->err);
                free(tdir), free(dir);
            }
        }
        json_decref(ld);
        return KL_OK; /* one own trial per card */
    }
    return KL_OK;
}

/* Trials on other tasks' naive kernels, where the card's conditions hold at a site. */
static kl_status other_trials(admit *a, unsigned ci)
{
    const kl_skill *card = a->lib.items[ci];
    const char *own = str(json_object_get(kl_skill_doc(card), "evidence"), "task");
    unsigned made = 0;
    kl_status st = KL_OK;
    for (unsigned k = 0; k < a->o->ntasks && made < a->o->max_other && st == KL_OK; k++) {
        const kl_task *task = a->o->tasks[k];
        if (!task->naive || strstr(own, task->name)) continue; /* a task the card came from */
        char *path = kl_task_path(task, task->naive), *text = NULL, *sites_json = NULL;
        kl_source *src = NULL;
        json_t *sites = NULL;
        st = kl_file_read(path, KL_SOURCE_MAX, &text, NULL, a->err);
        free(path);
        if (st == KL_OK) st = kl_source_parse_text(task->naive, text, strlen(text), &src, a->err);
        if (st == KL_OK) st = kl_rules_list(task->naive, text, strlen(text), task, NULL, &sites_json, a->err);
        if (st == KL_OK) sites = json_loads(sites_json, 0, NULL);
        /* the transforms the kernel has (for requires) */
        const char *present[64];
        unsigned np = 0;
        size_t i;
        json_t *s;
        json_array_foreach(sites, i, s) if (!strcmp(site_way(s), "present") && np < 64) present[np++] = str(s, "transform");
        char first_why[400] = "", first_site[160] = "";
        bool tried = false;
        json_array_foreach(sites, i, s) {
            if (st != KL_OK || tried) break;
            if (strcmp(site_way(s), "applicable") || strcmp(str(s, "transform"), kl_skill_transform(card))) continue;
            char *feat = json_dumps(json_object_get(s, "features"), JSON_COMPACT);
            kl_skill_site site = {str(s, "kernel"), (unsigned)json_integer_value(json_object_get(s, "line")), feat};
            kl_skill_match_result r;
            st = kl_skill_match_site(card, src, task, &site, NULL, present, np, &r, a->err);
            free(feat);
            if (st != KL_OK) break;
            if (r.truth != KL_TRUTH_HOLDS) {
                if (!first_why[0]) {
                    kl_snprintf(first_site, sizeof first_site, "%s", str(s, "site"));
                    for (unsigned c = 0; c < r.nchecks && !first_why[0]; c++)
                        if (r.checks[c].truth != KL_TRUTH_HOLDS)
                            kl_snprintf(first_why, sizeof first_why, "%s %s%s%s (%s)", r.checks[c].predicate,
                                        kl_truth_name(r.checks[c].truth), r.checks[c].shape[0] ? " at " : "",
                                        r.checks[c].shape, r.checks[c].why);
                    if (!first_why[0] && r.nmissing) kl_snprintf(first_why, sizeof first_why, "needs %s first", r.missing[0]);
                    if (!first_why[0]) kl_snprintf(first_why, sizeof first_why, "a required transform is not known");
                }
                kl_skill_match_release(&r);
                continue;
            }
            kl_skill_match_release(&r);
            char *cand = NULL, got[160], why[400];
            st = apply_card(a, card, task, text, str(s, "site"), &cand, got, sizeof got, why, sizeof why);
            if (st != KL_OK) break;
            trial *t = new_trial(a, ci);
            if (!t) {
                free(cand);
                st = kl_error_set(a->err, KL_ERR_NOMEM, "out of memory");
                break;
            }
            t->task = task;
            t->recorded = recorded_gain(kl_skill_doc(card), NULL);
            kl_snprintf(t->site, sizeof t->site, "%s", cand ? got : str(s, "site"));
            if (!cand) {
                char d[500];
                kl_snprintf(d, sizeof d, "its conditions hold, the rewrite does not apply: %s", why);
                t->result = record(task->name, t->site, "failed", d, false);
            } else {
                t->cand = cand;
                t->base = kl_strdup(text);
            }
            tried = true;
            made++;
        }
        if (st == KL_OK && !tried) {
            /* why not: on the record, without a judgement */
            trial *t = new_trial(a, ci);
            if (!t) {
                st = kl_error_set(a->err, KL_ERR_NOMEM, "out of memory");
            } else {
                t->task = task;
                kl_snprintf(t->site, sizeof t->site, "%s", first_site);
                t->result = record(task->name, first_site, "not-applicable",
                                   first_why[0] ? first_why : "no site where the rules apply it", false);
            }
        }
        json_decref(sites);
        free(sites_json);
        kl_source_free(src);
        free(text);
    }
    return st;
}

static void prepare_trials(admit *a)
{
    /* compile each task's candidates together first */
    if (a->o->prepare)
        for (unsigned k = 0; k < a->o->ntasks; k++) {
            const char **names = calloc(a->n + 1, sizeof *names), **texts = calloc(a->n + 1, sizeof *texts);
            char (*buf)[96] = calloc(a->n + 1, sizeof *buf);
            unsigned m = 0;
            for (unsigned i = 0; names && texts && buf && i < a->n; i++) {
                if (a->t[i].result || a->t[i].task != a->o->tasks[k] || a->t[i].path_task) continue;
                char hex[KL_HASH_HEX];
                kl_hash_hex(a->t[i].cand, strlen(a->t[i].cand), hex);
                kl_snprintf(buf[m], sizeof buf[m], "%s/admit-%.12s.cu", a->o->tasks[k]->name, hex);
                names[m] = buf[m];
                texts[m++] = a->t[i].cand;
            }
            kl_error perr = {0};
            if (m) (void)a->o->prepare(a->o->judge_user, a->o->tasks[k], m, names, texts, &perr);
            free(names), free(texts), free(buf);
        }
}

/* Judge the trials of one card. */
static kl_status judge_trials(admit *a, unsigned card)
{
    for (unsigned i = 0; i < a->n; i++) {
        trial *t = &a->t[i];
        if (t->result || t->card != card) continue;
        if (a->o->interrupt && *a->o->interrupt)
            return kl_error_set(a->err, KL_ERR_INTERRUPTED, "interrupted while judging the trials");
        const kl_task *task = t->path_task ? t->path_task : t->task;
        char cname[96], bname[96], hex[KL_HASH_HEX];
        kl_hash_hex(t->cand, strlen(t->cand), hex);
        kl_snprintf(cname, sizeof cname, "%s/admit-%.12s.cu", t->task->name, hex);
        kl_hash_hex(t->base, strlen(t->base), hex);
        kl_snprintf(bname, sizeof bname, "%s/lineage-%.12s.cu", t->task->name, hex);
        kl_judgement j;
        memset(&j, 0, sizeof j);
        j.speedup = j.cand_ms = j.base_ms = -1;
        kl_status st = a->o->judge(a->o->judge_user, task, cname, t->cand, bname, t->base,
                                   KL_JUDGE_PROFILE | KL_JUDGE_BENCH_VS_BASELINE, &j, a->err);
        if (st != KL_OK) return st;
        if (j.unmeasured)
            return kl_error_set(a->err, KL_ERR_UNMEASURED, "%s on %s: no recorded verdict: %s",
                                kl_skill_id(a->lib.items[t->card]), t->task->name, j.reason);
        if (!j.pass) {
            char d[600];
            kl_snprintf(d, sizeof d, "%s: %s", j.stage, j.reason);
            t->result = record(t->task->name, t->site, "failed", d, t->own);
        } else {
            double gain = j.speedup; /* time(base) / time(candidate): what applying it gave */
            t->result = record(t->task->name, t->site, kl_admission_verdict(gain, t->recorded), NULL, t->own);
            if (gain > 0) json_object_set_new(t->result, "gain", json_real(gain));
        }
        if (*j.key) json_object_set_new(t->result, "key", json_string(j.key));
        if (a->o->progress)
            a->o->progress(a->o->progress_user, kl_skill_id(a->lib.items[t->card]), t->task->name,
                           str(t->result, "verdict"), j.speedup);
    }
    return KL_OK;
}

kl_status kl_lineage_admit(const kl_admit_options *o, char **report_json, kl_error *err)
{
    if (report_json) *report_json = NULL;
    if (!o || !o->store || !o->rewriter || !o->judge)
        return kl_error_set(err, KL_ERR_INVALID, "admit: a store, a rewriter and a judge are required");
    admit a = {o, KL_SKILL_LIST_INIT, NULL, 0, 0, err};
    kl_status st = KL_OK;
    json_t *report = json_object(), *cards = json_array();
    KL_TRY(kl_skill_list_load(o->store, &a.lib, err));
    double floor = o->min_gain > 0 ? o->min_gain : 1.02;
    for (unsigned ci = 0; ci < a.lib.count; ci++) {
        const kl_skill *card = a.lib.items[ci];
        if (o->only_id && strcmp(o->only_id, kl_skill_id(card)) != 0) continue;
        double best = recorded_gain(kl_skill_doc(card), NULL);
        if (best < floor) {
            trial *t = new_trial(&a, ci);
            if (!t) {
                st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
                goto cleanup;
            }
            char d[200];
            kl_snprintf(d, sizeof d, "its recorded gain (%.3fx) is within noise (below %.2fx): not tried", best, floor);
            t->result = record(str(json_object_get(kl_skill_doc(card), "evidence"), "task"), "", "not-applicable", d, true);
            continue;
        }
        KL_TRY(own_trial(&a, ci));
        KL_TRY(other_trials(&a, ci));
    }
    prepare_trials(&a);
    /* each card judged, then its admission stored beside it (an interrupted run keeps what it
     * stored; run again, the verdicts come back from the store) */
    char stamp[32];
    kl_utc_stamp(stamp, sizeof stamp);
    unsigned counts[3] = {0, 0, 0};
    for (unsigned ci = 0; ci < a.lib.count; ci++) {
        const kl_skill *card = a.lib.items[ci];
        if (o->only_id && strcmp(o->only_id, kl_skill_id(card)) != 0) continue;
        KL_TRY(judge_trials(&a, ci));
        json_t *adm = json_object(), *trials = json_array();
        for (unsigned i = 0; i < a.n; i++)
            if (a.t[i].card == ci && a.t[i].result) {
                if (a.t[i].recorded > 0) json_object_set_new(a.t[i].result, "recorded", json_real(a.t[i].recorded));
                json_array_append(trials, a.t[i].result);
            }
        json_object_set_new(adm, "status", json_string("untried")); /* recomputed from the trials */
        json_object_set_new(adm, "tolerance", json_real(KL_ADMIT_TOLERANCE));
        json_object_set_new(adm, "date", json_string(stamp));
        json_object_set_new(adm, "trials", trials);
        char *text = json_dumps(adm, JSON_COMPACT | JSON_REAL_PRECISION(15));
        json_decref(adm);
        if (!text) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        st = kl_skill_admission_put(o->store, kl_skill_id(card), text, err);
        free(text);
        if (st != KL_OK) goto cleanup;
        kl_skill *stored = NULL;
        KL_TRY(kl_skill_get(o->store, kl_skill_id(card), &stored, err));
        json_t *sa = json_object_get(kl_skill_doc(stored), "admission");
        const char *status = str(sa, "status");
        counts[!strcmp(status, "admitted") ? 0 : !strcmp(status, "rejected") ? 1 : 2]++;
        json_t *row = json_object();
        json_object_set_new(row, "id", json_string(kl_skill_id(card)));
        json_object_set_new(row, "transform", json_string(kl_skill_transform(card)));
        json_object_set_new(row, "task", json_string(str(json_object_get(kl_skill_doc(card), "evidence"), "task")));
        json_object_set(row, "admission", sa);
        json_array_append_new(cards, row);
        kl_skill_free(stored);
    }
    json_object_set_new(report, "cards", cards);
    cards = NULL;
    json_object_set_new(report, "admitted", json_integer(counts[0]));
    json_object_set_new(report, "rejected", json_integer(counts[1]));
    json_object_set_new(report, "untried", json_integer(counts[2]));
    if (report_json) {
        *report_json = json_dumps(report, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
        if (!*report_json) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
cleanup:
    for (unsigned i = 0; i < a.n; i++) {
        free(a.t[i].cand), free(a.t[i].base);
        kl_task_free(a.t[i].path_task);
        json_decref(a.t[i].result);
    }
    free(a.t);
    kl_skill_list_release(&a.lib);
    json_decref(report);
    json_decref(cards);
    return st;
}
