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

#include "rewrite/rules/tensor_core_int.h"
#include "util/util.h"


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
void tensor_core__text_to(const kl_rule_ctx *ctx, TSNode n, char *buf, size_t size)
{
    if (ts_node_is_null(n)) {
        buf[0] = '\0';
        return;
    }
    uint32_t a = ts_node_start_byte(n), b = ts_node_end_byte(n);
    kl_snprintf(buf, size, "%.*s", (int)(b - a), ctx->text + a);
}

bool tensor_core__text_is(const kl_rule_ctx *ctx, TSNode n, const char *s) { return !ts_node_is_null(n) && rt_text_is(ctx, n, s); }

/* The statements of a compound statement (comments skipped), at most max. */
unsigned tensor_core__stmts_of(TSNode block, TSNode *out, unsigned max)
{
    if (!rt_is(block, "compound_statement")) {
        if (max) out[0] = block;
        return 1;
    }
    return tt_stmts(block, out, max);
}

/* A type text without a leading `const ` (and without trailing blanks). */
void tensor_core__strip_const(const char *t, char *out, size_t size)
{
    while (!strncmp(t, "const ", 6)) t += 6;
    kl_snprintf(out, size, "%s", t);
    size_t n = strlen(out);
    while (n && (out[n - 1] == ' ' || out[n - 1] == '*')) out[--n] = '\0';
}

/* The condition of an if statement (the value inside the parentheses). */
TSNode tensor_core__if_cond(TSNode ifs)
{
    TSNode c = rt_field(ifs, "condition");
    if (rt_is(c, "condition_clause")) {
        TSNode v = rt_field(c, "value");
        c = ts_node_is_null(v) ? ts_node_named_child(c, 0) : v;
    }
    return kl_ast_unparen(c);
}

bool tensor_core__is_16bit(const char *t) { return !strcmp(t, "__nv_bfloat16") || !strcmp(t, "nv_bfloat16") || !strcmp(t, "__half") || !strcmp(t, "half"); }
const char *tensor_core__dtype_of(const char *t)
{
    if (strstr(t, "bfloat16")) return "bf16";
    if (!strcmp(t, "__half") || !strcmp(t, "half")) return "f16";
    return "template";
}

/* ---- find and run -------------------------------------------------------------------------------------------- */

typedef struct tc_job {
    rt_run run;              /* run.site: the site to rewrite; NULL: find */
    kl_sites *out;           /* find: the sites */
} tc_job;

