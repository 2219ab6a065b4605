/* A kernel file's launch() against the task's declared arguments, read from the parse tree.
 *
 * The file must define `launch` with C linkage (an `extern "C"` definition, a definition in an
 * `extern "C" { … }` block, or a definition after an `extern "C"` declaration), taking the
 * declared args in order with their C types and a final cudaStream_t. */
#include <stdlib.h>
#include <string.h>

#include "syntax/syntax_int.h"
#include "task/task_int.h"
#include "util/util.h"

#define MAX_LAUNCH 8

typedef struct launch_scan {
    const kl_source *src;
    TSNode defs[MAX_LAUNCH];
    bool defs_c[MAX_LAUNCH];
    unsigned ndefs;
    bool declared_c; /* an extern "C" declaration (prototype) of launch exists */
} launch_scan;

static bool field_is(TSNode n, const char *field, TSNode *out)
{
    TSNode c = ts_node_child_by_field_name(n, field, (uint32_t)strlen(field));
    if (ts_node_is_null(c)) return false;
    *out = c;
    return true;
}

/* The function_declarator under a declarator (through pointers, parentheses, references). */
static bool find_function_declarator(TSNode d, TSNode *out)
{
    for (int guard = 0; guard < 16 && !ts_node_is_null(d); guard++) {
        const char *type = ts_node_type(d);
        if (!strcmp(type, "function_declarator")) {
            *out = d;
            return true;
        }
        TSNode next;
        if (!field_is(d, "declarator", &next)) return false;
        d = next;
    }
    return false;
}

/* The name a function_declarator declares, if it is a plain identifier. */
static bool declares_launch(const kl_source *src, TSNode fdecl)
{
    TSNode name;
    if (!field_is(fdecl, "declarator", &name)) return false;
    return !strcmp(ts_node_type(name), "identifier") && kl_node_text_is(src, name, "launch");
}

static bool is_linkage_c(const kl_source *src, TSNode spec)
{
    TSNode value;
    return field_is(spec, "value", &value) && kl_node_text_is(src, value, "\"C\"");
}

static void scan(launch_scan *s, TSNode node, bool in_c, int depth)
{
    if (depth > 64) return;
    const char *type = ts_node_type(node);
    if (!strcmp(type, "function_definition")) {
        TSNode decl, fdecl;
        if (field_is(node, "declarator", &decl) && find_function_declarator(decl, &fdecl) &&
            declares_launch(s->src, fdecl) && s->ndefs < MAX_LAUNCH) {
            s->defs_c[s->ndefs] = in_c;
            s->defs[s->ndefs++] = node;
        }
        return; /* never into bodies */
    }
    if (!strcmp(type, "declaration")) {
        TSNode decl, fdecl;
        uint32_t n = ts_node_named_child_count(node);
        for (uint32_t i = 0; i < n; i++) {
            decl = ts_node_named_child(node, i);
            if (find_function_declarator(decl, &fdecl) && declares_launch(s->src, fdecl) && in_c)
                s->declared_c = true;
        }
        if (field_is(node, "declarator", &decl) && find_function_declarator(decl, &fdecl) &&
            declares_launch(s->src, fdecl) && in_c)
            s->declared_c = true;
        return;
    }
    if (!strcmp(type, "linkage_specification")) in_c = is_linkage_c(s->src, node);
    if (!strcmp(type, "compound_statement")) return;
    uint32_t n = ts_node_named_child_count(node);
    for (uint32_t i = 0; i < n; i++) scan(s, ts_node_named_child(node, i), in_c, depth + 1);
}

/* A parameter's C type, normalised: "const float*", "int", "cudaStream_t", "float&". */
typedef struct param_type {
    char text[160];
    bool base_const;
    unsigned stars;
    bool reference;
    char base[96];
    kl_span span;
} param_type;

static void collapse_spaces(char *s)
{
    char *w = s;
    bool space = false;
    for (char *r = s; *r; r++) {
        bool sp = *r == ' ' || *r == '\t' || *r == '\n' || *r == '\r';
        if (sp) {
            space = w != s;
            continue;
        }
        if (space) *w++ = ' ';
        space = false;
        *w++ = *r;
    }
    *w = '\0';
}

