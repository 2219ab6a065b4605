/*
 * Condition probing: gate both sides of a step on extra shapes, and turn what broke into
 * conditions ("wrong at cols=1021: needs cols % 4 == 0"; "slower below rows=132").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "klineage/skills.h"
#include "lineage/lineage_int.h"

/* The reference's budget per probe, in the task's flops: probes must stay cheap on the CPU. */
#define PROBE_MAX_FLOPS 4e9

/* The values a size is probed at, most informative first: not a multiple of any vector
 * width or tile (a prime), tiny, fewer than the SMs of a large GPU, shorter than a warp. */
static const int64_t probe_values[] = {1021, 3, 100, 17, 1, 4099};

/* The base shape probes vary one size of: the largest check shape. */
static const kl_shape *base_shape(const kl_task *task)
{
    const kl_shape *best = NULL;
    double best_size = -1;
    for (unsigned c = 0; c < task->nchecks; c++) {
        double p = 1;
        for (unsigned k = 0; k < task->nsizes; k++) p *= (double)task->checks[c].values[k];
        if (p > best_size) best_size = p, best = &task->checks[c];
    }
    return best ? best : &task->bench;
}

static bool shape_cheap(const kl_task *task, const int64_t *values)
{
    if (!task->cost_flops) return true;
    kl_shape s = {"probe", (int64_t *)values};
    int64_t flops = 0;
    kl_error e;
    if (kl_task_eval(task, &s, task->cost_flops, &flops, &e) != KL_OK) return false;
    return (double)flops <= PROBE_MAX_FLOPS;
}

static bool same_as_check(const kl_task *task, const int64_t *values)
{
    for (unsigned c = 0; c < task->nchecks; c++)
        if (!memcmp(task->checks[c].values, values, task->nsizes * sizeof *values)) return true;
    return false;
}

json_t *kl_probe_base_shape(const kl_task *task)
{
    const kl_shape *b = base_shape(task);
    json_t *o = json_object();
    for (unsigned k = 0; k < task->nsizes; k++) json_object_set_new(o, task->sizes[k], json_integer(b->values[k]));
    return o;
}

static bool args_valid(const kl_task *task, const int64_t *values);

bool kl_probe_shape_ok(const kl_task *task, const json_t *shape)
{
    int64_t *v = calloc(task->nsizes ? task->nsizes : 1, sizeof *v);
    if (!v) return false;
    for (unsigned k = 0; k < task->nsizes; k++) v[k] = json_integer_value(json_object_get(shape, task->sizes[k]));
    bool ok = shape_cheap(task, v) && args_valid(task, v);
    free(v);
    return ok;
}

json_t *kl_probe_shapes(const kl_task *task, unsigned max)
{
    json_t *out = json_array();
    const kl_shape *base = base_shape(task);
    int64_t *values = calloc(task->nsizes ? task->nsizes : 1, sizeof *values);
    if (!values) return out;
    /* Round-robin over the sizes, so every size is probed before any is probed twice. */
    for (unsigned v = 0; v < sizeof probe_values / sizeof probe_values[0] && json_array_size(out) < max; v++) {
        for (unsigned k = 0; k < task->nsizes && json_array_size(out) < max; k++) {
            memcpy(values, base->values, task->nsizes * sizeof *values);
            if (values[k] == probe_values[v]) continue;
            values[k] = probe_values[v];
            if (!shape_cheap(task, values) || same_as_check(task, values)) continue;
            json_t *s = json_object();
            for (unsigned q = 0; q < task->nsizes; q++) json_object_set_new(s, task->sizes[q], json_integer(values[q]));
            /* the arguments must still make sense (every expression evaluates) */
            bool ok = true;
            kl_shape shp = {"probe", values};
            for (unsigned a = 0; a < task->nargs && ok; a++) {
                int64_t n;
                kl_error e;
                const char *ex = task->args[a].dtype == KL_DTYPE_NONE ? task->args[a].value : task->args[a].shape;
                if (ex && (kl_task_eval(task, &shp, ex, &n, &e) != KL_OK || n < (task->args[a].dtype ? 1 : 0))) ok = false;
            }
            if (ok)
                json_array_append_new(out, s);
            else
                json_decref(s);
        }
    }
    free(values);
    return out;
}

/* The cost of a shape in flops and bytes (0 when the task gives none), false when it does not
 * evaluate. */
static bool shape_cost(const kl_task *task, const int64_t *values, double *flops, double *bytes)
{
    kl_shape s = {"shape", (int64_t *)values};
    int64_t f = 0, b = 0;
    kl_error e;
    *flops = *bytes = 0;
    if (task->cost_flops && kl_task_eval(task, &s, task->cost_flops, &f, &e) != KL_OK) return false;
    if (task->cost_bytes && kl_task_eval(task, &s, task->cost_bytes, &b, &e) != KL_OK) return false;
    *flops = (double)f, *bytes = (double)b;
    return true;
}

