/* Merging cards of the same skill learned from different lineages. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "skills/skills_int.h"

/* Append to dst every element of src not already in dst (json_equal). */
static void union_into(json_t *dst, const json_t *src)
{
    size_t i, j;
    json_t *a, *b;
    json_array_foreach(src, i, a) {
        bool seen = false;
        json_array_foreach(dst, j, b) if (json_equal(a, b)) seen = true;
        if (!seen) json_array_append(dst, a);
    }
}

/* Append item (stolen) unless an equal one is there. */
static void add_unique(json_t *dst, json_t *item)
{
    size_t j;
    json_t *b;
    json_array_foreach(dst, j, b) if (json_equal(item, b)) {
        json_decref(item);
        return;
    }
    json_array_append_new(dst, item);
}

static json_t *array_or_new(json_t *o, const char *key)
{
    json_t *a = json_object_get(o, key);
    if (!json_is_array(a)) {
        a = json_array();
        json_object_set_new(o, key, a);
    }
    return a;
}

/* A condition learned by probing, and whether a card was probed at all: a probed condition of
 * one card stays in the merge when the other card was never probed (its absence there is no
 * evidence against it); a static one, or one the other card's probes did not find, does not. */
static bool probed_kind(const json_t *pre)
{
    const char *k = json_string_value(json_object_get(pre, "kind"));
    return k && (!strcmp(k, "probed") || !strcmp(k, "probed-perf"));
}

static bool was_probed(const json_t *card)
{
    return json_integer_value(json_object_get(json_object_get(card, "probes"), "count")) > 0;
}

/* A contradiction: predicate held in one side's lineages and was not found in the other's. */
static json_t *contradiction(const char *predicate, const char *held, const char *dflt_held, const char *missing,
                             const char *dflt_missing)
{
    json_t *c = json_object();
    json_object_set_new(c, "predicate", json_string(predicate));
    json_object_set_new(c, "held_in", json_string(held ? held : dflt_held));
    json_object_set_new(c, "not_found_in", json_string(missing ? missing : dflt_missing));
    return c;
}

/* Whether a ", "-separated list holds item. */
static bool list_has(const char *list, const char *item)
{
    size_t n = strlen(item);
    for (const char *p = list; p && *p;) {
        const char *e = strstr(p, ", ");
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, item, n)) return true;
        p = e ? e + 2 : NULL;
    }
    return false;
}

static json_t *find_pre(const json_t *pres, const char *predicate)
{
    size_t i;
    json_t *p;
    json_array_foreach(pres, i, p) {
        const char *q = json_string_value(json_object_get(p, "predicate"));
        if (q && !strcmp(q, predicate)) return p;
    }
    return NULL;
}

