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
    KL_WALK_DONE,
    KL_WALK_STORED            /* the walk stored after a version: a moment to copy the store out */
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
    unsigned bisect;              /* bisection probes per slowdown a probe found (between its size and
                                     the bench shape's, halved geometrically), so a speed condition
                                     states a narrow bracket; also done for a stored walk probed
                                     without them; 0: none */
    const char *probe_dir;        /* where derived probe tasks are written; NULL: the cache */
    bool restart;                 /* forget a stored walk of the same expert and start again */
    bool restart_older;           /* start again only when the stored walk was made with earlier walk
                                     rules (docs/lineage.md, "Gains where the code runs"); a walk of
                                     the current rules, finished or not, is taken up as stored */
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

/* The probing options a stored walk was made with (its "options", or for a walk stored before
 * they were, what its steps show), into *probes, *probe_min_gain and *bisect (may be NULL: the
 * bisection probes per slowdown, from "options" or, for a walk bisected before they said so, the
 * most bisection probes a step holds along one size); each is left as it is when the document
 * says nothing. A walk taken up again, or recomputed from recorded verdicts (--restart in
 * replay), must probe the same shapes to find their verdicts. */
void kl_lineage_recorded_options(const char *doc_json, unsigned *probes, double *probe_min_gain, unsigned *bisect);

/* Render a lineage document as a Markdown table, root to expert, with the gain of each step
 * (new string, free()). */
char *kl_lineage_markdown(const char *doc_json);

/* What an extraction did. */
typedef struct kl_extract_stats {
    unsigned steps;          /* steps read (each gives a card, or adds to one) */
    unsigned cards;          /* distinct cards from this lineage (steps of one id merge) */
    unsigned new_cards;      /* of those, cards no other lineage had given */
    unsigned merged_cards;   /* of those, cards merged with the evidence of other lineages */
} kl_extract_stats;

/* Extract one skill card per admitted step (docs/skill-card.md) and put them into the store
 * (kind "skill"), merging with cards already there. Each card is written over the step's forward
 * site — the rules' applicable site of its transform in the simpler version — and that site's
 * observables at the task's shapes (task: the lineage's task; NULL: the static observables
 * only): static conditions, the probed ones over sizes by role, requires shown by the walk, the
 * lineage path, effects and risks with their shapes and contexts. */
kl_status kl_lineage_extract_skills(kl_store *store, const kl_task *task, const char *doc_json,
                                    kl_extract_stats *stats, kl_error *err);

/* ---- roundtrip admission (docs/skill-card.md, "Admission") ---------------------------------- */

/* A trial judged: the card, the task, its verdict ("reproduced", "lost", "failed") and the gain
 * (time(base) / time(candidate); < 0 unknown). */
typedef void (*kl_admit_progress_fn)(void *user, const char *card, const char *task, const char *verdict,
                                     double gain);

typedef struct kl_admit_options {
    kl_store *store;              /* borrowed; the library and the lineages; required */
    kl_rewriter *rewriter;        /* borrowed; applies a card forward from the card alone; required */
    kl_judge_fn judge;            /* required (kl_gate_search_judge with the gate as user) */
    void *judge_user;
    kl_prepare_fn prepare;        /* optional: the candidates of a task compiled together first */
    const kl_task *const *tasks;  /* the tasks trials may run on (a card's own lineage needs its task) */
    unsigned ntasks;
    double min_gain;              /* cards whose recorded gain is below this are not tried (their gain is
                                     within noise: a trial could not tell); 0: 1.02 */
    unsigned max_other;           /* trials on other tasks' naive kernels per card, where the card's
                                     conditions hold at a site; 0: none */
    const char *only_id;          /* one card (its id), or NULL: every card */
    const char *probe_dir;        /* where derived tasks (a step's path shape) are written; NULL: the cache */
    volatile sig_atomic_t *interrupt;
    kl_admit_progress_fn progress;
    void *progress_user;
} kl_admit_options;

/* Admit the library: each card applied forward by the rewriter (a KL_REQ_APPLY request with the
 * card) to the simpler version of its own lineage, at its forward site, and — up to max_other —
 * to other tasks' naive kernels at a site where kl_skill_match_site holds; every candidate judged
 * against the version it was applied to (the own lineage's path shape where the step was
 * measured there). A trial reproduces a card when its gain is >= 1.0 and within
 * KL_ADMIT_TOLERANCE of the card's recorded gain (kl_admission_verdict); where the conditions do
 * not hold, the trial is recorded as not-applicable with the first failing predicate. Each card's
 * admission is stored (kl_skill_admission_put). *report_json (may be NULL): {cards: [{id,
 * transform, task, admission}], admitted, rejected, untried} (new string, free()). */
kl_status kl_lineage_admit(const kl_admit_options *opt, char **report_json, kl_error *err);

#ifdef __cplusplus
}
#endif
#endif
