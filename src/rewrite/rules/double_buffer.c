/*
 * double-buffer — a one-stage shared-memory tile loop
 *
 *     for (k0 = 0; k0 < K; k0 += T) { loads of the tiles; __syncthreads(); compute; __syncthreads(); }
 *
 * ↔ two stages of every tile the loop loads (`As[2][…]`), so that the next tile is fetched while
 * the current one is used, with one barrier per tile:
 *  - via=regs: a prologue loads the first tile into stage 0 (the original loads in a block with
 *    `k0` bound to its start); in the loop the next tile's elements are loaded into registers
 *    (`kl_rN`) before the compute on stage kl_cur, stored into stage kl_cur ^ 1 after it, then
 *    one barrier. Stage kl_cur ^ 1 was last read before the previous barrier, so it is free.
 *  - via=cp.async (f32 tiles loaded from f32 pointers, guarded `c ? p[i] : 0` or plain): the
 *    loads become `__pipeline_memcpy_async` (zero-filled where the guard fails); in the loop:
 *    wait for this thread's copies, one barrier (the tile is complete and the other stage free),
 *    issue the next tile into the other stage, commit, compute.
 * The loads may be the kl_i / kl_j loops that register-tile writes: the registers get one
 * element per iteration.
 * Remove: the inverse on those forms, and on the expert form of tasks/sgemm (a stage index
 * `cur = kt & 1`, a prologue `load(0); store(0); __syncthreads();`, in the loop
 * `if (next) load(kt + 1); … if (next) store(cur ^ 1); __syncthreads();`): that one becomes
 * `load(kt); store(0); __syncthreads(); … __syncthreads();` with the stage dimension dropped;
 * and on the ring of tasks/hgemm (a prologue of STAGES - 1 cp.async loads, in the loop wait,
 * barrier, prefetch of tile kt + STAGES - 1 into stage (next % STAGES), commit, compute on stage
 * (kt % STAGES)): that one becomes `load(kt) into stage 0; commit; wait(0); __syncthreads();
 * compute; __syncthreads();` (see db_find_ring).
 */
#include "rewrite/rules/double_buffer.h"

static const char *const stage_values[] = {"2", NULL};
static const char *const via_values[] = {"regs", "cp.async", NULL};
static const kl_rule_param db_params[] = {{"via", via_values, "regs"}, {"stages", stage_values, "2"}};

void db_shared_arrays(const kl_rule_ctx *ctx, TSNode body, db_array *arrs, unsigned *n)
{
    TSNode st[MAXSTMT];
    unsigned k = tt_stmts(body, st, MAXSTMT);
    *n = 0;
    for (unsigned i = 0; i < k && i < MAXSTMT && *n < 8; i++) {
        if (!tt_is_shared_decl(ctx, st[i])) continue;
        TSNode d = tt_field(st[i], "declarator");
        if (!rt_is(d, "array_declarator")) continue;
        TSNode first = d;
        while (rt_is(tt_field(first, "declarator"), "array_declarator")) first = tt_field(first, "declarator");
        TSNode id = tt_field(first, "declarator");
        if (!rt_is(id, "identifier")) continue;
        db_array *a = &arrs[(*n)++];
        a->decl = st[i];
        a->ident = id;
        a->first = tt_field(first, "size");
        tt_copy_text(ctx, id, a->name, sizeof a->name);
        tt_copy_text(ctx, tt_field(st[i], "type"), a->elem, sizeof a->elem);
    }
}

int db_array_index(const db *d, const char *name)
{
    for (unsigned i = 0; i < d->narrs; i++)
        if (!strcmp(d->arrs[i].name, name)) return (int)i;
    return -1;
}

