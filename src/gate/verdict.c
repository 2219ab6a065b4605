/*
 * Verdicts: the JSON document (docs/verdict-format.md), its key, and the struct read from
 * it — headline figures and one line per stage — so that a live verdict and a replayed
 * one are shown the same way.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gate/gate_int.h"

const char *const kl_gate_stage_names[] = {"compile", "correct", "determinism", "integrity", "stream", "profile",
                                           "sanitize"};
const unsigned kl_gate_stage_count = sizeof kl_gate_stage_names / sizeof kl_gate_stage_names[0];

struct kl_verdict_doc {
    json_t *doc;
    char **summaries; /* one per stage */
};

void kl_verdict_key(const kl_verdict_key_parts *p, char hex[KL_HASH_HEX])
{
    kl_hasher *h = kl_hasher_new();
    kl_hasher_parts(h, KL_VERDICT_FORMAT);
    kl_hasher_parts(h, p->candidate);
    kl_hasher_parts(h, p->baseline);
    kl_hasher_parts(h, p->task_json);
    kl_hasher_parts(h, p->reference);
    kl_hasher_parts(h, p->shapes);
    kl_hasher_parts(h, p->stages);
    kl_hasher_parts(h, p->device);
    kl_hasher_parts(h, p->toolchain);
    kl_hasher_finish(h, hex);
}

json_t *kl_verdict_document(const kl_verdict *v) { return v && v->doc ? v->doc->doc : NULL; }

void kl_verdict_free(kl_verdict *v)
{
    if (!v) return;
    if (v->doc) {
        if (v->doc->summaries)
            for (unsigned i = 0; i < v->nstages; i++) free(v->doc->summaries[i]);
        free(v->doc->summaries);
        json_decref(v->doc->doc);
        free(v->doc);
    }
    free(v->stages);
    free(v);
}

json_t *kl_compiled_json(const kl_compiled *c)
{
    json_t *o = json_object();
    json_object_set_new(o, "ok", json_boolean(c->ok));
    json_object_set_new(o, "cached", json_boolean(c->cached));
    json_object_set_new(o, "seconds", json_real(c->seconds));
    json_object_set_new(o, "hash", c->hash ? json_string(c->hash) : json_null());
    json_object_set_new(o, "nvcc", c->nvcc_version ? json_string(c->nvcc_version) : json_null());
    json_object_set_new(o, "arch", c->arch ? json_string(c->arch) : json_null());
    json_object_set_new(o, "flags", c->flags ? json_string(c->flags) : json_null());
    json_t *ks = json_array();
    for (unsigned i = 0; i < c->nkernels; i++) {
        const kl_kernel_report *k = &c->kernels[i];
        json_array_append_new(ks, json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i}", "name", k->name ? k->name : "",
                                            "demangled", k->demangled ? k->demangled : "", "registers", k->registers,
                                            "smem_static", k->smem_static, "spill_stores", k->spill_stores,
                                            "spill_loads", k->spill_loads, "stack", k->stack, "barriers",
                                            k->barriers));
    }
    json_object_set_new(o, "kernels", ks);
    if (c->error) {
        json_object_set_new(o, "error", json_string(c->error));
        json_object_set_new(o, "error_file", c->error_file ? json_string(c->error_file) : json_null());
        json_object_set_new(o, "error_line", json_integer(c->error_line));
    }
    return o;
}

char *kl_compiled_to_json(const kl_compiled *c)
{
    json_t *o = kl_compiled_json(c);
    char *text = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return text;
}

static double num(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : -1.0;
}

