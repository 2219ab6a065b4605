/* coalesce's private pieces shared by its files: coalesce.c (the swap, the staged exchange's
 * apply, find/apply/remove) and coalesce_remove.c (the staged exchange taken out). */
#ifndef KL_RULES_COALESCE_H
#define KL_RULES_COALESCE_H

#include "rewrite/rules/rules_tree.h"

/* A replacement inside the text: [start, end) -> text (owned). */
typedef struct span_edit {
    uint32_t start, end;
    char *text;
} span_edit;

typedef struct span_edits {
    span_edit *items;
    unsigned count, cap;
    bool failed;
} span_edits;

void co_se_add(span_edits *e, uint32_t start, uint32_t end, const char *text);
void co_se_release(span_edits *e);
/* The text [a, b) with the edits inside it applied (edits must not overlap); NULL on overlap or
 * when memory runs out. */
char *co_se_splice(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, span_edits *e);
/* Text without blanks (for comparing definitions), a new string. */
char *co_squeeze(const char *s);
/* Is threadIdx.<c> (c 'x' or 'y') at n? */
bool co_is_thread_letter(const kl_rule_ctx *ctx, TSNode n, char c);

typedef struct staged_form {
    TSNode decl;           /* the tile's declaration (top level) */
    char tile[128];
    TSNode barrier;        /* the one top-level __syncthreads(); */
    TSNode store;          /* T[i1][j1], left of `= v` before the barrier */
    TSNode write;          /* `y[w] = T[i2][j2]` after it */
    TSNode i1, j1, i2, j2;
    /* each subscript (i1, j1, i2, j2) is a variable (base) or a row of a loop over rows,
     * `base + v` (the blog-style `tile[threadIdx.y + j][threadIdx.x]`, v stepping from 0):
     * its base and v (a null node for a plain variable) */
    TSNode base[4], var[4];
    bool exchange;         /* a transposed exchange by its subscripts (listed even when refused) */
} staged_form;

/* 1: f holds the staged form; 0: it holds none (no top-level barrier after a 2-D __shared__
 * tile); -1: it looks staged but cannot be undone here (why says why). */
int co_find_staged(const kl_rule_ctx *ctx, const rt_func *f, staged_form *sf, char *why, size_t size);
kl_status co_remove_staged(const kl_rule_ctx *ctx, const rt_func *f, const staged_form *sf, kl_edits *out,
                           kl_error *err);

#endif
