/* Admission records (kind "skill-admission", key the card id): what a roundtrip showed of a card,
 * kept beside it so that storing its lineages again does not lose it (skills.h). */
#include <stdlib.h>
#include <string.h>

#include "skills/skills_int.h"

#define ADMISSION_KIND "skill-admission"

const char *kl_admission_verdict(double gain, double recorded)
{
    if (!(gain >= 1.0)) return "lost";
    if (recorded > 0 && gain < recorded / KL_ADMIT_TOLERANCE) return "lost";
    return "reproduced";
}

/* The status from the trials: "admitted" when one reproduced the gain, "rejected" when one was
 * judged and none did, "untried" when none was judged (not-applicable trials say why a card was
 * not tried somewhere; they count for neither). */
static const char *status_of(const json_t *trials)
{
    bool judged = false, reproduced = false;
    size_t i;
    json_t *t;
    json_array_foreach(trials, i, t) {
        const char *v = kl_sk_str(t, "verdict");
        if (!strcmp(v, "reproduced")) reproduced = true;
        if (strcmp(v, "not-applicable") != 0) judged = true;
    }
    return reproduced ? "admitted" : judged ? "rejected" : "untried";
}

/* A copy of an admission with the trials on task `without` left out and the status recomputed. */
static json_t *admission_without(const json_t *adm, const char *without)
{
    json_t *a = json_deep_copy(adm);
    json_t *trials = json_object_get(a, "trials");
    if (!json_is_array(trials)) {
        trials = json_array();
        json_object_set_new(a, "trials", trials);
    }
    if (without && *without)
        for (size_t i = json_array_size(trials); i-- > 0;)
            if (!strcmp(kl_sk_str(json_array_get(trials, i), "task"), without)) json_array_remove(trials, i);
    json_object_set_new(a, "status", json_string(status_of(trials)));
    if (!json_object_get(a, "tolerance")) json_object_set_new(a, "tolerance", json_real(KL_ADMIT_TOLERANCE));
    return a;
}

kl_status kl_sk_apply_admission(kl_store *store, const char *id, const char *without, char **card_json, kl_error *err)
{
    char *text = NULL;
    kl_status st = kl_store_get(store, ADMISSION_KIND, id, &text, err);
    if (st == KL_ERR_NOT_FOUND) {
        kl_error_clear(err);
        return KL_OK;
    }
    if (st != KL_OK) return st;
    json_t *adm = json_loads(text, 0, NULL), *card = json_loads(*card_json, 0, NULL);
    free(text);
    if (!json_is_object(adm) || !json_is_object(card)) {
        json_decref(adm), json_decref(card);
        return kl_error_set(err, KL_ERR_PARSE, "skill %s: the stored admission or card is not a JSON object", id);
    }
    json_object_set_new(card, "admission", admission_without(adm, without));
    json_decref(adm);
    kl_skill *c = NULL;
    char origin[200];
    kl_snprintf(origin, sizeof origin, "skill %s with its admission", id);
    st = kl_skill_from_json(card, origin, &c, err);
    json_decref(card);
    if (st != KL_OK) return st;
    char *out = kl_skill_to_json(c);
    kl_skill_free(c);
    if (!out) return kl_error_set(err, KL_ERR_NOMEM, "out of memory");
    free(*card_json);
    *card_json = out;
    return KL_OK;
}

kl_status kl_skill_admission_put(kl_store *store, const char *id, const char *admission_json, kl_error *err)
{
    char *card = NULL, *text = NULL, *out = NULL;
    json_t *adm = NULL, *cj = NULL;
    kl_skill *c = NULL;
    kl_status st = KL_OK;
    KL_TRY(kl_store_get(store, "skill", id, &card, err));
    json_error_t je;
    adm = json_loads(admission_json, 0, &je);
    if (!json_is_object(adm)) {
        st = kl_error_set(err, KL_ERR_INVALID, "skill %s: admission: expected a JSON object (%s)", id, je.text);
        goto cleanup;
    }
    cj = json_loads(card, 0, NULL);
    if (!json_is_object(cj)) {
        st = kl_error_set(err, KL_ERR_PARSE, "stored skill %s is not a JSON object", id);
        goto cleanup;
    }
    json_t *clean = admission_without(adm, NULL);
    json_object_set(cj, "admission", clean);
    text = json_dumps(clean, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(clean);
    char origin[200];
    kl_snprintf(origin, sizeof origin, "skill %s with its admission", id);
    /* validated before anything is stored: a bad trial leaves the store as it was */
    KL_TRY(kl_skill_from_json(cj, origin, &c, err));
    out = kl_skill_to_json(c);
    if (!text || !out) {
        st = kl_error_set(err, KL_ERR_NOMEM, "out of memory");
        goto cleanup;
    }
    KL_TRY(kl_store_put(store, ADMISSION_KIND, id, text, err));
    st = kl_store_put(store, "skill", id, out, err);
cleanup:
    free(card), free(text), free(out);
    kl_skill_free(c);
    json_decref(adm), json_decref(cj);
    return st;
}
