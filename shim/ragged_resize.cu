// The ragged crop + resize + flip + normalise of device-augmented ResNet batches
// (data.augment = "gpu"): decoded regions of different sizes, back to back in one u8 arena
// (interleaved RGB, each region `width * 3` bytes a row), to the normalised channels-last batch
// [n, size, size, 3] (the memory of an NCHW tensor in channels-last strides).
// shim/ragged_resize.cpp runs it.
//
// One text, two compilers:
// - NVRTC, at run time on a GPU (ragged_resize.cpp embeds the text: build.rs writes it into
//   OUT_DIR/ragged_resize_cu.inc); the prelude defines MR_KERNEL as `extern "C" __global__`.
// - The host C++ compiler: ragged_resize.cpp includes this file with __device__ and
//   __forceinline__ defined away and runs the per-pixel functions in loops (the CPU twin, used by
//   CPU runs and the tests): the same arithmetic on both sides, only the order of the loops
//   differs.
// No #include: NVRTC has no CUDA headers here.
//
// Resampling as the CPU path's (fast_image_resize, PIL): separable, the bilinear (triangle)
// filter widened by the downscale factor (antialiased), normalised to sum 1; source pixel j's
// centre at j + 0.5, output pixel i's at start + (i + 0.5) * len / size (i mirrored when the
// image is flipped); taps only inside the region. Pass 1 resizes each region row to `size`
// columns (fp32, a ragged scratch of sum(heights) rows); pass 2 each image's columns to `size`
// rows, then (v - mean) / std in the output type. All arithmetic fp32.

// Values per image in the parameter array (doubles: exact for any byte offset): arena offset,
// region width, region height, crop left, top, width, height, flip (0/1), first scratch row.
#define MR_RR_PARAMS 9

typedef unsigned short mr_u16;

// The taps of output pixel `i` along one axis: the filter's centre and support, and the first
// and last source pixel inside both the filter and the region.
struct RrTaps {
  float center;
  float support;
  int lo;
  int hi;
};

__device__ __forceinline__ RrTaps rr_taps(float start, float len, int extent, int size, int i) {
  RrTaps t;
  const float scale = len / (float)size;
  t.support = scale > 1.0f ? scale : 1.0f;
  t.center = start + ((float)i + 0.5f) * scale;
  // source pixel j weighs when |j + 0.5 - center| < support
  int lo = (int)floorf(t.center - t.support - 0.5f);
  int hi = (int)ceilf(t.center + t.support - 0.5f);
  t.lo = lo < 0 ? 0 : lo;
  t.hi = hi > extent - 1 ? extent - 1 : hi;
  return t;
}

__device__ __forceinline__ float rr_weight(const RrTaps& t, int j) {
  const float d = fabsf(((float)j + 0.5f - t.center) / t.support);
  return d < 1.0f ? 1.0f - d : 0.0f;
}

// The image whose scratch rows hold row `r`: the last i with first_row(i) <= r.
__device__ __forceinline__ int rr_image_of(const double* params, int n, long long r) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if ((long long)params[mid * MR_RR_PARAMS + 8] <= r) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Pass 1, one output value: row `y` of image `i` resampled at output column `x` (3 channels).
__device__ __forceinline__ void rr_row_px(const unsigned char* arena, const double* params, int i,
                                          int y, int x, int size, float* scratch) {
  const double* p = params + (long long)i * MR_RR_PARAMS;
  const long long offset = (long long)p[0];
  const int width = (int)p[1];
  const int xi = p[7] != 0.0 ? size - 1 - x : x;
  const RrTaps t = rr_taps((float)p[3], (float)p[5], width, size, xi);
  const unsigned char* src = arena + offset + (long long)y * width * 3;
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, sum = 0.0f;
  for (int j = t.lo; j <= t.hi; ++j) {
    const float w = rr_weight(t, j);
    s0 += w * (float)src[3 * j];
    s1 += w * (float)src[3 * j + 1];
    s2 += w * (float)src[3 * j + 2];
    sum += w;
  }
  const float inv = 1.0f / (sum > 1e-12f ? sum : 1e-12f);
  float* dst = scratch + (((long long)p[8] + y) * size + x) * 3;
  dst[0] = s0 * inv;
  dst[1] = s1 * inv;
  dst[2] = s2 * inv;
}

