/*
 * The forward optimizer: from a kernel (the task's naive one, or any file with the task's
 * launch()), apply one transform per step, each step judged by the gate against the version
 * it came from, under a budget of gate calls; return the fastest version that passed
 * (docs/optimize.md).
 *
 * The search is best-first over versions: each round judges one candidate — the untried
 * proposal with the highest expected time saved, cum(version) × E(proposal) — and a
 * candidate that passes becomes a version the search can go on from. Policies differ only
 * in E and in the order of equal scores:
 *   skills — E from the skill cards that match the proposal's site (their conditions
 *            evaluated on this kernel and task), their measured effects and risks, and the
 *            lineage path of the card applied last; a card whose condition fails is not
 *            tried, and the run says which predicate failed at which shape;
 *   memory — E from earlier forward attempts of the blind policy on other tasks
 *            (site and kernel features, transform, parameters → gain or failure), by
 *            feature similarity, with no conditions and no lineage order;
 *   blind  — E = 1: the proposals in a seeded random order.
 *
 * A run is one document (kind "optimize") stored after every judgement: killed at any
 * point, the same call resumes it and ends with the same result (the search is a function
 * of its inputs and the judgements; stored judgements are reused in order).
 */
#ifndef KLINEAGE_OPTIMIZE_H
#define KLINEAGE_OPTIMIZE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include "klineage/gate.h"
#include "klineage/klineage.h"
#include "klineage/rewrite.h"
#include "klineage/skills.h"
#include "klineage/store.h"
#include "klineage/task.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kl_policy { KL_POLICY_SKILLS = 0, KL_POLICY_MEMORY = 1, KL_POLICY_BLIND = 2 } kl_policy;
#define KL_POLICY_COUNT 3

/* "skills", "memory", "blind". Never NULL. */
const char *kl_policy_name(kl_policy policy);
/* The policy of a name; KL_ERR_INVALID naming the three otherwise. */
kl_status kl_policy_parse(const char *name, kl_policy *out, kl_error *err);

/* Defaults (docs/optimize.md). */
#define KL_OPTIMIZE_BUDGET 40      /* gate calls */
#define KL_OPTIMIZE_BEAM 4         /* versions kept open */
/* The skills ranking a run uses unless told (--ranking): 5, measured and recorded on the H200
 * (docs/optimize.md); 4, 3 and 2, the ones before, are recorded too. */
#define KL_OPTIMIZE_RANKING 5u
#define KL_OPTIMIZE_MIN_GAIN 1.02  /* a new best is at least this much faster than the last */
#define KL_OPTIMIZE_KEEP_FLOOR 0.90 /* a passing candidate at least this fast (over its parent) is
                                       kept as a version to go on from, even when it is no faster */

typedef enum kl_optimize_event {
    KL_OPT_START,      /* text: what is optimized, with which policy */
    KL_OPT_ROUND,      /* one judgement done: round, used, budget, best */
    KL_OPT_NOTE,       /* text: something worth saying (a resume, a skipped card) */
    KL_OPT_DONE
} kl_optimize_event;

typedef struct kl_optimize_progress {
    unsigned round, used, budget;
    double best;          /* best cumulative speedup over the start so far */
    const char *text;     /* one line */
} kl_optimize_progress;
typedef void (*kl_optimize_progress_fn)(void *user, kl_optimize_event ev, const kl_optimize_progress *p);

typedef struct kl_optimize_options {
    const char *from_path;       /* the start: NULL for the task's naive kernel */
    kl_policy policy;
    unsigned budget;             /* gate calls, the final check of the returned kernel included; 0: 40 */
    double time_s;               /* stop after this many seconds (the run stays resumable); 0: none */
    unsigned beam;               /* versions kept open; 0: KL_OPTIMIZE_BEAM */
    unsigned patience;           /* stop after this many judgements without a new best; 0: never */
    double min_gain;             /* 0: KL_OPTIMIZE_MIN_GAIN */
    uint64_t seed;               /* blind order and ties */
    const char *leave_out;       /* a task whose lineages (cards) and runs (memory) are not used */
    const char *const *memory_tasks; /* memory: only runs on these tasks (NULL-terminated); NULL: any
                                        other task */
    bool admitted_only;          /* skills: only cards whose admission passed */
    unsigned ranking;            /* skills: the ranking's revision, 2 to 5 (docs/optimize.md);
                                    0: KL_OPTIMIZE_RANKING. Part of the run's key */
    bool sanitize_final;         /* judge the returned kernel with the sanitizer stages (default
                                    in the CLI: on); costs no extra call: it is the final check */
    const kl_skill_list *library;/* skills: the cards (borrowed); NULL: loaded from the store */
    kl_rewriter *rewriter;       /* borrowed; required */
    kl_store *store;             /* borrowed; required */
    kl_judge_fn judge;           /* required: kl_gate_search_judge with the gate, or a stand-in */
    void *judge_user;
    kl_prepare_fn prepare;       /* optional: compile the next candidates in parallel */
    kl_judge_many_fn judge_many; /* optional: judge several candidates at once (several GPUs) */
    unsigned ahead;              /* with judge_many: the candidates judged at once, the one the
                                    search takes now and those it would take next if nothing
                                    changed (kl_gate_workers); 0 or 1: one at a time. The run
                                    is the same either way: a judgement made ahead is used when
                                    the search reaches its candidate and counts then */
    unsigned prepare_batch;      /* candidates prepared at once; 0: 16 */
    bool restart;                /* forget a stored run with the same key and start again */
    bool restart_older;          /* start again only a stored run made by another revision of the
                                    search (docs/optimize.md); one of this revision is taken up */
    volatile sig_atomic_t *interrupt; /* set (SIGINT) to stop between judgements */
    kl_optimize_progress_fn progress;
    void *progress_user;
} kl_optimize_options;

/* Optimize, or resume the stored run with the same key (docs/optimize.md, "Runs").
 * On KL_OK, KL_ERR_INTERRUPTED or KL_ERR_UNMEASURED, *doc_json (if not NULL) receives the run
 * document as stored (new string, free()). Errors: a start file without the task's launch()
 * signature, a task without a naive kernel and no --from, an empty library for the skills
 * policy, budget 1 or less with nothing judged yet, a stored run that the current rewriter
 * or library no longer reproduces (say --restart). */
kl_status kl_optimize_run(const kl_task *task, const kl_optimize_options *opt, char **doc_json, kl_error *err);

/* The run document as a report for people: the step table (round, card, transform, site,
 * parameters, verdict, gain, cumulative speedup), the cards skipped and why, the stop
 * reason and the result. New string (free()); NULL when out of memory or not a run. */
char *kl_optimize_markdown(const char *doc_json);

/* The returned kernel's source from a run document (new string, free()), or NULL. */
char *kl_optimize_best_source(const char *doc_json);

/* The memory the memory policy retrieves from: one record per judged proposal of every
 * finished, stored run of the blind policy whose task is neither `task_name` nor
 * `leave_out` (either may be NULL), whose budget is `budget` (0: any) and, when `tasks` is
 * not NULL, whose task is one of them (NULL-terminated). A JSON array as text (new string,
 * free()) — docs/optimize.md, "Memory". */
kl_status kl_optimize_memory_json(kl_store *store, const char *task_name, const char *leave_out, unsigned budget,
                                  const char *const *tasks, char **json, kl_error *err);

#ifdef __cplusplus
}
#endif
#endif
