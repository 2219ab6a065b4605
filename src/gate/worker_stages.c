/* The worker's stages (worker_int.h): correct (every check shape against the reference, fresh
 * inputs, guard zones), determinism (the same outputs again, inputs untouched), the stream
 * contract, and the timed profile against the baseline. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "gate/gate_int.h"
#include "gate/measure.h"
#include "gate/sandbox.h"
#include "gate/worker.h"
#include "klineage/task.h"
#include "gate/worker_int.h"

/* ---- stage: correct --------------------------------------------------------------------------- */

int worker__stage_correct(worker__worker *w, const worker__gate_opts *o, bool *passed)
{
    w->stage = "correct";
    json_t *entries = json_array();
    json_object_set_new(w->result, "correct", entries);
    *passed = true;
    bool need_baseline = false;
    for (unsigned k = 0; k < w->nshapes; k++)
        if (!w->shapes[k].reference) need_baseline = true;
    /* a baseline that stands in for the reference is validated against it first */
    bool baseline_valid = false;
    if (need_baseline && w->base.present) {
        json_t *bc = json_array();
        json_object_set_new(w->result, "baseline_correct", bc);
        baseline_valid = true;
        unsigned validated = 0;
        for (unsigned k = 0; k < w->nshapes; k++) {
            if (!w->shapes[k].reference) continue;
            worker__argset s;
            int rc = worker__argset_init(w, &s, w->shapes[k].shape, GUARD_BYTES);
            bool ok = false;
            json_t *outs = json_array();
            if (!rc) rc = worker__argset_fill(w, &s, w->seeds[0]);
            if (!rc) rc = worker__argset_upload(w, &s, 0);
            if (!rc) rc = worker__run_once(w, &w->base, &s);
            if (!rc) rc = worker__compare_outputs(w, &s, NULL, 0, outs, &ok);
            json_array_append_new(bc, json_pack("{s:s, s:I, s:b, s:o}", "shape", s.shape->label, "seed",
                                                (json_int_t)w->seeds[0], "ok", ok, "outputs", outs));
            worker__argset_release(w, &s);
            if (rc) return -1;
            if (!ok) baseline_valid = false;
            validated++;
        }
        if (!validated) baseline_valid = false;
    }

    for (unsigned k = 0; k < w->nshapes; k++) {
        const worker__shape_req *req = &w->shapes[k];
        for (unsigned si = 0; si < worker__shape_seeds(w, req); si++) {
            worker__argset s, b;
            memset(&b, 0, sizeof b);
            if (worker__argset_init(w, &s, req->shape, GUARD_BYTES) || worker__argset_fill(w, &s, w->seeds[si])) {
                worker__argset_release(w, &s);
                return -1;
            }
            bool use_base = !req->reference;
            if (use_base && baseline_valid) {
                if (worker__argset_init(w, &b, req->shape, GUARD_BYTES) || worker__argset_fill(w, &b, w->seeds[si]) ||
                    worker__argset_upload(w, &b, 0) || worker__run_once(w, &w->base, &b)) {
                    worker__argset_release(w, &s);
                    worker__argset_release(w, &b);
                    return -1;
                }
            }
            for (int pass = 0; pass < 2; pass++) {
                json_t *outs = json_array();
                json_t *e = json_pack("{s:s, s:I, s:s}", "shape", req->shape->label, "seed", (json_int_t)w->seeds[si],
                                      "poison", pass == 0 ? "nan" : "value");
                json_array_append_new(entries, e);
                bool ok = false;
                if (use_base && !baseline_valid) {
                    /* the shape cannot be checked: the task's limit, not the candidate's failure */
                    json_object_set_new(e, "checked_against", json_string("none"));
                    json_object_set_new(e, "ok", json_false());
                    json_decref(outs);
                    worker__argset_release(w, &s);
                    worker__argset_release(w, &b);
                    return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false,
                                "%s is too large for the reference (reference_max_flops, or slower than %.0f s on "
                                "this host), and %s: it cannot be checked",
                                req->shape->label, o->reference_budget_s,
                                w->base.present ? "the baseline failed its own check at the referenced shapes"
                                                : "there is no baseline to stand in");
                }
                int rc = worker__argset_upload(w, &s, pass);
                w->smem_byte = pass == 0 ? 0xFF : 0x7B; /* NaN, then a large finite value */
                if (!rc) rc = worker__run_once(w, &w->cand, &s);
                if (!rc) rc = worker__compare_outputs(w, &s, use_base ? &b : NULL, pass, outs, &ok);
                json_object_set_new(e, "checked_against", json_string(use_base ? "baseline" : "reference"));
                if (use_base) json_object_set_new(e, "detail", json_string("checked against baseline"));
                json_object_set_new(e, "ok", json_boolean(ok));
                json_object_set_new(e, "outputs", outs);
                if (rc) {
                    worker__argset_release(w, &s);
                    worker__argset_release(w, &b);
                    return -1;
                }
                if (!ok) *passed = false;
            }
            worker__argset_release(w, &s);
            worker__argset_release(w, &b);
        }
    }
    return 0;
}

