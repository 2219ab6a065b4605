/*
 * tensor-core — a bf16/f16 GEMM with f32 accumulation, one output per thread (a scalar
 * multiply-add loop over k) ↔ the same kernel on the tensor cores with nvcuda::wmma fragments.
 *
 * Applicable (site `kernel:line` of the k loop): a __global__ kernel of the form
 *     <prologue: declarations independent of the thread, e.g. a batch from blockIdx.z>
 *     T row = <blockIdx.y / threadIdx.y …>;  T col = <blockIdx.x / threadIdx.x …>;
 *     if (row < M && col < N) { float acc = 0; for (k = 0; k < K; k++) acc += f(A[..]) * f(B[..]); store; }
 * (or `if (row >= M || col >= N) return;` followed by the three statements), where f converts
 * a 16-bit element to float, A's subscript depends only on row, k and invariants, B's only on
 * k, col and invariants, and the store only on row, col, acc and invariants. Those texts are
 * kept verbatim: apply rebinds row, col and k and evaluates them per element of a shared tile.
 * Apply writes: zero-filled, guarded tile loads of A (BM x 16) and B (16 x BN) into padded
 * shared tiles, wmma load/mma over them, the accumulators stored to a padded f32 staging tile,
 * and the original store run per element of the block's tile under the original guard. Each
 * launch of the kernel gets a 1-D block of 32 * warps_m * warps_n threads and a grid of
 * ceil(N / BN) x ceil(M / BM) (x the original grid's z).
 * Present: a kernel using wmma::mma_sync or mma.sync. The form apply writes (its marker
 * comment and structure) is removable: remove writes the canonical scalar kernel back
 * (docs/rules.md, "tensor-core"). A warp tile of mma.sync.m16n8k16 PTX on ldmatrix fragments of
 * shared tiles (the hgemm expert's) is removable too: each lane computes the accumulator elements it
 * held with scalar FMAs over the same shared elements (section "the mma.sync form" below). Other
 * tensor-core kernels are sites with the reason they cannot be removed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "rewrite/rules/tensor_core.h"
#include "rewrite/rules/rules_b.h"
#include "rewrite/rules/tile_text.h"
#include "syntax/affine.h"
#include "util/util.h"

#define MARKER "// tensor-core: wmma"
#define SMEM_LIMIT (48 * 1024)

static const char *const warp_values[] = {"2", "1", "4", NULL};
static const char *const frag_values[] = {"1", "2", "4", NULL};
static const char *const stage_values[] = {"1", "2", "3", "4", NULL};
static const char *const api_values[] = {"wmma", NULL};
static const char *const bk_values[] = {"16", "32", "64", NULL};
static const char *const vl_values[] = {"0", "1", NULL};
static const kl_rule_param tc_params[] = {
    {"warps_m", warp_values, "2"},
    {"warps_n", warp_values, "2"},
    {"frags_m", frag_values, "1"},
    {"frags_n", frag_values, "1"},
    {"api", api_values, "wmma"},
    {"bk", bk_values, "16"},           /* the k extent of the shared tiles (16 per mma step) */
    {"vector_loads", vl_values, "0"},  /* 1: the tiles are loaded 16 bytes (8 elements) at a time */
    {"stages", stage_values, "1"},     /* > 1: a ring of k tiles filled by cp.async, dynamic shared memory */
};

/* Forward presets (docs/rules.md, "Forward presets"). The H200 (Hopper, sm_90:
 * 132 SMs, 64 Ki 32-bit registers and 228 KiB of shared memory per SM, at most 227 KiB per block and
 * 255 registers per thread): a warp's f32 accumulators take 8 registers per 16 x 16 fragment. Shared
 * memory per stage is (BM (BK + 8) + BK (BN + 8)) x 2 bytes. The pipelined ones copy 16 bytes at
 * a time (cp.async) and so need A contiguous along k and B along the columns; on other layouts
 * apply refuses them and `strided` remains. Each is refused where its tile exceeds a compile-time
 * M, N or K. */
static const kl_rule_preset tc_presets[] = {
    {"large-pipelined", "warps_m=2 warps_n=2 frags_m=4 frags_n=4 bk=32 stages=3", NULL,
     "128 x 128 block tile, 64 x 64 per warp: 16 fragments are 128 accumulator registers per thread (ptxas: 234 "
     "in all, no spill; a wider warp tile would pass 255), so 2 blocks of 128 threads per SM by registers; 3 "
     "stages of 18.5 KiB = 55.5 KiB keep two k tiles in flight while one is multiplied, covering HBM latency with "
     "so few warps; each element loaded is reused 128 times"},
    {"medium-pipelined", "warps_m=2 warps_n=2 frags_m=2 frags_n=2 bk=32 stages=2", NULL,
     "64 x 64 block tile: 4 times the blocks of the large tile, for sizes where 128 x 128 tiles would leave SMs "
     "idle (M N / 128^2 below 2 x 132); ptxas: 96 registers, so 5 blocks per SM, whose other blocks hide latency: "
     "2 stages (19 KiB) suffice"},
    {"small-pipelined", "warps_m=2 warps_n=2 frags_m=1 frags_n=1 bk=32 stages=2", NULL,
     "32 x 32 block tile for small products (M N / 64^2 below 132): 16 times the blocks of the large tile; ptxas: "
     "63 registers, 10 KiB of shared memory, 8 blocks per SM"},
    {"strided", "warps_m=2 warps_n=2 frags_m=2 frags_n=2 bk=32", NULL,
     "64 x 64 block tile copied element by element into 26.5 KiB of static shared memory: for layouts the 16-byte "
     "copies cannot read (an NT or TN product) each element loaded is still reused 64 times, and a 32-deep k tile "
     "halves the barriers of the default 16; ptxas: 95 registers"},
};
const kl_rule_presets kl_presets_tensor_core = {&kl_rule_tensor_core, tc_presets, sizeof tc_presets / sizeof tc_presets[0]};


/* The text of n into buf (truncated); "" for a null node. */
static void text_to(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    if (ts_node_is_null(n)) {
        buf[0] = '\0';
        return;
    }
    uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
    kl_snprintf(buf, size, "%.*s", (int)(b - a), ctx->text + a);
}

static bool text_is(const kl_rule_ctx *ctx, TSNode n, const char *s) { return !ts_node_is_null(n) && rb_text_is(ctx, n, s); }

/* The statements of a compound statement (comments skipped), at most max. */
static unsigned stmts_of(TSNode block, TSNode *out, unsigned max)
{
    unsigned n = 0;
    if (!rb_is(block, "compound_statement")) {
        if (max) out[0] = block;
        return 1;
    }
    for (uint32_t i = 0; i < ts_node_named_child_count(block); i++) {
        TSNode c = ts_node_named_child(block, i);
        if (rb_is(c, "comment")) continue;
        if (n < max) out[n] = c;
        n++;
    }
    return n;
}

/* A type text without a leading `const ` (and without trailing blanks). */
static void strip_const(const char *t, char *out, size_t size)
{
    while (!strncmp(t, "const ", 6)) t += 6;
    kl_snprintf(out, size, "%s", t);
    size_t n = strlen(out);
    while (n && (out[n - 1] == ' ' || out[n - 1] == '*')) out[--n] = '\0';
}

/* The condition of an if statement (the value inside the parentheses). */
static TSNode if_cond(TSNode ifs)
{
    TSNode c = rb_field(ifs, "condition");
    if (rb_is(c, "condition_clause")) {
        TSNode v = rb_field(c, "value");
        c = ts_node_is_null(v) ? ts_node_named_child(c, 0) : v;
    }
    return kl_ast_unparen(c);
}

static bool is_16bit(const char *t) { return !strcmp(t, "__nv_bfloat16") || !strcmp(t, "nv_bfloat16") || !strcmp(t, "__half") || !strcmp(t, "half"); }
static const char *dtype_of(const char *t)
{
    if (strstr(t, "bfloat16")) return "bf16";
    if (!strcmp(t, "__half") || !strcmp(t, "half")) return "f16";
    return "template";
}

/* ---- the scalar form ------------------------------------------------------------------------------- */

#define MAXPRO 16

typedef struct tc_naive {
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
} tc_naive;

/* The element access inside a conversion to float: __bfloat162float(x), __half2float(x),
 * float(x), (float)x, static_cast<float>(x); a null node otherwise. */
static TSNode converted(const kl_rule_ctx *ctx, TSNode e)
{
    TSNode null = {{0}, 0, 0};
    e = kl_ast_unparen(e);
    TSNode inner = null;
    if (rb_is(e, "call_expression")) {
        TSNode f = rb_field(e, "function");
        char ft[64];
        text_to(ctx, f, ft, sizeof ft);
        char sq[64];
        size_t k = 0;
        for (const char *p = ft; *p && k + 1 < sizeof sq; p++)
            if (*p != ' ') sq[k++] = *p;
        sq[k] = '\0';
        TSNode args = rb_field(e, "arguments");
        if ((!strcmp(sq, "__bfloat162float") || !strcmp(sq, "__half2float") || !strcmp(sq, "float") ||
             !strcmp(sq, "static_cast<float>")) &&
            ts_node_named_child_count(args) == 1)
            inner = ts_node_named_child(args, 0);
    } else if (rb_is(e, "cast_expression")) {
        char tt[32];
        text_to(ctx, rb_field(e, "type"), tt, sizeof tt);
        if (!strcmp(tt, "float")) inner = rb_field(e, "value");
    }
    inner = kl_ast_unparen(inner);
    return rb_is(inner, "subscript_expression") && rb_is(rb_field(inner, "argument"), "identifier") ? inner : null;
}

/* Does the statement read `acc += X * Y` / `acc = acc + X * Y`? X and Y into *x, *y. */
static bool mac_stmt(const kl_rule_ctx *ctx, TSNode st, char *acc, size_t size, TSNode *x, TSNode *y)
{
    if (!rb_is(st, "expression_statement") || ts_node_named_child_count(st) != 1) return false;
    TSNode e = ts_node_named_child(st, 0);
    if (!rb_is(e, "assignment_expression")) return false;
    TSNode l = rb_field(e, "left"), r = kl_ast_unparen(rb_field(e, "right"));
    char op[8];
    text_to(ctx, rb_field(e, "operator"), op, sizeof op);
    if (!rb_is(l, "identifier")) return false;
    text_to(ctx, l, acc, size);
    if (!strcmp(op, "=")) {
        if (!rb_is(r, "binary_expression") || !text_is(ctx, rb_field(r, "operator"), "+") ||
            !text_is(ctx, rb_field(r, "left"), acc))
            return false;
        r = kl_ast_unparen(rb_field(r, "right"));
    } else if (strcmp(op, "+=")) {
        return false;
    }
    if (!rb_is(r, "binary_expression") || !text_is(ctx, rb_field(r, "operator"), "*")) return false;
    *x = converted(ctx, rb_field(r, "left"));
    *y = converted(ctx, rb_field(r, "right"));
    return !ts_node_is_null(*x) && !ts_node_is_null(*y);
}

/* The declaration (top level of body) declaring name, or a null node. */
static TSNode top_decl(const kl_rule_ctx *ctx, TSNode body, const char *name, TSNode *value)
{
    TSNode null = {{0}, 0, 0};
    for (uint32_t i = 0; i < ts_node_named_child_count(body); i++) {
        TSNode d = ts_node_named_child(body, i);
        if (!rb_is(d, "declaration")) continue;
        for (uint32_t k = 0; k < ts_node_named_child_count(d); k++) {
            TSNode dc = ts_node_named_child(d, k);
            if (!text_is(ctx, kl_ast_declarator_name(dc), name)) continue;
            if (value) *value = rb_is(dc, "init_declarator") ? rb_field(dc, "value") : null;
            return d;
        }
    }
    return null;
}

/* The element type of the array an access reads: a pointer parameter, or a pointer declared in
 * the kernel body; "" when unknown. */
static void elem_of(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode body, TSNode access, char *buf, size_t size)
{
    char name[64];
    text_to(ctx, rb_field(access, "argument"), name, sizeof name);
    buf[0] = '\0';
    int pi = kl_affine_param_index(ax, name);
    if (pi >= 0) {
        const kl_param_info *p = kl_affine_param(ax, (unsigned)pi);
        if (p->pointer) strip_const(p->elem, buf, size);
        return;
    }
    TSNode d = top_decl(ctx, body, name, NULL);
    if (ts_node_is_null(d)) return;
    char t[64];
    text_to(ctx, rb_field(d, "type"), t, sizeof t);
    strip_const(t, buf, size);
}

/* Is T a type parameter of the (templated) kernel? */
static bool template_type(const kl_rule_ctx *ctx, TSNode fn, const char *t)
{
    TSNode outer = kl_ast_function_outer(fn);
    if (!rb_is(outer, "template_declaration")) return false;
    char ps[256], a[80], b[80];
    text_to(ctx, rb_field(outer, "parameters"), ps, sizeof ps);
    kl_snprintf(a, sizeof a, "typename %s", t);
    kl_snprintf(b, sizeof b, "class %s", t);
    return strstr(ps, a) || strstr(ps, b);
}

/* ---- what an expression may depend on ---------------------------------------------------------------- */

typedef struct deps {
    const kl_rule_ctx *ctx;
    kl_affine_ctx *ax;
    const tc_naive *g;
    const char *allowed[4];
    char why[300];
} deps;

static bool in_prologue(const kl_rule_ctx *ctx, const tc_naive *g, const char *name)
{
    for (unsigned i = 0; i < g->npro; i++)
        if (rb_is(g->prologue[i], "declaration"))
            for (uint32_t k = 0; k < ts_node_named_child_count(g->prologue[i]); k++)
                if (text_is(ctx, kl_ast_declarator_name(ts_node_named_child(g->prologue[i], k)), name)) return true;
    return false;
}

typedef struct local_find {
    const kl_rule_ctx *ctx;
    const char *name;
    bool found;
} local_find;

static bool local_visit(TSNode n, void *user)
{
    local_find *f = user;
    if (f->found) return false;
    if (rb_is(n, "declaration") || rb_is(n, "parameter_declaration"))
        for (uint32_t k = 0; k < ts_node_named_child_count(n); k++)
            if (text_is(f->ctx, kl_ast_declarator_name(ts_node_named_child(n, k)), f->name)) f->found = true;
    return !f->found;
}

static bool builtin_source(const char *t)
{
    return strstr(t, "threadIdx") || strstr(t, "blockIdx") || strstr(t, "blockDim") || strstr(t, "gridDim");
}

/* A function-like macro or helper of the file named name reads thread or block indices. */
static bool callee_reads_builtins(const kl_rule_ctx *ctx, const char *name)
{
    TSNode f = kl_ast_function_named(ctx->src, name);
    if (!ts_node_is_null(f)) {
        char *t = rb_text(ctx, f);
        bool b = t && builtin_source(t);
        free(t);
        return b;
    }
    TSNode root = ts_tree_root_node(kl_source_tree(ctx->src));
    for (uint32_t i = 0; i < ts_node_named_child_count(root); i++) {
        TSNode d = ts_node_named_child(root, i);
        if ((rb_is(d, "preproc_function_def") || rb_is(d, "preproc_def")) && text_is(ctx, rb_field(d, "name"), name)) {
            char *t = rb_text(ctx, d);
            bool b = t && builtin_source(t);
            free(t);
            return b;
        }
    }
    return false;
}

static bool deps_visit(TSNode n, void *user)
{
    deps *d = user;
    if (d->why[0]) return false;
    if (!rb_is(n, "identifier")) return true;
    char name[64];
    text_to(d->ctx, n, name, sizeof name);
    TSNode par = ts_node_parent(n);
    if (rb_is(par, "field_expression") && ts_node_eq(rb_field(par, "argument"), n)) {
        char f[16];
        text_to(d->ctx, rb_field(par, "field"), f, sizeof f);
        bool bad = !strcmp(name, "threadIdx") || !strcmp(name, "blockDim") ||
                   ((!strcmp(name, "blockIdx") || !strcmp(name, "gridDim")) && strcmp(f, "z"));
        if (bad)
            kl_snprintf(d->why, sizeof d->why, "`%s.%s` at line %u: only blockIdx.z / gridDim.z keep their meaning in the "
                        "tiled kernel", name, f, kl_ast_line(n));
        return false;
    }
    if (rb_is(par, "call_expression") && ts_node_eq(rb_field(par, "function"), n)) {
        if (callee_reads_builtins(d->ctx, name))
            kl_snprintf(d->why, sizeof d->why, "`%s` (line %u) reads thread or block indices", name, kl_ast_line(n));
        return false;
    }
    for (unsigned i = 0; i < 4; i++)
        if (d->allowed[i] && !strcmp(d->allowed[i], name)) return false;
    int pi = kl_affine_param_index(d->ax, name);
    if (pi >= 0) {
        if (kl_affine_assign_count(d->ax, name) > 0)
            kl_snprintf(d->why, sizeof d->why, "the parameter %s is assigned in the kernel (line %u)", name, kl_ast_line(n));
        return false;
    }
    if (in_prologue(d->ctx, d->g, name)) return false;
    local_find f = {d->ctx, name, false};
    rb_walk(d->g->body, local_visit, &f);
    if (f.found)
        kl_snprintf(d->why, sizeof d->why, "`%s` at line %u is a local of the kernel that the tiled form cannot rebind", name,
                    kl_ast_line(n));
    return false;
}

/* Does n depend only on the allowed names, parameters, prologue locals and file-level names? */
static bool deps_ok(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const tc_naive *g, TSNode n, const char *a0,
                    const char *a1, const char *a2, char *why, size_t size, const char *what)
{
    deps d = {ctx, ax, g, {a0, a1, a2, NULL}, ""};
    rb_walk(n, deps_visit, &d);
    if (d.why[0]) kl_snprintf(why, size, "%s depends on %s", what, d.why);
    return !d.why[0];
}

/* The guard `X < M && Y < N` (early: `X >= M || Y >= N`): the two names and bounds. */
static bool guard_parts(const kl_rule_ctx *ctx, TSNode c, bool early, char *x, char *m, char *y, char *n, size_t size)
{
    c = kl_ast_unparen(c);
    if (!rb_is(c, "binary_expression") || !text_is(ctx, rb_field(c, "operator"), early ? "||" : "&&")) return false;
    TSNode s[2] = {kl_ast_unparen(rb_field(c, "left")), kl_ast_unparen(rb_field(c, "right"))};
    char *names[2] = {x, y}, *bounds[2] = {m, n};
    for (int i = 0; i < 2; i++) {
        if (!rb_is(s[i], "binary_expression") || !text_is(ctx, rb_field(s[i], "operator"), early ? ">=" : "<") ||
            !rb_is(rb_field(s[i], "left"), "identifier"))
            return false;
        text_to(ctx, rb_field(s[i], "left"), names[i], size);
        text_to(ctx, rb_field(s[i], "right"), bounds[i], size);
    }
    return true;
}

/* The thread axis of an index: 'y' for blockIdx.y/threadIdx.y, 'x' for x; 0 when it is not one
 * output coordinate per thread along one axis. */
