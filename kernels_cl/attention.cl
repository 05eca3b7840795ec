/* Attention (opset 23+): one work-item per (batch, q head, query) row.
 *   T          float type (float or double)
 *   MASK_BOOL / MASK_FLOAT   attn_mask given (bool: False masks; float: added)
 *   HAS_NONPAD nonpad_kv_seqlen given (int64, per batch)
 *   CAUSAL     is_causal
 *   QK_MODE    0..3: what qk_out receives (scaled/softcapped scores, + bias, softmax); QK_OUT if wanted
 *   SOFTMAX_PLAIN  ONNX Softmax's semantics (clglow.FusedAttention: MatMul, Softmax, MatMul
 *              fused): no zeroed rows, a row of -inf scores only gives NaN as Softmax does
 * dims = [B, QH, KVH, SQ, SKV, HD, HDV, PAST, MASK_LEN, LEFT, RIGHT]
 * st   = strides (b, h, s) of Q, K, V, Y (elements; the d stride is 1), then mask (b, h, q, k).
 * p is scratch of B*QH*SQ*SKV elements (the row's probabilities).
 */
#ifdef USE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#ifndef T
#define T float
#endif
#ifndef QK_MODE
#define QK_MODE 0
#endif

__kernel void attention(__global const T* q, __global const T* k, __global const T* v,
#if defined(MASK_BOOL)
                        __global const uchar* mask,
#elif defined(MASK_FLOAT)
                        __global const T* mask,
#endif
#ifdef HAS_NONPAD
                        __global const long* nonpad,
#endif
                        __global T* y, __global T* p,
#ifdef QK_OUT
                        __global T* qk,
#endif
                        __global const int* restrict dims, __global const int* restrict st,
                        const T sc, const T softcap, const int rows) {
    const int row = get_global_id(0);
    if (row >= rows) return;
    const int B = dims[0], QH = dims[1], KVH = dims[2], SQ = dims[3], SKV = dims[4], HD = dims[5], HDV = dims[6];
    const int PAST = dims[7], MLEN = dims[8], LEFT = dims[9], RIGHT = dims[10];
    const int i = row % SQ;
    const int h = (row / SQ) % QH;
    const int b = row / (SQ * QH);
    const int kh = h / (QH / KVH);
    __global const T* qr = q + (long)b * st[0] + (long)h * st[1] + (long)i * st[2];
    __global const T* kb = k + (long)b * st[3] + (long)kh * st[4];
    __global const T* vb = v + (long)b * st[6] + (long)kh * st[7];
    __global T* pr = p + (long)row * SKV;
    long offset = PAST;
    long valid = SKV;
#ifdef HAS_NONPAD
    valid = nonpad[b];
    if (PAST == 0) offset = valid - SQ;
#endif
    T m = -INFINITY;
    int any_allowed = 0;
    for (int j = 0; j < SKV; ++j) {
        __global const T* kr = kb + (long)j * st[5];
        T s = 0;
        for (int d = 0; d < HD; ++d) s += (qr[d] * sc) * (kr[d] * sc);
        if (softcap > 0) s = softcap * tanh(s / softcap);
#if defined(QK_OUT) && QK_MODE < 2
        qk[(long)row * SKV + j] = s;
#endif
        T bias = 0;
        int allowed = 1;
#if defined(MASK_BOOL) || defined(MASK_FLOAT)
        if (j >= MLEN) {
            allowed = 0;
        } else {
            const long mo = (long)b * st[12] + (long)h * st[13] + (long)i * st[14] + (long)j * st[15];
#ifdef MASK_BOOL
            if (!mask[mo]) allowed = 0;
#else
            bias = mask[mo];
#endif
        }
#endif
#ifdef CAUSAL
        if (j > i + offset) allowed = 0;
#endif
        {
            const long diff = i + offset - j;
            if (LEFT >= 0 && diff > LEFT) allowed = 0;
            if (RIGHT >= 0 && -diff > RIGHT) allowed = 0;
        }
#ifdef HAS_NONPAD
        if (j >= valid) allowed = 0;
#endif
        if (!allowed) bias = -INFINITY;
        if (bias != -INFINITY) any_allowed = 1;
        s += bias;
#if defined(QK_OUT) && QK_MODE == 2
        qk[(long)row * SKV + j] = s;
#endif
        pr[j] = s;
        m = fmax(m, s);
    }
    T sum = 0;
#ifdef SOFTMAX_PLAIN
    const T mm = m;  /* ONNX Softmax: a row of -inf only is NaN */
#else
    const T mm = (m == -INFINITY) ? (T)0 : m;
#endif
    for (int j = 0; j < SKV; ++j) {
        const T e = exp(pr[j] - mm);
        pr[j] = e;
        sum += e;
    }
#ifdef SOFTMAX_PLAIN
    const T inv = (T)1 / sum;
    any_allowed = 1;
#else
    const T inv = (sum == 0) ? (T)1 : (T)1 / sum;
#endif
    for (int j = 0; j < SKV; ++j) {
        const T pj = any_allowed ? pr[j] * inv : (T)0;
        pr[j] = pj;
#if defined(QK_OUT) && QK_MODE == 3
        qk[(long)row * SKV + j] = pj;
#endif
    }
    __global T* yr = y + (long)b * st[9] + (long)h * st[10] + (long)i * st[11];
    for (int d = 0; d < HDV; ++d) {
        T acc = 0;
        for (int j = 0; j < SKV; ++j) acc += pr[j] * vb[(long)j * st[8] + d];
        yr[d] = acc;
    }
}

