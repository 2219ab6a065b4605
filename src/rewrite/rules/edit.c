/* Text edits spliced at byte ranges, and the site list. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "util/util.h"

kl_status kl_edits_add(kl_edits *e, uint32_t start, uint32_t end, const char *text)
{
    if (end < start) return KL_ERR_INVALID;
    if (e->count == e->cap) {
        unsigned cap = e->cap ? e->cap * 2 : 8;
        kl_edit *n = realloc(e->items, cap * sizeof *n);
        if (!n) return KL_ERR_NOMEM;
        e->items = n;
        e->cap = cap;
    }
    char *t = kl_strdup(text ? text : "");
    if (!t) return KL_ERR_NOMEM;
    e->items[e->count++] = (kl_edit){start, end, t};
    return KL_OK;
}

typedef struct rename_scan {
    const kl_rule_ctx *ctx;
    const char *name, *to;
    kl_edits *out;
    kl_status st;
} rename_scan;

static bool rename_visit(TSNode n, void *user)
{
    rename_scan *r = user;
    if (r->st != KL_OK) return false;
    if (!strcmp(ts_node_type(n), "identifier") && kl_node_text_is(r->ctx->src, n, r->name))
        r->st = kl_edits_add(r->out, ts_node_start_byte(n), ts_node_end_byte(n), r->to);
    return true;
}

kl_status kl_edits_rename(const kl_rule_ctx *ctx, TSNode n, const char *name, const char *to, kl_edits *out)
{
    rename_scan r = {ctx, name, to, out, KL_OK};
    kl_ast_walk(n, rename_visit, &r);
    return r.st;
}

kl_status kl_edits_addf(kl_edits *e, uint32_t start, uint32_t end, const char *fmt, ...)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    kl_strbuf_vaddf(&sb, fmt, ap);
    va_end(ap);
    kl_status st = sb.failed ? KL_ERR_NOMEM : kl_edits_add(e, start, end, kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    return st;
}

void kl_edits_release(kl_edits *e)
{
    if (!e) return;
    for (unsigned i = 0; i < e->count; i++) free(e->items[i].text);
    free(e->items);
    memset(e, 0, sizeof *e);
}

static int by_start(const void *a, const void *b)
{
    const kl_edit *x = *(const kl_edit *const *)a, *y = *(const kl_edit *const *)b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    /* insertions (empty ranges) before a replacement at the same point; else keep order */
    bool xi = x->start == x->end, yi = y->start == y->end;
    if (xi != yi) return xi ? -1 : 1;
    return x < y ? -1 : (x > y);
}

kl_status kl_edits_apply_range(const kl_edits *e, const char *text, size_t a, size_t b, char **out, kl_error *err)
{
    *out = NULL;
    const kl_edit **order = calloc(e->count ? e->count : 1, sizeof *order);
    if (!order) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    for (unsigned i = 0; i < e->count; i++) order[i] = &e->items[i];
    qsort(order, e->count, sizeof *order, by_start);
    kl_strbuf sb = KL_STRBUF_INIT;
    size_t pos = a;
    kl_status st = KL_OK;
    for (unsigned i = 0; i < e->count; i++) {
        const kl_edit *ed = order[i];
        if (ed->end > b || ed->start < a) {
            st = kl_error_set(err, KL_ERR_INVALID, "edit [%u,%u) is outside the text [%zu,%zu)", ed->start, ed->end, a, b);
            goto cleanup;
        }
        if (ed->start < pos) {
            st = kl_error_set(err, KL_ERR_INVALID, "edits overlap at byte %u (an earlier edit ends at %zu)", ed->start,
                              pos);
            goto cleanup;
        }
        kl_strbuf_add(&sb, text + pos, ed->start - pos);
        kl_strbuf_adds(&sb, ed->text);
        pos = ed->end;
    }
    kl_strbuf_add(&sb, text + pos, b - pos);
    if (sb.failed) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    *out = kl_strbuf_detach(&sb, NULL);
cleanup:
    kl_strbuf_release(&sb);
    free(order);
    return st;
}

kl_status kl_edits_apply(const kl_edits *e, const char *text, size_t len, char **out, kl_error *err)
{
    return kl_edits_apply_range(e, text, 0, len, out, err);
}

kl_status kl_sites_add(kl_sites *s, const char *id, kl_site_dir dir, kl_span span, const char *kernel,
                       json_t *features, json_t *params, const char *note)
{
    if (s->count == s->cap) {
        unsigned cap = s->cap ? s->cap * 2 : 8;
        kl_site *n = realloc(s->items, cap * sizeof *n);
        if (!n) {
            json_decref(features);
            json_decref(params);
            return KL_ERR_NOMEM;
        }
        s->items = n;
        s->cap = cap;
    }
    kl_site *k = &s->items[s->count];
    k->id = kl_strdup(id ? id : "");
    k->dir = dir;
    k->span = span;
    k->kernel = kl_strdup(kernel ? kernel : "");
    k->features = features ? features : json_object();
    k->params = params;
    k->note = kl_strdup(note ? note : "");
    if (!k->id || !k->kernel || !k->note) {
        free(k->id), free(k->kernel), free(k->note);
        json_decref(k->features);
        json_decref(k->params);
        return KL_ERR_NOMEM;
    }
    s->count++;
    return KL_OK;
}

void kl_sites_release(kl_sites *s)
{
    if (!s) return;
    for (unsigned i = 0; i < s->count; i++) {
        free(s->items[i].id);
        free(s->items[i].kernel);
        free(s->items[i].note);
        json_decref(s->items[i].features);
        json_decref(s->items[i].params);
    }
    free(s->items);
    memset(s, 0, sizeof *s);
}