/* ---- stage: determinism ------------------------------------------------------------------------ */

/* The largest job shape compared with the reference, and the smallest. */
void worker__pick_shapes(worker__worker *w, const kl_shape **large_ref, const kl_shape **small_ref, const kl_shape **largest)
{
    *large_ref = *small_ref = *largest = NULL;
    int64_t lmax = -1, smin = INT64_MAX, amax = -1;
    for (unsigned k = 0; k < w->nshapes; k++) {
        int64_t n = worker__shape_elements(w, w->shapes[k].shape);
        if (n > amax) {
            amax = n;
            *largest = w->shapes[k].shape;
        }
        if (!w->shapes[k].reference) continue;
        if (n > lmax) {
            lmax = n;
            *large_ref = w->shapes[k].shape;
        }
        if (n < smin) {
            smin = n;
            *small_ref = w->shapes[k].shape;
        }
    }
}

/* One determinism trial: shared memory poisoned with smem_byte first (-1: left as the previous
 * launch left it). */
static int det_trial(worker__worker *w, worker__argset *s, json_t *trials, const char *name, int smem_byte, bool *all_ok)
{
    json_t *outs = json_array();
    bool ok = false;
    int rc = worker__argset_upload(w, s, 0);
    w->smem_byte = smem_byte;
    if (!rc) rc = worker__run_once(w, &w->cand, s);
    if (!rc) rc = worker__compare_outputs(w, s, NULL, 0, outs, &ok);
    json_array_append_new(trials, json_pack("{s:s, s:s, s:I, s:b, s:o}", "trial", name, "shape", s->shape->label, "seed",
                                            (json_int_t)s->seed, "ok", ok, "outputs", outs));
    if (!ok) *all_ok = false;
    return rc;
}

/* Smaller shapes run right after a large one in the determinism stage. */
#define SMALL_AFTER_LARGE 3