/* RotaryEmbedding: one work-item per element. dims = [B, S, H, HD, ROT, stride b, s, h]; cos/sin rows
 * come from position_ids (HAS_POS: cache[pos[b, s]]) or from a (B, S, ROT/2) cache. */
__kernel void rotary(__global const T* x, __global const T* cosc, __global const T* sinc,
#ifdef HAS_POS
                     __global const long* pos,
#endif
                     __global T* y, const int n, __global const int* restrict dims, const int interleaved) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const int S = dims[1], H = dims[2], HD = dims[3], ROT = dims[4];
    const int d = i % HD;
    const int r = i / HD;
    const int h = r % H;
    const int s = (r / H) % S;
    const int b = r / (H * S);
    const long base = (long)b * dims[5] + (long)s * dims[6] + (long)h * dims[7];
    if (d >= ROT) {
        y[base + d] = x[base + d];
        return;
    }
    const int hr = ROT / 2;
    int j, is_im;
    T x1, x2;
    if (interleaved) {
        j = d / 2;
        is_im = d & 1;
        x1 = x[base + 2 * j];
        x2 = x[base + 2 * j + 1];
    } else {
        is_im = d >= hr;
        j = is_im ? d - hr : d;
        x1 = x[base + j];
        x2 = x[base + j + hr];
    }
#ifdef HAS_POS
    const long row = pos[(long)b * S + s];
#else
    const long row = (long)b * S + s;
#endif
    const T c = cosc[row * hr + j];
    const T sn = sinc[row * hr + j];
    y[base + d] = is_im ? sn * x1 + c * x2 : c * x1 - sn * x2;
}

/* clglow.FusedAttention's row kernel: the attention of one (batch, head, query) row per work-item
 * (work-groups of one: a CPU driver runs each group on a thread), head sizes in VW-float vectors
 * (HD, HDV multiples of VW; HDV / VW accumulators: NV_MAX at most). q . k_j is VW-lane products
 * summed once per key; the context walks V's contiguous rows, p_j times a row per key, instead
 * of a strided column per output. ONNX Softmax semantics (a row of -inf only gives NaN).
 * dims and st as in attention above (float32; no causal/window/nonpad).
 * KV_APPEND (a decode step's Concat(past, new) of K and V fused): keys/values j < PAST = dims[7]
 * come from pk/pv [B, H, PAST, D] (contiguous), the rest from k/v (strides st); the head's
 * first query row writes all SKV rows into ok/ov [B, H, SKV, D], the present tensors. */
#ifdef ROW_VW
#if ROW_VW == 16
typedef float16 rowv;
#define RV_SUM(v) (((v).s0 + (v).s1 + (v).s2 + (v).s3) + ((v).s4 + (v).s5 + (v).s6 + (v).s7) + \
                   ((v).s8 + (v).s9 + (v).sa + (v).sb) + ((v).sc + (v).sd + (v).se + (v).sf))
