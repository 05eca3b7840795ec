/* Integer GEMM family: 8-bit x 8-bit -> exact int32 accumulation, with a requantising, a float
 * or a raw int32 epilogue; its packing, sum, im2col and depthwise kernels.
 *
 *   acc[z][m][n] = sum_k A[z][m][k] * B[z][k][n]                  (raw 8-bit values, int32)
 *   adj = acc - za[m] * colsum(B)[n] - zb[n] * rowsum(A)[m] + K * za[m] * zb[n]
 *       = sum_k (A - za) (B - zb)                                  (exact, modulo 2^32 like int32)
 *   EPI 0: C = adj                                                 (MatMulInteger, ConvInteger)
 *   EPI 1: C = saturate(rint(clamp((adj + bias) * (s_row * s_col / s_y))) + y_zp)  (QLinear*)
 *   EPI 2: C = (adj [+ int bias]) * (s_row * s_col) [+ float bias]  (MatMulIntegerToFloat, QGemm)
 *
 * "row" parameters (za, rowsum, s_row, a row bias) are indexed by the global row
 * gm = z1*rs1 + z2*rs2 + m, "column" ones (zb, colsum, s_col, a column bias) by
 * gn = z1*cs1 + z2*cs2 + n, each with a stride (0: per tensor, 1: per row / column), so the
 * weights' per-channel parameters work on either side (MatMul: B's columns; conv: A's rows).
 * rint rounds half to even (the default rounding mode), as ONNX QuantizeLinear and
 * onnxruntime's requantisation (MlasRequantizeOutput) do; the float32 multiplier is computed in
 * the order onnxruntime uses (s_row * s_col, then / s_y).
 *
 * Layouts (defines; shapes and strides are run-time arguments):
 *   A  8-bit row-major rows lda apart (activations in place, or conv weights [M, K]); rows past
 *      M are clamped and never stored.
 *   B  packed in panels of NR columns, zero padded (qpack_b / qim2col at run time, the host at
 *      plan time for weights):
 *        KC=1     B[(panel*K + k)*NR + c]                               one k per step
 *        KC=2,4,16  B[((panel*KQ + k/KC)*NR + c)*KC + k%KC], KQ = ceil(K/KC)  KC k per step
 *      or (B_DIRECT, KC=1 or 2) row-major [K, N] rows ldb apart, read in place (a 1x1 convolution's
 *      input): two rows interleaved into the pairs' lanes in the kernel.
 *   A16 (KC=2): A holds the 8-bit values widened to short (constant weights, at plan time).
 *   C  row-major, ldc apart; only m < M, n < N stored.
 *
 * The tile (MR rows x NR = VW * NV columns), by KC:
 *   KC=1   NV vectors of VW columns of int accumulators per row; each k one broadcast row value
 *          times a sign/zero-extended VW-column vector of B.
 *          QFA: the same products as floats, summed in blocks of QFB k (exact: QFB * max|a*b|
 *          <= 2^24), each block converted to int32: the float multiply-add rate.
 *   KC=2   NV vectors of VW int32 lanes per row; each k pair one broadcast (A[k], A[k+1]) as
 *          2*VW 16-bit lanes times the pairs of VW columns, even and odd lanes multiplied and
 *          summed: the shape of a paired 16-bit multiply-add, written as a portable expression
 *          (a compiler may form the instruction from it; pocl's LLVM 15 does so only where each
 *          operand has one use, not in a register tile).
 *   KC=16  MR x NR int8 accumulators over 16 k at a time: 16 k of a row of A and of a column of
 *          B widened to short16, multiplied in int32 as even and odd lanes and added in pairs
 *          (the shape of a paired 16-bit multiply-add instruction: two 16-bit products summed
 *          into each int32 lane), reduced across lanes at the end. Every lane is used however few columns
 *          there are: the CPU family takes it for products of at most 4 columns
 *          (lower/qgemm_kernel.fit_columns); wider, KC=1 measured 2-4x faster on pocl (its
 *          compiler does not form the paired multiply-add from this).
 *   KC=4   (GPU family) MR x NR scalar accumulators, each step a 4-wide dot product: the
 *          cl_khr_integer_dot_product builtin dot(char4/uchar4, char4/uchar4) where the device
 *          compiler defines that extension, else the same sum written out.
 * Accumulation is exact int32 in every form (products of 8-bit values, no saturating forms).
 */
#ifndef TA
#define TA char
#endif
#ifndef TB
#define TB char
#endif
#ifndef TC
#define TC int
#endif
#ifndef EPI
#define EPI 0
#endif
#ifndef MR
#define MR 4
#endif
#ifndef VW
#define VW 8
#endif
#ifndef NV
#define NV 1
#endif
#ifndef KC
#define KC 1
#endif
#ifndef KU
#define KU 1
#endif
#ifndef BIAS_FLOAT
#define BIAS_FLOAT 0
#endif
#ifndef A16
#define A16 0
#endif
#ifndef B_DIRECT
#define B_DIRECT 0
#endif
#ifndef QFA
#define QFA 0  /* KC=1: exact float accumulation in blocks of QFB k */
#endif
#ifndef QFB
#define QFB 256
#endif
/* A as stored: the 8-bit values, or (A16, KC=2: constant conv weights widened at plan time) the
 * same values as shorts, so that a row's k pair is one 32-bit broadcast load. */
#if A16
typedef short ta_mem;
#else
typedef TA ta_mem;
#endif
/* The widest vector the tile uses, in bits, as clang's min_vector_width: without it LLVM's x86
 * backend, which prefers 256-bit vectors on AVX-512 targets, splits 512-bit int vectors in two. */
#if defined(__clang__) && defined(__has_attribute)
#if __has_attribute(min_vector_width)
#define QGEMM_ATTR __attribute__((min_vector_width(KC == 1 || KC == 2 ? 32 * VW : 512)))
#endif
#endif
#ifndef QGEMM_ATTR
#define QGEMM_ATTR
#endif
#define NR (VW * NV)

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define STR_(x) #x
#define PRAGMA(x) _Pragma(STR_(x))

#define FLAG_ZA 1
#define FLAG_ZB 2
#define FLAG_BIAS 4
#define FLAG_YZP 8

