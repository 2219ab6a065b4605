/* smem-tile (smem_tile.c) split along the forms it rewrites: what the parts share. Private to
 * src/rewrite/rules/smem_tile*.c: the names are smem_tile__*. smem_tile.c holds the helpers, find and
 * the running of a site; smem_tile_gemm.c the GEMM tile (apply and remove); smem_tile_stencil.c the
 * halo tile of a stencil and the staged tile with halo (apply and remove); smem_tile_rt.c the stencil
 * with several outputs per thread along x (apply and remove); smem_tile_lambda.c the tiles staged
 * through registers by lambdas (remove). */
#ifndef KL_SMEM_TILE_H
#define KL_SMEM_TILE_H

#include "rewrite/rules/rules_tree.h"
#include "syntax/affine.h"

#define SMAXC 24

/* A replacement of the byte range [a,b) by text (borrowed). */
typedef struct smem_tile__rep {
    uint32_t a, b;
    const char *text;
} smem_tile__rep;

typedef struct smem_tile__ga {
    TSNode fn, loop, body;
    const kl_ax_loop *L;
    char type[64];               /* the loop variable's type */
    TSNode op[2];                /* A[...] (row operand), B[...] (column operand) */
    TSNode idx[2];
    char arr[2][64], elem[2][64];
    char form;                   /* 'I' inside if (cond) {...}, 'R' after if (cond) return;, 'N' none */
    TSNode guard;
    TSNode pre[32];
    unsigned npre;
    bool guarded[32];            /* see smem_tile__placement */
    char *gtext[2];              /* the load guards without the k part (may be empty), owned */
    int64_t dim[3];
    char tile_text[64];
    char why[480];
} smem_tile__ga;

typedef struct smem_tile__placement {
    char form;
    TSNode guard;
    TSNode pre[32];
    unsigned npre;
    /* after an early return ('R'): pre[i] is a declaration whose value reads memory
     * (`float acc = bias[o];`), which the threads that returned must not read: the GEMM apply
     * writes it `T v = (C) ? 0 : E;` with C the return's condition; the stencil refuses it */
    bool guarded[32];
} smem_tile__placement;

typedef struct smem_tile__tload {
    TSNode stmt;            /* the load statement */
    TSNode target;          /* S[..][..] */
    char arr[64];
    TSNode sub[2];          /* the subscripts */
    int thr[2];             /* which thread index each subscript is: 'x', 'y' */
    TSNode cond, value;     /* the guard (may be null) and G[e] */
    TSNode gidx;            /* e */
    char garr[64];
    int kdim;               /* the subscript (0/1) whose thread index moves along k */
} smem_tile__tload;

typedef struct smem_tile__gp {
    TSNode fn, tl, cl;      /* tile loop, compute loop */
    const kl_ax_loop *T, *C;
    smem_tile__tload ld[2];
    TSNode decl[2];
    unsigned ndecl;
    char form;              /* 'I', 'R', 'N' */
    TSNode after;           /* the guard statement after the tile loop */
    TSNode pre[32];
    unsigned npre;
    char kname[64];         /* the naive loop variable */
    char bound[256];        /* the naive loop bound */
    char ttype[64];
    char why[480];
} smem_tile__gp;

typedef struct smem_tile__read_scan {
    const kl_rule_ctx *ctx;
    const char *arr[2];
    TSNode reads[32];
    unsigned n, other;
} smem_tile__read_scan;

typedef struct smem_tile__hp {
    TSNode decl;            /* __shared__ T S[H][W]; */
    char arr[64], elem[64];
    TSNode load;            /* the statement (a loop) filling it */
    TSNode store;           /* S[sy][sx] = value; inside it */
    TSNode sync;            /* the barrier after it */
    TSNode sub[2];
    char sv[2][64];         /* the coordinate variables sy, sx */
    TSNode vdecls[8];       /* declarations inside the load the value needs (gy, gx) */
    unsigned nv;
    TSNode value;
    char why[480];
} smem_tile__hp;

