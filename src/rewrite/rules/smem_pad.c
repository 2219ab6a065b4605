/*
 * smem-pad — a 2-D (or higher) `__shared__` array read or written along a column
 * (`tile[threadIdx.x][k]`: the lanes of a warp step by a whole row, so they hit the same bank)
 * ↔ the same array with its last dimension padded (`[N][M + 1]`), which turns the row stride
 * into an odd number of banks.
 *
 * Applicable: every use of the array is a full subscript (`t[i][j]`, nothing takes its
 * address or its size, so the row length is not visible), some access has its outer index
 * moving with threadIdx.x and its inner one not, and the row length (a compile-time
 * constant) makes that access conflict (gcd(row words, 32) > 1).
 * Present: the last dimension is `E + k` (k a constant 1..8) where another dimension is E,
 * or a literal one more than another dimension's, or marked by a `smem-pad` comment.
 * Parameter: pad (elements added to each row).
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules_tree.h"
#include "rewrite/rules/tile_text.h"

#define NAME "smem-pad"

static const char *const pad_values[] = {"1", "2", "4", NULL};
static const kl_rule_param pad_params[] = {{"pad", pad_values, "1"}};

typedef struct shared_array {
    TSNode decl;            /* the declaration */
    TSNode dims[4];         /* size expressions, outermost first */
    unsigned ndims;
    char name[64];
    char elem[64];
} shared_array;

static bool shared_array_of(const kl_rule_ctx *ctx, TSNode decl, shared_array *a)
{
    memset(a, 0, sizeof *a);
    TSNode d = rt_field(decl, "declarator");
    TSNode chain[4];
    unsigned n = 0;
    while (rt_is(d, "array_declarator") && n < 4) {
        chain[n++] = d;
        d = rt_field(d, "declarator");
    }
    if (!rt_is(d, "identifier") || n < 2 || rt_is(d, "array_declarator")) return false;
    for (unsigned i = 0; i < n; i++) {
        a->dims[i] = rt_field(chain[n - 1 - i], "size");
        if (ts_node_is_null(a->dims[i])) return false;
    }
    a->ndims = n;
    a->decl = decl;
    uint32_t s = ts_node_start_byte(d), e = ts_node_end_byte(d);
    if (e - s >= sizeof a->name) return false;
    memcpy(a->name, ctx->text + s, e - s);
    a->name[e - s] = '\0';
    TSNode ty = rt_field(decl, "type");
    char *t = ts_node_is_null(ty) ? NULL : rt_text(ctx, ty);
    kl_snprintf(a->elem, sizeof a->elem, "%s", t ? t : "");
    free(t);
    return true;
}

typedef struct uses {
    const kl_rule_ctx *ctx;
    const shared_array *arr;
    TSNode bad;             /* first use that is not a full subscript */
    TSNode accesses[64];    /* the full subscripts (outermost subscript_expression) */
    unsigned n;
    unsigned vec_bytes;     /* the widest vector access through an element's address (16: float4), 0 none */
    TSNode vec_at;          /* the first such access */
} uses;

/* The bytes of the vector type a `reinterpret_cast<[const] V*>(&X[..][..])` around the address
 * expression addr reads or writes (float4 / int4 16, float2 / int2 8), 0 when addr is not so used. */
static unsigned vector_cast_bytes(const kl_rule_ctx *ctx, TSNode addr)
{
    TSNode args = ts_node_parent(addr);
    if (!rt_is(args, "argument_list") || ts_node_named_child_count(args) != 1) return 0;
    TSNode call = ts_node_parent(args);
    if (!rt_is(call, "call_expression")) return 0;
    char *fn = rt_text(ctx, rt_field(call, "function"));
    unsigned bytes = 0;
    if (fn && !strncmp(fn, "reinterpret_cast", 16) && strchr(fn, '*')) {
        if (strstr(fn, "float4") || strstr(fn, "int4")) bytes = 16;
        else if (strstr(fn, "float2") || strstr(fn, "int2")) bytes = 8;
    }
    free(fn);
    /* the cast pointer is dereferenced at once: `*reinterpret_cast<…>(…)` */
    TSNode d = ts_node_parent(call);
    if (!rt_is(d, "pointer_expression") || !rt_text_is(ctx, rt_field(d, "operator"), "*")) return 0;
    return bytes;
}