static kl_status visit(const kl_rule_ctx *ctx, const char *name, TSNode fn, kl_affine_ctx *ax, void *user)
{
    tc_job *j = user;
    if (j->run.done) return KL_OK;
    if (j->run.site && strcmp(j->run.site->kernel, name)) return KL_OK;
    tensor_core__mma_scan m = {ctx, {{0}, 0, 0}, ""};
    kl_ast_walk(kl_ast_function_body(fn), tensor_core__mma_visit, &m);
    if (!ts_node_is_null(m.hit)) {
        tensor_core__tc_wmma w;
        memset(&w, 0, sizeof w);
        bool ours = tensor_core__analyse_wmma(ctx, fn, &w);
        /* PTX mma.sync fed by ldmatrix: removable when its fragments' sources are the recognised form */
        tensor_core__tc_ptx px;
        memset(&px, 0, sizeof px);
        bool ptx = !ours && !w.why[0] && !strstr(m.what, "mma_sync") && tensor_core__analyse_ptx(ctx, fn, m.hit, &px);
        if (!ours && !ptx && !w.why[0]) {
            if (px.why[0] && !strstr(m.what, "mma_sync"))
                kl_snprintf(w.why, sizeof w.why, "the mma.sync at line %u is not removable: %s", kl_ast_line(m.hit), px.why);
            else
                tensor_core__foreign_why(ctx, fn, &m, w.why, sizeof w.why);
        }
        TSNode at = ours ? w.k0loop : m.hit;
        char id[256];
        kl_site_id(id, sizeof id, name, at, NULL);
        if (j->run.site) {
            if (j->run.site->dir != KL_SITE_PRESENT || strcmp(j->run.site->id, id)) {
                tensor_core__ptx_release(&px);
                return KL_OK;
            }
            j->run.done = true;
            j->run.st = ours  ? tensor_core__remove_wmma(ctx, &w, name, j->run.out, j->run.err)
                    : ptx ? tensor_core__remove_ptx(ctx, &px, j->run.out, j->run.err)
                          : kl_rule_not_applicable(j->run.err, "%s", w.why);
            tensor_core__ptx_release(&px);
            return KL_OK;
        }
        json_t *feat = json_pack("{s:s, s:s}", "api", strstr(m.what, "mma_sync") ? "wmma" : "mma.sync", "dtype",
                                 ours ? tensor_core__dtype_of(w.elem) : ptx ? px.dtype : "bf16/f16");
        if (!feat) {
            tensor_core__ptx_release(&px);
            return KL_ERR_NOMEM;
        }
        if (ptx) {
            json_object_set_new(feat, "form", json_string("ldmatrix + mma.sync.m16n8k16 warp tile"));
            json_object_set_new(feat, "lane", json_string(px.lane));
            json_object_set_new(feat, "fragments", json_pack("[s, s]", px.v1, px.v2));
            tensor_core__ptx_release(&px);
            return kl_sites_add(j->out, id, KL_SITE_PRESENT, kl_node_span(at), name, feat, NULL,
                                "mma.sync m16n8k16 on ldmatrix fragments of shared tiles (removable to scalar FMAs)");
        }
        tensor_core__ptx_release(&px);
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
    for (unsigned i = 0; i < kl_affine_loop_count(ax) && !j->run.done; i++) {
        const kl_ax_loop *L = kl_affine_loop(ax, i);
        tensor_core__tc_naive g;
        if (!tensor_core__analyse_naive(ctx, ax, fn, L, &g)) continue;
        char id[256];
        kl_site_id(id, sizeof id, name, L->node, NULL);
        /* the launches must be rewritable too */
        if (!g.why[0]) {
            kl_launch_sites ls = {0};
            kl_error e2 = {0};
            if (kl_ast_launches(ctx->src, &ls, &e2) == KL_OK) {
                tensor_core__launch_plan plans[8];
                unsigned np;
                tensor_core__plan_launches(ctx, ax, fn, name, g.M, g.N, &ls, plans, 8, &np, g.why, sizeof g.why);
                kl_launch_sites_release(&ls);
            }
        }
        if (j->run.site) {
            if (j->run.site->dir != KL_SITE_APPLICABLE || strcmp(j->run.site->id, id)) continue;
            j->run.done = true;
            int64_t wm = 2, wn = 2, fm = 1, fn_ = 1;
            kl_rule_param_int(&kl_rule_tensor_core, j->run.params, "warps_m", &wm);
            kl_rule_param_int(&kl_rule_tensor_core, j->run.params, "warps_n", &wn);
            kl_rule_param_int(&kl_rule_tensor_core, j->run.params, "frags_m", &fm);
            kl_rule_param_int(&kl_rule_tensor_core, j->run.params, "frags_n", &fn_);
            int64_t bk = 16, vl = 0, stages = 1;
            kl_rule_param_int(&kl_rule_tensor_core, j->run.params, "bk", &bk);
            kl_rule_param_int(&kl_rule_tensor_core, j->run.params, "vector_loads", &vl);
            kl_rule_param_int(&kl_rule_tensor_core, j->run.params, "stages", &stages);
            if (stages < 1 || stages > 4) {
                j->run.st = kl_error_set(j->run.err, KL_ERR_INVALID, "tensor-core: stages must be 1 to 4");
                return KL_OK;
            }
            if (bk != 16 && bk != 32 && bk != 64) {
                j->run.st = kl_error_set(j->run.err, KL_ERR_INVALID, "tensor-core: bk must be 16, 32 or 64");
                return KL_OK;
            }
            j->run.st = tensor_core__apply_naive(ctx, ax, &g, name, (int)wm, (int)wn, (int)fm, (int)fn_, (int)bk, vl != 0,
                                                 (int)stages, j->run.out, j->run.err);
            return KL_OK;
        }
        json_t *feat = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:b}", "dtype", tensor_core__dtype_of(g.elem), "accumulate", "f32",
                                 "form", "one output per thread", "k", g.k, "M", g.M, "N", g.N, "K", g.K, "early_return", g.early);
        if (!feat) return KL_ERR_NOMEM;
        if (g.why[0]) json_object_set_new(feat, "why_not", json_string(g.why));
        char note[200];
        kl_snprintf(note, sizeof note, "a %s GEMM loop over %s with f32 accumulation (one output per thread)", tensor_core__dtype_of(g.elem), g.k);
        kl_status st = kl_sites_add(j->out, id, KL_SITE_APPLICABLE, kl_node_span(L->node), name, feat, NULL, note);
        if (st != KL_OK) return st;
    }
    return KL_OK;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    tc_job j = {.run = {.err = err, .st = KL_OK}, .out = out};
    return kl_rules_each_function(ctx, "__global__", visit, &j, err);
}

static kl_status run(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    tc_job j = {.run = {site, params, out, err, false, KL_OK}};
    return kl_rules_run_site(ctx, visit, &j, &j.run, false, "nothing to %s at %s",
                             site->dir == KL_SITE_PRESENT ? "remove" : "apply", site->id);
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    return run(ctx, site, NULL, out, err);
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out, kl_error *err)
{
    kl_status st = kl_site_why_not(site, err);
    return st == KL_OK ? run(ctx, site, params, out, err) : st;
}

const kl_rule kl_rule_tensor_core = {
    "tensor-core", "compute a bf16/f16 GEMM's k loop on the tensor cores with wmma fragments over shared tiles",
    tc_params, sizeof tc_params / sizeof tc_params[0], find, remove_site, apply,
};

/* ---- shared with wgmma.c (tensor_core.h) ----------------------------------------------------------------- */

char *kl_tc_squeeze(const kl_rule_ctx *ctx, TSNode n) { return tensor_core__squeeze(ctx, n); }
unsigned kl_tc_param_names(const kl_rule_ctx *ctx, TSNode fn, char names[][64], unsigned max)
{
    return tensor_core__param_names(ctx, fn, names, max);
}
bool kl_tc_plain_loop(const kl_rule_ctx *ctx, TSNode loop, char *v, char *bound, size_t bsize)
{
    return tensor_core__plain_loop(ctx, loop, v, bound, bsize);
}
unsigned kl_tc_body_stmts(TSNode block, TSNode *out, unsigned max) { return tensor_core__body_stmts(block, out, max); }
bool kl_tc_find_lane(const kl_rule_ctx *ctx, TSNode body, char *lane) { return tensor_core__find_lane(ctx, body, lane); }