typedef struct smem_tile__sdim {
    TSNode loop;              /* the loop over this axis' offsets */
    const kl_ax_loop *L;
    char type[64];            /* the loop variable's declared type */
    char axis;                /* 'x' or 'y' */
    bool fixed;               /* the offset count is a compile-time constant … */
    int64_t ntrip;            /* … of this value */
    char trip[256];           /* the offset count as text ("k", "3", "r - -r + 1") */
    char ext[320];            /* the tile's extent along the axis, as text */
    char loadext[320];        /* how far the load runs along the axis */
    char svar[32];            /* the load's coordinate ("sy", "sx") */
    TSNode decls[16];         /* declarations of this loop's body the load needs, document order */
    unsigned ndecls;
} smem_tile__sdim;

typedef struct smem_tile__sa {
    TSNode fn, outer;         /* the outermost loop of the stencil */
    TSNode read, ridx;        /* G[idx] and idx */
    char arr[64], elem[64];
    smem_tile__sdim d[2];                /* d[0]: the outer loop */
    unsigned nd;
    TSNode conj[SMAXC];       /* the read's guard: conditions and (neg) negated ones */
    bool neg[SMAXC];
    unsigned nconj;
    char form;                /* 'I' inside if (cond) {...}, 'R' after if (cond) return;, 'N' none */
    TSNode guard;
    TSNode pre[32];
    unsigned npre;
    int64_t dim[3];
    char btext[3][64];
    char why[480];
} smem_tile__sa;

typedef struct smem_tile__ident_scan {
    const kl_rule_ctx *ctx;
    char (*names)[64];
    unsigned n, max;
} smem_tile__ident_scan;

typedef struct smem_tile__decl_scan {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode found;
} smem_tile__decl_scan;

typedef struct smem_tile__sp {
    TSNode decl;              /* __shared__ E S[..][..]; */
    TSNode load, load_end;    /* the load (the `if` of a run-time extent, or the loop) and its last statement */
    TSNode store, cond, gread;/* S[sy][sx] = cond ? G[idx] : 0; */
    char arr[64];
    unsigned nd;
    bool runtime;
    TSNode compute;           /* the if/else (run-time extent) or the loop reading the tile */
    TSNode tiled, fallback;   /* run-time extent: the loop of each branch */
    TSNode reads[32];
    unsigned nreads;
    char form;                /* 'I', 'R', 'N' as for apply */
    TSNode guard;
} smem_tile__sp;

typedef struct smem_tile__rtp {
    TSNode marker, decl, fdecl;
    int ox;
    uint32_t top_a, top_b;           /* the statements before the marker */
    uint32_t pre_a, pre_b;           /* after the factor tile, before the load (or the `if (C)`) */
    TSNode cond_if;                  /* run-time count: `if (C) { … } else { … }` */
    TSNode orig_if;                  /* … the `if (G) { loop; post }` under else */
    TSNode ly, lx, stage, yloop, epi; /* compile-time count: load loops, factor staging, compute, epilogue */
    char why[300];
} smem_tile__rtp;

TSNode smem_tile__strip(TSNode n);
bool smem_tile__text_is(const kl_rule_ctx *ctx, TSNode n, const char *s);
bool smem_tile__node_in(TSNode n, TSNode outer);
void smem_tile__squeezed(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size);
void smem_tile__squeeze_str(const char *s, char *buf, size_t size);
const char *smem_tile__binop(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size);
void smem_tile__split_on(const kl_rule_ctx *ctx, TSNode n, const char *op, TSNode *out, unsigned *k, unsigned max);
char *smem_tile__negate(const kl_rule_ctx *ctx, TSNode c);
int smem_tile__depends(kl_affine_ctx *ax, const kl_rule_ctx *ctx, TSNode n, const char *var);
char *smem_tile__splice(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, smem_tile__rep *reps, unsigned n);
char *smem_tile__reindent_node_text(const char *first_ind, const char *text, int delta);
unsigned smem_tile__uses_of(const kl_rule_ctx *ctx, TSNode n, const char *name);
void smem_tile__fresh_name(const kl_rule_ctx *ctx, TSNode fn, const char *base, char *buf, size_t size);
bool smem_tile__launch_block(const kl_rule_ctx *ctx, const char *name, int64_t dim[3], char text[3][64], char *why,
                         size_t wsize);