/* `for (int v = 0; v < CONST; v++)` with a single statement body: its variable and trip count. */
static bool const_loop(const kl_rule_ctx *ctx, TSNode scope, TSNode f, char *var, size_t size, long long *trip,
                       TSNode *body)
{
    if (!rt_is(f, "for_statement")) return false;
    TSNode init = tt_field(f, "initializer"), cond = tt_field(f, "condition"), upd = tt_field(f, "update");
    TSNode d = tt_field(init, "declarator");
    if (!rt_is(d, "init_declarator") || !rt_is(tt_field(d, "declarator"), "identifier")) return false;
    long long s;
    if (!rt_const_eval(ctx, scope, tt_field(d, "value"), &s) || s != 0) return false;
    tt_copy_text(ctx, tt_field(d, "declarator"), var, size);
    if (!rt_is(cond, "binary_expression") || !rt_text_is(ctx, tt_field(cond, "operator"), "<") ||
        !rt_text_is(ctx, tt_field(cond, "left"), var) || !rt_const_eval(ctx, scope, tt_field(cond, "right"), trip))
        return false;
    if (!rt_is(upd, "update_expression") || !tt_uses(ctx->text, ts_node_start_byte(upd), ts_node_end_byte(upd), var) ||
        !tt_uses(ctx->text, ts_node_start_byte(upd), ts_node_end_byte(upd), "+"))
        return false;
    TSNode b = tt_field(f, "body");
    if (rt_is(b, "compound_statement")) {
        TSNode one[2];
        if (tt_stmts(b, one, 2) != 1) return false;
        b = one[0];
    }
    *body = b;
    return true;
}

/* A load: `X[..] = v;` of a shared array X, possibly inside constant loops (at most two). */
static bool parse_load(db *d, TSNode s, db_load *L)
{
    const kl_rule_ctx *ctx = d->ctx;
    memset(L, 0, sizeof *L);
    L->stmt = s;
    TSNode b;
    while (rt_is(s, "for_statement")) {
        if (L->nvars >= 2) return false;
        if (!const_loop(ctx, d->f.def, s, L->vars[L->nvars], sizeof L->vars[0], &L->trips[L->nvars], &b)) return false;
        L->nvars++;
        s = b;
    }
    TSNode as = tt_child(s, 0);
    if (!rt_is(s, "expression_statement") || !rt_is(as, "assignment_expression") ||
        !rt_text_is(ctx, tt_field(as, "operator"), "="))
        return false;
    TSNode l = tt_field(as, "left");
    while (rt_is(l, "subscript_expression")) l = tt_field(l, "argument");
    if (!rt_is(l, "identifier") || !rt_is(tt_field(as, "left"), "subscript_expression")) return false;
    char name[64];
    tt_copy_text(ctx, l, name, sizeof name);
    L->arr = db_array_index(d, name);
    L->inner = s;
    L->assign = as;
    return L->arr >= 0;
}

/* Is the array `name` written in [s,e)? (an assignment or ++/-- whose target is an element) */
typedef struct write_find {
    const kl_rule_ctx *ctx;
    const char *name;
    bool hit;
} write_find;

static bool write_visit(TSNode n, void *user)
{
    write_find *w = user;
    TSNode target = {0};
    if (rt_is(n, "assignment_expression")) target = tt_field(n, "left");
    else if (rt_is(n, "update_expression")) target = tt_field(n, "argument");
    if (ts_node_is_null(target)) return true;
    while (rt_is(target, "subscript_expression") || rt_is(target, "parenthesized_expression"))
        target = rt_is(target, "subscript_expression") ? tt_field(target, "argument") : tt_child(target, 0);
    if (rt_is(target, "identifier") && rt_text_is(w->ctx, target, w->name)) w->hit = true;
    return true;
}

