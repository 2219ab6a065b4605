/*
 * One kernel of a task against the task's expert (same run), the suite's vendor (same run
 * when the gate has it built in, else a timing stored separately, and said so) and the
 * device's ceilings (the task's cost at the bench shape over the kernel's median).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "klineage/bench.h"
#include "util/util.h"

static double at_bench(const kl_task *t, const char *expr)
{
    int64_t v = 0;
    kl_error e = {0};
    return expr && kl_task_eval(t, &t->bench, expr, &v, &e) == KL_OK ? (double)v : -1;
}

static double ceiling(kl_gate *gate, const char *key)
{
    char *json = NULL;
    kl_error e = {0};
    if (kl_gate_gpu_info(gate, false, &json, &e) != KL_OK) return -1;
    json_t *g = json_loads(json, 0, NULL);
    free(json);
    json_t *v = json_object_get(json_object_get(g, "ceilings"), key);
    double x = json_is_number(v) ? json_number_value(v) : -1;
    json_decref(g);
    return x;
}

/* The suite entry of a task: suite.json in the folder above the task's, when it lists it. */
static json_t *suite_entry(const kl_task *task)
{
    char *up = kl_path_join(task->dir, "..");
    char *path = up ? kl_path_join(up, "suite.json") : NULL;
    char *text = NULL;
    kl_error e = {0};
    json_t *found = NULL;
    if (path && kl_file_read(path, 0, &text, NULL, &e) == KL_OK) {
        json_t *s = json_loads(text, 0, NULL);
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(s, "tasks"), i, x) {
            const char *n = json_string_value(json_object_get(x, "task"));
            if (n && !strcmp(n, task->name)) found = json_incref(x);
        }
        json_decref(s);
    }
    free(text), free(path), free(up);
    return found;
}

kl_status kl_bench_compare(kl_gate *gate, kl_store *store, const kl_task *task, const char *name, const char *text,
                           double median_ms, char **json, kl_error *err)
{
    *json = NULL;
    json_t *o = json_object();
    kl_status st = KL_OK;
    kl_gate_source cand = {name, text};
    /* the expert, same run */
    if (task->expert) {
        char *expert = kl_task_path(task, task->expert);
        kl_gate_source es = {expert, NULL};
        kl_judge_options jo = {0};
        kl_verdict *v = NULL;
        kl_error e = {0};
        kl_status s = kl_gate_judge(gate, task, &cand, &es, &jo, &v, &e);
        json_t *x = json_object();
        if (s == KL_OK && v && v->pass && v->speedup > 0) {
            json_object_set_new(x, "fraction", json_real(v->speedup)); /* t(expert) / t(kernel) */
            json_object_set_new(x, "verdict", json_string(v->key));
            json_object_set_new(x, "replayed", json_boolean(v->replayed));
            if (median_ms <= 0) median_ms = v->median_ms;
        } else {
            json_object_set_new(x, "error", json_string(s == KL_ERR_UNMEASURED ? "no recorded verdict against the expert"
                                                       : s != KL_OK              ? e.message
                                                       : v && v->reason          ? v->reason
                                                                                 : "not measured"));
        }
        json_object_set_new(o, "expert", x);
        kl_verdict_free(v);
        free(expert);
    }
    /* the vendor */
    json_t *entry = suite_entry(task);
    json_t *vendor = json_object_get(entry, "vendor");
    if (vendor) {
        json_t *x = json_object();
        json_object_set(x, "name", json_object_get(vendor, "name"));
        const char *builtin = json_string_value(json_object_get(vendor, "builtin"));
        if (builtin) {
            kl_judge_options jo = {0};
            jo.baseline_builtin = builtin;
            kl_verdict *v = NULL;
            kl_error e = {0};
            kl_status s = kl_gate_judge(gate, task, &cand, NULL, &jo, &v, &e);
            if (s == KL_OK && v && v->pass && v->speedup > 0) {
                json_object_set_new(x, "fraction", json_real(v->speedup)); /* t(vendor) / t(kernel) */
                json_object_set_new(x, "same_process", json_true());
                json_object_set_new(x, "verdict", json_string(v->key));
            } else {
                json_object_set_new(x, "error", json_string(s == KL_ERR_UNMEASURED ? "no recorded verdict against the vendor"
                                                           : s != KL_OK              ? e.message
                                                                                     : "not measured"));
            }
            kl_verdict_free(v);
        } else {
            char *doc = NULL;
            kl_error e = {0};
            if (median_ms > 0 && kl_store_get(store, "vendor", task->name, &doc, &e) == KL_OK) {
                json_t *d = json_loads(doc, 0, NULL);
                double vm = json_number_value(json_object_get(d, "median_ms"));
                if (vm > 0) {
                    json_object_set_new(x, "fraction", json_real(vm / median_ms));
                    json_object_set_new(x, "same_process", json_false());
                }
                json_decref(d);
            } else {
                json_object_set_new(x, "error", json_string("no vendor timing stored (scripts/vendor_baselines.py)"));
            }
            free(doc);
        }
        json_object_set_new(o, "vendor", x);
    }
    json_decref(entry);
    /* the device's ceilings */
    if (median_ms > 0) {
        json_object_set_new(o, "median_ms", json_real(median_ms));
        double bytes = at_bench(task, task->cost_bytes), flops = at_bench(task, task->cost_flops);
        double copy = ceiling(gate, "copy_gbs"), fma = ceiling(gate, "fma_tflops");
        double tensor = ceiling(gate, "tensor_tflops");
        if (bytes > 0) {
            double gbps = bytes / (median_ms * 1e-3) / 1e9;
            json_object_set_new(o, "gbps", json_real(gbps));
            if (copy > 0) json_object_set_new(o, "copy_fraction", json_real(gbps / copy));
        }
        if (flops > 0) {
            double tf = flops / (median_ms * 1e-3) / 1e12;
            json_object_set_new(o, "tflops", json_real(tf));
            bool tensor_dtype = false;
            for (unsigned i = 0; i < task->nargs; i++)
                tensor_dtype |= task->args[i].dtype == KL_DTYPE_BF16 || task->args[i].dtype == KL_DTYPE_F16;
            double c = tensor_dtype ? tensor : fma;
            if (c > 0) {
                json_object_set_new(o, "compute_fraction", json_real(tf / c));
                json_object_set_new(o, "compute_ceiling", json_string(tensor_dtype ? "tensor_tflops" : "fma_tflops"));
            }
        }
    }
    *json = json_dumps(o, JSON_SORT_KEYS | JSON_INDENT(2));
    if (!*json) st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    json_decref(o);
    return st;
}
