/* From a lineage document: the Markdown table, and one skill card per admitted step. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/skills.h"
#include "lineage/lineage_int.h"

#define HUNK_MAX_LINES 30

typedef struct lines {
    const char **start;
    size_t *len;
    size_t n;
} lines;

static void split(const char *t, lines *l)
{
    size_t cap = 64;
    l->n = 0;
    l->start = malloc(cap * sizeof *l->start);
    l->len = malloc(cap * sizeof *l->len);
    if (!l->start || !l->len) {
        free(l->start), free(l->len);
        l->start = NULL, l->len = NULL;
        return;
    }
    const char *p = t;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (l->n == cap) {
            cap *= 2;
            const char **s2 = realloc(l->start, cap * sizeof *s2);
            size_t *l2 = s2 ? realloc(l->len, cap * sizeof *l2) : NULL;
            if (!s2 || !l2) {
                if (s2) l->start = s2;
                return;
            }
            l->start = s2, l->len = l2;
        }
        l->start[l->n] = p;
        l->len[l->n++] = n;
        p += n + (e ? 1 : 0);
    }
}

static bool line_eq(const lines *a, size_t i, const lines *b, size_t j)
{
    return a->len[i] == b->len[j] && !memcmp(a->start[i], b->start[j], a->len[i]);
}

static char *join(const lines *l, size_t from, size_t to)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    size_t shown = 0;
    for (size_t i = from; i < to && i < l->n; i++) {
        if (shown++ == HUNK_MAX_LINES) {
            kl_strbuf_addf(&sb, "… (%zu more lines)\n", to - i);
            break;
        }
        kl_strbuf_add(&sb, l->start[i], l->len[i]);
        kl_strbuf_addc(&sb, '\n');
    }
    return kl_strbuf_detach(&sb, NULL);
}

void kl_text_hunk(const char *before, const char *after, char **hb, char **ha, unsigned *line)
{
    lines a = {0}, b = {0};
    split(before, &a);
    split(after, &b);
    *hb = *ha = NULL;
    *line = 0;
    if (!a.start || !b.start) goto cleanup;
    size_t p = 0;
    while (p < a.n && p < b.n && line_eq(&a, p, &b, p)) p++;
    size_t s = 0;
    while (s < a.n - p && s < b.n - p && line_eq(&a, a.n - 1 - s, &b, b.n - 1 - s)) s++;
    size_t from = p > 0 ? p - 1 : 0; /* one line of context */
    *hb = join(&a, from, a.n - s + (s > 0 ? 1 : 0));
    *ha = join(&b, from, b.n - s + (s > 0 ? 1 : 0));
    *line = (unsigned)from + 1;
cleanup:
    free(a.start), free(a.len), free(b.start), free(b.len);
}

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static double num(const json_t *o, const char *k, double dflt)
{
    json_t *v = json_object_get(o, k);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

char *kl_lineage_markdown(const char *doc_json)
{
    json_t *doc = json_loads(doc_json, 0, NULL);
    if (!doc) return NULL;
    kl_strbuf sb = KL_STRBUF_INIT;
    json_t *steps = json_object_get(doc, "steps");
    size_t n = json_array_size(steps);
    kl_strbuf_addf(&sb, "### %s\n\n", str(doc, "task"));
    kl_strbuf_addf(&sb, "Expert `%s`, rewriter `%s`, %zu step(s) (%s).\n\n", str(doc, "expert"), str(doc, "rewriter"), n,
                   json_object_get(doc, "stop_reason") ? str(doc, "stop_reason") : str(doc, "state"));
    kl_strbuf_adds(&sb, "| step | transform | site | gain | time after (ms) |\n| --- | --- | --- | --- | --- |\n");
    double total = 1;
    bool total_known = true;
    /* Root to expert: the last step of the walk is the first forward step. */
    for (size_t k = n; k-- > 0;) {
        json_t *s = json_array_get(steps, k);
        double sp = num(s, "speedup", -1); /* t_parent / t_child, measured in the walk */
        char gain[32] = "?";
        if (sp > 0) {
            kl_snprintf(gain, sizeof gain, "%.2fx", 1.0 / sp);
            total *= 1.0 / sp;
        } else {
            total_known = false;
        }
        char after[32] = "?";
        if (num(s, "base_ms", -1) > 0) kl_snprintf(after, sizeof after, "%.4f", num(s, "base_ms", -1));
        kl_strbuf_addf(&sb, "| %zu | %s | `%s` | %s | %s |\n", n - k, str(s, "transform"), str(s, "site"), gain, after);
    }
    if (total_known && n) kl_strbuf_addf(&sb, "\nRoot to expert, product of the step gains: %.2fx.\n", total);
    json_t *rn = json_object_get(doc, "root_vs_naive");
    if (rn && num(rn, "speedup", -1) > 0)
        kl_strbuf_addf(&sb, "The root takes %.2fx the naive kernel's time (same-run ratio).\n",
                       1.0 / num(rn, "speedup", -1));
    size_t nrej = json_array_size(json_object_get(doc, "rejected"));
    kl_strbuf_addf(&sb, "%zu proposal(s) rejected along the way (kept as evidence).\n", nrej);
    json_decref(doc);
    return kl_strbuf_detach(&sb, NULL);
}

/* ---- cards ---------------------------------------------------------------------------- */

/* Is s a whole word of text (an identifier the kernel uses)? */
static bool word_in(const char *text, const char *s)
{
    size_t n = strlen(s);
    if (!n || !text) return false;
    for (const char *p = strstr(text, s); p; p = strstr(p + 1, s)) {
        bool left = p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        bool right = !(isalnum((unsigned char)p[n]) || p[n] == '_');
        if (left && right) return true;
    }
    return false;
}

/* text with its comments blanked out (string literals kept as they are); free() it */
static char *without_comments(const char *text)
{
    char *out = kl_strdup(text ? text : "");
    for (char *p = out; *p; p++) {
        if (*p == '"' || *p == '\'') {
            char q = *p;
            for (p++; *p && *p != q; p++)
                if (*p == '\\' && p[1]) p++;
            if (!*p) break;
        } else if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') *p++ = ' ';
            if (!*p) break;
        } else if (p[0] == '/' && p[1] == '*') {
            char *e = strstr(p + 2, "*/");
            char *end = e ? e + 2 : p + strlen(p);
            for (; p < end; p++)
                if (*p != '\n') *p = ' ';
            p--;
        }
    }
    return out;
}

