/* The index analysis, its values (affine_int.h): the context's arena and interned names,
 * polynomials over names, the affine forms made of them (the affine view, kl_affine_of) and the
 * polynomials over every name with what they read (the polynomial view, kl_affine_poly_of), with
 * the polynomial view's public questions (affine.h). affine_eval.c computes both views of an
 * expression in one walk. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/affine.h"
#include "syntax/affine_int.h"
#include "util/util.h"

/* ======================================================================================
 * the arena and interned names
 * ====================================================================================== */

void *affine__alloc(kl_affine_ctx *ctx, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0) n = sizeof(max_align_t);
    affine__arena_block *b = ctx->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        b = malloc(sizeof *b + cap);
        if (!b) {
            ctx->oom = true;
            return NULL;
        }
        b->next = ctx->arena;
        b->used = 0;
        b->cap = cap;
        ctx->arena = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

const char *affine__intern(kl_affine_ctx *ctx, const char *s)
{
    for (unsigned i = 0; i < ctx->ninterned; i++)
        if (!strcmp(ctx->interned[i], s)) return ctx->interned[i];
    size_t n = strlen(s);
    char *copy = affine__alloc(ctx, n + 1);
    if (!copy) return "";
    memcpy(copy, s, n + 1);
    if (ctx->ninterned == ctx->capinterned) {
        unsigned cap = ctx->capinterned ? ctx->capinterned * 2 : 64;
        const char **nw = realloc(ctx->interned, cap * sizeof *nw);
        if (!nw) {
            ctx->oom = true;
            return copy;
        }
        ctx->interned = nw;
        ctx->capinterned = cap;
    }
    ctx->interned[ctx->ninterned++] = copy;
    return copy;
}

/* ======================================================================================
 * polynomials over names
 * ====================================================================================== */

static int mono_cmp_factors(const affine__mono *a, const affine__mono *b)
{
    if (a->nf != b->nf) return a->nf < b->nf ? -1 : 1;
    for (unsigned i = 0; i < a->nf; i++) {
        int c = strcmp(a->f[i], b->f[i]);
        if (c) return c;
    }
    return 0;
}

static int mono_qsort_cmp(const void *x, const void *y) { return mono_cmp_factors(x, y); }

/* Normalise m[0..*n): sort, merge like monomials, drop zeros. In place. */
static void poly_norm(affine__mono *m, unsigned *n)
{
    if (*n > 1) qsort(m, *n, sizeof *m, mono_qsort_cmp);
    unsigned w = 0;
    for (unsigned i = 0; i < *n; i++) {
        if (w > 0 && mono_cmp_factors(&m[w - 1], &m[i]) == 0) {
            m[w - 1].coef += m[i].coef;
        } else {
            m[w++] = m[i];
        }
    }
    unsigned z = 0;
    for (unsigned i = 0; i < w; i++)
        if (m[i].coef != 0) m[z++] = m[i];
    *n = z;
}

affine__poly affine__poly_int(kl_affine_ctx *ctx, int64_t v)
{
    affine__poly p = {0};
    if (v == 0) return p;
    affine__mono *m = affine__alloc(ctx, sizeof *m);
    if (!m) return p;
    m[0].coef = v;
    p.m = m;
    p.n = 1;
    return p;
}

affine__poly affine__poly_sym(kl_affine_ctx *ctx, const char *sym)
{
    affine__poly p = {0};
    affine__mono *m = affine__alloc(ctx, sizeof *m);
    if (!m) return p;
    m[0].coef = 1;
    m[0].nf = 1;
    m[0].f[0] = affine__intern(ctx, sym);
    p.m = m;
    p.n = 1;
    return p;
}