#if BIAS_FLOAT
typedef float tbias;
#else
typedef int tbias;
#endif

/* The epilogue's arguments, the same list in every kernel that stores a result. */
#define EPI_PARAMS                                                                           \
    __global const int* rowsum, __global const int* colsum,                                  \
    __global const TA* zpa, int zpa_s, __global const TB* zpb, int zpb_s,                    \
    __global const tbias* bias, int bias_rs, int bias_cs,                                    \
    __global const float* s_row, int sr_s, __global const float* s_col, int sc_s,            \
    __global const float* s_y, __global const TC* y_zp, int qlo, int qhi, int flags
#define EPI_ARGS rowsum, colsum, zpa, zpa_s, zpb, zpb_s, bias, bias_rs, bias_cs, s_row, sr_s, s_col, sc_s, \
    s_y, y_zp, qlo, qhi, flags

/* One result: zero-point adjustment (unsigned arithmetic: exact modulo 2^32, no overflow UB),
 * then the epilogue EPI, stored at C[ci]. */
inline void q_store(__global TC* C, int ci, int acc, int gm, int gn, int K, EPI_PARAMS)
{
    uint v = (uint)acc;
    const int za = (flags & FLAG_ZA) ? (int)zpa[gm * zpa_s] : 0;
    const int zb = (flags & FLAG_ZB) ? (int)zpb[gn * zpb_s] : 0;
    if (flags & FLAG_ZA) v -= (uint)za * (uint)colsum[gn];
    if (flags & FLAG_ZB) v -= (uint)zb * (uint)rowsum[gm];
    if ((flags & (FLAG_ZA | FLAG_ZB)) == (FLAG_ZA | FLAG_ZB)) v += (uint)K * (uint)za * (uint)zb;
    int adj = (int)v;
#if !BIAS_FLOAT
    if (flags & FLAG_BIAS) adj += bias[gm * bias_rs + gn * bias_cs];
#endif
#if EPI == 0
    C[ci] = (TC)adj;
#elif EPI == 1
    const float mul = (s_row[gm * sr_s] * s_col[gn * sc_s]) / s_y[0];
    const int z = (flags & FLAG_YZP) ? (int)y_zp[0] : 0;
    float f = (float)adj * mul;
    const float lo = (float)(qlo - z), hi = (float)(qhi - z);
    f = f < lo ? lo : (f > hi ? hi : f);  /* NaN-free: adj and mul are finite */
    /* round half to even without a builtin call: |f| <= 510 after the clamp, and adding then
     * subtracting 1.5 * 2^23 rounds to an integer in the default rounding mode (as rint) */
    const float magic = 12582912.0f;
    f = (f + magic) - magic;
    C[ci] = (TC)((int)f + z);
#else
    float f = (float)adj * (s_row[gm * sr_s] * s_col[gn * sc_s]);
#if BIAS_FLOAT
    if (flags & FLAG_BIAS) f += bias[gm * bias_rs + gn * bias_cs];
#endif
    C[ci] = (TC)f;
#endif
}

#if (KC == 1 || KC == 2) && VW != 3
/* The epilogue on VW consecutive columns of one row at once (the same arithmetic as q_store, lane
 * by lane): a column parameter is one vector load (stride 1) or a broadcast (stride 0). Scalar
 * stores would cost more than the products where K is small (a 1x1 convolution, K = 64: about 30
 * scalar operations per result against 4 vector multiply-adds per 16 results). */
#define Q_VEC_EPILOGUE 1
#define INTV_ CAT(int, VW)
#define UINTV_ CAT(uint, VW)
#define FLTV_ CAT(float, VW)
typedef INTV_ qv_int_u __attribute__((aligned(4)));
typedef FLTV_ qv_flt_u __attribute__((aligned(4)));
typedef CAT(TB, VW) qv_tb_u __attribute__((aligned(1)));
typedef CAT(TC, VW) qv_tc;
typedef qv_tc qv_tc_u __attribute__((aligned(1)));
#if defined(__clang__)
#define QCVT(x, T) __builtin_convertvector((x), T)
#define QAS(x, T) __builtin_astype((x), T)
#else
#define QCVT(x, T) CAT(convert_, T)(x)
#define QAS(x, T) CAT(as_, T)(x)
#endif

/* True where the vector path can take this store: every column stride 0 or 1. */
inline bool q_vec_ok(int zpb_s, int bias_cs, int sc_s)
{
    return (uint)zpb_s <= 1u && (uint)bias_cs <= 1u && (uint)sc_s <= 1u;
}

inline void q_store_v(__global TC* C, int ci, INTV_ acc, int gm, int gn, int K, EPI_PARAMS)
{
    UINTV_ v = QAS(acc, UINTV_);
    const int za = (flags & FLAG_ZA) ? (int)zpa[gm * zpa_s] : 0;
    UINTV_ zb = (UINTV_)0;
    if (flags & FLAG_ZB)
        zb = zpb_s ? QCVT(QCVT(*(const __global qv_tb_u*)(zpb + gn), INTV_), UINTV_) : (UINTV_)((uint)(int)zpb[0]);
    if (flags & FLAG_ZA) v -= (uint)za * QAS(*(const __global qv_int_u*)(colsum + gn), UINTV_);
    if (flags & FLAG_ZB) v -= zb * (uint)rowsum[gm];
    if ((flags & (FLAG_ZA | FLAG_ZB)) == (FLAG_ZA | FLAG_ZB)) v += ((uint)K * (uint)za) * zb;
    INTV_ adj = QAS(v, INTV_);
    const int bi = gm * bias_rs + gn * bias_cs;
#if !BIAS_FLOAT
    if (flags & FLAG_BIAS) adj += bias_cs ? *(const __global qv_int_u*)(bias + bi) : (INTV_)bias[bi];
#endif
    const FLTV_ sc = sc_s ? *(const __global qv_flt_u*)(s_col + gn) : (FLTV_)s_col[0];
#if EPI == 0
    *(__global qv_tc_u*)(C + ci) = QCVT(adj, qv_tc);
#elif EPI == 1
    const FLTV_ mul = ((FLTV_)s_row[gm * sr_s] * sc) / (FLTV_)s_y[0];
    const int z = (flags & FLAG_YZP) ? (int)y_zp[0] : 0;
    FLTV_ f = QCVT(adj, FLTV_) * mul;
    const FLTV_ lo = (FLTV_)((float)(qlo - z)), hi = (FLTV_)((float)(qhi - z)), magic = (FLTV_)12582912.0f;
    f = f < lo ? lo : f;  /* component-wise selects, as q_store */
    f = f > hi ? hi : f;
    f = (f + magic) - magic;
    *(__global qv_tc_u*)(C + ci) = QCVT(QCVT(f, INTV_) + (INTV_)z, qv_tc);
#else
    FLTV_ f = QCVT(adj, FLTV_) * ((FLTV_)s_row[gm * sr_s] * sc);
#if BIAS_FLOAT
    if (flags & FLAG_BIAS) f += bias_cs ? *(const __global qv_flt_u*)(bias + bi) : (FLTV_)bias[bi];
#endif
    *(__global qv_tc_u*)(C + ci) = QCVT(f, qv_tc);
#endif
}
#endif