int worker__stage_determinism(worker__worker *w, const worker__gate_opts *o, bool *passed)
{
    w->stage = "determinism";
    json_t *doc = json_object();
    json_t *trials = json_array();
    json_object_set_new(w->result, "determinism", doc);
    json_object_set_new(doc, "trials", trials);
    *passed = true;
    const kl_shape *mid, *small, *large;
    worker__pick_shapes(w, &mid, &small, &large);
    /* the repeat trials at the largest reference shape other than the timed one: the correct
     * stage already ran that one at every seed and poison, and a repeat there costs the most */
    const kl_shape *timed = o->profile.on ? kl_task_shape(w->task, o->profile.shape) : NULL;
    if (timed && mid == timed) {
        int64_t best = -1;
        for (unsigned k = 0; k < w->nshapes; k++) {
            const kl_shape *sh = w->shapes[k].shape;
            int64_t n = worker__shape_elements(w, sh);
            if (w->shapes[k].reference && sh != timed && n > best) {
                best = n;
                mid = sh;
            }
        }
    }
    if (!mid) {
        json_object_set_new(doc, "ok", json_false());
        json_object_set_new(doc, "detail", json_string("no job shape is compared with the reference"));
        *passed = false;
        return 0;
    }
    uint64_t s1 = w->seeds[0], s2 = w->nseeds > 1 ? w->seeds[1] : w->seeds[0] + 1;
    kl_strbuf why = KL_STRBUF_INIT;
    worker__argset s, t;
    memset(&t, 0, sizeof t);
    int rc = worker__argset_init(w, &s, mid, GUARD_BYTES);
    /* 1. the same inputs twice: the same bits (exact tasks) or within tolerance */
    if (!rc) rc = worker__argset_fill(w, &s, s1);
    if (!rc) rc = det_trial(w, &s, trials, "first run", 0xFF, passed);
    void **first = NULL;
    if (!rc) {
        first = calloc(w->task->nargs, sizeof *first);
        if (!first) rc = worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
        for (unsigned i = 0; !rc && i < w->task->nargs; i++) {
            if (!s.got[i]) continue;
            first[i] = malloc(s.bytes[i] ? s.bytes[i] : 1);
            if (!first[i]) rc = worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
            else memcpy(first[i], s.got[i], s.bytes[i]);
        }
    }
    /* shared memory now holds zeros: a kernel that reads it unwritten gives other bits */
    if (!rc) rc = det_trial(w, &s, trials, "same inputs again", 0x00, passed);
    if (!rc) {
        bool bitwise = true;
        for (unsigned i = 0; i < w->task->nargs; i++) {
            const kl_arg *a = &w->task->args[i];
            if (!first || !first[i]) continue;
            int64_t fd;
            int64_t nd = kl_compare_bits(a->dtype, s.got[i], first[i], s.counts[i], &fd);
            if (!nd) continue;
            bitwise = false;
            kl_compare_result r;
            kl_error err = {0};
            kl_compare_typed(a->dtype, s.got[i], first[i], s.counts[i], &w->tol, &r, &err);
            if (w->tol.exact || !r.ok) {
                *passed = false;
                if (!why.len)
                    kl_strbuf_addf(&why, "two runs on the same inputs differ: '%s' at %s, %lld elements, first at %lld%s",
                                   a->name, mid->label, (long long)nd, (long long)fd,
                                   w->tol.exact ? " (the task is exact)" : " (beyond the tolerance)");
            }
        }
        json_object_set_new(doc, "bitwise_repeatable", json_boolean(bitwise));
    }
    if (first) {
        for (unsigned i = 0; i < w->task->nargs; i++) free(first[i]);
        free(first);
    }
    /* 2. the same buffers, new values: an answer cached by pointer fails */
    if (!rc) rc = worker__argset_fill(w, &s, s2);
    if (!rc) rc = det_trial(w, &s, trials, "same buffers, new inputs", 0x7B, passed);
    if (!rc && !*passed && !why.len)
        kl_strbuf_addf(&why, "wrong after the same buffers were refilled with new inputs (an answer cached across calls?)");
    worker__argset_release(w, &s);
    /* 3. fresh buffers at a shifted address: the allocator hands freed addresses back, so
     * the shift is what makes every pointer new */
    if (!rc) rc = worker__argset_init(w, &t, mid, 3 * GUARD_BYTES);
    if (!rc) rc = worker__argset_fill(w, &t, s1);
    if (!rc) {
        bool before = *passed;
        rc = det_trial(w, &t, trials, "fresh shifted buffers", 0xFF, passed);
        if (!rc && before && !*passed && !why.len) kl_strbuf_addf(&why, "wrong in freshly allocated, shifted buffers");
    }
    worker__argset_release(w, &t);
    /* 4. the smaller shapes right after a large one, shared memory left as the large run left
     * it: stale shared memory or state shows there (up to SMALL_AFTER_LARGE of them, smallest
     * first, each after its own large run) */
    unsigned small_after_large = 0;
    if (!rc && large && small && large != small) {
        const kl_shape *done[SMALL_AFTER_LARGE];
        for (unsigned round = 0; !rc && round < SMALL_AFTER_LARGE; round++) {
            /* the smallest referenced shape not tried yet, smaller than the large one */
            const kl_shape *pick = NULL;
            int64_t pick_n = INT64_MAX, large_n = worker__shape_elements(w, large);
            for (unsigned k = 0; k < w->nshapes; k++) {
                const kl_shape *sh = w->shapes[k].shape;
                int64_t n = worker__shape_elements(w, sh);
                bool seen = false;
                for (unsigned q = 0; q < round; q++) seen |= done[q] == sh;
                if (!w->shapes[k].reference || seen || sh == large || n >= large_n || n >= pick_n) continue;
                pick = sh;
                pick_n = n;
            }
            if (!pick) break;
            done[round] = pick;
            worker__argset L;
            rc = worker__argset_init(w, &L, large, GUARD_BYTES);
            if (!rc) rc = worker__argset_fill(w, &L, s1);
            if (!rc) rc = worker__argset_upload(w, &L, 0);
            w->smem_byte = 0xFF;
            if (!rc) rc = worker__run_once(w, &w->cand, &L);
            worker__argset_release(w, &L);
            if (!rc) rc = worker__argset_init(w, &t, pick, GUARD_BYTES);
            if (!rc) rc = worker__argset_fill(w, &t, s2);
            if (!rc) {
                bool before = *passed;
                rc = det_trial(w, &t, trials, "small shape after a large one", -1, passed);
                if (!rc && before && !*passed && !why.len)
                    kl_strbuf_addf(&why, "wrong at %s right after a run at %s (state left from the larger run?)",
                                   pick->label, large->label);
                if (!rc) small_after_large++;
            }
            worker__argset_release(w, &t);
        }
    }
    /* how strong the evidence is: the gate stores no pass made on weaker evidence */
    if (!rc) {
        unsigned want_small = 0;
        int64_t large_n = large ? worker__shape_elements(w, large) : 0;
        for (unsigned k = 0; large && k < w->nshapes; k++)
            if (w->shapes[k].reference && w->shapes[k].shape != large && worker__shape_elements(w, w->shapes[k].shape) < large_n)
                want_small++;
        if (want_small > SMALL_AFTER_LARGE) want_small = SMALL_AFTER_LARGE;
        json_object_set_new(doc, "evidence",
                            json_pack("{s:b, s:i, s:i, s:b, s:b}", "smem_poisoned",
                                      w->poison_smem && !w->smem_poison_failed, "small_after_large",
                                      (int)small_after_large, "small_after_large_wanted", (int)want_small,
                                      "repeat", 1, "complete",
                                      w->poison_smem && !w->smem_poison_failed && small_after_large >= want_small));
    }
    if (!rc) {
        json_object_set_new(doc, "ok", json_boolean(*passed));
        if (*passed)
            json_object_set_new(doc, "detail",
                                json_string("repeatable, right after refilling the same buffers, in fresh shifted "
                                            "buffers and after a larger shape"));
        else
            json_object_set_new(doc, "detail", json_string(why.len ? kl_strbuf_str(&why) : "a trial failed"));
    }
    kl_strbuf_release(&why);
    return rc;
}

