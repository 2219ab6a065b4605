/* The suite benchmark: naive and expert of every task, same run, against the vendor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "klineage/bench.h"
#include "klineage/task.h"
#include "util/util.h"

static void note(const kl_bench_options *o, const char *task, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note(const kl_bench_options *o, const char *task, const char *fmt, ...)
{
    if (!o->progress) return;
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    o->progress(o->progress_user, task, text);
}

static bool wanted(const kl_bench_options *o, const char *name)
{
    if (!o->only) return true;
    for (const char *const *p = o->only; *p; p++)
        if (!strcmp(*p, name)) return true;
    return false;
}

/* Store a vendor_baselines.py output: {task: {"vendor", "median_ms", …}} as kind "vendor". */
static kl_status store_vendor(const kl_bench_options *o, kl_error *err)
{
    char *text = NULL;
    kl_status st = kl_file_read(o->vendor_json, 0, &text, NULL, err);
    if (st != KL_OK) return st;
    json_error_t je;
    json_t *all = json_loads(text, 0, &je);
    free(text);
    if (!json_is_object(all)) {
        json_decref(all);
        return kl_error_set(err, KL_ERR_PARSE, "%s:%d: expected an object of task timings (%s)", o->vendor_json,
                            je.line, all ? "not an object" : je.text);
    }
    const char *task;
    json_t *v;
    json_object_foreach(all, task, v) {
        if (!json_is_number(json_object_get(v, "median_ms"))) {
            st = kl_error_set(err, KL_ERR_INVALID, "%s: %s.median_ms: expected a number", o->vendor_json, task);
            break;
        }
        char *doc = json_dumps(v, JSON_SORT_KEYS | JSON_COMPACT);
        st = doc ? kl_store_put(o->store, "vendor", task, doc, err) : KL_ERR_NOMEM;
        free(doc);
        if (st != KL_OK) break;
    }
    json_decref(all);
    return st;
}

static double eval_at_bench(const kl_task *t, const char *expr)
{
    if (!expr) return -1;
    int64_t v = 0;
    kl_error e;
    return kl_task_eval(t, &t->bench, expr, &v, &e) == KL_OK ? (double)v : -1;
}

/* The ceiling figures of the device document, or -1. */
static double gpu_figure(kl_gate *gate, const char *key)
{
    char *json = NULL;
    kl_error e;
    if (kl_gate_gpu_info(gate, false, &json, &e) != KL_OK) return -1;
    json_t *g = json_loads(json, 0, NULL);
    free(json);
    json_t *c = json_object_get(g, "ceilings");
    double v = json_is_number(json_object_get(c, key)) ? json_number_value(json_object_get(c, key)) : -1;
    json_decref(g);
    return v;
}

