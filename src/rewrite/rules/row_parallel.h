/* row-parallel's private interface: row_parallel.c (the rule, its sites, running one, and what both
 * sides share), row_parallel_apply.c (a row per thread, spread over lanes) and
 * row_parallel_remove.c (lanes given back one row each). Not for other transforms. */
#ifndef KL_RULES_ROW_PARALLEL_H
#define KL_RULES_ROW_PARALLEL_H

#include <stdint.h>

#include "rewrite/rules/rules.h"
#include "syntax/affine.h"

#define RP_MAXLOOP 16
#define RP_MAXRED 8
#define RP_MAXACC 64

static const TSNode row_parallel__null = {{0}, 0, 0};

/* ---- the applicable side: a row per thread ---- */

typedef struct rp_red {
    char var[64], op[16];
} rp_red;

typedef struct rp_loop {
    TSNode node;          /* for_statement / while_statement */
    bool is_while;
    char var[64];
    TSNode start;         /* the start value */
    TSNode update;        /* the increment (for: the update; while: the expression statement) */
    char start_text[128];
    rp_red reds[RP_MAXRED];
    unsigned nred;
} rp_loop;

typedef struct rp_acc {
    char array[64];
    char index[160];
    int loop;             /* -1: outside the row loops */
    bool write;
    TSNode node;
} rp_acc;

typedef struct rp_row {
    TSNode fn, body;      /* the kernel, its body */
    TSNode decl, init;    /* `T row = E;`, E */
    char row[64];
    TSNode guard;         /* the if */
    bool early;           /* `if (row >= R) return;` */
    TSNode rbody;         /* the row body: the if's compound, or the kernel body (early) */
    uint32_t from;        /* statements of rbody from this byte */
    rp_loop loops[RP_MAXLOOP];
    unsigned nloops;
    TSNode stores[RP_MAXLOOP];  /* statements done by one lane */
    unsigned nstores;
    rp_acc acc[RP_MAXACC];
    unsigned nacc;
    int64_t block;        /* the launches' block size */
    unsigned launches;
    char why[400];
} rp_row;

/* A 1-D compile-time block: a constant, `dim3(X)`, or a `dim3 b(X)` of the host function. */

/* ---- the present side: rows spread over lanes ---- */

typedef struct rp_sloop {
    TSNode node, start, update;  /* the loop, its start value, its update */
    TSNode start_rest;           /* the start without the lane (null: the start is the lane) */
    bool is_while;
    TSNode while_decl;           /* the while's declaration */
} rp_sloop;

typedef struct rp_present {
    TSNode fn, body;
    bool warp;                   /* lanes of a warp (else a block) */
    char lane[64];               /* the lane's name, or "threadIdx.x" */
    TSNode lane_decl;            /* `const int lane = threadIdx.x [% 32];` (null when threadIdx.x is used) */
    long long group;             /* 32, or the block size */
    TSNode row_decl, row_init;   /* W: `(E) / 32`; B: `blockIdx.x` (null when the kernel uses blockIdx.x directly) */
    TSNode row_e;                /* W: E */
    rp_sloop loops[RP_MAXLOOP];
    unsigned nloops;
    TSNode gone[32];             /* combine statements to delete */
    unsigned ngone;
    TSNode calls[16];            /* block-reduction helper calls: replaced by their first argument */
    unsigned ncalls;
    TSNode ifs[16];              /* `if (lane == 0) stmt` */
    unsigned nifs;
    TSNode shared[16];           /* __shared__ declarations only used by removed code */
    unsigned nshared;
    char why[400];
    char helper[64];
} rp_present;

/* row_parallel.c: shared by both sides */
/* The first reason wins: fmt into why unless it holds one already; false (a refusal). */
bool row_parallel__why(char *why, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A condition without its clause and parentheses. */
TSNode row_parallel__cond_expr(TSNode n);
bool row_parallel__op_is(const kl_rule_ctx *ctx, TSNode n, const char *op);
/* The expression of `X;`, or a null node. */
TSNode row_parallel__stmt_expr(TSNode st);
/* `v++`, `++v`, `v += K` (*step = K's node, else null): does n increment identifier v? */
bool row_parallel__increments(const kl_rule_ctx *ctx, TSNode n, const char *v, TSNode *step);
/* Delete a statement: its whole lines when alone on them. */
kl_status row_parallel__delete_stmt(const kl_rule_ctx *ctx, TSNode st, kl_edits *out);
/* A simple operand (identifier, number, call, field): no parentheses needed around it. */
bool row_parallel__simple_operand(TSNode n);
/* The only declarator of a declaration when it is `T name = value`, else null. */
TSNode row_parallel__single_init(TSNode decl);
/* A 1-D compile-time block: a constant, `dim3(X)`, or a `dim3 b(X)` of the host function. */
bool row_parallel__block_1d(const kl_rule_ctx *ctx, TSNode host, TSNode block, int64_t *v, char *w, size_t wn);
/* The 1-D compile-time block size every launch of kernel `name` uses (*bs; *n launches), or why not. */
bool row_parallel__launch_block(const kl_rule_ctx *ctx, const char *name, int64_t *bs, unsigned *n, char *why, size_t wn);
/* `T c = S;` as the statement before a while loop: the declarator's value, or null. */
TSNode row_parallel__decl_value_of(const kl_rule_ctx *ctx, TSNode st, const char *var);
/* The inverse of a grid multiplied by a factor: the factor, the range to replace, the grid without it. */
bool row_parallel__grid_unmul(const kl_rule_ctx *ctx, const kl_launch_site *l, TSNode *mult, uint32_t *a, uint32_t *b,
                              char *text, size_t size);

/* row_parallel_apply.c */
/* Does kernel fn give every thread one row (r filled; r->why says what stops the rewrite)? */
bool row_parallel__analyse_row(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, rp_row *r);
kl_status row_parallel__apply_row(const kl_rule_ctx *ctx, const kl_site *site, const rp_row *r, const json_t *params,
                                  kl_edits *out, kl_error *err);

/* row_parallel_remove.c */
/* Does kernel fn spread its rows over lanes (p filled; p->why says what stops the rewrite)? */
bool row_parallel__analyse_present(const kl_rule_ctx *ctx, TSNode fn, const char *name, rp_present *p);
kl_status row_parallel__remove_present(const kl_rule_ctx *ctx, const kl_site *site, const rp_present *p, kl_edits *out,
                                       kl_error *err);

#endif
