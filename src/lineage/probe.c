/*
 * Condition probing: gate both sides of a step on extra shapes, and turn what broke into
 * conditions ("wrong at cols=1021: needs cols % 4 == 0"; "slower below rows=132").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

kl_status kl_probe_task_dir(const kl_task *task, const json_t *shape, const char *dir, char **task_dir, kl_error *err)
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
    json_t *checks = json_array();
    json_array_append(checks, (json_t *)shape);
    json_object_set_new(shapes, "check", checks);
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

static json_int_t size_of(const json_t *shape, const char *name)
{
    return json_integer_value(json_object_get(shape, name));
}

static void add_shapes(json_t *evidence, const char *prefix, const json_t *shapes, unsigned max)
{
    size_t i;
    json_t *s;
    json_array_foreach(shapes, i, s) {
        if (i >= max) break;
        char *t = json_dumps(s, JSON_SORT_KEYS | JSON_COMPACT);
        char line[256];
        kl_snprintf(line, sizeof line, "%s at %s", prefix, t ? t : "?");
        free(t);
        json_array_append_new(evidence, json_string(line));
    }
}

static json_t *condition(const char *predicate, const char *because, const json_t *passed, const json_t *failed,
                         const char *what)
{
    json_t *c = json_object();
    json_object_set_new(c, "predicate", json_string(predicate));
    json_object_set_new(c, "kind", json_string(!strcmp(what, "slower") ? "probed-perf" : "probed"));
    json_object_set_new(c, "verified", json_true());
    json_object_set_new(c, "because", json_string(because));
    json_t *ev = json_array();
    add_shapes(ev, what, failed, 4);
    add_shapes(ev, !strcmp(what, "slower") ? "not slower" : "passed", passed, 4);
    json_object_set_new(c, "evidence", ev);
    return c;
}

json_t *kl_probe_conditions(const kl_task *task, const json_t *passed, const json_t *failed, const char *what)
{
    json_t *out = json_array();
    if (json_array_size(failed) == 0 || json_array_size(passed) == 0) return out;
    static const int moduli[] = {256, 128, 64, 32, 16, 8, 4, 2};
    for (unsigned k = 0; k < task->nsizes; k++) {
        const char *name = task->sizes[k];
        size_t i;
        json_t *s;
        /* divisibility: every failure is off a multiple, every pass is on it (for correctness
         * only: the speed evidence is a few probes and the bench shape, against which any
         * modulus that divides the bench size would "explain" a slowdown at small sizes) */
        for (unsigned m = 0; strcmp(what, "slower") != 0 && m < sizeof moduli / sizeof moduli[0]; m++) {
            int mod = moduli[m];
            bool holds = true;
            json_array_foreach(failed, i, s) if (size_of(s, name) % mod == 0) holds = false;
            json_array_foreach(passed, i, s) if (size_of(s, name) % mod != 0) holds = false;
            if (holds) {
                char pred[128], why[256];
                kl_snprintf(pred, sizeof pred, "%s %% %d == 0", name, mod);
                kl_snprintf(why, sizeof why, "%s wherever %s was not a multiple of %d", what, name, mod);
                json_array_append_new(out, condition(pred, why, passed, failed, what));
                break;
            }
        }
        /* a threshold: every failure below every pass */
        json_int_t max_fail = INT64_MIN, min_pass = INT64_MAX;
        json_array_foreach(failed, i, s) if (size_of(s, name) > max_fail) max_fail = size_of(s, name);
        json_array_foreach(passed, i, s) if (size_of(s, name) < min_pass) min_pass = size_of(s, name);
        if (max_fail < min_pass) {
            char pred[128], why[256];
            kl_snprintf(pred, sizeof pred, "%s >= %lld", name, (long long)min_pass);
            kl_snprintf(why, sizeof why, "%s at %s <= %lld, not at %s >= %lld", what, name, (long long)max_fail,
                        name, (long long)min_pass);
            json_array_append_new(out, condition(pred, why, passed, failed, what));
        }
        /* and the other way round: failures above every pass */
        json_int_t min_fail = INT64_MAX, max_pass = INT64_MIN;
        json_array_foreach(failed, i, s) if (size_of(s, name) < min_fail) min_fail = size_of(s, name);
        json_array_foreach(passed, i, s) if (size_of(s, name) > max_pass) max_pass = size_of(s, name);
        if (min_fail > max_pass) {
            char pred[128], why[256];
            kl_snprintf(pred, sizeof pred, "%s <= %lld", name, (long long)max_pass);
            kl_snprintf(why, sizeof why, "%s at %s >= %lld, not at %s <= %lld", what, name, (long long)min_fail,
                        name, (long long)max_pass);
            json_array_append_new(out, condition(pred, why, passed, failed, what));
        }
    }
    if (json_array_size(out) == 0) {
        json_t *c = json_object();
        json_object_set_new(c, "predicate", json_null());
        json_object_set_new(c, "kind", json_string("unexplained"));
        json_object_set_new(c, "verified", json_false());
        char why[200];
        kl_snprintf(why, sizeof why, "%s at %zu shape(s); no single size condition separates them from the %zu that passed",
                    what, json_array_size(failed), json_array_size(passed));
        json_object_set_new(c, "because", json_string(why));
        json_t *ev = json_array();
        add_shapes(ev, what, failed, 8);
        json_object_set_new(c, "evidence", ev);
        json_array_append_new(out, c);
    }
    return out;
}
