/* kl_rewriter: one interface, three backends. */
#include <stdlib.h>
#include <string.h>

#include "rewrite/llm_int.h"
#include "rewrite/rewrite_int.h"
#include "util/util.h"

struct kl_rewriter {
    const kl_rewriter_ops *ops;
    void *state;
    kl_rewriter_usage usage;   /* sums over every propose */
};

/* The backends, each defining its ops (see rewrite_int.h). */
static const kl_rewriter_ops *const backends[] = {
    &kl_rewriter_rules_ops,
    &kl_rewriter_llm_ops,
    &kl_rewriter_command_ops,
};

kl_status kl_rewriter_open(const char *backend, const char *config_json, kl_rewriter **out, kl_error *err)
{
    *out = NULL;
    const kl_rewriter_ops *ops = NULL;
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        if (!strcmp(backends[i]->name, backend)) ops = backends[i];
    if (!ops) return kl_error_set(err, KL_ERR_INVALID, "unknown rewriter '%s'", backend);
    kl_rewriter *rw = calloc(1, sizeof *rw);
    if (!rw) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    rw->ops = ops;
    kl_status st = ops->open(config_json, &rw->state, err);
    if (st != KL_OK) {
        free(rw);
        return st;
    }
    *out = rw;
    return KL_OK;
}

kl_status kl_rewriter_open_ex(const char *backend, const char *config_json, kl_store *store, kl_rewriter **out,
                              kl_error *err)
{
    kl_status st = kl_rewriter_open(backend, config_json, out, err);
    if (st != KL_OK) return st;
    /* Only the llm backend keeps a cache; the others have no use for the store. */
    if (store && (*out)->ops == &kl_rewriter_llm_ops) kl_llm_attach_store((*out)->state, store);
    return KL_OK;
}

void kl_rewriter_usage_get(const kl_rewriter *rw, kl_rewriter_usage *out) { *out = rw->usage; }

void kl_rewriter_free(kl_rewriter *rw)
{
    if (!rw) return;
    if (rw->ops->close) rw->ops->close(rw->state);
    free(rw);
}

const char *kl_rewriter_name(const kl_rewriter *rw) { return rw->ops->name; }

kl_status kl_rewriter_propose(kl_rewriter *rw, const kl_rewrite_request *req, kl_candidates *out, kl_error *err)
{
    memset(out, 0, sizeof *out);
    double t0 = kl_now();
    kl_status st = rw->ops->propose(rw->state, req, out, err);
    if (out->wall_s == 0) out->wall_s = kl_now() - t0;
    rw->usage.proposals++;
    rw->usage.requests += out->requests;
    rw->usage.cached += out->cached;
    rw->usage.tokens_in += out->tokens_in;
    rw->usage.tokens_out += out->tokens_out;
    rw->usage.wall_s += out->wall_s;
    return st;
}

void kl_candidates_free(kl_candidates *c)
{
    if (!c) return;
    for (unsigned i = 0; i < c->count; i++) {
        free(c->items[i].source);
        free(c->items[i].transform);
        free(c->items[i].site);
        free(c->items[i].params_json);
        free(c->items[i].note);
        free(c->items[i].features_json);
    }
    for (unsigned i = 0; i < c->nrejected; i++) {
        free(c->rejected[i].transform);
        free(c->rejected[i].site);
        free(c->rejected[i].reason);
    }
    free(c->items);
    free(c->rejected);
    free(c->present_by_transform);
    memset(c, 0, sizeof *c);
}

kl_status kl_candidates_add(kl_candidates *c, const char *source, const char *transform, const char *site,
                            const char *params_json, const char *note)
{
    kl_candidate *items = realloc(c->items, (c->count + 1) * sizeof *items);
    if (!items) return KL_ERR_NOMEM;
    c->items = items;
    kl_candidate *k = &items[c->count];
    k->source = kl_strdup(source);
    k->transform = kl_strdup(transform ? transform : "");
    k->site = kl_strdup(site ? site : "");
    k->params_json = kl_strdup(params_json ? params_json : "{}");
    k->note = kl_strdup(note ? note : "");
    k->features_json = NULL;
    if (!k->source || !k->transform || !k->site || !k->params_json || !k->note) {
        free(k->source), free(k->transform), free(k->site), free(k->params_json), free(k->note);
        return KL_ERR_NOMEM;
    }
    c->count++;
    return KL_OK;
}

kl_status kl_candidates_reject(kl_candidates *c, const char *transform, const char *site, const char *reason)
{
    kl_rejection *r = realloc(c->rejected, (c->nrejected + 1) * sizeof *r);
    if (!r) return KL_ERR_NOMEM;
    c->rejected = r;
    kl_rejection *k = &r[c->nrejected];
    k->transform = kl_strdup(transform ? transform : "");
    k->site = kl_strdup(site ? site : "");
    k->reason = kl_strdup(reason ? reason : "");
    if (!k->transform || !k->site || !k->reason) {
        free(k->transform), free(k->site), free(k->reason);
        return KL_ERR_NOMEM;
    }
    c->nrejected++;
    return KL_OK;
}
