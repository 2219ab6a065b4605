/* Private to src/task: the expression evaluator, the dtype codecs and the fault list. */
#ifndef KL_TASK_INT_H
#define KL_TASK_INT_H

#include "klineage/task.h"

/* ---- integer expressions (expr.c) ---------------------------------------------------------
 * Grammar:  expr := term (('+'|'-') term)* ; term := unary (('*'|'/'|'%') unary)* ;
 *           unary := '-' unary | '+' unary | primary ; primary := INT | IDENT | '(' expr ')'.
 * C semantics on int64: '/' truncates toward zero, '%' takes the dividend's sign.
 * Overflow, division by zero, unknown identifiers and syntax errors fail with the 1-based
 * column of the offending token in err ("column 7: division by zero"). */
kl_status kl_expr_eval(const char *expr, const char *const *names, const int64_t *values, unsigned n, int64_t *out,
                       kl_error *err);

/* ---- faults -------------------------------------------------------------------------------- */

/* Append one fault (strings copied). line/column 0: not known. */
kl_status kl_faults_add(kl_task_faults *f, const char *file, unsigned line, unsigned column, const char *key,
                        const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* ---- launch() signature (signature.c) --------------------------------------------------------
 * Parse the kernel file at path and check its extern "C" launch() against the task's args;
 * every difference becomes a fault on `file_label` (the path as shown to people). `key` is the
 * task.json key that named the file ("naive", "expert") for faults not tied to an argument. */
kl_status kl_task_check_launch(const kl_task *task, const char *path, const char *key, kl_task_faults *faults,
                               kl_error *err);

/* An init bound at shape: an integer expression over the sizes or, failing that, a plain
 * decimal number ("-0.5"). */
kl_status kl_task_bound(const kl_task *task, const kl_shape *shape, const char *text, double *out, kl_error *err);

/* ---- number codecs (fill.c) ------------------------------------------------------------------ */
uint16_t kl_double_to_half_bits(double x);  /* IEEE binary16, round to nearest even */
uint16_t kl_double_to_bf16_bits(double x);  /* bfloat16, round to nearest even */
double kl_half_bits_to_double(uint16_t h);
double kl_bf16_bits_to_double(uint16_t h);

#endif