/* ---- stage: stream contract -------------------------------------------------------------------- */

int worker__stage_stream(worker__worker *w, const worker__gate_opts *o, const kl_shape *shape, bool *passed)
{
    w->stage = "stream";
    json_t *doc = json_object();
    json_object_set_new(w->result, "stream", doc);
    json_object_set_new(doc, "shape", json_string(shape->label));
    *passed = true;
    kl_strbuf why = KL_STRBUF_INIT;
    worker__argset s;
    int rc = worker__argset_init(w, &s, shape, GUARD_BYTES);
    if (!rc) rc = worker__argset_fill(w, &s, w->seeds[0]);
    void **early = NULL;
    if (!rc) {
        early = calloc(w->task->nargs, sizeof *early);
        if (!early) rc = worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
        for (unsigned i = 0; !rc && i < w->task->nargs; i++)
            if (s.got[i] && !(early[i] = malloc(s.bytes[i] ? s.bytes[i] : 1)))
                rc = worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    }
    const unsigned trials = 3;
    for (unsigned tr = 0; !rc && tr < trials && *passed; tr++) {
        rc = worker__argset_upload(w, &s, 0);
        if (!rc) rc = worker__rtc(w, w->rt.timer_begin(), "starting the timer");
        if (!rc) rc = worker__launch(w, &w->cand, &s);
        if (!rc) rc = worker__rtc(w, w->rt.stream_sync(w->stream), "synchronizing the launch stream");
        /* "now" on the GPU's clock: a marker kernel on the runtime's own high-priority stream;
         * a kernel of the candidate's that ends after it started was left running */
        if (!rc) rc = worker__rtc(w, w->rt.mark(), "marking the synchronize on the GPU's clock");
        int idle = 1;
        if (!rc) rc = worker__rtc(w, w->rt.device_idle(50, &idle), "querying the device");
        if (!rc) rc = worker__argset_read(w, &s);
        for (unsigned i = 0; !rc && i < w->task->nargs; i++)
            if (s.got[i]) memcpy(early[i], s.got[i], s.bytes[i]);
        kl_rt_timing t;
        if (!rc) rc = worker__rtc(w, w->rt.timer_end(&t), "stopping the timer"); /* synchronizes the device */
        if (!rc) rc = worker__argset_read(w, &s);
        if (rc) break;
        if (!idle) {
            *passed = false;
            kl_strbuf_addf(&why, "work left running on another stream: the device was still busy after the given "
                                 "stream was synchronized");
            break;
        }
        if (t.timer == KL_RT_TIMER_CUPTI && t.marked && t.mark_ns &&
            t.last_kernel_end_ns > t.mark_ns + (uint64_t)(o->stream_margin_us * 1e3)) {
            *passed = false;
            kl_strbuf_addf(&why, "work left running on another stream: a kernel ended %.1f us after the given stream "
                                 "was synchronized",
                           (double)(t.last_kernel_end_ns - t.mark_ns) * 1e-3);
            break;
        }
        for (unsigned i = 0; i < w->task->nargs; i++) {
            if (!s.got[i]) continue;
            int64_t first;
            int64_t nd = kl_compare_bits(w->task->args[i].dtype, early[i], s.got[i], s.counts[i], &first);
            if (nd) {
                *passed = false;
                kl_strbuf_addf(&why, "outputs were incomplete when the given stream was synchronized: '%s' changed in "
                                     "%lld elements afterwards, first at %lld (work left running on another stream)",
                               w->task->args[i].name, (long long)nd, (long long)first);
                break;
            }
        }
    }
    if (early) {
        for (unsigned i = 0; i < w->task->nargs; i++) free(early[i]);
        free(early);
    }
    worker__argset_release(w, &s);
    if (!rc) {
        json_object_set_new(doc, "ok", json_boolean(*passed));
        json_object_set_new(doc, "trials", json_integer(trials));
        json_object_set_new(doc, "detail",
                            json_string(*passed ? "outputs complete after synchronizing only the given stream; the "
                                                  "device idle then"
                                                : kl_strbuf_str(&why)));
    }
    kl_strbuf_release(&why);
    return rc;
}

