/* specialize's remove direction (specialize.c has the rule, its sites and apply): the dispatch
 * statement becomes its general branch, and every file-level item that only the removed path used
 * goes, with the comment lines above it and the header's entry describing it (specialize.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "rewrite/rules/rules.h"
#include "rewrite/rules/rules_tree.h"
#include "rewrite/rules/specialize.h"
#include "syntax/affine.h"
#include "util/util.h"

/* ---- remove: the host's edits ------------------------------------------------------------------------ */

typedef struct plan {
    kl_edits *ed;
    ranges removed;      /* text that goes */
    ranges kept;         /* text inside `removed` that stays (the general branch) */
    ranges deleted;      /* file-level deletions (whole lines), merged before they become edits */
} plan;

/* Names declared at the top level of a block (or by one statement). */
static void declared_names(const kl_rule_ctx *ctx, TSNode n, char names[][64], unsigned *nn, unsigned max)
{
    uint32_t c = rt_is(n, "compound_statement") || rt_is(n, "case_statement") ? ts_node_named_child_count(n) : 1;
    for (uint32_t i = 0; i < c; i++) {
        TSNode s = rt_is(n, "compound_statement") || rt_is(n, "case_statement") ? ts_node_named_child(n, i) : n;
        if (!rt_is(s, "declaration")) continue;
        TSNode ds[16];
        unsigned k = rt_declarators(s, ds, 16);
        for (unsigned j = 0; j < k && *nn < max; j++) {
            TSNode d = ds[j];
            if (rt_is(d, "function_declarator")) d = rt_field(d, "declarator");
            TSNode id = kl_ast_declarator_name(d);
            if (ts_node_is_null(id)) continue;
            uint32_t a = ts_node_start_byte(id), b = ts_node_end_byte(id);
            size_t L = b - a < 63 ? b - a : 63;
            memcpy(names[*nn], ctx->text + a, L);
            names[*nn][L] = '\0';
            (*nn)++;
        }
    }
}

/* The kept range of the general branch and what to drop at its end: [*a, *b). */
static bool general_range(const kl_rule_ctx *ctx, const dispatch *d, bool drop_return, uint32_t *a, uint32_t *b,
                          TSNode *scope)
{
    TSNode body = d->br[d->general].body;
    *scope = body;
    if (rt_is(body, "case_statement")) {
        /* the statements after `default:`; a trailing break goes; a lone block is unwrapped */
        uint32_t c = ts_node_named_child_count(body);
        TSNode first = {0}, last = {0};
        unsigned nst = 0;
        for (uint32_t i = 0; i < c; i++) {
            TSNode k = ts_node_named_child(body, i);
            if (ts_node_is_null(first)) first = k;
            last = k;
            if (!rt_is(k, "comment")) nst++;
        }
        if (rt_is(last, "break_statement")) {
            TSNode p = ts_node_prev_named_sibling(last);
            nst--;
            last = p;
        }
        if (ts_node_is_null(first) || ts_node_is_null(last) || nst == 0) return false;
        if (nst == 1 && rt_is(first, "compound_statement") && ts_node_eq(first, last)) {
            body = first;
        } else {
            *a = ts_node_start_byte(first);
            *b = ts_node_end_byte(last);
            return true;
        }
        *scope = body;
    }
    if (rt_is(body, "compound_statement")) {
        uint32_t c = ts_node_named_child_count(body);
        if (c == 0) return false;
        TSNode first = ts_node_named_child(body, 0), last = ts_node_named_child(body, c - 1);
        TSNode ls = rt_last_stmt(body);
        if (drop_return && rt_is(ls, "return_statement") && ts_node_named_child_count(ls) == 0) {
            TSNode p = ts_node_prev_named_sibling(ls);
            if (ts_node_is_null(p)) return false;
            last = p;
        } else if (rt_is(ls, "break_statement")) {
            TSNode p = ts_node_prev_named_sibling(ls);
            if (ts_node_is_null(p)) return false;
            last = p;
        }
        *a = ts_node_start_byte(first);
        *b = ts_node_end_byte(last);
        return true;
    }
    *a = ts_node_start_byte(body);
    *b = ts_node_end_byte(body);
    return true;
}