kl_status kl_skill_merge(const char *a_json, const char *b_json, char **out, kl_error *err)
{
    *out = NULL;
    json_error_t je;
    json_t *a = json_loads(a_json, 0, &je);
    if (!a) return kl_error_set(err, KL_ERR_PARSE, "skill card: line %d: %s", je.line, je.text);
    json_t *b = json_loads(b_json, 0, &je);
    if (!b) {
        json_decref(a);
        return kl_error_set(err, KL_ERR_PARSE, "skill card: line %d: %s", je.line, je.text);
    }
    kl_status st = KL_OK;
    const char *ida = json_string_value(json_object_get(a, "id")), *idb = json_string_value(json_object_get(b, "id"));
    if (!ida || !idb || strcmp(ida, idb) != 0) {
        st = kl_error_set(err, KL_ERR_INVALID, "cannot merge skill cards with different ids (%s, %s)", ida ? ida : "?",
                          idb ? idb : "?");
        goto cleanup;
    }
    json_t *m = json_deep_copy(a);
    /* evidence, effects, risks: add up */
    json_t *ev = json_object_get(m, "evidence");
    if (!json_is_object(ev)) {
        ev = json_object();
        json_object_set_new(m, "evidence", ev);
    }
    json_t *evb = json_object_get(b, "evidence");
    union_into(array_or_new(ev, "lineages"), json_object_get(evb, "lineages"));
    union_into(array_or_new(ev, "verdicts"), json_object_get(evb, "verdicts"));
    /* the tasks behind the card: "softmax, layernorm" */
    const char *ta = json_string_value(json_object_get(ev, "task")), *tb = json_string_value(json_object_get(evb, "task"));
    if (tb && *tb) {
        if (!ta || !*ta) {
            json_object_set_new(ev, "task", json_string(tb));
        } else if (!list_has(ta, tb)) {
            kl_strbuf sb = KL_STRBUF_INIT;
            kl_strbuf_addf(&sb, "%s, %s", ta, tb);
            json_object_set_new(ev, "task", json_string(kl_strbuf_str(&sb)));
            kl_strbuf_release(&sb);
        }
    }
    union_into(array_or_new(m, "effect"), json_object_get(b, "effect"));
    union_into(array_or_new(m, "risks"), json_object_get(b, "risks"));
    /* the lineage path: every lineage's place of the step, and its neighbours in each */
    const json_t *path_b = json_object_get(b, "path");
    if (json_is_object(path_b)) {
        json_t *path = json_object_get(m, "path");
        if (!json_is_object(path)) {
            path = json_object();
            json_object_set_new(m, "path", path);
        }
        static const char *const pk[] = {"follows", "precedes", "lineages"};
        for (unsigned q = 0; q < 3; q++) union_into(array_or_new(path, pk[q]), json_object_get(path_b, pk[q]));
    }

    /* the pattern that finds such sites: the features both sites had alike */
    json_t *pf = json_object_get(json_object_get(json_object_get(m, "anchor"), "pattern"), "site_features");
    const json_t *pfb = json_object_get(json_object_get(json_object_get(b, "anchor"), "pattern"), "site_features");
    if (json_is_object(pf)) {
        const char *fk;
        json_t *fv;
        void *tmp;
        json_object_foreach_safe(pf, tmp, fk, fv) if (!json_equal(fv, json_object_get(pfb, fk))) json_object_del(pf, fk);
    }
    /* requires: a dependency either lineage showed (the step failed or lost without it there);
     * the other lineage may simply never have tried the step without it */
    union_into(array_or_new(m, "requires"), json_object_get(b, "requires"));
    if (json_array_size(json_object_get(b, "requires_evidence")))
        union_into(array_or_new(m, "requires_evidence"), json_object_get(b, "requires_evidence"));
    json_t *pa = json_object_get(m, "probes"), *pb = json_object_get(b, "probes");
    if (json_is_object(pa) && json_is_object(pb)) {
        json_object_set_new(pa, "count", json_integer(json_integer_value(json_object_get(pa, "count")) +
                                                      json_integer_value(json_object_get(pb, "count"))));
        json_object_set_new(pa, "failures", json_integer(json_integer_value(json_object_get(pa, "failures")) +
                                                         json_integer_value(json_object_get(pb, "failures"))));
        union_into(array_or_new(pa, "shapes"), json_object_get(pb, "shapes"));
        /* the note speaks of the sum now */
        json_int_t count = json_integer_value(json_object_get(pa, "count"));
        const char *na = json_string_value(json_object_get(pa, "note"));
        const char *nb = json_string_value(json_object_get(pb, "note"));
        if (count == 0) {
            /* neither side was probed: keep a reason why not (the first side's, else the other's) */
            if (!(na && kl_str_starts(na, "not probed")) && nb) json_object_set_new(pa, "note", json_string(nb));
        } else if (json_integer_value(json_object_get(pa, "failures")) == 0) {
            char note[160];
            kl_snprintf(note, sizeof note, "probed on %lld shape(s); no failure found", (long long)count);
            json_object_set_new(pa, "note", json_string(note));
        } else {
            json_object_del(pa, "note");
        }
    } else if (json_is_object(pb)) {
        json_object_set_new(m, "probes", json_deep_copy(pb));
    }
    /* preconditions: keep where both agree; the rest are contradictions, shown not hidden */
    json_t *pre_a = json_object_get(a, "preconditions"), *pre_b = json_object_get(b, "preconditions");
    json_t *kept = json_array(), *contra = array_or_new(m, "contradictions");
    union_into(contra, json_object_get(b, "contradictions"));
    char *la = kl_sk_lineages_text(a), *lb = kl_sk_lineages_text(b);
    size_t i;
    json_t *p;
    json_array_foreach(pre_a, i, p) {
        const char *q = json_string_value(json_object_get(p, "predicate"));
        if (!q) {
            /* failures no predicate explains stay: they are evidence, not a condition */
            add_unique(kept, json_deep_copy(p));
            continue;
        }
        json_t *other = find_pre(pre_b, q);
        if (other) {
            json_t *k = json_deep_copy(p);
            union_into(array_or_new(k, "evidence"), json_object_get(other, "evidence"));
            /* verified only where both verified it */
            if (json_is_false(json_object_get(other, "verified"))) json_object_set_new(k, "verified", json_false());
            json_array_append_new(kept, k);
        } else if (probed_kind(p) && !was_probed(b)) {
            add_unique(kept, json_deep_copy(p)); /* nothing on the other side says otherwise */
        } else {
            add_unique(contra, contradiction(q, la, "first card", lb, "second card"));
        }
    }
    json_array_foreach(pre_b, i, p) {
        const char *q = json_string_value(json_object_get(p, "predicate"));
        if (!q) {
            add_unique(kept, json_deep_copy(p));
            continue;
        }
        if (find_pre(pre_a, q)) continue;
        if (probed_kind(p) && !was_probed(a))
            add_unique(kept, json_deep_copy(p));
        else
            add_unique(contra, contradiction(q, lb, "second card", la, "first card"));
    }
    free(la);
    free(lb);
    json_object_set_new(m, "preconditions", kept);
    *out = json_dumps(m, JSON_INDENT(2) | JSON_REAL_PRECISION(15)); /* members keep their order: shapes list sizes as the task does */
    json_decref(m);
    if (!*out) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
cleanup:
    json_decref(a);
    json_decref(b);
    return st;
}

