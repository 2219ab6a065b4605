/* Private to src/rewrite: the backend table behind kl_rewriter. */
#ifndef KL_REWRITE_INT_H
#define KL_REWRITE_INT_H

#include "klineage/rewrite.h"

typedef struct kl_rewriter_ops {
    const char *name;
    /* Build the backend's state from its JSON config (may be NULL). */
    kl_status (*open)(const char *config_json, void **state, kl_error *err);
    void (*close)(void *state);
    kl_status (*propose)(void *state, const kl_rewrite_request *req, kl_candidates *out, kl_error *err);
} kl_rewriter_ops;

/* Each backend defines its ops in its own file; rewrite.c lists them. */
extern const kl_rewriter_ops kl_rewriter_rules_ops;   /* rules/catalog.c */
extern const kl_rewriter_ops kl_rewriter_llm_ops;     /* llm.c */
extern const kl_rewriter_ops kl_rewriter_command_ops; /* command.c */

/* Helpers for backends: append a candidate (strings copied; NULL params -> "{}"). */
kl_status kl_candidates_add(kl_candidates *c, const char *source, const char *transform, const char *site,
                            const char *params_json, const char *note);
kl_status kl_candidates_reject(kl_candidates *c, const char *transform, const char *site, const char *reason);

#endif