/* ---- stage: profile -------------------------------------------------------------------------- */

static json_t *times_doc(const double *x, unsigned n, bool with_times, kl_stats *st)
{
    kl_error err = {0};
    if (kl_stats_compute(x, n, st, &err) != KL_OK) return json_null();
    json_t *d = json_pack("{s:o, s:o, s:o, s:o, s:o, s:I}", "median_ms", worker__jreal(st->median), "q1_ms", worker__jreal(st->q1), "q3_ms",
                          worker__jreal(st->q3), "min_ms", worker__jreal(st->min), "max_ms", worker__jreal(st->max), "reps", (json_int_t)n);
    if (with_times) {
        json_t *a = json_array();
        for (unsigned i = 0; i < n; i++) json_array_append_new(a, worker__jreal(x[i]));
        json_object_set_new(d, "times_ms", a);
    }
    return d;
}

/* One timed repetition inside a batch: inout buffers restored, L2 flushed, a window around
 * one launch. */
static int timed_rep(worker__worker *w, const worker__profile_opts *p, worker__launcher *L, worker__argset *s, worker__dbuf *pristine)
{
    for (unsigned i = 0; i < w->task->nargs; i++)
        if (pristine[i].base && worker__rtc(w, w->rt.d2d(s->dev[i].ptr, pristine[i].base, s->bytes[i]), "restoring an inout buffer"))
            return -1;
    if (p->flush_l2 && worker__rtc(w, w->rt.l2_flush(), "flushing L2")) return -1;
    if (worker__rtc(w, w->rt.batch_open(), "starting the timer")) return -1;
    if (worker__launch(w, L, s)) return -1;
    return worker__rtc(w, w->rt.batch_close(), "stopping the timer");
}

/* Up to `rounds` rounds of the nl launchers in turn (candidate, baseline, candidate, …) in one
 * batch: CUPTI is flushed once for all of them. The device times go to times[l][first + r] and
 * the windows' host times to host[l][first + r] (times NULL: warm-up, dropped); a round is not
 * started once `deadline` (kl_now) has passed and at least KL_PROFILE_FLOOR_REPS rounds are in.
 * *done: the rounds measured.
 *
 * With CUPTI each window is bracketed by markers on the GPU's clock (runtime.h), so a window's
 * records are its own. A candidate window with no kernel in it ran no kernel (copies and memsets
 * are not the task's work): counted in *no_kernel; the stage fails. The timer is at fault when a
 * window's markers did not come back, when a baseline window holds no kernel, or when a candidate
 * window holds none while CUPTI handed over records without timestamps: the batch is measured
 * again, up to PROFILE_BATCH_TRIES times, and then the worker fails as a harness error, which is
 * not a verdict. */