static bool args_valid(const kl_task *task, const int64_t *values)
{
    kl_shape shp = {"shape", (int64_t *)values};
    for (unsigned a = 0; a < task->nargs; a++) {
        int64_t n;
        kl_error e;
        const char *ex = task->args[a].dtype == KL_DTYPE_NONE ? task->args[a].value : task->args[a].shape;
        if (ex && (kl_task_eval(task, &shp, ex, &n, &e) != KL_OK || n < (task->args[a].dtype ? 1 : 0))) return false;
    }
    return true;
}

json_t *kl_path_shape(const kl_task *task, const char *text, const char *fn)
{
    kl_source *src = NULL;
    kl_error e = {0};
    if (kl_source_parse_text("version.cu", text, strlen(text), &src, &e) != KL_OK) return NULL;
    unsigned n = task->nsizes;
    int64_t *v = calloc(n ? n : 1, sizeof *v);
    json_t *found = NULL;
    double bf = 0, bb = 0;
    if (!v || !shape_cost(task, task->bench.values, &bf, &bb)) goto cleanup;
    static const double factors[] = {2, 4, 8, 16, 32, 0.5, 0.25, 0.125, 0.0625, 0.03125};
    for (unsigned k = 0; k < n && !found; k++) {
        unsigned nf = sizeof factors / sizeof factors[0], np = sizeof probe_values / sizeof probe_values[0];
        for (unsigned t = 0; t < nf + np && !found; t++) {
            memcpy(v, task->bench.values, n * sizeof *v);
            if (t < nf) {
                double f = factors[t];
                v[k] = (int64_t)((double)v[k] * f);
                if (v[k] < 1) continue;
                /* the largest other size the other way, so the work stays about the same */
                int j = -1;
                for (unsigned q = 0; q < n; q++)
                    if (q != k && (j < 0 || task->bench.values[q] > task->bench.values[j])) j = (int)q;
                if (j >= 0) {
                    int64_t other = (int64_t)((double)v[j] / f);
                    if (other >= 1) v[j] = other;
                }
            } else {
                v[k] = probe_values[t - nf];
            }
            double f = 0, b = 0;
            if (!args_valid(task, v) || !shape_cost(task, v, &f, &b)) continue;
            if (f > 8 * bf + 1 || b > 8 * bb + 1) continue;
            kl_shape sh = {"path", v};
            if (kl_skill_runs_at(src, task, &sh, fn) != 1) continue;
            found = json_object();
            for (unsigned q = 0; q < n; q++) json_object_set_new(found, task->sizes[q], json_integer(v[q]));
        }
    }
cleanup:
    free(v);
    kl_source_free(src);
    return found;
}

kl_status kl_probe_task_dir(const kl_task *task, const json_t *shape, bool keep_checks, const char *dir, char **task_dir,
                           kl_error *err)
{
    *task_dir = NULL;
    char *src_json_path = kl_task_path(task, "task.json");
    char *text = NULL, *out_dir = NULL, *dumped = NULL;
    json_t *doc = NULL;
    kl_status st = KL_OK;
    KL_TRY(kl_file_read(src_json_path, 0, &text, NULL, err));
    json_error_t je;
    doc = json_loads(text, 0, &je);
    if (!doc) {
        st = kl_error_set(err, KL_ERR_PARSE, "%s:%d: %s", src_json_path, je.line, je.text);
        goto cleanup;
    }
    json_t *shapes = json_object();
    json_object_set(shapes, "bench", (json_t *)shape);
    if (keep_checks) {
        json_object_set(shapes, "check", json_object_get(json_object_get(doc, "shapes"), "check"));
    } else {
        json_t *checks = json_array();
        json_array_append(checks, (json_t *)shape);
        json_object_set_new(shapes, "check", checks);
    }
    json_object_set_new(doc, "shapes", shapes);
    dumped = json_dumps(doc, JSON_SORT_KEYS | JSON_INDENT(2));
    if (!dumped) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    char hex[KL_HASH_HEX];
    kl_hasher *h = kl_hasher_new();
    kl_hasher_parts(h, dumped);
    kl_hasher_parts(h, task->name);
    kl_hasher_finish(h, hex);
    char leaf[160];
    kl_snprintf(leaf, sizeof leaf, "%s-%.16s", task->name, hex); /* content only: the same on every machine */
    out_dir = kl_path_join(dir, leaf);
    if (!out_dir) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    KL_TRY(kl_mkdirs(out_dir, err));
    /* The kernel files and the reference come along so the derived task validates. */
    const char *files[] = {task->reference ? task->reference : "reference.c", task->naive, task->expert};
    for (unsigned i = 0; i < 3; i++) {
        if (!files[i]) continue;
        char *from = kl_task_path(task, files[i]);
        char *to = kl_path_join(out_dir, files[i]);
        char *body = NULL;
        size_t len = 0;
        st = from && to ? kl_file_read(from, 0, &body, &len, err) : KL_ERR_NOMEM;
        if (st == KL_OK) {
            char *parent = kl_path_dirname(to);
            st = parent ? kl_mkdirs(parent, err) : KL_ERR_NOMEM;
            free(parent);
        }
        if (st == KL_OK) st = kl_file_write(to, body, len, err);
        free(from), free(to), free(body);
        if (st != KL_OK) goto cleanup;
    }
    char *json_path = kl_path_join(out_dir, "task.json");
    st = json_path ? kl_file_write(json_path, dumped, strlen(dumped), err) : KL_ERR_NOMEM;
    free(json_path);
    if (st != KL_OK) goto cleanup;
    *task_dir = out_dir;
    out_dir = NULL;
cleanup:
    free(src_json_path), free(text), free(out_dir), free(dumped);
    json_decref(doc);
    return st;
}

