/* Loading and validating a task: dir/task.json (docs/task-format.md).
 *
 * Validation never stops at the first fault: every key is looked at, every expression is
 * evaluated on every shape, and each fault is recorded with its file, its JSON path and why. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "task/task_int.h"
#include "util/util.h"

#define TASK_JSON_MAX ((size_t)16 << 20)

/* The task and everything it owns. pub comes first: a kl_task* is a task_impl*. */
typedef struct task_impl {
    kl_task pub;
    char **owned;      /* strings the public fields point into */
    unsigned nowned, capowned;
} task_impl;

/* ---- faults --------------------------------------------------------------------------------- */

void kl_task_faults_release(kl_task_faults *f)
{
    if (!f) return;
    for (unsigned i = 0; i < f->count; i++) {
        free(f->items[i].file);
        free(f->items[i].key);
        free(f->items[i].reason);
    }
    free(f->items);
    f->items = NULL;
    f->count = f->cap = 0;
}

kl_status kl_faults_add(kl_task_faults *f, const char *file, unsigned line, unsigned column, const char *key,
                        const char *fmt, ...)
{
    if (f->count == f->cap) {
        unsigned cap = f->cap ? 2 * f->cap : 8;
        kl_task_fault *items = realloc(f->items, cap * sizeof *items);
        if (!items) return KL_ERR_NOMEM;
        f->items = items;
        f->cap = cap;
    }
    kl_strbuf sb = KL_STRBUF_INIT;
    va_list ap;
    va_start(ap, fmt);
    kl_strbuf_vaddf(&sb, fmt, ap);
    va_end(ap);
    kl_task_fault *it = &f->items[f->count];
    it->file = kl_strdup(file ? file : "");
    it->key = kl_strdup(key ? key : "");
    it->reason = kl_strbuf_detach(&sb, NULL);
    it->line = line;
    it->column = column;
    if (!it->file || !it->key || !it->reason) {
        free(it->file);
        free(it->key);
        free(it->reason);
        return KL_ERR_NOMEM;
    }
    f->count++;
    return KL_OK;
}

char *kl_task_fault_text(const kl_task_fault *f)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_adds(&sb, f->file);
    if (f->line) {
        kl_strbuf_addf(&sb, ":%u", f->line);
        if (f->column) kl_strbuf_addf(&sb, ":%u", f->column);
    }
    if (f->key && f->key[0]) kl_strbuf_addf(&sb, ": %s", f->key);
    kl_strbuf_addf(&sb, ": %s", f->reason);
    return kl_strbuf_detach(&sb, NULL);
}

/* ---- the loader --------------------------------------------------------------------------- */

typedef struct loader {
    task_impl *t;
    kl_task_faults *faults;
    char *file;        /* "dir/task.json" as shown */
    bool oom;
    bool *shape_ok;    /* per shape (checks first, then bench): every size valid */
    bool args_ok;      /* every argument well formed (needed to check launch()) */
} loader;

