/* coarsen (coarsen.c) split along its forms: what the parts share. Private to
 * src/rewrite/rules/coarsen*.c: the names are coarsen__*. coarsen.c holds the form of K statements
 * written out (the samples' pair), the launches' grids and the rule; coarsen_count.c the form of a
 * named count K (loops over u < K, per-thread arrays of K, tiles of K blocks); coarsen_vector.c the
 * form of W consecutive elements gathered into a float4 / float2 and summed. */
#ifndef KL_COARSEN_H
#define KL_COARSEN_H
#include "rewrite/rules/rules.h"
#include "syntax/affine.h"

#define COARSEN_MAXLOOPS 8
#define COARSEN_MAXTILES 4

/* A kernel's named count: K, its value, the block, and what K reaches. */
typedef struct coarsen__count {
    char count[64];                   /* K as written in the kernel (after the canonical form) */
    int64_t k;                        /* its value */
    int64_t block;                    /* B: the launches' block */
    TSNode loops[COARSEN_MAXLOOPS];   /* the for loops over u < K */
    unsigned nloops;
    char vars[COARSEN_MAXLOOPS][64];  /* their variables */
    char arrays[4][64];               /* the per-thread arrays of K */
    unsigned narrays;
    char tiles[COARSEN_MAXTILES][64]; /* locals initialised to a product with K (`TILE`) */
    unsigned ntiles;
    bool tiled;                       /* K * B seen where a tile stands */
    char why[300];                    /* not empty: the form is there but cannot be taken apart */
} coarsen__count;

/* The count form in kernel fn: true when found (out->why says why it cannot be removed, if so). */
bool coarsen__count_analyse(const kl_rule_ctx *ctx, TSNode fn, const char *kernel, kl_affine_ctx *ax,
                            coarsen__count *out);
/* The kernel's edits: every use of the count written 1. */
kl_status coarsen__count_edits(const kl_rule_ctx *ctx, TSNode fn, const coarsen__count *s, kl_edits *out);
/* The launches' grids of kernel: `(A + K * B - 1) / (K * B)` -> `(A + B - 1) / B`, anything else G
 * -> `K * (G)`; coef (0: none) is the index's block step, checked against K times each block. */
kl_status coarsen__grid_edits(const kl_rule_ctx *ctx, const char *kernel, unsigned k, int64_t coef, kl_edits *out,
                              kl_error *err);
/* Is s one of the n names of list? */
bool coarsen__in_list(char list[][64], unsigned n, const char *s);
/* The vector form (coarsen_vector.c): finding (site NULL: into sites) or removing (site: into
 * edits, *found set when the site is this kernel's). */
kl_status coarsen__vector_visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, kl_sites *sites,
                                const kl_site *site, kl_edits *edits, kl_error *err, bool *found);
#endif