static char index_axis(kl_affine_ctx *ax, TSNode value)
{
    kl_affine a;
    memset(&a, 0, sizeof a);
    if (ts_node_is_null(value) || kl_affine_of(ax, value, &a) != KL_OK || !a.ok) {
        kl_affine_release(&a);
        return 0;
    }
    char axis = 0;
    int64_t tx = 0, ty = 0;
    bool okx = kl_affine_coef_int(&a, "threadIdx.x", &tx), oky = kl_affine_coef_int(&a, "threadIdx.y", &ty);
    bool other = kl_affine_coef(&a, "threadIdx.z") != NULL;
    for (unsigned i = 0; i < a.nterms; i++)
        if (strncmp(a.terms[i].var, "threadIdx.", 10) && strncmp(a.terms[i].var, "blockIdx.", 9)) other = true;
    if (okx && oky && tx == 1 && ty == 0 && kl_affine_coef(&a, "blockIdx.x") && !kl_affine_coef(&a, "blockIdx.y")) axis = 'x';
    if (okx && oky && ty == 1 && tx == 0 && kl_affine_coef(&a, "blockIdx.y") && !kl_affine_coef(&a, "blockIdx.x")) axis = 'y';
    if (kl_affine_coef(&a, "blockIdx.z") || other) axis = 0;
    kl_affine_release(&a);
    return axis;
}

/* Find the multiply-add loop of fn: true when there is one (a site), with g->why set where the
 * rest of the kernel does not fit. */
static bool analyse_naive(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const kl_ax_loop *L, tc_naive *g)
{
    memset(g, 0, sizeof *g);
    g->fn = fn;
    g->body = kl_ast_function_body(fn);
    g->loop = L->node;
    if (L->kind != KL_LOOP_FOR || !L->var) return false;
    TSNode one[2];
    if (stmts_of(rb_field(L->node, "body"), one, 2) != 1) return false;
    TSNode x, y;
    if (!mac_stmt(ctx, one[0], g->acc, sizeof g->acc, &x, &y)) return false;
    kl_snprintf(g->k, sizeof g->k, "%s", L->var);
    char ex[64], ey[64];
    elem_of(ctx, ax, g->body, x, ex, sizeof ex);
    elem_of(ctx, ax, g->body, y, ey, sizeof ey);
    bool tmpl = ex[0] && template_type(ctx, fn, ex);
    if (!(is_16bit(ex) || tmpl) || strcmp(ex, ey)) return false; /* not a 16-bit GEMM loop: no site */
    kl_snprintf(g->elem, sizeof g->elem, "%s", ex);
#define WHY(...) (kl_snprintf(g->why, sizeof g->why, __VA_ARGS__), true)
    if (!L->start || strcmp(L->start, "0") || !L->cmp || strcmp(L->cmp, "<") || !L->step_is_int || L->step_int != 1)
        return WHY("the loop over %s at line %u is not `for (%s = 0; %s < K; %s++)`", L->var, kl_ast_line(L->node), L->var,
                   L->var, L->var);
    kl_snprintf(g->K, sizeof g->K, "%s", L->bound ? L->bound : "");
    TSNode init = rb_field(L->node, "initializer");
    if (!rb_is(init, "declaration"))
        return WHY("the loop at line %u does not declare %s", kl_ast_line(L->node), L->var);
    char kt[64];
    text_to(ctx, rb_field(init, "type"), kt, sizeof kt);
    strip_const(kt, g->ktype, sizeof g->ktype);
    /* float acc = 0; loop; store — the whole of an if's block, or the end of the kernel */
    TSNode block = ts_node_parent(L->node);
    TSNode st[8];
    unsigned ns = stmts_of(block, st, 8), at = 0;
    if (!rb_is(block, "compound_statement") || ns > 8) return WHY("the loop at line %u is not in a plain block", kl_ast_line(L->node));
    while (at < ns && !ts_node_eq(st[at], L->node)) at++;
    if (at == 0 || at + 2 != ns)
        return WHY("the loop at line %u is not preceded by `float %s = 0.0f;` and followed by the store alone", kl_ast_line(L->node),
                   g->acc);
    g->accdecl = st[at - 1];
    g->store = st[at + 1];
    TSNode av;
    char at_t[32], av_t[32];
    if (!ts_node_eq(top_decl(ctx, block, g->acc, &av), g->accdecl) || ts_node_named_child_count(g->accdecl) != 2)
        return WHY("%s is not declared right before the loop at line %u", g->acc, kl_ast_line(L->node));
    text_to(ctx, rb_field(g->accdecl, "type"), at_t, sizeof at_t);
    text_to(ctx, av, av_t, sizeof av_t);
    if (strcmp(at_t, "float") || (strcmp(av_t, "0") && strcmp(av_t, "0.0f") && strcmp(av_t, "0.f") && strcmp(av_t, "0.0")))
        return WHY("the accumulator %s (line %u) is not a float starting at 0: f32 accumulation is what the fragments do",
                   g->acc, kl_ast_line(g->accdecl));
    if (!rb_is(g->store, "expression_statement") || rb_count_ident(ctx, g->store, g->acc) == 0)
        return WHY("the statement after the loop (line %u) does not store %s", kl_ast_line(g->store), g->acc);
    /* the guard */
    char gx[64], gy[64];
    if (ts_node_eq(block, g->body)) {
        g->early = true;
        if (at < 2 || !rb_is(st[at - 2], "if_statement") || !ts_node_is_null(rb_field(st[at - 2], "alternative")))
            return WHY("no `if (row >= M || col >= N) return;` before the accumulator (line %u)", kl_ast_line(g->accdecl));
        g->guard = st[at - 2];
        TSNode ret[2];
        if (stmts_of(rb_field(g->guard, "consequence"), ret, 2) != 1 || !rb_is(ret[0], "return_statement"))
            return WHY("the guard at line %u does not just return", kl_ast_line(g->guard));
    } else {
        g->guard = ts_node_parent(block);
        TSNode top = ts_node_parent(g->guard);
        if (!rb_is(g->guard, "if_statement") || !ts_node_is_null(rb_field(g->guard, "alternative")) || !ts_node_eq(top, g->body))
            return WHY("the loop at line %u is not under an `if (row < M && col < N)` of the kernel's body", kl_ast_line(L->node));
    }
    if (!guard_parts(ctx, if_cond(g->guard), g->early, gx, g->M, gy, g->N, sizeof gx))
        return WHY("the guard at line %u is not `row %s M %s col %s N`", kl_ast_line(g->guard), g->early ? ">=" : "<",
                   g->early ? "||" : "&&", g->early ? ">=" : "<");
    /* row and col: declared at the top, one output per thread along different axes; the row is
     * the one along y (the staging tile is then stored along x, the col) */
    TSNode xv, yv;
    TSNode xd = top_decl(ctx, g->body, gx, &xv), yd = top_decl(ctx, g->body, gy, &yv);
    if (ts_node_is_null(xd) || ts_node_is_null(yd)) return WHY("%s and %s are not declared at the top of the kernel", gx, gy);
    char xa = index_axis(ax, xv), ya = index_axis(ax, yv);
    if (!xa || !ya || xa == ya)
        return WHY("%s and %s (lines %u, %u) are not one output per thread on a 2-D grid (blockIdx * B + threadIdx along two "
                   "different axes)",
                   gx, gy, kl_ast_line(xd), kl_ast_line(yd));
    bool swap = xa == 'x';
    kl_snprintf(g->row, sizeof g->row, "%s", swap ? gy : gx);
    kl_snprintf(g->col, sizeof g->col, "%s", swap ? gx : gy);
    if (swap) {
        char tb[128];
        kl_snprintf(tb, sizeof tb, "%s", g->M), kl_snprintf(g->M, sizeof g->M, "%s", g->N), kl_snprintf(g->N, sizeof g->N, "%s", tb);
    }
    g->rdecl = swap ? yd : xd;
    g->cdecl = swap ? xd : yd;
    /* A: the operand that uses the row and not the col; B: the other way round */
#define USES(n, a, b) (rb_count_ident(ctx, n, a) > 0 && rb_count_ident(ctx, n, b) == 0)
    if (USES(x, g->row, g->col) && USES(y, g->col, g->row)) g->aacc = x, g->bacc = y;
    else if (USES(y, g->row, g->col) && USES(x, g->col, g->row)) g->aacc = y, g->bacc = x;
    else
        return WHY("the operands at line %u do not split into one that uses %s (not %s) and one that uses %s (not %s)",
                   kl_ast_line(one[0]), g->row, g->col, g->col, g->row);
#undef USES
    unsigned ndecl = ts_node_eq(g->rdecl, g->cdecl) ? 2 : 1;
    if (ts_node_named_child_count(g->rdecl) != ndecl + 1 || ts_node_named_child_count(g->cdecl) != ndecl + 1)
        return WHY("the declaration at line %u declares other names too", kl_ast_line(g->rdecl));
    char t[64];
    text_to(ctx, rb_field(g->rdecl, "type"), t, sizeof t);
    strip_const(t, g->rtype, sizeof g->rtype);
    text_to(ctx, rb_field(g->cdecl, "type"), t, sizeof t);
    strip_const(t, g->ctype, sizeof g->ctype);
    /* the rest of the body is the prologue: declarations that do not depend on the thread */
    TSNode top[MAXPRO + 8];
    unsigned nt = stmts_of(g->body, top, MAXPRO + 8);
    if (nt > MAXPRO + 8) return WHY("the kernel has too many statements");
    for (unsigned i = 0; i < nt; i++) {
        if (ts_node_eq(top[i], g->rdecl) || ts_node_eq(top[i], g->cdecl)) continue;
        if (ts_node_eq(top[i], g->guard)) {
            if (!g->early && i + 1 != nt)
                return WHY("statements follow the guarded block (line %u)", kl_ast_line(top[i + 1]));
            if (g->early && i + 4 != nt)
                return WHY("statements other than the accumulator, the loop and the store follow the guard (line %u)",
                           kl_ast_line(g->guard));
            break;
        }
        if (!rb_is(top[i], "declaration"))
            return WHY("the statement at line %u is not a declaration the tiled form can keep", kl_ast_line(top[i]));
        if (g->npro == MAXPRO) return WHY("too many declarations in the kernel");
        g->prologue[g->npro++] = top[i];
    }
    for (unsigned i = 0; i < g->npro; i++) {
        char w[64];
        kl_snprintf(w, sizeof w, "the declaration at line %u", kl_ast_line(g->prologue[i]));
        if (!deps_ok(ctx, ax, g, g->prologue[i], NULL, NULL, NULL, g->why, sizeof g->why, w)) return true;
        if (rb_count_ident(ctx, g->prologue[i], g->row) || rb_count_ident(ctx, g->prologue[i], g->col))
            return WHY("the declaration at line %u uses %s or %s", kl_ast_line(g->prologue[i]), g->row, g->col);
    }
    /* what each piece may depend on */
    char wa[80], wb[80];
    kl_snprintf(wa, sizeof wa, "A's element at line %u", kl_ast_line(g->aacc));
    kl_snprintf(wb, sizeof wb, "B's element at line %u", kl_ast_line(g->bacc));
    if (!deps_ok(ctx, ax, g, g->aacc, g->row, g->k, NULL, g->why, sizeof g->why, wa) ||
        !deps_ok(ctx, ax, g, g->bacc, g->k, g->col, NULL, g->why, sizeof g->why, wb) ||
        !deps_ok(ctx, ax, g, g->store, g->row, g->col, g->acc, g->why, sizeof g->why, "the store") ||
        !deps_ok(ctx, ax, g, if_cond(g->guard), g->row, g->col, NULL, g->why, sizeof g->why, "the guard"))
        return true;
    TSNode cond = rb_field(L->node, "condition");
    if (!ts_node_is_null(cond) && !deps_ok(ctx, ax, g, rb_field(kl_ast_unparen(cond), "right"), NULL, NULL, NULL, g->why,
                                           sizeof g->why, "the loop bound"))
        return true;
    /* A and B must not be what the store writes */
    char ab[64], bb[64];
    text_to(ctx, rb_field(g->aacc, "argument"), ab, sizeof ab);
    text_to(ctx, rb_field(g->bacc, "argument"), bb, sizeof bb);
    if (rb_count_ident(ctx, g->store, ab) || rb_count_ident(ctx, g->store, bb))
        return WHY("the store at line %u touches %s or %s, which the loop reads", kl_ast_line(g->store), ab, bb);
#undef WHY
    return true;
}

/* ---- launches ------------------------------------------------------------------------------------------- */

/* A dim3 configuration: a local `dim3 g(...)` used only by this launch (decl set), or the
 * expression in the <<< >>>. Its arguments' texts. */
typedef struct cfg {
    TSNode expr;             /* the expression in the launch */
    TSNode decl;             /* the local's declaration, or null */
    TSNode name;             /* the local's name */
    char args[3][160];
    unsigned nargs;
} cfg;

static void cfg_args(const kl_rule_ctx *ctx, TSNode v, cfg *c)
{
    TSNode args = v;
    if (rb_is(v, "call_expression") && text_is(ctx, rb_field(v, "function"), "dim3")) args = rb_field(v, "arguments");
    if (rb_is(args, "argument_list") || rb_is(args, "initializer_list") || rb_is(args, "parameter_list")) {
        c->nargs = 0;
        for (uint32_t i = 0; i < ts_node_named_child_count(args) && c->nargs < 3; i++)
            text_to(ctx, ts_node_named_child(args, i), c->args[c->nargs++], sizeof c->args[0]);
        return;
    }
    c->nargs = 1;
    text_to(ctx, v, c->args[0], sizeof c->args[0]);
}

static void cfg_read(const kl_rule_ctx *ctx, const kl_launch_site *l, TSNode e, cfg *c)
{
    memset(c, 0, sizeof *c);
    c->expr = e;
    if (rb_is(e, "identifier")) {
        char name[64];
        text_to(ctx, e, name, sizeof name);
        TSNode body = kl_ast_function_body(l->host_fn);
        TSNode v = {{0}, 0, 0};
        TSNode d = top_decl(ctx, body, name, &v);
        TSNode dc = {{0}, 0, 0};
        if (!ts_node_is_null(d))
            for (uint32_t k = 0; k < ts_node_named_child_count(d); k++)
                if (text_is(ctx, kl_ast_declarator_name(ts_node_named_child(d, k)), name)) dc = ts_node_named_child(d, k);
        /* `dim3 block(BLOCK, BLOCK);` reads as a function declarator: its "parameters" are the arguments */
        if (rb_is(dc, "function_declarator") && ts_node_is_null(v)) v = rb_field(dc, "parameters");
        if (!ts_node_is_null(dc) && rb_count_ident(ctx, body, name) == 2 && ts_node_named_child_count(d) == 2 &&
            !ts_node_is_null(v)) {
            c->decl = d;
            c->name = kl_ast_declarator_name(dc);
            cfg_args(ctx, v, c);
            return;
        }
    }
    cfg_args(ctx, e, c);
}

/* Replace a configuration with dim3(args). */
static kl_status cfg_write(const kl_rule_ctx *ctx, const cfg *c, const char *args, bool plain, kl_edits *out)
{
    if (!ts_node_is_null(c->decl)) {
        char name[64];
        text_to(ctx, c->name, name, sizeof name);
        uint32_t a = ts_node_start_byte(c->decl), b = ts_node_start_byte(c->name);
        return kl_edits_addf(out, a, ts_node_end_byte(c->decl), "%.*s%s(%s);", (int)(b - a), ctx->text + a, name, args);
    }
    if (plain) return kl_edits_addf(out, ts_node_start_byte(c->expr), ts_node_end_byte(c->expr), "%s", args);
    return kl_edits_addf(out, ts_node_start_byte(c->expr), ts_node_end_byte(c->expr), "dim3(%s)", args);
}

/* A kernel-side bound (a parameter name or a constant) in the launch's terms, into buf. */
static bool host_bound(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const kl_launch_site *l, const char *b,
                       char *buf, size_t size)
{
    int pi = kl_affine_param_index(ax, b);
    if (pi >= 0) {
        if ((uint32_t)pi >= ts_node_named_child_count(l->args)) return false;
        TSNode a = ts_node_named_child(l->args, (uint32_t)pi);
        char t[150];
        text_to(ctx, a, t, sizeof t);
        bool simple = rb_is(a, "identifier") || rb_is(a, "number_literal") || rb_is(a, "field_expression");
        kl_snprintf(buf, size, simple ? "%s" : "(%s)", t);
        return true;
    }
    for (const char *p = b; *p; p++)
        if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'))) return false;
    /* a name the host sees too: a macro or a file-level constant */
    TSNode fb = kl_ast_function_body(fn);
    local_find f = {ctx, b, false};
    rb_walk(fb, local_visit, &f);
    if (f.found) return false;
    kl_snprintf(buf, size, "%s", b);
    return true;
}

typedef struct launch_plan {
    kl_launch_site *l;
    cfg grid, block;
    char m[160], n[160];
} launch_plan;

/* The launches of the kernel, with the host-side M and N: false with why when one cannot be
 * rewritten. */
static bool plan_launches(const kl_rule_ctx *ctx, kl_affine_ctx *ax, TSNode fn, const char *kernel, const char *M,
                          const char *N, kl_launch_sites *ls, launch_plan *plans, unsigned max, unsigned *np, char *why,
                          size_t size)
{
    *np = 0;
    for (unsigned i = 0; i < ls->count; i++) {
        kl_launch_site *l = &ls->items[i];
        if (strcmp(l->kernel, kernel)) continue;
        if (*np == max) {
            kl_snprintf(why, size, "more than %u launches of %s", max, kernel);
            return false;
        }
        launch_plan *p = &plans[(*np)++];
        memset(p, 0, sizeof *p);
        p->l = l;
        if (ts_node_is_null(l->grid) || ts_node_is_null(l->block)) {
            kl_snprintf(why, size, "the launch at line %u has no grid and block", kl_ast_line(l->call));
            return false;
        }
        cfg_read(ctx, l, l->grid, &p->grid);
        cfg_read(ctx, l, l->block, &p->block);
        if (!host_bound(ctx, ax, fn, l, M, p->m, sizeof p->m) || !host_bound(ctx, ax, fn, l, N, p->n, sizeof p->n)) {
            kl_snprintf(why, size, "the bounds %s and %s are not parameters or file-level constants that the launch at line %u "
                        "can use", M, N, kl_ast_line(l->call));
            return false;
        }
    }
    if (*np == 0) {
        kl_snprintf(why, size, "%s is not launched in the file: its grid could not follow the new tiles", kernel);
        return false;
    }
    return true;
}