/* A feature whose value is a name the kernel chose (a loop variable, an array, a helper, a
 * constant) says where the site is, not when the step is valid: it stays in the anchor and is
 * neither a condition nor part of the card's identity, so that the same step found under other
 * names merges into one card. Type names and other keywords are not names. */
static bool names_an_identifier(const json_t *v, const char *source)
{
    static const char *const keywords[] = {"float", "double", "int", "unsigned", "size_t", "half", "char", "if",
                                           "for", "while", "bool", "void", "long", "short", NULL};
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) if (!names_an_identifier(e, source)) return false;
        return json_array_size(v) > 0;
    }
    if (!json_is_string(v)) return false;
    const char *s = json_string_value(v);
    if (!*s || !(isalpha((unsigned char)*s) || *s == '_')) return false;
    for (const char *p = s; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_')) return false;
    for (const char *const *k = keywords; *k; k++)
        if (!strcmp(s, *k)) return false;
    return word_in(source, s);
}

/* A list of per-item records (restrict's pointers, each with its type and loads): a description
 * of this kernel's parameters, not a condition. */
static bool is_record_list(const json_t *v)
{
    return json_is_array(v) && json_array_size(v) > 0 && json_is_object(json_array_get(v, 0));
}

/* The site features that describe when the step applies: every feature but the names and the
 * per-item record lists. */
static json_t *condition_features(const json_t *features, const char *source)
{
    json_t *out = json_object();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)features, k, v) if (!names_an_identifier(v, source) && !is_record_list(v))
        json_object_set(out, k, v);
    return out;
}

static json_t *static_preconditions(const json_t *features, const char *where)
{
    json_t *out = json_array();
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)features, k, v) {
        char pred[256];
        if (json_is_string(v))
            kl_snprintf(pred, sizeof pred, "%s == \"%s\"", k, json_string_value(v));
        else if (json_is_integer(v))
            kl_snprintf(pred, sizeof pred, "%s == %lld", k, (long long)json_integer_value(v));
        else if (json_is_boolean(v))
            kl_snprintf(pred, sizeof pred, "%s == %s", k, json_is_true(v) ? "true" : "false");
        else
            continue;
        json_t *c = json_object();
        json_object_set_new(c, "predicate", json_string(pred));
        json_object_set_new(c, "kind", json_string("static"));
        json_object_set_new(c, "verified", json_true());
        json_object_set_new(c, "evidence", json_pack("[s]", where));
        json_array_append_new(out, c);
    }
    return out;
}

