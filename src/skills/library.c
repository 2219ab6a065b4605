/* The library in the store (kind "skill", key the id): get by id or unique prefix, list in
 * order, import a file. kl_skill_put (the merge on the way in) is in merge.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skills/skills_int.h"

/* Collects (key, document) pairs from kl_store_each, up to max (0: all). */
typedef struct collect {
    json_t *keys, *docs;
    unsigned max;
} collect;

static bool collect_one(const char *key, const char *json, void *user)
{
    collect *c = user;
    json_array_append_new(c->keys, json_string(key));
    json_array_append_new(c->docs, json_string(json));
    return c->max == 0 || json_array_size(c->keys) < c->max;
}

static kl_status parse_stored(const char *key, const char *json, kl_skill **out, kl_error *err)
{
    char origin[200];
    kl_snprintf(origin, sizeof origin, "stored skill %s", key);
    return kl_skill_parse(json, origin, out, err);
}

kl_status kl_skill_get(kl_store *store, const char *id_or_prefix, kl_skill **out, kl_error *err)
{
    *out = NULL;
    if (!id_or_prefix || !*id_or_prefix) return kl_error_set(err, KL_ERR_INVALID, "a skill id is needed");
    char *json = NULL;
    kl_status st = kl_store_get(store, "skill", id_or_prefix, &json, err);
    if (st == KL_OK) {
        st = parse_stored(id_or_prefix, json, out, err);
        free(json);
        return st;
    }
    if (st != KL_ERR_NOT_FOUND) return st;
    kl_error_clear(err);
    /* a prefix: at most a few matches are needed to tell unique from ambiguous */
    collect c = {json_array(), json_array(), 6};
    st = kl_store_each(store, "skill", id_or_prefix, collect_one, &c, err);
    if (st == KL_OK) {
        size_t n = json_array_size(c.keys);
        if (n == 1) {
            st = parse_stored(json_string_value(json_array_get(c.keys, 0)), json_string_value(json_array_get(c.docs, 0)),
                              out, err);
        } else if (n == 0) {
            st = kl_error_set(err, KL_ERR_NOT_FOUND, "no skill \"%s\" in the store (klineage skills list shows them)",
                              id_or_prefix);
        } else {
            kl_strbuf sb = KL_STRBUF_INIT;
            for (size_t i = 0; i < n && i < 5; i++)
                kl_strbuf_addf(&sb, "%s%s", i ? ", " : "", json_string_value(json_array_get(c.keys, i)));
            st = kl_error_set(err, KL_ERR_INVALID, "skill \"%s\" is ambiguous: it begins %s%s", id_or_prefix,
                              kl_strbuf_str(&sb), n > 5 ? ", …" : "");
            kl_strbuf_release(&sb);
        }
    }
    json_decref(c.keys);
    json_decref(c.docs);
    return st;
}

static int by_transform_then_id(const void *a, const void *b)
{
    const kl_skill *x = *(kl_skill *const *)a, *y = *(kl_skill *const *)b;
    int d = strcmp(x->transform, y->transform);
    return d ? d : strcmp(x->id, y->id);
}

kl_status kl_skill_list_load(kl_store *store, kl_skill_list *out, kl_error *err)
{
    out->items = NULL;
    out->count = 0;
    collect c = {json_array(), json_array(), 0};
    kl_status st = KL_OK;
    KL_TRY(kl_store_each(store, "skill", NULL, collect_one, &c, err));
    size_t n = json_array_size(c.keys);
    out->items = calloc(n ? n : 1, sizeof *out->items);
    if (!out->items) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        KL_TRY(parse_stored(json_string_value(json_array_get(c.keys, i)), json_string_value(json_array_get(c.docs, i)),
                            &out->items[out->count], err));
        out->count++;
    }
    qsort(out->items, out->count, sizeof *out->items, by_transform_then_id);
cleanup:
    if (st != KL_OK) kl_skill_list_release(out);
    json_decref(c.keys);
    json_decref(c.docs);
    return st;
}

void kl_skill_list_release(kl_skill_list *list)
{
    if (!list) return;
    for (unsigned i = 0; i < list->count; i++) kl_skill_free(list->items[i]);
    free(list->items);
    list->items = NULL;
    list->count = 0;
}

/* ---- ids that would share an agent-skill folder ------------------------------------------------ */

typedef struct folder_id {
    char name[72]; /* kl_sk_agent_name_of(id) */
    const char *id;
    long index;    /* the card's place in the file; -1 for a stored card */
} folder_id;

static int by_folder(const void *a, const void *b)
{
    const folder_id *x = a, *y = b;
    int d = strcmp(x->name, y->name);
    if (d) return d;
    return x->index < y->index ? -1 : x->index > y->index; /* stored first, then file order */
}

static bool collect_key(const char *key, const char *json, void *user)
{
    (void)json;
    json_t *keys = user;
    return json_array_append_new(keys, json_string(key)) == 0;
}

/* Refuse a card of the file whose id is not another's but names the same folder: another card
 * of the file before it, or a stored card. */