/* The edits of every launch: grid (n + BN-1) / BN x (m + BM-1) / BM (x z), block as given. */
static kl_status write_launches(const kl_rule_ctx *ctx, launch_plan *plans, unsigned np, int bm, int bn, const char *block,
                                bool plain_block, kl_edits *out)
{
    for (unsigned i = 0; i < np; i++) {
        launch_plan *p = &plans[i];
        char g[600];
        kl_snprintf(g, sizeof g, "(%s + %d) / %d, (%s + %d) / %d%s%s", p->n, bn - 1, bn, p->m, bm - 1, bm,
                    p->grid.nargs == 3 ? ", " : "", p->grid.nargs == 3 ? p->grid.args[2] : "");
        kl_status st = cfg_write(ctx, &p->grid, g, false, out);
        if (st == KL_OK) st = cfg_write(ctx, &p->block, block, plain_block, out);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

/* ---- apply ------------------------------------------------------------------------------------------------- */

static void add_stmt_text(const kl_rule_ctx *ctx, kl_strbuf *sb, TSNode n, const char *ind)
{
    uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
    kl_strbuf_addf(sb, "%s%.*s\n", ind, (int)(b - a), ctx->text + a);
}

/* The #include line position for <mma.h>: after the last top-level #include, else 0. */
static uint32_t include_at(const kl_rule_ctx *ctx)
{
    TSNode root = ts_tree_root_node(kl_source_tree(ctx->src));
    uint32_t at = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(root); i++) {
        TSNode d = ts_node_named_child(root, i);
        if (rb_is(d, "preproc_include")) at = ts_node_end_byte(d);
    }
    if (at && ctx->text[at - 1] != '\n') at = rb_line_end(ctx, at);
    return at;
}

/* Is the access (a subscript) contiguous along variable v: coefficient 1 on it? */
static bool unit_stride(kl_affine_ctx *ax, TSNode access, const char *v)
{
    if (!rb_is(access, "subscript_expression")) return false;
    TSNode idx = kl_ast_subscript_index(access);
    kl_affine a;
    memset(&a, 0, sizeof a);
    int64_t c = 0;
    bool ok = !ts_node_is_null(idx) && kl_affine_of(ax, idx, &a) == KL_OK && a.ok && kl_affine_coef_int(&a, v, &c) && c == 1;
    kl_affine_release(&a);
    return ok;
}

static void cp_async_text(kl_strbuf *sb, const char *ind, const char *dst, const char *src)
{
    kl_strbuf_addf(sb, "%sasm volatile(\"cp.async.cg.shared.global [%%0], [%%1], 16;\\n\" :: \"r\"((unsigned)__cvta_generic_to_shared(%s)), \"l\"(%s));\n",
                   ind, dst, src);
}

/* How a tile load moves its 16-byte pieces. */
typedef enum { COPY_REGS, COPY_ASYNC, COPY_ASYNC_UNCHECKED } copy_kind;

/* One tile's load, 8 elements (16 bytes) per thread and step: `kl_xs[r][c..c+7]` from ACCESS with
 * n1 = o1 + r and n2 = o2 + c. Checked (COPY_REGS through registers, COPY_ASYNC by cp.async): 16 bytes
 * where the 8 are in bounds and the address 16-byte aligned, else element by element (n2 + q, the
 * contiguous one). COPY_ASYNC_UNCHECKED: cp.async always (the caller knows the tile is inside). The
 * loop starts at indentation in3. */
static void tile_copy_loop(kl_strbuf *sb, const char *in3, const char *in4, const char *in5, const char *in6,
                           const char *tile, const char *rows, const char *cols, const char *t1, const char *n1,
                           const char *o1, const char *b1, const char *t2, const char *n2, const char *o2, const char *b2,
                           const char *access, const char *E, copy_kind kind)
{
    bool fast = kind == COPY_ASYNC_UNCHECKED;
    char dst[96], src[600];
    kl_snprintf(dst, sizeof dst, "&%s[kl_r][kl_c]", tile);
    kl_snprintf(src, sizeof src, "&%s", access);
    if (fast) kl_strbuf_addf(sb, "%s#pragma unroll\n", in3);
    kl_strbuf_addf(sb, "%sfor (int kl_e = threadIdx.x; kl_e < %s * %s / 8; kl_e += KL_THREADS) {\n", in3, rows, cols);
    kl_strbuf_addf(sb, "%sconst int kl_r = kl_e / (%s / 8), kl_c = kl_e %% (%s / 8) * 8;\n", in4, cols, cols);
    kl_strbuf_addf(sb, "%sconst %s %s = %s + kl_r;\n", in4, t1, n1, o1);
    kl_strbuf_addf(sb, "%sconst %s %s = %s + kl_c;\n", in4, t2, n2, o2);
    if (fast) cp_async_text(sb, in4, dst, src);
    else {
        kl_strbuf_addf(sb, "%sif (%s < %s && %s + 7 < %s && reinterpret_cast<unsigned long long>(&%s) %% 16 == 0) {\n", in4, n1,
                       b1, n2, b2, access);
        if (kind == COPY_ASYNC) cp_async_text(sb, in5, dst, src);
        else kl_strbuf_addf(sb, "%s*reinterpret_cast<uint4*>(%s) = *reinterpret_cast<const uint4*>(%s);\n", in5, dst, src);
        kl_strbuf_addf(sb, "%s} else {\n", in4);
        kl_strbuf_addf(sb, "%sfor (int kl_q = 0; kl_q < 8; kl_q++) {\n", in5);
        kl_strbuf_addf(sb, "%sconst %s %s = %s + kl_c + kl_q;\n", in6, t2, n2, o2);
        kl_strbuf_addf(sb, "%s%s[kl_r][kl_c + kl_q] = (%s < %s && %s < %s) ? %s : %s(0.0f);\n", in6, tile, n1, b1, n2, b2,
                       access, E);
        kl_strbuf_addf(sb, "%s}\n", in5);
        kl_strbuf_addf(sb, "%s}\n", in4);
    }
    kl_strbuf_addf(sb, "%s}\n", in3);
}

/* Is B's access contiguous along col, a local of the thread index: the same coefficient (not 0) on
 * threadIdx.x in the access and in col's definition? */
static bool unit_stride_col(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const tc_naive *g)
{
    if (!rb_is(g->bacc, "subscript_expression")) return false;
    TSNode value = {0};
    for (uint32_t i = 0; i < ts_node_named_child_count(g->cdecl); i++) {
        TSNode d = ts_node_named_child(g->cdecl, i);
        if (rb_is(d, "init_declarator") && rb_text_is(ctx, rb_field(d, "declarator"), g->col)) value = rb_field(d, "value");
    }
    if (ts_node_is_null(value)) return false;
    TSNode idx = kl_ast_subscript_index(g->bacc);
    kl_affine a, c;
    memset(&a, 0, sizeof a);
    memset(&c, 0, sizeof c);
    int64_t ka = 0, kc = 0;
    bool ok = !ts_node_is_null(idx) && kl_affine_of(ax, idx, &a) == KL_OK && a.ok && kl_affine_of(ax, value, &c) == KL_OK &&
              c.ok && kl_affine_coef_int(&a, "threadIdx.x", &ka) && kl_affine_coef_int(&c, "threadIdx.x", &kc) && ka == kc &&
              ka != 0;
    kl_affine_release(&a);
    kl_affine_release(&c);
    return ok;
}


/* The texts both apply forms write with: indentation levels (in[k]: k levels of the body's), the
 * operands' subscripts, the store guard and the function's indentation. */
typedef struct tc_text {
    char in[7][96];
    char a_text[512], b_text[512], guard[400], fnind[16];
} tc_text;

static void tc_text_of(const kl_rule_ctx *ctx, const tc_naive *g, tc_text *t)
{
    char unit[16] = "    ";
    TSNode first = ts_node_named_child(g->body, 0);
    if (!ts_node_is_null(first)) {
        rb_indent_of(ctx, ts_node_start_byte(first), unit, sizeof unit);
        if (!unit[0] || !kl_rules_starts_line(ctx, ts_node_start_byte(first))) kl_snprintf(unit, sizeof unit, "    ");
    }
    t->in[0][0] = '\0';
    for (int k = 1; k < 7; k++) kl_snprintf(t->in[k], sizeof t->in[k], "%s%s", t->in[k - 1], unit);
    text_to(ctx, g->aacc, t->a_text, sizeof t->a_text);
    text_to(ctx, g->bacc, t->b_text, sizeof t->b_text);
    text_to(ctx, if_cond(g->guard), t->guard, sizeof t->guard);
    rb_indent_of(ctx, ts_node_start_byte(g->fn), t->fnind, sizeof t->fnind);
}

static kl_status apply_pipelined(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const tc_naive *g, const char *kernel, int wm,
                                 int wn, int fm, int fn_, int bk, int stages, kl_edits *out, kl_error *err);

/* A block tile no larger than the sizes that are compile-time constants (M, N, K written as a
 * constant of the file or a #define): past them the tile is padding the block loads and
 * multiplies for nothing, and a smaller tile does the same work with more blocks. Sizes known
 * only at run time are not judged here. */
static kl_status tile_fits_sizes(const kl_rule_ctx *ctx, const tc_naive *g, int bm, int bn, int bk, kl_error *err)
{
    const struct {
        const char *name, *what;
        int tile;
    } dims[] = {{g->M, "block tile's rows", bm}, {g->N, "block tile's columns", bn}, {g->K, "k tile", bk}};
    for (unsigned i = 0; i < 3; i++) {
        int64_t v = 0;
        if (!dims[i].name[0] || !kl_const_eval_name(ctx->src, g->fn, dims[i].name, &v, NULL, 0) || v <= 0) continue;
        if (dims[i].tile > v)
            return kl_rule_not_applicable(err, "the %s (%d) exceed%s %s = %lld, a compile-time size: the rest of the tile "
                                          "would be padding; a smaller tile fits", dims[i].what, dims[i].tile,
                                          i == 2 ? "s" : "", dims[i].name, (long long)v);
    }
    return KL_OK;
}

static kl_status apply_naive(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const tc_naive *g, const char *kernel, int wm,
                             int wn, int fm, int fn_, int bk, bool vec, int stages, kl_edits *out, kl_error *err)
{
    if (g->why[0]) return kl_rule_not_applicable(err, "%s", g->why);
    kl_status fit = tile_fits_sizes(ctx, g, 16 * wm * fm, 16 * wn * fn_, bk, err);
    if (fit != KL_OK) return fit;
    if (stages > 1) return apply_pipelined(ctx, ax, g, kernel, wm, wn, fm, fn_, bk, stages, out, err);
    const int bm = 16 * wm * fm, bn = 16 * wn * fn_, threads = 32 * wm * wn;
    /* the A and B tiles, and the f32 staging tile of C used after the k loop: one buffer for both
     * when together they would not fit */
    const size_t ab = (size_t)bm * (bk + 8) * 2 + (size_t)bk * (bn + 8) * 2, cs = (size_t)bm * (bn + 4) * 4;
    const bool alias = ab + cs > SMEM_LIMIT;
    if ((alias ? (ab > cs ? ab : cs) : ab + cs) > SMEM_LIMIT)
        return kl_rule_not_applicable(err, "a %d x %d block tile (k tile %d) needs %zu bytes of shared memory, over 48 KiB",
                                      bm, bn, bk, ab > cs ? ab : cs);
    if (vec && !unit_stride(ax, g->aacc, g->k))
        return kl_rule_not_applicable(err, "vector_loads: A's elements are not contiguous along '%s'", g->k);
    if (vec && !unit_stride_col(ctx, ax, g))
        return kl_rule_not_applicable(err, "vector_loads: B's elements are not contiguous along '%s'", g->col);
    kl_launch_sites ls = {0};
    kl_status st = kl_ast_launches(ctx->src, &ls, err);
    if (st != KL_OK) return st;
    launch_plan plans[8];
    unsigned np = 0;
    char why[300];
    if (!plan_launches(ctx, ax, g->fn, kernel, g->M, g->N, &ls, plans, 8, &np, why, sizeof why)) {
        kl_launch_sites_release(&ls);
        return kl_rule_not_applicable(err, "%s", why);
    }
    tc_text T;
    tc_text_of(ctx, g, &T);
    const char *in = T.in[1], *in2 = T.in[2], *in3 = T.in[3], *in4 = T.in[4], *in5 = T.in[5];
    const char *E = g->elem, *a_text = T.a_text, *b_text = T.b_text, *guard = T.guard, *fnind = T.fnind;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "{\n%s%s %dx16x16 fragments of %s, f32 accumulators: %d x %d warps, each %d x %d fragments\n", in,
                   MARKER, 16, dtype_of(E), wm, wn, fm, fn_);
    for (unsigned i = 0; i < g->npro; i++) add_stmt_text(ctx, &sb, g->prologue[i], in);
    kl_strbuf_addf(&sb, "%sconstexpr int KL_FM = %d, KL_FN = %d, KL_WARPS_M = %d, KL_WARPS_N = %d;\n", in, fm, fn_, wm, wn);
    kl_strbuf_addf(&sb, "%sconstexpr int KL_BM = %d, KL_BN = %d, KL_BK = %d, KL_THREADS = %d;\n", in, bm, bn, bk, threads);
    kl_strbuf_addf(&sb, "%sstatic_assert(KL_THREADS == 32 * KL_WARPS_M * KL_WARPS_N, \"a warp per %d x %d piece of C\");\n", in,
                   16 * fm, 16 * fn_);
    if (alias) {
        kl_strbuf_addf(&sb, "%s// the A and B tiles during the k loop, the f32 tile of C after it: one buffer\n", in);
        kl_strbuf_addf(&sb, "%sconstexpr int KL_AB = (KL_BM * (KL_BK + 8) + KL_BK * (KL_BN + 8)) * %d, KL_CB = KL_BM * (KL_BN + 4) * 4;\n",
                       in, (int)sizeof(uint16_t));
        kl_strbuf_addf(&sb, "%s__shared__ __align__(128) unsigned char kl_smem[KL_AB > KL_CB ? KL_AB : KL_CB];\n", in);
        kl_strbuf_addf(&sb, "%sauto kl_as = reinterpret_cast<%s (*)[KL_BK + 8]>(kl_smem);\n", in, E);
        kl_strbuf_addf(&sb, "%sauto kl_bs = reinterpret_cast<%s (*)[KL_BN + 8]>(kl_smem + KL_BM * (KL_BK + 8) * %d);\n", in, E,
                       (int)sizeof(uint16_t));
        kl_strbuf_addf(&sb, "%sauto kl_cs = reinterpret_cast<float (*)[KL_BN + 4]>(kl_smem);\n", in);
    } else {
        kl_strbuf_addf(&sb, "%s__shared__ __align__(32) %s kl_as[KL_BM][KL_BK + 8];\n", in, E);
        kl_strbuf_addf(&sb, "%s__shared__ __align__(32) %s kl_bs[KL_BK][KL_BN + 8];\n", in, E);
        kl_strbuf_addf(&sb, "%s__shared__ __align__(32) float kl_cs[KL_BM][KL_BN + 4];\n", in);
    }
    kl_strbuf_addf(&sb, "%sconst int kl_warp = threadIdx.x / 32;\n", in);
    kl_strbuf_addf(&sb, "%sconst int kl_wm = kl_warp / KL_WARPS_N * 16 * KL_FM, kl_wn = kl_warp %% KL_WARPS_N * 16 * KL_FN;\n", in);
    kl_strbuf_addf(&sb, "%sconst %s kl_m0 = (%s)blockIdx.y * KL_BM;\n", in, g->rtype, g->rtype);
    kl_strbuf_addf(&sb, "%sconst %s kl_n0 = (%s)blockIdx.x * KL_BN;\n", in, g->ctype, g->ctype);
    kl_strbuf_addf(&sb, "%snvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> kl_acc[KL_FM][KL_FN];\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++) nvcuda::wmma::fill_fragment(kl_acc[kl_i][kl_j], 0.0f);\n", in2);
    kl_strbuf_addf(&sb, "%sfor (%s kl_k0 = 0; kl_k0 < %s; kl_k0 += KL_BK) {\n", in, g->ktype, g->K);
    if (vec) {
        tile_copy_loop(&sb, in2, in3, in4, in5, "kl_as", "KL_BM", "KL_BK", g->rtype, g->row, "kl_m0", g->M, g->ktype, g->k,
                       "kl_k0", g->K, a_text, E, COPY_REGS);
        tile_copy_loop(&sb, in2, in3, in4, in5, "kl_bs", "KL_BK", "KL_BN", g->ktype, g->k, "kl_k0", g->K, g->ctype, g->col,
                       "kl_n0", g->N, b_text, E, COPY_REGS);
    } else {
    kl_strbuf_addf(&sb, "%sfor (int kl_e = threadIdx.x; kl_e < KL_BM * KL_BK; kl_e += KL_THREADS) {\n", in2);
    kl_strbuf_addf(&sb, "%sconst %s %s = kl_m0 + kl_e / KL_BK;\n", in3, g->rtype, g->row);
    kl_strbuf_addf(&sb, "%sconst %s %s = kl_k0 + kl_e %% KL_BK;\n", in3, g->ktype, g->k);
    kl_strbuf_addf(&sb, "%skl_as[kl_e / KL_BK][kl_e %% KL_BK] = (%s < %s && %s < %s) ? %s : %s(0.0f);\n", in3, g->row, g->M,
                   g->k, g->K, a_text, E);
    kl_strbuf_addf(&sb, "%s}\n", in2);
    kl_strbuf_addf(&sb, "%sfor (int kl_e = threadIdx.x; kl_e < KL_BK * KL_BN; kl_e += KL_THREADS) {\n", in2);
    kl_strbuf_addf(&sb, "%sconst %s %s = kl_k0 + kl_e / KL_BN;\n", in3, g->ktype, g->k);
    kl_strbuf_addf(&sb, "%sconst %s %s = kl_n0 + kl_e %% KL_BN;\n", in3, g->ctype, g->col);
    kl_strbuf_addf(&sb, "%skl_bs[kl_e / KL_BN][kl_e %% KL_BN] = (%s < %s && %s < %s) ? %s : %s(0.0f);\n", in3, g->k, g->K,
                   g->col, g->N, b_text, E);
    kl_strbuf_addf(&sb, "%s}\n", in2);
    }
    kl_strbuf_addf(&sb, "%s__syncthreads();\n", in2);
    kl_strbuf_addf(&sb, "%snvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, %s, nvcuda::wmma::row_major> kl_fa[KL_FM];\n",
                   in2, E);
    kl_strbuf_addf(&sb, "%snvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, %s, nvcuda::wmma::row_major> kl_fb[KL_FN];\n",
                   in2, E);
    if (bk == 16) {
        kl_strbuf_addf(&sb, "%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in2);
        kl_strbuf_addf(&sb, "%snvcuda::wmma::load_matrix_sync(kl_fa[kl_i], &kl_as[kl_wm + 16 * kl_i][0], KL_BK + 8);\n", in3);
        kl_strbuf_addf(&sb, "%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++)\n", in2);
        kl_strbuf_addf(&sb, "%snvcuda::wmma::load_matrix_sync(kl_fb[kl_j], &kl_bs[0][kl_wn + 16 * kl_j], KL_BN + 8);\n", in3);
        kl_strbuf_addf(&sb, "%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in2);
        kl_strbuf_addf(&sb, "%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++)\n", in3);
        kl_strbuf_addf(&sb, "%snvcuda::wmma::mma_sync(kl_acc[kl_i][kl_j], kl_fa[kl_i], kl_fb[kl_j], kl_acc[kl_i][kl_j]);\n",
                       in4);
    } else {
        /* KL_BK / 16 mma steps over the tiles */
        kl_strbuf_addf(&sb, "%sfor (int kl_kk = 0; kl_kk < KL_BK; kl_kk += 16) {\n", in2);
        kl_strbuf_addf(&sb, "%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in3);
        kl_strbuf_addf(&sb, "%snvcuda::wmma::load_matrix_sync(kl_fa[kl_i], &kl_as[kl_wm + 16 * kl_i][kl_kk], KL_BK + 8);\n",
                       in4);
        kl_strbuf_addf(&sb, "%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++)\n", in3);
        kl_strbuf_addf(&sb, "%snvcuda::wmma::load_matrix_sync(kl_fb[kl_j], &kl_bs[kl_kk][kl_wn + 16 * kl_j], KL_BN + 8);\n",
                       in4);
        kl_strbuf_addf(&sb, "%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in3);
        kl_strbuf_addf(&sb, "%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++)\n", in4);
        kl_strbuf_addf(&sb, "%snvcuda::wmma::mma_sync(kl_acc[kl_i][kl_j], kl_fa[kl_i], kl_fb[kl_j], kl_acc[kl_i][kl_j]);\n",
                       in5);
        kl_strbuf_addf(&sb, "%s}\n", in2);
    }
    kl_strbuf_addf(&sb, "%s__syncthreads();\n", in2);
    kl_strbuf_addf(&sb, "%s}\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++)\n", in2);
    kl_strbuf_addf(&sb, "%snvcuda::wmma::store_matrix_sync(&kl_cs[kl_wm + 16 * kl_i][kl_wn + 16 * kl_j], kl_acc[kl_i][kl_j], "
                   "KL_BN + 4, nvcuda::wmma::mem_row_major);\n", in3);
    kl_strbuf_addf(&sb, "%s__syncthreads();\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_e = threadIdx.x; kl_e < KL_BM * KL_BN; kl_e += KL_THREADS) {\n", in);
    kl_strbuf_addf(&sb, "%sconst %s %s = kl_m0 + kl_e / KL_BN;\n", in2, g->rtype, g->row);
    kl_strbuf_addf(&sb, "%sconst %s %s = kl_n0 + kl_e %% KL_BN;\n", in2, g->ctype, g->col);
    if (g->early) {
        kl_strbuf_addf(&sb, "%sif (%s) continue;\n", in2, guard);
        kl_strbuf_addf(&sb, "%sfloat %s = kl_cs[kl_e / KL_BN][kl_e %% KL_BN];\n", in2, g->acc);
        add_stmt_text(ctx, &sb, g->store, in2);
    } else {
        kl_strbuf_addf(&sb, "%sif (%s) {\n", in2, guard);
        kl_strbuf_addf(&sb, "%sfloat %s = kl_cs[kl_e / KL_BN][kl_e %% KL_BN];\n", in3, g->acc);
        add_stmt_text(ctx, &sb, g->store, in3);
        kl_strbuf_addf(&sb, "%s}\n", in2);
    }
    kl_strbuf_addf(&sb, "%s}\n%s}", in, fnind);
    st = sb.failed ? KL_ERR_NOMEM : kl_edits_add(out, ts_node_start_byte(g->body), ts_node_end_byte(g->body), kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    char block[32];
    kl_snprintf(block, sizeof block, "%d", threads);
    if (st == KL_OK) st = write_launches(ctx, plans, np, bm, bn, block, true, out);
    if (st == KL_OK && !strstr(ctx->text, "<mma.h>")) {
        uint32_t at = include_at(ctx);
        st = kl_edits_add(out, at, at, "#include <mma.h>\n");
    }
    kl_launch_sites_release(&ls);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

/* ---- apply, pipelined (stages > 1) -----------------------------------------------------------------------------
 *
 * The k tiles go through a ring of `stages` buffers in dynamic shared memory, filled with 16-byte
 * cp.async copies issued stages - 1 tiles ahead; one barrier per k tile (the copy into the buffer
 * the previous tile used is issued after it). A block whose tile lies inside A and B, with every row
 * of both 16-byte aligned (tested once: the index is affine, so two rows tell), copies without a
 * test per copy; other blocks copy 16 bytes where the 8 elements are in bounds and aligned and
 * element by element elsewhere, as vector_loads does. Each warp stores its accumulators through a
 * 16 x 16 f32 staging tile of its own (the block's C tile would not fit beside the ring), running
 * the original store per element under the original guard. Launches get the dynamic shared memory
 * (cudaFuncSetAttribute before each, for more than 48 KiB). */

/* Each launch: the dynamic shared memory in its configuration, and cudaFuncSetAttribute before it. */
static kl_status launch_smem(const kl_rule_ctx *ctx, launch_plan *plans, unsigned np, size_t bytes, kl_edits *out,
                             kl_error *err)
{
    for (unsigned i = 0; i < np; i++) {
        kl_launch_site *l = plans[i].l;
        TSNode stmt = ts_node_parent(l->call);
        if (!rb_is(stmt, "expression_statement") || !rb_is(ts_node_parent(stmt), "compound_statement") ||
            !kl_rules_starts_line(ctx, ts_node_start_byte(stmt)))
            return kl_rule_not_applicable(err, "%s:%u: the launch is not a statement of its own in a block: "
                                          "cudaFuncSetAttribute cannot go before it", kl_source_name(ctx->src),
                                          kl_node_span(l->call).line);
        char ind[64];
        rb_indent_of(ctx, ts_node_start_byte(stmt), ind, sizeof ind);
        uint32_t fa = ts_node_start_byte(l->call), fb = ts_node_start_byte(l->config);
        kl_status st = kl_edits_addf(out, ts_node_start_byte(stmt), ts_node_start_byte(stmt),
                                     "cudaFuncSetAttribute(%.*s, cudaFuncAttributeMaxDynamicSharedMemorySize, %zu);\n%s",
                                     (int)(fb - fa), ctx->text + fa, bytes, ind);
        if (st == KL_OK) {
            if (!ts_node_is_null(l->smem)) st = kl_edits_addf(out, ts_node_start_byte(l->smem), ts_node_end_byte(l->smem), "%zu", bytes);
            else st = kl_edits_addf(out, ts_node_end_byte(l->block), ts_node_end_byte(l->block), ", %zu", bytes);
        }
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

static kl_status apply_pipelined(const kl_rule_ctx *ctx, kl_affine_ctx *ax, const tc_naive *g, const char *kernel, int wm,
                                 int wn, int fm, int fn_, int bk, int stages, kl_edits *out, kl_error *err)
{
    const int bm = 16 * wm * fm, bn = 16 * wn * fn_, threads = 32 * wm * wn;
    const size_t ab = ((size_t)bm * (bk + 8) + (size_t)bk * (bn + 8)) * 2, cs = (size_t)wm * wn * 16 * 20 * 4;
    const size_t smem = (size_t)stages * ab > cs ? (size_t)stages * ab : cs;
    if (smem > 227 * 1024)
        return kl_rule_not_applicable(err, "%d stages of a %d x %d block tile (k tile %d) need %zu bytes of shared memory, "
                                      "over the 227 KiB a block can have", stages, bm, bn, bk, smem);
    if (!unit_stride(ax, g->aacc, g->k))
        return kl_rule_not_applicable(err, "stages: A's elements are not contiguous along '%s' (16-byte copies)", g->k);
    if (!unit_stride_col(ctx, ax, g))
        return kl_rule_not_applicable(err, "stages: B's elements are not contiguous along '%s' (16-byte copies)", g->col);
    kl_launch_sites ls = {0};
    kl_status st = kl_ast_launches(ctx->src, &ls, err);
    if (st != KL_OK) return st;
    launch_plan plans[8];
    unsigned np = 0;
    char why[300];
    if (!plan_launches(ctx, ax, g->fn, kernel, g->M, g->N, &ls, plans, 8, &np, why, sizeof why)) {
        kl_launch_sites_release(&ls);
        return kl_rule_not_applicable(err, "%s", why);
    }
    tc_text T;
    tc_text_of(ctx, g, &T);
    const char *in = T.in[1], *in2 = T.in[2], *in3 = T.in[3], *in4 = T.in[4], *in5 = T.in[5], *in6 = T.in[6];
    const char *E = g->elem, *a_text = T.a_text, *b_text = T.b_text, *guard = T.guard, *fnind = T.fnind;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "{\n%s%s %dx16x16 fragments of %s, f32 accumulators: %d x %d warps, each %d x %d fragments; a ring of %d "
                        "k tiles filled by cp.async\n",
                   in, MARKER, 16, dtype_of(E), wm, wn, fm, fn_, stages);
    for (unsigned i = 0; i < g->npro; i++) add_stmt_text(ctx, &sb, g->prologue[i], in);
    kl_strbuf_addf(&sb, "%sconstexpr int KL_FM = %d, KL_FN = %d, KL_WARPS_M = %d, KL_WARPS_N = %d;\n", in, fm, fn_, wm, wn);
    kl_strbuf_addf(&sb, "%sconstexpr int KL_BM = %d, KL_BN = %d, KL_BK = %d, KL_THREADS = %d, KL_STAGES = %d;\n", in, bm, bn, bk,
                   threads, stages);
    kl_strbuf_addf(&sb, "%sstatic_assert(KL_THREADS == 32 * KL_WARPS_M * KL_WARPS_N, \"a warp per %d x %d piece of C\");\n", in,
                   16 * fm, 16 * fn_);
    kl_strbuf_addf(&sb, "%sconstexpr int KL_AB = (KL_BM * (KL_BK + 8) + KL_BK * (KL_BN + 8)) * %d;  // bytes of one stage\n", in,
                   (int)sizeof(uint16_t));
    kl_strbuf_addf(&sb, "%s// the ring of stages during the k loop, a 16 x 16 f32 tile per warp after it (%zu bytes, given at launch)\n",
                   in, smem);
    kl_strbuf_addf(&sb, "%sextern __shared__ __align__(128) unsigned char kl_smem[];\n", in);
    kl_strbuf_addf(&sb, "%sauto kl_cs = reinterpret_cast<float (*)[16][20]>(kl_smem);\n", in);
    kl_strbuf_addf(&sb, "%sconst int kl_warp = threadIdx.x / 32, kl_lane = threadIdx.x %% 32;\n", in);
    kl_strbuf_addf(&sb, "%sconst int kl_wm = kl_warp / KL_WARPS_N * 16 * KL_FM, kl_wn = kl_warp %% KL_WARPS_N * 16 * KL_FN;\n", in);
    kl_strbuf_addf(&sb, "%sconst %s kl_m0 = (%s)blockIdx.y * KL_BM;\n", in, g->rtype, g->rtype);
    kl_strbuf_addf(&sb, "%sconst %s kl_n0 = (%s)blockIdx.x * KL_BN;\n", in, g->ctype, g->ctype);
    kl_strbuf_addf(&sb, "%snvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> kl_acc[KL_FM][KL_FN];\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++) nvcuda::wmma::fill_fragment(kl_acc[kl_i][kl_j], 0.0f);\n", in2);
    kl_strbuf_addf(&sb, "%s// every row of A and of B 16-byte aligned? (the indices are affine: two rows tell)\n", in);
    kl_strbuf_addf(&sb, "%sauto kl_a_at = [&](%s %s, %s %s) { return reinterpret_cast<unsigned long long>(&%s); };\n", in, g->rtype,
                   g->row, g->ktype, g->k, a_text);
    kl_strbuf_addf(&sb, "%sauto kl_b_at = [&](%s %s, %s %s) { return reinterpret_cast<unsigned long long>(&%s); };\n", in, g->ktype,
                   g->k, g->ctype, g->col, b_text);
    kl_strbuf_addf(&sb, "%sconst bool kl_aligned = (kl_a_at(kl_m0, 0) | kl_a_at(kl_m0 + 1, 0) | kl_b_at(0, kl_n0) | "
                        "kl_b_at(1, kl_n0)) %% 16 == 0;\n", in);
    kl_strbuf_addf(&sb, "%sauto kl_load = [&](int kl_st, %s kl_k0) {\n", in, g->ktype);
    kl_strbuf_addf(&sb, "%sauto kl_as = reinterpret_cast<%s (*)[KL_BK + 8]>(kl_smem + kl_st * KL_AB);\n", in2, E);
    kl_strbuf_addf(&sb, "%sauto kl_bs = reinterpret_cast<%s (*)[KL_BN + 8]>(kl_smem + kl_st * KL_AB + KL_BM * (KL_BK + 8) * %d);\n",
                   in2, E, (int)sizeof(uint16_t));
    kl_strbuf_addf(&sb, "%sif (kl_aligned && kl_m0 + KL_BM <= %s && kl_n0 + KL_BN <= %s && kl_k0 + KL_BK <= %s) {\n", in2, g->M,
                   g->N, g->K);
    tile_copy_loop(&sb, in3, in4, in5, in6, "kl_as", "KL_BM", "KL_BK", g->rtype, g->row, "kl_m0", g->M, g->ktype, g->k, "kl_k0",
                    g->K, a_text, E, COPY_ASYNC_UNCHECKED);
    tile_copy_loop(&sb, in3, in4, in5, in6, "kl_bs", "KL_BK", "KL_BN", g->ktype, g->k, "kl_k0", g->K, g->ctype, g->col, "kl_n0",
                    g->N, b_text, E, COPY_ASYNC_UNCHECKED);
    kl_strbuf_addf(&sb, "%sreturn;\n%s}\n", in3, in2);
    tile_copy_loop(&sb, in2, in3, in4, in5, "kl_as", "KL_BM", "KL_BK", g->rtype, g->row, "kl_m0", g->M, g->ktype, g->k, "kl_k0",
                    g->K, a_text, E, COPY_ASYNC);
    tile_copy_loop(&sb, in2, in3, in4, in5, "kl_bs", "KL_BK", "KL_BN", g->ktype, g->k, "kl_k0", g->K, g->ctype, g->col, "kl_n0",
                    g->N, b_text, E, COPY_ASYNC);
    kl_strbuf_addf(&sb, "%s};\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_s = 0; kl_s < KL_STAGES - 1; kl_s++) {\n", in);
    kl_strbuf_addf(&sb, "%sif ((%s)kl_s * KL_BK < %s) kl_load(kl_s, (%s)kl_s * KL_BK);\n", in2, g->ktype, g->K, g->ktype);
    kl_strbuf_addf(&sb, "%sasm volatile(\"cp.async.commit_group;\\n\");\n%s}\n", in2, in);
    kl_strbuf_addf(&sb, "%sfor (%s kl_k0 = 0, kl_it = 0; kl_k0 < %s; kl_k0 += KL_BK, kl_it++) {\n", in, g->ktype, g->K);
    kl_strbuf_addf(&sb, "%sasm volatile(\"cp.async.wait_group %%0;\\n\" :: \"n\"(KL_STAGES - 2));  // this tile's copies are done\n", in2);
    kl_strbuf_addf(&sb, "%s__syncthreads();\n", in2);
    kl_strbuf_addf(&sb, "%sif (kl_k0 + (KL_STAGES - 1) * KL_BK < %s) kl_load((kl_it + KL_STAGES - 1) %% KL_STAGES, kl_k0 + (KL_STAGES - 1) * KL_BK);\n",
                   in2, g->K);
    kl_strbuf_addf(&sb, "%sasm volatile(\"cp.async.commit_group;\\n\");\n", in2);
    kl_strbuf_addf(&sb, "%sauto kl_as = reinterpret_cast<%s (*)[KL_BK + 8]>(kl_smem + kl_it %% KL_STAGES * KL_AB);\n", in2, E);
    kl_strbuf_addf(&sb, "%sauto kl_bs = reinterpret_cast<%s (*)[KL_BN + 8]>(kl_smem + kl_it %% KL_STAGES * KL_AB + KL_BM * (KL_BK + 8) * %d);\n",
                   in2, E, (int)sizeof(uint16_t));
    kl_strbuf_addf(&sb, "%snvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, %s, nvcuda::wmma::row_major> kl_fa[KL_FM];\n",
                   in2, E);
    kl_strbuf_addf(&sb, "%snvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, %s, nvcuda::wmma::row_major> kl_fb[KL_FN];\n",
                   in2, E);
    kl_strbuf_addf(&sb, "%s#pragma unroll\n%sfor (int kl_kk = 0; kl_kk < KL_BK; kl_kk += 16) {\n", in2, in2);
    kl_strbuf_addf(&sb, "%s#pragma unroll\n%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in3, in3);
    kl_strbuf_addf(&sb, "%snvcuda::wmma::load_matrix_sync(kl_fa[kl_i], &kl_as[kl_wm + 16 * kl_i][kl_kk], KL_BK + 8);\n", in4);
    kl_strbuf_addf(&sb, "%s#pragma unroll\n%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++)\n", in3, in3);
    kl_strbuf_addf(&sb, "%snvcuda::wmma::load_matrix_sync(kl_fb[kl_j], &kl_bs[kl_kk][kl_wn + 16 * kl_j], KL_BN + 8);\n", in4);
    kl_strbuf_addf(&sb, "%s#pragma unroll\n%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in3, in3);
    kl_strbuf_addf(&sb, "%s#pragma unroll\n%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++)\n", in4, in4);
    kl_strbuf_addf(&sb, "%snvcuda::wmma::mma_sync(kl_acc[kl_i][kl_j], kl_fa[kl_i], kl_fb[kl_j], kl_acc[kl_i][kl_j]);\n", in5);
    kl_strbuf_addf(&sb, "%s}\n%s}\n", in2, in);
    kl_strbuf_addf(&sb, "%sasm volatile(\"cp.async.wait_group 0;\\n\");\n%s__syncthreads();\n", in, in);
    kl_strbuf_addf(&sb, "%sfor (int kl_i = 0; kl_i < KL_FM; kl_i++)\n", in);
    kl_strbuf_addf(&sb, "%sfor (int kl_j = 0; kl_j < KL_FN; kl_j++) {\n", in2);
    kl_strbuf_addf(&sb, "%snvcuda::wmma::store_matrix_sync(&kl_cs[kl_warp][0][0], kl_acc[kl_i][kl_j], 20, nvcuda::wmma::mem_row_major);\n",
                   in3);
    kl_strbuf_addf(&sb, "%s__syncwarp();\n", in3);
    kl_strbuf_addf(&sb, "%sfor (int kl_e = kl_lane; kl_e < 256; kl_e += 32) {\n", in3);
    kl_strbuf_addf(&sb, "%sconst %s %s = kl_m0 + kl_wm + 16 * kl_i + kl_e / 16;\n", in4, g->rtype, g->row);
    kl_strbuf_addf(&sb, "%sconst %s %s = kl_n0 + kl_wn + 16 * kl_j + kl_e %% 16;\n", in4, g->ctype, g->col);
    if (g->early) {
        kl_strbuf_addf(&sb, "%sif (%s) continue;\n", in4, guard);
        kl_strbuf_addf(&sb, "%sfloat %s = kl_cs[kl_warp][kl_e / 16][kl_e %% 16];\n", in4, g->acc);
        add_stmt_text(ctx, &sb, g->store, in4);
    } else {
        kl_strbuf_addf(&sb, "%sif (%s) {\n", in4, guard);
        kl_strbuf_addf(&sb, "%sfloat %s = kl_cs[kl_warp][kl_e / 16][kl_e %% 16];\n", in5, g->acc);
        add_stmt_text(ctx, &sb, g->store, in5);
        kl_strbuf_addf(&sb, "%s}\n", in4);
    }
    kl_strbuf_addf(&sb, "%s}\n%s__syncwarp();\n%s}\n%s}", in3, in3, in2, fnind);
    st = sb.failed ? KL_ERR_NOMEM : kl_edits_add(out, ts_node_start_byte(g->body), ts_node_end_byte(g->body), kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    char block[32];
    kl_snprintf(block, sizeof block, "%d", threads);
    if (st == KL_OK) st = write_launches(ctx, plans, np, bm, bn, block, true, out);
    if (st == KL_OK) {
        st = launch_smem(ctx, plans, np, smem, out, err);
        if (st != KL_OK) {
            kl_launch_sites_release(&ls);
            return st;
        }
    }
    if (st == KL_OK && !strstr(ctx->text, "<mma.h>")) {
        uint32_t at = include_at(ctx);
        st = kl_edits_add(out, at, at, "#include <mma.h>\n");
    }
    kl_launch_sites_release(&ls);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

/* ---- the tensor-core form ---------------------------------------------------------------------------------- */

typedef struct tc_wmma {
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
} tc_wmma;

typedef struct mma_scan {
    const kl_rule_ctx *ctx;
    TSNode hit;
    char what[64];
} mma_scan;

/* A __device__ function of the file whose body holds mma.sync PTX. */
static bool calls_mma_helper(const kl_rule_ctx *ctx, const char *name)
{
    TSNode f = kl_ast_function_named(ctx->src, name);
    if (ts_node_is_null(f) || !kl_ast_function_has(ctx->src, f, "__device__")) return false;
    char *t = rb_text(ctx, f);
    bool b = t && strstr(t, "mma.sync");
    free(t);
    return b;
}

static bool mma_visit(TSNode n, void *user)
{
    mma_scan *m = user;
    if (!ts_node_is_null(m->hit)) return false;
    if (rb_is(n, "call_expression")) {
        char f[128];
        text_to(m->ctx, rb_field(n, "function"), f, sizeof f);
        const char *base = strrchr(f, ':');
        base = base ? base + 1 : f;
        if (!strcmp(base, "mma_sync") || (rb_is(rb_field(n, "function"), "identifier") && calls_mma_helper(m->ctx, f))) {
            m->hit = n;
            kl_snprintf(m->what, sizeof m->what, "%s", f);
            return false;
        }
    }
    if (rb_is(n, "gnu_asm_expression") || rb_is(n, "asm_statement")) {
        char *t = rb_text(m->ctx, n);
        if (t && strstr(t, "mma.sync")) m->hit = n, kl_snprintf(m->what, sizeof m->what, "mma.sync PTX");
        free(t);
    }
    return ts_node_is_null(m->hit);
}

/* Read the declaration `const T name = …;` into type and name. */
static bool decl_name(const kl_rule_ctx *ctx, TSNode d, char *type, char *name, size_t size)
{
    if (!rb_is(d, "declaration") || ts_node_named_child_count(d) < 2) return false;
    char t[64];
    text_to(ctx, rb_field(d, "type"), t, sizeof t);
    strip_const(t, type, size);
    TSNode nm = kl_ast_declarator_name(ts_node_named_child(d, ts_node_named_child_count(d) - 1));
    text_to(ctx, nm, name, size);
    return name[0] != '\0';
}

/* A tile load: `const R r = …; const K k = …; kl_xs[…] = (r < M && k < K) ? ACCESS : zero;`.
 * The names, the bound of the first and second comparisons, and the access text. */
static bool tile_load(const kl_rule_ctx *ctx, TSNode loop, char *t1, char *n1, char *t2, char *n2, char *b1, char *b2,
                      char *access, size_t asize, char *zero)
{
    TSNode s[4];
    if (!rb_is(loop, "for_statement") || stmts_of(rb_field(loop, "body"), s, 4) != 3) return false;
    if (!decl_name(ctx, s[0], t1, n1, 64) || !decl_name(ctx, s[1], t2, n2, 64)) return false;
    if (!rb_is(s[2], "expression_statement")) return false;
    TSNode asg = ts_node_named_child(s[2], 0);
    if (!rb_is(asg, "assignment_expression")) return false;
    TSNode c = rb_field(asg, "right");
    if (!rb_is(c, "conditional_expression")) return false;
    char x[64], y[64];
    if (!guard_parts(ctx, rb_field(c, "condition"), false, x, b1, y, b2, 128) || strcmp(x, n1) || strcmp(y, n2)) return false;
    text_to(ctx, rb_field(c, "consequence"), access, asize);
    text_to(ctx, rb_field(c, "alternative"), zero, 64);
    return true;
}

/* The same load, 8 elements at a time (vector_loads=1): `const int kl_r = …, kl_c = …; const R r = …;
 * const K k = …; if (… aligned …) { 16-byte copy } else { for (kl_q …) { const K k = …; kl_xs[…] =
 * (r < M && k < K) ? ACCESS : zero; } }`. */
static bool tile_load_vec(const kl_rule_ctx *ctx, TSNode loop, char *t1, char *n1, char *t2, char *n2, char *b1, char *b2,
                          char *access, size_t asize, char *zero)
{
    TSNode s[5], in[3];
    if (!rb_is(loop, "for_statement") || stmts_of(rb_field(loop, "body"), s, 5) != 4) return false;
    char tr[64], nr[64];
    if (!decl_name(ctx, s[0], tr, nr, 64) || !decl_name(ctx, s[1], t1, n1, 64) || !decl_name(ctx, s[2], t2, n2, 64) ||
        !rb_is(s[3], "if_statement"))
        return false;
    TSNode alt = rb_field(s[3], "alternative");
    if (rb_is(alt, "else_clause")) alt = ts_node_named_child(alt, 0);
    if (!rb_is(alt, "compound_statement") || stmts_of(alt, in, 3) != 1 || !rb_is(in[0], "for_statement")) return false;
    TSNode q[3];
    if (stmts_of(rb_field(in[0], "body"), q, 3) != 2 || !rb_is(q[1], "expression_statement")) return false;
    TSNode asg = ts_node_named_child(q[1], 0);
    if (!rb_is(asg, "assignment_expression")) return false;
    TSNode c = rb_field(asg, "right");
    if (!rb_is(c, "conditional_expression")) return false;
    char x[64], y[64];
    if (!guard_parts(ctx, rb_field(c, "condition"), false, x, b1, y, b2, 128) || strcmp(x, n1) || strcmp(y, n2)) return false;
    text_to(ctx, rb_field(c, "consequence"), access, asize);
    text_to(ctx, rb_field(c, "alternative"), zero, 64);
    return true;
}

typedef struct elane_scan {
    const kl_rule_ctx *ctx;
    TSNode found;
} elane_scan;

static bool elane_visit(TSNode n, void *user)
{
    elane_scan *e = user;
    if (!ts_node_is_null(e->found)) return false;
    if (rb_is(n, "for_statement")) {
        char t[64];
        text_to(e->ctx, rb_field(n, "initializer"), t, sizeof t);
        if (strstr(t, "kl_e = kl_lane")) {
            e->found = n;
            return false;
        }
    }
    return true;
}

/* Recognise the form apply writes; false when fn is not it (why says what differs). */
static bool analyse_wmma(const kl_rule_ctx *ctx, TSNode fn, tc_wmma *w)
{
    TSNode body = kl_ast_function_body(fn);
    w->fn = fn;
    w->body = body;
#define WHY(...) (kl_snprintf(w->why, sizeof w->why, __VA_ARGS__), false)
    uint32_t n = ts_node_named_child_count(body);
    uint32_t i = 0;
    for (; i < n; i++) {
        TSNode c = ts_node_named_child(body, i);
        char t[32];
        text_to(ctx, c, t, sizeof t);
        if (rb_is(c, "comment") && !strncmp(t, MARKER, strlen(MARKER))) {
            w->marker = c;
            break;
        }
    }
    if (ts_node_is_null(w->marker)) return false;
    for (i++; i < n; i++) {
        TSNode c = ts_node_named_child(body, i);
        if (rb_is(c, "comment")) continue;
        char t[200];
        text_to(ctx, c, t, sizeof t);
        if (!strncmp(t, "constexpr int KL_FM", 19)) {
            w->consts = c;
            if (sscanf(t, "constexpr int KL_FM = %d, KL_FN = %d, KL_WARPS_M = %d, KL_WARPS_N = %d;", &w->fm, &w->fn_, &w->wm,
                       &w->wn) != 4)
                return WHY("the tile constants at line %u are not the ones apply writes", kl_ast_line(c));
            break;
        }
        if (!rb_is(c, "declaration") || w->npro == MAXPRO) return WHY("the statement at line %u is not a declaration", kl_ast_line(c));
        w->prologue[w->npro++] = c;
    }
    TSNode loader = {0};
    for (; i < n; i++) {
        TSNode c = ts_node_named_child(body, i);
        if (rb_is(c, "declaration") && ts_node_named_child_count(c) >= 2) {
            /* the pipelined form: the tile loads sit in `auto kl_load = [&](…) { … };` */
            char nm[64], ty[64];
            if (decl_name(ctx, c, ty, nm, sizeof nm) && !strcmp(nm, "kl_load")) loader = c;
        }
        if (!rb_is(c, "for_statement")) continue;
        char t[64];
        text_to(ctx, rb_field(c, "initializer"), t, sizeof t);
        if (strstr(t, "kl_k0 = 0")) w->k0loop = c;
        if (strstr(t, "kl_e = threadIdx.x")) w->eloop = c;
        if (ts_node_is_null(w->eloop) && !ts_node_is_null(w->k0loop) && !ts_node_eq(c, w->k0loop)) {
            /* the pipelined form: each warp stores its fragments, `for (kl_e = kl_lane; …)` inside */
            elane_scan es = {.ctx = ctx};
            rb_walk(c, elane_visit, &es);
            if (!ts_node_is_null(es.found)) w->eloop = es.found;
        }
    }
    if (ts_node_is_null(w->consts) || ts_node_is_null(w->k0loop) || ts_node_is_null(w->eloop))
        return WHY("the kernel is not the wmma form apply writes (tile constants, k0 loop, store loop)");
    TSNode kd = rb_field(w->k0loop, "initializer");
    char t[64];
    text_to(ctx, rb_field(kd, "type"), t, sizeof t);
    strip_const(t, w->ktype, sizeof w->ktype);
    text_to(ctx, rb_field(kl_ast_unparen(rb_field(w->k0loop, "condition")), "right"), w->K, sizeof w->K);
    TSNode loads[2];
    unsigned nl = 0;
    TSNode lbody = rb_field(w->k0loop, "body");
    if (!ts_node_is_null(loader)) {
        TSNode lam = {0};
        for (uint32_t k = 0; k < ts_node_named_child_count(loader); k++) {
            TSNode d = ts_node_named_child(loader, k);
            if (rb_is(d, "init_declarator") && rb_is(rb_field(d, "value"), "lambda_expression")) lam = rb_field(d, "value");
        }
        if (!ts_node_is_null(lam)) lbody = rb_field(lam, "body");
    }
    for (uint32_t k = 0; k < ts_node_named_child_count(lbody) && nl < 2; k++) {
        TSNode c = ts_node_named_child(lbody, k);
        if (rb_is(c, "for_statement")) loads[nl++] = c;
    }
    char t1[64], t2[64], k1[64], k2[64], kb1[128], kb2[128], zero[64];
    if (nl != 2 ||
        !(tile_load(ctx, loads[0], w->rtype, w->row, t1, w->k, w->M, kb1, w->a_text, sizeof w->a_text, zero) ||
          tile_load_vec(ctx, loads[0], w->rtype, w->row, t1, w->k, w->M, kb1, w->a_text, sizeof w->a_text, zero)) ||
        !(tile_load(ctx, loads[1], t2, k2, w->ctype, w->col, kb2, w->N, w->b_text, sizeof w->b_text, zero) ||
          tile_load_vec(ctx, loads[1], t2, k2, w->ctype, w->col, kb2, w->N, w->b_text, sizeof w->b_text, zero)))
        return WHY("the tile loads of the k loop at line %u are not the ones apply writes", kl_ast_line(w->k0loop));
    (void)k1;
    /* the element type: from the zero, `T(0.0f)` */
    const char *paren = strchr(zero, '(');
    kl_snprintf(w->elem, sizeof w->elem, "%.*s", paren ? (int)(paren - zero) : 0, zero);
    if (!w->elem[0] || strcmp(k2, w->k)) return WHY("the tile loads at line %u disagree", kl_ast_line(w->k0loop));
    /* the store loop: row, col, then `if (g) { float acc = …; store }` or `if (g) continue; float acc = …; store` */
    TSNode s[8];
    unsigned ns = stmts_of(rb_field(w->eloop, "body"), s, 8);
    if (ns < 3 || ns > 8 || !rb_is(s[2], "if_statement"))
        return WHY("the store loop at line %u is not the one apply writes", kl_ast_line(w->eloop));
    text_to(ctx, if_cond(s[2]), w->guard, sizeof w->guard);
    TSNode cons = rb_field(s[2], "consequence");
    TSNode rest[8];
    unsigned nr;
    if (rb_is(cons, "continue_statement")) {
        w->early = true;
        nr = ns - 3;
        for (unsigned k = 0; k < nr; k++) rest[k] = s[3 + k];
    } else {
        if (ns != 3) return WHY("the store loop at line %u has statements after its guard", kl_ast_line(w->eloop));
        nr = stmts_of(cons, rest, 8);
    }
    char at[64];
    if (nr < 2 || nr > 5 || !decl_name(ctx, rest[0], at, w->acc, sizeof w->acc) || strcmp(at, "float"))
        return WHY("the store loop at line %u does not read the accumulator back", kl_ast_line(w->eloop));
    for (unsigned k = 1; k < nr; k++) w->store[w->nstore++] = rest[k];
#undef WHY
    return true;
}

static const char *to_float(const char *elem)
{
    if (strstr(elem, "bfloat16")) return "__bfloat162float";
    if (!strcmp(elem, "__half") || !strcmp(elem, "half")) return "__half2float";
    return "static_cast<float>";
}

/* Undo launch_smem: the `cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, n);` right
 * before a launch goes, and its dynamic shared memory becomes 0. */
static kl_status launch_unsmem(const kl_rule_ctx *ctx, launch_plan *plans, unsigned np, kl_edits *out)
{
    for (unsigned i = 0; i < np; i++) {
        kl_launch_site *l = plans[i].l;
        TSNode stmt = ts_node_parent(l->call);
        TSNode prev = rb_is(stmt, "expression_statement") ? rb_prev_stmt(stmt) : (TSNode){0};
        TSNode call = rb_is(prev, "expression_statement") ? ts_node_named_child(prev, 0) : (TSNode){0};
        if (!rb_is(call, "call_expression") || !text_is(ctx, rb_field(call, "function"), "cudaFuncSetAttribute")) continue;
        char *t = rb_text(ctx, call);
        bool ours = t && strstr(t, "cudaFuncAttributeMaxDynamicSharedMemorySize");
        free(t);
        if (!ours) continue;
        uint32_t a, b;
        rb_stmt_range(ctx, prev, NULL, &a, &b);
        kl_status st = kl_edits_add(out, a, b, "");
        if (st == KL_OK && !ts_node_is_null(l->smem)) st = kl_edits_add(out, ts_node_start_byte(l->smem), ts_node_end_byte(l->smem), "0");
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

static kl_status remove_wmma(const kl_rule_ctx *ctx, const tc_wmma *w, const char *kernel, kl_edits *out, kl_error *err)
{
    if (w->why[0]) return kl_rule_not_applicable(err, "%s", w->why);
    kl_affine_ctx *ax = NULL;
    kl_status st = kl_affine_ctx_new(ctx->src, w->fn, &ax, err);
    if (st != KL_OK) return st;
    kl_launch_sites ls = {0};
    st = kl_ast_launches(ctx->src, &ls, err);
    if (st != KL_OK) {
        kl_affine_ctx_free(ax);
        return st;
    }
    launch_plan plans[8];
    unsigned np = 0;
    char why[300];
    if (!plan_launches(ctx, ax, w->fn, kernel, w->M, w->N, &ls, plans, 8, &np, why, sizeof why)) {
        kl_launch_sites_release(&ls);
        kl_affine_ctx_free(ax);
        return kl_rule_not_applicable(err, "%s", why);
    }
    char in[16] = "    ", in2[24], in3[32], fnind[16];
    rb_indent_of(ctx, ts_node_start_byte(w->marker), in, sizeof in);
    if (!in[0]) kl_snprintf(in, sizeof in, "    ");
    kl_snprintf(in2, sizeof in2, "%s%s", in, in);
    kl_snprintf(in3, sizeof in3, "%s%s", in2, in);
    rb_indent_of(ctx, ts_node_start_byte(w->fn), fnind, sizeof fnind);
    const char *cv = to_float(w->elem);
    const char *sind = w->early ? in : in2;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, "{\n");
    for (unsigned i = 0; i < w->npro; i++) add_stmt_text(ctx, &sb, w->prologue[i], in);
    kl_strbuf_addf(&sb, "%s%s %s = blockIdx.y * blockDim.y + threadIdx.y;\n", in, w->rtype, w->row);
    kl_strbuf_addf(&sb, "%s%s %s = blockIdx.x * blockDim.x + threadIdx.x;\n", in, w->ctype, w->col);
    if (w->early) kl_strbuf_addf(&sb, "%sif (%s) return;\n", in, w->guard);
    else kl_strbuf_addf(&sb, "%sif (%s) {\n", in, w->guard);
    kl_strbuf_addf(&sb, "%sfloat %s = 0.0f;\n", sind, w->acc);
    kl_strbuf_addf(&sb, "%sfor (%s %s = 0; %s < %s; %s++) {\n", sind, w->ktype, w->k, w->k, w->K, w->k);
    kl_strbuf_addf(&sb, "%s%s%s += %s(%s) * %s(%s);\n", sind, in, w->acc, cv, w->a_text, cv, w->b_text);
    kl_strbuf_addf(&sb, "%s}\n", sind);
    for (unsigned i = 0; i < w->nstore; i++) add_stmt_text(ctx, &sb, w->store[i], sind);
    if (!w->early) kl_strbuf_addf(&sb, "%s}\n", in);
    kl_strbuf_addf(&sb, "%s}", fnind);
    (void)in3;
    st = sb.failed ? KL_ERR_NOMEM : kl_edits_add(out, ts_node_start_byte(w->body), ts_node_end_byte(w->body), kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    if (st == KL_OK) st = write_launches(ctx, plans, np, 16, 16, "16, 16", false, out);
    if (st == KL_OK) st = launch_unsmem(ctx, plans, np, out);
    /* <mma.h> goes when no other kernel uses wmma */
    if (st == KL_OK) {
        const char *inc = strstr(ctx->text, "#include <mma.h>\n");
        unsigned uses = 0;
        for (const char *p = ctx->text; (p = strstr(p, "nvcuda::")); p++) uses++;
        unsigned here = 0;
        uint32_t a = ts_node_start_byte(w->body), b = ts_node_end_byte(w->body);
        for (const char *p = ctx->text + a; (p = strstr(p, "nvcuda::")) && p < ctx->text + b; p++) here++;
        if (inc && uses == here && (inc == ctx->text || inc[-1] == '\n')) {
            uint32_t ia = (uint32_t)(inc - ctx->text);
            st = kl_edits_add(out, ia, ia + (uint32_t)strlen("#include <mma.h>\n"), "");
        }
    }
    kl_launch_sites_release(&ls);
    kl_affine_ctx_free(ax);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

/* Why a tensor-core kernel that is not apply's form cannot be taken back to a scalar loop. */
static void foreign_why(const kl_rule_ctx *ctx, TSNode fn, const mma_scan *m, char *why, size_t size)
{
    char *t = rb_text(ctx, fn);
    const char *body = t ? t : "";
    bool ldm = strstr(body, "ldmatrix") != NULL, cpa = strstr(body, "cp_async") || strstr(body, "cp.async");
    bool ptx = !strstr(m->what, "mma_sync");
    (void)ldm;
    if (ptx)
        kl_snprintf(why, size,
                    "the tensor-core step at line %u (%s) is mma.sync PTX whose operands are register fragments "
                    "(%s%s): a scalar loop needs each accumulator's (row, col) in the m16n8k16 layout and the shared tiles "
                    "the fragments came from, which the analysis does not derive from PTX; remove %sthe register tile first, "
                    "or bring the kernel to the wmma form",
                    kl_ast_line(m->hit), m->what,
                    strstr(body, "ldmatrix") ? "loaded by ldmatrix from shared memory" : "loaded from registers",
                    cpa ? ", filled by a cp.async pipeline" : "", cpa ? "the cp.async pipeline and " : "");
    else
        kl_snprintf(why, size,
                    "the wmma code at line %u is not the form apply writes (a `" MARKER "` block with guarded tile loads "
                    "and a staged store): its fragments' sources and layout are not analysed",
                    kl_ast_line(m->hit));
    free(t);
}

/* ---- the mma.sync form: ldmatrix fragments from shared tiles, mma.sync.m16n8k16 ---------------------- */

/*
 * The hgemm expert's warp tile (and kernels written like it): inside one block
 *     uint32_t AF[FM][4];  uint32_t BF[FN][2];
 *     for (i = 0; i < FM; i++) { <locals>; LDM_X4(AF[i], PA); }
 *     for (j = 0; j < FN / 2; j++) { <locals>; uint32_t R[4]; LDM_X4_TRANS(R, PB);
 *                                    BF[2*j][0] = R[0]; BF[2*j][1] = R[1]; BF[2*j+1][0] = R[2]; BF[2*j+1][1] = R[3]; }
 *     for (mi = 0; mi < FM; mi++) for (ni = 0; ni < FN; ni++) MMA(ACC[mi][ni], AF[mi], BF[ni][0], BF[ni][1]);
 * with LDM_X4 / LDM_X4_TRANS `__device__` helpers holding ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 and
 * MMA one holding mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 with D = C.
 *
 * The PTX ISA fixes what each lane holds. ldmatrix .x4: lanes 8m..8m+7 give the row addresses of matrix m
 * (8 contiguous 16-bit elements each), and lane l receives row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1
 * of every matrix (.trans: column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1). mma m16n8k16: A register q
 * holds row l / 4 + 8 (q % 2), k 2 (l % 4) + 8 (q / 2); B register q holds k 2 (l % 4) + 8 q, column l / 4;
 * accumulator e sits at row l / 4 + 8 (e / 2), column 2 (l % 4) + e % 2. So element (r, k) of the A tile of
 * AF[i] is the element k % 8 after the address lane r + 16 (k / 8) gave, and element (k, n) of the B tile of
 * n-tile ni is the element n after the address lane k + 16 (ni % 2) gave in iteration ni / 2. Remove
 * writes, per accumulator element, the 16-term dot product over exactly those shared-memory elements,
 * reading them through the kernel's own address expressions (padding or swizzles included) with the lane
 * replaced by that virtual lane.
 */

#define PTX_MAXLOC 8

typedef struct ptx_local {
    char name[64];
    TSNode value;
} ptx_local;

typedef struct tc_ptx {
    TSNode fn, body, call, block, first, outer, inner, aloop, bloop, adecl, bdecl;
    char lane[64], conv[32], dtype[8];
    char acc[256];                       /* the D operand, e.g. acc[mi][ni] */
    char v1[64], v2[64];                 /* the mma nest's loop variables */
    char hdr1[256], hdr2[256];           /* their `for (…)` headers */
    char helpers[3][64];                 /* the mma, ldmatrix and ldmatrix.trans helpers */
    char *aread, *bread;                 /* the element reads (owned) */
    char why[500];
} tc_ptx;

static void ptx_release(tc_ptx *p)
{
    free(p->aread);
    free(p->bread);
    p->aread = p->bread = NULL;
}

/* The text of n with blanks, quotes and `\n` escapes taken out: asm operands compare as one string. */
static char *squeeze(const kl_rule_ctx *ctx, TSNode n)
{
    char *t = rb_text(ctx, n);
    if (!t) return NULL;
    size_t k = 0;
    for (size_t i = 0; t[i]; i++) {
        if (t[i] == '\\' && t[i + 1] == 'n') {
            i++;
            continue;
        }
        if (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r' || t[i] == '"') continue;
        t[k++] = t[i];
    }
    t[k] = '\0';
    return t;
}

/* The names of fn's parameters, at most max; returns how many there are. */
static unsigned param_names(const kl_rule_ctx *ctx, TSNode fn, char names[][64], unsigned max)
{
    TSNode ps = kl_ast_function_params(fn);
    unsigned n = 0;
    for (uint32_t i = 0; !ts_node_is_null(ps) && i < ts_node_named_child_count(ps); i++) {
        TSNode p = ts_node_named_child(ps, i);
        if (!rb_is(p, "parameter_declaration")) continue;
        if (n < max) text_to(ctx, kl_ast_declarator_name(rb_field(p, "declarator")), names[n], 64);
        n++;
    }
    return n;
}

static unsigned count_sub(const char *s, const char *sub)
{
    unsigned n = 0;
    for (const char *p = s; (p = strstr(p, sub)); p += strlen(sub)) n++;
    return n;
}

/* Is `name` a __device__ helper holding exactly one asm statement, the m16n8k16 mma with f32
 * accumulators D = C, operands in parameter order (d[4], a[4], b0, b1)? dtype gets bf16 / f16. */
static bool mma_helper(const kl_rule_ctx *ctx, const char *name, char *dtype)
{
    TSNode f = kl_ast_function_named(ctx->src, name);
    if (ts_node_is_null(f) || !kl_ast_function_has(ctx->src, f, "__device__")) return false;
    char ps[4][64];
    if (param_names(ctx, f, ps, 4) != 4) return false;
    char *t = squeeze(ctx, kl_ast_function_body(f));
    if (!t) return false;
    bool ok = false;
    static const char *const types[] = {"bf16", "f16"};
    for (int i = 0; i < 2 && !ok; i++) {
        char want[400];
        kl_snprintf(want, sizeof want,
                    "mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32{%%0,%%1,%%2,%%3},{%%4,%%5,%%6,%%7},{%%8,%%9},{%%0,%%1,%%2,"
                    "%%3};:+f(%s[0]),+f(%s[1]),+f(%s[2]),+f(%s[3]):r(%s[0]),r(%s[1]),r(%s[2]),r(%s[3]),r(%s),r(%s));",
                    types[i], types[i], ps[0], ps[0], ps[0], ps[0], ps[1], ps[1], ps[1], ps[1], ps[2], ps[3]);
        if (strstr(t, want)) ok = true, kl_snprintf(dtype, 8, "%s", types[i]);
    }
    ok = ok && count_sub(t, "asm") == 1;
    free(t);
    return ok;
}

/* Is `name` a __device__ helper holding exactly one ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16
 * into its first parameter's four registers, in order, from the address of its second? */
static bool ldmatrix_helper(const kl_rule_ctx *ctx, const char *name, bool trans)
{
    TSNode f = kl_ast_function_named(ctx->src, name);
    if (ts_node_is_null(f) || !kl_ast_function_has(ctx->src, f, "__device__")) return false;
    char ps[2][64];
    if (param_names(ctx, f, ps, 2) != 2) return false;
    char *t = squeeze(ctx, kl_ast_function_body(f));
    if (!t) return false;
    char want[300];
    kl_snprintf(want, sizeof want,
                "ldmatrix.sync.aligned.m8n8.x4%s.shared.b16{%%0,%%1,%%2,%%3},[%%4];:=r(%s[0]),=r(%s[1]),=r(%s[2]),=r(%s[3]):r(",
                trans ? ".trans" : "", ps[0], ps[0], ps[0], ps[0]);
    /* the address operand comes from the second parameter (directly, or through a local of the helper) */
    bool ok = strstr(t, want) && rb_count_ident(ctx, kl_ast_function_body(f), ps[1]) > 0 && count_sub(t, "asm") == 1;
    free(t);
    return ok;
}

/* `for (T v = 0; v < B; v++)` (or ++v): v and B's text. */
static bool plain_loop(const kl_rule_ctx *ctx, TSNode loop, char *v, char *bound, size_t bsize)
{
    if (!rb_is(loop, "for_statement")) return false;
    TSNode init = rb_field(loop, "initializer"), cond = kl_ast_unparen(rb_field(loop, "condition")), upd = rb_field(loop, "update");
    if (!rb_is(init, "declaration") || ts_node_named_child_count(init) != 2) return false;
    TSNode d = ts_node_named_child(init, 1);
    if (!rb_is(d, "init_declarator") || !text_is(ctx, rb_field(d, "value"), "0")) return false;
    text_to(ctx, kl_ast_declarator_name(d), v, 64);
    if (!rb_is(cond, "binary_expression") || !text_is(ctx, rb_field(cond, "operator"), "<") ||
        !text_is(ctx, rb_field(cond, "left"), v))
        return false;
    text_to(ctx, rb_field(cond, "right"), bound, bsize);
    char u[80], a[80], b[80];
    text_to(ctx, upd, u, sizeof u);
    kl_snprintf(a, sizeof a, "%s++", v);
    kl_snprintf(b, sizeof b, "++%s", v);
    return !strcmp(u, a) || !strcmp(u, b);
}

/* The header `for (…)` of a loop, on one line: false when it spans lines. */
static bool for_header(const kl_rule_ctx *ctx, TSNode loop, char *buf, size_t size)
{
    uint32_t end = 0;
    TSNode body = rb_field(loop, "body");
    for (uint32_t i = 0; i < ts_node_child_count(loop); i++) {
        TSNode c = ts_node_child(loop, i);
        if (ts_node_eq(c, body)) break;
        if (!strcmp(ts_node_type(c), ")")) end = ts_node_end_byte(c);
    }
    uint32_t s = ts_node_start_byte(loop);
    if (!end || end - s + 1 > size || memchr(ctx->text + s, '\n', end - s)) return false;
    kl_snprintf(buf, size, "%.*s", (int)(end - s), ctx->text + s);
    return true;
}

/* The statements of a block or loop body, comments and preprocessor lines (#pragma) skipped. */
static unsigned body_stmts(TSNode block, TSNode *out, unsigned max)
{
    if (!rb_is(block, "compound_statement")) {
        if (max) out[0] = block;
        return 1;
    }
    unsigned n = 0;
    for (uint32_t i = 0; i < ts_node_named_child_count(block); i++) {
        TSNode c = ts_node_named_child(block, i);
        if (rb_is(c, "comment") || !strncmp(ts_node_type(c), "preproc_", 8)) continue;
        if (n < max) out[n] = c;
        n++;
    }
    return n;
}

/* A call statement `f(args)`: the callee's name and the arguments. */
static bool call_stmt(const kl_rule_ctx *ctx, TSNode st, char *f, TSNode *args, unsigned max, unsigned *n)
{
    if (!rb_is(st, "expression_statement") || ts_node_named_child_count(st) != 1) return false;
    TSNode c = ts_node_named_child(st, 0);
    if (!rb_is(c, "call_expression") || !rb_is(rb_field(c, "function"), "identifier")) return false;
    text_to(ctx, rb_field(c, "function"), f, 64);
    TSNode a = rb_field(c, "arguments");
    *n = ts_node_named_child_count(a);
    for (unsigned i = 0; i < *n && i < max; i++) args[i] = ts_node_named_child(a, i);
    return true;
}

/* Does the text of n, without blanks, read s? */
static bool squeezed_is(const kl_rule_ctx *ctx, TSNode n, const char *s)
{
    char *t = squeeze(ctx, n);
    bool b = t && !strcmp(t, s);
    free(t);
    return b;
}

/* The one declarator of a declaration (`const int a = …;`), or a null node when it has several. */
static TSNode single_declarator(TSNode d)
{
    TSNode none = {{0}, 0, 0}, found = none;
    if (!rb_is(d, "declaration")) return none;
    TSNode type = rb_field(d, "type");
    for (uint32_t i = 0; i < ts_node_named_child_count(d); i++) {
        TSNode c = ts_node_named_child(d, i);
        const char *t = ts_node_type(c);
        if (ts_node_eq(c, type) || !(strstr(t, "declarator") || !strcmp(t, "identifier"))) continue;
        if (!ts_node_is_null(found)) return none;
        found = c;
    }
    return found;
}

/* `const int a = …;` declarations (one name each) at the head of a loop body, into locals. */
static bool loop_locals(const kl_rule_ctx *ctx, TSNode *st, unsigned n, ptx_local *loc, unsigned *nloc)
{
    *nloc = 0;
    for (unsigned i = 0; i < n; i++) {
        TSNode d = single_declarator(st[i]);
        if (!rb_is(d, "init_declarator") || *nloc == PTX_MAXLOC) return false;
        text_to(ctx, kl_ast_declarator_name(d), loc[*nloc].name, 64);
        loc[*nloc].value = rb_field(d, "value");
        (*nloc)++;
    }
    return true;
}

/* ---- rendering an address for one virtual lane ---- */

typedef struct ptx_render {
    const kl_rule_ctx *ctx;
    TSNode body;                 /* the kernel's body (declarations of the names the address uses) */
    const char *lane;
    const char *mod16, *div16, *vlane;   /* lane % 16, lane / 16, lane */
    const char *ivar, *ito;              /* the load loop's variable and what replaces it */
    const ptx_local *loc;
    unsigned nloc;
    int depth;
    char why[300];
} ptx_render;

static bool warp_uniform(const kl_rule_ctx *ctx, TSNode body, const char *name, int depth, char *why, size_t size);

typedef struct uni_scan {
    const kl_rule_ctx *ctx;
    TSNode body;
    int depth;
    char *why;
    size_t size;
} uni_scan;

/* threadIdx.x / C with C a multiple of 32 (the warp, or the warpgroup at 128), or >> S with S >= 5: the
 * same in every lane of a warp */
static bool is_warp_index(const kl_rule_ctx *ctx, TSNode field)
{
    TSNode p = ts_node_parent(field);
    while (rb_is(p, "parenthesized_expression")) p = ts_node_parent(p);
    if (!rb_is(p, "binary_expression") || !rb_is_builtin(ctx, field, "threadIdx", 'x')) return false;
    TSNode l = kl_ast_unparen(rb_field(p, "left"));
    if (!ts_node_eq(l, field)) return false;
    long long c = 0;
    TSNode fn = p;
    while (!ts_node_is_null(fn) && !rb_is(fn, "function_definition")) fn = ts_node_parent(fn);
    TSNode body = ts_node_is_null(fn) ? fn : kl_ast_function_body(fn);
    if (!rb_const_eval(ctx, body, rb_field(p, "right"), &c)) return false;
    return (text_is(ctx, rb_field(p, "operator"), "/") && c > 0 && c % 32 == 0) ||
           (text_is(ctx, rb_field(p, "operator"), ">>") && c >= 5 && c < 32);
}

static bool uni_visit(TSNode n, void *user)
{
    uni_scan *u = user;
    if (u->why[0]) return false;
    if (rb_is(n, "field_expression")) {
        TSNode a = rb_field(n, "argument");
        if (text_is(u->ctx, a, "threadIdx") && !is_warp_index(u->ctx, n))
            kl_snprintf(u->why, u->size, "line %u reads threadIdx other than as the warp (threadIdx.x / 32)", kl_ast_line(n));
        return false;
    }
    if (rb_is(n, "identifier")) {
        char nm[64];
        text_to(u->ctx, n, nm, sizeof nm);
        TSNode par = ts_node_parent(n);
        if (rb_is(par, "call_expression") && ts_node_eq(rb_field(par, "function"), n)) {
            if (callee_reads_builtins(u->ctx, nm))
                kl_snprintf(u->why, u->size, "`%s` (line %u) reads thread or block indices", nm, kl_ast_line(n));
            return false;
        }
        warp_uniform(u->ctx, u->body, nm, u->depth + 1, u->why, u->size);
    }
    return true;
}

typedef struct decl_find {
    const kl_rule_ctx *ctx;
    const char *name;
    TSNode decl, dc;
    unsigned count;
} decl_find;

static bool decl_find_visit(TSNode n, void *user)
{
    decl_find *f = user;
    if (rb_is(n, "declaration"))
        for (uint32_t k = 0; k < ts_node_named_child_count(n); k++) {
            TSNode dc = ts_node_named_child(n, k);
            if (!text_is(f->ctx, kl_ast_declarator_name(dc), f->name)) continue;
            if (!f->count) f->decl = n, f->dc = dc;
            f->count++;
        }
    return true;
}

typedef struct assign_find {
    const kl_rule_ctx *ctx;
    const char *name;
    bool found;
} assign_find;

static bool assign_visit(TSNode n, void *user)
{
    assign_find *a = user;
    if (a->found) return false;
    TSNode target = {{0}, 0, 0};
    if (rb_is(n, "assignment_expression")) target = rb_field(n, "left");
    if (rb_is(n, "update_expression")) target = rb_field(n, "argument");
    if (!ts_node_is_null(target) && text_is(a->ctx, kl_ast_unparen(target), a->name)) {
        /* a loop's own update (`kk++`) keeps its value the same in every lane */
        TSNode p = ts_node_parent(n);
        if (!(rb_is(p, "for_statement") && ts_node_eq(rb_field(p, "update"), n))) a->found = true;
    }
    return !a->found;
}

/* Is the kernel-local `name` the same in every lane of a warp: declared once, never assigned (a loop's
 * own update aside), from values that are (the warp index, parameters, constants, shared arrays)? A
 * name that is not declared in the kernel is a parameter or a file-level name: uniform. */
static bool warp_uniform(const kl_rule_ctx *ctx, TSNode body, const char *name, int depth, char *why, size_t size)
{
    if (why[0]) return false;
    if (depth > 12) {
        kl_snprintf(why, size, "`%s` is defined too deep for the analysis", name);
        return false;
    }
    decl_find f = {ctx, name, {{0}, 0, 0}, {{0}, 0, 0}, 0};
    rb_walk(body, decl_find_visit, &f);
    if (!f.count) return true;
    if (f.count > 1) {
        kl_snprintf(why, size, "`%s` is declared %u times in the kernel", name, f.count);
        return false;
    }
    assign_find a = {ctx, name, false};
    rb_walk(body, assign_visit, &a);
    if (a.found) {
        kl_snprintf(why, size, "`%s` (line %u) is assigned after its declaration", name, kl_ast_line(f.decl));
        return false;
    }
    TSNode v = rb_is(f.dc, "init_declarator") ? rb_field(f.dc, "value") : (TSNode){{0}, 0, 0};
    if (ts_node_is_null(v)) {
        if (tt_is_shared_decl(ctx, f.decl)) return true;
        kl_snprintf(why, size, "`%s` (line %u) has no initial value", name, kl_ast_line(f.decl));
        return false;
    }
    uni_scan u = {ctx, body, depth, why, size};
    rb_walk(v, uni_visit, &u);
    return !why[0];
}

static void render(ptx_render *r, TSNode n, kl_strbuf *sb);

static void render_children(ptx_render *r, TSNode n, kl_strbuf *sb)
{
    uint32_t at = ts_node_start_byte(n), end = ts_node_end_byte(n);
    for (uint32_t i = 0; i < ts_node_child_count(n); i++) {
        TSNode c = ts_node_child(n, i);
        uint32_t cs = ts_node_start_byte(c);
        if (cs > at) kl_strbuf_add(sb, r->ctx->text + at, cs - at);
        render(r, c, sb);
        at = ts_node_end_byte(c);
    }
    if (end > at) kl_strbuf_add(sb, r->ctx->text + at, end - at);
}

/* `lane % 16` / `lane / 16` */
static bool lane_op(const ptx_render *r, TSNode n, const char *op)
{
    return rb_is(n, "binary_expression") && text_is(r->ctx, rb_field(n, "operator"), op) &&
           text_is(r->ctx, kl_ast_unparen(rb_field(n, "left")), r->lane) && text_is(r->ctx, rb_field(n, "right"), "16");
}

static void render_paren(kl_strbuf *sb, const char *s, bool paren)
{
    if (paren) kl_strbuf_addf(sb, "(%s)", s);
    else kl_strbuf_adds(sb, s);
}

static bool simple_text(const char *s)
{
    for (const char *p = s; *p; p++)
        if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9'))) return false;
    return *s != '\0';
}

static void render(ptx_render *r, TSNode n, kl_strbuf *sb)
{
    if (r->why[0]) return;
    bool in_paren = rb_is(ts_node_parent(n), "parenthesized_expression");
    if (lane_op(r, n, "%")) {
        render_paren(sb, r->mod16, !in_paren && !simple_text(r->mod16));
        return;
    }
    if (lane_op(r, n, "/")) {
        render_paren(sb, r->div16, !in_paren && !simple_text(r->div16));
        return;
    }
    if (rb_is(n, "field_expression")) {
        if (text_is(r->ctx, rb_field(n, "argument"), "threadIdx") && !is_warp_index(r->ctx, n)) {
            kl_snprintf(r->why, sizeof r->why, "the ldmatrix address at line %u reads threadIdx other than through the lane `%s`",
                        kl_ast_line(n), r->lane);
            return;
        }
        render_children(r, n, sb);
        return;
    }
    if (rb_is(n, "identifier")) {
        char nm[64];
        text_to(r->ctx, n, nm, sizeof nm);
        TSNode par = ts_node_parent(n);
        bool callee = rb_is(par, "call_expression") && ts_node_eq(rb_field(par, "function"), n);
        if (callee) {
            if (callee_reads_builtins(r->ctx, nm))
                kl_snprintf(r->why, sizeof r->why, "`%s` (line %u) in the ldmatrix address reads thread or block indices", nm,
                            kl_ast_line(n));
            kl_strbuf_adds(sb, nm);
            return;
        }
        if (!strcmp(nm, r->lane)) {
            render_paren(sb, r->vlane, !in_paren && !simple_text(r->vlane));
            return;
        }
        if (r->ivar && !strcmp(nm, r->ivar)) {
            render_paren(sb, r->ito, !in_paren && !simple_text(r->ito));
            return;
        }
        for (unsigned i = 0; i < r->nloc; i++) {
            if (strcmp(nm, r->loc[i].name)) continue;
            if (r->depth > 8) {
                kl_snprintf(r->why, sizeof r->why, "the locals of the ldmatrix address nest too deep");
                return;
            }
            kl_strbuf inner = KL_STRBUF_INIT;
            r->depth++;
            render(r, kl_ast_unparen(r->loc[i].value), &inner);
            r->depth--;
            const char *s = kl_strbuf_str(&inner);
            render_paren(sb, s, !in_paren && !simple_text(s));
            kl_strbuf_release(&inner);
            return;
        }
        char why[300] = "";
        if (!warp_uniform(r->ctx, r->body, nm, 0, why, sizeof why)) {
            kl_snprintf(r->why, sizeof r->why, "the ldmatrix address at line %u uses `%s`, which may differ between lanes: %s",
                        kl_ast_line(n), nm, why);
            return;
        }
        kl_strbuf_adds(sb, nm);
        return;
    }
    if (ts_node_child_count(n) == 0) {
        uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
        kl_strbuf_add(sb, r->ctx->text + a, b - a);
        return;
    }
    render_children(r, n, sb);
}

/* The element `off` elements past the address ptr in lane vlane: `P[rest + off]` when ptr is
 * `P + rest`, else `(ptr)[off]`. New string, or NULL with r->why set. */
static char *element_read(ptx_render *r, TSNode ptr, const char *off)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    TSNode p = kl_ast_unparen(ptr);
    TSNode leftmost = p;
    while (rb_is(leftmost, "binary_expression") && text_is(r->ctx, rb_field(leftmost, "operator"), "+"))
        leftmost = rb_field(leftmost, "left");
    if (rb_is(p, "binary_expression") && text_is(r->ctx, rb_field(p, "operator"), "+") && rb_is(leftmost, "identifier")) {
        /* P + a + b …: P[a + b … + off]; the rest is rendered from the text after `P +` */
        TSNode first = ts_node_parent(leftmost); /* P + a */
        kl_strbuf rest = KL_STRBUF_INIT;
        render(r, leftmost, &sb);
        TSNode right = rb_field(first, "right");
        /* the text from the first operand after P to the end of the chain, rendered piecewise */
        render(r, right, &rest);
        for (TSNode q = ts_node_parent(first); !ts_node_is_null(q) && ts_node_start_byte(q) == ts_node_start_byte(p) &&
                                               ts_node_end_byte(q) <= ts_node_end_byte(p);
             q = ts_node_parent(q)) {
            TSNode rr = rb_field(q, "right");
            uint32_t gap = ts_node_end_byte(rb_field(q, "left"));
            kl_strbuf_add(&rest, r->ctx->text + gap, ts_node_start_byte(rr) - gap);
            render(r, rr, &rest);
            if (ts_node_eq(q, p)) break;
        }
        kl_strbuf_addf(&sb, "[%s + %s]", kl_strbuf_str(&rest), off);
        kl_strbuf_release(&rest);
    } else {
        kl_strbuf_adds(&sb, "(");
        render(r, p, &sb);
        kl_strbuf_addf(&sb, ")[%s]", off);
    }
    char *out = (r->why[0] || sb.failed) ? NULL : kl_strdup(kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    return out;
}

/* The lane: a declaration at the top of the kernel `lane = threadIdx.x % 32` (or `& 31`), never assigned. */
static bool find_lane(const kl_rule_ctx *ctx, TSNode body, char *lane)
{
    for (uint32_t i = 0; i < ts_node_named_child_count(body); i++) {
        TSNode d = ts_node_named_child(body, i);
        if (!rb_is(d, "declaration")) continue;
        for (uint32_t k = 0; k < ts_node_named_child_count(d); k++) {
            TSNode dc = ts_node_named_child(d, k);
            if (!rb_is(dc, "init_declarator")) continue;
            TSNode v = kl_ast_unparen(rb_field(dc, "value"));
            if (!squeezed_is(ctx, v, "threadIdx.x%32") && !squeezed_is(ctx, v, "threadIdx.x&31")) continue;
            text_to(ctx, kl_ast_declarator_name(dc), lane, 64);
            assign_find a = {ctx, lane, false};
            rb_walk(body, assign_visit, &a);
            if (!a.found) return true;
        }
    }
    return false;
}

/* Recognise the form around the mma call (hit); false with p->why when it is not it. */
static bool analyse_ptx(const kl_rule_ctx *ctx, TSNode fn, TSNode hit, tc_ptx *p)
{
    memset(p, 0, sizeof *p);
    p->fn = fn;
    p->body = kl_ast_function_body(fn);
    p->call = hit;
#define WHY(...) (kl_snprintf(p->why, sizeof p->why, __VA_ARGS__), false)
    unsigned ln = kl_ast_line(hit);
    if (!rb_is(hit, "call_expression") || !rb_is(rb_field(hit, "function"), "identifier"))
        return WHY("the mma.sync at line %u is not a call of a __device__ helper", ln);
    text_to(ctx, rb_field(hit, "function"), p->helpers[0], 64);
    if (!mma_helper(ctx, p->helpers[0], p->dtype))
        return WHY("%s (called at line %u) is not one mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.f32 with D = C and "
                   "its operands in parameter order (d[4], a[4], b0, b1)", p->helpers[0], ln);
    kl_snprintf(p->conv, sizeof p->conv, "%s", !strcmp(p->dtype, "bf16") ? "__bfloat162float" : "__half2float");
    if (!find_lane(ctx, p->body, p->lane))
        return WHY("no `lane = threadIdx.x %% 32` at the top of the kernel: the fragment layout is per lane");
    /* the mma nest */
    TSNode st = ts_node_parent(hit);
    p->inner = ts_node_parent(st);
    if (rb_is(p->inner, "compound_statement")) {
        TSNode one[2];
        if (body_stmts(p->inner, one, 2) != 1) return WHY("the mma call at line %u is not alone in its loop", ln);
        p->inner = ts_node_parent(p->inner);
    }
    p->outer = ts_node_parent(p->inner);
    if (rb_is(p->outer, "compound_statement")) {
        TSNode one[2];
        if (body_stmts(p->outer, one, 2) != 1) return WHY("the loop at line %u is not alone in its loop", kl_ast_line(p->inner));
        p->outer = ts_node_parent(p->outer);
    }
    char b1[128], b2[128];
    if (!rb_is(st, "expression_statement") || !plain_loop(ctx, p->inner, p->v2, b2, sizeof b2) ||
        !plain_loop(ctx, p->outer, p->v1, b1, sizeof b1))
        return WHY("the mma call at line %u is not in a nest `for (mi = 0; mi < FM; mi++) for (ni = 0; ni < FN; ni++)`", ln);
    p->block = ts_node_parent(p->outer);
    if (!rb_is(p->block, "compound_statement")) return WHY("the mma nest at line %u is not in a block", kl_ast_line(p->outer));
    if (!for_header(ctx, p->outer, p->hdr1, sizeof p->hdr1) || !for_header(ctx, p->inner, p->hdr2, sizeof p->hdr2))
        return WHY("the mma nest's loop headers (line %u) are not on one line each", kl_ast_line(p->outer));
    /* the operands: ACC[mi][ni], AF[mi], BF[ni][0], BF[ni][1] */
    TSNode args = rb_field(hit, "arguments");
    if (ts_node_named_child_count(args) != 4) return WHY("the mma call at line %u does not take 4 operands", ln);
    TSNode d = ts_node_named_child(args, 0), a = ts_node_named_child(args, 1);
    TSNode b0 = ts_node_named_child(args, 2), bb1 = ts_node_named_child(args, 3);
    text_to(ctx, d, p->acc, sizeof p->acc);
    char af[64], bf[64], want[200];
    if (!rb_is(a, "subscript_expression") || !rb_is(rb_field(a, "argument"), "identifier"))
        return WHY("the A operand at line %u is not a fragment array `AF[%s]`", ln, p->v1);
    text_to(ctx, rb_field(a, "argument"), af, sizeof af);
    if (!rb_is(b0, "subscript_expression") || !rb_is(rb_field(b0, "argument"), "subscript_expression") ||
        !rb_is(rb_field(rb_field(b0, "argument"), "argument"), "identifier"))
        return WHY("the B operands at line %u are not `BF[%s][0], BF[%s][1]`", ln, p->v2, p->v2);
    text_to(ctx, rb_field(rb_field(b0, "argument"), "argument"), bf, sizeof bf);
    kl_snprintf(want, sizeof want, "%s[%s]", af, p->v1);
    bool ok = squeezed_is(ctx, a, want);
    kl_snprintf(want, sizeof want, "%s[%s][0]", bf, p->v2);
    ok = ok && squeezed_is(ctx, b0, want);
    kl_snprintf(want, sizeof want, "%s[%s][1]", bf, p->v2);
    ok = ok && squeezed_is(ctx, bb1, want);
    if (!ok) return WHY("the mma call at line %u does not read `%s[%s]`, `%s[%s][0]`, `%s[%s][1]`", ln, af, p->v1, bf, p->v2, bf, p->v2);
    if (!rb_is(d, "subscript_expression") || rb_count_ident(ctx, d, p->v1) != 1 || rb_count_ident(ctx, d, p->v2) != 1)
        return WHY("the accumulator operand `%s` at line %u is not indexed by %s and %s", p->acc, ln, p->v1, p->v2);
    /* the four statements before the nest: the fragment arrays and their loads */
    TSNode stmts[64];
    unsigned ns = body_stmts(p->block, stmts, 64), at = 0;
    if (ns > 64) return WHY("the block of the mma nest (line %u) is too long", kl_ast_line(p->block));
    while (at < ns && !ts_node_eq(stmts[at], p->outer)) at++;
    if (at < 4 || at + 1 != ns) return WHY("the mma nest at line %u is not the last of a block that loads its fragments", kl_ast_line(p->outer));
    for (unsigned i = at - 4; i < at; i++) {
        TSNode s = stmts[i];
        if (rb_is(s, "declaration")) {
            if (ts_node_is_null(single_declarator(s))) return WHY("the declaration at line %u declares more than one name", kl_ast_line(s));
            char nm[64];
            text_to(ctx, kl_ast_declarator_name(single_declarator(s)), nm, sizeof nm);
            if (!strcmp(nm, af) && ts_node_is_null(p->adecl)) p->adecl = s;
            else if (!strcmp(nm, bf) && ts_node_is_null(p->bdecl)) p->bdecl = s;
            else return WHY("the declaration at line %u is not one of the fragments %s, %s", kl_ast_line(s), af, bf);
        } else if (rb_is(s, "for_statement")) {
            if (rb_count_ident(ctx, s, af) && ts_node_is_null(p->aloop)) p->aloop = s;
            else if (rb_count_ident(ctx, s, bf) && ts_node_is_null(p->bloop)) p->bloop = s;
            else return WHY("the loop at line %u loads neither %s nor %s", kl_ast_line(s), af, bf);
        } else {
            return WHY("the statement at line %u is neither a fragment declaration nor its load", kl_ast_line(s));
        }
    }
    if (ts_node_is_null(p->adecl) || ts_node_is_null(p->bdecl) || ts_node_is_null(p->aloop) || ts_node_is_null(p->bloop))
        return WHY("the four statements before the mma nest (line %u) are not %s, %s and their loads", kl_ast_line(p->outer), af, bf);
    if (ts_node_start_byte(p->adecl) > ts_node_start_byte(p->aloop) || ts_node_start_byte(p->bdecl) > ts_node_start_byte(p->bloop))
        return WHY("a fragment array is loaded before its declaration (line %u)", kl_ast_line(p->aloop));
    p->first = stmts[at - 4];
    if (!rb_line_blank_before(ctx, tt_pragma_above(ctx, ts_node_start_byte(p->first))) ||
        rb_line_end(ctx, ts_node_end_byte(p->outer) - 1) != rb_line_end(ctx, ts_node_end_byte(p->outer)))
        return WHY("the fragment code (lines %u-%u) does not sit on lines of its own", kl_ast_line(p->first), kl_ast_line(p->outer));
    char t[96];
    kl_snprintf(t, sizeof t, "uint32_t%s[%s][4];", af, b1);
    char t2[96];
    kl_snprintf(t2, sizeof t2, "uint32_t%s[%s][2];", bf, b2);
    if (!squeezed_is(ctx, p->adecl, t) || !squeezed_is(ctx, p->bdecl, t2))
        return WHY("the fragments are not declared `uint32_t %s[%s][4]; uint32_t %s[%s][2];` (lines %u, %u)", af, b1, bf, b2,
                   kl_ast_line(p->adecl), kl_ast_line(p->bdecl));
    if (rb_count_ident(ctx, p->block, af) != 3 || rb_count_ident(ctx, p->block, bf) != 7)
        return WHY("the fragments %s, %s are used other than by their loads and the mma call", af, bf);
    /* B's n-tiles come in pairs: FN must be even */
    long long fnv = 0;
    TSNode bnode = rb_field(kl_ast_unparen(rb_field(p->inner, "condition")), "right");
    if (!rb_const_eval(ctx, p->body, bnode, &fnv) || fnv <= 0 || fnv % 2)
        return WHY("the n-tile count %s (line %u) is not a known even number (B fragments come in pairs from ldmatrix.x4.trans)",
                   b2, kl_ast_line(p->inner));
    /* the A load: for (i = 0; i < FM; i++) { locals; LDM(AF[i], PTR); } */
    char iv[64], ib[128], fname[64];
    TSNode ls[PTX_MAXLOC + 8], cargs[3];
    unsigned nls, nargs;
    ptx_local aloc[PTX_MAXLOC], bloc[PTX_MAXLOC];
    unsigned na = 0, nb = 0;
    if (!plain_loop(ctx, p->aloop, iv, ib, sizeof ib) || strcmp(ib, b1))
        return WHY("the A fragment loop at line %u is not `for (i = 0; i < %s; i++)`", kl_ast_line(p->aloop), b1);
    nls = body_stmts(rb_field(p->aloop, "body"), ls, PTX_MAXLOC + 8);
    kl_snprintf(want, sizeof want, "%s[%s]", af, iv);
    if (nls < 1 || nls > PTX_MAXLOC + 1 || !call_stmt(ctx, ls[nls - 1], fname, cargs, 3, &nargs) || nargs != 2 ||
        !squeezed_is(ctx, cargs[0], want) || !ldmatrix_helper(ctx, fname, false) || !loop_locals(ctx, ls, nls - 1, aloc, &na))
        return WHY("the A fragment loop at line %u is not `const int` locals and one ldmatrix.x4 helper call into %s[%s]",
                   kl_ast_line(p->aloop), af, iv);
    kl_snprintf(p->helpers[1], 64, "%s", fname);
    TSNode aptr = cargs[1];
    /* the B load: for (j = 0; j < FN / 2; j++) { locals; uint32_t R[4]; LDMT(R, PTR); BF[2*j][0] = R[0]; … } */
    char jv[64], jb[128];
    if (!plain_loop(ctx, p->bloop, jv, jb, sizeof jb))
        return WHY("the B fragment loop at line %u is not `for (j = 0; j < %s / 2; j++)`", kl_ast_line(p->bloop), b2);
    long long jn = 0;
    if (!rb_const_eval(ctx, p->body, rb_field(kl_ast_unparen(rb_field(p->bloop, "condition")), "right"), &jn) || jn * 2 != fnv)
        return WHY("the B fragment loop at line %u does not load %s / 2 pairs of n-tiles", kl_ast_line(p->bloop), b2);
    nls = body_stmts(rb_field(p->bloop, "body"), ls, PTX_MAXLOC + 8);
    if (nls < 6 || nls > PTX_MAXLOC + 6)
        return WHY("the B fragment loop at line %u is not locals, `uint32_t r[4];`, ldmatrix.x4.trans and four moves", kl_ast_line(p->bloop));
    unsigned rd = nls - 6;
    char rn[64];
    if (ts_node_is_null(single_declarator(ls[rd])))
        return WHY("the B fragment loop at line %u does not declare its four registers", kl_ast_line(p->bloop));
    text_to(ctx, kl_ast_declarator_name(single_declarator(ls[rd])), rn, sizeof rn);
    kl_snprintf(t, sizeof t, "uint32_t%s[4];", rn);
    if (!squeezed_is(ctx, ls[rd], t) || !call_stmt(ctx, ls[rd + 1], fname, cargs, 3, &nargs) || nargs != 2 ||
        !text_is(ctx, cargs[0], rn) || !ldmatrix_helper(ctx, fname, true) || !loop_locals(ctx, ls, rd, bloc, &nb))
        return WHY("the B fragment loop at line %u is not `const int` locals, `uint32_t r[4];` and one ldmatrix.x4.trans helper "
                   "call into r", kl_ast_line(p->bloop));
    kl_snprintf(p->helpers[2], 64, "%s", fname);
    TSNode bptr = cargs[1];
    for (unsigned i = 0; i < 4; i++) {
        kl_snprintf(want, sizeof want, "%s[2*%s%s][%u]=%s[%u];", bf, jv, i >= 2 ? "+1" : "", i % 2, rn, i);
        if (!squeezed_is(ctx, ls[rd + 2 + i], want))
            return WHY("line %u does not read `%s[2 * %s%s][%u] = %s[%u];`: the registers of ldmatrix.x4.trans are b0, b1 of "
                       "n-tile 2j, then of 2j + 1", kl_ast_line(ls[rd + 2 + i]), bf, jv, i >= 2 ? " + 1" : "", i % 2, rn, i);
    }
    if (rb_count_ident(ctx, p->bloop, rn) != 6) return WHY("the registers %s of line %u are used elsewhere", rn, kl_ast_line(ls[rd]));
    /* the element reads: A (r, k) from lane r + 16 (k / 8), element k % 8; B (k, n) of n-tile ni from lane k + 16 (ni % 2)
     * in iteration ni / 2, element n */
    char ito[80], jto[80];
    kl_snprintf(ito, sizeof ito, "%s", p->v1);
    kl_snprintf(jto, sizeof jto, "%s / 2", p->v2);
    char bdiv[80], bvl[120];
    kl_snprintf(bdiv, sizeof bdiv, "%s %% 2", p->v2);
    kl_snprintf(bvl, sizeof bvl, "kl_x + 16 * (%s %% 2)", p->v2);
    ptx_render ra = {ctx, p->body, p->lane, "kl_r", "kl_x / 8", "kl_r + 16 * (kl_x / 8)", iv, ito, aloc, na, 0, ""};
    p->aread = element_read(&ra, aptr, "kl_x % 8");
    if (!p->aread) return WHY("%s", ra.why[0] ? ra.why : "out of memory");
    ptx_render rbb = {ctx, p->body, p->lane, "kl_x", bdiv, bvl, jv, jto, bloc, nb, 0, ""};
    p->bread = element_read(&rbb, bptr, "kl_c");
    if (!p->bread) return WHY("%s", rbb.why[0] ? rbb.why : "out of memory");
    /* names the scalar loop introduces */
    static const char *const mine[] = {"kl_e", "kl_r", "kl_c", "kl_x"};
    for (unsigned i = 0; i < 4; i++)
        if (rb_count_ident(ctx, p->body, mine[i])) return WHY("the kernel already uses the name %s", mine[i]);
#undef WHY
    return true;
}

/* A __device__ helper used only by the removed code goes, with a comment line right above it that
 * names mma or ldmatrix. */
static kl_status drop_helper(const kl_rule_ctx *ctx, const char *name, unsigned removed_uses, kl_edits *out)
{
    TSNode f = kl_ast_function_named(ctx->src, name);
    if (ts_node_is_null(f)) return KL_OK;
    TSNode root = ts_tree_root_node(kl_source_tree(ctx->src));
    if (rb_count_ident(ctx, root, name) != 1 + removed_uses) return KL_OK;
    TSNode outer = kl_ast_function_outer(f);
    uint32_t s = rb_line_start(ctx, ts_node_start_byte(outer)), e = rb_line_end(ctx, ts_node_end_byte(outer) - 1);
    if (!rb_line_blank_before(ctx, ts_node_start_byte(outer))) return KL_OK;
    TSNode prev = ts_node_prev_sibling(outer);
    if (rb_is(prev, "comment") && rb_line_end(ctx, ts_node_end_byte(prev) - 1) == s) {
        char *c = rb_text(ctx, prev);
        if (c && (strstr(c, "mma") || strstr(c, "ldmatrix")) && rb_line_blank_before(ctx, ts_node_start_byte(prev)))
            s = rb_line_start(ctx, ts_node_start_byte(prev));
        free(c);
    }
    /* one blank line of the two around it goes too */
    if (s >= 2 && ctx->text[s - 1] == '\n' && ctx->text[s - 2] == '\n' && e < ctx->len && ctx->text[e] == '\n') e++;
    return kl_edits_add(out, s, e, "");
}

static kl_status remove_ptx(const kl_rule_ctx *ctx, const tc_ptx *p, kl_edits *out, kl_error *err)
{
    char in[32] = "", in2[48], in3[64], in4[80], in5[96];
    rb_indent_of(ctx, ts_node_start_byte(p->first), in, sizeof in);
    kl_snprintf(in2, sizeof in2, "%s    ", in);
    kl_snprintf(in3, sizeof in3, "%s    ", in2);
    kl_snprintf(in4, sizeof in4, "%s    ", in3);
    kl_snprintf(in5, sizeof in5, "%s    ", in4);
    const char *L = p->lane;
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "%s// tensor-core removed: scalar f32 FMAs over the same shared tiles; each lane computes the m16n8k16\n", in);
    kl_strbuf_addf(&sb, "%s// accumulator elements it held (element e: row %s / 4 + 8 * (e / 2), col 2 * (%s %% 4) + e %% 2 of the\n",
                   in, L, L);
    kl_strbuf_addf(&sb, "%s// 16 x 8 tile), reading A and B where its ldmatrix lanes read them\n", in);
    /* the mma nest's loops keep the #pragma unroll they had; the loops this adds get none (a
     * removal must not add what the catalog recognizes as an optimization: the walk counts them) */
    bool u1 = tt_pragma_above(ctx, ts_node_start_byte(p->outer)) != ts_node_start_byte(p->outer);
    bool u2 = tt_pragma_above(ctx, ts_node_start_byte(p->inner)) != ts_node_start_byte(p->inner);
    kl_strbuf_addf(&sb, "%s%s%s\n", u1 ? "#pragma unroll\n" : "", in, p->hdr1);
    kl_strbuf_addf(&sb, "%s%s%s\n", u2 ? "#pragma unroll\n" : "", in2, p->hdr2);
    kl_strbuf_addf(&sb, "%sfor (int kl_e = 0; kl_e < 4; kl_e++) {\n", in3);
    kl_strbuf_addf(&sb, "%sconst int kl_r = %s / 4 + 8 * (kl_e / 2), kl_c = 2 * (%s %% 4) + kl_e %% 2;\n", in4, L, L);
    kl_strbuf_addf(&sb, "%sfor (int kl_x = 0; kl_x < 16; kl_x++)\n", in4);
    kl_strbuf_addf(&sb, "%s%s[kl_e] += %s(%s) *\n%s    %s(%s);\n", in5, p->acc, p->conv, p->aread, in5, p->conv, p->bread);
    kl_strbuf_addf(&sb, "%s}\n", in3);
    kl_status st = KL_ERR_NOMEM;
    if (!sb.failed) {
        uint32_t s = tt_pragma_above(ctx, ts_node_start_byte(p->first));
        s = rb_line_start(ctx, s);
        uint32_t e = rb_line_end(ctx, ts_node_end_byte(p->outer) - 1);
        st = kl_edits_add(out, s, e, kl_strbuf_str(&sb));
    }
    kl_strbuf_release(&sb);
    if (st == KL_OK) st = drop_helper(ctx, p->helpers[0], 1, out);
    if (st == KL_OK) st = drop_helper(ctx, p->helpers[1], 1, out);
    if (st == KL_OK) st = drop_helper(ctx, p->helpers[2], 1, out);
    return st == KL_OK ? KL_OK : kl_error_set(err, st, "out of memory");
}

/* ---- find and run -------------------------------------------------------------------------------------------- */

typedef struct tc_job {
    const kl_site *site;     /* run: the site to rewrite; NULL: find */
    const json_t *params;
    kl_sites *out;
    kl_edits *edits;
    kl_error *err;
    kl_status st;
    bool done;
} tc_job;

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    tc_job *j = user;
    if (j->done) return KL_OK;
    if (j->site && strcmp(j->site->kernel, name)) return KL_OK;
    mma_scan m = {ctx, {{0}, 0, 0}, ""};
    rb_walk(kl_ast_function_body(fn), mma_visit, &m);
    if (!ts_node_is_null(m.hit)) {
        tc_wmma w;
        memset(&w, 0, sizeof w);
        bool ours = analyse_wmma(ctx, fn, &w);
        /* PTX mma.sync fed by ldmatrix: removable when its fragments' sources are the recognised form */
        tc_ptx px;
        memset(&px, 0, sizeof px);
        bool ptx = !ours && !w.why[0] && !strstr(m.what, "mma_sync") && analyse_ptx(ctx, fn, m.hit, &px);
        if (!ours && !ptx && !w.why[0]) {
            if (px.why[0] && !strstr(m.what, "mma_sync"))
                kl_snprintf(w.why, sizeof w.why, "the mma.sync at line %u is not removable: %s", kl_ast_line(m.hit), px.why);
            else
                foreign_why(ctx, fn, &m, w.why, sizeof w.why);
        }
        TSNode at = ours ? w.k0loop : m.hit;
        char id[256];
        kl_site_id(id, sizeof id, name, at, NULL);
        if (j->site) {
            if (j->site->dir != KL_SITE_PRESENT || strcmp(j->site->id, id)) {
                ptx_release(&px);
                return KL_OK;
            }
            j->done = true;
            j->st = ours  ? remove_wmma(ctx, &w, name, j->edits, j->err)
                    : ptx ? remove_ptx(ctx, &px, j->edits, j->err)
                          : kl_rule_not_applicable(j->err, "%s", w.why);
            ptx_release(&px);
            return KL_OK;
        }
        json_t *feat = json_pack("{s:s, s:s}", "api", strstr(m.what, "mma_sync") ? "wmma" : "mma.sync", "dtype",
                                 ours ? dtype_of(w.elem) : ptx ? px.dtype : "bf16/f16");
        if (!feat) {
            ptx_release(&px);
            return KL_ERR_NOMEM;
        }
        if (ptx) {
            json_object_set_new(feat, "form", json_string("ldmatrix + mma.sync.m16n8k16 warp tile"));
            json_object_set_new(feat, "lane", json_string(px.lane));
            json_object_set_new(feat, "fragments", json_pack("[s, s]", px.v1, px.v2));
            ptx_release(&px);
            return kl_sites_add(j->out, id, KL_SITE_PRESENT, kl_node_span(at), name, feat, NULL,
                                "mma.sync m16n8k16 on ldmatrix fragments of shared tiles (removable to scalar FMAs)");
        }
        ptx_release(&px);
        json_t *params = NULL;
        if (ours) {
            json_object_set_new(feat, "block_tile", json_pack("[i, i]", 16 * w.wm * w.fm, 16 * w.wn * w.fn_));
            char a[8], b[8], c[8], d[8];
            kl_snprintf(a, sizeof a, "%d", w.wm), kl_snprintf(b, sizeof b, "%d", w.wn);
            kl_snprintf(c, sizeof c, "%d", w.fm), kl_snprintf(d, sizeof d, "%d", w.fn_);
            params = json_pack("{s:s, s:s, s:s, s:s, s:s}", "warps_m", a, "warps_n", b, "frags_m", c, "frags_n", d, "api", "wmma");
        } else {
            json_object_set_new(feat, "why_not", json_string(w.why));
        }
        return kl_sites_add(j->out, id, KL_SITE_PRESENT, kl_node_span(at), name, feat, params,
                            ours ? "wmma fragments over shared tiles (the form apply writes)" : "tensor-core instructions");
    }
    for (unsigned i = 0; i < kl_affine_loop_count(ax) && !j->done; i++) {
        const kl_ax_loop *L = kl_affine_loop(ax, i);
        tc_naive g;
        if (!analyse_naive(ctx, ax, fn, L, &g)) continue;
        char id[256];
        kl_site_id(id, sizeof id, name, L->node, NULL);
        /* the launches must be rewritable too */
        if (!g.why[0]) {
            kl_launch_sites ls = {0};
            kl_error e2 = {0};
            if (kl_ast_launches(ctx->src, &ls, &e2) == KL_OK) {
                launch_plan plans[8];
                unsigned np;
                plan_launches(ctx, ax, fn, name, g.M, g.N, &ls, plans, 8, &np, g.why, sizeof g.why);
                kl_launch_sites_release(&ls);
            }
        }
        if (j->site) {
            if (j->site->dir != KL_SITE_APPLICABLE || strcmp(j->site->id, id)) continue;
            j->done = true;
            int64_t wm = 2, wn = 2, fm = 1, fn_ = 1;
            kl_rule_param_int(&kl_rule_tensor_core, j->params, "warps_m", &wm);
            kl_rule_param_int(&kl_rule_tensor_core, j->params, "warps_n", &wn);
            kl_rule_param_int(&kl_rule_tensor_core, j->params, "frags_m", &fm);
            kl_rule_param_int(&kl_rule_tensor_core, j->params, "frags_n", &fn_);
            int64_t bk = 16, vl = 0, stages = 1;
            kl_rule_param_int(&kl_rule_tensor_core, j->params, "bk", &bk);
            kl_rule_param_int(&kl_rule_tensor_core, j->params, "vector_loads", &vl);
            kl_rule_param_int(&kl_rule_tensor_core, j->params, "stages", &stages);
            if (stages < 1 || stages > 4) {
                j->st = kl_error_set(j->err, KL_ERR_INVALID, "tensor-core: stages must be 1 to 4");
                return KL_OK;
            }
            if (bk != 16 && bk != 32 && bk != 64) {
                j->st = kl_error_set(j->err, KL_ERR_INVALID, "tensor-core: bk must be 16, 32 or 64");
                return KL_OK;
            }
            j->st = apply_naive(ctx, ax, &g, name, (int)wm, (int)wn, (int)fm, (int)fn_, (int)bk, vl != 0, (int)stages, j->edits,
                                j->err);
            return KL_OK;
        }
        json_t *feat = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:b}", "dtype", dtype_of(g.elem), "accumulate", "f32",
                                 "form", "one output per thread", "k", g.k, "M", g.M, "N", g.N, "K", g.K, "early_return", g.early);
        if (!feat) return KL_ERR_NOMEM;
        if (g.why[0]) json_object_set_new(feat, "why_not", json_string(g.why));
        char note[200];
        kl_snprintf(note, sizeof note, "a %s GEMM loop over %s with f32 accumulation (one output per thread)", dtype_of(g.elem), g.k);
        kl_status st = kl_sites_add(j->out, id, KL_SITE_APPLICABLE, kl_node_span(L->node), name, feat, NULL, note);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    tc_job j = {NULL, NULL, out, NULL, err, KL_OK, false};
    return kl_rules_each_function(ctx, "__global__", visit, &j, err);
}

static kl_status run(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    tc_job j = {site, params, NULL, out, err, KL_OK, false};
    kl_status st = kl_rules_each_function(ctx, "__global__", visit, &j, err);
    if (st != KL_OK) return st == KL_ERR_NOMEM ? kl_error_set(err, st, "out of memory") : st;
    if (!j.done) return kl_rule_not_applicable(err, "nothing to %s at %s", site->dir == KL_SITE_PRESENT ? "remove" : "apply", site->id);
    return j.st;
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    return run(ctx, site, NULL, out, err);
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    const char *why = json_string_value(json_object_get(site->features, "why_not"));
    if (why) return kl_rule_not_applicable(err, "%s", why);
    return run(ctx, site, params, out, err);
}

const kl_rule kl_rule_tensor_core = {
    "tensor-core", "compute a bf16/f16 GEMM's k loop on the tensor cores with wmma fragments over shared tiles",
    tc_params, sizeof tc_params / sizeof tc_params[0], find, remove_site, apply,
};

/* ---- shared with wgmma.c (tensor_core.h) ----------------------------------------------------------------- */

char *kl_tc_squeeze(const kl_rule_ctx *ctx, TSNode n) { return squeeze(ctx, n); }
unsigned kl_tc_param_names(const kl_rule_ctx *ctx, TSNode fn, char names[][64], unsigned max)
{
    return param_names(ctx, fn, names, max);
}
bool kl_tc_plain_loop(const kl_rule_ctx *ctx, TSNode loop, char *v, char *bound, size_t bsize)
{
    return plain_loop(ctx, loop, v, bound, bsize);
}
unsigned kl_tc_body_stmts(TSNode block, TSNode *out, unsigned max) { return body_stmts(block, out, max); }
bool kl_tc_find_lane(const kl_rule_ctx *ctx, TSNode body, char *lane) { return find_lane(ctx, body, lane); }