static bool uses_visit(TSNode n, void *user)
{
    uses *u = user;
    if (ts_node_eq(n, u->arr->decl)) return false;
    if (!rt_is(n, "identifier") || !rt_text_is(u->ctx, n, u->arr->name)) return true;
    TSNode p = n;
    unsigned depth = 0;
    while (rt_is(ts_node_parent(p), "subscript_expression") &&
           ts_node_eq(rt_field(ts_node_parent(p), "argument"), p)) {
        p = ts_node_parent(p);
        depth++;
    }
    bool addr = rt_is(ts_node_parent(p), "pointer_expression") &&
                rt_text_is(u->ctx, rt_field(ts_node_parent(p), "operator"), "&");
    unsigned vb = addr && depth == u->arr->ndims ? vector_cast_bytes(u->ctx, ts_node_parent(p)) : 0;
    if (vb) {
        /* a vector access starting at one element of a row (float4 reads of a tile row) */
        if (vb > u->vec_bytes) u->vec_bytes = vb;
        if (ts_node_is_null(u->vec_at)) u->vec_at = n;
    } else if (depth != u->arr->ndims || addr) {
        if (ts_node_is_null(u->bad)) u->bad = n;
    } else if (u->n < 64) u->accesses[u->n++] = p;
    return true;
}

/* The subscript index expressions of a full access, outermost first. */
static unsigned access_indices(TSNode acc, TSNode *idx, unsigned max)
{
    unsigned n = 0;
    TSNode chain[4];
    while (rt_is(acc, "subscript_expression") && n < 4) {
        chain[n++] = acc;
        acc = rt_field(acc, "argument");
    }
    for (unsigned i = 0; i < n && i < max; i++) {
        TSNode ind = rt_field(chain[n - 1 - i], "indices");
        idx[i] = ts_node_named_child(ind, 0);
    }
    return n;
}

/* The padding present: the last dimension as `E + k` or a literal, against the others. */
static bool padding_present(const kl_rule_ctx *ctx, const shared_array *a, TSNode scope, long long *k,
                            TSNode *base)
{
    TSNode last = a->dims[a->ndims - 1];
    *base = (TSNode){0};
    if (rt_is(last, "binary_expression") && rt_text_is(ctx, rt_field(last, "operator"), "+") &&
        rt_const_eval(ctx, scope, rt_field(last, "right"), k) && *k >= 1 && *k <= 8) {
        TSNode e = rt_field(last, "left");
        char *et = rt_text(ctx, e);
        bool match = false;
        for (unsigned i = 0; i + 1 < a->ndims && et; i++) match |= rt_text_is(ctx, a->dims[i], et);
        free(et);
        /* or the added columns are named as padding (PAD, PAD_A, kPad …) */
        TSNode right = rt_field(last, "right");
        if (!match && rt_is(right, "identifier")) {
            char *rt = rt_text(ctx, right);
            for (char *c = rt; c && *c; c++) *c = (char)toupper((unsigned char)*c);
            match = rt && strstr(rt, "PAD");
            free(rt);
        }
        long long lv, dv;
        if (!match && rt_const_eval(ctx, scope, e, &lv))
            for (unsigned i = 0; i + 1 < a->ndims; i++)
                match |= rt_const_eval(ctx, scope, a->dims[i], &dv) && dv == lv;
        /* or a `smem-pad` comment on the declaration's line or the line above */
        uint32_t ls = rt_line_start(ctx, ts_node_start_byte(a->decl));
        uint32_t from = ls > 0 ? rt_line_start(ctx, ls - 1) : 0;
        if (match || rt_has_marker(ctx, from, rt_line_end(ctx, ts_node_end_byte(a->decl)), NAME)) {
            *base = e;
            return true;
        }
        return false;
    }
    if (rt_is(last, "number_literal")) {
        long long lv, dv;
        if (!rt_const_eval(ctx, scope, last, &lv)) return false;
        for (unsigned i = 0; i + 1 < a->ndims; i++)
            if (rt_const_eval(ctx, scope, a->dims[i], &dv) && lv - dv >= 1 && lv - dv <= 8 && (dv % 8) == 0) {
                *k = lv - dv;
                return true;
            }
    }
    return false;
}