#if KC == 4
typedef CAT(TA, 4) ta4;
typedef CAT(TB, 4) tb4;
#ifdef cl_khr_integer_dot_product
#pragma OPENCL EXTENSION cl_khr_integer_dot_product : enable
#define QDOT(a, b) ((int)dot((a), (b)))
#else
#define QDOT(a, b) ((int)(a).x * (int)(b).x + (int)(a).y * (int)(b).y + (int)(a).z * (int)(b).z \
                    + (int)(a).w * (int)(b).w)
#endif
#elif KC == 16
typedef CAT(TA, 16) ta16;
typedef CAT(TB, 16) tb16;
typedef ta16 ta16_u __attribute__((aligned(1)));
#if defined(__clang__)
#define TO_S16(x) __builtin_convertvector((x), short16)
#define TO_I8(x) __builtin_convertvector((x), int8)
#else
#define TO_S16(x) convert_short16(x)
#define TO_I8(x) convert_int8(x)
#endif
#define PAIR_DOT(a, b) (TO_I8((a).even) * TO_I8((b).even) + TO_I8((a).odd) * TO_I8((b).odd))
#elif KC == 2
/* Pairs of k: 2*VW 16-bit lanes (VW columns x 2 k) against a broadcast pair of A, multiplied
 * as even and odd lanes in int32 and summed per column: the shape of a paired 16-bit
 * multiply-add (x86 vpmaddwd: two exact 16-bit products summed into each int32 lane). 32 lanes
 * (VW=16) exceed OpenCL C's vector sizes: clang's extended vectors (pocl), VW=8 elsewhere. */
typedef CAT(int, VW) intv;
#if defined(__clang__)
typedef TB tb2v __attribute__((ext_vector_type(2 * VW)));
typedef short s2v __attribute__((ext_vector_type(2 * VW)));
typedef tb2v tb2v_u __attribute__((aligned(1)));
typedef CAT(TA, 2) ta2;
typedef ta2 ta2_u __attribute__((aligned(1)));
#define TO_S2V(x) __builtin_convertvector((x), s2v)
#define TO_INTV(x) __builtin_convertvector((x), intv)
#if A16
typedef int qa_pair_u __attribute__((aligned(2)));
#define A_PAIR(p) (*(const __global qa_pair_u*)(p))
#else
#define A_PAIR(p) __builtin_astype(__builtin_convertvector(*(const __global ta2_u*)(p), short2), int)
#endif
#define AS_S2V(x) __builtin_astype((x), s2v)
#elif VW == 8
typedef CAT(TB, 16) tb2v_u;
typedef short16 s2v;
#define TO_S2V(x) convert_short16(x)
#define TO_INTV(x) convert_int8(x)
#if A16
#define A_PAIR(p) as_int(vload2(0, (p)))
#else
#define A_PAIR(p) as_int(convert_short2(vload2(0, (p))))
#endif
#define AS_S2V(x) as_short16(x)
#else
#error "KC=2 needs VW=8, or clang's extended vector types"
#endif
#define PMADD(a, b) (TO_INTV((a).even) * TO_INTV((b).even) + TO_INTV((a).odd) * TO_INTV((b).odd))
#if B_DIRECT
/* B read in place, row-major [K, N] rows ldb apart (a 1x1 stride-1 convolution's input: no
 * im2col pass): two rows' VW columns interleaved into the pairs' lane order. */
typedef CAT(TB, VW) qb_row;
typedef qb_row qb_row_u __attribute__((aligned(1)));
#if defined(__clang__) && VW == 16
#define PAIR_LANES(lo, hi) __builtin_shufflevector((lo), (hi), 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, \
    23, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)
#elif defined(__clang__) && VW == 8
#define PAIR_LANES(lo, hi) __builtin_shufflevector((lo), (hi), 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15)
#elif VW == 8
#define PAIR_LANES(lo, hi) ((CAT(TB, 16))((lo).s0, (hi).s0, (lo).s1, (hi).s1, (lo).s2, (hi).s2, (lo).s3, (hi).s3, \
    (lo).s4, (hi).s4, (lo).s5, (hi).s5, (lo).s6, (hi).s6, (lo).s7, (hi).s7))
#else
#error "B_DIRECT needs VW 8 or 16"
#endif
/* Pair kq of columns c..c+VW-1 (row 2kq+1 zero where `one_row`); `full`: all VW columns < N,
 * else the missing ones are read as zeros. */