#define PROFILE_BATCH_TRIES 3
static int profile_batch(worker__worker *w, const worker__profile_opts *p, worker__launcher **Ls, unsigned nl, worker__argset *sets, worker__dbuf **pristine,
                         unsigned rounds, double **times, double **host, unsigned first, double deadline,
                         kl_rt_timing *tbuf, unsigned *no_kernel, unsigned *done)
{
    *done = 0;
    for (unsigned attempt = 1;; attempt++) {
        if (worker__rtc(w, w->rt.batch_begin(rounds * nl), "starting a batch of timed windows")) return -1;
        unsigned r = 0;
        for (; r < rounds; r++) {
            if (times && first + r >= KL_PROFILE_FLOOR_REPS && kl_now() >= deadline) break;
            for (unsigned l = 0; l < nl; l++)
                if (timed_rep(w, p, Ls[l], &sets[l], pristine[l])) return -1;
        }
        unsigned nw = 0;
        if (worker__rtc(w, w->rt.batch_end(tbuf, &nw), "reading the timer")) return -1;
        if (nw != r * nl)
            return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "the timer returned %u windows for %u", nw, r * nl);
        w->tm.profile_batches++;
        unsigned unmarked = 0, base_empty = 0, cand_empty = 0, incomplete = r ? tbuf[0].incomplete : 0;
        for (unsigned k = 0; w->timer == KL_RT_TIMER_CUPTI && k < r; k++)
            for (unsigned l = 0; l < nl; l++) {
                const kl_rt_timing *t = &tbuf[k * nl + l];
                if (!t->marked) unmarked++;
                else if (t->kernels == 0 && l == 0) cand_empty++;
                else if (t->kernels == 0) base_empty++;
            }
        bool fault = unmarked || base_empty || (cand_empty && incomplete);
        if (times && fault) {
            if (attempt < PROFILE_BATCH_TRIES) {
                w->tm.profile_retries++;
                continue;
            }
            return worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false,
                        "the timer could not attribute the device work of %u round(s), %u times in a row: %u "
                        "window(s) without their markers, %u baseline window(s) without a kernel, %u candidate "
                        "window(s) without a kernel, %u record(s) CUPTI handed over without timestamps; nothing is "
                        "recorded",
                        r, attempt, unmarked, base_empty, cand_empty, incomplete);
        }
        for (unsigned k = 0; times && k < r; k++)
            for (unsigned l = 0; l < nl; l++) {
                times[l][first + k] = tbuf[k * nl + l].ms;
                /* the host time beyond the task's device work (copies to and from the host
                 * are not that work: a launch that computes on the host between copies
                 * shows here) */
                host[l][first + k] = tbuf[k * nl + l].host_ms - tbuf[k * nl + l].device_ms;
                if (l == 0) host[2][first + k] = tbuf[k * nl + l].device_ms;
            }
        if (times) *no_kernel += cand_empty;
        *done = r;
        return 0;
    }
}

/* Rounds per batch once min_reps are in: the stopping rule is looked at between batches. */
#define PROFILE_BATCH_ROUNDS 10

