/* Private to src/lineage: the walk's document helpers, probing and card extraction. */
#ifndef KL_LINEAGE_INT_H
#define KL_LINEAGE_INT_H

#include <jansson.h>

#include "klineage/lineage.h"
#include "util/util.h"

#define KL_LINEAGE_FORMAT "klineage-lineage-1"

/* The store key of a walk: task name, expert text, rewriter. hex: 64 + NUL. */
void kl_lineage_key(const kl_task *task, const char *expert_text, const char *rewriter, bool full,
                    char hex[KL_HASH_HEX]);

/* Probing (probe.c). The probe shapes for a task: sizes not divisible by vector widths or
 * tiles, tiny, fewer rows than SMs, rows shorter than a warp — at most max, each within
 * the reference's budget. A JSON array of objects {size: value}. */
json_t *kl_probe_shapes(const kl_task *task, unsigned max);
/* Write a derived task folder under dir whose check and bench shapes are just `shape`
 * (task.json copied with "shapes" replaced; reference and kernels copied). *task_dir: new
 * string (free()). */
kl_status kl_probe_task_dir(const kl_task *task, const json_t *shape, const char *dir, char **task_dir,
                            kl_error *err);
/* Conditions from evidence: shapes where the optimized side passed and failed (wrong) or
 * lost (slower). Returns an array of {predicate, kind:"probed", because, evidence[]}. */
json_t *kl_probe_conditions(const kl_task *task, const json_t *passed, const json_t *failed, const char *what);

/* Text helpers (extract.c). The hunk that differs between two texts, as excerpts with a
 * line of context: *before and *after new strings. */
void kl_text_hunk(const char *before, const char *after, char **hb, char **ha, unsigned *line);

#endif