inline s2v b_direct_pair(const __global TB* b, int ldb, int kq, int c, int N, bool one_row, bool full)
{
    const __global TB* r0 = b + (2 * kq) * ldb + c;
    qb_row lo, hi = (qb_row)0;
    if (full) {
        lo = *(const __global qb_row_u*)r0;
        if (!one_row) hi = *(const __global qb_row_u*)(r0 + ldb);
    } else {
        TB t0[VW], t1[VW];
        for (int j = 0; j < VW; ++j) {
            t0[j] = c + j < N ? r0[j] : (TB)0;
            t1[j] = c + j < N && !one_row ? r0[ldb + j] : (TB)0;
        }
        lo = *(qb_row*)t0;
        hi = *(qb_row*)t1;
    }
    return TO_S2V(PAIR_LANES(lo, hi));
}
#endif
#else
typedef CAT(TB, VW) tbv;
typedef CAT(int, VW) intv;
#if B_DIRECT
/* B read in place (KC=1), row-major [K, N] rows ldb apart (a 1x1 stride-1 convolution's input:
 * no im2col pass): VW columns c.. of row k, one unaligned vector load where the tile is `full`
 * (all its columns < N), else the columns past N read as zeros. */
typedef tbv tbv_u __attribute__((aligned(1)));
inline tbv b_direct_row(const __global TB* b, int ldb, int k, int c, int N, bool full)
{
    const __global TB* r = b + k * ldb + c;
    if (full)
        return *(const __global tbv_u*)r;
    TB t[VW];
    for (int j = 0; j < VW; ++j) t[j] = c + j < N ? r[j] : (TB)0;
    return *(tbv*)t;
}
#endif
/* pocl does not inline builtins (convert_intN is a call per use): clang's own conversion where
 * the compiler is clang, the builtin elsewhere. */
typedef CAT(float, VW) floatv;
#if defined(__clang__)
#define CONVERT_INTV(x) __builtin_convertvector((x), intv)
#define CONVERT_FLOATV(x) __builtin_convertvector((x), floatv)
#else
#define CONVERT_INTV CAT(convert_int, VW)
#define CONVERT_FLOATV CAT(convert_float, VW)
#endif
#endif

/* 16 bytes of B at any address (a move without vload16 / vstore16). */
typedef CAT(TB, 16) tb16_u __attribute__((aligned(1)));

/* Packed offset of B element (k, n) within one matrix's panels. */
inline int qb_off(int k, int n, int K)
{
#if KC > 1
    const int KQ = (K + KC - 1) / KC;
    return (((n / NR) * KQ + k / KC) * NR + n % NR) * KC + k % KC;
#else
    return ((n / NR) * K + k) * NR + n % NR;
#endif
}