static json_t *bench_task(const kl_bench_options *o, const json_t *entry, double copy_gbs, bool *unmeasured)
{
    const char *name = json_string_value(json_object_get(entry, "task"));
    json_t *row = json_object();
    json_object_set_new(row, "task", json_string(name ? name : "?"));
    json_object_set(row, "target", json_object_get(entry, "target"));
    kl_error err = {0};
    kl_task *t = NULL;
    kl_verdict *v = NULL, *vv = NULL;
    char *dir = name ? kl_path_join(o->suite_dir, name) : NULL;
    if (!dir || kl_task_load(dir, &t, &err) != KL_OK) {
        json_object_set_new(row, "error", json_string(dir ? err.message : "suite entry without \"task\""));
        goto done;
    }
    json_t *shape = json_object();
    for (unsigned k = 0; k < t->nsizes; k++) json_object_set_new(shape, t->sizes[k], json_integer(t->bench.values[k]));
    json_object_set_new(row, "shape", shape);
    char *expert = kl_task_path(t, t->expert), *naive = kl_task_path(t, t->naive);
    kl_gate_source es = {expert, NULL}, ns = {naive, NULL};
    note(o, name, "expert against naive");
    kl_status st = kl_gate_judge(o->gate, t, &es, &ns, NULL, &v, &err);
    if (st == KL_ERR_UNMEASURED) *unmeasured = true;
    if (st != KL_OK || !v) {
        json_object_set_new(row, "error", json_string(err.message));
    } else if (!v->pass) {
        char why[700];
        kl_snprintf(why, sizeof why, "the expert is rejected at %s: %s", v->failed_stage ? v->failed_stage : "?",
                    v->reason ? v->reason : "?");
        json_object_set_new(row, "error", json_string(why));
        json_object_set_new(row, "verdict", json_string(v->key ? v->key : ""));
    } else {
        json_object_set_new(row, "verdict", json_string(v->key));
        json_object_set_new(row, "device", json_string(v->device ? v->device : ""));
        json_object_set_new(row, "date", json_string(v->date ? v->date : ""));
        json_object_set_new(row, "replayed", json_boolean(v->replayed));
        json_object_set_new(row, "expert_ms", json_real(v->median_ms));
        if (v->speedup > 0) {
            json_object_set_new(row, "naive_ms", json_real(v->median_ms * v->speedup));
            json_object_set_new(row, "speedup", json_real(v->speedup));
        }
        if (v->gbps > 0) json_object_set_new(row, "gbps", json_real(v->gbps));
        if (v->tflops > 0) json_object_set_new(row, "tflops", json_real(v->tflops));
        double bytes = eval_at_bench(t, t->cost_bytes);
        if (copy_gbs > 0 && bytes > 0 && v->median_ms > 0)
            json_object_set_new(row, "copy_fraction", json_real(bytes / (v->median_ms * 1e-3) / 1e9 / copy_gbs));

        /* the vendor: built into the gate (cuBLAS), same process; else a stored timing */
        json_t *vendor = json_object_get(entry, "vendor");
        const char *builtin = json_string_value(json_object_get(vendor, "builtin"));
        json_object_set(row, "vendor", json_object_get(vendor, "name"));
        if (builtin) {
            note(o, name, "expert against %s", builtin);
            kl_judge_options jo = {0};
            jo.baseline_builtin = builtin;
            st = kl_gate_judge(o->gate, t, &es, NULL, &jo, &vv, &err);
            if (st == KL_ERR_UNMEASURED) *unmeasured = true;
            if (st == KL_OK && vv && vv->speedup > 0) {
                json_object_set_new(row, "vendor_ms", json_real(vv->median_ms * vv->speedup));
                json_object_set_new(row, "vendor_same_process", json_true());
                json_object_set_new(row, "vendor_verdict", json_string(vv->key));
            } else {
                json_object_set_new(row, "vendor_error",
                                    json_string(st != KL_OK ? err.message : vv && vv->reason ? vv->reason : "no timing"));
            }
        } else {
            char *doc = NULL;
            if (kl_store_get(o->store, "vendor", name, &doc, &err) == KL_OK) {
                json_t *d = json_loads(doc, 0, NULL);
                json_object_set(row, "vendor_ms", json_object_get(d, "median_ms"));
                json_object_set_new(row, "vendor_same_process", json_false());
                json_decref(d);
            }
            free(doc);
        }
        /* the target */
        json_t *target = json_object_get(entry, "target");
        const char *kind = json_string_value(json_object_get(target, "kind"));
        double want = json_number_value(json_object_get(target, kind && !strcmp(kind, "gbps") ? "value" : "fraction"));
        double got = -1;
        if (kind && !strcmp(kind, "gbps") && v->gbps > 0) got = v->gbps;
        if (kind && !strcmp(kind, "copy") && json_object_get(row, "copy_fraction"))
            got = json_number_value(json_object_get(row, "copy_fraction"));
        if (kind && !strcmp(kind, "vendor") && json_object_get(row, "vendor_ms"))
            got = json_number_value(json_object_get(row, "vendor_ms")) / v->median_ms;
        if (got >= 0) {
            json_object_set_new(row, "target_got", json_real(got));
            json_object_set_new(row, "target_met", json_boolean(got >= want));
        }
    }
    free(expert);
    free(naive);
done:
    kl_verdict_free(v);
    kl_verdict_free(vv);
    kl_task_free(t);
    free(dir);
    return row;
}

kl_status kl_bench_experts(const kl_bench_options *o, char **rows, kl_error *err)
{
    *rows = NULL;
    kl_status st = KL_OK;
    if (o->vendor_json && (st = store_vendor(o, err)) != KL_OK) return st;
    char *suite_path = kl_path_join(o->suite_dir, "suite.json");
    char *text = NULL;
    st = suite_path ? kl_file_read(suite_path, 0, &text, NULL, err) : KL_ERR_NOMEM;
    if (st != KL_OK) {
        free(suite_path);
        return st;
    }
    json_error_t je;
    json_t *suite = json_loads(text, 0, &je);
    free(text);
    if (!json_is_array(json_object_get(suite, "tasks"))) {
        st = kl_error_set(err, KL_ERR_PARSE, "%s:%d: expected {\"tasks\": [...]} (%s)", suite_path, je.line,
                          suite ? "no tasks array" : je.text);
        json_decref(suite);
        free(suite_path);
        return st;
    }
    free(suite_path);
    double copy_gbs = gpu_figure(o->gate, "copy_gbs");
    json_t *out = json_array();
    size_t i;
    json_t *e;
    bool all_unmeasured = true, any = false;
    json_array_foreach(json_object_get(suite, "tasks"), i, e) {
        const char *name = json_string_value(json_object_get(e, "task"));
        if (!name || !wanted(o, name)) continue;
        bool unmeasured = false;
        any = true;
        json_array_append_new(out, bench_task(o, e, copy_gbs, &unmeasured));
        if (!unmeasured) all_unmeasured = false;
    }
    if (any && all_unmeasured)
        st = kl_error_set(err, KL_ERR_UNMEASURED, "no task of the suite has recorded verdicts");
    *rows = json_dumps(out, JSON_INDENT(2));
    json_decref(out);
    json_decref(suite);
    return st;
}

