/* register-tile (register_tile.c) split along the forms it rewrites: what the parts share. Private to
 * src/rewrite/rules/register_tile*.c: the names are register_tile__*. register_tile.c holds the rule
 * (find, running a site); register_tile_simple.c the one-output-per-thread form (launches, text, apply
 * and remove); register_tile_general.c the general register-tiled GEMM of any author (remove);
 * register_tile_frag.c the per-warp fragment tile (remove); register_tile_split.c a thread's tile split over
 * more blocks one dimension at a time (remove). */
#ifndef KL_REGISTER_TILE_H
#define KL_REGISTER_TILE_H

#include "rewrite/rules/tile_text.h"

/* Return a failing status (out of memory named in err). */
#define RT_TRY(expr)                                                                                 \
    do {                                                                                             \
        kl_status s_ = (expr);                                                                       \
        if (s_ != KL_OK) return s_ == KL_ERR_NOMEM ? kl_error_set(err, s_, "out of memory") : s_;    \
    } while (0)
#define MAXSTMT 64
#define MAXLOCAL 48

#define RG_TILE 16
#define RG_MAXG 16

typedef struct register_tile__rt_local {
    char name[64];
    TSNode decl;
    TSNode value;          /* may be null */
    int tside;             /* the thread index it moves with: 0 none, 1 p, 2 q */
    int bside;             /* the block index it depends on: 0 none, 1 p, 2 q */
} register_tile__rt_local;

typedef struct register_tile__rt_tile {
    TSNode decl;
    char name[64], elem[64];
    TSNode dims[2];
    int grow;              /* the dimension indexed by the thread (0 or 1) */
    long long grow_val;
    char stride[64];       /* its size as text (the stride of the virtual threads) */
    int side;              /* 1: the A tile (p), 2: the B tile (q) */
} register_tile__rt_tile;

typedef struct register_tile__rt {
    const kl_rule_ctx *ctx;
    rt_func f;
    char p, q;             /* 'x' / 'y' */
    TSNode stmts[MAXSTMT];
    unsigned nstmts, kidx;
    TSNode kloop, inner, upd, e1, e2, sync1, sync2;
    TSNode loads[8];
    int load_side[8];
    unsigned nloads;
    register_tile__rt_tile tiles[2];
    unsigned ntiles;
    register_tile__rt_local locals[MAXLOCAL];
    unsigned nlocals;
    int acc;
    char acc_type[64];
} register_tile__rt;

/* The substitutions for a statement repeated over i (side p) and/or j (side q). */
typedef struct register_tile__subs {
    tt_pair pairs[2 * MAXLOCAL + 8];
    char buf[2 * MAXLOCAL + 8][160];
    unsigned n;
} register_tile__subs;

typedef struct register_tile__rt_present {
    TSNode decl, init;      /* `T acc[TM][TN];` and the loop nest filling it */
    char acc[64];
    long long tm, tn;
    char p;                 /* the letter multiplied by TM */
} register_tile__rt_present;

typedef struct register_tile__rg_guard {
    char lhs[160];         /* normalised: no blanks, no outer parentheses */
    TSNode bound;
} register_tile__rg_guard;

typedef struct register_tile__rg_operand {
    char ptr[64];
    TSNode at;             /* the subscript P[...] */
    char x[160], y[160];   /* normalised coordinates: index = X * LD + Y */
    TSNode ld;
    char cast[48];         /* "(size_t)" when X was cast, else "" */
    TSNode bx, by;         /* their bounds */
    TSNode zero;           /* loads: the value outside */
} register_tile__rg_operand;

typedef struct register_tile__rg {
    TSNode acc_decl, update, fill;
    char acc[64], acc_type[64], elem[64];
    long long tm, tn;
    unsigned nshared;
    register_tile__rg_operand op[3];      /* two reads (in text order), the store */
    unsigned nreads;
} register_tile__rg;

