/* One-row products of MLX's affine int4 experts (bench/int4_kernel.py builds and measures this).
   A weight row n of an expert is K/8 uint32 words, eight 4-bit values each (lowest first), with a bfloat16 scale and bias
   per group of 64: w[n,k] = q[n,k] * s[n,k/64] + b[n,k/64]. The input row is quantized to int8 per group (its even and odd
   positions apart, as the nibbles lie), and y[n] = sum_g s * dx_g * (q . xq)_g + b * (sum of x over g). */
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <immintrin.h>

void q4_prep(const float* x, int K, int8_t* xq, float* dx, float* xs) {
  for (int g = 0; g < K / 64; g++) {
    const float* v = x + g * 64; float m = 0, s = 0;
    for (int i = 0; i < 64; i++) { float a = fabsf(v[i]); if (a > m) m = a; s += v[i]; }
    float inv = m > 0 ? 127.f / m : 0;
    dx[g] = m / 127.f; xs[g] = s;
    for (int i = 0; i < 32; i++) {
      xq[g * 64 + i] = (int8_t)lrintf(v[2 * i] * inv); xq[g * 64 + 32 + i] = (int8_t)lrintf(v[2 * i + 1] * inv);
    }
  }
}

static inline float bf(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline __m256 bf8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
static inline float hsum(__m256 v) {
  __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_add_ps(a, _mm_movehl_ps(a, a)); return _mm_cvtss_f32(_mm_add_ss(a, _mm_shuffle_ps(a, a, 1)));
}
/* one group's 64 products, as 8 int32 partial sums */
static inline __m256i dot(const uint8_t* w, const int8_t* xq) {
  const __m256i lo = _mm256_set1_epi8(0x0F);
  __m256i q = _mm256_loadu_si256((const __m256i*)w);
  __m256i qe = _mm256_and_si256(q, lo), qo = _mm256_and_si256(_mm256_srli_epi16(q, 4), lo);
  __m256i xe = _mm256_loadu_si256((const __m256i*)xq), xo = _mm256_loadu_si256((const __m256i*)(xq + 32));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), qe, xe), qo, xo);
#else
  __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(qe, xe), _mm256_maddubs_epi16(qo, xo));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}
/* eight groups' partial sums -> their eight sums, in group order */
static inline __m256i sum8(const __m256i* v) {
  __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}
static float row(const uint8_t* w, const uint16_t* s, const uint16_t* b, const int8_t* xq, const float* dx,
                 const float* xs, int G) {
  __m256 acc = _mm256_setzero_ps(), accb = _mm256_setzero_ps(); __m256i v[8]; int g = 0;
  for (; g + 8 <= G; g += 8) {
    for (int j = 0; j < 256; j += 64) _mm_prefetch((const char*)(w + g * 32 + 2048 + j), _MM_HINT_T0);
    for (int j = 0; j < 8; j++) v[j] = dot(w + (g + j) * 32, xq + (g + j) * 64);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum8(v)), _mm256_mul_ps(bf8(s + g), _mm256_loadu_ps(dx + g)), acc);
    accb = _mm256_fmadd_ps(bf8(b + g), _mm256_loadu_ps(xs + g), accb);
  }
  float t = hsum(acc) + hsum(accb);
  for (; g < G; g++)
    t += hsum(_mm256_cvtepi32_ps(dot(w + g * 32, xq + g * 64))) * bf(s[g]) * dx[g] + bf(b[g]) * xs[g];
  return t;
}
/* y (n, N): experts ids[0..n) of a layer stacked (E, N, K/8), each on the prepared input row i (per_id) or row 0 */
void q4_experts(const uint32_t* W, const uint16_t* S, const uint16_t* B, const int32_t* ids, int n, int N, int K,
                const int8_t* xq, const float* dx, const float* xs, int per_id, float* y) {
  const int G = K / 64; const long rows = (long)n * N;
  #pragma omp parallel for schedule(static)
  for (long r = 0; r < rows; r++) {
    int i = r / N, e = ids[i]; long n_ = (long)e * N + r % N; int x = per_id ? i : 0;
    y[r] = row((const uint8_t*)(W + n_ * (K / 8)), S + n_ * G, B + n_ * G, xq + (long)x * K, dx + (long)x * G,
               xs + (long)x * G, G);
  }
}