/* The sizes by role a condition may be written over, most telling first. Correctness: the
 * contiguous axis first (vector widths and tiles divide it); speed: the independent work first
 * (too few rows or blocks to fill the GPU). */
static const char *const roles_wrong[] = {"contiguous_extent", "reduced_extent", "independent_rows", "elements", NULL};
static const char *const roles_slower[] = {"independent_rows", "grid_blocks", "contiguous_extent", "reduced_extent",
                                           "elements", "bytes_moved", NULL};

static bool role_of(const json_t *e, const char *name, json_int_t *v)
{
    json_t *x = json_object_get(json_object_get(e, "roles"), name);
    if (!json_is_integer(x)) return false;
    *v = json_integer_value(x);
    return true;
}

static void add_evidence(json_t *evidence, const char *prefix, const json_t *items, const char *role, unsigned max)
{
    size_t i;
    json_t *e;
    json_array_foreach(items, i, e) {
        if (i >= max) break;
        char *t = json_dumps(json_object_get(e, "shape"), JSON_SORT_KEYS | JSON_COMPACT);
        json_int_t v = 0;
        char line[320];
        if (role && role_of(e, role, &v))
            kl_snprintf(line, sizeof line, "%s at %s (%s = %lld)", prefix, t ? t : "?", role, (long long)v);
        else
            kl_snprintf(line, sizeof line, "%s at %s", prefix, t ? t : "?");
        free(t);
        json_array_append_new(evidence, json_string(line));
    }
}

static json_t *condition(const char *predicate, const char *because, const json_t *passed, const json_t *failed,
                         const char *what, const char *role)
{
    json_t *c = json_object();
    json_object_set_new(c, "predicate", json_string(predicate));
    json_object_set_new(c, "kind", json_string(!strcmp(what, "slower") ? "probed-perf" : "probed"));
    json_object_set_new(c, "verified", json_true());
    json_object_set_new(c, "because", json_string(because));
    json_t *ev = json_array();
    add_evidence(ev, what, failed, role, 4);
    add_evidence(ev, !strcmp(what, "slower") ? "not slower" : "passed", passed, role, 4);
    json_object_set_new(c, "evidence", ev);
    return c;
}

/* Does every item of a hold role name? */
static bool all_have(const json_t *items, const char *name)
{
    size_t i;
    json_t *e;
    json_int_t v;
    json_array_foreach(items, i, e) if (!role_of(e, name, &v)) return false;
    return true;
}

/* ", also R1, R2" for the other roles that separate the same way */
static void also(kl_strbuf *sb, const char *const *names, const char *chosen, bool (*sep)(const json_t *, const json_t *,
                                                                                          const char *, void *),
                 const json_t *passed, const json_t *failed, void *arg)
{
    bool first = true;
    for (const char *const *n = names; *n; n++) {
        if (!strcmp(*n, chosen) || !all_have(passed, *n) || !all_have(failed, *n)) continue;
        if (!sep(passed, failed, *n, arg)) continue;
        kl_strbuf_addf(sb, "%s%s", first ? " (as do " : ", ", *n);
        first = false;
    }
    if (!first) kl_strbuf_adds(sb, ")");
}

static bool sep_mod(const json_t *passed, const json_t *failed, const char *name, void *arg)
{
    int mod = *(int *)arg;
    size_t i;
    json_t *e;
    json_int_t v;
    json_array_foreach(failed, i, e) if (role_of(e, name, &v) && v % mod == 0) return false;
    json_array_foreach(passed, i, e) if (role_of(e, name, &v) && v % mod != 0) return false;
    return true;
}