static kl_status check_folders(kl_store *store, const char *path, json_t *cards, bool array, kl_error *err)
{
    json_t *stored = json_array();
    folder_id *all = NULL;
    kl_status st = KL_OK;
    if (!stored) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    KL_TRY(kl_store_each(store, "skill", NULL, collect_key, stored, err));
    size_t ns = json_array_size(stored), nc = json_array_size(cards), n = 0;
    all = calloc(ns + nc + 1, sizeof *all);
    if (!all) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
    for (size_t i = 0; i < ns; i++, n++) {
        all[n].id = json_string_value(json_array_get(stored, i));
        all[n].index = -1;
        kl_sk_agent_name_of(all[n].id, all[n].name, sizeof all[n].name);
    }
    for (size_t i = 0; i < nc; i++, n++) {
        all[n].id = kl_sk_str(json_array_get(cards, i), "id");
        all[n].index = (long)i;
        kl_sk_agent_name_of(all[n].id, all[n].name, sizeof all[n].name);
    }
    qsort(all, n, sizeof *all, by_folder);
    for (size_t k = 1; k < n; k++) {
        const folder_id *a = &all[k - 1], *b = &all[k];
        if (strcmp(a->name, b->name) != 0 || !strcmp(a->id, b->id) || b->index < 0) continue;
        char where[32] = "";
        if (array) kl_snprintf(where, sizeof where, " [%ld]", b->index);
        if (a->index < 0)
            st = kl_error_set(err, KL_ERR_INVALID,
                              "%s:%s skill \"%s\" differs from the stored skill \"%s\" only in case or punctuation "
                              "(both would be the agent-skill folder %s): give it another id, or delete the stored "
                              "one first (klineage skills delete %s); nothing was imported",
                              path, where, b->id, a->id, b->name, a->id);
        else
            st = kl_error_set(err, KL_ERR_INVALID,
                              "%s:%s skill \"%s\" differs from \"%s\" ([%ld]) only in case or punctuation (both "
                              "would be the agent-skill folder %s); nothing was imported",
                              path, where, b->id, a->id, a->index, b->name);
        goto cleanup;
    }
cleanup:
    free(all);
    json_decref(stored);
    return st;
}

kl_status kl_skill_delete(kl_store *store, const char *id, unsigned *parts, kl_error *err)
{
    if (parts) *parts = 0;
    if (!id || !*id) return kl_error_set(err, KL_ERR_INVALID, "a skill id is needed");
    kl_status st = KL_OK;
    bool in_tx = false;
    json_t *keys = json_array();
    char *prefix = NULL;
    if (!keys) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    KL_TRY(kl_store_begin(store, err));
    in_tx = true;
    st = kl_store_delete(store, "skill", id, err);
    if (st == KL_ERR_NOT_FOUND) {
        st = kl_error_set(err, KL_ERR_NOT_FOUND, "no skill with the id \"%s\" (klineage skills list shows them)", id);
        goto cleanup;
    }
    if (st != KL_OK) goto cleanup;
    size_t n = strlen(id);
    prefix = malloc(n + 2);
    if (!prefix) KL_TRY(kl_error_set(err, KL_ERR_NOMEM, "out of memory"));
    memcpy(prefix, id, n);
    memcpy(prefix + n, "/", 2);
    KL_TRY(kl_store_each(store, "skill-part", prefix, collect_key, keys, err));
    for (size_t i = 0; i < json_array_size(keys); i++)
        KL_TRY(kl_store_delete(store, "skill-part", json_string_value(json_array_get(keys, i)), err));
    KL_TRY(kl_store_commit(store, err));
    in_tx = false;
    if (parts) *parts = (unsigned)json_array_size(keys);
cleanup:
    if (in_tx) kl_store_rollback(store);
    free(prefix);
    json_decref(keys);
    return st;
}