/* Analyse the one-stage form. 0: no tile loop; 1: applicable; -1: a tile loop, with why. */
int db_analyse(const kl_rule_ctx *ctx, const rt_func *f, db *d, char *why, size_t size)
{
    memset(d, 0, sizeof *d);
    d->ctx = ctx;
    d->f = *f;
    why[0] = '\0';
    if (!f->global || ts_node_is_null(f->body)) return 0;
    db_shared_arrays(ctx, f->body, d->arrs, &d->narrs);
    if (!d->narrs) return 0;
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    for (unsigned i = 0; i < n && i < MAXSTMT && ts_node_is_null(d->loop); i++) {
        if (!rt_is(st[i], "for_statement")) continue;
        TSNode b = tt_field(st[i], "body");
        TSNode bs[MAXSTMT];
        unsigned bn = rt_is(b, "compound_statement") ? tt_stmts(b, bs, MAXSTMT) : 0;
        for (unsigned k = 0; k < bn && k < MAXSTMT; k++)
            if (rt_is_syncthreads(ctx, bs[k])) d->loop = st[i];
    }
    if (ts_node_is_null(d->loop)) return 0;
    unsigned line = ts_node_start_point(d->loop).row + 1;
    if (tt_uses(ctx->text, ts_node_start_byte(d->loop), ts_node_end_byte(d->loop), "kl_cur")) return 0;
    d->body = tt_field(d->loop, "body");
    d->n = tt_stmts(d->body, d->st, MAXSTMT);
    if (d->n > MAXSTMT) {
        kl_snprintf(why, size, "the tile loop at line %u is too long", line);
        return -1;
    }
    /* the header: T v = 0; v < bound; v += step | v++ */
    TSNode init = tt_field(d->loop, "initializer"), cond = tt_field(d->loop, "condition"),
           upd = tt_field(d->loop, "update");
    TSNode id = tt_field(tt_field(init, "declarator"), "declarator");
    long long v0;
    if (!rt_is(init, "declaration") || !rt_is(id, "identifier") ||
        !rt_const_eval(ctx, f->def, tt_field(tt_field(init, "declarator"), "value"), &v0) || v0 != 0) {
        kl_snprintf(why, size, "the tile loop at line %u does not declare its variable starting at 0", line);
        return -1;
    }
    tt_copy_text(ctx, id, d->var, sizeof d->var);
    tt_copy_text(ctx, tt_field(init, "type"), d->vtype, sizeof d->vtype);
    tt_copy_text(ctx, tt_field(tt_field(init, "declarator"), "value"), d->start, sizeof d->start);
    if (!rt_is(cond, "binary_expression") || !rt_text_is(ctx, tt_field(cond, "operator"), "<") ||
        !rt_text_is(ctx, tt_field(cond, "left"), d->var)) {
        kl_snprintf(why, size, "the condition of the tile loop at line %u is not `%s < bound`", line, d->var);
        return -1;
    }
    d->cond = cond;
    long long sv;
    if (rt_is(upd, "update_expression") && tt_uses(ctx->text, ts_node_start_byte(upd), ts_node_end_byte(upd), "+")) {
        kl_snprintf(d->step, sizeof d->step, "1");
    } else if (rt_is(upd, "assignment_expression") && rt_text_is(ctx, tt_field(upd, "operator"), "+=") &&
               rt_text_is(ctx, tt_field(upd, "left"), d->var) && rt_const_eval(ctx, f->def, tt_field(upd, "right"), &sv) &&
               sv > 0) {
        tt_copy_text(ctx, tt_field(upd, "right"), d->step, sizeof d->step);
    } else {
        kl_snprintf(why, size, "the tile loop at line %u does not step by a compile-time constant", line);
        return -1;
    }
    /* the body: loads; __syncthreads(); compute; __syncthreads(); */
    unsigned i = 0;
    for (; i < d->n && !rt_is_syncthreads(ctx, d->st[i]); i++) {
        if (d->nloads >= 8 || !parse_load(d, d->st[i], &d->loads[d->nloads])) {
            kl_snprintf(why, size, "line %u of the tile loop is not a load of a shared array",
                        ts_node_start_point(d->st[i]).row + 1);
            return -1;
        }
        d->nloads++;
    }
    if (!d->nloads || i + 2 > d->n || !rt_is_syncthreads(ctx, d->st[d->n - 1])) {
        kl_snprintf(why, size, "the tile loop at line %u is not loads, __syncthreads(), compute, __syncthreads()", line);
        return -1;
    }
    d->isync1 = i;
    d->sync1 = d->st[i];
    d->sync2 = d->st[d->n - 1];
    uint32_t cs = ts_node_end_byte(d->sync1), ce = ts_node_start_byte(d->sync2);
    if (tt_uses(ctx->text, cs, ce, "__syncthreads") || tt_uses(ctx->text, cs, ce, "return") ||
        tt_uses(ctx->text, cs, ce, "break") || tt_uses(ctx->text, cs, ce, "continue")) {
        kl_snprintf(why, size, "the compute of the tile loop at line %u has a barrier, break, continue or return", line);
        return -1;
    }
    /* the loaded arrays: read only by the compute, nowhere else */
    for (unsigned k = 0; k < d->nloads; k++) {
        const db_array *a = &d->arrs[d->loads[k].arr];
        TSNode r = tt_field(d->loads[k].assign, "right");
        for (unsigned m = 0; m < d->narrs; m++)
            if (tt_uses(ctx->text, ts_node_start_byte(r), ts_node_end_byte(r), d->arrs[m].name)) {
                kl_snprintf(why, size, "the load at line %u reads the shared array %s",
                            ts_node_start_point(d->loads[k].stmt).row + 1, d->arrs[m].name);
                return -1;
            }
        write_find w = {ctx, a->name, false};
        for (unsigned m = i + 1; m + 1 < d->n; m++) kl_ast_walk(d->st[m], write_visit, &w);
        if (w.hit) {
            kl_snprintf(why, size, "the compute of the tile loop at line %u writes %s", line, a->name);
            return -1;
        }
        unsigned all = tt_count(ctx->text, ts_node_start_byte(f->body), ts_node_end_byte(f->body), a->name);
        unsigned in = tt_count(ctx->text, ts_node_start_byte(d->loop), ts_node_end_byte(d->loop), a->name);
        if (all != in + 1) {
            kl_snprintf(why, size, "%s is used outside the tile loop at line %u", a->name, line);
            return -1;
        }
        if (ts_node_is_null(a->first)) {
            kl_snprintf(why, size, "%s has no size", a->name);
            return -1;
        }
    }
    if (tt_uses(ctx->text, ts_node_start_byte(d->loop), ts_node_end_byte(d->loop), "kl_r0")) {
        kl_snprintf(why, size, "the tile loop at line %u already uses kl_r0", line);
        return -1;
    }
    /* the shared memory, twice */
    long long bytes = 0;
    for (unsigned k = 0; k < d->narrs; k++) {
        bool staged = false;
        for (unsigned m = 0; m < d->nloads; m++) staged |= d->loads[m].arr == (int)k;
        long long sz = rt_type_size(d->arrs[k].elem);
        if (!sz) sz = 8;
        TSNode dd = tt_field(d->arrs[k].decl, "declarator");
        while (rt_is(dd, "array_declarator")) {
            long long v;
            if (!rt_const_eval(ctx, f->def, tt_field(dd, "size"), &v)) {
                kl_snprintf(why, size, "the size of %s is not a compile-time constant", d->arrs[k].name);
                return -1;
            }
            sz *= v;
            dd = tt_field(dd, "declarator");
        }
        bytes += staged ? 2 * sz : sz;
    }
    if (bytes > 48 * 1024) {
        kl_snprintf(why, size, "two stages need %lld bytes of shared memory (at most 49152 static)", bytes);
        return -1;
    }
    return 1;
}