affine__poly affine__poly_add(kl_affine_ctx *ctx, affine__poly a, affine__poly b, int64_t sb)
{
    affine__poly p = {0};
    if (a.n + b.n == 0) return p;
    affine__mono *m = affine__alloc(ctx, (a.n + b.n) * sizeof *m);
    if (!m) return p;
    unsigned n = 0;
    for (unsigned i = 0; i < a.n; i++) m[n++] = a.m[i];
    for (unsigned i = 0; i < b.n; i++) {
        m[n] = b.m[i];
        m[n++].coef *= sb;
    }
    poly_norm(m, &n);
    p.m = m;
    p.n = n;
    return p;
}

static int str_qsort_cmp(const void *x, const void *y) { return strcmp(*(const char *const *)x, *(const char *const *)y); }

/* Product; false when a monomial would get more than KL_POLY_MAXF factors. */
bool affine__poly_mul(kl_affine_ctx *ctx, affine__poly a, affine__poly b, affine__poly *out)
{
    affine__poly p = {0};
    *out = p;
    if (a.n == 0 || b.n == 0) return true;
    affine__mono *m = affine__alloc(ctx, a.n * b.n * sizeof *m);
    if (!m) return true;
    unsigned n = 0;
    for (unsigned i = 0; i < a.n; i++) {
        for (unsigned k = 0; k < b.n; k++) {
            affine__mono x = a.m[i];
            if (x.nf + b.m[k].nf > KL_POLY_MAXF) return false;
            for (unsigned f = 0; f < b.m[k].nf; f++) x.f[x.nf++] = b.m[k].f[f];
            qsort(x.f, x.nf, sizeof x.f[0], str_qsort_cmp);
            x.coef *= b.m[k].coef;
            m[n++] = x;
        }
    }
    poly_norm(m, &n);
    p.m = m;
    p.n = n;
    *out = p;
    return true;
}

bool affine__poly_is_int(affine__poly p, int64_t *v)
{
    if (p.n == 0) {
        *v = 0;
        return true;
    }
    if (p.n == 1 && p.m[0].nf == 0) {
        *v = p.m[0].coef;
        return true;
    }
    return false;
}

/* Text: monomials joined with " + " / " - ", factors with "*", constant first. */
static void poly_print(kl_strbuf *sb, affine__poly p)
{
    if (p.n == 0) {
        kl_strbuf_adds(sb, "0");
        return;
    }
    for (unsigned i = 0; i < p.n; i++) {
        int64_t c = p.m[i].coef;
        if (i > 0) {
            kl_strbuf_adds(sb, c < 0 ? " - " : " + ");
            if (c < 0) c = -c;
        }
        bool need_c = p.m[i].nf == 0 || (c != 1 && c != -1);
        if (c == -1 && p.m[i].nf > 0) kl_strbuf_adds(sb, "-");
        if (need_c) kl_strbuf_addf(sb, "%lld", (long long)c);
        for (unsigned f = 0; f < p.m[i].nf; f++) {
            const char *s = p.m[i].f[f];
            bool simple = true;
            for (const char *q = s; *q; q++)
                if (!(isalnum((unsigned char)*q) || *q == '_' || *q == '.')) simple = false;
            if (need_c || f > 0) kl_strbuf_adds(sb, "*");
            if (simple)
                kl_strbuf_adds(sb, s);
            else
                kl_strbuf_addf(sb, "(%s)", s);
        }
    }
}

char *affine__poly_text(affine__poly p)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    poly_print(&sb, p);
    return kl_strbuf_detach(&sb, NULL);
}

/* ======================================================================================
 * the polynomial view: a polynomial over every name, or opaque, with the names it reads
 * ====================================================================================== */

static affine__poly pv_poly(const kl_poly *v) { return (affine__poly){v->m, v->n}; }

