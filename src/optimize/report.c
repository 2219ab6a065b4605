/* A run document as a report for people (docs/optimize.md, "The report"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optimize/optimize_int.h"

static const char *str(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* A cell may not hold '|' or a newline. */
static void cell(kl_strbuf *sb, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '|')
            kl_strbuf_adds(sb, "\\|");
        else if (*s == '\n')
            kl_strbuf_addc(sb, ' ');
        else
            kl_strbuf_addc(sb, *s);
    }
}

static void params_cell(kl_strbuf *sb, const json_t *p)
{
    if (!json_is_object(p) || json_object_size(p) == 0) {
        kl_strbuf_adds(sb, "—");
        return;
    }
    char *t = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
    kl_strbuf_addc(sb, '`');
    cell(sb, t ? t : "");
    kl_strbuf_addc(sb, '`');
    free(t);
}

/* The chain of steps from the start to version v: "row-parallel → vectorize". */
static void chain(kl_strbuf *sb, const json_t *versions, json_int_t v)
{
    const char *steps[64];
    unsigned n = 0;
    for (json_int_t i = v; i > 0 && n < 64;) {
        const json_t *x = json_array_get(versions, (size_t)i);
        steps[n++] = str(x, "transform");
        json_t *p = json_object_get(x, "parent");
        i = json_is_integer(p) ? json_integer_value(p) : 0;
    }
    if (!n) {
        kl_strbuf_adds(sb, "no step");
        return;
    }
    for (unsigned k = n; k-- > 0;) kl_strbuf_addf(sb, "%s%s", steps[k], k ? " → " : "");
}

