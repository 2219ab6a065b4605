/* Skill-card import: any bytes as a card file (one card or an array), imported into a fresh
 * store (validation, merge with what is there); every card that imports is rendered in each
 * format and as an agent-skill folder. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "klineage/skills.h"
#include "klineage/store.h"
#include "util/util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kl_store *store = NULL;
    kl_error err = {0};
    if (kl_store_open(":memory:", &store, &err) != KL_OK) abort();
    const char *path = kl_fuzz_write("cards.json", data, size);
    unsigned n = 0, merged = 0;
    /* twice: the second import merges every card with itself */
    if (kl_skill_import(store, path, &n, &merged, &err) == KL_OK && kl_skill_import(store, path, &n, &merged, &err) == KL_OK) {
        kl_skill_list list = KL_SKILL_LIST_INIT;
        if (kl_skill_list_load(store, &list, &err) == KL_OK) {
            const kl_skill *const *cards = (const kl_skill *const *)list.items;
            static const kl_skill_format formats[] = {KL_SKILL_FORMAT_MARKDOWN, KL_SKILL_FORMAT_JSON};
            for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
                char *text = NULL;
                if (kl_skills_render(cards, list.count, formats[f], &text, &err) == KL_OK) free(text);
            }
            char *dir = kl_path_join(kl_fuzz_scratch(), "agent");
            if (dir) {
                kl_skills_write_agent(cards, list.count, dir, &err);
                kl_remove_tree(dir, NULL);
            }
            free(dir);
            for (unsigned i = 0; i < list.count; i++) {
                free(kl_skill_to_json(list.items[i]));
                free(kl_skill_agent_markdown(list.items[i]));
                kl_skill *back = NULL;
                if (kl_skill_get(store, kl_skill_id(list.items[i]), &back, &err) == KL_OK) kl_skill_free(back);
            }
            kl_skill_list_release(&list);
        }
    }
    kl_store_close(store);
    return 0;
}
