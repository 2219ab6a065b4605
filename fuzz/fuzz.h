/* Shared by the fuzz targets (docs/fuzzing.md): each defines LLVMFuzzerTestOneInput, built
 * either with libFuzzer (clang -fsanitize=fuzzer, fuzz/run.sh) or with driver.c, which runs a
 * folder of inputs through it once (the corpus and the regressions, in every test run). */
#ifndef KL_FUZZ_H
#define KL_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A private scratch folder for targets that need files (created once, per process). */
const char *kl_fuzz_scratch(void);
/* Write data to scratch/name and return the path (static storage, overwritten each call). */
const char *kl_fuzz_write(const char *name, const uint8_t *data, size_t size);

#endif