#elif ROW_VW == 8
typedef float8 rowv;
#define RV_SUM(v) (((v).s0 + (v).s1 + (v).s2 + (v).s3) + ((v).s4 + (v).s5 + (v).s6 + (v).s7))
#else
typedef float4 rowv;
#define RV_SUM(v) (((v).s0 + (v).s1) + ((v).s2 + (v).s3))
#endif
typedef rowv rowv_u __attribute__((aligned(4)));
#ifndef NV_MAX
#define NV_MAX 16
#endif

__kernel void attention_rows(__global const float* q, __global const float* k, __global const float* v,
#ifdef MASK_FLOAT
                             __global const float* mask,
#endif
#ifdef KV_APPEND
                             __global const float* pk, __global const float* pv,
#endif
                             __global float* y, __global float* p,
#ifdef KV_APPEND
                             __global float* ok, __global float* ov,
#endif
                             __global const int* restrict dims, __global const int* restrict st,
                             const float scale, const int rows) {
    const int row = get_global_id(0);
    if (row >= rows) return;
    const int QH = dims[1], SQ = dims[3], SKV = dims[4], HD = dims[5], HDV = dims[6];
    const int i = row % SQ, h = (row / SQ) % QH, b = row / (SQ * QH);
    __global const float* qr = q + (long)b * st[0] + (long)h * st[1] + (long)i * st[2];
    __global const float* kb = k + (long)b * st[3] + (long)h * st[4];
    __global const float* vb = v + (long)b * st[6] + (long)h * st[7];
    __global float* pr = p + (long)row * SKV;
#ifdef KV_APPEND
    /* keys and values j < PAST from the past tensors, the rest from k and v (row j - PAST); the
     * head's first query row also stores every row it reads into the present tensors (the Concat) */
    const int PAST = dims[7];
    const long head = (long)b * QH + h;
    __global const float* pkb = pk + head * PAST * HD;
    __global const float* pvb = pv + head * PAST * HDV;
    __global float* okb = ok + head * SKV * HD;
    __global float* ovb = ov + head * SKV * HDV;
    const int store = i == 0;
#define K_ROW(j) ((j) < PAST ? pkb + (long)(j) * HD : kb + (long)((j) - PAST) * st[5])
#define V_ROW(j) ((j) < PAST ? pvb + (long)(j) * HDV : vb + (long)((j) - PAST) * st[8])
#else
#define K_ROW(j) (kb + (long)(j) * st[5])
#define V_ROW(j) (vb + (long)(j) * st[8])
#endif
    const int nq = HD / ROW_VW, nv = HDV / ROW_VW;
    rowv qv[NV_MAX];
    for (int d = 0; d < nq; ++d)
        qv[d] = *(const __global rowv_u*)(qr + d * ROW_VW);
    float m = -INFINITY;
    for (int j = 0; j < SKV; ++j) {
        __global const float* kr = K_ROW(j);
        rowv acc = (rowv)0.0f;
        for (int d = 0; d < nq; ++d) {
            const rowv kv = *(const __global rowv_u*)(kr + d * ROW_VW);
            acc += qv[d] * kv;
#ifdef KV_APPEND
            if (store)
                *(__global rowv_u*)(okb + (long)j * HD + d * ROW_VW) = kv;
#endif
        }
        float s = RV_SUM(acc) * scale;
#ifdef MASK_FLOAT
        s += mask[(long)b * st[12] + (long)h * st[13] + (long)i * st[14] + (long)j * st[15]];
#endif
        pr[j] = s;
        m = fmax(m, s);
    }
    float sum = 0.0f;
    for (int j = 0; j < SKV; ++j) {
        const float e = exp(pr[j] - m);
        pr[j] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
    rowv o[NV_MAX];
    for (int d = 0; d < nv; ++d)
        o[d] = (rowv)0.0f;
    for (int j = 0; j < SKV; ++j) {
        __global const float* vr = V_ROW(j);
        const float pj = pr[j];
        for (int d = 0; d < nv; ++d) {
            const rowv vv = *(const __global rowv_u*)(vr + d * ROW_VW);
            o[d] += pj * vv;
#ifdef KV_APPEND
            if (store)
                *(__global rowv_u*)(ovb + (long)j * HDV + d * ROW_VW) = vv;
#endif
        }
    }
#undef K_ROW
#undef V_ROW
    __global float* yr = y + (long)b * st[9] + (long)h * st[10] + (long)i * st[11];
    for (int d = 0; d < nv; ++d)
        *(__global rowv_u*)(yr + d * ROW_VW) = o[d] * inv;
}
#endif