/* code: the expert's text with its comments blanked (without_comments), for telling names */
static json_t *card_of_step(const json_t *doc, const json_t *steps, size_t k, const json_t *task_bench,
                            const char *code)
{
    const json_t *s = json_array_get(steps, k);
    const char *transform = str(s, "transform");
    json_t *features = json_object_get(s, "features");
    json_t *conditional = features ? condition_features(features, code) : json_object();
    json_t *pattern = json_object();
    json_object_set_new(pattern, "transform", json_string(transform));
    json_object_set(pattern, "site_features", conditional);
    /* The card's identity: its transform and the features that name a kind of site (strings and
     * booleans: a form, a dtype, whether a trip count is known). Counts and sizes (numbers,
     * objects of counts) are conditions, which a merge keeps where all evidence agrees, so the
     * same transform at sites of one kind is one card across sites and lineages. */
    json_t *kind = json_object();
    json_object_set_new(kind, "transform", json_string(transform));
    const char *fk;
    json_t *fv;
    json_object_foreach(conditional, fk, fv) if (json_is_string(fv) || json_is_boolean(fv)) json_object_set(kind, fk, fv);
    char *ptext = json_dumps(kind, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(kind);
    char hex[KL_HASH_HEX];
    kl_hash_hex(ptext ? ptext : "", ptext ? strlen(ptext) : 0, hex);
    free(ptext);
    char id[128];
    kl_snprintf(id, sizeof id, "%s-%.6s", transform, hex);

    json_t *c = json_object();
    json_object_set_new(c, "id", json_string(id));
    json_object_set_new(c, "format", json_integer(1));
    json_object_set_new(c, "transform", json_string(transform));
    /* the step's note says what was removed ("removed T at SITE: what it is"); the card is the
     * step forward, so its intent is what the optimization is */
    const char *intent = str(s, "note");
    char removed[300];
    kl_snprintf(removed, sizeof removed, "removed %s at %s: ", transform, str(s, "site"));
    if (kl_str_starts(intent, removed)) intent += strlen(removed);
    json_object_set_new(c, "intent", json_string(intent));
    json_t *params = json_object_get(s, "params");
    if (params)
        json_object_set(c, "params", params);
    else
        json_object_set_new(c, "params", json_object());
    json_t *anchor = json_object();
    const char *site = str(s, "site");
    const char *colon = strchr(site, ':');
    json_object_set_new(anchor, "kernel", colon ? json_stringn(site, (size_t)(colon - site)) : json_string(site));
    json_object_set_new(anchor, "site", json_string(site));
    json_t *diff = json_object_get(s, "diff");
    json_object_set_new(anchor, "before", json_string(str(diff, "before")));
    json_object_set_new(anchor, "after", json_string(str(diff, "after")));
    json_object_set_new(anchor, "pattern", pattern);
    if (features) json_object_set(anchor, "features", features); /* all of them, names included */
    json_object_set_new(c, "anchor", anchor);

    char where[256];
    kl_snprintf(where, sizeof where, "site feature at %s in %s", site, str(doc, "expert"));
    json_t *pre = static_preconditions(conditional, where);
    json_decref(conditional);
    json_t *conds = json_object_get(s, "conditions");
    size_t i;
    json_t *cond;
    json_array_foreach(conds, i, cond) if (json_is_string(json_object_get(cond, "predicate")))
        json_array_append(pre, cond);
    json_object_set_new(c, "preconditions", pre);

    /* requires: what the simpler (before) version still had: the later steps of the walk */
    json_t *req = json_array();
    for (size_t q = k + 1; q < json_array_size(steps); q++) {
        json_t *t = json_object_get(json_array_get(steps, q), "transform");
        size_t j;
        json_t *e;
        bool seen = false;
        json_array_foreach(req, j, e) if (json_equal(e, t)) seen = true;
        if (!seen && t) json_array_append(req, t);
    }
    json_object_set_new(c, "requires", req);

    json_t *effect = json_array();
    double sp = num(s, "speedup", -1);
    if (sp > 0) {
        json_t *e = json_object();
        json_object_set_new(e, "device", json_string(str(s, "device")));
        json_object_set_new(e, "date", json_string(str(s, "date")));
        json_object_set(e, "shape", (json_t *)task_bench);
        json_object_set_new(e, "label", json_string("bench"));
        json_object_set_new(e, "speedup", json_real(1.0 / sp));
        if (num(s, "cand_ms", -1) > 0) json_object_set_new(e, "before_ms", json_real(num(s, "cand_ms", -1)));
        if (num(s, "base_ms", -1) > 0) json_object_set_new(e, "after_ms", json_real(num(s, "base_ms", -1)));
        json_object_set_new(e, "verdict", json_string(str(s, "verdict")));
        json_object_set_new(e, "lineage", json_string(str(doc, "key")));
        json_array_append_new(effect, e);
    }
    json_t *probes = json_object_get(s, "probes");
    json_t *verdicts = json_array();
    if (*str(s, "verdict")) json_array_append_new(verdicts, json_string(str(s, "verdict")));
    json_t *risks = json_array();
    unsigned failures = 0;
    json_t *pshapes = json_array();
    json_t *p;
    json_array_foreach(probes, i, p) {
        json_array_append(pshapes, json_object_get(p, "shape"));
        if (*str(p, "verdict")) json_array_append_new(verdicts, json_string(str(p, "verdict")));
        double psp = num(p, "speedup", -1);
        if (psp > 0 && json_is_true(json_object_get(p, "pass"))) {
            json_t *e = json_object();
            json_object_set_new(e, "device", json_string(str(p, "device")));
            json_object_set_new(e, "date", json_string(str(p, "date")));
            json_object_set(e, "shape", json_object_get(p, "shape"));
            json_object_set_new(e, "label", json_string("probe"));
            json_object_set_new(e, "speedup", json_real(psp));
            json_object_set_new(e, "verdict", json_string(str(p, "verdict")));
            json_array_append_new(effect, e);
        }
        if (!json_object_get(p, "broke")) continue;
        failures++;
        json_t *r = json_object();
        json_object_set(r, "shape", json_object_get(p, "shape"));
        json_object_set_new(r, "broke", json_string(str(p, "broke")));
        char detail[600];
        if (!strcmp(str(p, "broke"), "slower"))
            kl_snprintf(detail, sizeof detail, "the optimized version took %.2fx the simpler one's time", 1.0 / psp);
        else
            kl_snprintf(detail, sizeof detail, "%s: %s", str(p, "stage"), str(p, "reason"));
        json_object_set_new(r, "detail", json_string(detail));
        json_object_set_new(r, "verdict", json_string(str(p, "verdict")));
        json_array_append_new(risks, r);
    }
    json_object_set_new(c, "effect", effect);
    json_object_set_new(c, "risks", risks);
    json_t *pr = json_object();
    json_object_set_new(pr, "count", json_integer((json_int_t)json_array_size(probes)));
    json_object_set_new(pr, "failures", json_integer(failures));
    json_object_set_new(pr, "shapes", pshapes);
    const char *skipped = json_string_value(json_object_get(s, "probe_skipped"));
    if (skipped) {
        json_object_set_new(pr, "note", json_string(skipped));
    } else if (failures == 0) {
        char note[160];
        kl_snprintf(note, sizeof note, "probed on %zu shape(s); no failure found", json_array_size(probes));
        json_object_set_new(pr, "note", json_string(note));
    }
    json_object_set_new(c, "probes", pr);
    json_t *ev = json_object();
    json_object_set_new(ev, "lineages", json_pack("[s]", str(doc, "key")));
    json_object_set_new(ev, "verdicts", verdicts);
    json_object_set_new(ev, "task", json_string(str(doc, "task")));
    json_object_set_new(c, "evidence", ev);
    json_object_set_new(c, "contradictions", json_array());
    return c;
}

kl_status kl_lineage_extract_skills(kl_store *store, const char *doc_json, unsigned *n_cards, kl_error *err)
{
    *n_cards = 0;
    json_error_t je;
    json_t *doc = json_loads(doc_json, 0, &je);
    if (!doc) return kl_error_set(err, KL_ERR_PARSE, "lineage document: line %d: %s", je.line, je.text);
    kl_status st = KL_OK;
    json_t *bench = json_object_get(doc, "bench");
    if (!bench) bench = json_object();
    else json_incref(bench);
    json_t *steps = json_object_get(doc, "steps");
    /* Steps of this lineage with the same id (the same step at several sites) are merged here
     * into one card, which is then stored: storing a lineage's card again replaces it. */
    size_t nsteps = json_array_size(steps), ncards = 0;
    char **ids = calloc(nsteps + 1, sizeof *ids), **texts = calloc(nsteps + 1, sizeof *texts);
    char *code = without_comments(str(json_array_get(json_object_get(doc, "versions"), 0), "source"));
    if (!ids || !texts || !code) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    for (size_t k = 0; st == KL_OK && k < nsteps; k++) {
        json_t *card = card_of_step(doc, steps, k, bench, code);
        char *text = json_dumps(card, JSON_INDENT(2)); /* kl_skill_put orders the keys */
        char *id = kl_strdup(json_string_value(json_object_get(card, "id")));
        json_decref(card);
        if (!text || !id) {
            free(text), free(id);
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            break;
        }
        size_t at = 0;
        while (at < ncards && strcmp(ids[at], id) != 0) at++;
        if (at == ncards) {
            ids[ncards] = id;
            texts[ncards++] = text;
        } else {
            char *merged = NULL;
            st = kl_skill_merge(texts[at], text, &merged, err);
            free(text), free(id);
            if (st != KL_OK) break;
            free(texts[at]);
            texts[at] = merged;
        }
        (*n_cards)++;
    }
    for (size_t c = 0; st == KL_OK && c < ncards; c++) st = kl_skill_put(store, texts[c], err);
    for (size_t c = 0; c < ncards; c++) free(ids[c]), free(texts[c]);
    free(ids), free(texts), free(code);
    json_decref(bench);
    json_decref(doc);
    return st;
}
