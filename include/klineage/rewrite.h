/*
 * Rewriters: the one interface that the backward walk and the optimizer talk to.
 * A rewriter answers requests; it never judges (that is the gate's work).
 * Backends: "rules" (built in, deterministic), "llm" (an OpenAI-compatible endpoint),
 * "command" (a user's program speaking JSON on stdin/stdout).
 */
#ifndef KLINEAGE_REWRITE_H
#define KLINEAGE_REWRITE_H

#include <stdbool.h>
#include "klineage/klineage.h"
#include "klineage/task.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kl_request_kind {
    KL_REQ_SIMPLIFY = 0, /* backward: propose simplifications (one optimization removed each) */
    KL_REQ_APPLY = 1     /* forward: apply the given skill (or transform) here */
} kl_request_kind;

/* A request. Strings are borrowed for the call. */
typedef struct kl_rewrite_request {
    kl_request_kind kind;
    const char *source;        /* the current kernel file's text */
    const char *source_name;   /* for messages */
    const kl_task *task;       /* may be NULL */
    const char *skill_json;    /* KL_REQ_APPLY: the skill card as JSON (docs/skill-card.md), or NULL */
    const char *transform;     /* KL_REQ_APPLY without a card: the transform name; NULL: any */
    const char *rejected_json; /* what was already tried and rejected (a JSON array), or NULL */
    unsigned max_candidates;   /* 0: no limit */
} kl_rewrite_request;

/* One candidate answer. */
typedef struct kl_candidate {
    char *source;              /* the complete new file */
    char *transform;           /* e.g. "vectorize" */
    char *site;                /* where: "kernel:line:col" or a transform's site id */
    char *params_json;         /* parameters as a JSON object, "{}" when none */
    char *note;                /* one line: what was done */
} kl_candidate;

/* A rejected proposal: the backend saw it and refused it (with a reason). */
typedef struct kl_rejection {
    char *transform, *site, *reason;
} kl_rejection;

typedef struct kl_candidates {
    kl_candidate *items;
    unsigned count;
    kl_rejection *rejected;
    unsigned nrejected;
    /* accounting (llm): tokens and time */
    uint64_t tokens_in, tokens_out;
    double wall_s;
} kl_candidates;

void kl_candidates_free(kl_candidates *c);   /* frees the contents; accepts NULL */

typedef struct kl_rewriter kl_rewriter;

/* Open a backend by name ("rules", "llm", "command") with an optional JSON config
 * (e.g. {"program": "..."} for command). *out owned by caller (kl_rewriter_free). */
kl_status kl_rewriter_open(const char *backend, const char *config_json, kl_rewriter **out, kl_error *err);
void kl_rewriter_free(kl_rewriter *rw);
const char *kl_rewriter_name(const kl_rewriter *rw);
/* Answer a request. On KL_OK, *out holds zero or more candidates (kl_candidates_free). */
kl_status kl_rewriter_propose(kl_rewriter *rw, const kl_rewrite_request *req, kl_candidates *out, kl_error *err);

#ifdef __cplusplus
}
#endif
#endif