/* Validate a card's text and return it in the fixed key order (*out: free()). */
static kl_status canonical(const char *card_json, const char *origin, char **out, kl_error *err)
{
    *out = NULL;
    kl_skill *card = NULL;
    kl_status st = kl_skill_parse(card_json, origin, &card, err);
    if (st != KL_OK) return st;
    *out = kl_skill_to_json(card);
    kl_skill_free(card);
    return *out ? KL_OK : kl_error_set(err, KL_ERR_NOMEM, "out of memory");
}

/* The store keeps, beside each card (kind "skill"), the parts it was merged from (kind
 * "skill-part", key "<id>/<hash of the part's lineages>"): one per lineage for cards a walk
 * extracted, one per lineage set for cards imported already merged. Storing a card replaces the
 * part of its lineages and merges the parts again, in key order, into the card: storing the same
 * lineage twice (a replay, a walk taken up again) changes nothing, and the evidence of other
 * lineages stays. A card stored before parts were kept becomes the part of its own lineages. */
#define PART_KIND "skill-part"

static kl_status part_key(const json_t *card, const char *id, char *key, size_t size, kl_error *err)
{
    char *lin = kl_sk_lineages_text(card);
    char hex[KL_HASH_HEX];
    kl_hash_hex(lin ? lin : "", lin ? strlen(lin) : 0, hex);
    free(lin);
    if ((size_t)kl_snprintf(key, size, "%s/%s", id, hex) >= size)
        return kl_error_set(err, KL_ERR_INVALID, "skill %s: the id is too long for a part key", id);
    return KL_OK;
}