/* `const int C = <expr>;` : its name into C. */
bool db_decl_named(const kl_rule_ctx *ctx, TSNode s, char *name, size_t size, TSNode *value)
{
    TSNode d = tt_field(s, "declarator");
    if (!rt_is(s, "declaration") || !rt_is(d, "init_declarator") || !rt_is(tt_field(d, "declarator"), "identifier"))
        return false;
    tt_copy_text(ctx, tt_field(d, "declarator"), name, size);
    *value = tt_field(d, "value");
    return true;
}


bool db_find_present(const kl_rule_ctx *ctx, const rt_func *f, db_present *p)
{
    memset(p, 0, sizeof *p);
    if (!f->global || ts_node_is_null(f->body)) return false;
    db_shared_arrays(ctx, f->body, p->arrs, &p->narrs);
    long long two;
    for (unsigned k = 0; k < p->narrs; k++)
        p->staged[k] = rt_const_eval(ctx, f->def, p->arrs[k].first, &two) && two == 2 &&
                       rt_is(tt_field(p->arrs[k].decl, "declarator"), "array_declarator") &&
                       !ts_node_eq(tt_field(p->arrs[k].decl, "declarator"), tt_parent(p->arrs[k].ident));
    TSNode st[MAXSTMT];
    unsigned n = tt_stmts(f->body, st, MAXSTMT);
    if (db_find_ring(ctx, f, st, n, p)) return true;
    p->n = 0;
    for (unsigned i = 0; i < n && i < MAXSTMT; i++) {
        if (!rt_is(st[i], "for_statement")) continue;
        TSNode body = tt_field(st[i], "body");
        if (!rt_is(body, "compound_statement")) continue;
        p->n = tt_stmts(body, p->st, MAXSTMT);
        if (p->n < 3 || p->n > MAXSTMT) continue;
        TSNode id = tt_field(tt_field(tt_field(st[i], "initializer"), "declarator"), "declarator");
        if (!rt_is(id, "identifier")) continue;
        tt_copy_text(ctx, id, p->var, sizeof p->var);
        TSNode v;
        p->loop = st[i];
        p->body = body;
        if (db_decl_named(ctx, p->st[0], p->cur, sizeof p->cur, &v) && !strcmp(p->cur, "kl_cur")) {
            /* ours: the prologue block and its barrier/commit before the loop */
            if (i < 2 || !rt_is(st[i - 2], "compound_statement")) continue;
            p->pro = st[i - 2];
            p->prosync = st[i - 1];
            p->curdecl = p->st[0];
            p->form = tt_uses(ctx->text, ts_node_start_byte(body), ts_node_end_byte(body), "__pipeline_commit") ? DB_CP
                                                                                                              : DB_REGS;
            return true;
        }
        /* the expert's: `const int cur = <var> & 1;` somewhere in the body */
        for (unsigned k = 0; k < p->n; k++) {
            TSNode val;
            if (!db_decl_named(ctx, p->st[k], p->cur, sizeof p->cur, &val)) continue;
            char want[96];
            kl_snprintf(want, sizeof want, "%s & 1", p->var);
            char *vt = rt_text(ctx, val);
            bool is = vt && tt_count(vt, 0, (uint32_t)strlen(vt), want) == 1 && rt_is(val, "binary_expression");
            free(vt);
            if (!is) continue;
            p->curdecl = p->st[k];
            kl_snprintf(p->nextx, sizeof p->nextx, "%s ^ 1", p->cur);
            p->form = DB_EXPERT;
            return true;
        }
        /* the stage written inline: staged arrays at `[<var> & 1]`, the store into `(<var> + 1) & 1` */
        char now[96], next[96];
        kl_snprintf(now, sizeof now, "[%s & 1]", p->var);
        kl_snprintf(next, sizeof next, "(%s + 1) & 1", p->var);
        uint32_t b0 = ts_node_start_byte(body), b1 = ts_node_end_byte(body);
        bool staged_now = false;
        for (unsigned k = 0; k < p->narrs; k++) {
            char sub[160];
            kl_snprintf(sub, sizeof sub, "%s%s", p->arrs[k].name, now);
            staged_now |= p->staged[k] && tt_count(ctx->text, b0, b1, sub) > 0;
        }
        if (staged_now && tt_count(ctx->text, b0, b1, next) > 0) {
            kl_snprintf(p->cur, sizeof p->cur, "%s & 1", p->var);
            kl_snprintf(p->nextx, sizeof p->nextx, "%s", next);
            p->curdecl = (TSNode){0};
            p->form = DB_EXPERT;
            return true;
        }
    }
    return false;
}