/* gsize (ceil(M/MR), ceil(N/NR), batch); batch z = z1 * D2 + z2. */
__kernel QGEMM_ATTR void qgemm(__global const ta_mem* restrict A, int offA, int sA1, int sA2, int lda,
                    __global const TB* restrict B, int offB, int sB1, int sB2, int ldb,
                    __global TC* C, int offC, int sC1, int sC2, int ldc,
                    int M, int N, int K, int D2, int rs1, int rs2, int cs1, int cs2, EPI_PARAMS)
{
    const int tm = get_global_id(0), tn = get_global_id(1), z = get_global_id(2);
    const int m0 = tm * MR, n0 = tn * NR;
    if (m0 >= M || n0 >= N) return;
    const int z1 = z / D2, z2 = z - z1 * D2;
    const __global ta_mem* a_rows[MR];
    _Pragma("unroll")
    for (int r = 0; r < MR; ++r) a_rows[r] = A + offA + z1 * sA1 + z2 * sA2 + min(m0 + r, M - 1) * lda;
#if KC == 4
    const int K4 = (K + 3) >> 2;
    const __global tb4* bp = (const __global tb4*)(B + offB + z1 * sB1 + z2 * sB2) + tn * K4 * NR;
    int acc[MR][NR];
    _Pragma("unroll")
    for (int r = 0; r < MR; ++r)
        _Pragma("unroll")
        for (int c = 0; c < NR; ++c) acc[r][c] = 0;
    const int kfull = K >> 2;
    PRAGMA(unroll KU)
    for (int kq = 0; kq < K4; ++kq) {
        ta4 a[MR];
        if (kq < kfull) {
            _Pragma("unroll")
            for (int r = 0; r < MR; ++r) a[r] = vload4(0, a_rows[r] + 4 * kq);
        } else {  /* the ragged last group: missing k are zeros (B is zero padded too) */
            _Pragma("unroll")
            for (int r = 0; r < MR; ++r) {
                const int k = 4 * kq;
                a[r] = (ta4)(a_rows[r][k], k + 1 < K ? a_rows[r][k + 1] : 0, k + 2 < K ? a_rows[r][k + 2] : 0, 0);
            }
        }
        tb4 b[NR];
        _Pragma("unroll")
        for (int c = 0; c < NR; ++c) b[c] = bp[kq * NR + c];
        _Pragma("unroll")
        for (int r = 0; r < MR; ++r)
            _Pragma("unroll")
            for (int c = 0; c < NR; ++c) acc[r][c] += QDOT(a[r], b[c]);
    }
    /* copied out with constant indices: the accumulators stay in registers in the loop */
    int res[MR][NR];
    _Pragma("unroll")
    for (int r = 0; r < MR; ++r)
        _Pragma("unroll")
        for (int c = 0; c < NR; ++c) res[r][c] = acc[r][c];
#elif KC == 16
    const int KQ = (K + 15) >> 4, kfull = K >> 4;
    const __global tb16* bp = (const __global tb16*)(B + offB + z1 * sB1 + z2 * sB2) + tn * KQ * NR;
    int8 acc[MR][NR];
    _Pragma("unroll")
    for (int r = 0; r < MR; ++r)
        _Pragma("unroll")
        for (int c = 0; c < NR; ++c) acc[r][c] = (int8)0;
    PRAGMA(unroll KU)
    for (int kq = 0; kq < kfull; ++kq) {
        short16 a[MR];
        _Pragma("unroll")
        for (int r = 0; r < MR; ++r) a[r] = TO_S16(*(const __global ta16_u*)(a_rows[r] + 16 * kq));
        _Pragma("unroll")
        for (int c = 0; c < NR; ++c) {
            const short16 b = TO_S16(bp[kq * NR + c]);
            _Pragma("unroll")
            for (int r = 0; r < MR; ++r) acc[r][c] += PAIR_DOT(a[r], b);
        }
    }
    if (kfull < KQ) {  /* the ragged last 16: missing k are zeros (B is zero padded too) */
        short16 a[MR];
        _Pragma("unroll")
        for (int r = 0; r < MR; ++r) {
            TA t[16];
            for (int i = 0; i < 16; ++i) t[i] = 16 * kfull + i < K ? a_rows[r][16 * kfull + i] : (TA)0;
            a[r] = TO_S16(*(ta16*)t);
        }
        _Pragma("unroll")
        for (int c = 0; c < NR; ++c) {
            const short16 b = TO_S16(bp[kfull * NR + c]);
            _Pragma("unroll")
            for (int r = 0; r < MR; ++r) acc[r][c] += PAIR_DOT(a[r], b);
        }
    }
    int res[MR][NR];
    _Pragma("unroll")
    for (int r = 0; r < MR; ++r)
        _Pragma("unroll")
        for (int c = 0; c < NR; ++c) {
            const int8 v = acc[r][c];
            const int4 h = v.lo + v.hi;
            const int2 q = h.lo + h.hi;
            res[r][c] = q.x + q.y;
        }
#elif KC == 2
    const int KQ = (K + 1) >> 1, kfull = K >> 1;
#if B_DIRECT
    const __global TB* bd = B + offB + z1 * sB1 + z2 * sB2;
    const bool bfull = n0 + NR <= N;
#define B_PAIR(kq, v, one) b_direct_pair(bd, ldb, (kq), n0 + (v) * VW, N, (one), bfull)
#else
    const __global TB* bp = B + offB + z1 * sB1 + z2 * sB2 + tn * KQ * NR * 2;
#define B_PAIR(kq, v, one) TO_S2V(*(const __global tb2v_u*)(bp + ((kq) * NR + (v) * VW) * 2))
#endif
    intv accv[MR][NV];
    _Pragma("unroll")
    for (int r = 0; r < MR; ++r)
        _Pragma("unroll")
        for (int v = 0; v < NV; ++v) accv[r][v] = (intv)0;
    PRAGMA(unroll KU)
    for (int kq = 0; kq < kfull; ++kq) {
        s2v b[NV];
        _Pragma("unroll")
        for (int v = 0; v < NV; ++v) b[v] = B_PAIR(kq, v, false);
        _Pragma("unroll")
        for (int r = 0; r < MR; ++r) {
            const s2v a = AS_S2V((intv)A_PAIR(a_rows[r] + 2 * kq));
            _Pragma("unroll")
            for (int v = 0; v < NV; ++v) accv[r][v] += PMADD(a, b[v]);
        }
    }
    if (kfull < KQ) {  /* odd K: the last k paired with a zero (B is zero padded too) */
        s2v b[NV];
        _Pragma("unroll")
        for (int v = 0; v < NV; ++v) b[v] = B_PAIR(kfull, v, true);
        _Pragma("unroll")
        for (int r = 0; r < MR; ++r) {
            const int a = (int)(ushort)(short)a_rows[r][2 * kfull];
            const s2v av = AS_S2V((intv)a);
            _Pragma("unroll")
            for (int v = 0; v < NV; ++v) accv[r][v] += PMADD(av, b[v]);
        }
    }
    int res[MR][NR];
    _Pragma("unroll")
    for (int r = 0; r < MR; ++r)
        _Pragma("unroll")
        for (int v = 0; v < NV; ++v) *(intv*)&res[r][v * VW] = accv[r][v];
#else
#if B_DIRECT
    const __global TB* bd = B + offB + z1 * sB1 + z2 * sB2;
    const bool bfull = n0 + NR <= N;
#define B_ROW(k, v) b_direct_row(bd, ldb, (k), n0 + (v) * VW, N, bfull)
#else
    const __global TB* bp = B + offB + z1 * sB1 + z2 * sB2 + tn * K * NR;
#define B_ROW(k, v) (*(const __global tbv*)(bp + (k) * NR + (v) * VW))
#endif
    intv accv[MR][NV];
    _Pragma("unroll")
    for (int r = 0; r < MR; ++r)
        _Pragma("unroll")
        for (int v = 0; v < NV; ++v) accv[r][v] = (intv)0;
#if QFA
    /* Exact float accumulation: 8-bit products are integers of at most 2^16 in magnitude, so
     * float sums of QFB of them (QFB * max|a*b| <= 2^24, set by the types) are exact; each block
     * is converted to int32 and added. The fp32 multiply-add rate, from 8-bit operands. */
    for (int kb = 0; kb < K; kb += QFB) {
        const int kend = min(K, kb + QFB);
        floatv accf[MR][NV];
        _Pragma("unroll")
        for (int r = 0; r < MR; ++r)
            _Pragma("unroll")
            for (int v = 0; v < NV; ++v) accf[r][v] = (floatv)0.0f;
        PRAGMA(unroll KU)
        for (int k = kb; k < kend; ++k) {
            floatv b[NV];
            _Pragma("unroll")
            for (int v = 0; v < NV; ++v)
                b[v] = CONVERT_FLOATV(CONVERT_INTV(B_ROW(k, v)));
            _Pragma("unroll")
            for (int r = 0; r < MR; ++r) {
                const float a = (float)a_rows[r][k];
                _Pragma("unroll")
                for (int v = 0; v < NV; ++v) accf[r][v] += a * b[v];
            }
        }
        _Pragma("unroll")
        for (int r = 0; r < MR; ++r)
            _Pragma("unroll")
            for (int v = 0; v < NV; ++v) accv[r][v] += CONVERT_INTV(accf[r][v]);
    }
#else
    PRAGMA(unroll KU)
    for (int k = 0; k < K; ++k) {
        intv b[NV];
        _Pragma("unroll")
        for (int v = 0; v < NV; ++v) b[v] = CONVERT_INTV(B_ROW(k, v));
        _Pragma("unroll")
        for (int r = 0; r < MR; ++r) {
            const int a = (int)a_rows[r][k];
            _Pragma("unroll")
            for (int v = 0; v < NV; ++v) accv[r][v] += a * b[v];
        }
    }
#endif
    /* copied out with constant indices: the accumulators stay in registers in the loop (a
     * run-time index into them would put them in memory) */
    int res[MR][NR];
    _Pragma("unroll")
    for (int r = 0; r < MR; ++r)
        _Pragma("unroll")
        for (int v = 0; v < NV; ++v) *(intv*)&res[r][v * VW] = accv[r][v];
#endif
    const int rb = z1 * rs1 + z2 * rs2, cb = z1 * cs1 + z2 * cs2;
    __global TC* cz = C + offC + z1 * sC1 + z2 * sC2;
    const int mend = min(MR, M - m0), nend = min(NR, N - n0);
#ifdef Q_VEC_EPILOGUE
    if (nend == NR && q_vec_ok(zpb_s, bias_cs, sc_s)) {
        for (int r = 0; r < mend; ++r)
            _Pragma("unroll")
            for (int v = 0; v < NV; ++v)
                q_store_v(cz, (m0 + r) * ldc + n0 + v * VW, *(INTV_*)&res[r][v * VW], rb + m0 + r, cb + n0 + v * VW,
                          K, EPI_ARGS);
        return;
    }
#endif
    for (int r = 0; r < mend; ++r)
        for (int c = 0; c < nend; ++c)
            q_store(cz, (m0 + r) * ldc + n0 + c, res[r][c], rb + m0 + r, cb + n0 + c, K, EPI_ARGS);
}

