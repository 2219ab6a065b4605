/* Forward: the observables of a site at a task's shapes, a card matched at a candidate site,
 * the library without one task's lineages, admission records (skills.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "skills/skills_int.h"
#include "syntax/observe.h"

/* ---- observables ------------------------------------------------------------------------ */

/* launch()'s arguments at a shape: scalars by value, tensors by element count. */
typedef struct inputs {
    kl_obs_inputs in;
    int64_t *value;
    bool *pointer;
    unsigned *bytes;
} inputs;

static void inputs_free(inputs *x)
{
    free(x->value), free(x->pointer), free(x->bytes);
    memset(x, 0, sizeof *x);
}

static kl_status inputs_at(const kl_task *task, const kl_shape *shape, inputs *x, kl_error *err)
{
    memset(x, 0, sizeof *x);
    unsigned n = task->nargs;
    x->value = calloc(n ? n : 1, sizeof *x->value);
    x->pointer = calloc(n ? n : 1, sizeof *x->pointer);
    x->bytes = calloc(n ? n : 1, sizeof *x->bytes);
    if (!x->value || !x->pointer || !x->bytes) {
        inputs_free(x);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    for (unsigned i = 0; i < n; i++) {
        const kl_arg *a = &task->args[i];
        kl_error e = {0};
        if (a->dtype == KL_DTYPE_NONE) {
            int v = 0;
            if (kl_task_arg_value(task, shape, i, &v, &e) == KL_OK) x->value[i] = v;
        } else {
            int64_t c = 0;
            if (kl_task_arg_count(task, shape, i, &c, &e) == KL_OK) x->value[i] = c;
            x->pointer[i] = true;
            x->bytes[i] = (unsigned)kl_dtype_size(a->dtype);
        }
    }
    x->in = (kl_obs_inputs){n, x->value, x->pointer, x->bytes};
    return KL_OK;
}

kl_status kl_skill_observe(const kl_source *src, const kl_task *task, const kl_shape *shape, const char *kernel,
                           unsigned line, json_t **out, kl_error *err)
{
    *out = NULL;
    inputs x = {0};
    kl_status st = KL_OK;
    if (task) {
        if (!shape) shape = &task->bench;
        KL_TRY(inputs_at(task, shape, &x, err));
    }
    KL_TRY(kl_observe_site(src, kernel, line, task ? &x.in : NULL, out, err));
    if (task && task->cost_flops) {
        int64_t flops = 0;
        kl_error e = {0};
        json_int_t moved = json_integer_value(json_object_get(*out, "bytes_moved"));
        if (kl_task_eval(task, shape, task->cost_flops, &flops, &e) == KL_OK && moved > 0)
            json_object_set_new(*out, "arithmetic_intensity", json_real((double)flops / (double)moved));
    }
cleanup:
    inputs_free(&x);
    return st;
}

int kl_skill_runs_at(const kl_source *src, const kl_task *task, const kl_shape *shape, const char *fn)
{
    inputs x;
    kl_error err = {0};
    if (inputs_at(task, shape, &x, &err) != KL_OK) return 0;
    kl_obs_launches run;
    int r = 0;
    if (kl_obs_run_launch(src, &x.in, &run, &err) == KL_OK) {
        kl_obs_runs k = kl_obs_function_runs(src, &run, fn);
        r = k == KL_OBS_RUNS ? 1 : k == KL_OBS_NOT_RUN ? -1 : 0;
        kl_obs_launches_release(&run);
    }
    inputs_free(&x);
    return r;
}

/* ---- matching at a site ---------------------------------------------------------------------- */

static void shape_label(const kl_task *task, const kl_shape *shape, char *buf, size_t size)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    kl_strbuf_addf(&sb, "%s {", shape->label ? shape->label : "shape");
    for (unsigned k = 0; k < task->nsizes; k++)
        kl_strbuf_addf(&sb, "%s%s=%lld", k ? ", " : "", task->sizes[k], (long long)shape->values[k]);
    kl_strbuf_addc(&sb, '}');
    kl_snprintf(buf, size, "%s", kl_strbuf_str(&sb));
    kl_strbuf_release(&sb);
}

static const char *const observables[] = {
    "function_kind", "dtype", "elem_bytes", "memory", "access", "write_access", "in_loop", "loop_access",
    "loop_depth", "trip_known", "trip", "step", "reduction", "atomics", "dispatch", "runs_at_shape", "elements",
    "bytes_moved", "grid_blocks", "block_threads", "contiguous_extent", "reduced_extent", "independent_rows",
    "arithmetic_intensity", NULL};

bool kl_observable_name(const char *name)
{
    for (const char *const *o = observables; *o; o++)
        if (!strcmp(*o, name)) return true;
    return false;
}

/* The environment at one shape: the task's sizes by name (lowest: a card written by hand may
 * name them), the site's own features over them, the observables over those, extra last. */
static kl_status env_at(const kl_source *src, const kl_task *task, const kl_shape *shape, const kl_skill_site *site,
                        const json_t *features, const json_t *extra, json_t **out, kl_error *err)
{
    *out = NULL;
    json_t *env = json_object();
    if (task && shape)
        for (unsigned k = 0; k < task->nsizes; k++)
            json_object_set_new(env, task->sizes[k], json_integer(shape->values[k]));
    json_t *obs = NULL;
    kl_status st = kl_skill_observe(src, task, shape, site->kernel, site->line, &obs, err);
    if (st == KL_ERR_NOT_FOUND) {
        /* the site names a function the file does not define: nothing is observed there, and
         * what the conditions need is unknown (each check says which name) */
        kl_error_clear(err);
        obs = json_object();
        st = KL_OK;
    }
    if (st != KL_OK) {
        json_decref(env);
        return st;
    }
    if (json_is_object(features)) json_object_update(env, (json_t *)features);
    json_object_update(env, obs);
    json_decref(obs);
    if (json_is_object(extra)) json_object_update(env, (json_t *)extra);
    *out = env;
    return KL_OK;
}