kl_status kl_sk_merge_parts(const char *const *texts, size_t n, const char *id, char **out, kl_error *err)
{
    *out = NULL;
    if (n == 0) return kl_error_set(err, KL_ERR_NOT_FOUND, "skill %s: no parts to merge", id);
    char *merged = kl_strdup(texts[0]);
    if (!merged) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    for (size_t i = 1; i < n; i++) {
        char *m = NULL, *c = NULL;
        kl_status st = kl_skill_merge(merged, texts[i], &m, err);
        if (st == KL_OK) {
            char origin[200];
            kl_snprintf(origin, sizeof origin, "skill %s merged from its parts", id);
            st = canonical(m, origin, &c, err);
        }
        free(m);
        free(merged);
        merged = c;
        if (st != KL_OK) return st;
    }
    *out = merged;
    return KL_OK;
}

typedef struct parts {
    char **texts;
    size_t n, cap;
    bool oom;
} parts;

static bool collect_part(const char *key, const char *json, void *user)
{
    (void)key;
    parts *p = user;
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 8;
        char **t = realloc(p->texts, cap * sizeof *t);
        if (!t) {
            p->oom = true;
            return false;
        }
        p->texts = t;
        p->cap = cap;
    }
    p->texts[p->n] = kl_strdup(json);
    if (!p->texts[p->n]) {
        p->oom = true;
        return false;
    }
    p->n++;
    return true;
}

kl_status kl_skill_put(kl_store *store, const char *card_json, kl_error *err)
{
    char *text = NULL, *old = NULL, *merged = NULL;
    json_t *card = NULL;
    parts ps = {0};
    kl_status st = KL_OK;
    if ((st = canonical(card_json, "skill card", &text, err)) != KL_OK) goto cleanup;
    card = json_loads(text, 0, NULL);
    if (!card) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    const char *id = json_string_value(json_object_get(card, "id"));
    char key[1024], prefix[256];
    if ((st = part_key(card, id, key, sizeof key, err)) != KL_OK) goto cleanup;
    kl_snprintf(prefix, sizeof prefix, "%s/", id);
    if ((st = kl_store_each(store, PART_KIND, prefix, collect_part, &ps, err)) != KL_OK) goto cleanup;
    if (ps.oom) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    if (ps.n == 0) {
        /* a card from before parts were kept: it becomes the part of its own lineages */
        st = kl_store_get(store, "skill", id, &old, err);
        if (st == KL_OK) {
            json_t *o = json_loads(old, 0, NULL);
            char okey[1024];
            st = o ? part_key(o, id, okey, sizeof okey, err) : kl_error_set(err, KL_ERR_PARSE, "skill %s: stored card is not JSON", id);
            json_decref(o);
            if (st == KL_OK && strcmp(okey, key) != 0) st = kl_store_put(store, PART_KIND, okey, old, err);
            if (st != KL_OK) goto cleanup;
        } else if (st == KL_ERR_NOT_FOUND) {
            kl_error_clear(err);
            st = KL_OK;
        } else {
            goto cleanup;
        }
    }
    if ((st = kl_store_put(store, PART_KIND, key, text, err)) != KL_OK) goto cleanup;
    for (size_t i = 0; i < ps.n; i++) free(ps.texts[i]);
    ps.n = 0;
    if ((st = kl_store_each(store, PART_KIND, prefix, collect_part, &ps, err)) != KL_OK) goto cleanup;
    if (ps.oom || ps.n == 0) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    if ((st = kl_sk_merge_parts((const char *const *)ps.texts, ps.n, id, &merged, err)) != KL_OK) goto cleanup;
    if ((st = kl_sk_apply_admission(store, id, NULL, &merged, err)) != KL_OK) goto cleanup;
    st = kl_store_put(store, "skill", id, merged, err);
cleanup:
    for (size_t i = 0; i < ps.n; i++) free(ps.texts[i]);
    free(ps.texts);
    free(text);
    free(old);
    free(merged);
    json_decref(card);
    return st;
}