/* Strided 8-bit matrices [K, N] (element (k, n) at off + z1*s1 + z2*s2 + k*s_k + n*s_n) into
 * panels, `panels` elements per matrix, zero padded. gsize (ceil(N/NR)*NR, K padded, batch). */
__kernel void qpack_b(__global const TB* restrict src, int off, int s1, int s2, int s_k, int s_n,
                      __global TB* restrict dst, int panels, int K, int N, int D2)
{
    const int n = get_global_id(0), k = get_global_id(1), z = get_global_id(2);
    const int np = (N + NR - 1) / NR * NR;
    const int kp = (K + KC - 1) / KC * KC;
    if (n >= np || k >= kp) return;
    const int z1 = z / D2, z2 = z - z1 * D2;
    const TB v = (n < N && k < K) ? src[off + z1 * s1 + z2 * s2 + k * s_k + n * s_n] : (TB)0;
    dst[z * panels + qb_off(k, n, K)] = v;
}

/* im2col of an 8-bit NCHW image straight into B's panels: column n = oy*OW + ox, row
 * k = (c*KH + ky)*KW + kx of group g; taps in the padding read the input's zero point (real
 * 0), so the zero-point algebra holds. One work-item per (panel, k): the tap decoded once, the
 * panel's NR columns walked pixel by pixel (contiguous bytes for KC=1). Batch z = image * G + g.
 * gsize (panels, padded K, n*G). */
#if KC == 2 && NR % 16 == 0
/* KC=2 im2col by pairs of k: one work-item per (panel, k pair), two rows of 16 pixels
 * interleaved into the pairs' layout, 32 bytes per store. gsize (panels, ceil(K/2), n*G). */
#define QIM_PAIRS 1
typedef CAT(TB, 16) qim_tb16;

/* 16 columns n..n+15 of one im2col row (its tap: channel plane xc, ky, kx; the first column at
 * output pixel (oy, ox)): one 16-byte move where they are 16 pixels of one output row inside the
 * image, else gathered (zeros past N, the zero point `pad` in the padding). No division: the
 * tap and the first pixel are decoded once per work-item (divisions dominated otherwise). */
inline qim_tb16 qim_row16(const __global TB* xc, int ky, int kx, int oy, int ox, int n, int N, int H, int W,
                          int SH, int SW, int PH, int PW, int DH, int DW, int OW, TB pad)
{
    const int iy0 = oy * SH - PH + ky * DH, ix0 = ox * SW - PW + kx * DW;
    if (SW == 1 && ox + 16 <= OW && n + 16 <= N && iy0 >= 0 && iy0 < H && ix0 >= 0 && ix0 + 16 <= W)
        return *(const __global tb16_u*)(xc + iy0 * W + ix0);
    TB v[16];
    for (int j = 0; j < 16; ++j) {
        const int iy = oy * SH - PH + ky * DH, ix = ox * SW - PW + kx * DW;
        const bool col = n + j < N;
        v[j] = col && iy >= 0 && iy < H && ix >= 0 && ix < W ? xc[iy * W + ix] : (col ? pad : (TB)0);
        if (++ox == OW) { ox = 0; ++oy; }
    }
    return *(qim_tb16*)v;
}