static unsigned gcd(unsigned a, unsigned b)
{
    while (b) {
        unsigned t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Why an access pattern conflicts: the first access with its outer index moving across
 * threadIdx.x by a constant and its last index not (a `%` of threadIdx.x moves: not this) into *acc
 * (a null node when none), with the conflict degree into *degree. */
static kl_status column_access(kl_affine_ctx *ax, const shared_array *a, const uses *u, unsigned row_words,
                               unsigned *degree, TSNode *acc)
{
    *acc = (TSNode){0};
    for (unsigned i = 0; i < u->n; i++) {
        TSNode idx[4];
        unsigned n = access_indices(u->accesses[i], idx, 4);
        if (n != a->ndims) continue;
        const kl_poly *outer, *inner;
        kl_status st = kl_affine_poly_of(ax, idx[n - 2], &outer);
        if (st == KL_OK) st = kl_affine_poly_of(ax, idx[n - 1], &inner);
        if (st != KL_OK) return st;
        int64_t k = 0;
        kl_stride so = kl_poly_stride(outer, "threadIdx.x", &k);
        if ((so == KL_STRIDE_UNIT || so == KL_STRIDE_CONST) &&
            kl_poly_stride(inner, "threadIdx.x", NULL) == KL_STRIDE_ABSENT) {
            unsigned step = (unsigned)(row_words * (k < 0 ? -k : k)) % 32;
            /* lanes l and l' collide when (l-l')*step = 0 mod 32: gcd(step,32) lanes share a bank */
            unsigned deg = gcd(step ? step : 32, 32);
            if (deg > 1) {
                *degree = deg;
                *acc = u->accesses[i];
                return KL_OK;
            }
        }
    }
    return KL_OK;
}

static kl_status find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    kl_status st = KL_OK;
    kl_affine_ctx *ax = NULL; /* the analysis of fs[f], made when an array needs it */
    for (unsigned f = 0; f < nf; f++) {
        if (!fs[f].global && !fs[f].device) continue;
        kl_rules_affine_done(ctx, ax);
        ax = NULL;
        TSNode decls[32];
        unsigned nd = tt_shared_decls(ctx, fs[f].body, decls, 32);
        for (unsigned i = 0; i < nd; i++) {
            shared_array a;
            if (!shared_array_of(ctx, decls[i], &a)) continue;
            kl_span sp = kl_node_span(a.decl);
            char id[256];
            kl_snprintf(id, sizeof id, "%s:%u:%s", fs[f].name, sp.line, a.name);
            long long k;
            TSNode base;
            unsigned esz = rt_type_size(a.elem);
            if (padding_present(ctx, &a, fs[f].body, &k, &base)) {
                json_t *feat = json_pack("{s:s, s:s, s:i, s:I}", "array", a.name, "dtype", a.elem, "dims",
                                         (int)a.ndims, "elem_bytes", (json_int_t)esz);
                json_t *params = json_pack("{s:I}", "pad", (json_int_t)k);
                char note[160];
                kl_snprintf(note, sizeof note, "'%s' rows padded by %lld element(s)", a.name, k);
                KL_TRY(kl_sites_add(out, id, KL_SITE_PRESENT, sp, fs[f].name, feat, params, note));
                continue;
            }
            long long row;
            if (!esz || !rt_const_eval(ctx, fs[f].body, a.dims[a.ndims - 1], &row) || row <= 0) continue;
            if ((row * esz) % 4) continue;
            uses u = {.ctx = ctx, .arr = &a};
            kl_ast_walk(fs[f].body, uses_visit, &u);
            if (!ax) KL_TRY(kl_rules_affine(ctx, fs[f].def, &ax, err));
            unsigned degree = 0;
            TSNode acc;
            KL_TRY(column_access(ax, &a, &u, (unsigned)(row * esz / 4), &degree, &acc));
            if (ts_node_is_null(acc)) continue;
            kl_span asp = kl_node_span(acc);
            json_t *feat = json_pack("{s:s, s:s, s:i, s:I, s:I, s:i, s:i, s:b}", "array", a.name, "dtype", a.elem,
                                     "dims", (int)a.ndims, "elem_bytes", (json_int_t)esz, "row", (json_int_t)row,
                                     "conflict_ways", (int)degree, "column_access_line", (int)asp.line,
                                     "address_taken", !ts_node_is_null(u.bad));
            char note[200];
            kl_snprintf(note, sizeof note, "'%s' read along a column at line %u: %u-way bank conflict", a.name,
                        asp.line, degree);
            KL_TRY(kl_sites_add(out, id, KL_SITE_APPLICABLE, sp, fs[f].name, feat, NULL, note));
        }
    }
cleanup:
    kl_rules_affine_done(ctx, ax);
    if (st == KL_ERR_NOMEM) kl_error_set(err, st, "out of memory");
    return st;
}

/* What remove and apply both start from: the site's kernel, its array, the array's uses and whether (by how much,
 * from which base row) its rows are padded already. */
typedef struct {
    rt_func fs[64];
    const rt_func *f;
    shared_array a;
    uses u;
    bool padded;
    long long k;
    TSNode base;
} pad_site;

/* The array a site is about: by kernel and name (the id's last part). */
static kl_status site_array(const kl_rule_ctx *ctx, const kl_site *site, pad_site *ps, kl_error *err)
{
    unsigned nf = rt_functions(ctx, ps->fs, 64);
    ps->f = rt_function_named(ps->fs, nf, site->kernel);
    if (!ps->f) return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: no kernel '%s'", kl_source_name(ctx->src), site->kernel);
    const char *want = strrchr(site->id, ':');
    want = want ? want + 1 : site->id;
    TSNode decls[32];
    unsigned nd = tt_shared_decls(ctx, ps->f->body, decls, 32);
    for (unsigned i = 0; i < nd; i++)
        if (shared_array_of(ctx, decls[i], &ps->a) && !strcmp(ps->a.name, want)) {
            ps->u = (uses){.ctx = ctx, .arr = &ps->a};
            kl_ast_walk(ps->f->body, uses_visit, &ps->u);
            if (!ts_node_is_null(ps->u.bad)) {
                kl_span sp = kl_node_span(ps->u.bad);
                return kl_rule_not_applicable(err,
                                    "%s:%u:%u: '%s' is used other than as a full subscript (its address or size is "
                                    "taken), so its row length is visible and cannot change",
                                    kl_source_name(ctx->src), sp.line, sp.column, ps->a.name);
            }
            ps->padded = padding_present(ctx, &ps->a, ps->f->body, &ps->k, &ps->base);
            return KL_OK;
        }
    return kl_error_set(err, KL_ERR_NOT_FOUND, "%s: kernel '%s' has no 2-D shared array '%s'",
                        kl_source_name(ctx->src), site->kernel, want);
}

static kl_status remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    pad_site ps;
    kl_status st = site_array(ctx, site, &ps, err);
    if (st != KL_OK) return st;
    if (!ps.padded)
        return kl_rule_not_applicable(err, "%s: the rows of '%s' are not padded",
                            kl_source_name(ctx->src), ps.a.name);
    TSNode last = ps.a.dims[ps.a.ndims - 1];
    if (ps.u.vec_bytes) {
        /* vector accesses stay aligned only if the unpadded row is a multiple of the vector */
        long long lv, row = -1;
        if (!ts_node_is_null(ps.base)) {
            if (!rt_const_eval(ctx, ps.f->body, ps.base, &row)) row = -1;
        } else if (rt_const_eval(ctx, ps.f->body, last, &lv)) {
            row = lv - ps.k;
        }
        unsigned eb = rt_type_size(ps.a.elem);
        if (row < 0 || !eb || (row * eb) % ps.u.vec_bytes != 0) {
            kl_span sp = kl_node_span(ps.u.vec_at);
            return kl_rule_not_applicable(err,
                                          "%s:%u:%u: '%s' is read or written %u bytes at a time from an element's address, "
                                          "and the unpadded row would not keep those accesses aligned",
                                          kl_source_name(ctx->src), sp.line, sp.column, ps.a.name, ps.u.vec_bytes);
        }
    }
    if (!ts_node_is_null(ps.base)) {
        char *bt = rt_text(ctx, ps.base);
        if (!bt) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        st = kl_edits_add(out, ts_node_start_byte(last), ts_node_end_byte(last), bt);
        free(bt);
    } else {
        long long lv;
        rt_const_eval(ctx, ps.f->body, last, &lv);
        st = kl_edits_addf(out, ts_node_start_byte(last), ts_node_end_byte(last), "%lld", lv - ps.k);
    }
    if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    /* an expert's `// smem-pad: ...` comment right above the declaration goes with the padding */
    TSNode prev = ts_node_prev_named_sibling(ps.a.decl);
    if (rt_is(prev, "comment") && rt_has_marker(ctx, ts_node_start_byte(prev), ts_node_end_byte(prev), NAME) &&
        rt_line_blank_before(ctx, ts_node_start_byte(prev)) &&
        rt_line_end(ctx, ts_node_end_byte(prev)) == rt_line_start(ctx, ts_node_start_byte(ps.a.decl))) {
        uint32_t s0, s1;
        rt_stmt_range(ctx, prev, NULL, &s0, &s1);
        if ((st = kl_edits_add(out, s0, s1, "")) != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

static kl_status apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out,
                       kl_error *err)
{
    pad_site ps;
    kl_status st = site_array(ctx, site, &ps, err);
    if (st != KL_OK) return st;
    long long pad = 1;
    json_t *p = params ? json_object_get(params, "pad") : NULL;
    if (p && json_is_integer(p)) pad = json_integer_value(p);
    else if (p && json_is_string(p)) pad = strtoll(json_string_value(p), NULL, 10);
    if (pad < 1 || pad > 8)
        return kl_error_set(err, KL_ERR_INVALID, "smem-pad: pad must be 1..8 elements, got %lld", pad);
    if (ps.padded)
        return kl_rule_not_applicable(err, "%s: the rows of '%s' are already padded",
                            kl_source_name(ctx->src), ps.a.name);
    long long row;
    if (!rt_const_eval(ctx, ps.f->body, ps.a.dims[ps.a.ndims - 1], &row))
        return kl_rule_not_applicable(err,
                            "%s: the row length of '%s' is not a compile-time constant",
                            kl_source_name(ctx->src), ps.a.name);
    unsigned eb = rt_type_size(ps.a.elem);
    if (ps.u.vec_bytes && (!eb || ((row + pad) * eb) % ps.u.vec_bytes != 0)) {
        kl_span sp = kl_node_span(ps.u.vec_at);
        return kl_rule_not_applicable(err,
                                      "%s:%u:%u: '%s' is read or written %u bytes at a time from an element's address: a "
                                      "pad of %lld would misalign those accesses",
                                      kl_source_name(ctx->src), sp.line, sp.column, ps.a.name, ps.u.vec_bytes, pad);
    }
    TSNode last = ps.a.dims[ps.a.ndims - 1];
    char *lt = rt_text(ctx, last);
    if (!lt) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    bool simple = rt_is(last, "number_literal") || rt_is(last, "identifier") || rt_is(last, "parenthesized_expression");
    st = kl_edits_addf(out, ts_node_start_byte(last), ts_node_end_byte(last), simple ? "%s + %lld" : "(%s) + %lld",
                       lt, pad);
    free(lt);
    if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    return KL_OK;
}

const kl_rule kl_rule_smem_pad = {
    NAME,
    "2-D shared arrays read along columns -> rows padded against bank conflicts",
    pad_params,
    1,
    find,
    remove_site,
    apply,
};
