/* Loops over the rows of a tile that step by a block extent from 0 (row_step.c; read by block-size and coalesce). */
#ifndef KL_RULES_ROW_STEP_H
#define KL_RULES_ROW_STEP_H

#include <stdbool.h>
#include <stddef.h>

#include "syntax/syntax_int.h"

/* Is `loop` (in kernel fn; `for (v = 0; v < B; v += E)`, E a block extent of dimension dim)
 * a loop over rows of a tile: its body reads threadIdx.<dim> (also through locals such as
 * `y = blockIdx.y * TILE + threadIdx.y`) and v only as their sum `y + v`, and never changes v?
 * Then thread t runs rows t, t + E, … and the block covers [0, B) once whenever E divides B.
 * False (with why set when the loop steps v but reads it otherwise) when it is not. */
bool kl_row_step_loop(const kl_source *src, TSNode fn, TSNode loop, const char *var, int dim, char *why,
                         size_t size);

#endif