char *kl_optimize_markdown(const char *doc_json)
{
    json_t *d = doc_json ? json_loads(doc_json, 0, NULL) : NULL;
    if (!json_is_object(d) || !json_is_array(json_object_get(d, "rounds"))) {
        json_decref(d);
        return NULL;
    }
    kl_strbuf sb = KL_STRBUF_INIT;
    const json_t *versions = json_object_get(d, "versions");
    kl_strbuf_addf(&sb, "### optimize %s: policy %s\n\n", str(d, "task"), str(d, "policy"));
    kl_strbuf_addf(&sb, "Start `%s`, rewriter `%s`, budget %lld gate call(s), beam %lld, seed %lld", str(d, "start"),
                   str(d, "rewriter"), (long long)json_integer_value(json_object_get(d, "budget")),
                   (long long)json_integer_value(json_object_get(d, "beam")),
                   (long long)json_integer_value(json_object_get(d, "seed")));
    if (!strcmp(str(d, "policy"), "skills")) {
        kl_strbuf_addf(&sb, "; library: %lld card(s)%s",
                       (long long)json_integer_value(json_object_get(json_object_get(d, "library"), "cards")),
                       json_is_true(json_object_get(d, "admitted_only")) ? ", admitted only" : "");
        /* runs stored before the ranking was recorded used ranking 2 */
        json_int_t rk = json_is_integer(json_object_get(d, "ranking")) ? json_integer_value(json_object_get(d, "ranking")) : 2;
        kl_strbuf_addf(&sb, "; ranking %lld", (long long)rk);
    }
    if (!strcmp(str(d, "policy"), "memory"))
        kl_strbuf_addf(&sb, "; memory: %lld earlier attempt(s) of the blind policy on other tasks",
                       (long long)json_integer_value(json_object_get(json_object_get(d, "memory"), "records")));
    if (*str(d, "leave_out")) kl_strbuf_addf(&sb, "; left out: %s", str(d, "leave_out"));
    kl_strbuf_adds(&sb, ".\n\n");

    kl_strbuf_adds(&sb, "| round | from | card | transform | site | parameters | verdict | gain | cumulative |\n");
    kl_strbuf_adds(&sb, "| ---: | --- | --- | --- | --- | --- | --- | ---: | ---: |\n");
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(d, "rounds"), i, r) {
        const json_t *c = json_object_get(r, "candidate"), *j = json_object_get(r, "judgement");
        bool pass = json_is_true(json_object_get(j, "pass"));
        kl_strbuf_addf(&sb, "| %lld | v%lld | ", (long long)json_integer_value(json_object_get(r, "round")),
                       (long long)json_integer_value(json_object_get(r, "from")));
        cell(&sb, *str(c, "card") ? str(c, "card") : "—");
        kl_strbuf_adds(&sb, " | ");
        cell(&sb, str(c, "transform"));
        kl_strbuf_adds(&sb, " | `");
        cell(&sb, str(c, "site"));
        kl_strbuf_adds(&sb, "` | ");
        params_cell(&sb, json_object_get(c, "params"));
        kl_strbuf_adds(&sb, " | ");
        if (pass) {
            kl_strbuf_adds(&sb, "pass");
        } else {
            kl_strbuf_adds(&sb, "rejected at ");
            cell(&sb, str(j, "stage"));
        }
        kl_strbuf_adds(&sb, " | ");
        if (pass && json_is_number(json_object_get(j, "speedup")))
            kl_strbuf_addf(&sb, "%.2fx", json_number_value(json_object_get(j, "speedup")));
        else
            kl_strbuf_adds(&sb, "—");
        kl_strbuf_addf(&sb, " | %.2fx", json_number_value(json_object_get(r, "cum")));
        const char *res = str(r, "result");
        if (!strcmp(res, "new best") || !strcmp(res, "kept")) {
            kl_strbuf_addf(&sb, " (%s, v%lld", res, (long long)json_integer_value(json_object_get(r, "version")));
            if (json_is_integer(json_object_get(r, "variant_of")))
                kl_strbuf_addf(&sb, "; a variant of v%lld, not searched from",
                               (long long)json_integer_value(json_object_get(r, "variant_of")));
            kl_strbuf_adds(&sb, ")");
        }
        kl_strbuf_adds(&sb, " |\n");
    }
    if (!json_array_size(json_object_get(d, "rounds"))) kl_strbuf_adds(&sb, "| — | | | | | | nothing judged | | |\n");
    /* skills: what the run's own judgements advised against (search revision 3) */
    bool any = false;
    json_array_foreach(json_object_get(d, "rounds"), i, r) {
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(r, "deferred_after"), k, t) {
            kl_strbuf_addf(&sb, "%s`%s` after round %lld", any ? "; " : "\nDeferred by this run's own judgements (twice "
                                                                      "since the last new best without paying; until the "
                                                                      "next new best): ",
                           json_string_value(t), (long long)json_integer_value(json_object_get(r, "round")));
            any = true;
        }
    }
    if (any) kl_strbuf_adds(&sb, ".\n");
    /* skills, ranking 3 (search revision 5): what went next as a variant of a step that paid */
    any = false;
    json_array_foreach(json_object_get(d, "rounds"), i, r) {
        const json_t *c = json_object_get(r, "candidate");
        const char *why = str(c, "why"), *at = strstr(why, "a variant of ");
        if (!json_is_true(json_object_get(c, "variant")) || !at) continue;
        char *pj = json_dumps(json_object_get(c, "params"), JSON_COMPACT | JSON_SORT_KEYS);
        kl_strbuf_addf(&sb, "%s`%s` %s from v%lld at round %lld (%s)",
                       any ? "; " : "\nTried next as a variant of a step that made a new best (other parameters): ",
                       str(c, "transform"), pj ? pj : "", (long long)json_integer_value(json_object_get(r, "from")),
                       (long long)json_integer_value(json_object_get(r, "round")), at ? at : "");
        free(pj);
        any = true;
    }
    if (any) kl_strbuf_adds(&sb, ".\n");
    /* skills, ranking 4: a step's parameters searched where its judgements differed (mark_spread),
     * and alternatives that waited once sampled */
    for (int pass = 0; pass < 2; pass++) {
        any = false;
        json_array_foreach(json_object_get(d, "rounds"), i, r) {
            const json_t *c = json_object_get(r, "candidate");
            const char *why = str(c, "why"), *at = strstr(why, "the step's parameters matter here");
            if (pass == 0 ? !(json_is_true(json_object_get(c, "variant")) && at)
                          : !json_is_true(json_object_get(c, "sampled")))
                continue;
            char *pj = json_dumps(json_object_get(c, "params"), JSON_COMPACT | JSON_SORT_KEYS);
            kl_strbuf_addf(&sb, "%s`%s` %s from v%lld at round %lld%s%s",
                           any             ? "; "
                           : pass == 0     ? "\nSearched next because the step's judgements differed (its parameters matter): "
                                           : "\nWaited as an alternative already sampled (two of the step's parameters judged "
                                             "there, gaining alike or no better than the best): ",
                           str(c, "transform"), pj ? pj : "", (long long)json_integer_value(json_object_get(r, "from")),
                           (long long)json_integer_value(json_object_get(r, "round")), pass == 0 ? ", gains " : "",
                           pass == 0 ? at + strlen("the step's parameters matter here ") : "");
            free(pj);
            any = true;
        }
        if (any) kl_strbuf_adds(&sb, ".\n");
    }
    /* skills, ranking 3: what went first because a step closed its door */
    any = false;
    json_array_foreach(json_object_get(d, "rounds"), i, r) {
        const json_t *c = json_object_get(r, "candidate");
        if (!json_is_true(json_object_get(c, "door"))) continue;
        const char *why = str(c, "why"), *at = strstr(why, "its door: ");
        kl_strbuf_addf(&sb, "%s`%s` from v%lld at round %lld (%s)",
                       any ? "; " : "\nTried first because a step closed its door (the step's version no longer proposes it): ",
                       str(c, "transform"), (long long)json_integer_value(json_object_get(r, "from")),
                       (long long)json_integer_value(json_object_get(r, "round")), at ? at + strlen("its door: ") : "");
        any = true;
    }
    if (any) kl_strbuf_adds(&sb, ".\n");

    const char *state = str(d, "state");
    kl_strbuf_adds(&sb, "\n");
    if (!strcmp(state, "done")) {
        const char *why = str(d, "stop_reason");
        kl_strbuf_addf(&sb, "Stopped: %s (%lld gate call(s) used of %lld).\n",
                       !strcmp(why, "budget")     ? "the budget was spent"
                       : !strcmp(why, "patience") ? "no new best for the patience's rounds"
                                                  : why,
                       (long long)json_integer_value(json_object_get(d, "gate_calls")),
                       (long long)json_integer_value(json_object_get(d, "budget")));
        json_int_t rev = opt_search_revision(d);
        if (rev != OPT_SEARCH_REVISION)
            kl_strbuf_addf(&sb,
                           "Made by search revision %lld; this build searches with revision %d (docs/optimize.md): "
                           "`--restart-older` runs it again.\n",
                           (long long)rev, OPT_SEARCH_REVISION);
    } else {
        kl_strbuf_addf(&sb, "Not finished (%s%s%s): run the same command to go on.\n", state,
                       *str(d, "stop_reason") ? ": " : "", str(d, "stop_reason"));
    }
    json_int_t best = json_integer_value(json_object_get(d, "best"));
    const json_t *bv = json_array_get(versions, (size_t)best);
    /* the final check of the returned version, when there is one */
    const json_t *fin = NULL;
    json_t *f;
    json_array_foreach(json_object_get(d, "finals"), i, f) {
        if (json_integer_value(json_object_get(f, "version")) == best &&
            json_is_true(json_object_get(json_object_get(f, "judgement"), "pass")))
            fin = f;
        else if (json_integer_value(json_object_get(f, "version")) > 0 &&
                 !json_is_true(json_object_get(json_object_get(f, "judgement"), "pass")))
            kl_strbuf_addf(&sb, "The final check refused v%lld (rejected at %s: %s).\n",
                           (long long)json_integer_value(json_object_get(f, "version")),
                           str(json_object_get(f, "judgement"), "stage"), str(json_object_get(f, "judgement"), "reason"));
    }
    if (best > 0 && bv) {
        kl_strbuf_addf(&sb, "Returned: v%lld (", (long long)best);
        chain(&sb, versions, best);
        kl_strbuf_addf(&sb, "), %.2fx over the start by the product of its steps", json_number_value(json_object_get(bv, "cum")));
        if (fin) {
            const json_t *j = json_object_get(fin, "judgement");
            kl_strbuf_addf(&sb, "; checked again against the start from scratch%s: %.2fx (same run",
                           json_is_true(json_object_get(fin, "sanitize")) ? " with the sanitizer" : "",
                           json_number_value(json_object_get(j, "speedup")));
            if (*str(j, "device")) kl_strbuf_addf(&sb, ", %s", str(j, "device"));
            if (*str(j, "date")) kl_strbuf_addf(&sb, ", %s", str(j, "date"));
            kl_strbuf_adds(&sb, ")");
        }
        kl_strbuf_adds(&sb, ".\n");
    } else if (!strcmp(state, "done")) {
        kl_strbuf_addf(&sb, "Returned: the start (%s).\n",
                       *str(d, "final_note") ? str(d, "final_note") : "no version passed that was faster");
    }

    const json_t *sk = json_object_get(d, "skipped");
    if (json_array_size(sk)) {
        kl_strbuf_addf(&sb, "\nCards not tried because a condition fails here: %zu (card, site, condition, shape)\n\n",
                       json_array_size(sk));
        kl_strbuf_adds(&sb, "| version | card | site | condition | at shape | why |\n| --- | --- | --- | --- | --- | --- |\n");
        size_t shown = 0;
        json_array_foreach(sk, i, f) {
            if (shown == 20) break;
            shown++;
            kl_strbuf_addf(&sb, "| v%lld | ", (long long)json_integer_value(json_object_get(f, "version")));
            cell(&sb, str(f, "card"));
            kl_strbuf_adds(&sb, " | `");
            cell(&sb, str(f, "site"));
            kl_strbuf_adds(&sb, "` | `");
            cell(&sb, str(f, "predicate"));
            kl_strbuf_adds(&sb, "` | ");
            cell(&sb, *str(f, "shape") ? str(f, "shape") : "static");
            kl_strbuf_adds(&sb, " | ");
            cell(&sb, str(f, "why"));
            kl_strbuf_adds(&sb, " |\n");
        }
        if (json_array_size(sk) > shown)
            kl_strbuf_addf(&sb, "\n… and %zu more (`--json` lists them all).\n", json_array_size(sk) - shown);
    }
    json_decref(d);
    char *out = kl_strbuf_detach(&sb, NULL);
    return out;
}