/* below: failures all below every pass (dir 1), or above (dir -1) */
static bool sep_threshold(const json_t *passed, const json_t *failed, const char *name, void *arg)
{
    int dir = *(int *)arg;
    json_int_t fmax = INT64_MIN, fmin = INT64_MAX, pmax = INT64_MIN, pmin = INT64_MAX, v;
    size_t i;
    json_t *e;
    json_array_foreach(failed, i, e) if (role_of(e, name, &v)) {
        if (v > fmax) fmax = v;
        if (v < fmin) fmin = v;
    }
    json_array_foreach(passed, i, e) if (role_of(e, name, &v)) {
        if (v > pmax) pmax = v;
        if (v < pmin) pmin = v;
    }
    return dir > 0 ? fmax < pmin : fmin > pmax;
}

json_t *kl_probe_conditions(const json_t *passed, const json_t *failed, const char *what)
{
    json_t *out = json_array();
    if (json_array_size(failed) == 0 || json_array_size(passed) == 0) return out;
    bool slower = !strcmp(what, "slower");
    const char *const *names = slower ? roles_slower : roles_wrong;
    static const int moduli[] = {256, 128, 64, 32, 16, 8, 4, 2};
    /* divisibility: every failure is off a multiple, every pass is on it (for correctness only:
     * against a few speed probes any modulus that divides the bench size would "explain" them) */
    for (unsigned m = 0; !slower && m < sizeof moduli / sizeof moduli[0]; m++) {
        int mod = moduli[m];
        const char *chosen = NULL;
        for (const char *const *n = names; *n && !chosen; n++)
            if (all_have(passed, *n) && all_have(failed, *n) && sep_mod(passed, failed, *n, &mod)) chosen = *n;
        if (!chosen) continue;
        char pred[128];
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_snprintf(pred, sizeof pred, "%s %% %d == 0", chosen, mod);
        kl_strbuf_addf(&sb, "%s wherever %s was not a multiple of %d", what, chosen, mod);
        also(&sb, names, chosen, sep_mod, passed, failed, &mod);
        json_array_append_new(out, condition(pred, kl_strbuf_str(&sb), passed, failed, what, chosen));
        kl_strbuf_release(&sb);
        break;
    }
    /* thresholds, with the bracket the evidence leaves: failures below every pass, or above */
    for (int dir = 1; dir >= -1; dir -= 2) {
        const char *chosen = NULL;
        for (const char *const *n = names; *n && !chosen; n++)
            if (all_have(passed, *n) && all_have(failed, *n) && sep_threshold(passed, failed, *n, &dir)) chosen = *n;
        if (!chosen) continue;
        json_int_t fedge = dir > 0 ? INT64_MIN : INT64_MAX, pedge = dir > 0 ? INT64_MAX : INT64_MIN, v;
        size_t i;
        json_t *e;
        json_array_foreach(failed, i, e) if (role_of(e, chosen, &v) && (dir > 0 ? v > fedge : v < fedge)) fedge = v;
        json_array_foreach(passed, i, e) if (role_of(e, chosen, &v) && (dir > 0 ? v < pedge : v > pedge)) pedge = v;
        char pred[128];
        kl_strbuf sb = KL_STRBUF_INIT;
        kl_snprintf(pred, sizeof pred, "%s %s %lld", chosen, dir > 0 ? ">=" : "<=", (long long)pedge);
        kl_strbuf_addf(&sb, "%s at %s %s %lld, not at %s %s %lld: the boundary lies between", what, chosen,
                       dir > 0 ? "<=" : ">=", (long long)fedge, chosen, dir > 0 ? ">=" : "<=", (long long)pedge);
        also(&sb, names, chosen, sep_threshold, passed, failed, &dir);
        json_t *c = condition(pred, kl_strbuf_str(&sb), passed, failed, what, chosen);
        kl_strbuf_release(&sb);
        json_t *br = json_object();
        json_object_set_new(br, "role", json_string(chosen));
        json_object_set_new(br, "fails", json_integer(fedge));
        json_object_set_new(br, "holds", json_integer(pedge));
        json_object_set_new(c, "bracket", br);
        json_array_append_new(out, c);
    }
    if (json_array_size(out) == 0) {
        json_t *c = json_object();
        json_object_set_new(c, "predicate", json_null());
        json_object_set_new(c, "kind", json_string("unexplained"));
        json_object_set_new(c, "verified", json_false());
        char why[240];
        kl_snprintf(why, sizeof why,
                    "%s at %zu shape(s); no single size by role separates them from the %zu that passed", what,
                    json_array_size(failed), json_array_size(passed));
        json_object_set_new(c, "because", json_string(why));
        json_t *ev = json_array();
        add_evidence(ev, what, failed, NULL, 8);
        json_object_set_new(c, "evidence", ev);
        json_array_append_new(out, c);
    }
    return out;
}
