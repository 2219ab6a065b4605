/* The gate as the searches' judge (include/klineage/gate.h, "the seam for the searches"):
 * the backward walk and the forward optimizer ask for judgements through kl_judge_fn, and
 * this is the one that runs the gate. */
#include <stdlib.h>
#include <string.h>

#include "klineage/gate.h"
#include "util/util.h"

kl_status kl_gate_search_prepare(void *gate, const kl_task *task, unsigned n, const char *const *names,
                                 const char *const *texts, kl_error *err)
{
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