static kl_truth worse(kl_truth a, kl_truth b)
{
    if (a == KL_TRUTH_FAILS || b == KL_TRUTH_FAILS) return KL_TRUTH_FAILS;
    if (a == KL_TRUTH_UNKNOWN || b == KL_TRUTH_UNKNOWN) return KL_TRUTH_UNKNOWN;
    return KL_TRUTH_HOLDS;
}

kl_status kl_skill_match_site(const kl_skill *card, const kl_source *src, const kl_task *task,
                              const kl_skill_site *site, const json_t *extra, const char *const *present,
                              unsigned npresent, kl_skill_match_result *out, kl_error *err)
{
    memset(out, 0, sizeof *out);
    json_t *features = NULL, *bench = NULL, **checks_env = NULL;
    kl_status st = KL_OK;
    if (site->features_json && *site->features_json) {
        json_error_t je;
        features = json_loads(site->features_json, 0, &je);
        if (!json_is_object(features)) {
            json_decref(features);
            return kl_error_set(err, KL_ERR_INVALID, "site %s:%u: features: expected a JSON object (%s)", site->kernel,
                                site->line, je.text);
        }
    }
    KL_TRY(env_at(src, task, task ? &task->bench : NULL, site, features, extra, &bench, err));
    /* static and speed conditions and `requires`: kl_skill_match at the bench shape */
    KL_TRY(kl_skill_match(card, bench, present, npresent, out, err));
    out->observables = json_incref(bench);
    unsigned nshapes = task ? task->nchecks : 0;
    checks_env = calloc(nshapes ? nshapes : 1, sizeof *checks_env);
    if (!checks_env) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    char bench_label[128] = "";
    if (task) shape_label(task, &task->bench, bench_label, sizeof bench_label);
    kl_truth truth = KL_TRUTH_HOLDS;
    for (unsigned c = 0; c < out->nchecks; c++) {
        kl_skill_check *ck = &out->checks[c];
        if (!strcmp(ck->kind, "static") && ck->truth == KL_TRUTH_UNKNOWN && features) {
            /* a feature of the kind of site the card was learned at (its pattern) that this site's
             * features do not have: the site is of another kind (a unit-stride loop has no
             * grid-stride "form") */
            kl_predicate p;
            kl_error perr = {0};
            const json_t *learned =
                json_object_get(json_object_get(json_object_get(kl_skill_doc(card), "anchor"), "pattern"), "site_features");
            if (kl_predicate_parse(ck->predicate, &p, &perr) == KL_OK && !kl_observable_name(p.name) &&
                json_object_get(learned, p.name) && !json_object_get(bench, p.name)) {
                ck->truth = KL_TRUTH_FAILS;
                kl_snprintf(ck->why, sizeof ck->why, "the site's features have no %s: a site of another kind", p.name);
            }
        }
        if (!strcmp(ck->kind, "probed-perf")) {
            kl_snprintf(ck->shape, sizeof ck->shape, "%s", bench_label);
        } else if (!strcmp(ck->kind, "probed") && task) {
            /* correctness: at every shape the kernel is checked at, the bench shape included */
            kl_predicate p;
            kl_error perr = {0};
            if (kl_predicate_parse(ck->predicate, &p, &perr) != KL_OK) {
                st = kl_error_set(err, KL_ERR_INVALID, "skill %s: %s", kl_skill_id(card), perr.message);
                goto cleanup;
            }
            kl_truth t = ck->truth;
            if (t == KL_TRUTH_FAILS) kl_snprintf(ck->shape, sizeof ck->shape, "%s", bench_label);
            for (unsigned sh = 0; sh < nshapes && t != KL_TRUTH_FAILS; sh++) {
                if (!checks_env[sh] &&
                    (st = env_at(src, task, &task->checks[sh], site, features, extra, &checks_env[sh], err)) != KL_OK)
                    goto cleanup;
                char why[160];
                kl_truth ts = kl_predicate_eval(&p, checks_env[sh], why, sizeof why);
                if (ts == KL_TRUTH_HOLDS || (ts == KL_TRUTH_UNKNOWN && t == KL_TRUTH_UNKNOWN)) continue;
                t = ts;
                kl_snprintf(ck->why, sizeof ck->why, "%s", why);
                shape_label(task, &task->checks[sh], ck->shape, sizeof ck->shape);
            }
            if (t == KL_TRUTH_HOLDS) kl_snprintf(ck->shape, sizeof ck->shape, "every check shape and the bench shape");
            else if (t == KL_TRUTH_UNKNOWN && !ck->shape[0]) kl_snprintf(ck->shape, sizeof ck->shape, "%s", bench_label);
            ck->truth = t;
        }
        truth = worse(truth, ck->truth);
    }
    if (out->nmissing) truth = KL_TRUTH_FAILS;
    if (out->requires_unknown) truth = worse(truth, KL_TRUTH_UNKNOWN);
    out->truth = truth;
cleanup:
    for (unsigned s = 0; checks_env && s < nshapes; s++) json_decref(checks_env[s]);
    free(checks_env);
    json_decref(features);
    json_decref(bench);
    if (st != KL_OK) kl_skill_match_release(out);
    return st;
}
