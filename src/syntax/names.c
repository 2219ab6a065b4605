/* Which names are CUDA facilities: barriers, shuffles, votes, atomics, intrinsics, … */
#include <string.h>

#include "syntax/names.h"

static bool eq(const char *s, size_t n, const char *lit) { return strlen(lit) == n && memcmp(s, lit, n) == 0; }
static bool starts(const char *s, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    return n >= k && memcmp(s, lit, k) == 0;
}
static bool in_list(const char *s, size_t n, const char *const *list)
{
    for (; *list; list++)
        if (eq(s, n, *list)) return true;
    return false;
}

static const char *const barriers[] = {
    "__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or", "__syncwarp",
    "__barrier_sync", "__cluster_barrier_arrive", "__cluster_barrier_wait", NULL};
/* member calls that synchronise a cooperative group or a cuda::barrier */
static const char *const member_barriers[] = {"sync", "arrive_and_wait", "barrier_arrive", "barrier_wait", NULL};
static const char *const fences[] = {"__threadfence", "__threadfence_block", "__threadfence_system", NULL};
static const char *const votes[] = {
    "__ballot_sync", "__any_sync", "__all_sync", "__uni_sync", "__activemask", "__ballot", "__any", "__all",
    "__match_any_sync", "__match_all_sync", "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync",
    "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync", NULL};
static const char *const member_votes[] = {"ballot", "any", "all", "match_any", "match_all", NULL};
static const char *const loads[] = {"__ldg", "__ldcg", "__ldca", "__ldcs", "__ldlu", "__ldcv",
                                    "__stwb", "__stcg", "__stcs", "__stwt", NULL};
static const char *const async_copies[] = {
    "__pipeline_memcpy_async", "__pipeline_commit", "__pipeline_wait_prior", "memcpy_async", "wait_prior", NULL};
static const char *const mma_calls[] = {"load_matrix_sync", "store_matrix_sync", "mma_sync", "bmma_sync",
                                        "fill_fragment", NULL};
static const char *const coop_calls[] = {"this_thread_block", "this_grid", "this_cluster", "tiled_partition",
                                         "coalesced_threads", "this_multi_grid", NULL};
/* fast-math and rounding intrinsics, half and bfloat16 arithmetic */
static const char *const math[] = {
    "__expf", "__exp10f", "__logf", "__log2f", "__log10f", "__sinf", "__cosf", "__tanf", "__sincosf", "__powf",
    "__fdividef", "__saturatef", "__frcp_rn", "__fsqrt_rn", "__frsqrt_rn", "__fmaf_rn", "__fmaf_rz",
    "__fmaf_ru", "__fmaf_rd", "__fmaf_ieee_rn", "__fma_rn", "__fma_rz", "__fma_ru", "__fma_rd",
    "rsqrtf", "rsqrt", "rcbrtf", "rcbrt", "rhypotf", "rhypot", "rnormf", "rnorm3df", "rnorm4df", "normf",
    "norm3df", "norm4df", "__fsqrt_rz", "__fsqrt_ru", "__fsqrt_rd", "__drcp_rn", "__dsqrt_rn",
    "hexp", "hexp2", "hexp10", "hlog", "hlog2", "hlog10", "hsqrt", "hrsqrt", "hrcp", "hsin", "hcos",
    "h2exp", "h2exp2", "h2exp10", "h2log", "h2log2", "h2log10", "h2sqrt", "h2rsqrt", "h2rcp", "h2sin", "h2cos",
    "__hadd", "__hadd2", "__hsub", "__hsub2", "__hmul", "__hmul2", "__hdiv", "__h2div", "__hfma", "__hfma2",
    "__hfma_relu", "__hfma2_relu", "__hneg", "__hneg2", "__habs", "__habs2", "__hmax", "__hmax2", "__hmin",
    "__hmin2", "__hadd_sat", "__hmul_sat", NULL};

/* __fadd_rn, __dmul_rz, __fdiv_ru, __frcp_rd, …: __[fd]<op>_r[nzud] */
static bool rounding_intrinsic(const char *s, size_t n)
{
    static const char *const ops[] = {"add", "sub", "mul", "div", "rcp", "sqrt", "rsqrt", "fma", NULL};
    if (n < 7 || s[0] != '_' || s[1] != '_' || (s[2] != 'f' && s[2] != 'd')) return false;
    if (s[n - 3] != '_' || s[n - 2] != 'r' || !strchr("nzud", s[n - 1])) return false;
    return in_list(s + 3, n - 6, ops);
}

