/*
 * The model as JSON (docs/syntax.md): what `klineage parse --json` prints for one file.
 * Keys are inserted in a fixed order, so the output is stable byte for byte. Text from the
 * source that is not valid UTF-8 has each bad byte replaced by U+FFFD (JSON must be UTF-8).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "syntax/syntax_int.h"
#include "util/util.h"

/* A JSON string of s, repaired to UTF-8 when it is not. */
static json_t *jstr(const char *s)
{
    if (!s) return json_null();
    size_t n = strlen(s), ok = kl_utf8_valid_prefix(s, n);
    if (ok == n) return json_stringn(s, n);
    kl_strbuf sb = KL_STRBUF_INIT;
    size_t i = 0;
    while (i < n) {
        ok = kl_utf8_valid_prefix(s + i, n - i);
        kl_strbuf_add(&sb, s + i, ok);
        i += ok;
        if (i < n) {
            kl_strbuf_adds(&sb, "\xef\xbf\xbd");
            i++;
        }
    }
    json_t *j = sb.failed ? NULL : json_stringn(kl_strbuf_str(&sb), sb.len);
    kl_strbuf_release(&sb);
    return j;
}

static json_t *jspan(kl_span s)
{
    return json_pack("{s:I,s:I,s:I,s:I}", "line", (json_int_t)s.line, "column", (json_int_t)s.column, "start",
                     (json_int_t)s.start, "end", (json_int_t)s.end);
}

/* A piece of text: {"text", "line", "column", "start", "end"}, or null when absent. */
static json_t *jtext(kl_text t)
{
    if (!t.text) return json_null();
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "text", jstr(t.text));
    json_object_set_new(o, "line", json_integer(t.span.line));
    json_object_set_new(o, "column", json_integer(t.span.column));
    json_object_set_new(o, "start", json_integer(t.span.start));
    json_object_set_new(o, "end", json_integer(t.span.end));
    return o;
}

static json_t *jtexts(const kl_text *t, unsigned n)
{
    json_t *a = json_array();
    for (unsigned i = 0; a && i < n; i++) json_array_append_new(a, jtext(t[i]));
    return a;
}

/* An index into another list, or null for -1. */
static json_t *jindex(int i) { return i < 0 ? json_null() : json_integer(i); }

static json_t *jparam(const kl_param *p)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "name", jstr(p->name));
    json_object_set_new(o, "type", jstr(p->type));
    json_object_set_new(o, "elem_type", jstr(p->elem_type));
    json_object_set_new(o, "pointer_depth", json_integer(p->pointer_depth));
    json_object_set_new(o, "const", json_boolean(p->is_const));
    json_object_set_new(o, "const_pointer", json_boolean(p->is_const_pointer));
    json_object_set_new(o, "restrict", json_boolean(p->is_restrict));
    json_object_set_new(o, "reference", json_boolean(p->is_reference));
    json_object_set_new(o, "array", json_boolean(p->is_array));
    json_object_set_new(o, "span", jspan(p->span));
    return o;
}

static json_t *jfunction(const kl_model *m, unsigned i, const kl_function *f, unsigned char *seen, unsigned *stack,
                         unsigned nfn)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "name", jstr(f->name));
    json_object_set_new(o, "kind", json_string(kl_function_kind_name(f->kind)));
    json_object_set_new(o, "host", json_boolean(f->is_host));
    json_object_set_new(o, "device", json_boolean(f->is_device));
    json_object_set_new(o, "extern_c", json_boolean(f->is_extern_c));
    json_object_set_new(o, "static", json_boolean(f->is_static));
    json_object_set_new(o, "inline", json_boolean(f->is_inline));
    json_object_set_new(o, "forceinline", json_boolean(f->is_forceinline));
    json_object_set_new(o, "noinline", json_boolean(f->is_noinline));
    json_object_set_new(o, "return_type", jstr(f->return_type));
    json_t *tp = json_array();
    for (unsigned k = 0; tp && k < f->ntparams; k++) {
        const kl_tparam *t = &f->tparams[k];
        json_array_append_new(tp, json_pack("{s:o,s:o,s:o,s:b,s:o}", "name", jstr(t->name), "kind", jstr(t->kind),
                                            "default", jstr(t->default_value), "pack", t->is_pack, "span",
                                            jspan(t->span)));
    }
    json_object_set_new(o, "template", json_boolean(f->is_template));
    json_object_set_new(o, "template_params", tp);
    json_t *ps = json_array();
    for (unsigned k = 0; ps && k < f->nparams; k++) json_array_append_new(ps, jparam(&f->params[k]));
    json_object_set_new(o, "params", ps);
    if (f->nlaunch_bounds) {
        json_object_set_new(o, "launch_bounds", jtexts(f->launch_bounds, f->nlaunch_bounds));
        json_object_set_new(o, "launch_bounds_span", jspan(f->launch_bounds_span));
    } else {
        json_object_set_new(o, "launch_bounds", json_null());
        json_object_set_new(o, "launch_bounds_span", json_null());
    }
    json_object_set_new(o, "guard", jstr(f->guard));
    json_object_set_new(o, "returns", json_integer(f->nreturns));
    json_object_set_new(o, "index_dims", json_integer(f->index_dims));
    json_object_set_new(o, "span", jspan(f->span));
    json_object_set_new(o, "name_span", jspan(f->name_span));
    json_object_set_new(o, "body_span", jspan(f->body_span));
    memset(seen, 0, nfn);
    json_object_set_new(o, "features", kl_features_with(m, i, seen, stack));
    return o;
}

