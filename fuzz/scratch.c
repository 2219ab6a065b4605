/* A scratch folder for the fuzz targets, removed at exit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "util/util.h"

static char *scratch;

static void remove_scratch(void)
{
    if (scratch) kl_remove_tree(scratch, NULL);
    free(scratch);
    scratch = NULL;
}

const char *kl_fuzz_scratch(void)
{
    if (!scratch) {
        kl_error err = {0};
        if (kl_tempdir("fuzz", &scratch, &err) != KL_OK) {
            fprintf(stderr, "fuzz: %s\n", err.message);
            abort();
        }
        atexit(remove_scratch);
    }
    return scratch;
}

const char *kl_fuzz_write(const char *name, const uint8_t *data, size_t size)
{
    static char path[4096];
    kl_snprintf(path, sizeof path, "%s/%s", kl_fuzz_scratch(), name);
    /* plain stdio: kl_file_write's fsync would make every input cost a disk flush */
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        fprintf(stderr, "fuzz: cannot write %s\n", path);
        abort();
    }
    return path;
}
