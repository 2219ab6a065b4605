/* The task loader: any bytes as task.json, in a folder that also holds a reference.c, a
 * naive.cu and an expert.cu (so the launch() signature checks run), validated with every
 * fault described. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "klineage/task.h"

static const char NAIVE[] =
    "__global__ void k(const float *a, float *c, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) c[i] = a[i]; }\n"
    "extern \"C\" void launch(const float *a, float *c, int n, cudaStream_t s) { k<<<(n + 255) / 256, 256, 0, s>>>(a, c, n); }\n";
static const char REF[] = "void reference(const double *a, double *c, int n) { for (int i = 0; i < n; i++) c[i] = a[i]; }\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        kl_fuzz_write("naive.cu", (const uint8_t *)NAIVE, sizeof NAIVE - 1);
        kl_fuzz_write("expert.cu", (const uint8_t *)NAIVE, sizeof NAIVE - 1);
        kl_fuzz_write("reference.c", (const uint8_t *)REF, sizeof REF - 1);
        ready = 1;
    }
    kl_fuzz_write("task.json", data, size);
    kl_task *t = NULL;
    kl_task_faults faults = KL_TASK_FAULTS_INIT;
    kl_error err = {0};
    if (kl_task_validate(kl_fuzz_scratch(), &t, &faults, &err) == KL_OK) {
        /* every shape's sizes and every argument's count */
        for (unsigned s = 0; s <= t->nchecks; s++) {
            const kl_shape *sh = s < t->nchecks ? &t->checks[s] : &t->bench;
            for (unsigned i = 0; i < t->nargs; i++) {
                int64_t count;
                int v;
                if (t->args[i].dtype == KL_DTYPE_NONE) kl_task_arg_value(t, sh, i, &v, &err);
                else kl_task_arg_count(t, sh, i, &count, &err);
            }
        }
        kl_task_free(t);
    }
    for (unsigned i = 0; i < faults.count; i++) free(kl_task_fault_text(&faults.items[i]));
    kl_task_faults_release(&faults);
    return 0;
}