/* The roles: which read is A, which coordinate of each is k, which of C is the row. */
typedef struct register_tile__rg_roles {
    int a;                 /* index of the A operand in op[0..1] */
    bool a_kx, b_kx;       /* the k coordinate is X (else Y) */
    bool c_rowx;           /* C's row is X */
} register_tile__rg_roles;

/* What remove writes in place of a recognised product, as texts (register_tile__rg_write): the
 * one-output-per-thread shared-tile GEMM of the form smem-tile apply writes. */
typedef struct register_tile__rg_text {
    const register_tile__rg_operand *a, *b, *c;   /* A, B, C: their pointer and index cast */
    const char *lda, *ldb, *ldc;                  /* their strides */
    const char *m, *n, *k;                        /* the product's sizes */
    const char *elem;                             /* the tiles' element type */
    const char *acc_type, *acc, *acc_zero;        /* `acc_type acc = acc_zero;` */
    const char *zero_a, *zero_b;                  /* the value of an element outside A, outside B */
    const char *cvt_in, *cvt_out;                 /* "" or the conversion of a tile element to the product's
                                                   * type, of the accumulator to C's */
} register_tile__rg_text;

/* How the elements of an accumulator array are written: updates `acc[..] += x * y` (the last one),
 * zero fills `acc[..] = 0` (the last one's value), other writes; and whether blockIdx.z or
 * gridDim.z is read (a batched or split product). */
typedef struct register_tile__rg_acc_writes {
    unsigned updates, fills, others;
    TSNode update, fill;
    bool zuse;
} register_tile__rg_acc_writes;

typedef struct register_tile__rf {
    TSNode acc_decl, call;
    const rt_func *helper;
    char acc[64], cvt_out[64];
    register_tile__rg_operand op[3];          /* A-or-B reads (in the helper), the store (in the kernel) */
    char bx[3][96], by[3][96]; /* the bounds as the kernel names them */
    TSNode kbx[3], kby[3];     /* kernel-side nodes of the bounds (null for constants of the helper) */
    char ld[3][96];            /* the strides as the kernel names them */
    char elem[64];
    unsigned nreads;
} register_tile__rf;

int register_tile__analyse(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rt *a, char *why, size_t size);
kl_status register_tile__launch_edits(const register_tile__rt *a, bool apply, long long tm, long long tn, kl_edits *out, kl_error *err,
                              char *why, size_t size);
kl_status register_tile__rt_apply_edits(const register_tile__rt *a, long long tm, long long tn, kl_edits *out, kl_error *err);
bool register_tile__is_kl_loop(const kl_rule_ctx *ctx, TSNode f, const char *var);
bool register_tile__find_present(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rt_present *pr);
kl_status register_tile__rt_remove_edits(const kl_rule_ctx *ctx, const rt_func *f, const register_tile__rt_present *pr, kl_edits *out,
                                 kl_error *err);
TSNode register_tile__rg_strip(TSNode n);
/* register_tile_exit.c: on a kernel the splits left with one output per thread (accumulator acc), the
 * store's tests as early returns and the element functions' tests of the same row and column dropped;
 * KL_ERR_NOT_APPLICABLE when there is nothing to drop or it cannot be shown sound. */
kl_status register_tile__sp_exit_edits(const kl_rule_ctx *ctx, const rt_func *f, const char *acc, kl_edits *out);
void register_tile__rg_norm(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size);
bool register_tile__rg_invariant(const kl_rule_ctx *ctx, const rt_func *f, TSNode e);
void register_tile__rg_add_cond(const kl_rule_ctx *ctx, TSNode cond, bool negate, register_tile__rg_guard *g, unsigned *ng);
bool register_tile__rg_skip_if(const kl_rule_ctx *ctx, TSNode s, TSNode *cond);
bool register_tile__rg_operand_index(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rg_operand *o, const register_tile__rg_guard *g, unsigned ng,
                             char *why, size_t size);
bool register_tile__rg_index_split(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rg_operand *o, TSNode idx, const char *extra,
                           const register_tile__rg_guard *g, unsigned ng, char *why, size_t size);
