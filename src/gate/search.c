/* The gate as the searches' judge (include/klineage/gate.h, "the seam for the searches"):
 * the backward walk and the forward optimizer ask for judgements through kl_judge_fn, and
 * this is the one that runs the gate. */
#include <stdlib.h>
#include <string.h>

#include "gate/gate_int.h"
#include "klineage/gate.h"
#include "util/util.h"

kl_status kl_gate_search_prepare(void *gate, const kl_task *task, unsigned n, const char *const *names,
                                 const char *const *texts, kl_error *err)
{
    if (((kl_gate *)gate)->stand_in) return KL_OK; /* nothing to compile */
    kl_gate_source *srcs = calloc(n, sizeof *srcs);
    kl_compiled **outs = calloc(n, sizeof *outs);
    kl_status st = KL_OK;
    if (!srcs || !outs) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    for (unsigned i = 0; i < n; i++) srcs[i] = (kl_gate_source){names[i], texts[i]};
    st = kl_gate_compile_many(gate, task, n, srcs, outs, err);
    for (unsigned i = 0; i < n; i++) kl_compiled_free(outs[i]);
cleanup:
    free(srcs);
    free(outs);
    return st;
}

kl_status kl_gate_search_judge(void *gate, const kl_task *task, const char *cand_name, const char *cand_text,
                               const char *base_name, const char *base_text, unsigned flags, kl_judgement *out,
                               kl_error *err)
{
    kl_gate_source cand = {cand_name, cand_text};
    kl_gate_source base = {base_name, base_text};
    kl_judge_options jo = {0};
    jo.no_profile = !(flags & KL_JUDGE_PROFILE);
    jo.bench_against_baseline = (flags & KL_JUDGE_BENCH_VS_BASELINE) != 0;
    jo.sanitize = (flags & KL_JUDGE_SANITIZE) != 0;
    kl_verdict *v = NULL;
    kl_status st = kl_gate_judge(gate, task, &cand, base_text ? &base : NULL, &jo, &v, err);
    memset(out, 0, sizeof *out);
    out->speedup = out->cand_ms = out->base_ms = -1;
    if (st == KL_ERR_UNMEASURED) {
        out->unmeasured = true;
        kl_snprintf(out->reason, sizeof out->reason, "%s", err ? err->message : "unmeasured");
        if (v && v->key) kl_snprintf(out->key, sizeof out->key, "%s", v->key);
        kl_verdict_free(v);
        kl_error_clear(err);
        return KL_OK;
    }
    if (st != KL_OK) {
        kl_verdict_free(v);
        return st;
    }
    out->pass = v->pass;
    out->replayed = v->replayed;
    if (v->failed_stage) kl_snprintf(out->stage, sizeof out->stage, "%s", v->failed_stage);
    if (v->reason) kl_snprintf(out->reason, sizeof out->reason, "%s", v->reason);
    if (v->key) kl_snprintf(out->key, sizeof out->key, "%s", v->key);
    if (v->device) kl_snprintf(out->device, sizeof out->device, "%s", v->device);
    if (v->date) kl_snprintf(out->date, sizeof out->date, "%s", v->date);
    out->speedup = v->speedup;
    out->cand_ms = v->median_ms;
    if (v->speedup > 0 && v->median_ms > 0) out->base_ms = v->median_ms * v->speedup;
    kl_verdict_free(v);
    return KL_OK;
}

/* ---- many judgements at once ------------------------------------------------------------------- */

kl_status kl_judge_many_sequential(kl_judge_fn judge, void *user, const kl_task *task, unsigned n,
                                   const kl_judge_request *reqs, kl_judgement *outs, unsigned *done, kl_error *err)
{
    if (done) *done = 0;
    for (unsigned i = 0; i < n; i++) {
        const kl_judge_request *r = &reqs[i];
        memset(&outs[i], 0, sizeof outs[i]);
        outs[i].speedup = outs[i].cand_ms = outs[i].base_ms = -1;
        kl_status st = judge(user, task, r->cand_name, r->cand_text, r->base_name, r->base_text, r->flags, &outs[i], err);
        if (st != KL_OK) return st;
        if (done) *done = i + 1;
    }
    return KL_OK;
}

typedef struct many_ctx {
    kl_gate *gate;
    const kl_task *task;
    const kl_judge_request *reqs;
    kl_judgement *outs;
} many_ctx;

static kl_status judge_one(void *arg, unsigned i, kl_error *err)
{
    many_ctx *m = arg;
    const kl_judge_request *r = &m->reqs[i];
    return kl_gate_search_judge(m->gate, m->task, r->cand_name, r->cand_text, r->base_name, r->base_text, r->flags,
                                &m->outs[i], err);
}

kl_status kl_gate_search_judge_many(void *g, const kl_task *task, unsigned n, const kl_judge_request *reqs,
                                    kl_judgement *outs, unsigned *done, kl_error *err)
{
    kl_gate *gate = g;
    if (done) *done = 0;
    if (n <= 1 || kl_gate_workers(gate) <= 1)
        return kl_judge_many_sequential(kl_gate_search_judge, gate, task, n, reqs, outs, done, err);
    kl_status st = KL_OK;
    kl_status *sts = calloc(n, sizeof *sts);
    kl_error *errs = calloc(n, sizeof *errs);
    const char **names = calloc(2 * (size_t)n, sizeof *names), **texts = calloc(2 * (size_t)n, sizeof *texts);
    if (!sts || !errs || !names || !texts) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    if (gate->mode != KL_GATE_REPLAY && !gate->stand_in) {
        /* compiled once, here, all at once: the workers find the objects in the cache */
        unsigned m = 0;
        for (unsigned i = 0; i < n; i++) {
            names[m] = reqs[i].cand_name, texts[m++] = reqs[i].cand_text;
            bool seen = !reqs[i].base_text;
            for (unsigned k = 0; k < i && !seen; k++) seen = reqs[k].base_text && !strcmp(reqs[k].base_text, reqs[i].base_text);
            if (!seen) names[m] = reqs[i].base_name, texts[m++] = reqs[i].base_text;
        }
        kl_error cerr = {0};
        (void)kl_gate_search_prepare(gate, task, m, names, texts, &cerr); /* each judgement reports its own */
        /* the device document first: no two judgements measure it at once */
        st = kl_gate_device(gate, err);
        if (st != KL_OK) goto cleanup;
    }
    many_ctx ctx = {gate, task, reqs, outs};
    for (unsigned i = 0; i < n; i++) {
        memset(&outs[i], 0, sizeof outs[i]);
        outs[i].speedup = outs[i].cand_ms = outs[i].base_ms = -1;
    }
    (void)kl_gate_parallel(gate, n, judge_one, &ctx, sts, errs, NULL);
    for (unsigned i = 0; i < n; i++) {
        if (sts[i] != KL_OK) {
            st = sts[i];
            if (err) *err = errs[i];
            break;
        }
        if (done) *done = i + 1;
    }
cleanup:
    free(sts);
    free(errs);
    free(names);
    free(texts);
    return st;
}