/* The range of a statement with the comment lines right above it (and its whole lines). */
void db_stmt_with_comments(const kl_rule_ctx *ctx, TSNode s, uint32_t *start, uint32_t *end)
{
    rt_stmt_range(ctx, s, NULL, start, end);
    TSNode prev = ts_node_prev_named_sibling(s);
    while (rt_is(prev, "comment") && rt_line_blank_before(ctx, ts_node_start_byte(prev)) &&
           rt_line_end(ctx, ts_node_end_byte(prev)) == *start && *start != ts_node_start_byte(s)) {
        *start = rt_line_start(ctx, ts_node_start_byte(prev));
        prev = ts_node_prev_named_sibling(prev);
    }
}

/* Drop the stage dimension: the `[2]` of each staged array's declaration, and a whole-line
 * `// double-buffer …` comment among the comment lines right above the first of them. */
kl_status db_drop_stage_decls(const kl_rule_ctx *ctx, const db_present *p, kl_edits *out, kl_error *err)
{
    unsigned dropped = 0;
    for (unsigned k = 0; k < p->narrs; k++) {
        if (!p->staged[k]) continue;
        for (TSNode c = ts_node_prev_named_sibling(p->arrs[k].decl); !dropped && rt_is(c, "comment");
             c = ts_node_prev_named_sibling(c)) {
            if (!rt_line_blank_before(ctx, ts_node_start_byte(c)) ||
                !kl_str_starts(ctx->text + ts_node_start_byte(c), "// double-buffer"))
                continue;
            DB_TRY(kl_edits_add(out, rt_line_start(ctx, ts_node_start_byte(c)), rt_line_end(ctx, ts_node_end_byte(c)), ""));
        }
        TSNode first = tt_parent(p->arrs[k].ident);
        DB_TRY(kl_edits_add(out, ts_node_end_byte(p->arrs[k].ident), ts_node_end_byte(first), ""));
        dropped++;
    }
    if (!dropped) return kl_rule_not_applicable(err, "no shared array with two stages in the kernel");
    return KL_OK;
}