typedef struct break_find {
    bool found;
} break_find;

static bool break_visit(TSNode n, void *user)
{
    break_find *bf = user;
    if (rt_is(n, "for_statement") || rt_is(n, "while_statement") || rt_is(n, "do_statement") ||
        rt_is(n, "switch_statement") || rt_is(n, "lambda_expression"))
        return false;
    if (rt_is(n, "break_statement") || rt_is(n, "continue_statement")) bf->found = true;
    return !bf->found;
}

static kl_status host_edits(const kl_rule_ctx *ctx, const dispatch *d, plan *p, kl_error *err)
{
    unsigned line = ts_node_start_point(d->stmt).row + 1;
    uint32_t sa, se;
    if (!specialize__whole_lines(ctx, ts_node_start_byte(d->stmt), ts_node_end_byte(d->stmt), &sa, &se))
        return kl_rule_not_applicable(err, "the dispatch at line %u shares its lines with other code", line);
    TSNode hbody = d->host->body;
    TSNode after = ts_node_next_named_sibling(d->stmt);
    while (rt_is(after, "comment") && ts_node_start_point(after).row == ts_node_end_point(d->stmt).row)
        after = ts_node_next_named_sibling(after);
    bool last_in_host = ts_node_eq(ts_node_parent(d->stmt), hbody) && ts_node_is_null(after);
    char ind[64];
    kl_rules_indent(ctx, ts_node_start_byte(d->stmt), ind, sizeof ind);

    if (d->form == FORM_RETURN && d->general == 1) {
        /* the specialized path returns early: it goes, with its comment lines */
        uint32_t ca = specialize__comments_above(ctx, sa);
        if (ca < ts_node_start_byte(hbody)) ca = sa;
        if (kl_edits_add(p->ed, ca, se, "") != KL_OK) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        specialize__ranges_add(&p->removed, ca, se);
        return KL_OK;
    }
    bool drop_return = d->form == FORM_RETURN || last_in_host;
    uint32_t ga, gb;
    TSNode scope;
    if (!general_range(ctx, d, drop_return, &ga, &gb, &scope))
        return kl_rule_not_applicable(err, "the general branch at line %u is empty", line);
    /* a break or continue of the switch left in the general path would change meaning */
    break_find bf = {false};
    if (d->form == FORM_SWITCH) {
        TSNode body = d->br[d->general].body;
        uint32_t c = ts_node_named_child_count(body);
        for (uint32_t i = 0; i < c; i++) {
            TSNode k = ts_node_named_child(body, i);
            if (ts_node_start_byte(k) >= ga && ts_node_end_byte(k) <= gb) kl_ast_walk(k, break_visit, &bf);
            else if (rt_is(k, "compound_statement")) {
                uint32_t cc = ts_node_named_child_count(k);
                for (uint32_t j = 0; j < cc; j++) {
                    TSNode q = ts_node_named_child(k, j);
                    if (ts_node_start_byte(q) >= ga && ts_node_end_byte(q) <= gb) kl_ast_walk(q, break_visit, &bf);
                }
            }
        }
        if (bf.found)
            return kl_rule_not_applicable(err, "the default branch at line %u breaks out of the switch early", line);
    }
    /* unwrap the block unless one of its names is declared beside it */
    char mine[32][64], others[64][64];
    unsigned nm = 0, no = 0;
    declared_names(ctx, scope, mine, &nm, 32);
    uint32_t hc = ts_node_named_child_count(hbody);
    for (uint32_t i = 0; i < hc; i++) {
        TSNode s = ts_node_named_child(hbody, i);
        if (!ts_node_eq(s, d->stmt)) declared_names(ctx, s, others, &no, 64);
    }
    bool clash = false;
    for (unsigned i = 0; i < nm; i++)
        for (unsigned k = 0; k < no; k++)
            if (!strcmp(mine[i], others[k])) clash = true;
    kl_strbuf sb = KL_STRBUF_INIT;
    if (clash) {
        char inner[80];
        kl_snprintf(inner, sizeof inner, "%s    ", ind);
        kl_strbuf_addf(&sb, "%s{\n", ind);
        specialize__emit_block(ctx, ga, gb, inner, &sb);
        kl_strbuf_addf(&sb, "%s}\n", ind);
    } else {
        specialize__emit_block(ctx, ga, gb, ind, &sb);
    }
    kl_status st = sb.failed ? KL_ERR_NOMEM : kl_edits_add(p->ed, sa, se, kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
    if (st != KL_OK) return kl_error_set(err, st, "out of memory");
    specialize__ranges_add(&p->removed, sa, se);
    specialize__ranges_add(&p->kept, ga, gb);
    if (d->form == FORM_RETURN) {
        /* the rest of the host function was the other branch */
        uint32_t ra = se, rb = rt_line_start(ctx, ts_node_end_byte(hbody) - 1);
        for (TSNode r = after; !ts_node_is_null(r); r = ts_node_next_named_sibling(r))
            if (ts_node_start_byte(r) < ra || ts_node_end_byte(r) > rb)
                return kl_rule_not_applicable(err, "the statements after the dispatch at line %u do not stand on lines "
                                              "of their own before the function's closing brace", line);
        if (rb > ra) {
            if (kl_edits_add(p->ed, ra, rb, "") != KL_OK) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            specialize__ranges_add(&p->removed, ra, rb);
        }
    }
    return KL_OK;
}

/* ---- remove: what only the removed path used ---------------------------------------------------------- */

typedef struct item {
    uint32_t start, end;     /* the node (template_declaration included) */
    char names[8][64];
    unsigned nnames;
    bool root, is_assert, dead;
} item;

static void item_add_name(item *it, const kl_rule_ctx *ctx, TSNode id)
{
    if (ts_node_is_null(id) || it->nnames == 8) {
        it->root = true;
        return;
    }
    uint32_t a = ts_node_start_byte(id), b = ts_node_end_byte(id);
    size_t L = b - a < 63 ? b - a : 63;
    memcpy(it->names[it->nnames], ctx->text + a, L);
    it->names[it->nnames][L] = '\0';
    it->nnames++;
}

static void item_of(const kl_rule_ctx *ctx, TSNode n, item *it)
{
    memset(it, 0, sizeof *it);
    it->start = ts_node_start_byte(n);
    it->end = ts_node_end_byte(n);
    TSNode in = n;
    if (rt_is(n, "template_declaration")) {
        uint32_t c = ts_node_named_child_count(n);
        in = (TSNode){0};
        for (uint32_t i = 0; i < c; i++) {
            TSNode k = ts_node_named_child(n, i);
            if (rt_is(k, "function_definition") || rt_is(k, "declaration") || rt_is(k, "struct_specifier") ||
                rt_is(k, "class_specifier"))
                in = k;
        }
        if (ts_node_is_null(in)) {
            it->root = true;
            return;
        }
    }
    const char *t = ts_node_type(in);
    if (!strcmp(t, "static_assert_declaration")) {
        it->is_assert = true;
    } else if (!strcmp(t, "function_definition")) {
        TSNode d = rt_field(in, "declarator");
        while (!ts_node_is_null(d) && !rt_is(d, "function_declarator")) d = rt_field(d, "declarator");
        TSNode nm = rt_field(d, "declarator");
        item_add_name(it, ctx, rt_is(nm, "identifier") ? nm : (TSNode){0});
    } else if (!strcmp(t, "declaration") || !strcmp(t, "type_definition")) {
        TSNode ds[16];
        unsigned k = rt_declarators(in, ds, 16);
        for (unsigned j = 0; j < k; j++) {
            TSNode d = ds[j];
            if (rt_is(d, "function_declarator")) d = rt_field(d, "declarator");
            item_add_name(it, ctx, kl_ast_declarator_name(d));
        }
        if (it->nnames == 0) it->root = true;
    } else if (!strcmp(t, "struct_specifier") || !strcmp(t, "class_specifier") || !strcmp(t, "preproc_def") ||
               !strcmp(t, "preproc_function_def")) {
        item_add_name(it, ctx, rt_field(in, "name"));
    } else {
        it->root = true;
    }
    for (unsigned i = 0; i < it->nnames; i++)
        if (!strcmp(it->names[i], "launch")) it->root = true;
}

typedef struct deadctx {
    const kl_rule_ctx *ctx;
    const toks *tk;
    item *items;
    unsigned n;
    const plan *p;
} deadctx;

static bool tok_live(const deadctx *dc, const tok *t)
{
    if (specialize__ranges_has(&dc->p->removed, t->start) && !specialize__ranges_has(&dc->p->kept, t->start)) return false;
    for (unsigned i = 0; i < dc->n; i++) {
        const item *it = &dc->items[i];
        if (t->start >= it->start && t->start < it->end && (it->dead || it->is_assert)) return false;
    }
    return true;
}

/* Uses of `name` outside item `self`: in the original (*orig) and what stays (*live). */
static void count_uses(const deadctx *dc, const item *self, const char *name, unsigned *orig, unsigned *live)
{
    *orig = *live = 0;
    for (unsigned i = 0; i < dc->tk->n; i++) {
        const tok *t = &dc->tk->items[i];
        if (t->start >= self->start && t->start < self->end) continue;
        if (!specialize__tok_is(dc->ctx->text, t, name)) continue;
        bool in_assert = false;
        for (unsigned k = 0; k < dc->n; k++)
            if (dc->items[k].is_assert && t->start >= dc->items[k].start && t->start < dc->items[k].end)
                in_assert = true;
        if (in_assert) continue;
        (*orig)++;
        if (tok_live(dc, t)) (*live)++;
    }
}

static void find_dead(deadctx *dc)
{
    for (bool changed = true; changed;) {
        changed = false;
        for (unsigned i = 0; i < dc->n; i++) {
            item *it = &dc->items[i];
            if (it->root || it->dead || it->is_assert || it->nnames == 0) continue;
            bool dead = true;
            for (unsigned k = 0; k < it->nnames && dead; k++) {
                unsigned o, l;
                count_uses(dc, it, it->names[k], &o, &l);
                if (o == 0 || l > 0) dead = false;
            }
            if (dead) it->dead = changed = true;
        }
    }
    /* a static_assert goes when a file-level name it mentions went: it spoke of what went, and kept it would
     * name what is no longer there (the blur expert's `MAX_CONST_K / 2 < HALO` once const-mem has taken
     * c_filt, MAX_CONST_K's other use, and register-tile the `OUT_X == 4` conjunct) */
    for (unsigned i = 0; i < dc->n; i++) {
        item *it = &dc->items[i];
        if (!it->is_assert) continue;
        unsigned named = 0, gone = 0;
        for (unsigned t = 0; t < dc->tk->n; t++) {
            const tok *tk = &dc->tk->items[t];
            if (tk->start < it->start || tk->start >= it->end) continue;
            for (unsigned k = 0; k < dc->n; k++)
                for (unsigned m = 0; m < dc->items[k].nnames; m++)
                    if (specialize__tok_is(dc->ctx->text, tk, dc->items[k].names[m])) {
                        named++;
                        gone += dc->items[k].dead;
                    }
        }
        if (named && gone) it->dead = true;
    }
}

/* Locals of the host function that only the removed path used. */
static kl_status dead_locals(const kl_rule_ctx *ctx, const toks *tk, const dispatch *d, plan *p, kl_error *err)
{
    TSNode body = d->host->body;
    for (bool changed = true; changed;) {
        changed = false;
        uint32_t c = ts_node_named_child_count(body);
        for (uint32_t i = 0; i < c; i++) {
            TSNode s = ts_node_named_child(body, i);
            uint32_t a = ts_node_start_byte(s), b = ts_node_end_byte(s);
            if (!rt_is(s, "declaration") || specialize__ranges_has(&p->removed, a)) continue;
            char names[8][64];
            unsigned nn = 0;
            declared_names(ctx, s, names, &nn, 8);
            if (nn == 0) continue;
            /* only pure initializers: no calls but dim3/min/max */
            char *txt = rt_text(ctx, s);
            bool pure = txt != NULL;
            for (const char *q = txt; pure && q && (q = strchr(q, '(')); q++) {
                const char *e = q;
                while (e > txt && e[-1] == ' ') e--;
                const char *w = e;
                while (w > txt && specialize__is_id(w[-1])) w--;
                if (w < e && strncmp(w, "dim3", 4) && strncmp(w, "min", 3) && strncmp(w, "max", 3) &&
                    strncmp(w, "sizeof", 6))
                    pure = false;
            }
            free(txt);
            if (!pure) continue;
            bool used = false;
            for (unsigned t = 0; t < tk->n && !used; t++) {
                const tok *tt = &tk->items[t];
                if (tt->start < ts_node_start_byte(body) || tt->start >= ts_node_end_byte(body)) continue;
                if (tt->start >= a && tt->start < b) continue;
                if (specialize__ranges_has(&p->removed, tt->start) && !specialize__ranges_has(&p->kept, tt->start)) continue;
                for (unsigned k = 0; k < nn; k++)
                    if (specialize__tok_is(ctx->text, tt, names[k])) used = true;
            }
            if (used) continue;
            uint32_t la, lb;
            if (!specialize__whole_lines(ctx, a, b, &la, &lb)) continue;
            if (kl_edits_add(p->ed, la, lb, "") != KL_OK) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            specialize__ranges_add(&p->removed, la, lb);
            changed = true;
        }
    }
    return KL_OK;
}

/* The marker `// tag` (followed by a non-word character) in code lines of [a, b)? */
static bool has_marker(const kl_rule_ctx *ctx, uint32_t a, uint32_t b, const char *tag, const ranges *skip, bool want_in)
{
    size_t tl = strlen(tag);
    for (uint32_t i = a; i + 3 + tl <= b; i++) {
        if (ctx->text[i] != '/' || ctx->text[i + 1] != '/' || ctx->text[i + 2] != ' ') continue;
        if (memcmp(ctx->text + i + 3, tag, tl) || specialize__is_id(ctx->text[i + 3 + tl]) || ctx->text[i + 3 + tl] == '-')
            continue;
        if (specialize__ranges_has(skip, i) == want_in) return true;
    }
    return false;
}

static bool mentions_word(const char *s, size_t n, const char *w)
{
    size_t wl = strlen(w);
    for (size_t i = 0; i + wl <= n; i++)
        if (!memcmp(s + i, w, wl) && (i == 0 || !specialize__is_id(s[i - 1])) && (i + wl == n || !specialize__is_id(s[i + wl]))) return true;
    return false;
}

/* The header's list of optimizations: drop the entries of the removed path (their marker
 * comment only in what goes, or words of a specialization) and the paragraphs after the list
 * that name what was deleted. */
static kl_status header_edits(const kl_rule_ctx *ctx, const deadctx *dc, plan *p, kl_error *err)
{
    /* the header: the comment lines from the file's start */
    uint32_t hend = 0;
    while (hend < ctx->len && specialize__line_comment(ctx, hend)) hend = rt_line_end(ctx, hend);
    if (hend == 0) return KL_OK;
    ranges gone = p->removed;
    for (unsigned i = 0; i < dc->n; i++)
        if (dc->items[i].dead) specialize__ranges_add(&gone, dc->items[i].start, dc->items[i].end);
    bool in_list = false;
    uint32_t ls = 0;
    while (ls < hend) {
        uint32_t le = rt_line_end(ctx, ls);
        const char *t = ctx->text + ls;
        if (le - ls > 6 && !memcmp(t, "//  - ", 6)) {
            in_list = true;
            uint32_t ee = le;
            while (ee < hend && ee + 6 < ctx->len && !memcmp(ctx->text + ee, "//    ", 6)) ee = rt_line_end(ctx, ee);
            /* the entry's tag: "smem-tile" of "- smem-tile: …" */
            const char *s = t + 6, *nl = memchr(s, '\n', le - ls - 6);
            const char *colon = memchr(s, ':', nl ? (size_t)(nl - s) : le - ls - 6);
            bool drop = false;
            if (colon && colon - s < 40 && !memchr(s, ',', (size_t)(colon - s))) {
                char tag[48];
                kl_snprintf(tag, sizeof tag, "%.*s", (int)(colon - s), s);
                drop = has_marker(ctx, hend, (uint32_t)ctx->len, tag, &gone, true) &&
                       !has_marker(ctx, hend, (uint32_t)ctx->len, tag, &gone, false);
                /* a transform of the catalog: only when none of its sites is left */
                const kl_rule *r = drop ? kl_rule_find(tag) : NULL;
                if (r && r != &kl_rule_specialize) {
                    kl_sites rs = {0};
                    kl_error e2 = {0};
                    if (r->find(ctx, &rs, &e2) != KL_OK) drop = false;
                    for (unsigned q = 0; q < rs.count && drop; q++)
                        if (rs.items[q].dir == KL_SITE_PRESENT && !specialize__ranges_has(&gone, rs.items[q].span.start))
                            drop = false;
                    kl_sites_release(&rs);
                }
            } else {
                static const char *const words[] = {"template parameter", "compile-time size", "in registers",
                                                    "into registers", "register-resident", "specializ"};
                char *entry = kl_strndup(t, ee - ls);
                for (size_t w = 0; entry && w < sizeof words / sizeof words[0]; w++)
                    if (strstr(entry, words[w])) drop = true;
                free(entry);
            }
            if (drop) {
                if (kl_edits_add(p->ed, ls, ee, "") != KL_OK) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            }
            ls = ee;
            continue;
        }
        if (in_list && le - ls > 3 && t[2] == ' ' && t[3] != ' ') {
            /* a paragraph after the list: up to a bare "//" line or the header's end */
            uint32_t ee = le;
            while (ee < hend && ee + 6 <= ctx->len && !(ctx->text[ee + 2] == '\n' || ctx->text[ee + 2] == '\r') &&
                   memcmp(ctx->text + ee, "//  - ", 6))
                ee = rt_line_end(ctx, ee);
            bool names_dead = false;
            for (unsigned i = 0; i < dc->n && !names_dead; i++)
                for (unsigned k = 0; k < dc->items[i].nnames && dc->items[i].dead; k++)
                    if (mentions_word(ctx->text + ls, ee - ls, dc->items[i].names[k])) names_dead = true;
            if (names_dead && kl_edits_add(p->ed, ls, ee, "") != KL_OK)
                return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            ls = ee;
            continue;
        }
        ls = le;
    }
    return KL_OK;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Dead items become whole-line deletions (with their comment lines just above); neighbours
 * separated only by blank lines merge, and one blank line after a deletion that had one before
 * goes with it. */
static kl_status item_deletions(const kl_rule_ctx *ctx, const deadctx *dc, plan *p, kl_error *err)
{
    uint32_t pairs[SP_MAXITEM][2];
    unsigned np = 0;
    for (unsigned i = 0; i < dc->n && np < SP_MAXITEM; i++) {
        const item *it = &dc->items[i];
        if (!it->dead) continue;
        uint32_t a, b;
        if (!specialize__whole_lines(ctx, it->start, it->end, &a, &b)) {
            a = it->start;
            b = it->end;
        } else {
            a = specialize__comments_above(ctx, a);
        }
        /* no other item on those lines */
        bool alone = true;
        for (unsigned k = 0; k < dc->n; k++)
            if (k != i && dc->items[k].start < b && dc->items[k].end > a) alone = false;
        if (!alone) continue;
        pairs[np][0] = a;
        pairs[np][1] = b;
        np++;
    }
    qsort(pairs, np, sizeof pairs[0], cmp_u32);
    unsigned i = 0;
    while (i < np) {
        uint32_t a = pairs[i][0], b = pairs[i][1];
        unsigned k = i + 1;
        for (; k < np; k++) {
            bool gap_blank = pairs[k][0] >= b;
            for (uint32_t x = b; x < pairs[k][0] && gap_blank; x++)
                if (!isspace((unsigned char)ctx->text[x])) gap_blank = false;
            if (!gap_blank) break;
            if (pairs[k][1] > b) b = pairs[k][1];
        }
        bool blank_before = a == 0 || specialize__line_blank(ctx, rt_line_start(ctx, a - 1));
        if (blank_before && b < ctx->len && specialize__line_blank(ctx, b)) b = rt_line_end(ctx, b);
        if (kl_edits_add(p->ed, a, b, "") != KL_OK) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        i = k;
    }
    return KL_OK;
}

kl_status specialize__remove_site(const kl_rule_ctx *ctx, const kl_site *site, kl_edits *out, kl_error *err)
{
    kl_status refused = kl_site_why_not(site, err);
    if (refused != KL_OK) return refused;
    kl_status st = KL_OK;
    fileinfo *fi = malloc(sizeof *fi);
    item *items = calloc(SP_MAXITEM, sizeof *items);
    plan *p = calloc(1, sizeof *p);
    toks tk = {0};
    if (!fi || !items || !p) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    specialize__file_info(ctx, fi);
    /* the dispatch again, from the site's span */
    TSNode s = {0};
    if (!kl_source_node_at(ctx->src, site->span, &s) || ts_node_is_null(s)) {
        st = kl_rule_not_applicable(err, "no dispatch at %s", site->id);
        goto cleanup;
    }
    const rt_func *h = NULL;
    for (unsigned i = 0; i < fi->nf; i++)
        if (ts_node_eq(ts_node_parent(s), fi->fs[i].body)) h = &fi->fs[i];
    dispatch d;
    if (!h || !specialize__dispatch_at(ctx, fi, h, s, &d) || d.general < 0) {
        st = kl_rule_not_applicable(err, "no dispatch with a general branch at %s", site->id);
        goto cleanup;
    }
    p->ed = out;
    KL_TRY(host_edits(ctx, &d, p, err));
    if (!specialize__tokenize(ctx->text, ctx->len, &tk)) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    KL_TRY(dead_locals(ctx, &tk, &d, p, err));
    unsigned n = 0;
    TSNode root = kl_source_root(ctx->src);
    uint32_t c = ts_node_named_child_count(root);
    for (uint32_t i = 0; i < c && n < SP_MAXITEM; i++) {
        TSNode k = ts_node_named_child(root, i);
        if (rt_is(k, "comment")) continue;
        item_of(ctx, k, &items[n++]);
    }
    deadctx dc = {ctx, &tk, items, n, p};
    find_dead(&dc);
    KL_TRY(item_deletions(ctx, &dc, p, err));
    KL_TRY(header_edits(ctx, &dc, p, err));
cleanup:
    free(tk.items);
    free(fi);
    free(items);
    free(p);
    return st;
}
