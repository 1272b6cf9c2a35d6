// The fused epilogue's CUDA kernels (shim/fused_epilogue.cpp runs them).
//
// One text, two compilers:
// - NVRTC, at run time on a GPU (fused_epilogue.cpp embeds this file as a string: build.rs
//   writes it into OUT_DIR/fused_epilogue_cu.inc). The prelude source_for() prepends defines
//   MR_KERNEL as `extern "C" __global__` and HT (h, d h), RT (residual, d residual) and OT (y,
//   d y) as one of F32 / BF16 / F16.
// - The host C++ compiler, for the CPU emulator of CUDA's execution model (shim/cuda_emu.hpp,
//   shim/fused_epilogue_emu.cpp): every (HT, RT, OT) in its own namespace, so tests run these
//   very kernels, with the host code's launch arguments, without a GPU.
// No #include: NVRTC has no CUDA headers here. bf16 and fp16 are handled as raw 16-bit words
// (bf16 by bit shifts with round-to-nearest-even; fp16 by the PTX cvt instructions, and by
// c10::Half's conversions, which also round to nearest even, in the emulator). Statistics, s
// and all arithmetic are fp32, as native_layer_norm keeps mean and rstd.
typedef unsigned short u16;
struct F32 {
  typedef float T;
  static __device__ __forceinline__ float load(float v) { return v; }
  static __device__ __forceinline__ float store(float f) { return f; }
};
struct BF16 {
  typedef u16 T;
  static __device__ __forceinline__ float load(u16 v) { return __uint_as_float(((unsigned)v) << 16); }
  static __device__ __forceinline__ u16 store(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)0x7fc0;  // NaN stays a (quiet) NaN
    u += 0x7fffu + ((u >> 16) & 1u);                          // round to nearest even
    return (u16)(u >> 16);
  }
};
struct F16 {
  typedef u16 T;
#ifdef __CUDACC_RTC__
  static __device__ __forceinline__ float load(u16 v) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
    return f;
  }
  static __device__ __forceinline__ u16 store(float f) {
    u16 v;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f));
    return v;
  }
#else  // the CPU emulator's conversions (shim/fused_epilogue_emu.cpp)
  static __device__ __forceinline__ float load(u16 v) { return emu_half_to_float(v); }
  static __device__ __forceinline__ u16 store(float f) { return emu_float_to_half(f); }
#endif
};

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `buf` holds 33 floats; the trailing __syncthreads lets the caller reuse it at once.
__device__ __forceinline__ float block_sum(float v, float* buf) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < nwarps ? buf[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(0xffffffffu, w, o);
    if (lane == 0) buf[32] = w;
  }
  __syncthreads();
  float r = buf[32];
  __syncthreads();
  return r;
}

// One block per row. s = res + (mask ? (h + bias) * scale : 0) (no mask: h + bias), written to
// `s` for the backward; mean and variance in two passes over s (the second pass re-reads the
// thread's own writes, which stay in L1/L2 for rows of a few KB).
MR_KERNEL void mr_fe_forward(const HT::T* __restrict__ h, const float* __restrict__ bias,
                                         const unsigned char* __restrict__ mask, float scale,
                                         const RT::T* __restrict__ res, const float* __restrict__ gamma,
                                         const float* __restrict__ beta, float eps, int cols,
                                         OT::T* __restrict__ y, float* __restrict__ s,
                                         float* __restrict__ mean_out, float* __restrict__ rstd_out) {
  __shared__ float buf[33];
  const long long base = (long long)blockIdx.x * cols;
  float sum = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = HT::load(h[base + c]);
    if (bias) v += bias[c];
    if (mask) v = mask[base + c] ? v * scale : 0.f;
    v += RT::load(res[base + c]);
    s[base + c] = v;
    sum += v;
  }
  const float mean = block_sum(sum, buf) / cols;
  float sq = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float d = s[base + c] - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(block_sum(sq, buf) / cols + eps);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    y[base + c] = OT::store((s[base + c] - mean) * rstd * gamma[c] + beta[c]);
  }
  if (threadIdx.x == 0) {
    mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
}

// One block per row: LayerNorm's input gradient ds = rstd * (g - mean(g) - xhat * mean(g xhat)),
// g = dy * gamma, then d residual = ds and d h = mask ? ds * scale : 0 (no mask: ds).
MR_KERNEL void mr_fe_backward(const OT::T* __restrict__ dy, const float* __restrict__ s,
                                          const float* __restrict__ mean, const float* __restrict__ rstd,
                                          const float* __restrict__ gamma,
                                          const unsigned char* __restrict__ mask, float scale, int cols,
                                          HT::T* __restrict__ dh, RT::T* __restrict__ dres) {
  __shared__ float buf[33];
  const long long base = (long long)blockIdx.x * cols;
  const float m = mean[blockIdx.x], r = rstd[blockIdx.x];
  float sg = 0.f, sgx = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float g = OT::load(dy[base + c]) * gamma[c];
    sg += g;
    sgx += g * (s[base + c] - m) * r;
  }
  const float mg = block_sum(sg, buf) / cols;
  const float mgx = block_sum(sgx, buf) / cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float g = OT::load(dy[base + c]) * gamma[c];
    float ds = r * (g - mg - (s[base + c] - m) * r * mgx);
    if (dres) dres[base + c] = RT::store(ds);
    float d = mask ? (mask[base + c] ? ds * scale : 0.f) : ds;
    dh[base + c] = HT::store(d);
  }
}

// d gamma and d beta partial column sums: thread = column, blockIdx.y = a chunk of rows; the
// caller sums the [chunks, cols] partials with ATen. Reads are coalesced along the row.
MR_KERNEL void mr_fe_colsum(const OT::T* __restrict__ dy, const float* __restrict__ s,
                                        const float* __restrict__ mean, const float* __restrict__ rstd,
                                        int rows, int cols, int rows_per_chunk,
                                        float* __restrict__ part_gamma, float* __restrict__ part_beta) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int r0 = blockIdx.y * rows_per_chunk;
  const int r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float dg = 0.f, db = 0.f;
  for (int r = r0; r < r1; ++r) {
    const long long i = (long long)r * cols + c;
    float d = OT::load(dy[i]);
    dg += d * (s[i] - mean[r]) * rstd[r];
    db += d;
  }
  part_gamma[(long long)blockIdx.y * cols + c] = dg;
  part_beta[(long long)blockIdx.y * cols + c] = db;
}