static json_t *jlaunch(const kl_launch *l)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "kernel", jstr(l->kernel));
    json_object_set_new(o, "kernel_function", jindex(l->kernel_function));
    json_object_set_new(o, "template_args", jtexts(l->template_args, l->ntemplate_args));
    json_object_set_new(o, "grid", jtext(l->grid));
    json_object_set_new(o, "block", jtext(l->block));
    json_object_set_new(o, "smem", jtext(l->smem));
    json_object_set_new(o, "stream", jtext(l->stream));
    json_object_set_new(o, "args", jtexts(l->args, l->nargs));
    json_object_set_new(o, "function", jindex(l->function));
    json_object_set_new(o, "in_lambda", json_boolean(l->in_lambda));
    json_object_set_new(o, "config_span", jspan(l->config_span));
    json_object_set_new(o, "span", jspan(l->span));
    return o;
}

static json_t *jloop(const kl_loop *lp)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "kind", json_string(kl_loop_kind_name(lp->kind)));
    json_object_set_new(o, "function", jindex(lp->function));
    json_object_set_new(o, "parent", jindex(lp->parent));
    json_object_set_new(o, "depth", json_integer(lp->depth));
    json_object_set_new(o, "var", jstr(lp->var));
    json_object_set_new(o, "init", jtext(lp->init));
    json_object_set_new(o, "cond", jtext(lp->cond));
    json_object_set_new(o, "step", jtext(lp->step));
    json_object_set_new(o, "grid_stride", json_boolean(lp->grid_stride));
    json_object_set_new(o, "unroll", json_boolean(lp->unroll));
    json_object_set_new(o, "unroll_arg", jstr(lp->unroll_arg));
    json_t *pr = json_array();
    for (unsigned k = 0; pr && k < lp->npragmas; k++) json_array_append_new(pr, json_integer(lp->pragma + (int)k));
    json_object_set_new(o, "pragmas", pr);
    json_object_set_new(o, "in_lambda", json_boolean(lp->in_lambda));
    json_object_set_new(o, "span", jspan(lp->span));
    json_object_set_new(o, "body_span", jspan(lp->body_span));
    return o;
}

static json_t *jpragma(const kl_pragma *p)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "name", jstr(p->name));
    json_object_set_new(o, "arg", jstr(p->arg));
    json_object_set_new(o, "loop", jindex(p->loop));
    json_object_set_new(o, "function", jindex(p->function));
    json_object_set_new(o, "text", jtext(p->text));
    return o;
}

static json_t *jshared(const kl_shared_decl *s)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "name", jstr(s->name));
    json_object_set_new(o, "elem_type", jstr(s->elem_type));
    json_object_set_new(o, "dims", jtexts(s->dims, s->ndims));
    json_object_set_new(o, "extern", json_boolean(s->is_extern));
    json_object_set_new(o, "align", jstr(s->align));
    json_object_set_new(o, "function", jindex(s->function));
    json_object_set_new(o, "span", jspan(s->span));
    json_object_set_new(o, "name_span", jspan(s->name_span));
    return o;
}