static const char *str(const json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* The short name of a kernel for a line: demangled up to its '(' (templates kept). */
static void kernel_label(kl_strbuf *sb, const json_t *k)
{
    const char *d = str(k, "demangled");
    if (!d || !*d) d = str(k, "name");
    if (!d) d = "?";
    const char *paren = strchr(d, '(');
    kl_strbuf_add(sb, d, paren ? (size_t)(paren - d) : strlen(d));
}

static void summarize_compile(kl_strbuf *sb, const json_t *s)
{
    json_t *ks = json_object_get(s, "kernels");
    kl_strbuf_addf(sb, "%zu kernel%s", json_array_size(ks), json_array_size(ks) == 1 ? "" : "s");
    for (size_t i = 0; i < json_array_size(ks); i++) {
        json_t *k = json_array_get(ks, i);
        kl_strbuf_adds(sb, i ? "; " : ": ");
        kernel_label(sb, k);
        kl_strbuf_addf(sb, " %lld regs, %lld B smem, %lld/%lld B spills, %lld B stack",
                       (long long)json_integer_value(json_object_get(k, "registers")),
                       (long long)json_integer_value(json_object_get(k, "smem_static")),
                       (long long)json_integer_value(json_object_get(k, "spill_stores")),
                       (long long)json_integer_value(json_object_get(k, "spill_loads")),
                       (long long)json_integer_value(json_object_get(k, "stack")));
    }
    if (json_is_true(json_object_get(s, "cached"))) kl_strbuf_adds(sb, " (cached object)");
    else if (num(s, "seconds") >= 0) kl_strbuf_addf(sb, " (nvcc %.2f s)", num(s, "seconds"));
}

static void summarize_correct(kl_strbuf *sb, const json_t *s)
{
    json_t *trials = json_object_get(s, "trials");
    double worst = 0, worst_abs = 0;
    size_t outputs = 0;
    for (size_t i = 0; i < json_array_size(trials); i++) {
        json_t *outs = json_object_get(json_array_get(trials, i), "outputs");
        for (size_t j = 0; j < json_array_size(outs); j++) {
            json_t *o = json_array_get(outs, j);
            if (num(o, "rel_l2") > worst) worst = num(o, "rel_l2");
            if (num(o, "max_abs") > worst_abs) worst_abs = num(o, "max_abs");
            outputs++;
        }
    }
    kl_strbuf_addf(sb, "%zu trials (shapes x seeds), worst rel_l2 %.3g, max_abs %.3g", json_array_size(trials), worst,
                   worst_abs);
    const char *note = str(s, "note");
    if (note) kl_strbuf_addf(sb, "; %s", note);
}

static void summarize_profile(kl_strbuf *sb, const json_t *s)
{
    const json_t *c = json_object_get(s, "candidate");
    kl_strbuf_addf(sb, "median %.4g ms (q1 %.4g, q3 %.4g), %lld reps, timer %s, shape %s", num(c, "median_ms"),
                   num(c, "q1_ms"), num(c, "q3_ms"), (long long)json_integer_value(json_object_get(s, "reps")),
                   str(s, "timer") ? str(s, "timer") : "?", str(s, "shape") ? str(s, "shape") : "?");
    const json_t *b = json_object_get(s, "baseline");
    if (json_is_object(b) && num(s, "speedup") > 0)
        kl_strbuf_addf(sb, "; %.3gx over %s (median %.4g ms)", num(s, "speedup"),
                       str(b, "name") ? str(b, "name") : "the baseline", num(b, "median_ms"));
    const json_t *f = json_object_get(s, "fraction");
    if (num(s, "gbps") >= 0) {
        kl_strbuf_addf(sb, "; %.4g GB/s", num(s, "gbps"));
        if (num(f, "bandwidth") >= 0) kl_strbuf_addf(sb, " (%.0f%% of copy)", 100 * num(f, "bandwidth"));
    }
    if (num(s, "tflops") >= 0) {
        kl_strbuf_addf(sb, ", %.4g TFLOP/s", num(s, "tflops"));
        if (num(f, "compute") >= 0) kl_strbuf_addf(sb, " (%.0f%% of %s)", 100 * num(f, "compute"),
                                                    str(f, "compute_ceiling") ? str(f, "compute_ceiling") : "peak");
    }
}

static void summarize_sanitize(kl_strbuf *sb, const json_t *s)
{
    json_t *tools = json_object_get(s, "tools");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *t = json_array_get(tools, i);
        kl_strbuf_addf(sb, "%s%s %lld", i ? ", " : "", str(t, "tool") ? str(t, "tool") : "?",
                       (long long)json_integer_value(json_object_get(t, "count")));
    }
    kl_strbuf_adds(sb, " reports");
    if (str(s, "shape")) kl_strbuf_addf(sb, " at %s", str(s, "shape"));
}

static char *summarize(const char *name, const json_t *s, kl_stage_state *state)
{
    kl_strbuf sb = KL_STRBUF_INIT;
    if (!json_is_object(s) || json_object_get(s, "skipped")) {
        *state = KL_STAGE_SKIPPED;
        const char *why = str(s, "skipped");
        kl_strbuf_addf(&sb, "not run%s%s", why ? ": " : "", why ? why : "");
    } else if (!json_is_true(json_object_get(s, "ok"))) {
        *state = KL_STAGE_FAILED;
        kl_strbuf_adds(&sb, str(s, "reason") ? str(s, "reason") : "failed");
    } else {
        *state = KL_STAGE_PASSED;
        if (!strcmp(name, "compile")) summarize_compile(&sb, s);
        else if (!strcmp(name, "correct")) summarize_correct(&sb, s);
        else if (!strcmp(name, "profile")) summarize_profile(&sb, s);
        else if (!strcmp(name, "sanitize")) summarize_sanitize(&sb, s);
        else kl_strbuf_adds(&sb, str(s, "detail") ? str(s, "detail") : "ok");
    }
    if (!sb.len) kl_strbuf_adds(&sb, "ok");
    return sb.failed ? (kl_strbuf_release(&sb), NULL) : kl_strbuf_detach(&sb, NULL);
}

