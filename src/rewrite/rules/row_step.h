/* Loops over the rows of a tile that step by a block extent from 0 (row_step.c; read by block-size and coalesce). */
#ifndef KL_RULES_ROW_STEP_H
#define KL_RULES_ROW_STEP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "syntax/syntax_int.h"

/* Is `loop` (in kernel fn; `for (v = 0; v < B; v += E)`, E a block extent of dimension dim)
 * a loop over rows of a tile: its body reads threadIdx.<dim> (also through locals such as
 * `y = blockIdx.y * TILE + threadIdx.y`) and v only as their sum `y + v`, and never changes v?
 * Then thread t runs rows t, t + E, … and the block covers [0, B) once whenever E divides B.
 * False (with why set when the loop steps v but reads it otherwise) when it is not. */
bool kl_row_step_loop(const kl_source *src, TSNode fn, TSNode loop, const char *var, int dim, char *why,
                         size_t size);

/* A loop's bound when its condition is `v < B` (also as the grammar's template misparse), or null. */
TSNode kl_loop_bound(const kl_source *src, TSNode loop, const char *var);
/* A loop's start: S of its initializer `T v = S` (the first declarator) or `v = S`, or null. */
TSNode kl_loop_start(TSNode loop);

/* block-size's check of a loop stepping v by a block extent (step: its text; sdim: the extent's
 * dimension, -1 when one constant names both), old kernel against the changed one (nsrc, nloop,
 * nfn): false when it is no row-step loop (from 0, kl_row_step_loop); else true, with why set
 * when the block cannot change to ext_new (the bound not a compile-time multiple of the old
 * extent, or not of the new one, or the body reading v or the row otherwise). */
bool kl_row_step_check(const kl_source *src, TSNode fn, TSNode loop, const kl_source *nsrc, TSNode nloop, TSNode nfn,
                       const char *var, const char *step, int sdim, const int64_t ext_old[2], const int64_t ext_new[2],
                       char *why, size_t size);

#endif