__kernel void qim2col(__global const TB* restrict X, int offX, int sX1, int G, int cin_g, int H, int W,
                      int KH, int KW, int SH, int SW, int PH, int PW, int DH, int DW, int OW,
                      __global const TB* xzp, int has_zp, __global TB* restrict dst, int panels, int K, int N)
{
    const int p = get_global_id(0), kq = get_global_id(1), z = get_global_id(2);
    if (p * NR >= N || 2 * kq >= K) return;
    const TB pad = has_zp ? xzp[0] : (TB)0;
    const int img = z / G, g = z - img * G;
    const __global TB* xi = X + offX + img * sX1 + g * cin_g * H * W;
    __global TB* out = dst + z * panels + qb_off(2 * kq, p * NR, K);
    const int k0 = 2 * kq, k1 = min(k0 + 1, K - 1);  /* without a second row (odd K): zeros */
    const bool has1 = k0 + 1 < K;
    const int kx0 = k0 % KW, t0 = k0 / KW, ky0 = t0 % KH, kx1 = k1 % KW, t1 = k1 / KW, ky1 = t1 % KH;
    const __global TB* xc0 = xi + (t0 / KH) * H * W;
    const __global TB* xc1 = xi + (t1 / KH) * H * W;
    int n = p * NR, oy = n / OW, ox = n - oy * OW;
    for (int c0 = 0; c0 < NR; c0 += 16, n += 16) {
        const qim_tb16 r0 = qim_row16(xc0, ky0, kx0, oy, ox, n, N, H, W, SH, SW, PH, PW, DH, DW, OW, pad);
        const qim_tb16 r1 = has1 ? qim_row16(xc1, ky1, kx1, oy, ox, n, N, H, W, SH, SW, PH, PW, DH, DW, OW, pad)
                                 : (qim_tb16)0;
        ox += 16;
        while (ox >= OW) { ox -= OW; ++oy; }
#if defined(__clang__)
        typedef TB qim_tb32 __attribute__((ext_vector_type(32)));
        typedef qim_tb32 qim_tb32_u __attribute__((aligned(1)));
        *(__global qim_tb32_u*)(out + 2 * c0) = __builtin_shufflevector(r0, r1, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20,
            5, 21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
#else
        *(__global tb16_u*)(out + 2 * c0) = (qim_tb16)(r0.s0, r1.s0, r0.s1, r1.s1, r0.s2, r1.s2, r0.s3, r1.s3,
                                                       r0.s4, r1.s4, r0.s5, r1.s5, r0.s6, r1.s6, r0.s7, r1.s7);
        *(__global tb16_u*)(out + 2 * c0 + 16) = (qim_tb16)(r0.s8, r1.s8, r0.s9, r1.s9, r0.sa, r1.sa, r0.sb,
            r1.sb, r0.sc, r1.sc, r0.sd, r1.sd, r0.se, r1.se, r0.sf, r1.sf);
#endif
    }
}
#else
#if KC == 1 && NR % 16 == 0
/* 16 columns c0.. of one im2col row (tap ky, kx of channel plane xc; column c0 at output pixel
 * (oy, ox)) that the one-move path cannot take: walked as segments within one output row each,
 * so that the input row, its bounds and the column count are decided once per segment rather
 * than per byte (small maps: a 14x14 or 7x7 row ends inside nearly every chunk). */
inline void qim_segments(__global TB* out, const __global TB* xc, int c0, int n0, int ox, int oy, int ky, int kx,
                         int N, int H, int W, int SH, int SW, int PH, int PW, int DH, int DW, int OW, TB pad)
{
    for (int c = c0; c < c0 + 16;) {
        const int seg = min(c0 + 16 - c, OW - ox), real = N - (n0 + c);
        const int iy = oy * SH - PH + ky * DH;
        const bool rowin = iy >= 0 && iy < H;
        int ix = ox * SW - PW + kx * DW;
        for (int j = 0; j < seg; ++j, ix += SW)
            out[c + j] = j < real ? (rowin && ix >= 0 && ix < W ? xc[iy * W + ix] : pad) : (TB)0;
        c += seg;
        ox += seg;
        if (ox == OW) { ox = 0; ++oy; }
    }
}
#endif

__kernel void qim2col(__global const TB* restrict X, int offX, int sX1, int G, int cin_g, int H, int W,
                      int KH, int KW, int SH, int SW, int PH, int PW, int DH, int DW, int OW,
                      __global const TB* xzp, int has_zp, __global TB* restrict dst, int panels, int K, int N)
{
    const int p = get_global_id(0), k = get_global_id(1), z = get_global_id(2);
    const int kp = (K + KC - 1) / KC * KC;
    if (p * NR >= N || k >= kp) return;
    __global TB* out = dst + z * panels + qb_off(k, p * NR, K);
    if (k >= K) {
        for (int c = 0; c < NR; ++c) out[c * KC] = (TB)0;
        return;
    }
    const TB pad = has_zp ? xzp[0] : (TB)0;
    const int img = z / G, g = z - img * G;
    const int kx = k % KW, t = k / KW, ky = t % KH, ch = t / KH;
    const __global TB* xc = X + offX + img * sX1 + (g * cin_g + ch) * H * W;
    const int n0 = p * NR;
    int oy = n0 / OW, ox = n0 - (n0 / OW) * OW;
#define QIM_ONE(c) do {                                                              \
        const int iy = oy * SH - PH + ky * DH, ix = ox * SW - PW + kx * DW;         \
        const bool in = n0 + (c) < N && iy >= 0 && iy < H && ix >= 0 && ix < W;     \
        out[(c) * KC] = in ? xc[iy * W + ix] : (n0 + (c) < N ? pad : (TB)0);       \
        if (++ox == OW) { ox = 0; ++oy; }                                           \
    } while (0)
#if KC == 1 && NR % 16 == 0
    /* 16 pixels of one output row, stride 1, all inside the image: one 16-byte move */
    for (int c0 = 0; c0 < NR; c0 += 16) {
        const int iy = oy * SH - PH + ky * DH, ix = ox - PW + kx * DW;
        if (SW == 1 && ox + 16 <= OW && n0 + c0 + 16 <= N && iy >= 0 && iy < H && ix >= 0 && ix + 16 <= W) {
            *(__global tb16_u*)(out + c0) = *(const __global tb16_u*)(xc + iy * W + ix);
            ox += 16;
            if (ox == OW) { ox = 0; ++oy; }
        } else {
            qim_segments(out, xc, c0, n0, ox, oy, ky, kx, N, H, W, SH, SW, PH, PW, DH, DW, OW, pad);
            ox += 16;  /* the chunk's 16 pixels (the segments advance local copies) */
            while (ox >= OW) { ox -= OW; ++oy; }
        }
    }
#else
    for (int c = 0; c < NR; ++c) QIM_ONE(c);
#endif
}
#endif

/* rowsum[z*M + m] = sum_k A[z][m][k] (A as qgemm reads it). gsize (M, batch). */
__kernel void qrowsum(__global const TA* restrict A, int offA, int sA1, int sA2, int lda, int M, int K, int D2,
                      __global int* restrict out)
{
    const int m = get_global_id(0), z = get_global_id(1);
    if (m >= M) return;
    const int z1 = z / D2, z2 = z - z1 * D2;
    const __global TA* row = A + offA + z1 * sA1 + z2 * sA2 + m * lda;
    int s = 0;
    for (int k = 0; k < K; ++k) s += (int)row[k];
    out[z * M + m] = s;
}

/* colsum[z*N + n] = sum_k B[z][k][n], read from the panels (padding is zero). gsize (N, batch). */
__kernel void qcolsum(__global const TB* restrict Bp, int panels, int K, int N, __global int* restrict out)
{
    const int n = get_global_id(0), z = get_global_id(1);
    if (n >= N) return;
    const __global TB* b = Bp + z * panels;
    int s = 0;
    for (int k = 0; k < K; ++k) s += (int)b[qb_off(k, n, K)];
    out[z * N + n] = s;
}