/* ---- the rule -------------------------------------------------------------------------------------- */

static kl_status db_find(const kl_rule_ctx *ctx, kl_sites *out, kl_error *err)
{
    rt_func fs[64];
    unsigned nf = rt_functions(ctx, fs, 64);
    for (unsigned i = 0; i < nf && i < 64; i++) {
        db *d = malloc(sizeof *d);
        if (!d) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        char why[256], id[256];
        kl_status st = KL_OK;
        int r = db_analyse(ctx, &fs[i], d, why, sizeof why);
        db_present *p = malloc(sizeof *p);
        if (!p) {
            free(d);
            return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        }
        bool present = db_find_present(ctx, &fs[i], p);
        /* a loop already in two stages is only a site to remove */
        if (r != 0 && present && ts_node_eq(p->loop, d->loop)) r = 0;
        if (r != 0) {
            kl_site_id(id, sizeof id, fs[i].name, d->loop, NULL);
            json_t *feat = json_object();
            if (r > 0) {
                json_t *arr = json_array();
                for (unsigned k = 0; k < d->nloads; k++) json_array_append_new(arr, json_string(d->arrs[d->loads[k].arr].name));
                json_object_set_new(feat, "tiles", arr);
                json_object_set_new(feat, "loads", json_integer(d->nloads));
                json_object_set_new(feat, "loop_var", json_string(d->var));
                bool cp = true;
                char w2[256];
                for (unsigned k = 0; k < d->nloads && cp; k++) cp = db_cp_async_ok(d, &d->loads[k], w2, sizeof w2);
                json_object_set_new(feat, "cp_async", json_boolean(cp));
            } else {
                json_object_set_new(feat, "why_not", json_string(why));
            }
            st = kl_sites_add(out, id, KL_SITE_APPLICABLE, kl_node_span(d->loop), fs[i].name, feat, NULL,
                              r > 0 ? "one-stage tile loop: prefetch the next tile while computing on this one"
                                    : "one-stage tile loop (two stages cannot be applied as is)");
        }
        if (st == KL_OK && present) {
            kl_site_id(id, sizeof id, fs[i].name, p->loop, NULL);
            const char *via = p->form == DB_CP || p->form == DB_RING ? "cp.async" : "regs";
            const char *form = p->form == DB_EXPERT ? "expert" : p->form == DB_RING ? "ring" : "ours";
            json_t *feat = json_pack("{s:s, s:s, s:s}", "form", form, "stage_index", p->form == DB_RING ? p->depth : p->cur,
                                     "via", via);
            if (p->why[0]) json_object_set_new(feat, "why_not", json_string(p->why));
            json_t *params = json_pack("{s:s, s:s}", "via", via, "stages", "2");
            st = kl_sites_add(out, id, KL_SITE_PRESENT, kl_node_span(p->loop), fs[i].name, feat, params,
                              "two shared stages: the next tile is fetched while this one is used");
        }
        free(p);
        free(d);
        if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    }
    return KL_OK;
}