int worker__stage_profile(worker__worker *w, const worker__gate_opts *o, bool *passed)
{
    w->stage = "profile";
    double t_setup = kl_now();
    const worker__profile_opts *p = &o->profile;
    const kl_shape *shape = kl_task_shape(w->task, p->shape);
    if (!shape) return worker__fail(w, KL_WORKER_EXIT_JOB, NULL, false, "job: stages.profile.shape: no shape \"%s\"", p->shape);
    json_t *doc = json_object();
    json_object_set_new(w->result, "profile", doc);
    json_object_set_new(doc, "timer", json_string(w->timer == KL_RT_TIMER_CUPTI ? "cupti" : "events"));
    json_object_set_new(doc, "shape", json_string(shape->label));
    json_object_set_new(doc, "flush_l2", json_boolean(p->flush_l2));
    *passed = true;

    worker__launcher *Ls[2] = {&w->cand, w->base.present ? &w->base : NULL};
    unsigned nl = Ls[1] ? 2 : 1;
    worker__argset sets[2];
    worker__dbuf *pristine[2] = {NULL, NULL};
    double *times[2] = {NULL, NULL}, *host[3] = {NULL, NULL, NULL}; /* host[2]: the candidate's device work */
    memset(sets, 0, sizeof sets);
    unsigned cap = (unsigned)p->max_reps, n = 0, no_kernel = 0;
    unsigned batch_max = (unsigned)p->min_reps > PROFILE_BATCH_ROUNDS ? (unsigned)p->min_reps : PROFILE_BATCH_ROUNDS;
    if ((unsigned)p->warmup > batch_max) batch_max = (unsigned)p->warmup;
    kl_rt_timing *tbuf = calloc((size_t)batch_max * 2, sizeof *tbuf);
    int rc = tbuf ? 0 : worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
    for (unsigned l = 0; !rc && l < nl; l++) {
        rc = worker__argset_init(w, &sets[l], shape, GUARD_BYTES);
        if (!rc) rc = worker__argset_fill(w, &sets[l], w->seeds[0]);
        if (!rc) rc = worker__argset_upload(w, &sets[l], 0);
        if (!rc) {
            pristine[l] = calloc(w->task->nargs, sizeof *pristine[l]);
            times[l] = calloc(cap, sizeof *times[l]);
            host[l] = calloc(cap, sizeof *host[l]);
            if (l == 0) host[2] = calloc(cap, sizeof *host[2]);
            if (!pristine[l] || !times[l] || !host[l] || !host[2])
                rc = worker__fail(w, KL_WORKER_EXIT_HARNESS, NULL, false, "out of memory");
        }
        for (unsigned i = 0; !rc && i < w->task->nargs; i++) {
            if (w->task->args[i].role != KL_ROLE_INOUT || !sets[l].bytes[i]) continue;
            rc = worker__rtc(w, w->rt.malloc(&pristine[l][i].base, sets[l].bytes[i]), "allocating an inout copy");
            if (!rc) rc = worker__rtc(w, w->rt.d2d(pristine[l][i].base, sets[l].dev[i].ptr, sets[l].bytes[i]), "copying an inout buffer");
        }
    }
    /* the pool is idle by now (every reference was waited for); make sure nothing of it runs
     * beside the timed launches */
    kl_pool_wait_idle(w->pool);
    w->tm.profile_setup = kl_now() - t_setup;
    /* warm-up */
    double t_warm = kl_now();
    unsigned got = 0;
    if (!rc && p->warmup >= 1)
        rc = profile_batch(w, p, Ls, nl, sets, pristine, (unsigned)p->warmup, NULL, NULL, 0, 0, tbuf, &no_kernel, &got);
    w->tm.profile_warmup = kl_now() - t_warm;
    /* interleaved: candidate, baseline, candidate, baseline …, in batches; the stopping rule
     * between batches: at least min_reps, then until both medians have settled */
    double t0 = kl_now(), deadline = t0 + p->max_seconds;
    kl_profile_rule rule = {(unsigned)p->min_reps, cap, p->max_seconds, p->settle_rel};
    kl_profile_stop stop = KL_PROFILE_GO_ON;
    double rse = INFINITY;
    while (!rc && stop == KL_PROFILE_GO_ON) {
        unsigned want = n < rule.min_reps ? rule.min_reps - n : PROFILE_BATCH_ROUNDS;
        if (want > cap - n) want = cap - n;
        if (want > batch_max) want = batch_max;
        rc = profile_batch(w, p, Ls, nl, sets, pristine, want, times, host, n, deadline, tbuf, &no_kernel, &got);
        if (rc) break;
        n += got;
        const double *series[2] = {times[0], times[1]};
        stop = kl_profile_should_stop(&rule, series, nl, n, kl_now() - t0, &rse);
        if (stop == KL_PROFILE_GO_ON && got < want) stop = KL_PROFILE_MAX_SECONDS; /* cut by the deadline */
    }
    w->tm.profile_timed = kl_now() - t0;
    w->tm.profile_reps = n;
    w->tm.profile_rse = rse;
    const char *stopped = kl_profile_stop_name(stop);
    w->tm.profile_stopped = stopped;
    bool settled = stop == KL_PROFILE_SETTLED;
    if (!rc) {
        kl_stats sc, sb;
        json_object_set_new(doc, "reps", json_integer(n));
        json_object_set_new(doc, "stopped", json_string(stopped));
        json_object_set_new(doc, "settled", json_boolean(settled));
        json_object_set_new(doc, "median_rse", worker__jreal(rse));
        json_object_set_new(doc, "candidate", times_doc(times[0], n, true, &sc));
        if (nl == 2) {
            json_object_set_new(doc, "baseline", times_doc(times[1], n, true, &sb));
            json_object_set_new(doc, "baseline_name",
                                json_string(w->base.builtin ? w->base.builtin_name : "baseline object"));
            if (sc.median > 0) json_object_set_new(doc, "speedup", worker__jreal(sb.median / sc.median));
        }
        kl_strbuf why = KL_STRBUF_INIT;
        if (no_kernel) {
            *passed = false;
            kl_strbuf_addf(&why, "no kernel ran in %u of %u timed launches (copies and memsets are not the task's work)",
                           no_kernel, n);
        }
        /* host work the device timer does not see: the window's host time beyond its device
         * work, at its least over the repetitions (a wait for a GPU shared with others is not
         * there every time; work the launch does on the host is) */
        if (w->timer == KL_RT_TIMER_CUPTI && n > 0) {
            double unseen = INFINITY;
            for (unsigned k = 0; k < n; k++)
                if (host[0][k] < unseen) unseen = host[0][k];
            json_object_set_new(doc, "host_unseen_ms", worker__jreal(unseen));
            kl_stats sd;
            json_object_set_new(doc, "candidate_device_work", times_doc(host[2], n, false, &sd));
            double allowed = o->host_slack_ms > sd.median ? o->host_slack_ms : sd.median;
            if (o->host_slack_ms > 0 && unseen > allowed)
                kl_strbuf_addf(&why, "%sthe launch spent at least %.3g ms on the host beyond its device work (median "
                                     "%.3g ms) in every one of %u timed launches: work done on the host, and copies to "
                                     "or from it, are not the task's",
                               why.len ? "; " : "", unseen, sd.median, n);
        }
        double bytes = worker__shape_cost(w, shape, w->task->cost_bytes), flops = worker__shape_cost(w, shape, w->task->cost_flops);
        double sec = sc.median * 1e-3;
        if (sec > 0 && bytes >= 0) {
            double gbs = bytes / sec / 1e9;
            json_object_set_new(doc, "bytes", json_real(bytes));
            json_object_set_new(doc, "gbs", worker__jreal(gbs));
            if (o->copy_gbs > 0) {
                json_object_set_new(doc, "frac_copy", worker__jreal(gbs / o->copy_gbs));
                if (gbs > o->copy_gbs * o->slack_bytes)
                    kl_strbuf_addf(&why, "%sfaster than the device ceiling: %.0f GB/s moved, the copy ceiling is %.0f GB/s",
                                   why.len ? "; " : "", gbs, o->copy_gbs);
            }
        }
        if (sec > 0 && flops >= 0) {
            double tf = flops / sec / 1e12;
            double peak = o->tensor_tflops > o->fma_tflops ? o->tensor_tflops : o->fma_tflops;
            json_object_set_new(doc, "flops", json_real(flops));
            json_object_set_new(doc, "tflops", worker__jreal(tf));
            if (peak > 0) {
                json_object_set_new(doc, "frac_peak", worker__jreal(tf / peak));
                if (tf > peak * o->slack_flops)
                    kl_strbuf_addf(&why, "%sfaster than the device ceiling: %.1f TFLOP/s, the peak is %.1f TFLOP/s",
                                   why.len ? "; " : "", tf, peak);
            }
        }
        if (why.len) *passed = false;
        json_object_set_new(doc, "ok", json_boolean(*passed));
        json_object_set_new(doc, "detail", json_string(why.len ? kl_strbuf_str(&why) : "timed"));
        kl_strbuf_release(&why);
    }
    for (unsigned l = 0; l < 2; l++) {
        if (pristine[l])
            for (unsigned i = 0; i < w->task->nargs; i++)
                if (pristine[l][i].base) w->rt.free(pristine[l][i].base);
        free(pristine[l]);
        free(times[l]);
        free(host[l]);
        if (l == 0) free(host[2]);
        worker__argset_release(w, &sets[l]);
    }
    free(tbuf);
    return rc;
}