static void fault(loader *L, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fault(loader *L, const char *key, const char *fmt, ...)
{
    char reason[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    if (kl_faults_add(L->faults, L->file, 0, 0, key, "%s", reason) != KL_OK) L->oom = true;
}

static const char *keep(loader *L, const char *s)
{
    task_impl *t = L->t;
    if (!s) return NULL;
    if (t->nowned == t->capowned) {
        unsigned cap = t->capowned ? 2 * t->capowned : 32;
        char **o = realloc(t->owned, cap * sizeof *o);
        if (!o) {
            L->oom = true;
            return NULL;
        }
        t->owned = o;
        t->capowned = cap;
    }
    char *c = kl_strdup(s);
    if (!c) {
        L->oom = true;
        return NULL;
    }
    t->owned[t->nowned++] = c;
    return c;
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

static bool is_identifier(const char *s)
{
    if (!s || !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return false;
    for (s++; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

/* Fault every key of obj not in the NULL-terminated list `known`. */
static void check_keys(loader *L, const char *path, json_t *obj, const char *const *known, const char *what)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        bool ok = false;
        for (const char *const *q = known; *q; q++)
            if (!strcmp(*q, k)) ok = true;
        if (ok) continue;
        kl_strbuf list = KL_STRBUF_INIT;
        for (const char *const *q = known; *q; q++) kl_strbuf_addf(&list, "%s%s", q == known ? "" : ", ", *q);
        char key[256];
        kl_snprintf(key, sizeof key, "%s%s%s", path, path[0] ? "." : "", k);
        fault(L, key, "unknown key in %s (known keys: %s)", what, kl_strbuf_str(&list));
        kl_strbuf_release(&list);
    }
}

/* A string field: required or optional; returns NULL (after a fault where due) if absent or bad. */
static const char *get_string(loader *L, json_t *obj, const char *path, const char *name, bool required)
{
    json_t *v = json_object_get(obj, name);
    char key[256];
    kl_snprintf(key, sizeof key, "%s%s%s", path, path[0] ? "." : "", name);
    if (!v) {
        if (required) fault(L, key, "missing (expected a string)");
        return NULL;
    }
    if (!json_is_string(v)) {
        fault(L, key, "expected a string, found %s", json_kind(v));
        return NULL;
    }
    return json_string_value(v);
}

/* An expression field: a string, or an integer written as a JSON number. */
static const char *get_expr(loader *L, json_t *obj, const char *path, const char *name, bool required)
{
    json_t *v = json_object_get(obj, name);
    char key[256];
    kl_snprintf(key, sizeof key, "%s%s%s", path, path[0] ? "." : "", name);
    if (!v) {
        if (required) fault(L, key, "missing (expected an integer expression over the sizes)");
        return NULL;
    }
    if (json_is_integer(v)) {
        char buf[32];
        kl_snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        return keep(L, buf);
    }
    if (!json_is_string(v)) {
        fault(L, key, "expected an integer expression (a string such as \"rows*cols\" or an integer), found %s",
              json_kind(v));
        return NULL;
    }
    if (!json_string_value(v)[0]) {
        fault(L, key, "empty expression");
        return NULL;
    }
    return keep(L, json_string_value(v));
}

/* All shapes, checks first then bench, for evaluating expressions everywhere. */
static unsigned nshapes(const kl_task *t) { return t->nchecks + 1; }
static const kl_shape *shape_at(const kl_task *t, unsigned i) { return i < t->nchecks ? &t->checks[i] : &t->bench; }

/* Evaluate expr on every good shape; report the first failure (parse errors once) and every
 * shape where the value is below `min` or above `max`. Returns true if it evaluated everywhere. */
static bool check_expr(loader *L, const char *key, const char *expr, int64_t min, int64_t max, const char *range_what)
{
    if (!expr) return false;
    kl_task *t = &L->t->pub;
    bool ok = true;
    for (unsigned s = 0; s < nshapes(t); s++) {
        if (!L->shape_ok[s]) continue;
        const kl_shape *sh = shape_at(t, s);
        int64_t v;
        kl_error e = {0};
        kl_status st = kl_task_eval(t, sh, expr, &v, &e);
        if (st != KL_OK) {
            /* a syntax error reads the same on every shape: say it once */
            if (st == KL_ERR_PARSE) {
                fault(L, key, "\"%s\": %s", expr, e.message);
                return false;
            }
            fault(L, key, "\"%s\" at %s: %s", expr, sh->label, e.message);
            ok = false;
            continue;
        }
        if (v < min || v > max) {
            fault(L, key, "\"%s\" is %lld at %s; %s", expr, (long long)v, sh->label, range_what);
            ok = false;
        }
    }
    return ok;
}

/* ---- sizes and shapes ---------------------------------------------------------------------- */

static void load_sizes(loader *L, json_t *root)
{
    kl_task *t = &L->t->pub;
    json_t *sizes = json_object_get(root, "sizes");
    if (!sizes) {
        fault(L, "sizes", "missing (expected an array of size names, e.g. [\"rows\", \"cols\"])");
        return;
    }
    if (!json_is_array(sizes)) {
        fault(L, "sizes", "expected an array of size names, found %s", json_kind(sizes));
        return;
    }
    size_t n = json_array_size(sizes);
    if (n > KL_TASK_MAX_SIZES) {
        fault(L, "sizes", "%zu size names, more than the limit of %u", n, KL_TASK_MAX_SIZES);
        return;
    }
    t->sizes = calloc(n ? n : 1, sizeof *t->sizes);
    if (!t->sizes) {
        L->oom = true;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(sizes, i);
        char key[64];
        kl_snprintf(key, sizeof key, "sizes[%zu]", i);
        if (!json_is_string(v)) {
            fault(L, key, "expected a size name (a string), found %s", json_kind(v));
            continue;
        }
        const char *name = json_string_value(v);
        if (!is_identifier(name)) {
            fault(L, key, "\"%s\" is not a name (letters, digits and _, not starting with a digit)", name);
            continue;
        }
        bool dup = false;
        for (unsigned j = 0; j < t->nsizes; j++)
            if (!strcmp(t->sizes[j], name)) dup = true;
        if (dup) {
            fault(L, key, "duplicate size name \"%s\"", name);
            continue;
        }
        t->sizes[t->nsizes++] = keep(L, name);
    }
}

static void load_shape(loader *L, json_t *obj, const char *path, const char *label, kl_shape *out, bool *ok)
{
    kl_task *t = &L->t->pub;
    out->label = keep(L, label);
    out->values = calloc(t->nsizes ? t->nsizes : 1, sizeof *out->values);
    *ok = false;
    if (!out->values) {
        L->oom = true;
        return;
    }
    if (!json_is_object(obj)) {
        fault(L, path, "expected an object giving every size a value, found %s", json_kind(obj));
        return;
    }
    bool good = true;
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v) {
        char key[256];
        kl_snprintf(key, sizeof key, "%s.%s", path, k);
        int idx = -1;
        for (unsigned i = 0; i < t->nsizes; i++)
            if (!strcmp(t->sizes[i], k)) idx = (int)i;
        if (idx < 0) {
            kl_strbuf list = KL_STRBUF_INIT;
            for (unsigned i = 0; i < t->nsizes; i++) kl_strbuf_addf(&list, "%s%s", i ? ", " : "", t->sizes[i]);
            fault(L, key, "\"%s\" is not a size (the sizes are: %s)", k, t->nsizes ? kl_strbuf_str(&list) : "none");
            kl_strbuf_release(&list);
            good = false;
            continue;
        }
        if (!json_is_integer(v)) {
            fault(L, key, "expected a positive integer, found %s", json_kind(v));
            good = false;
            continue;
        }
        json_int_t x = json_integer_value(v);
        if (x <= 0) {
            fault(L, key, "sizes must be positive, found %lld", (long long)x);
            good = false;
            continue;
        }
        out->values[idx] = (int64_t)x;
    }
    for (unsigned i = 0; i < t->nsizes; i++) {
        if (!json_object_get(obj, t->sizes[i])) {
            fault(L, path, "missing a value for size \"%s\"", t->sizes[i]);
            good = false;
        }
    }
    *ok = good;
}

static void load_shapes(loader *L, json_t *root)
{
    kl_task *t = &L->t->pub;
    json_t *shapes = json_object_get(root, "shapes");
    json_t *checks = shapes && json_is_object(shapes) ? json_object_get(shapes, "check") : NULL;
    size_t nc = checks && json_is_array(checks) ? json_array_size(checks) : 0;
    if (nc > KL_TASK_MAX_CHECKS) {
        fault(L, "shapes.check", "%zu check shapes, more than the limit of %u", nc, KL_TASK_MAX_CHECKS);
        nc = 0;
        checks = NULL;
    }
    t->checks = calloc(nc ? nc : 1, sizeof *t->checks);
    L->shape_ok = calloc(nc + 1, sizeof *L->shape_ok);
    if (!t->checks || !L->shape_ok) {
        L->oom = true;
        return;
    }
    t->nchecks = (unsigned)nc;
    t->bench.label = "bench";
    if (!shapes) {
        fault(L, "shapes", "missing (expected {\"bench\": {…}, \"check\": [{…}, …]})");
        return;
    }
    if (!json_is_object(shapes)) {
        fault(L, "shapes", "expected an object with \"bench\" and \"check\", found %s", json_kind(shapes));
        return;
    }
    static const char *const known[] = {"bench", "check", NULL};
    check_keys(L, "shapes", shapes, known, "shapes");
    json_t *bench = json_object_get(shapes, "bench");
    if (!bench) fault(L, "shapes.bench", "missing (the shape that is timed)");
    else load_shape(L, bench, "shapes.bench", "bench", &t->bench, &L->shape_ok[nc]);
    if (!checks) {
        fault(L, "shapes.check", "missing (expected an array of shapes checked for correctness)");
    } else if (!json_is_array(checks)) {
        fault(L, "shapes.check", "expected an array of shapes, found %s", json_kind(checks));
    } else if (nc == 0) {
        fault(L, "shapes.check", "empty: at least one check shape is needed (tiny, odd, large ones are best)");
    }
    for (size_t i = 0; i < nc; i++) {
        char path[64], label[32];
        kl_snprintf(path, sizeof path, "shapes.check[%zu]", i);
        kl_snprintf(label, sizeof label, "check[%zu]", i);
        load_shape(L, json_array_get(checks, i), path, label, &t->checks[i], &L->shape_ok[i]);
    }
}

/* ---- arguments ---------------------------------------------------------------------------- */

static kl_dtype parse_type(const char *s, bool *ok)
{
    static const struct {
        const char *name;
        kl_dtype t;
    } types[] = {{"f32*", KL_DTYPE_F32}, {"f16*", KL_DTYPE_F16}, {"bf16*", KL_DTYPE_BF16}, {"f64*", KL_DTYPE_F64},
                 {"i32*", KL_DTYPE_I32}, {"u8*", KL_DTYPE_U8},   {"int", KL_DTYPE_NONE}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(types[i].name, s)) {
            *ok = true;
            return types[i].t;
        }
    *ok = false;
    return KL_DTYPE_NONE;
}

/* A bound of uniform (a number or an integer expression) or int_uniform (integers only). */
static bool load_bound(loader *L, json_t *init, const char *path, const char *name, bool integral, const char **out)
{
    json_t *v = json_object_get(init, name);
    char key[256];
    kl_snprintf(key, sizeof key, "%s.%s", path, name);
    *out = NULL;
    if (!v) {
        fault(L, key, "missing (expected a number or an integer expression over the sizes)");
        return false;
    }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        if (integral && d != floor(d)) {
            fault(L, key, "int_uniform bounds are integers, found %g", d);
            return false;
        }
        char buf[40];
        if (integral && fabs(d) < 9.2e18) kl_snprintf(buf, sizeof buf, "%lld", (long long)d);
        else kl_snprintf(buf, sizeof buf, "%.17g", d);
        *out = keep(L, buf);
        return *out != NULL;
    }
    if (json_is_integer(v)) {
        char buf[32];
        kl_snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        *out = keep(L, buf);
        return *out != NULL;
    }
    if (!json_is_string(v)) {
        fault(L, key, "expected a number or an integer expression, found %s", json_kind(v));
        return false;
    }
    *out = keep(L, json_string_value(v));
    return *out != NULL;
}

static void load_init(loader *L, json_t *init, const char *path, kl_arg *a)
{
    char key[256];
    if (!json_is_object(init)) {
        fault(L, path, "expected an object such as {\"dist\": \"normal\", \"mean\": 0, \"std\": 1}, found %s",
              json_kind(init));
        return;
    }
    kl_snprintf(key, sizeof key, "%s.dist", path);
    const char *dist = get_string(L, init, path, "dist", true);
    if (!dist) return;
    bool integral_dtype = a->dtype == KL_DTYPE_I32 || a->dtype == KL_DTYPE_U8;
    if (!strcmp(dist, "normal")) {
        static const char *const known[] = {"dist", "mean", "std", NULL};
        check_keys(L, path, init, known, "a normal distribution");
        a->init.dist = KL_DIST_NORMAL;
        a->init.mean = 0;
        a->init.std = 1;
        json_t *m = json_object_get(init, "mean"), *s = json_object_get(init, "std");
        if (m && !json_is_number(m)) {
            kl_snprintf(key, sizeof key, "%s.mean", path);
            fault(L, key, "expected a number, found %s", json_kind(m));
        } else if (m) {
            a->init.mean = json_number_value(m);
        }
        if (s && !json_is_number(s)) {
            kl_snprintf(key, sizeof key, "%s.std", path);
            fault(L, key, "expected a number, found %s", json_kind(s));
        } else if (s) {
            a->init.std = json_number_value(s);
            if (!(a->init.std > 0)) {
                kl_snprintf(key, sizeof key, "%s.std", path);
                fault(L, key, "the standard deviation must be positive, found %g", a->init.std);
            }
        }
        if (integral_dtype)
            fault(L, key, "%s tensors take \"int_uniform\", not \"normal\"", kl_dtype_name(a->dtype));
        return;
    }
    bool integral = !strcmp(dist, "int_uniform");
    if (!integral && strcmp(dist, "uniform")) {
        fault(L, key, "unknown distribution \"%s\" (expected normal, uniform or int_uniform)", dist);
        return;
    }
    static const char *const known[] = {"dist", "lo", "hi", NULL};
    check_keys(L, path, init, known, integral ? "an int_uniform distribution" : "a uniform distribution");
    a->init.dist = integral ? KL_DIST_INT_UNIFORM : KL_DIST_UNIFORM;
    if (!integral && integral_dtype)
        fault(L, key, "%s tensors take \"int_uniform\", not \"uniform\"", kl_dtype_name(a->dtype));
    bool lo_ok = load_bound(L, init, path, "lo", integral, &a->init.lo);
    bool hi_ok = load_bound(L, init, path, "hi", integral, &a->init.hi);
    if (!lo_ok || !hi_ok) return;
    /* Evaluate on every shape: they must parse, be in order, and fit the dtype. */
    kl_task *t = &L->t->pub;
    int64_t tmin = INT64_MIN, tmax = INT64_MAX;
    if (a->dtype == KL_DTYPE_I32) tmin = INT32_MIN, tmax = INT32_MAX;
    if (a->dtype == KL_DTYPE_U8) tmin = 0, tmax = 255;
    for (unsigned s = 0; s < nshapes(t); s++) {
        if (!L->shape_ok[s]) continue;
        const kl_shape *sh = shape_at(t, s);
        double lo = 0, hi = 0;
        bool both = true;
        const char *which[2] = {"lo", "hi"};
        const char *text[2] = {a->init.lo, a->init.hi};
        double *val[2] = {&lo, &hi};
        for (int w = 0; w < 2; w++) {
            kl_error e = {0};
            kl_snprintf(key, sizeof key, "%s.%s", path, which[w]);
            kl_status st;
            if (integral) {
                int64_t iv = 0;
                st = kl_task_eval(t, sh, text[w], &iv, &e);
                *val[w] = (double)iv;
                if (st == KL_OK && (iv < tmin || iv > tmax)) {
                    fault(L, key, "\"%s\" is %lld at %s, outside the range of %s [%lld, %lld]", text[w],
                          (long long)iv, sh->label, kl_dtype_name(a->dtype), (long long)tmin, (long long)tmax);
                    both = false;
                }
            } else {
                st = kl_task_bound(t, sh, text[w], val[w], &e);
            }
            if (st != KL_OK) {
                fault(L, key, "\"%s\" at %s: %s", text[w], sh->label, e.message);
                both = false;
            }
        }
        if (!both) return; /* one report per bound is enough */
        if (integral ? lo > hi : !(lo < hi)) {
            kl_snprintf(key, sizeof key, "%s", path);
            fault(L, key, "lo (%g) must be %s hi (%g) at %s", lo, integral ? "at most" : "less than", hi, sh->label);
            return;
        }
    }
}

static void load_args(loader *L, json_t *root)
{
    kl_task *t = &L->t->pub;
    json_t *args = json_object_get(root, "args");
    L->args_ok = false;
    if (!args) {
        fault(L, "args", "missing (expected the launch() parameters in order, as an array)");
        return;
    }
    if (!json_is_array(args)) {
        fault(L, "args", "expected an array, found %s", json_kind(args));
        return;
    }
    size_t n = json_array_size(args);
    if (n == 0) {
        fault(L, "args", "empty: launch() needs at least one output");
        return;
    }
    if (n > KL_TASK_MAX_ARGS) {
        fault(L, "args", "%zu arguments, more than the limit of %u", n, KL_TASK_MAX_ARGS);
        return;
    }
    t->args = calloc(n, sizeof *t->args);
    if (!t->args) {
        L->oom = true;
        return;
    }
    t->nargs = (unsigned)n;
    bool all_ok = true, any_output = false;
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(args, i);
        kl_arg *a = &t->args[i];
        char path[64], key[256];
        kl_snprintf(path, sizeof path, "args[%zu]", i);
        a->role = KL_ROLE_IN;
        if (!json_is_object(o)) {
            fault(L, path, "expected an object {\"name\", \"type\", …}, found %s", json_kind(o));
            all_ok = false;
            continue;
        }
        size_t nfaults = L->faults->count;
        const char *name = get_string(L, o, path, "name", true);
        if (name) {
            kl_snprintf(key, sizeof key, "%s.name", path);
            if (!is_identifier(name)) {
                fault(L, key, "\"%s\" is not a C identifier", name);
            } else {
                for (size_t j = 0; j < i; j++)
                    if (t->args[j].name && !strcmp(t->args[j].name, name)) {
                        fault(L, key, "duplicate argument name \"%s\" (also args[%zu])", name, j);
                        break; /* one fault per duplicate, not one per earlier twin */
                    }
            }
            a->name = keep(L, name);
        }
        const char *type = get_string(L, o, path, "type", true);
        bool type_ok = false;
        if (type) {
            a->dtype = parse_type(type, &type_ok);
            if (!type_ok) {
                kl_snprintf(key, sizeof key, "%s.type", path);
                fault(L, key, "unknown type \"%s\" (expected f32*, f16*, bf16*, f64*, i32*, u8* or int)", type);
            }
        }
        if (!type_ok) {
            static const char *const known[] = {"name", "type", "shape", "role", "init", "value", NULL};
            check_keys(L, path, o, known, "an argument");
            all_ok = false;
            continue;
        }
        if (a->dtype == KL_DTYPE_NONE) {
            static const char *const known[] = {"name", "type", "value", NULL};
            check_keys(L, path, o, known, "a scalar (\"int\") argument");
            a->value = get_expr(L, o, path, "value", true);
            kl_snprintf(key, sizeof key, "%s.value", path);
            check_expr(L, key, a->value, INT_MIN, INT_MAX, "a scalar argument is a C int");
        } else {
            static const char *const known[] = {"name", "type", "shape", "role", "init", NULL};
            check_keys(L, path, o, known, "a tensor argument");
            a->shape = get_expr(L, o, path, "shape", true);
            kl_snprintf(key, sizeof key, "%s.shape", path);
            int64_t max_count = INT64_MAX / (int64_t)kl_dtype_size(a->dtype);
            check_expr(L, key, a->shape, 1, max_count,
                       "a tensor holds at least one element and at most INT64_MAX bytes");
            const char *role = get_string(L, o, path, "role", true);
            kl_snprintf(key, sizeof key, "%s.role", path);
            if (role) {
                if (!strcmp(role, "in")) a->role = KL_ROLE_IN;
                else if (!strcmp(role, "out")) a->role = KL_ROLE_OUT;
                else if (!strcmp(role, "inout")) a->role = KL_ROLE_INOUT;
                else fault(L, key, "unknown role \"%s\" (expected in, out or inout)", role);
            }
            if (a->role != KL_ROLE_IN) any_output = true;
            json_t *init = json_object_get(o, "init");
            kl_snprintf(key, sizeof key, "%s.init", path);
            if (a->role == KL_ROLE_OUT) {
                if (init) fault(L, key, "an output (role out) is not filled: it is poisoned before each launch");
            } else if (!init) {
                fault(L, key, "missing: an input (role %s) needs a distribution, e.g. {\"dist\": \"normal\"}",
                      a->role == KL_ROLE_IN ? "in" : "inout");
            } else {
                load_init(L, init, key, a);
            }
        }
        if (L->faults->count != nfaults) all_ok = false;
    }
    if (!any_output) fault(L, "args", "no output: at least one tensor needs role \"out\" or \"inout\"");
    L->args_ok = all_ok;
}

/* ---- the rest --------------------------------------------------------------------------------- */

static void load_tolerance(loader *L, json_t *root)
{
    kl_task *t = &L->t->pub;
    t->max_abs = -1;
    json_t *tol = json_object_get(root, "tolerance");
    if (!tol) {
        fault(L, "tolerance", "missing (expected {\"rel_l2\": 1e-5} or {\"exact\": true})");
        return;
    }
    if (!json_is_object(tol)) {
        fault(L, "tolerance", "expected an object, found %s", json_kind(tol));
        return;
    }
    static const char *const known[] = {"rel_l2", "max_abs", "exact", NULL};
    check_keys(L, "tolerance", tol, known, "tolerance");
    json_t *exact = json_object_get(tol, "exact");
    if (exact) {
        if (!json_is_true(exact))
            fault(L, "tolerance.exact", "expected true (leave it out for a tolerance), found %s",
                  json_is_false(exact) ? "false" : json_kind(exact));
        else t->exact = true;
        if (json_object_get(tol, "rel_l2") || json_object_get(tol, "max_abs"))
            fault(L, "tolerance", "\"exact\" takes no rel_l2 or max_abs");
        return;
    }
    json_t *r = json_object_get(tol, "rel_l2"), *m = json_object_get(tol, "max_abs");
    if (!r) fault(L, "tolerance.rel_l2", "missing (the relative L2 error allowed, e.g. 1e-5)");
    else if (!json_is_number(r)) fault(L, "tolerance.rel_l2", "expected a number, found %s", json_kind(r));
    else if (!(json_number_value(r) > 0) || !(json_number_value(r) < 1))
        fault(L, "tolerance.rel_l2", "expected a number in (0, 1), found %g", json_number_value(r));
    else t->rel_l2 = json_number_value(r);
    if (m) {
        if (!json_is_number(m)) fault(L, "tolerance.max_abs", "expected a number, found %s", json_kind(m));
        else if (!(json_number_value(m) > 0))
            fault(L, "tolerance.max_abs", "expected a positive number, found %g", json_number_value(m));
        else t->max_abs = json_number_value(m);
    }
}

static void load_cost(loader *L, json_t *root)
{
    kl_task *t = &L->t->pub;
    json_t *cost = json_object_get(root, "cost");
    if (!cost) return;
    if (!json_is_object(cost)) {
        fault(L, "cost", "expected an object {\"flops\": \"…\", \"bytes\": \"…\"}, found %s", json_kind(cost));
        return;
    }
    static const char *const known[] = {"flops", "bytes", NULL};
    check_keys(L, "cost", cost, known, "cost");
    t->cost_flops = get_expr(L, cost, "cost", "flops", false);
    t->cost_bytes = get_expr(L, cost, "cost", "bytes", false);
    check_expr(L, "cost.flops", t->cost_flops, 0, INT64_MAX, "a count of operations is not negative");
    check_expr(L, "cost.bytes", t->cost_bytes, 0, INT64_MAX, "a count of bytes is not negative");
}

/* Does path, once its symbolic links and ".." are resolved, lie outside the folder dir? A path
 * that does not resolve (missing) is not said to leave it. */
static bool leaves_folder(const char *dir, const char *path)
{
    char *rdir = realpath(dir, NULL), *rpath = realpath(path, NULL);
    bool out = false;
    if (rdir && rpath) {
        size_t n = strlen(rdir);
        out = !(strncmp(rpath, rdir, n) == 0 && (rpath[n] == '/' || (n == 1 && rdir[0] == '/')));
    }
    free(rdir);
    free(rpath);
    return out;
}

/* A file named by key (or the default), which must exist in the task folder. */
static const char *load_file(loader *L, json_t *root, const char *key, const char *dflt, bool *exists)
{
    kl_task *t = &L->t->pub;
    *exists = false;
    const char *name = get_string(L, root, "", key, false);
    if (!name && json_object_get(root, key)) return NULL; /* wrong type, already reported */
    if (!name) name = dflt;
    if (!name) return NULL;
    if (!name[0]) {
        fault(L, key, "empty file name");
        return NULL;
    }
    if (name[0] == '/') {
        fault(L, key, "\"%s\": expected a path relative to the task folder", name);
        return NULL;
    }
    char *path = kl_path_join(t->dir, name);
    if (!path) {
        L->oom = true;
        return NULL;
    }
    if (kl_dir_exists(path)) fault(L, key, "%s is a folder, not a file", path);
    else if (leaves_folder(t->dir, path))
        fault(L, key, "%s leads outside the task folder (\"..\" or a symbolic link): a task reads only its own files",
              path);
    else if (!kl_file_exists(path))
        fault(L, key, "%s does not exist%s", path,
              json_object_get(root, key) ? "" : " (every task needs its float64 reference)");
    else *exists = true;
    free(path);
    return keep(L, name);
}

static void task_destroy(task_impl *t)
{
    if (!t) return;
    kl_task *p = &t->pub;
    free(p->sizes);
    free(p->args);
    free(p->bench.values);
    for (unsigned i = 0; i < p->nchecks; i++) free(p->checks[i].values);
    free(p->checks);
    for (unsigned i = 0; i < t->nowned; i++) free(t->owned[i]);
    free(t->owned);
    free(t);
}

void kl_task_free(kl_task *task) { task_destroy((task_impl *)task); }

kl_status kl_task_validate(const char *dir, kl_task **out, kl_task_faults *faults, kl_error *err)
{
    kl_status st = KL_OK;
    json_t *root = NULL;
    char *text = NULL;
    unsigned before = faults->count;
    loader L = {0};
    *out = NULL;
    L.faults = faults;
    L.t = calloc(1, sizeof *L.t);
    L.file = kl_path_join(dir, "task.json");
    if (!L.t || !L.file) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    kl_task *t = &L.t->pub;
    t->dir = keep(&L, dir);
    t->max_abs = -1;
    t->bench.label = "bench";
    if (!kl_dir_exists(dir)) {
        fault(&L, "", "the task folder %s does not exist", dir);
        goto done;
    }
    kl_error e = {0};
    size_t len = 0;
    if (kl_file_read(L.file, TASK_JSON_MAX, &text, &len, &e) != KL_OK) {
        fault(&L, "", "%s", e.message);
        goto done;
    }
    json_error_t je;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (kl_faults_add(faults, L.file, (unsigned)(je.line > 0 ? je.line : 0),
                          (unsigned)(je.column > 0 ? je.column : 0), "", "invalid JSON: %s", je.text) != KL_OK)
            L.oom = true;
        goto done;
    }
    if (!json_is_object(root)) {
        fault(&L, "", "expected a JSON object at the top, found %s", json_kind(root));
        goto done;
    }
    static const char *const known[] = {"name", "summary", "sizes", "args", "shapes", "tolerance",
                                        "cost", "naive", "expert", "reference", "reference_max_flops",
                                        NULL};
    check_keys(&L, "", root, known, "a task");
    const char *name = get_string(&L, root, "", "name", true);
    if (name && !name[0]) fault(&L, "name", "empty name");
    t->name = keep(&L, name ? name : "");
    const char *summary = get_string(&L, root, "", "summary", false);
    t->summary = keep(&L, summary ? summary : "");
    load_sizes(&L, root);
    if (L.oom) goto done;
    load_shapes(&L, root);
    if (L.oom) goto done;
    load_args(&L, root);
    load_tolerance(&L, root);
    load_cost(&L, root);
    json_t *rmf = json_object_get(root, "reference_max_flops");
    if (rmf && (!json_is_number(rmf) || json_number_value(rmf) <= 0))
        fault(&L, "reference_max_flops", "expected a positive number of flops");
    else if (rmf)
        t->reference_max_flops = json_number_value(rmf);
    if (rmf && !t->cost_flops) fault(&L, "reference_max_flops", "needs \"cost\": {\"flops\": …} to compare against");
    bool have_naive, have_expert, have_ref;
    t->naive = load_file(&L, root, "naive", NULL, &have_naive);
    t->expert = load_file(&L, root, "expert", NULL, &have_expert);
    t->reference = load_file(&L, root, "reference", "reference.c", &have_ref);
    if (L.oom) goto done;
    /* launch() signatures: only against well-formed arguments (otherwise every parameter
     * would be reported twice). */
    if (L.args_ok) {
        const char *keys[2] = {"naive", "expert"};
        const char *files[2] = {t->naive, t->expert};
        bool have[2] = {have_naive, have_expert};
        for (int k = 0; k < 2; k++) {
            if (!files[k] || !have[k]) continue;
            if (k == 1 && files[0] && !strcmp(files[0], files[1])) continue;
            char *path = kl_path_join(dir, files[k]);
            if (!path) {
                L.oom = true;
                break;
            }
            kl_error ce = {0};
            st = kl_task_check_launch(t, path, keys[k], faults, &ce);
            free(path);
            if (st == KL_ERR_NOMEM) {
                L.oom = true;
                break;
            }
            st = KL_OK;
        }
    }
done:
    if (L.oom) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory while loading %s", L.file);
        goto cleanup;
    }
    if (faults->count > before) {
        char *first = kl_task_fault_text(&faults->items[before]);
        unsigned n = faults->count - before;
        if (n > 1)
            st = kl_error_set(err, KL_ERR_INVALID, "%s (%u faults in all)", first ? first : "invalid task", n);
        else
            st = kl_error_set(err, KL_ERR_INVALID, "%s", first ? first : "invalid task");
        free(first);
        goto cleanup;
    }
    *out = t;
    L.t = NULL;