static void read_param(const kl_source *src, TSNode p, param_type *out)
{
    memset(out, 0, sizeof *out);
    out->span = kl_node_span(p);
    uint32_t n = ts_node_named_child_count(p);
    TSNode type;
    if (field_is(p, "type", &type)) {
        char *t = kl_node_text(src, type);
        if (t) {
            kl_snprintf(out->base, sizeof out->base, "%s", t);
            collapse_spaces(out->base);
        }
        free(t);
    }
    for (uint32_t i = 0; i < n; i++) {
        TSNode c = ts_node_named_child(p, i);
        if (!strcmp(ts_node_type(c), "type_qualifier") && kl_node_text_is(src, c, "const")) out->base_const = true;
    }
    /* walk the declarator: pointers and references; qualifiers on the pointer itself
     * (const, __restrict__) do not change what is passed */
    TSNode d;
    bool have = field_is(p, "declarator", &d);
    for (int guard = 0; have && guard < 16; guard++) {
        const char *t = ts_node_type(d);
        if (!strcmp(t, "pointer_declarator") || !strcmp(t, "abstract_pointer_declarator")) out->stars++;
        else if (!strcmp(t, "reference_declarator") || !strcmp(t, "abstract_reference_declarator"))
            out->reference = true;
        else if (!strcmp(t, "array_declarator") || !strcmp(t, "abstract_array_declarator")) out->stars++;
        TSNode next;
        if (field_is(d, "declarator", &next)) {
            d = next;
            continue;
        }
        /* reference_declarator has no "declarator" field: its child is the declarator */
        if (out->reference && ts_node_named_child_count(d) > 0 &&
            strcmp(ts_node_type(ts_node_named_child(d, 0)), "identifier")) {
            d = ts_node_named_child(d, 0);
            continue;
        }
        break;
    }
    kl_strbuf sb;
    kl_strbuf_init(&sb, sizeof out->text - 1);
    if (out->base_const) kl_strbuf_adds(&sb, "const ");
    kl_strbuf_adds(&sb, out->base[0] ? out->base : "?");
    for (unsigned i = 0; i < out->stars; i++) kl_strbuf_addc(&sb, '*');
    if (out->reference) kl_strbuf_addc(&sb, '&');
    kl_snprintf(out->text, sizeof out->text, "%s", kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
}

/* Base type spellings accepted for each dtype. */
static bool base_matches(kl_dtype t, const char *base)
{
    static const char *const f32[] = {"float", NULL}, *const f16[] = {"__half", "half", NULL},
                             *const bf16[] = {"__nv_bfloat16", "nv_bfloat16", NULL},
                             *const f64[] = {"double", NULL}, *const i32[] = {"int32_t", "int", NULL},
                             *const u8[] = {"uint8_t", "unsigned char", NULL}, *const none[] = {"int", "int32_t", NULL};
    const char *const *list = none;
    switch (t) {
    case KL_DTYPE_F32: list = f32; break;
    case KL_DTYPE_F16: list = f16; break;
    case KL_DTYPE_BF16: list = bf16; break;
    case KL_DTYPE_F64: list = f64; break;
    case KL_DTYPE_I32: list = i32; break;
    case KL_DTYPE_U8: list = u8; break;
    case KL_DTYPE_NONE: list = none; break;
    }
    for (; *list; list++)
        if (!strcmp(*list, base)) return true;
    return false;
}

static const char *role_name(kl_role r) { return r == KL_ROLE_IN ? "in" : r == KL_ROLE_OUT ? "out" : "inout"; }

kl_status kl_task_check_launch(const kl_task *task, const char *path, const char *key, kl_task_faults *faults,
                               kl_error *err)
{
    kl_source *src = NULL;
    kl_error pe = {0};
    kl_status st = kl_source_parse_file(path, &src, &pe);
    if (st == KL_ERR_NOMEM) return kl_error_set(err, st, "out of memory");
    if (st != KL_OK) return kl_faults_add(faults, path, 0, 0, key, "cannot be parsed: %s", pe.message);
    launch_scan s = {0};
    s.src = src;
    scan(&s, kl_source_root(src), false, 0);
    if (s.ndefs == 0) {
        if (kl_source_partial(src)) {
            kl_span where = {0};
            char msg[128] = "";
            kl_source_error(src, 0, &where, msg, sizeof msg);
            st = kl_faults_add(faults, path, where.line, where.column, key,
                               "no definition of launch() found (the parser stopped here: %s)", msg);
        } else {
            st = kl_faults_add(faults, path, 0, 0, key,
                               "no definition of extern \"C\" void launch(…, cudaStream_t stream) found");
        }
        goto cleanup;
    }
    if (s.ndefs > 1) {
        kl_span sp = kl_node_span(s.defs[1]);
        st = kl_faults_add(faults, path, sp.line, sp.column, key, "launch() is defined %u times; define it once",
                           s.ndefs);
        goto cleanup;
    }
    TSNode def = s.defs[0];
    kl_span defspan = kl_node_span(def);
    if (!s.defs_c[0] && !s.declared_c) {
        st = kl_faults_add(faults, path, defspan.line, defspan.column, key,
                           "launch() must have C linkage: write extern \"C\" void launch(…)");
        if (st != KL_OK) goto cleanup;
    }
    TSNode decl, fdecl, params, rtype;
    if (field_is(def, "type", &rtype) && !kl_node_text_is(src, rtype, "void")) {
        kl_span sp = kl_node_span(rtype);
        char *t = kl_node_text(src, rtype);
        st = kl_faults_add(faults, path, sp.line, sp.column, key, "launch() returns '%s', expected void", t ? t : "?");
        free(t);
        if (st != KL_OK) goto cleanup;
    }
    if (!field_is(def, "declarator", &decl) || !find_function_declarator(decl, &fdecl) ||
        !field_is(fdecl, "parameters", &params)) {
        st = kl_faults_add(faults, path, defspan.line, defspan.column, key, "launch() has no parameter list");
        goto cleanup;
    }
    /* the parameters: parameter_declaration nodes only ("..." is variadic_parameter) */
    uint32_t n = ts_node_named_child_count(params);
    unsigned np = 0;
    TSNode plist[256];
    bool variadic = false;
    for (uint32_t i = 0; i < n && np < 256; i++) {
        TSNode c = ts_node_named_child(params, i);
        const char *t = ts_node_type(c);
        if (!strcmp(t, "parameter_declaration") || !strcmp(t, "optional_parameter_declaration")) plist[np++] = c;
        else if (!strcmp(t, "variadic_parameter") || !strcmp(t, "variadic_parameter_declaration")) variadic = true;
    }
    kl_span psp = kl_node_span(params);
    if (variadic) {
        st = kl_faults_add(faults, path, psp.line, psp.column, key, "launch() must not be variadic");
        if (st != KL_OK) goto cleanup;
    }
    /* "void launch(void)" has one parameter_declaration "void": treat it as none */
    if (np == 1) {
        param_type pt;
        read_param(src, plist[0], &pt);
        if (!strcmp(pt.text, "void")) np = 0;
    }
    unsigned want = task->nargs + 1;
    if (np != want) {
        st = kl_faults_add(faults, path, psp.line, psp.column, key,
                           "launch() takes %u parameters, expected %u (the %u args of task.json in order, then a "
                           "cudaStream_t)",
                           np, want, task->nargs);
        /* still compare the common prefix: it tells which one is missing */
        if (st != KL_OK) goto cleanup;
    }
    unsigned common = np < task->nargs ? np : task->nargs;
    for (unsigned i = 0; i < common; i++) {
        const kl_arg *a = &task->args[i];
        param_type pt;
        read_param(src, plist[i], &pt);
        char argkey[64];
        kl_snprintf(argkey, sizeof argkey, "args[%u]", i);
        bool ok;
        char expected[128];
        if (a->dtype == KL_DTYPE_NONE) {
            ok = pt.stars == 0 && !pt.reference && base_matches(KL_DTYPE_NONE, pt.base);
            kl_snprintf(expected, sizeof expected, "int (%s is a scalar)", a->name);
        } else {
            bool want_const = a->role == KL_ROLE_IN;
            ok = pt.stars == 1 && !pt.reference && pt.base_const == want_const && base_matches(a->dtype, pt.base);
            kl_snprintf(expected, sizeof expected, "%s%s* (%s is %s, role %s)", want_const ? "const " : "",
                        kl_dtype_ctype(a->dtype), a->name, kl_dtype_name(a->dtype), role_name(a->role));
        }
        if (!ok) {
            st = kl_faults_add(faults, path, pt.span.line, pt.span.column, argkey,
                               "launch() parameter %u is '%s', expected %s", i + 1, pt.text, expected);
            if (st != KL_OK) goto cleanup;
        }
    }
    if (np == want) {
        param_type pt;
        read_param(src, plist[np - 1], &pt);
        if (strcmp(pt.text, "cudaStream_t")) {
            st = kl_faults_add(faults, path, pt.span.line, pt.span.column, key,
                               "launch()'s last parameter is '%s', expected cudaStream_t", pt.text);
            if (st != KL_OK) goto cleanup;
        }
    }
    st = KL_OK;
cleanup:
    kl_source_free(src);
    if (st == KL_ERR_NOMEM) return kl_error_set(err, st, "out of memory");
    return st;
}