/* The sorted union of two sets of names; a set of the arena (or one of the two). */
static bool deps_union(kl_affine_ctx *ctx, const kl_poly *a, const kl_poly *b, kl_poly *out)
{
    if (!b->ndeps || a->deps == b->deps) {
        out->deps = a->deps, out->ndeps = a->ndeps;
        return true;
    }
    if (!a->ndeps) {
        out->deps = b->deps, out->ndeps = b->ndeps;
        return true;
    }
    const char **d = affine__alloc(ctx, (a->ndeps + b->ndeps) * sizeof *d);
    if (!d) return false;
    unsigned i = 0, k = 0, n = 0;
    while (i < a->ndeps || k < b->ndeps) {
        int c = i >= a->ndeps ? 1 : k >= b->ndeps ? -1 : strcmp(a->deps[i], b->deps[k]);
        if (c <= 0) d[n++] = a->deps[i++];
        else d[n++] = b->deps[k++];
        if (c == 0) k++;
    }
    out->deps = d, out->ndeps = n;
    return true;
}

kl_poly affine__pv_opaque(void) { return (kl_poly){.opaque = true}; }

kl_poly affine__pv_join(kl_affine_ctx *ctx, kl_poly a, kl_poly b)
{
    kl_poly r = {.opaque = true};
    if (!deps_union(ctx, &a, &b, &r)) r.ndeps = 0;
    return r;
}

kl_poly affine__pv_of(kl_affine_ctx *ctx, affine__poly p)
{
    kl_poly r = {.m = p.m, .n = p.n};
    unsigned cap = 0;
    for (unsigned i = 0; i < p.n; i++) cap += p.m[i].nf;
    if (!cap) return r;
    const char **d = affine__alloc(ctx, cap * sizeof *d);
    if (!d) return r;
    for (unsigned i = 0; i < p.n; i++)
        for (unsigned f = 0; f < p.m[i].nf; f++) d[r.ndeps++] = p.m[i].f[f];
    qsort(d, r.ndeps, sizeof *d, str_qsort_cmp);
    unsigned w = 0;
    for (unsigned i = 0; i < r.ndeps; i++)
        if (!w || strcmp(d[w - 1], d[i])) d[w++] = d[i];
    r.deps = d, r.ndeps = w;
    return r;
}

kl_poly affine__pv_name(kl_affine_ctx *ctx, const char *name) { return affine__pv_of(ctx, affine__poly_sym(ctx, name)); }

kl_poly affine__pv_add(kl_affine_ctx *ctx, kl_poly a, kl_poly b, int64_t sb)
{
    if (a.opaque || b.opaque) return affine__pv_join(ctx, a, b);
    affine__poly s = affine__poly_add(ctx, pv_poly(&a), pv_poly(&b), sb);
    kl_poly r = {.m = s.m, .n = s.n};
    deps_union(ctx, &a, &b, &r);
    return r;
}

kl_poly affine__pv_mul(kl_affine_ctx *ctx, kl_poly a, kl_poly b)
{
    /* zero times an opaque value is zero, reading nothing */
    if ((a.opaque || b.opaque) && ((!a.opaque && !a.n) || (!b.opaque && !b.n))) return (kl_poly){0};
    affine__poly s;
    if (a.opaque || b.opaque || !affine__poly_mul(ctx, pv_poly(&a), pv_poly(&b), &s)) return affine__pv_join(ctx, a, b);
    kl_poly r = {.m = s.m, .n = s.n};
    deps_union(ctx, &a, &b, &r);
    return r;
}

const kl_poly *kl_affine_poly_add(kl_affine_ctx *ctx, const kl_poly *a, const kl_poly *b, int64_t sign)
{
    kl_poly *r = affine__alloc(ctx, sizeof *r);
    if (!r) return NULL;
    *r = affine__pv_add(ctx, *a, *b, sign);
    return ctx->oom ? NULL : r;
}

/* ---- the questions -------------------------------------------------------------------------- */

static bool builtin_base(const char *s)
{
    return !strcmp(s, "threadIdx") || !strcmp(s, "blockIdx") || !strcmp(s, "blockDim") || !strcmp(s, "gridDim");
}

/* Is the name n `name`, or one of its fields when name is a builtin alone ("threadIdx")? */
static bool name_is(const char *n, const char *name)
{
    if (!strcmp(n, name)) return true;
    size_t k = strlen(name);
    return builtin_base(name) && !strncmp(n, name, k) && n[k] == '.' && n[k + 1] && strchr("xyz", n[k + 1]) && !n[k + 2];
}