static json_t *juse(const kl_use *u)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "kind", json_string(kl_use_kind_name(u->kind)));
    json_object_set_new(o, "name", jstr(u->name));
    if (u->kind == KL_USE_VECTOR_TYPE) json_object_set_new(o, "pointer", json_boolean(u->vector_pointer));
    if (u->kind == KL_USE_CALL) json_object_set_new(o, "target", jindex(u->target));
    json_object_set_new(o, "function", jindex(u->function));
    json_object_set_new(o, "loop", jindex(u->loop));
    json_object_set_new(o, "span", jspan(u->span));
    return o;
}

static json_t *jaccess(const kl_access *a)
{
    json_t *o = json_object();
    if (!o) return NULL;
    json_object_set_new(o, "base", jtext(a->base));
    json_object_set_new(o, "indices", jtexts(a->indices, a->nindices));
    json_object_set_new(o, "mode", json_string(kl_access_mode_name(a->mode)));
    json_object_set_new(o, "shared", jindex(a->shared));
    json_object_set_new(o, "param", jindex(a->param));
    json_object_set_new(o, "function", jindex(a->function));
    json_object_set_new(o, "loop", jindex(a->loop));
    json_object_set_new(o, "span", jspan(a->span));
    return o;
}

json_t *kl_model_json(const kl_model *m)
{
    const kl_source *src = kl_model_source(m);
    json_t *doc = json_object();
    if (!doc) return NULL;
    unsigned n;
    json_object_set_new(doc, "file", jstr(kl_source_name(src)));
    json_object_set_new(doc, "partial", json_boolean(kl_source_partial(src)));
    json_object_set_new(doc, "error_count", json_integer(kl_source_error_count(src)));
    json_t *errs = json_array();
    kl_span where;
    char msg[256];
    for (unsigned i = 0; errs && kl_source_error(src, i, &where, msg, sizeof msg); i++)
        json_array_append_new(errs, json_pack("{s:I,s:I,s:I,s:I,s:o}", "line", (json_int_t)where.line, "column",
                                              (json_int_t)where.column, "start", (json_int_t)where.start, "end",
                                              (json_int_t)where.end, "message", jstr(msg)));
    json_object_set_new(doc, "errors", errs);

    const kl_function *fns = kl_model_functions(m, &n);
    unsigned nfn = n;
    unsigned char *seen = malloc(nfn ? nfn : 1);
    unsigned *stack = malloc((nfn ? nfn : 1) * sizeof *stack);
    json_t *a = (seen && stack) ? json_array() : NULL;
    for (unsigned i = 0; a && i < nfn; i++) json_array_append_new(a, jfunction(m, i, &fns[i], seen, stack, nfn));
    free(seen);
    free(stack);
    json_object_set_new(doc, "functions", a);
    json_object_set_new(doc, "launch_function", jindex(kl_model_launch_function(m)));

    const kl_launch *ls = kl_model_launches(m, &n);
    a = json_array();
    for (unsigned i = 0; a && i < n; i++) json_array_append_new(a, jlaunch(&ls[i]));
    json_object_set_new(doc, "launches", a);
    const kl_loop *lp = kl_model_loops(m, &n);
    a = json_array();
    for (unsigned i = 0; a && i < n; i++) json_array_append_new(a, jloop(&lp[i]));
    json_object_set_new(doc, "loops", a);
    const kl_pragma *pg = kl_model_pragmas(m, &n);
    a = json_array();
    for (unsigned i = 0; a && i < n; i++) json_array_append_new(a, jpragma(&pg[i]));
    json_object_set_new(doc, "pragmas", a);
    const kl_shared_decl *sh = kl_model_shared(m, &n);
    a = json_array();
    for (unsigned i = 0; a && i < n; i++) json_array_append_new(a, jshared(&sh[i]));
    json_object_set_new(doc, "shared", a);
    const kl_use *us = kl_model_uses(m, &n);
    a = json_array();
    for (unsigned i = 0; a && i < n; i++) json_array_append_new(a, juse(&us[i]));
    json_object_set_new(doc, "uses", a);
    const kl_access *ac = kl_model_accesses(m, &n);
    a = json_array();
    for (unsigned i = 0; a && i < n; i++) json_array_append_new(a, jaccess(&ac[i]));
    json_object_set_new(doc, "accesses", a);

    /* any allocation that failed left a key out: report it as a failure, not a short document */
    static const char *const keys[] = {"file", "partial", "errors", "functions", "launches", "loops",
                                       "pragmas", "shared", "uses", "accesses"};
    for (unsigned k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        if (!json_object_get(doc, keys[k])) {
            json_decref(doc);
            return NULL;
        }
    }
    return doc;
}
