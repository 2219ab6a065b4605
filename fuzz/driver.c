/* Without libFuzzer: run every file named (or every file in each folder named) through the
 * target once. The tests run the committed corpus and the regressions this way. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "util/util.h"

static int run_file(const char *path)
{
    char *data = NULL;
    size_t len = 0;
    kl_error err = {0};
    if (kl_file_read(path, (size_t)64 << 20, &data, &len, &err) != KL_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    LLVMFuzzerTestOneInput((const uint8_t *)data, len);
    free(data);
    return 0;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv)
{
    unsigned runs = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "%s: missing\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(sb.st_mode)) {
            bad |= run_file(argv[i]);
            runs++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) return 1;
        char **names = NULL;
        size_t n = 0;
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, (n + 1) * sizeof *names);
            names[n++] = kl_path_join(argv[i], e->d_name);
        }
        closedir(d);
        qsort(names, n, sizeof *names, by_name);
        for (size_t k = 0; k < n; k++) {
            fprintf(stderr, "%s\n", names[k]);
            bad |= run_file(names[k]);
            runs++;
            free(names[k]);
        }
        free(names);
    }
    printf("%u inputs ran through the target\n", runs);
    return bad;
}