bool register_tile__rg_zero(const kl_rule_ctx *ctx, TSNode v);
bool register_tile__rg_detect(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rg *g);
int register_tile__rg_analyse(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rg *g, char *why, size_t size);
bool register_tile__rg_same(const kl_rule_ctx *ctx, TSNode a, TSNode b);
/* Is n an element of acc, `depth` subscripts deep? */
bool register_tile__rg_acc_elem(const kl_rule_ctx *ctx, TSNode n, const char *acc, int depth);
/* Count node n into w (register_tile__rg_acc_writes); _scan: every node of body, w cleared first. */
void register_tile__rg_acc_note(const kl_rule_ctx *ctx, TSNode n, const char *acc, int depth, register_tile__rg_acc_writes *w);
void register_tile__rg_acc_scan(const kl_rule_ctx *ctx, TSNode body, const char *acc, int depth, register_tile__rg_acc_writes *w);
/* Is n inside the first branch of `if (T)` (in_else: its else branch), T a template parameter of f? */
bool register_tile__in_template_if(const kl_rule_ctx *ctx, const rt_func *f, TSNode n, bool in_else);
/* The guards under which n runs in f (conditions `x < bound` of enclosing `?:` and `if`s, skipped
 * cases of earlier `if (c) continue;`); false when n sits in an else branch (template_else: other
 * than that of a template `if (T)`). */
bool register_tile__rg_guards(const kl_rule_ctx *ctx, const rt_func *f, TSNode n, bool template_else,
                              register_tile__rg_guard *g, unsigned *ng);
/* The roles of op[0..2] (two reads, the store) from their bounds as text (bx[k], by[k]): the bound
 * the reads share is K, M pairs A with C's row, N B with C's column; not applicable when no
 * assignment fits or several do. */
kl_status register_tile__rg_solve(const register_tile__rg_operand op[3], const char *const bx[3], const char *const by[3],
                                  register_tile__rg_roles *out, kl_error *err);
/* Replace f's body with t's product in roles r and relaunch f over C (Mb, Nb: its bounds of C's rows
 * and columns; no_smem: a dynamic shared memory size becomes 0). */
kl_status register_tile__rg_write(const kl_rule_ctx *ctx, const rt_func *f, const register_tile__rg_roles *r,
                                  const register_tile__rg_text *t, TSNode Mb, TSNode Nb, bool no_smem, kl_edits *out,
                                  kl_error *err);
void register_tile__rg_name(const kl_rule_ctx *ctx, const rt_func *f, const char *base, char *out, size_t size);
kl_status register_tile__rg_remove_edits(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rg *g, kl_edits *out, kl_error *err);
kl_status register_tile__rg_relaunch(const kl_rule_ctx *ctx, const rt_func *f, TSNode Mb, TSNode Nb, bool no_smem, kl_edits *out,
                             kl_error *err);
bool register_tile__rf_detect(const kl_rule_ctx *ctx, const rt_func *f, register_tile__rf *r);
int register_tile__rf_analyse(const kl_rule_ctx *ctx, const rt_func *f, const rt_func *fs, unsigned nf, register_tile__rf *r, char *why,
                      size_t size);
kl_status register_tile__rf_remove_edits(const kl_rule_ctx *ctx, const rt_func *f, const rt_func *fs, unsigned nf, register_tile__rf *g,
                                 kl_edits *out, kl_error *err);

/* register_tile_stencil.c: the stencil form (several outputs per thread over a constant of the file),
 * remove only. Sites carry `form: stencil` and the constant in their features. */
kl_status register_tile__rs_find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err);
kl_status register_tile__rs_remove(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err);

/* register_tile_split.c: a register tile of threads that share nothing (acc[D0][D1]…), split over more
 * blocks along its first dimension of extent > 1. */
bool register_tile__sp_detect(const kl_rule_ctx *ctx, const rt_func *f, char *acc, size_t asize, TSNode *decl, char *why,
                              size_t wsize);
kl_status register_tile__sp_remove_edits(const kl_rule_ctx *ctx, const rt_func *f, kl_edits *out, kl_error *err);

#endif