kl_status kl_verdict_from_json(json_t *doc, kl_verdict **out, kl_error *err)
{
    *out = NULL;
    if (!json_is_object(doc) || !str(doc, "format") || strcmp(str(doc, "format"), KL_VERDICT_FORMAT) != 0) {
        json_decref(doc);
        return kl_error_set(err, KL_ERR_INVALID, "a verdict document must be an object with \"format\": \"%s\"",
                            KL_VERDICT_FORMAT);
    }
    kl_verdict *v = calloc(1, sizeof *v);
    kl_verdict_doc *d = calloc(1, sizeof *d);
    if (!v || !d) {
        free(v);
        free(d);
        json_decref(doc);
        return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    }
    v->doc = d;
    d->doc = doc;
    v->status = json_is_true(json_object_get(doc, "unmeasured")) ? KL_ERR_UNMEASURED : KL_OK;
    v->pass = json_is_true(json_object_get(doc, "pass"));
    v->key = str(doc, "key");
    v->failed_stage = str(doc, "failed_stage");
    v->reason = str(doc, "reason");
    v->device = str(json_object_get(doc, "device"), "name");
    v->toolchain = str(json_object_get(doc, "toolchain"), "text");
    v->candidate = str(json_object_get(doc, "candidate"), "name");
    v->baseline = str(json_object_get(doc, "baseline"), "name");
    v->date = str(doc, "date");
    v->not_stored = str(doc, "not_stored");
    if (!v->key || (!v->pass && !v->reason)) {
        bool passed = v->pass;
        kl_verdict_free(v);
        return kl_error_set(err, KL_ERR_INVALID, "a verdict document needs \"key\"%s",
                            passed ? "" : " and, when it did not pass, \"reason\"");
    }
    json_t *stages = json_object_get(doc, "stages");
    json_t *prof = json_object_get(stages, "profile");
    v->median_ms = num(json_object_get(prof, "candidate"), "median_ms");
    v->speedup = num(prof, "speedup");
    v->gbps = num(prof, "gbps");
    v->tflops = num(prof, "tflops");
    if (v->status == KL_OK) {
        v->stages = calloc(kl_gate_stage_count, sizeof *v->stages);
        d->summaries = calloc(kl_gate_stage_count, sizeof *d->summaries);
        if (!v->stages || !d->summaries) {
            kl_verdict_free(v);
            return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        }
        v->nstages = kl_gate_stage_count;
        for (unsigned i = 0; i < kl_gate_stage_count; i++) {
            const char *name = kl_gate_stage_names[i];
            d->summaries[i] = summarize(name, json_object_get(stages, name), &v->stages[i].state);
            if (!d->summaries[i]) {
                kl_verdict_free(v);
                return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
            }
            v->stages[i].name = name;
            v->stages[i].summary = d->summaries[i];
        }
    }
    *out = v;
    return KL_OK;
}

kl_status kl_verdict_parse(const char *json, kl_verdict **out, kl_error *err)
{
    *out = NULL;
    json_error_t je;
    json_t *doc = json_loads(json ? json : "", 0, &je);
    if (!doc)
        return kl_error_set(err, KL_ERR_PARSE, "verdict: line %d, column %d: %s", je.line, je.column, je.text);
    return kl_verdict_from_json(doc, out, err);
}

kl_status kl_verdict_unmeasured(const char *key, const char *candidate, const char *device, const char *toolchain,
                                const char *reason, kl_verdict **out, kl_error *err)
{
    json_t *doc = json_pack("{s:s, s:s, s:b, s:b, s:o, s:s, s:{s:s?}, s:{s:s?}, s:{s:s?}, s:{}}", "format",
                            KL_VERDICT_FORMAT, "key", key, "unmeasured", 1, "pass", 0, "failed_stage", json_null(),
                            "reason", reason, "candidate", "name", candidate, "device", "name", device, "toolchain",
                            "text", toolchain, "stages");
    if (!doc) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    return kl_verdict_from_json(doc, out, err);
}

char *kl_verdict_json(const kl_verdict *v, bool pretty)
{
    json_t *doc = kl_verdict_document(v);
    if (!doc) return NULL;
    json_t *copy = json_copy(doc); /* shallow: adds the flags without touching the stored document */
    if (!copy) return NULL;
    if (v->replayed) json_object_set_new(copy, "replayed", json_true());
    if (v->cached) json_object_set_new(copy, "cached", json_true());
    char *s = json_dumps(copy, pretty ? JSON_INDENT(2) : JSON_COMPACT);
    json_decref(copy);
    return s;
}