kl_status kl_skill_import(kl_store *store, const char *path, unsigned *count, unsigned *merged, kl_error *err)
{
    *count = 0;
    if (merged) *merged = 0;
    char *text = NULL;
    json_t *doc = NULL, *cards = NULL;
    kl_status st = KL_OK;
    bool in_tx = false;
    KL_TRY(kl_file_read(path, 0, &text, NULL, err));
    json_error_t je;
    doc = json_loads(text, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    if (!doc) {
        st = kl_error_set(err, KL_ERR_PARSE, "%s:%d:%d: %s", path, je.line, je.column, je.text);
        goto cleanup;
    }
    if (json_is_array(doc)) {
        cards = json_incref(doc);
    } else if (json_is_object(doc)) {
        cards = json_array();
        json_array_append(cards, doc);
    } else {
        st = kl_error_set(err, KL_ERR_INVALID, "%s: expected a card (an object) or an array of cards", path);
        goto cleanup;
    }
    /* validate every card before storing any */
    size_t i;
    json_t *c;
    json_array_foreach(cards, i, c) {
        char prefix[32] = "";
        if (json_is_array(doc)) kl_snprintf(prefix, sizeof prefix, "[%zu]", i);
        kl_skill *card = NULL;
        KL_TRY(kl_sk_from_json_at(c, path, prefix, &card, err));
        kl_skill_free(card);
    }
    KL_TRY(kl_store_begin(store, err));
    in_tx = true;
    KL_TRY(check_folders(store, path, cards, json_is_array(doc), err));
    json_array_foreach(cards, i, c) {
        char *old = NULL;
        const char *id = kl_sk_str(c, "id");
        kl_status g = kl_store_get(store, "skill", id, &old, err);
        free(old);
        if (g != KL_OK && g != KL_ERR_NOT_FOUND) {
            st = g;
            goto cleanup;
        }
        kl_error_clear(err);
        char *one = json_dumps(c, JSON_COMPACT);
        if (!one) {
            st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            goto cleanup;
        }
        st = kl_skill_put(store, one, err);
        free(one);
        if (st != KL_OK) {
            kl_error_prefix(err, "%s: %s", path, id);
            goto cleanup;
        }
        (*count)++;
        if (g == KL_OK && merged) (*merged)++;
    }
    st = kl_store_commit(store, err);
    in_tx = false;
cleanup:
    if (in_tx) kl_store_rollback(store);
    if (st != KL_OK) {
        *count = 0;
        if (merged) *merged = 0;
    }
    free(text);
    json_decref(doc);
    json_decref(cards);
    return st;
}

kl_status kl_sk_collect(kl_store *store, const char *kind, const char *prefix, json_t **keys, json_t **texts,
                        kl_error *err)
{
    collect c = {json_array(), json_array(), 0};
    kl_status st = kl_store_each(store, kind, prefix, collect_one, &c, err);
    if (st != KL_OK) {
        json_decref(c.keys), json_decref(c.docs);
        *keys = *texts = NULL;
        return st;
    }
    *keys = c.keys;
    *texts = c.docs;
    return KL_OK;
}

kl_status kl_skill_list_load_excluding(kl_store *store, const char *task_name, kl_skill_list *out, kl_error *err)
{
    if (!task_name || !*task_name) return kl_skill_list_load(store, out, err);
    out->items = NULL;
    out->count = 0;
    json_t *ids = NULL, *cards = NULL, *pkeys = NULL, *ptexts = NULL;
    const char **sel = NULL;
    kl_status st = KL_OK;
    KL_TRY(kl_sk_collect(store, "skill", NULL, &ids, &cards, err));
    KL_TRY(kl_sk_collect(store, "skill-part", NULL, &pkeys, &ptexts, err));
    size_t n = json_array_size(ids), np = json_array_size(ptexts);
    out->items = calloc(n ? n : 1, sizeof *out->items);
    sel = calloc(np ? np : 1, sizeof *sel);
    if (!out->items || !sel) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        const char *id = json_string_value(json_array_get(ids, i));
        size_t idlen = strlen(id);
        /* this card's parts (keys "<id>/<hash>", in key order) of the other tasks */
        size_t m = 0, all = 0;
        for (size_t k = 0; k < np; k++) {
            const char *key = json_string_value(json_array_get(pkeys, k));
            if (strncmp(key, id, idlen) != 0 || key[idlen] != '/') continue;
            all++;
            json_t *part = json_loads(json_string_value(json_array_get(ptexts, k)), 0, NULL);
            const char *task = kl_sk_str(json_object_get(part, "evidence"), "task");
            bool keep = strcmp(task, task_name) != 0;
            json_decref(part);
            if (keep) sel[m++] = json_string_value(json_array_get(ptexts, k));
        }
        char *text = NULL;
        if (all == 0) {
            /* a card stored before parts were kept: it is its own part */
            json_t *card = json_loads(json_string_value(json_array_get(cards, i)), 0, NULL);
            const char *task = kl_sk_str(json_object_get(card, "evidence"), "task");
            bool keep = strcmp(task, task_name) != 0;
            json_decref(card);
            if (!keep) continue;
            text = kl_strdup(json_string_value(json_array_get(cards, i)));
            if (!text) {
                st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
                goto cleanup;
            }
        } else {
            if (m == 0) continue; /* learned from that task alone */
            KL_TRY(kl_sk_merge_parts(sel, m, id, &text, err));
        }
        st = kl_sk_apply_admission(store, id, task_name, &text, err);
        if (st == KL_OK) st = parse_stored(id, text, &out->items[out->count], err);
        free(text);
        if (st != KL_OK) goto cleanup;
        out->count++;
    }
    qsort(out->items, out->count, sizeof *out->items, by_transform_then_id);
cleanup:
    if (st != KL_OK) kl_skill_list_release(out);
    free(sel);
    json_decref(ids), json_decref(cards), json_decref(pkeys), json_decref(ptexts);
    return st;
}

void kl_skill_list_keep_admitted(kl_skill_list *list)
{
    unsigned k = 0;
    for (unsigned i = 0; i < list->count; i++) {
        const char *s = kl_sk_str(json_object_get(list->items[i]->doc, "admission"), "status");
        if (!strcmp(s, "admitted")) list->items[k++] = list->items[i];
        else kl_skill_free(list->items[i]);
    }
    list->count = k;
}
