/* double-buffer: what its files share (double_buffer.c: the analysis, the present forms, the rule;
 * double_buffer_ours.c: the form apply writes, both ways; double_buffer_staged.c: the experts'
 * register staging through lambdas, removed; double_buffer_ring.c: the cp.async rings, removed). */
#ifndef KL_RULES_DOUBLE_BUFFER_H
#define KL_RULES_DOUBLE_BUFFER_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/tile_text.h"

#define NAME "double-buffer"
#define MAXSTMT 64

#define DB_TRY(expr)                                                                                 \
    do {                                                                                             \
        kl_status s_ = (expr);                                                                       \
        if (s_ != KL_OK) return s_ == KL_ERR_NOMEM ? kl_error_set(err, s_, "out of memory") : s_;    \
    } while (0)

typedef struct db_array {
    TSNode decl, ident, first;   /* the declaration, its name, the outermost array declarator's size */
    char name[64], elem[64];
} db_array;

typedef struct db_load {
    TSNode stmt;                 /* the statement of the loop body (a kl_i / kl_j nest or the assignment) */
    TSNode inner;                /* the innermost expression statement */
    TSNode assign;
    int arr;                     /* the shared array written */
    char vars[2][32];
    long long trips[2];
    unsigned nvars;
} db_load;

typedef struct db {
    const kl_rule_ctx *ctx;
    rt_func f;
    TSNode loop, body, cond, sync1, sync2;
    TSNode st[MAXSTMT];
    unsigned n, isync1;
    db_array arrs[8];
    unsigned narrs;
    db_load loads[8];
    unsigned nloads;
    char var[64], vtype[64], start[64], step[64];
} db;

typedef enum db_form { DB_NONE, DB_REGS, DB_CP, DB_EXPERT, DB_RING } db_form;

typedef struct db_present {
    db_form form;
    TSNode loop, body, pro, prosync, curdecl, pre, post, sync;
    TSNode st[MAXSTMT];
    unsigned n;
    char var[64], cur[64];
    char nextx[96];  /* the staged form's next stage: `cur ^ 1`, `(s + 1) & 1` */
    /* the ring (DB_RING): the wait, the prefetch's call, the commit; the ring depth and the
     * local naming the tile the prefetch fetches */
    TSNode wait, call, commit, fence;
    unsigned icompute;
    char why[240];   /* a ring recognized but not removable (its reader is asynchronous) */
    char depth[64], next[64];
    db_array arrs[8];
    unsigned narrs;
    bool staged[8];
} db_present;

/* double_buffer.c */
void db_shared_arrays(const kl_rule_ctx *ctx, TSNode body, db_array *arrs, unsigned *n);
int db_array_index(const db *d, const char *name);
int db_analyse(const kl_rule_ctx *ctx, const rt_func *f, db *d, char *why, size_t size);
bool db_decl_named(const kl_rule_ctx *ctx, TSNode s, char *name, size_t size, TSNode *value);
bool db_find_present(const kl_rule_ctx *ctx, const rt_func *f, db_present *p);
void db_stmt_with_comments(const kl_rule_ctx *ctx, TSNode s, uint32_t *start, uint32_t *end);
kl_status db_drop_stage_decls(const kl_rule_ctx *ctx, const db_present *p, kl_edits *out, kl_error *err);
/* double_buffer_ours.c */
bool db_cp_async_ok(const db *d, const db_load *L, char *why, size_t size);
kl_status db_apply_edits(const db *d, bool cp, kl_edits *out, kl_error *err);
kl_status db_remove_ours(const kl_rule_ctx *ctx, const rt_func *f, const db_present *p, kl_edits *out, kl_error *err);
/* double_buffer_staged.c */
kl_status db_remove_staged(const kl_rule_ctx *ctx, const rt_func *f, const db_present *p, kl_edits *out, kl_error *err);
/* double_buffer_ring.c */
bool db_find_ring(const kl_rule_ctx *ctx, const rt_func *f, TSNode *st, unsigned n, db_present *p);
kl_status db_remove_ring(const kl_rule_ctx *ctx, const rt_func *f, const db_present *p, kl_edits *out, kl_error *err);

#endif