bool smem_tile__elem_of(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *name, char *buf, size_t size);
void smem_tile__zero_of(const char *elem, char *buf, size_t size);
bool smem_tile__early_return(TSNode st);
TSNode smem_tile__if_cond(TSNode st);
unsigned smem_tile__count_type(TSNode n, const char *type, TSNode *first);
void smem_tile__ga_release(smem_tile__ga *g);
bool smem_tile__hoistable(const kl_rule_ctx *ctx, TSNode d);
bool smem_tile__loop_placement(const kl_rule_ctx *ctx, const char *src, TSNode fn, TSNode loop, smem_tile__placement *pl,
                           char *why, size_t wsize);
bool smem_tile__analyse_apply(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *kname, TSNode loop, smem_tile__ga *g);
kl_status smem_tile__apply_gemm(const kl_rule_ctx *ctx, const smem_tile__ga *g, int64_t tile, kl_edits *out, kl_error *err);
bool smem_tile__zero_value(const kl_rule_ctx *ctx, TSNode v);
bool smem_tile__read_visit(TSNode n, void *user);
bool smem_tile__analyse_present(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode tl, smem_tile__gp *p);
kl_status smem_tile__remove_gemm(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const smem_tile__gp *p, kl_edits *out, kl_error *err);
bool smem_tile__analyse_halo(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode decl, smem_tile__hp *h);
kl_status smem_tile__remove_halo(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const smem_tile__hp *h, kl_edits *out, kl_error *err);
/* smem_tile_lambda.c: tiles filled by register staging through lambdas (fetch / stash). The site's
 * node (the stash lambda's declaration) and name into at / what; why empty when it removes. */
bool smem_tile__lambda_site(const kl_rule_ctx *ctx, TSNode fn, char *why, size_t wsize, TSNode *at, char *what, size_t size);
kl_status smem_tile__remove_lambda(const kl_rule_ctx *ctx, TSNode fn, kl_edits *out, kl_error *err);
bool smem_tile__simple_token(const char *s);
bool smem_tile__is_continue_if(TSNode st);
bool smem_tile__ident_visit(TSNode n, void *user);
bool smem_tile__declares(const kl_rule_ctx *ctx, TSNode d, const char *name);
bool smem_tile__decl_scan_visit(TSNode n, void *user);
bool smem_tile__stencil_candidate(const kl_rule_ctx *ctx, kl_affine_ctx *ax, unsigned li);
bool smem_tile__analyse_stencil(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *kname, TSNode outer, smem_tile__sa *s);
void smem_tile__tile_coord(const smem_tile__sdim *D, char *buf, size_t size);
char *smem_tile__stencil_value(const kl_rule_ctx *ctx, const smem_tile__sa *s);
kl_status smem_tile__apply_stencil(const kl_rule_ctx *ctx, smem_tile__sa *s, int64_t maxr, kl_edits *out, kl_error *err);
bool smem_tile__analyse_stencil_present(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, TSNode decl, smem_tile__sp *p);
kl_status smem_tile__remove_stencil(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, smem_tile__sp *p, kl_edits *out, kl_error *err);
kl_status smem_tile__apply_stencil_rt(const kl_rule_ctx *ctx, smem_tile__sa *s, int64_t maxr, int ox, kl_edits *out, kl_error *err);
unsigned smem_tile__stmts_of(TSNode compound, TSNode *out, unsigned max);
bool smem_tile__analyse_rt_present(const kl_rule_ctx *ctx, TSNode fn, TSNode decl, smem_tile__rtp *p);
kl_status smem_tile__remove_rt(const kl_rule_ctx *ctx, TSNode fn, const smem_tile__rtp *p, kl_edits *out, kl_error *err);

#endif
