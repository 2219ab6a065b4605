/* Private to src/lineage: the walk's document helpers, probing and card extraction. */
#ifndef KL_LINEAGE_INT_H
#define KL_LINEAGE_INT_H

#include <jansson.h>

#include "klineage/lineage.h"
#include "util/util.h"

#define KL_LINEAGE_FORMAT "klineage-lineage-1"

/* The walk's rules a document was made with (its "walk_rules"; absent: 1). 2: gains where the code
 * runs (a dispatch's general path deferred, its specialized path peeled first; a step off the
 * bench path measured at a shape that runs it). */
#define KL_WALK_RULES 2

/* A probe (or a step) is slower when the optimized side keeps less than this of the simpler
 * side's speed: t(simpler) / t(optimized) < 0.95. */
#define KL_SLOWER_BELOW 0.95

/* The store key of a walk: task name, expert text, rewriter. hex: 64 + NUL. */
void kl_lineage_key(const kl_task *task, const char *expert_text, const char *rewriter, bool full,
                    char hex[KL_HASH_HEX]);

/* Probing (probe.c). The probe shapes for a task: sizes not divisible by vector widths or
 * tiles, tiny, fewer rows than SMs, rows shorter than a warp — at most max, each within
 * the reference's budget. A JSON array of objects {size: value}. */
json_t *kl_probe_shapes(const kl_task *task, unsigned max);
/* The base shape probes vary one size of (the largest check shape), as a JSON object of sizes. */
json_t *kl_probe_base_shape(const kl_task *task);
/* Whether a shape (a JSON object of sizes) may be probed: every argument evaluates, and the
 * float64 reference stays within the probing budget there. */
bool kl_probe_shape_ok(const kl_task *task, const json_t *shape);

/* Write a derived task folder under dir whose bench shape is `shape` and whose check shapes are
 * just `shape` too, or (keep_checks) the task's own (task.json copied with "shapes" replaced;
 * reference and kernels copied). *task_dir: new string (free()). */
kl_status kl_probe_task_dir(const kl_task *task, const json_t *shape, bool keep_checks, const char *dir,
                            char **task_dir, kl_error *err);
/* A shape of task at which function fn of text runs (launch() run symbolically), close to the
 * bench shape: one size scaled by 2..32 or 1/2..1/32 (another scaled the other way, so the work
 * stays about the same), or set to a probe value; the cost (flops, bytes) at most eight times
 * the bench's. NULL when none is found. A JSON object of sizes (json_decref). */
json_t *kl_path_shape(const kl_task *task, const char *text, const char *fn);
/* Conditions from evidence: the shapes where the optimized side passed and where it failed
 * (what "wrong") or lost (what "slower"), each {shape, roles} — roles the observables of the
 * step's forward site at that shape (kl_step_observe). A condition is over a size by role
 * (docs/skill-card.md, "Observables"), never a size of the source task by name: divisibility
 * (correctness only) or a threshold with its bracket {role, fails, holds}. Returns an array of
 * {predicate, kind "probed"/"probed-perf", verified, because, evidence[], bracket}; an
 * "unexplained" condition when none separates. */
json_t *kl_probe_conditions(const json_t *passed, const json_t *failed, const char *what);

/* The forward site of a step (forward.c): in the simpler version (child), the rules' applicable
 * site of the step's transform nearest the edit parent -> child, or a site of it they find but
 * refuse to apply (refused: their reason); when there is none, where the edit is (found false,
 * why says so). */
typedef struct kl_fwd_site {
    bool found;
    char kernel[128];
    unsigned line;
    char site[160];
    json_t *features;             /* the rules' features of the site (owned), NULL when not found */
    json_t *params;               /* the rules' parameters there (owned) */
    unsigned edit_first, edit_last; /* the lines of child the edit touches */
    char why[240];
    char refused[240];            /* found, but the rules refuse to apply it there: why ("" otherwise) */
} kl_fwd_site;
kl_status kl_step_forward_site(const kl_task *task, const char *parent, const char *child, const char *transform,
                               const char *step_site, kl_fwd_site *out, kl_error *err);
void kl_fwd_site_release(kl_fwd_site *s);
/* The observables of the forward site in child at a shape (a JSON object of sizes by name;
 * NULL: the bench shape). *out: new object. */
kl_status kl_step_observe(const kl_task *task, const char *child, const kl_fwd_site *site, const json_t *shape,
                          json_t **out, kl_error *err);

/* A proposal's identity across versions (walk.c): "<transform>@<offset>:<hash of what the edit
 * removes and inserts>" — the part after ':' stays the same while the text around it moves. */
void kl_proposal_id(const char *transform, const char *parent, const char *child, char *buf, size_t size);

/* Text helpers (extract.c). The hunk that differs between two texts, as excerpts with a
 * line of context: *before and *after new strings. */
void kl_text_hunk(const char *before, const char *after, char **hb, char **ha, unsigned *line);

#endif