cleanup:
    json_decref(root);
    free(text);
    free(L.shape_ok);
    free(L.file);
    task_destroy(L.t);
    return st;
}

kl_status kl_task_load(const char *dir, kl_task **out, kl_error *err)
{
    kl_task_faults faults = KL_TASK_FAULTS_INIT;
    kl_status st = kl_task_validate(dir, out, &faults, err);
    if (st == KL_ERR_INVALID && err) {
        /* every fault, one per line, as many as fit */
        kl_strbuf sb;
        kl_strbuf_init(&sb, KL_ERROR_MAX - 1);
        for (unsigned i = 0; i < faults.count; i++) {
            char *line = kl_task_fault_text(&faults.items[i]);
            char more[64];
            kl_snprintf(more, sizeof more, "… and %u more", faults.count - i);
            if (line && sb.len + strlen(line) + 1 + (i + 1 < faults.count ? strlen(more) + 1 : 0) < sb.max) {
                kl_strbuf_addf(&sb, "%s%s", i ? "\n" : "", line);
            } else {
                kl_strbuf_addf(&sb, "\n%s", more);
                free(line);
                break;
            }
            free(line);
        }
        kl_snprintf(err->message, sizeof err->message, "%s", kl_strbuf_str(&sb));
        kl_strbuf_release(&sb);
    }
    kl_task_faults_release(&faults);
    return st;
}

