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
#include "klineage/store.h"
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
    const char *features_json; /* what the rules analysis recognizes in source: a JSON array (or
                                  object) of optimizations and their sites, or NULL. The llm and
                                  command backends show it to the model/program (docs/llm.md). */
    bool count_only;           /* KL_REQ_SIMPLIFY: only `present` is wanted (the walk counting what
                                  a proposal leaves); a backend that can count without rewriting
                                  (rules) returns no candidates, others answer as usual */
} kl_rewrite_request;

/* One candidate answer. */
typedef struct kl_candidate {
    char *source;              /* the complete new file */
    char *transform;           /* e.g. "vectorize" */
    char *site;                /* where: "kernel:line:col" or a transform's site id */
    char *params_json;         /* parameters as a JSON object, "{}" when none */
    char *note;                /* one line: what was done */
    char *features_json;       /* the site's static features as a JSON object, or NULL */
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
    /* simplify requests: the optimizations the rewriter recognizes in the source, removable
     * or not (rules: every site found present); 0 when the rewriter does not say, and then
     * the proposals are all it recognizes */
    unsigned present;
    char *present_by_transform; /* the same per transform, a JSON object {"unroll": 3, …}, or NULL */
    /* accounting (llm): tokens and time */
    uint64_t tokens_in, tokens_out;
    double wall_s;
    unsigned requests;         /* endpoint requests (llm) or program runs (command) this answer took */
    unsigned cached;           /* of those, how many were served from the store (no endpoint) */
} kl_candidates;

void kl_candidates_free(kl_candidates *c);   /* frees the contents; accepts NULL */

typedef struct kl_rewriter kl_rewriter;

/* Open a backend by name ("rules", "llm", "command") with an optional JSON config
 * (e.g. {"program": "..."} for command). *out owned by caller (kl_rewriter_free). */
kl_status kl_rewriter_open(const char *backend, const char *config_json, kl_rewriter **out, kl_error *err);
/* The same, with a store (borrowed: it must outlive the rewriter; may be NULL). The llm
 * backend keeps every request and answer there (kind "llm") and, with {"replay": true},
 * answers from it alone; other backends ignore it. docs/llm.md. */
kl_status kl_rewriter_open_ex(const char *backend, const char *config_json, kl_store *store, kl_rewriter **out,
                              kl_error *err);
void kl_rewriter_free(kl_rewriter *rw);
const char *kl_rewriter_name(const kl_rewriter *rw);
/* Answer a request. On KL_OK, *out holds zero or more candidates (kl_candidates_free). */
kl_status kl_rewriter_propose(kl_rewriter *rw, const kl_rewrite_request *req, kl_candidates *out, kl_error *err);

/* What a rewriter has spent since it was opened: the sums of every kl_candidates' accounting
 * (for the end of a walk or an optimization), failed requests included. */
typedef struct kl_rewriter_usage {
    unsigned proposals;        /* kl_rewriter_propose calls */
    unsigned requests, cached; /* endpoint requests / program runs, and those served from the store */
    uint64_t tokens_in, tokens_out;
    double wall_s;
} kl_rewriter_usage;
void kl_rewriter_usage_get(const kl_rewriter *rw, kl_rewriter_usage *out);

/* ---- the rules catalog, directly (what `klineage rewrite` uses; docs/rules.md) ------------------ */

/* The catalog as JSON text: [{"name", "intent", "params": [{"name", "values", "default"}]}].
 * *json owned by the caller (free()). */
kl_status kl_rules_catalog_json(char **json, kl_error *err);
/* Every site of every transform (or of `transform` when not NULL) in source, both ways, as JSON
 * text: [{"transform", "site", "direction", "kernel", "line", "column", "features": {...},
 * "params": {...}, "note"}], in the catalog's order. Each site is tried: "present" when its
 * removal succeeds, "applicable" when its application succeeds with the defaults or with some
 * parameter value ("applies_with": those parameters when not the defaults), else "refused"
 * with "refused": "remove"|"apply" and "reason" (note is the reason too: what --apply/--remove
 * says). task may be NULL. *json owned by the caller (free()). Fails for a source that does
 * not parse at all, or nests deeper than the catalog analyses (KL_ERR_TOO_LARGE). */
kl_status kl_rules_list(const char *name, const char *source, size_t len, const kl_task *task, const char *transform,
                        char **json, kl_error *err);
/* The canonical form the transforms read (docs/syntax.md, "The canonical form"): *out the text (the
 * source itself when nothing changes), *summary (may be NULL) what changed ("" for nothing); both
 * owned by the caller (free()). */
kl_status kl_rules_canonical(const char *name, const char *source, size_t len, char **out, char **summary,
                             kl_error *err);
/* Apply (remove == false) or remove one transform at one site (an id from kl_rules_list),
 * with params (a JSON object, NULL: defaults). On KL_OK *out is the new file and *note a
 * line saying what was done (both owned by the caller, free()). KL_ERR_NOT_FOUND for an
 * unknown transform or site, KL_ERR_INVALID for a bad parameter, KL_ERR_NOT_APPLICABLE with
 * the reason where the rewrite cannot be proved safe; the result always parsed back. */
kl_status kl_rules_rewrite(const char *name, const char *source, size_t len, const kl_task *task, const char *transform,
                           const char *site, bool remove, const char *params_json, char **out, char **note,
                           kl_error *err);

/* ---- the compile check of a rewrite (docs/rules.md, "Checks") -------------------------------- */

/* The nvcc the checks use: $KLINEAGE_NVCC, else nvcc in PATH, else /usr/local/cuda/bin/nvcc;
 * NULL when there is none. Static or environment storage: do not free. */
const char *kl_rules_nvcc(void);
/* Compile texts[0..n) with `nvcc -cubin` (the front end over the whole file, host code
 * included, then the device code and ptxas; sm_90, sm_90a where the text holds wgmma), `jobs`
 * at a time, each within timeout_s (<= 0: 300), with include_dir (may be NULL) on the include
 * path. ok[i] says whether texts[i] compiled; why (may be NULL) receives nvcc's error lines
 * for each that did not (new strings, free(); NULL for those that did), the scratch file named
 * as names[i] (names may be NULL). A text that compiled once is remembered by its content hash
 * under kl_cache_dir()/compile-check and not compiled again. KL_ERR_NOT_FOUND without nvcc,
 * KL_ERR_TIMEOUT, KL_ERR_CHILD. */
kl_status kl_rules_compile_texts(unsigned n, const char *const *names, const char *const *texts,
                                 const char *include_dir, unsigned jobs, double timeout_s, bool *ok, char **why,
                                 kl_error *err);
/* Check a rewrite: when nvcc exists and `orig` compiles, `result` must compile too
 * (KL_ERR_COMPILE with nvcc's errors otherwise). *checked is false when nothing could be said
 * (no nvcc, or the original does not compile here); name (a path) names the file in messages
 * and its folder is on the include path. */
kl_status kl_rules_compile_check(const char *name, const char *orig, const char *result, double timeout_s,
                                 bool *checked, kl_error *err);

#ifdef __cplusplus
}
#endif
#endif