// Pass 2, one output pixel: column `x` of image `i` resampled at output row `y`, normalised;
// `out3` receives the 3 channels.
__device__ __forceinline__ void rr_col_px(const float* scratch, const double* params, int i, int y,
                                          int x, int size, const float* mean, const float* inv_std,
                                          float* out3) {
  const double* p = params + (long long)i * MR_RR_PARAMS;
  const int height = (int)p[2];
  const RrTaps t = rr_taps((float)p[4], (float)p[6], height, size, y);
  const float* src = scratch + ((long long)p[8] * size + x) * 3;
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, sum = 0.0f;
  for (int j = t.lo; j <= t.hi; ++j) {
    const float w = rr_weight(t, j);
    const float* v = src + (long long)j * size * 3;
    s0 += w * v[0];
    s1 += w * v[1];
    s2 += w * v[2];
    sum += w;
  }
  const float inv = 1.0f / (sum > 1e-12f ? sum : 1e-12f);
  out3[0] = (s0 * inv - mean[0]) * inv_std[0];
  out3[1] = (s1 * inv - mean[1]) * inv_std[1];
  out3[2] = (s2 * inv - mean[2]) * inv_std[2];
}

// Output stores: fp32, bf16 (round to nearest even, NaN kept) and fp16 (the GPU's cvt.rn; the
// host twin's rr_float_to_half, which rounds the same way).
__device__ __forceinline__ void rr_store(float* p, float v) { *p = v; }
struct RrBf16 {
  mr_u16 bits;
};
struct RrF16 {
  mr_u16 bits;
};
__device__ __forceinline__ void rr_store(RrBf16* p, float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    p->bits = (mr_u16)0x7fc0;
    return;
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  p->bits = (mr_u16)(u >> 16);
}
__device__ __forceinline__ void rr_store(RrF16* p, float f) {
#ifdef __CUDACC_RTC__
  mr_u16 v;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f));
  p->bits = v;
#else
  p->bits = rr_float_to_half(f);
#endif
}

#ifdef __CUDACC_RTC__
// ---- the kernels (GPU only; the host twin loops over the same functions) --------------------

// grid.x: scratch rows (all images'), threads over the output columns
MR_KERNEL void rr_rows(const unsigned char* arena, const double* params, int n, int size,
                       float* scratch) {
  const long long r = blockIdx.x;
  const int i = rr_image_of(params, n, r);
  const int y = (int)(r - (long long)params[i * MR_RR_PARAMS + 8]);
  for (int x = threadIdx.x; x < size; x += blockDim.x) {
    rr_row_px(arena, params, i, y, x, size, scratch);
  }
}

// grid.x: n * size output rows, threads over the output columns
template <class OT>
__device__ __forceinline__ void rr_cols(const float* scratch, const double* params, int size,
                                        float m0, float m1, float m2, float s0, float s1,
                                        float s2, OT* out) {
  const int i = blockIdx.x / size;
  const int y = blockIdx.x % size;
  const float mean[3] = {m0, m1, m2};
  const float inv_std[3] = {1.0f / s0, 1.0f / s1, 1.0f / s2};
  for (int x = threadIdx.x; x < size; x += blockDim.x) {
    float v[3];
    rr_col_px(scratch, params, i, y, x, size, mean, inv_std, v);
    OT* o = out + (((long long)i * size + y) * size + x) * 3;
    rr_store(o, v[0]);
    rr_store(o + 1, v[1]);
    rr_store(o + 2, v[2]);
  }
}

MR_KERNEL void rr_cols_f32(const float* scratch, const double* params, int size, float m0,
                           float m1, float m2, float s0, float s1, float s2, float* out) {
  rr_cols(scratch, params, size, m0, m1, m2, s0, s1, s2, out);
}
MR_KERNEL void rr_cols_bf16(const float* scratch, const double* params, int size, float m0,
                            float m1, float m2, float s0, float s1, float s2, RrBf16* out) {
  rr_cols(scratch, params, size, m0, m1, m2, s0, s1, s2, out);
}
MR_KERNEL void rr_cols_f16(const float* scratch, const double* params, int size, float m0,
                           float m1, float m2, float s0, float s1, float s2, RrF16* out) {
  rr_cols(scratch, params, size, m0, m1, m2, s0, s1, s2, out);
}
#endif
