/* tensor-core (tensor_core.c) split in two: what the parts share. Private to
 * src/rewrite/rules/tensor_core*.c: the names are tensor_core__* (what wgmma.c reads is tensor_core.h).
 * tensor_core.c holds the helpers, find and the running of a site; tensor_core_apply.c the scalar
 * form and its apply (wmma over shared tiles, pipelined with cp.async); tensor_core_remove.c the
 * tensor-core and mma.sync forms and their remove. */
#ifndef KL_TENSOR_CORE_INT_H
#define KL_TENSOR_CORE_INT_H

#include "rewrite/rules/rules.h"
#include "rewrite/rules/tensor_core.h"
#include "rewrite/rules/rules_tree.h"
#include "rewrite/rules/tile_text.h"
#include "syntax/affine.h"

#define MARKER "// tensor-core: wmma"
#define SMEM_LIMIT (48 * 1024)

#define MAXPRO 16

typedef struct tensor_core__tc_naive {
    TSNode fn, body, loop, accdecl, store, guard;
    bool early;                          /* if (row >= M || col >= N) return; */
    TSNode rdecl, cdecl;                 /* the declarations of row and col (may be one) */
    TSNode prologue[MAXPRO];
    unsigned npro;
    TSNode aacc, bacc;                   /* A's and B's subscript expressions */
    char row[64], col[64], rtype[64], ctype[64];
    char acc[64], k[64], ktype[64], K[128], M[128], N[128];
    char elem[64];                       /* the 16-bit element type (or the template's T) */
    char why[400];
} tensor_core__tc_naive;

/* A dim3 configuration: a local `dim3 g(...)` used only by this launch (decl set), or the
 * expression in the <<< >>>. Its arguments' texts. */
typedef struct tensor_core__cfg {
    TSNode expr;             /* the expression in the launch */
    TSNode decl;             /* the local's declaration, or null */
    TSNode name;             /* the local's name */
    char args[3][160];
    unsigned nargs;
} tensor_core__cfg;

typedef struct tensor_core__launch_plan {
    kl_launch_site *l;
    tensor_core__cfg grid, block;
    char m[160], n[160];
} tensor_core__launch_plan;

typedef struct tensor_core__tc_wmma {
    TSNode fn, body, marker, consts, k0loop, eloop;
    TSNode prologue[MAXPRO];
    unsigned npro;
    int wm, wn, fm, fn_;
    char row[64], col[64], rtype[64], ctype[64], k[64], ktype[64], K[128], M[128], N[128];
    char a_text[512], b_text[512], guard[400], acc[64], elem[64];
    TSNode store[4];
    unsigned nstore;
    bool early;
    TSNode mma;              /* a node using the tensor cores (for the site) */
    char why[500];
} tensor_core__tc_wmma;

typedef struct tensor_core__mma_scan {
    const kl_rule_ctx *ctx;
    TSNode hit;
    char what[64];
} tensor_core__mma_scan;

typedef struct tensor_core__tc_ptx {
    TSNode fn, body, call, block, first, outer, inner, aloop, bloop, adecl, bdecl;
    char lane[64], conv[32], dtype[8];
    char acc[256];                       /* the D operand, e.g. acc[mi][ni] */
    char v1[64], v2[64];                 /* the mma nest's loop variables */
    char hdr1[256], hdr2[256];           /* their `for (…)` headers */
    char helpers[3][64];                 /* the mma, ldmatrix and ldmatrix.trans helpers */
    char *aread, *bread;                 /* the element reads (owned) */
    char why[500];
} tensor_core__tc_ptx;

void tensor_core__text_to(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size);
bool tensor_core__text_is(const kl_rule_ctx *ctx, TSNode n, const char *s);
unsigned tensor_core__stmts_of(TSNode block, TSNode *out, unsigned max);
void tensor_core__strip_const(const char *t, char *out, size_t size);
TSNode tensor_core__if_cond(TSNode ifs);
bool tensor_core__is_16bit(const char *t);
const char *tensor_core__dtype_of(const char *t);
bool tensor_core__callee_reads_builtins(const kl_rule_ctx *ctx, const char *name);
bool tensor_core__guard_parts(const kl_rule_ctx *ctx, TSNode c, bool early, char *x, char *m, char *y, char *n, size_t size);
bool tensor_core__analyse_naive(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const kl_ax_loop *L, tensor_core__tc_naive *g);
bool tensor_core__plan_launches(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *kernel, const char *M,
                          const char *N, kl_launch_sites *ls, tensor_core__launch_plan *plans, unsigned max, unsigned *np, char *why,
                          size_t size);
kl_status tensor_core__write_launches(const kl_rule_ctx *ctx, tensor_core__launch_plan *plans, unsigned np, int bm, int bn, const char *block,
                                bool plain_block, kl_edits *out);
void tensor_core__add_stmt_text(const kl_rule_ctx *ctx, kl_strbuf *sb, TSNode n, const char *ind);
kl_status tensor_core__apply_naive(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const tensor_core__tc_naive *g, const char *kernel, int wm,
                             int wn, int fm, int fn_, int bk, bool vec, int stages, kl_edits *out, kl_error *err);
bool tensor_core__mma_visit(TSNode n, void *user);
bool tensor_core__analyse_wmma(const kl_rule_ctx *ctx, TSNode fn, tensor_core__tc_wmma *w);
kl_status tensor_core__remove_wmma(const kl_rule_ctx *ctx, const tensor_core__tc_wmma *w, const char *kernel, kl_edits *out, kl_error *err);
void tensor_core__foreign_why(const kl_rule_ctx *ctx, TSNode fn, const tensor_core__mma_scan *m, char *why, size_t size);
void tensor_core__ptx_release(tensor_core__tc_ptx *p);
char *tensor_core__squeeze(const kl_rule_ctx *ctx, TSNode n);
unsigned tensor_core__param_names(const kl_rule_ctx *ctx, TSNode fn, char names[][64], unsigned max);
bool tensor_core__plain_loop(const kl_rule_ctx *ctx, TSNode loop, char *v, char *bound, size_t bsize);
unsigned tensor_core__body_stmts(TSNode block, TSNode *out, unsigned max);
bool tensor_core__find_lane(const kl_rule_ctx *ctx, TSNode body, char *lane);
bool tensor_core__analyse_ptx(const kl_rule_ctx *ctx, TSNode fn, TSNode hit, tensor_core__tc_ptx *p);
kl_status tensor_core__remove_ptx(const kl_rule_ctx *ctx, const tensor_core__tc_ptx *p, kl_edits *out, kl_error *err);

#endif
