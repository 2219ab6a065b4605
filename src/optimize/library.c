/*
 * The library a run draws on. With a task left out, every card is merged again from the
 * stored parts (kind "skill-part", one per lineage) whose task is not the left-out one, in
 * key order — the same merge kl_skill_put makes — so the result is exactly the library the
 * other lineages alone would have given; nothing in the store changes.
 */
#include <stdlib.h>
#include <string.h>

#include "optimize/optimize_int.h"

typedef struct parts_ctx {
    const char *leave_out;
    json_t *by_id;      /* id -> merged card text (json string) */
    kl_error *err;
    kl_status st;
} parts_ctx;

/* Does a part's evidence name the task? ("a, b" after a merge of parts of several tasks) */
static bool part_of_task(const json_t *card, const char *task)
{
    const char *t = json_string_value(json_object_get(json_object_get(card, "evidence"), "task"));
    if (!t) return false;
    size_t n = strlen(task);
    for (const char *p = t; (p = strstr(p, task)) != NULL; p += n) {
        bool start = p == t || p[-1] == ' ' || p[-1] == ',';
        bool end = p[n] == '\0' || p[n] == ',';
        if (start && end) return true;
    }
    return false;
}

static bool visit_part(const char *key, const char *json, void *user)
{
    parts_ctx *c = user;
    json_t *card = json_loads(json, 0, NULL);
    if (!card) return true;
    const char *id = json_string_value(json_object_get(card, "id"));
    if (!id || part_of_task(card, c->leave_out)) {
        json_decref(card);
        return true;
    }
    const char *had = json_string_value(json_object_get(c->by_id, id));
    if (!had) {
        json_object_set_new(c->by_id, id, json_string(json));
    } else {
        char *merged = NULL;
        c->st = kl_skill_merge(had, json, &merged, c->err);
        if (c->st != KL_OK) {
            kl_error_prefix(c->err, "skill-part %s", key);
            json_decref(card);
            return false;
        }
        json_object_set_new(c->by_id, id, json_string(merged));
        free(merged);
    }
    json_decref(card);
    return true;
}

kl_status opt_library_load(kl_store *store, const char *leave_out, kl_skill_list *out, kl_error *err)
{
    memset(out, 0, sizeof *out);
    if (!leave_out) return kl_skill_list_load(store, out, err);
    parts_ctx c = {leave_out, json_object(), err, KL_OK};
    kl_status st = kl_store_each(store, "skill-part", NULL, visit_part, &c, err);
    if (st == KL_OK) st = c.st;
    if (st == KL_OK) {
        size_t n = json_object_size(c.by_id);
        out->items = calloc(n ? n : 1, sizeof *out->items);
        if (!out->items) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        /* in the order kl_skill_list_load gives: by transform, then id */
        const char *id;
        json_t *v;
        json_object_foreach(c.by_id, id, v) {
            if (st != KL_OK) break;
            kl_skill *card = NULL;
            st = kl_skill_parse(json_string_value(v), id, &card, err);
            if (st == KL_OK) out->items[out->count++] = card;
        }
        for (unsigned i = 1; st == KL_OK && i < out->count; i++)
            for (unsigned k = i; k > 0; k--) {
                kl_skill *a = out->items[k - 1], *b = out->items[k];
                int t = strcmp(kl_skill_transform(a), kl_skill_transform(b));
                if (t < 0 || (t == 0 && strcmp(kl_skill_id(a), kl_skill_id(b)) <= 0)) break;
                out->items[k - 1] = b, out->items[k] = a;
            }
    }
    json_decref(c.by_id);
    if (st != KL_OK) kl_skill_list_release(out);
    return st;
}