bool kl_poly_depends(const kl_poly *p, const char *name)
{
    for (unsigned i = 0; i < p->ndeps; i++)
        if (name_is(p->deps[i], name)) return true;
    return false;
}

bool kl_poly_mono_has(const kl_poly_mono *m, const char *name)
{
    for (unsigned f = 0; f < m->nf; f++)
        if (name_is(m->f[f], name)) return true;
    return false;
}

kl_stride kl_poly_stride(const kl_poly *p, const char *name, int64_t *k)
{
    if (!kl_poly_depends(p, name)) return KL_STRIDE_ABSENT;
    if (p->opaque) return KL_STRIDE_OPAQUE;
    int64_t c = 0;
    bool symbolic = false, found = false;
    for (unsigned i = 0; i < p->n; i++) {
        const kl_poly_mono *m = &p->m[i];
        unsigned cnt = 0;
        for (unsigned f = 0; f < m->nf; f++) cnt += !strcmp(m->f[f], name);
        if (!cnt) continue;
        if (cnt > 1) return KL_STRIDE_OPAQUE;
        found = true;
        if (m->nf == 1) c += m->coef;
        else symbolic = true;
    }
    if (!found) return KL_STRIDE_ABSENT;
    if (symbolic) return KL_STRIDE_SYMBOLIC;
    if (k) *k = c;
    if (c == 1) return KL_STRIDE_UNIT;
    return c == 0 ? KL_STRIDE_ABSENT : KL_STRIDE_CONST;
}

/* A CUDA builtin: threadIdx, blockIdx, blockDim or gridDim with .x, .y or .z. */
static bool is_builtin(const char *n)
{
    const char *dot = strchr(n, '.');
    char base[16];
    if (!dot || (size_t)(dot - n) >= sizeof base) return false;
    memcpy(base, n, (size_t)(dot - n));
    base[dot - n] = '\0';
    return builtin_base(base) && name_is(n, base);
}

bool kl_poly_grid_index(const kl_poly *p, kl_grid_index *g)
{
    memset(g, 0, sizeof *g);
    if (p->opaque || p->n != 2) return false;
    bool tx = false, bx = false;
    for (unsigned i = 0; i < 2; i++) {
        const kl_poly_mono *m = &p->m[i];
        if (m->nf == 1 && !strcmp(m->f[0], "threadIdx.x") && m->coef == 1) {
            tx = true;
        } else if (m->coef > 0 && (m->nf == 1 || m->nf == 2) && kl_poly_mono_has(m, "blockIdx.x")) {
            /* C*blockIdx.x, or blockIdx.x times blockDim.x or a name that is no builtin */
            const char *other = m->nf == 1 ? NULL : strcmp(m->f[0], "blockIdx.x") ? m->f[0] : m->f[1];
            if (other && strcmp(other, "blockDim.x") && is_builtin(other)) return false;
            bx = true;
            g->coef = m->coef;
            g->sym = other;
        }
    }
    return tx && bx;
}

int64_t kl_poly_grid_multiple(const kl_poly *p, const kl_grid_index *g)
{
    if (p->opaque || p->n != 1 || g->coef <= 0) return 0;
    const kl_poly_mono *m = &p->m[0];
    if (m->nf != (g->sym ? 2u : 1u) || !kl_poly_mono_has(m, "gridDim.x") || (g->sym && !kl_poly_mono_has(m, g->sym)))
        return 0;
    if (m->coef <= 0 || m->coef % g->coef) return 0;
    return m->coef / g->coef;
}

/* ======================================================================================
 * affine forms: constant + Σ coef(var) * var, each part a polynomial over invariant names
 * ====================================================================================== */

affine__form affine__form_bad(const char *why)
{
    affine__form f;
    memset(&f, 0, sizeof f);
    f.why = why;
    f.pv = affine__pv_opaque();
    return f;
}

