/*
 * The backward walk: from an expert kernel, remove one recognized optimization per step,
 * each step admitted by the gate, until nothing more can be removed; then reverse every
 * admitted step into a skill card (docs/lineage.md, docs/skill-card.md).
 *
 * The whole graph — every version, every proposal and its verdict — is stored as one
 * document (kind "lineage") after every step, so an interrupted walk resumes where it
 * stopped with no step lost or repeated (verdicts are cached by content hash).
 */
#ifndef KLINEAGE_LINEAGE_H
#define KLINEAGE_LINEAGE_H

#include <signal.h>
#include <stdbool.h>
#include "klineage/gate.h"
#include "klineage/klineage.h"
#include "klineage/rewrite.h"
#include "klineage/store.h"
#include "klineage/task.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kl_walk_event {
    KL_WALK_START,            /* text: the expert */
    KL_WALK_PROPOSALS,        /* n proposals at version `version` */
    KL_WALK_JUDGED,           /* one proposal judged (index, n) */
    KL_WALK_STEP,             /* a step admitted: text describes it */
    KL_WALK_PROBE,            /* probing a step */
    KL_WALK_DONE
} kl_walk_event;
typedef void (*kl_walk_progress_fn)(void *user, kl_walk_event ev, unsigned version, unsigned index, unsigned n,
                                    const char *text);

typedef struct kl_lineage_options {
    const char *expert_path;      /* NULL: the task's expert */
    kl_rewriter *rewriter;        /* borrowed; required */
    kl_store *store;              /* borrowed; required */
    kl_judge_fn judge;            /* required (kl_gate_search_judge with the gate as user) */
    void *judge_user;
    kl_prepare_fn prepare;        /* optional (live runs: kl_gate_search_prepare, same user) */
    kl_judge_many_fn judge_many;  /* optional (kl_gate_search_judge_many, same user): a version's new
                                     proposals judged at once; the walk is the same as one by one */
    unsigned max_steps;           /* 0: 64 */
    unsigned probes;              /* extra shapes per step for condition probing; 0: none */
    double probe_min_gain;        /* probe only steps whose gain (t(simpler)/t(optimized)) is at
                                     least this; 0: probe every step. A step within noise pays
                                     nothing, and each probe is a full gate call. */
    const char *probe_dir;        /* where derived probe tasks are written; NULL: the cache */
    bool restart;                 /* forget a stored walk of the same expert and start again */
    bool reopen;                  /* a stored walk that ended because nothing more could be removed
                                     goes on from its last version (the rewriter may have grown) */
    bool full;                    /* strategy "full": judge every proposal at every version;
                                     false: "lazy" (docs/lineage.md, "Strategy") */
    volatile sig_atomic_t *interrupt; /* set (e.g. by SIGINT) to stop between judgements */
    kl_walk_progress_fn progress;
    void *progress_user;
} kl_lineage_options;

/* Walk, or resume a stored walk. On KL_OK or KL_ERR_INTERRUPTED/UNMEASURED, *doc_json
 * (if not NULL) receives the lineage document as stored (new string, free()). */
kl_status kl_lineage_walk(const kl_task *task, const kl_lineage_options *opt, char **doc_json, kl_error *err);

/* The stored lineage of a task's expert (kind "lineage"), new string, or KL_ERR_NOT_FOUND. */
kl_status kl_lineage_load(kl_store *store, const kl_task *task, const char *expert_path, const char *rewriter,
                          bool full, char **doc_json, kl_error *err);

/* Render a lineage document as a Markdown table, root to expert, with the gain of each step
 * (new string, free()). */
char *kl_lineage_markdown(const char *doc_json);

/* Extract one skill card per admitted step (docs/skill-card.md) and put them into the
 * store (kind "skill"), merging with cards already there. *n_cards: how many steps gave cards. */
kl_status kl_lineage_extract_skills(kl_store *store, const char *doc_json, unsigned *n_cards, kl_error *err);

#ifdef __cplusplus
}
#endif
#endif