bool kl_call_kind(const char *s, size_t n, bool member, kl_use_kind *kind)
{
    if (member) {
        if (in_list(s, n, member_barriers)) return *kind = KL_USE_BARRIER, true;
        if (starts(s, n, "shfl")) return *kind = KL_USE_SHUFFLE, true;
        if (in_list(s, n, member_votes)) return *kind = KL_USE_WARP_VOTE, true;
        return false;
    }
    if (in_list(s, n, barriers)) return *kind = KL_USE_BARRIER, true;
    if (in_list(s, n, fences)) return *kind = KL_USE_FENCE, true;
    if (starts(s, n, "__shfl")) return *kind = KL_USE_SHUFFLE, true;
    if (in_list(s, n, votes) || eq(s, n, "reduce")) return *kind = KL_USE_WARP_VOTE, true;
    if (starts(s, n, "atomic") && n > 6 && s[6] >= 'A' && s[6] <= 'Z') return *kind = KL_USE_ATOMIC, true;
    if (in_list(s, n, loads)) return *kind = KL_USE_LOAD_INTRINSIC, true;
    if (in_list(s, n, async_copies) || starts(s, n, "cp_async") || starts(s, n, "__cp_async"))
        return *kind = KL_USE_ASYNC_COPY, true;
    if (in_list(s, n, mma_calls)) return *kind = KL_USE_MMA, true;
    if (in_list(s, n, coop_calls)) return *kind = KL_USE_COOP_GROUPS, true;
    if (in_list(s, n, math) || rounding_intrinsic(s, n)) return *kind = KL_USE_MATH_INTRINSIC, true;
    return false;
}

bool kl_scope_kind(const char *s, size_t n, kl_use_kind *kind)
{
    if (eq(s, n, "wmma") || eq(s, n, "nvcuda::wmma") || eq(s, n, "::nvcuda::wmma")) return *kind = KL_USE_MMA, true;
    if (eq(s, n, "cooperative_groups") || eq(s, n, "::cooperative_groups") || starts(s, n, "cooperative_groups::"))
        return *kind = KL_USE_COOP_GROUPS, true;
    return false;
}

bool kl_is_vector_type(const char *s, size_t n)
{
    static const char *const bases[] = {"char", "uchar", "short", "ushort", "int", "uint", "long", "ulong",
                                        "longlong", "ulonglong", "float", "double", NULL};
    static const char *const others[] = {"half2", "__half2", "nv_bfloat162", "__nv_bfloat162", "__nv_fp8x2_e4m3",
                                         "__nv_fp8x4_e4m3", "__nv_fp8x2_e5m2", "__nv_fp8x4_e5m2", NULL};
    if (in_list(s, n, others)) return true;
    if (n < 2 || s[n - 1] < '2' || s[n - 1] > '4') return false;
    return in_list(s, n - 1, bases);
}

bool kl_is_vector_maker(const char *s, size_t n)
{
    return n > 5 && memcmp(s, "make_", 5) == 0 && kl_is_vector_type(s + 5, n - 5);
}

bool kl_ptx_kind(const char *s, size_t n, kl_use_kind *kind)
{
    if (starts(s, n, "cp.async") || starts(s, n, "cp.reduce.async")) return *kind = KL_USE_ASYNC_COPY, true;
    if (starts(s, n, "mma.") || starts(s, n, "wgmma.") || starts(s, n, "ldmatrix") || starts(s, n, "stmatrix"))
        return *kind = KL_USE_MMA, true;
    if (starts(s, n, "bar.") || starts(s, n, "barrier.") || eq(s, n, "bar")) return *kind = KL_USE_BARRIER, true;
    if (starts(s, n, "shfl")) return *kind = KL_USE_SHUFFLE, true;
    if (starts(s, n, "vote") || starts(s, n, "redux.sync") || starts(s, n, "match.")) return *kind = KL_USE_WARP_VOTE, true;
    if (starts(s, n, "atom.") || starts(s, n, "red.")) return *kind = KL_USE_ATOMIC, true;
    if (starts(s, n, "ld.global.nc")) return *kind = KL_USE_LOAD_INTRINSIC, true;
    if (starts(s, n, "membar") || starts(s, n, "fence")) return *kind = KL_USE_FENCE, true;
    if (starts(s, n, "ex2.approx") || starts(s, n, "lg2.approx") || starts(s, n, "rsqrt.approx") ||
        starts(s, n, "rcp.approx") || starts(s, n, "sin.approx") || starts(s, n, "cos.approx") ||
        starts(s, n, "tanh.approx"))
        return *kind = KL_USE_MATH_INTRINSIC, true;
    return false;
}