affine__form affine__form_badf(kl_affine_ctx *ctx, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return affine__form_bad(affine__intern(ctx, buf));
}

affine__form affine__form_const(kl_affine_ctx *ctx, affine__poly c)
{
    affine__form f;
    memset(&f, 0, sizeof f);
    f.ok = true;
    f.cst = c;
    f.pv = affine__pv_of(ctx, c);
    return f;
}

affine__form affine__form_var(kl_affine_ctx *ctx, const char *var)
{
    affine__form f = affine__form_const(ctx, (affine__poly){0});
    const char **vars = affine__alloc(ctx, sizeof *vars);
    affine__poly *coefs = affine__alloc(ctx, sizeof *coefs);
    if (!vars || !coefs) return affine__form_bad("out of memory");
    vars[0] = affine__intern(ctx, var);
    coefs[0] = affine__poly_int(ctx, 1);
    f.vars = vars;
    f.coefs = coefs;
    f.nv = 1;
    f.pv = affine__pv_name(ctx, var);
    return f;
}

/* a + sb*b. The polynomial view is the caller's to set. */
affine__form affine__form_add(kl_affine_ctx *ctx, affine__form a, affine__form b, int64_t sb)
{
    if (!a.ok) return a;
    if (!b.ok) return b;
    affine__form f = affine__form_const(ctx, affine__poly_add(ctx, a.cst, b.cst, sb));
    unsigned cap = a.nv + b.nv;
    const char **vars = NULL;
    affine__poly *coefs = NULL;
    if (cap) {
        vars = affine__alloc(ctx, cap * sizeof *vars);
        coefs = affine__alloc(ctx, cap * sizeof *coefs);
        if (!vars || !coefs) return affine__form_bad("out of memory");
    }
    unsigned i = 0, k = 0;
    while (i < a.nv || k < b.nv) {
        int c = i >= a.nv ? 1 : k >= b.nv ? -1 : strcmp(a.vars[i], b.vars[k]);
        affine__poly p;
        const char *v;
        if (c < 0) {
            v = a.vars[i];
            p = a.coefs[i++];
        } else if (c > 0) {
            v = b.vars[k];
            p = affine__poly_add(ctx, (affine__poly){0}, b.coefs[k++], sb);
        } else {
            v = a.vars[i];
            p = affine__poly_add(ctx, a.coefs[i++], b.coefs[k++], sb);
        }
        if (p.n == 0) continue;
        vars[f.nv] = v;
        coefs[f.nv++] = p;
    }
    f.vars = vars;
    f.coefs = coefs;
    return f;
}

/* a * s. The polynomial view is the caller's to set. */
affine__form affine__form_scale(kl_affine_ctx *ctx, affine__form a, affine__poly s)
{
    if (!a.ok) return a;
    affine__poly c;
    if (!affine__poly_mul(ctx, a.cst, s, &c)) return affine__form_bad("coefficients too large to track");
    affine__form f = affine__form_const(ctx, c);
    const char **vars = NULL;
    affine__poly *coefs = NULL;
    if (a.nv) {
        vars = affine__alloc(ctx, a.nv * sizeof *vars);
        coefs = affine__alloc(ctx, a.nv * sizeof *coefs);
        if (!vars || !coefs) return affine__form_bad("out of memory");
    }
    for (unsigned i = 0; i < a.nv; i++) {
        affine__poly p;
        if (!affine__poly_mul(ctx, a.coefs[i], s, &p)) return affine__form_bad("coefficients too large to track");
        if (p.n == 0) continue;
        vars[f.nv] = a.vars[i];
        coefs[f.nv++] = p;
    }
    f.vars = vars;
    f.coefs = coefs;
    return f;
}

affine__poly affine__form_coef(affine__form f, const char *var)
{
    for (unsigned i = 0; i < f.nv; i++)
        if (!strcmp(f.vars[i], var)) return f.coefs[i];
    return (affine__poly){0};
}