static void cell_ms(kl_strbuf *sb, const json_t *row, const char *key)
{
    json_t *v = json_object_get(row, key);
    if (json_is_number(v))
        kl_strbuf_addf(sb, " %.4f |", json_number_value(v));
    else
        kl_strbuf_adds(sb, " – |");
}

char *kl_bench_markdown(const char *rows_json)
{
    json_t *rows = json_loads(rows_json, 0, NULL);
    if (!json_is_array(rows)) {
        json_decref(rows);
        return NULL;
    }
    kl_strbuf sb = KL_STRBUF_INIT;
    const char *device = NULL, *date = NULL;
    size_t i;
    json_t *r;
    json_array_foreach(rows, i, r) {
        if (!device) device = json_string_value(json_object_get(r, "device"));
        if (!date) date = json_string_value(json_object_get(r, "date"));
    }
    kl_strbuf_addf(&sb, "Device: %s; measured %s.\n\n", device ? device : "unknown", date ? date : "–");
    kl_strbuf_adds(&sb, "| task | naive ms | expert ms | expert / naive | vendor | vendor ms | vendor / expert | "
                        "achieved | target | met |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    json_array_foreach(rows, i, r) {
        kl_strbuf_addf(&sb, "| %s |", json_string_value(json_object_get(r, "task")));
        if (json_object_get(r, "error")) {
            kl_strbuf_addf(&sb, " %s | | | | | | | | |\n", json_string_value(json_object_get(r, "error")));
            continue;
        }
        cell_ms(&sb, r, "naive_ms");
        cell_ms(&sb, r, "expert_ms");
        json_t *sp = json_object_get(r, "speedup");
        if (json_is_number(sp)) kl_strbuf_addf(&sb, " %.1fx |", json_number_value(sp));
        else kl_strbuf_adds(&sb, " – |");
        const char *vn = json_string_value(json_object_get(r, "vendor"));
        kl_strbuf_addf(&sb, " %s%s |", vn ? vn : "–",
                       json_is_false(json_object_get(r, "vendor_same_process")) ? " (separate process)" : "");
        cell_ms(&sb, r, "vendor_ms");
        json_t *vm = json_object_get(r, "vendor_ms"), *em = json_object_get(r, "expert_ms");
        if (json_is_number(vm) && json_is_number(em) && json_number_value(em) > 0)
            kl_strbuf_addf(&sb, " %.2f |", json_number_value(vm) / json_number_value(em));
        else
            kl_strbuf_adds(&sb, " – |");
        json_t *gb = json_object_get(r, "gbps"), *tf = json_object_get(r, "tflops");
        json_t *t = json_object_get(r, "target");
        const char *kind = json_string_value(json_object_get(t, "kind"));
        /* the figure the task is judged by: the rate for matrix work, the bandwidth otherwise */
        if (kind && !strcmp(kind, "vendor") && json_is_number(tf))
            kl_strbuf_addf(&sb, " %.1f TFLOP/s |", json_number_value(tf));
        else if (json_is_number(gb))
            kl_strbuf_addf(&sb, " %.0f GB/s |", json_number_value(gb));
        else
            kl_strbuf_adds(&sb, " – |");
        if (kind && !strcmp(kind, "gbps"))
            kl_strbuf_addf(&sb, " ≥ %.0f GB/s |", json_number_value(json_object_get(t, "value")));
        else if (kind && !strcmp(kind, "copy"))
            kl_strbuf_addf(&sb, " ≥ %.0f%% of copy |", 100 * json_number_value(json_object_get(t, "fraction")));
        else if (kind && !strcmp(kind, "vendor"))
            kl_strbuf_addf(&sb, " ≥ %.0f%% of vendor |", 100 * json_number_value(json_object_get(t, "fraction")));
        else
            kl_strbuf_adds(&sb, " – |");
        json_t *met = json_object_get(r, "target_met");
        json_t *got = json_object_get(r, "target_got");
        if (json_is_boolean(met))
            kl_strbuf_addf(&sb, kind && !strcmp(kind, "gbps") ? " %s (%.0f GB/s) |\n" : " %s (%.3f) |\n",
                           json_is_true(met) ? "yes" : "no", json_number_value(got));
        else
            kl_strbuf_adds(&sb, " – |\n");
    }
    json_decref(rows);
    return kl_strbuf_detach(&sb, NULL);
}