/* Depthwise 8-bit convolution (one input channel per group, cout = channels * mult), direct:
 * 16 consecutive output pixels of one row and channel per work-item as an int16 vector, each
 * tap's 16 inputs one 16-byte move where they lie inside the image (stride 1; stride 2 as the
 * even and odd lanes of two overlapping moves), gathered with the zero point for padding elsewhere; the sums of
 * (x - x_zp)(w - w_zp[co]) are exact int32 (padding taps add nothing: their real value is 0).
 * The epilogue's row is the output channel. X is TB (the activation), W is TA [cout, KH*KW].
 * gsize (ceil(OW/16), OH, cout * n). */
typedef CAT(TB, 16) tb16v;
#if defined(__clang__)
#define TB16_TO_INT(x) __builtin_convertvector((x), int16)
#else
#define TB16_TO_INT(x) convert_int16(x)
#endif
__kernel void qdwconv(__global const TB* restrict X, __global const TA* restrict Wt, __global TC* C,
                      int Cin, int H, int W, int mult, int KH, int KW, int SH, int SW, int PH, int PW,
                      int DH, int DW, int OH, int OW, int xlen, EPI_PARAMS)
{
    const int tx = get_global_id(0), oy = get_global_id(1), zc = get_global_id(2);
    const int cout = Cin * mult;
    const int co = zc % cout, img = zc / cout;
    const int ox0 = tx * 16;
    if (ox0 >= OW || oy >= OH) return;
    const TB xz = (flags & FLAG_ZB) ? zpb[0] : (TB)0;
    const int wz = (flags & FLAG_ZA) ? (int)zpa[co * zpa_s] : 0;
    const __global TB* xc = X + (img * Cin + co / mult) * H * W;
    const __global TA* wc = Wt + co * KH * KW;
    const int16 xz16 = (int16)((int)xz);
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const int xbase = (img * Cin + co / mult) * H * W;  /* the plane's offset in X (xlen elements) */
    int16 acc = (int16)0;
#ifdef DW_K  /* the kernel size as a define (3x3, 5x5, 7x7): the tap loops unrolled */
#define KH_ DW_K
#define KW_ DW_K
#else
#define KH_ KH
#define KW_ KW
#endif
    _Pragma("unroll")
    for (int ky = 0; ky < KH_; ++ky) {
        const int iy = oy * SH - PH + ky * DH;
        if (iy < 0 || iy >= H) continue;
        const __global TB* row = xc + iy * W;
        _Pragma("unroll")
        for (int kx = 0; kx < KW_; ++kx) {
            const int ix0 = ox0 * SW - PW + kx * DW;  /* input column of lane 0 */
            const int span = 15 * SW + 1;
            tb16v v;
            const int at = xbase + iy * W + ix0;  /* X index of lane 0's column */
            if (ix0 >= 0 && ix0 + span <= W && SW == 1) {
                v = *(const __global tb16_u*)(row + ix0);
            } else if (ix0 >= 0 && ix0 + span <= W && SW == 2) {  /* columns ix0, ix0 + 2, ..., ix0 + 30 */
                const tb16v a = *(const __global tb16_u*)(row + ix0), b = *(const __global tb16_u*)(row + ix0 + 15);
                v = (tb16v)(a.even, b.odd);
            } else if ((SW == 1 || SW == 2) && at >= 0 && at + span <= xlen) {
                /* an edge tile (a row narrower than the span, the padding) whose bytes lie inside
                 * X: the moves above, the lanes outside the row set to the zero point (a real 0) */
                const int16 ix = (int16)ix0 + lane * SW;
                tb16v t = *(const __global tb16_u*)(X + at);
                if (SW == 2) t = (tb16v)(t.even, (*(const __global tb16_u*)(X + at + 15)).odd);
                const int16 x16 = TB16_TO_INT(t);
                acc += (((ix >= 0 && ix < W) ? x16 : xz16) - xz16) * ((int)wc[ky * KW_ + kx] - wz);
                continue;
            } else {
                TB t[16];
                for (int j = 0; j < 16; ++j) {
                    const int ix = ix0 + j * SW;
                    t[j] = (ix >= 0 && ix < W) ? row[ix] : xz;
                }
                v = *(tb16v*)t;
            }
            acc += (TB16_TO_INT(v) - xz16) * ((int)wc[ky * KW_ + kx] - wz);
        }
    }
    const int nend = min(16, OW - ox0);
    __global TC* out = C + ((img * cout + co) * OH + oy) * OW + ox0;
#if EPI == 1 && !BIAS_FLOAT
    /* the requantising epilogue on the whole vector: one multiplier per work-item */
    if (flags & FLAG_BIAS) acc += bias[co * bias_rs];
    const float mul = (s_row[co * sr_s] * s_col[0]) / s_y[0];
    const int z = (flags & FLAG_YZP) ? (int)y_zp[0] : 0;
    const float16 lo = (float16)((float)(qlo - z)), hi = (float16)((float)(qhi - z)), magic = (float16)12582912.0f;
#if defined(__clang__)
    float16 f = __builtin_convertvector(acc, float16) * mul;
#else
    float16 f = convert_float16(acc) * mul;
#endif
    f = f < lo ? lo : f;  /* component-wise selects: no builtin calls */
    f = f > hi ? hi : f;
    f = (f + magic) - magic;  /* round half to even (see q_store) */
    float fr[16];
    *(float16*)fr = f;
    for (int j = 0; j < nend; ++j) out[j] = (TC)((int)fr[j] + z);
#else
    int res[16];
    *(int16*)res = acc;
    /* zero points already applied: the epilogue runs without the zero-point terms */
    for (int j = 0; j < nend; ++j)
        q_store(out, j, res[j], co, 0, 0, rowsum, colsum, zpa, zpa_s, zpb, zpb_s, bias, bias_rs, bias_cs,
                s_row, sr_s, s_col, sc_s, s_y, y_zp, qlo, qhi, flags & ~(FLAG_ZA | FLAG_ZB));
#endif
}