static const rt_func *site_function(const kl_rule_ctx *ctx, const kl_site *site, rt_func *fs)
{
    unsigned nf = rt_functions(ctx, fs, 64);
    return rt_function_named(fs, nf < 64 ? nf : 64, site->kernel);
}

static kl_status db_apply(const kl_rule_ctx *ctx, const kl_site *site, const json_t *params, kl_edits *out,
                          kl_error *err)
{
    const char *via = "regs";
    kl_rule_param_str(&kl_rule_double_buffer, params, "via", &via);
    bool cp = !strcmp(via, "cp.async");
    rt_func fs[64];
    const rt_func *f = site_function(ctx, site, fs);
    if (!f) return kl_rule_not_applicable(err, "no kernel %s", site->kernel);
    db *d = malloc(sizeof *d);
    if (!d) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    char why[256];
    kl_status st;
    if (db_analyse(ctx, f, d, why, sizeof why) != 1) {
        st = kl_rule_not_applicable(err, "%s", why[0] ? why : "no one-stage tile loop");
        goto cleanup;
    }
    for (unsigned k = 0; cp && k < d->nloads; k++)
        if (!db_cp_async_ok(d, &d->loads[k], why, sizeof why)) {
            st = kl_rule_not_applicable(err, "%s", why);
            goto cleanup;
        }
    st = db_apply_edits(d, cp, out, err);
cleanup:
    free(d);
    return st;
}

static kl_status db_remove(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    rt_func fs[64];
    const rt_func *f = site_function(ctx, site, fs);
    db_present *p = malloc(sizeof *p);
    if (!p) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    kl_status st;
    if (!f || !db_find_present(ctx, f, p)) st = kl_rule_not_applicable(err, "no two-stage tile loop in %s", site->kernel);
    else if (p->form == DB_EXPERT) st = db_remove_staged(ctx, f, p, out, err);
    else if (p->form == DB_RING && p->why[0]) st = kl_rule_not_applicable(err, "%s", p->why);
    else if (p->form == DB_RING) st = db_remove_ring(ctx, f, p, out, err);
    else st = db_remove_ours(ctx, f, p, out, err);
    free(p);
    return st;
}

const kl_rule kl_rule_double_buffer = {
    NAME,
    "two shared-memory stages: fetch the next tile (into registers or with cp.async) while computing on this one",
    db_params,
    2,
    db_find,
    db_remove,
    db_apply,
};

