/* grid-stride (grid_stride.c) split along its forms: what the parts share. Private to
 * src/rewrite/rules/grid_stride*.c: the names are grid_stride__*. grid_stride.c holds the single loop
 * both ways, the helpers, find, the launches and the running of a site; grid_stride_group.c several
 * loops over one grid (for and while forms, remove only): their analysis, the proof that each runs
 * at most once per thread, and their removal. */
#ifndef KL_GRID_STRIDE_H
#define KL_GRID_STRIDE_H

#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"

#define GS_MAXLOOPS 8
#define GS_MAXRANGES 48
#define GS_MAXACCUM 8

enum { GS_OK = 0, GS_FORM = 1, GS_PROOF = 2 };

/* What one kernel holds: the index, its bound, the body, and where they are. */
typedef struct grid_stride__kernel {
    bool found;             /* a recognised shape (either direction) */
    bool present;           /* a grid-stride loop (else: one element per thread) */
    bool early_return;      /* applicable shape: `if (i >= n) return;` then the rest */
    TSNode decl;            /* the declaration of i (applicable) or the for's initializer (present) */
    TSNode stmt;            /* the if_statement / for_statement */
    TSNode body;            /* the if's consequence / the for's body */
    TSNode last;            /* early return: the last statement of the function */
    char *var, *init, *cond, *stride, *bound, *type;
    int64_t coef;           /* the index's block coefficient when a constant (0: blockDim.x) */
    int64_t mul;            /* with coef 0: the index's block coefficient is mul * blockDim.x (0 or 1: blockDim.x) */
    bool group;             /* present, several loops or a non-standard one: grid_stride__analyse_group */
    unsigned ng;
    TSNode gl[8];           /* the loops */
    int gkind[8];           /* 0 an unrolled main loop (goes), 1 over an index declared before, 2 declaring it */
    bool gkeep[8];          /* a while whose step stays (its index is read after it) */
    bool block0;            /* the kernel tests `blockIdx.x == 0`: the recomputed grid is at least one block */
    char why[300];          /* not empty: the shape is there but cannot be rewritten */
} grid_stride__kernel;

/* Identifier uses of `name` in n outside [skip_a, skip_b) and outside the allowed ranges. */
typedef struct grid_stride__use_scan {
    const kl_source *src;
    const char *name;
    const uint32_t *ra, *rb;
    unsigned nr;
    uint32_t skip_a, skip_b;
    unsigned line;          /* the first use outside, 0 when none */
    const char *prefix;     /* instead of name: field expressions starting with this ("blockIdx") */
} grid_stride__use_scan;

/* A `while (cond) { …; i += G; }` loop's step: the last statement of its body when that is an
 * expression statement (else a null node). *expr receives the expression. */
TSNode grid_stride__while_step(TSNode s, TSNode *expr);
/* A for's or a while's condition (a while's without the clause's parentheses). */
TSNode grid_stride__loop_cond(TSNode s);
/* The body checks of a loop that becomes one element per thread: the statements from `from` to `to`
 * (siblings) of the loop `stmt` in the function body fbody, over the index var; why says what fails. */
void grid_stride__check_body(const kl_source *src, TSNode fbody, TSNode stmt, TSNode from, TSNode to, const char *var,
                             char *why, size_t size);
/* The same, collecting the locals declared before the loop that the body only adds to (`s += e`: a
 * partial sum) into accum (new strings, at most GS_MAXACCUM) instead of refusing them. */
void grid_stride__check_body_acc(const kl_source *src, TSNode fbody, TSNode stmt, TSNode from, TSNode to,
                                 const char *var, char **accum, unsigned *naccum, char *why, size_t size);
/* The type text of a declaration (new string). */
char *grid_stride__decl_type(const kl_source *src, TSNode decl);
/* Does n's text contain needle? */
bool grid_stride__has_text(const kl_source *src, TSNode n, const char *needle);
/* Does fn test `blockIdx.x == 0` (or `!= 0`)? Such a test does not depend on the grid's size, as long
 * as there is a block. */
bool grid_stride__has_block0(const kl_source *src, TSNode fn);
/* kl_ast_walk visitor over a grid_stride__use_scan. */
bool grid_stride__use_visit(TSNode n, void *user);
/* The grid's size must not matter outside the loops (see grid_stride.c). */
void grid_stride__grid_free(const kl_rule_ctx *ctx, TSNode fn, uint32_t *ra, uint32_t *rb, unsigned *nr, char *why,
                            size_t size);

/* The partial sums in names (locals or local arrays added to inside [ra, rb)) reach memory by sums
 * only, and nothing is stored to global memory but by atomicAdd (grid_stride_group.c, "partial
 * sums"); why says what fails. Shared with coarsen.c. */
void grid_stride__partials_by_sums(const kl_rule_ctx *ctx, TSNode fn, kl_affine_ctx *ax, char *const *names,
                                   unsigned n, const uint32_t *ra, const uint32_t *rb, unsigned nr, char *why,
                                   size_t size);
/* grid_stride_group.c: fills k's group fields and returns GS_OK, or says why (GS_FORM: not this
 * shape; GS_PROOF: the shape, but not provably one element per thread). */
int grid_stride__analyse_group(const kl_rule_ctx *ctx, TSNode fn, kl_affine_ctx *ax, const TSNode *loops, unsigned nl,
                               grid_stride__kernel *k, char *why, size_t size);
/* Removes several loops: an unrolled main loop goes, the others become `if (cond) body`. */
kl_status grid_stride__remove_group(const kl_rule_ctx *ctx, const grid_stride__kernel *k, kl_edits *out);

#endif