/* ---- queries ------------------------------------------------------------------------------- */

kl_status kl_task_eval(const kl_task *task, const kl_shape *shape, const char *expr, int64_t *out, kl_error *err)
{
    return kl_expr_eval(expr, task->sizes, shape->values, task->nsizes, out, err);
}

char *kl_task_path(const kl_task *task, const char *file) { return kl_path_join(task->dir, file); }

const kl_shape *kl_task_shape(const kl_task *task, const char *label)
{
    if (!label) return NULL;
    if (!strcmp(label, "bench")) return &task->bench;
    for (unsigned i = 0; i < task->nchecks; i++)
        if (!strcmp(task->checks[i].label, label)) return &task->checks[i];
    return NULL;
}

kl_status kl_task_arg_count(const kl_task *task, const kl_shape *shape, unsigned arg, int64_t *count, kl_error *err)
{
    if (arg >= task->nargs) return kl_error_set(err, KL_ERR_INVALID, "argument %u: the task has %u", arg, task->nargs);
    const kl_arg *a = &task->args[arg];
    if (a->dtype == KL_DTYPE_NONE)
        return kl_error_set(err, KL_ERR_INVALID, "argument %u (%s) is a scalar, not a tensor", arg, a->name);
    kl_status st = kl_task_eval(task, shape, a->shape, count, err);
    if (st != KL_OK) return kl_error_prefix(err, "%s.shape \"%s\" at %s", a->name, a->shape, shape->label);
    if (*count < 1)
        return kl_error_set(err, KL_ERR_INVALID, "%s.shape \"%s\" is %lld at %s: expected at least 1", a->name,
                            a->shape, (long long)*count, shape->label);
    return KL_OK;
}

kl_status kl_task_arg_value(const kl_task *task, const kl_shape *shape, unsigned arg, int *value, kl_error *err)
{
    if (arg >= task->nargs) return kl_error_set(err, KL_ERR_INVALID, "argument %u: the task has %u", arg, task->nargs);
    const kl_arg *a = &task->args[arg];
    if (a->dtype != KL_DTYPE_NONE)
        return kl_error_set(err, KL_ERR_INVALID, "argument %u (%s) is a tensor, not a scalar", arg, a->name);
    int64_t v;
    kl_status st = kl_task_eval(task, shape, a->value, &v, err);
    if (st != KL_OK) return kl_error_prefix(err, "%s.value \"%s\" at %s", a->name, a->value, shape->label);
    if (v < INT_MIN || v > INT_MAX)
        return kl_error_set(err, KL_ERR_INVALID, "%s.value \"%s\" is %lld at %s: it does not fit a C int", a->name,
                            a->value, (long long)v, shape->label);
    *value = (int)v;
    return KL_OK;
}
