/* A few rows times a 16-bit weight matrix: y = x W^T (+ bias), for the lean forward's decode and
 * verify passes (engine/forward/rows16.py builds and loads this file).
 *
 * w: [out, in] bfloat16 or float16, row-major; x: [n, in] of the same type; bias: [out] or NULL;
 * y: [n, out] of the same type. Each output is a float32 sum over `in` in 16 lanes, in an order
 * fixed by `in` and the instruction set alone, plus the bias, rounded once to 16 bits (to
 * nearest, ties to even). So a row's result is the same bit for bit whatever other rows share
 * the call and whatever the thread count: a verify pass computes what single steps would.
 *
 * The weight is read once for up to ROWS rows of x, so a product of a few rows costs about what
 * reading the weight costs. Threads split the outputs. Two builds of the inner loop: AVX-512
 * with BF16 dot products (bfloat16 weights), and AVX2 with FMA and F16C (either type). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define ROWS 8

enum { BF16 = 0, FP16 = 1 };

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);      /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__attribute__((target("f16c"))) static inline float fp16_to_f32(uint16_t h) { return _cvtsh_ss(h); }

__attribute__((target("f16c"))) static inline uint16_t f32_to_fp16(float f) {
    return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

/* The loops below take n as a constant (each build is inlined into a switch over n), so the
 * compiler unrolls the rows and keeps every row's sums in registers. */
#define INLINE static inline __attribute__((always_inline))

INLINE __attribute__((target("avx512f,avx512bf16,avx512bw")))
void rows_avx512(const uint16_t *w, const uint16_t *x, const int n, long in, float *acc) {
    __m512 a[ROWS];
    for (int r = 0; r < n; r++) a[r] = _mm512_setzero_ps();
    long i = 0;
    for (; i + 32 <= in; i += 32) {
        __m512bh wv = (__m512bh)_mm512_loadu_si512(w + i);
        for (int r = 0; r < n; r++)
            a[r] = _mm512_dpbf16_ps(a[r], wv, (__m512bh)_mm512_loadu_si512(x + r * in + i));
    }
    if (i < in) {
        __mmask32 m = (__mmask32)((1ull << (in - i)) - 1);
        __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(m, w + i);
        for (int r = 0; r < n; r++)
            a[r] = _mm512_dpbf16_ps(a[r], wv, (__m512bh)_mm512_maskz_loadu_epi16(m, x + r * in + i));
    }
    for (int r = 0; r < n; r++)
        acc[r] = _mm512_reduce_add_ps(a[r]);
}

/* 8 16-bit values as float32 */
INLINE __attribute__((target("avx2,fma,f16c")))
__m256 load8(const uint16_t *p, int kind) {
    __m128i raw = _mm_loadu_si128((const __m128i *)p);
    if (kind == BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    return _mm256_cvtph_ps(raw);
}

INLINE __attribute__((target("avx2,fma,f16c")))
void rows_avx2(const uint16_t *w, const uint16_t *x, const int n, long in, int kind, float *acc) {
    __m256 lo[ROWS], hi[ROWS];      /* lanes 0-7 and 8-15 */
    for (int r = 0; r < n; r++) lo[r] = hi[r] = _mm256_setzero_ps();
    long i = 0;
    for (; i + 16 <= in; i += 16) {
        __m256 w0 = load8(w + i, kind), w1 = load8(w + i + 8, kind);
        for (int r = 0; r < n; r++) {
            lo[r] = _mm256_fmadd_ps(w0, load8(x + r * in + i, kind), lo[r]);
            hi[r] = _mm256_fmadd_ps(w1, load8(x + r * in + i + 8, kind), hi[r]);
        }
    }
    float (*value)(uint16_t) = kind == BF16 ? bf16_to_f32 : fp16_to_f32;
    for (int r = 0; r < n; r++) {
        __m256 v = _mm256_add_ps(lo[r], hi[r]);
        __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        q = _mm_add_ps(q, _mm_movehl_ps(q, q));
        float sum = _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
        for (long k = i; k < in; k++)     /* the last inputs */
            sum += value(w[k]) * value(x[r * in + k]);
        acc[r] = sum;
    }
}

/* The result of output o for the m rows, from its sums. */
INLINE void put(uint16_t *y, const uint16_t *bias, const float *acc, int m, long out, long o, int kind) {
    float b = bias == NULL ? 0.0f : kind == BF16 ? bf16_to_f32(bias[o]) : fp16_to_f32(bias[o]);
    for (int r = 0; r < m; r++)
        y[r * out + o] = kind == BF16 ? f32_to_bf16(acc[r] + b) : f32_to_fp16(acc[r] + b);
}

/* Outputs [first, last) of m (a constant) rows: one thread's share. */
#define SPAN(NAME, M, TARGET, CALL)                                                                  \
    __attribute__((target(TARGET)))                                                               \
    static void NAME(const uint16_t *w, const uint16_t *x, const uint16_t *bias, uint16_t *y,     \
                     long out, long in, int kind, long first, long last) {                        \
        float acc[ROWS];                                                                          \
        for (long o = first; o < last; o++) {                                                     \
            CALL;                                                                                 \
            put(y, bias, acc, M, out, o, kind);                                                   \
        }                                                                                         \
    }
#define SPANS(M)                                                                                  \
    SPAN(span512_##M, M, "avx512f,avx512bf16,avx512bw,f16c", rows_avx512(w + o * in, x, M, in, acc))  \
    SPAN(span2_##M, M, "avx2,fma,f16c", rows_avx2(w + o * in, x, M, in, kind, acc))
SPANS(1) SPANS(2) SPANS(3) SPANS(4) SPANS(5) SPANS(6) SPANS(7) SPANS(8)

typedef void (*span_fn)(const uint16_t *, const uint16_t *, const uint16_t *, uint16_t *, long, long, int,
                        long, long);
static const span_fn SPANS512[ROWS + 1] = {0, span512_1, span512_2, span512_3, span512_4, span512_5,
                                           span512_6, span512_7, span512_8};
static const span_fn SPANS2[ROWS + 1] = {0, span2_1, span2_2, span2_3, span2_4, span2_5, span2_6, span2_7,
                                         span2_8};

/* Returns 0, or -1 when the arguments are out of range. isa: 1 AVX-512 BF16, 2 AVX2. */
int rows16(const uint16_t *w, const uint16_t *x, const uint16_t *bias, uint16_t *y,
           int n, long out, long in, int kind, int isa, int threads) {
    if (n < 1 || out < 1 || in < 1 || (isa == 1 && kind != BF16) || (isa != 1 && isa != 2) || threads < 1)
        return -1;
    for (int start = 0; start < n; start += ROWS) {
        int m = n - start < ROWS ? n - start : ROWS;
        span_fn span = (isa == 1 ? SPANS512 : SPANS2)[m];
        const uint16_t *xs = x + (long)start * in;
        uint16_t *ys = y + (long)start * out;
        #pragma omp parallel for num_threads(threads) schedule(static)
        for (int t = 0; t < threads; t++)
            span(w, xs, bias, ys, out, in, kind, out * t / threads, out * (t + 1) / threads);
    }
    return 0;
}
