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

// Four adjacent elements as one aligned load or store (the _v4 kernels): 16 bytes of fp32, 8 of
// a 16-bit type, 4 of mask bytes. The host only takes that path when every pointer is aligned to
// its vector and the row length is a multiple of 4.
struct alignas(16) F32x4 { float v[4]; };
struct alignas(8) U16x4 { u16 v[4]; };
struct alignas(4) U8x4 { unsigned char v[4]; };
template <class TY>
__device__ __forceinline__ void load4(const float* p, float* o) {
  const F32x4 t = *reinterpret_cast<const F32x4*>(p);
  for (int j = 0; j < 4; ++j) o[j] = t.v[j];
}
template <class TY>
__device__ __forceinline__ void load4(const u16* p, float* o) {
  const U16x4 t = *reinterpret_cast<const U16x4*>(p);
  for (int j = 0; j < 4; ++j) o[j] = TY::load(t.v[j]);
}
__device__ __forceinline__ void store4(float* p, const float* in) {
  F32x4 t;
  for (int j = 0; j < 4; ++j) t.v[j] = in[j];
  *reinterpret_cast<F32x4*>(p) = t;
}
// a 16-bit type's (BF16, F16) rounding of four values; F32 below
template <class TY>
__device__ __forceinline__ void store4(typename TY::T* p, const float* in) {
  U16x4 t;
  for (int j = 0; j < 4; ++j) t.v[j] = TY::store(in[j]);
  *reinterpret_cast<U16x4*>(p) = t;
}
template <>
__device__ __forceinline__ void store4<F32>(float* p, const float* in) { store4(p, in); }
__device__ __forceinline__ void load_mask4(const unsigned char* p, unsigned char* o) {
  const U8x4 t = *reinterpret_cast<const U8x4*>(p);
  for (int j = 0; j < 4; ++j) o[j] = t.v[j];
}

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): four 32-bit
// random words from a 128-bit counter and a 64-bit key, for the _v4 forward's own dropout mask.
__device__ __forceinline__ unsigned mr_umulhi(unsigned a, unsigned b) {
#ifdef __CUDACC_RTC__
  return __umulhi(a, b);
#else
  return (unsigned)(((unsigned long long)a * b) >> 32);
#endif
}
__device__ __forceinline__ void philox4x32_10(unsigned c[4], unsigned k0, unsigned k1) {
  for (int r = 0; r < 10; ++r) {
    const unsigned hi0 = mr_umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
    const unsigned hi1 = mr_umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
    const unsigned n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
}

// Sum over the warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `buf` holds 33 floats; the trailing __syncthreads lets the caller reuse it at once.
__device__ __forceinline__ float block_sum(float v, float* buf) {
  v = warp_sum(v);
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  if (lane == 0) buf[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const float w = warp_sum(lane < nwarps ? buf[lane] : 0.f);
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

// d gamma, d beta and (part_bias given) the bias's d h partial column sums: thread = column,
// blockIdx.y = a chunk of rows; mr_fe_colsum_final sums the [chunks, cols] partials. Reads are
// coalesced along the row.
MR_KERNEL void mr_fe_colsum(const OT::T* __restrict__ dy, const float* __restrict__ s,
                                        const float* __restrict__ mean, const float* __restrict__ rstd,
                                        const HT::T* __restrict__ dh,
                                        int rows, int cols, int rows_per_chunk,
                                        float* __restrict__ part_gamma, float* __restrict__ part_beta,
                                        float* __restrict__ part_bias) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int r0 = blockIdx.y * rows_per_chunk;
  const int r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float dg = 0.f, db = 0.f, dhb = 0.f;
  for (int r = r0; r < r1; ++r) {
    const long long i = (long long)r * cols + c;
    float d = OT::load(dy[i]);
    dg += d * (s[i] - mean[r]) * rstd[r];
    db += d;
    if (part_bias) dhb += HT::load(dh[i]);
  }
  part_gamma[(long long)blockIdx.y * cols + c] = dg;
  part_beta[(long long)blockIdx.y * cols + c] = db;
  if (part_bias) part_bias[(long long)blockIdx.y * cols + c] = dhb;
}

// ---- the vectorised row kernels ------------------------------------------------------------
// mr_fe_forward and mr_fe_backward for rows whose length is a multiple of 4 and at most
// 4 * 32 * MR_FE_GROUPS (1,024), with every pointer aligned to its 4-element vector (the host
// checks; other rows take the kernels above). The same math, element for element, as those, but
// one WARP per row (blockDim.x / 32 rows per block, `rows` bounds the last block): lane l owns
// the groups of 4 adjacent elements g = l + 32 k, loads and stores each group as one vector and
// keeps its values in registers between the passes, and the row's sums are warp shuffles, with
// no block barrier. So a row is read once, s is written once and never read back here, and an
// SM keeps dozens of rows' loads in flight.
#define MR_FE_GROUPS 8

// mr_fe_forward_v4 can also draw the dropout mask itself (mask_out given, `mask` null): element
// e of the tensor is kept when the Philox4x32-10 word of counter (offset / 4 as 64 bits, then
// e / 4 as 64 bits) and key `seed`, picked by e % 4, is below keep * 2^32; the mask goes to
// mask_out for the backward. seed and offset come as values, or under CUDA graph capture as
// device pointers read at run time (offset = *offset_ptr + offset_intragraph), as ATen's philox
// unpack reads a PhiloxCudaState, so every replay draws a new mask.
MR_KERNEL void mr_fe_forward_v4(const HT::T* __restrict__ h, const float* __restrict__ bias,
                                const unsigned char* __restrict__ mask, float scale,
                                const RT::T* __restrict__ res, const float* __restrict__ gamma,
                                const float* __restrict__ beta, float eps, int cols,
                                OT::T* __restrict__ y, float* __restrict__ s,
                                float* __restrict__ mean_out, float* __restrict__ rstd_out,
                                unsigned char* __restrict__ mask_out, float keep,
                                unsigned long long seed_val, const long long* seed_ptr,
                                unsigned long long offset_val, const long long* offset_ptr,
                                unsigned long long offset_intragraph, int rows) {
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;  // the whole warp: no shuffle is left waiting
  const long long base = row * cols;
  const int groups = cols >> 2;
  unsigned long long seed = seed_val, offset = offset_val;
  if (mask_out) {
    if (seed_ptr) seed = (unsigned long long)*seed_ptr;
    if (offset_ptr) offset = (unsigned long long)*offset_ptr + offset_intragraph;
  }
  // keep * 2^32 as an integer threshold (keep < 1)
  const unsigned threshold = (unsigned)((double)keep * 4294967296.0);
  float v[MR_FE_GROUPS][4];
  float sum = 0.f;
  for (int k = 0; k < MR_FE_GROUPS; ++k) {
    const int g = lane + 32 * k;
    if (g >= groups) continue;
    const long long i = base + 4 * g;
    float hv[4], rv[4], bv[4];
    unsigned char mv[4];
    load4<HT>(h + i, hv);
    load4<RT>(res + i, rv);
    if (bias) load4<F32>(bias + 4 * g, bv);
    if (mask) load_mask4(mask + i, mv);
    if (mask_out) {
      // curand's layout (ATen's dropout kernels): the offset's 4-word block in the counter's low
      // half, the subsequence (here the element group) in its high half; the generator reserved
      // this block for this call alone, so no other kernel's counters meet ours
      const unsigned long long e4 = (unsigned long long)(i >> 2), o4 = offset >> 2;
      unsigned c[4] = {(unsigned)o4, (unsigned)(o4 >> 32), (unsigned)e4, (unsigned)(e4 >> 32)};
      philox4x32_10(c, (unsigned)seed, (unsigned)(seed >> 32));
      U8x4 m;
      for (int j = 0; j < 4; ++j) m.v[j] = mv[j] = c[j] < threshold ? 1 : 0;
      *reinterpret_cast<U8x4*>(mask_out + i) = m;
    }
    const bool masked = mask || mask_out;
    for (int j = 0; j < 4; ++j) {
      float x = hv[j];
      if (bias) x += bv[j];
      if (masked) x = mv[j] ? x * scale : 0.f;
      x += rv[j];
      v[k][j] = x;
      sum += x;
    }
    store4(s + i, v[k]);
  }
  const float mean = warp_sum(sum) / cols;
  float sq = 0.f;
  for (int k = 0; k < MR_FE_GROUPS; ++k) {
    const int g = lane + 32 * k;
    if (g >= groups) continue;
    for (int j = 0; j < 4; ++j) {
      const float d = v[k][j] - mean;
      sq += d * d;
    }
  }
  const float rstd = rsqrtf(warp_sum(sq) / cols + eps);
  for (int k = 0; k < MR_FE_GROUPS; ++k) {
    const int g = lane + 32 * k;
    if (g >= groups) continue;
    float gv[4], bev[4], out[4];
    load4<F32>(gamma + 4 * g, gv);
    load4<F32>(beta + 4 * g, bev);
    for (int j = 0; j < 4; ++j) out[j] = (v[k][j] - mean) * rstd * gv[j] + bev[j];
    store4<OT>(y + base + 4 * g, out);
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

MR_KERNEL void mr_fe_backward_v4(const OT::T* __restrict__ dy, const float* __restrict__ s,
                                 const float* __restrict__ mean, const float* __restrict__ rstd,
                                 const float* __restrict__ gamma,
                                 const unsigned char* __restrict__ mask, float scale, int cols,
                                 HT::T* __restrict__ dh, RT::T* __restrict__ dres, int rows) {
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;  // the whole warp
  const long long base = row * cols;
  const int groups = cols >> 2;
  const float m = mean[row], r = rstd[row];
  float gg[MR_FE_GROUPS][4], xc[MR_FE_GROUPS][4];  // dy * gamma, s - mean
  float sg = 0.f, sgx = 0.f;
  for (int k = 0; k < MR_FE_GROUPS; ++k) {
    const int g = lane + 32 * k;
    if (g >= groups) continue;
    const long long i = base + 4 * g;
    float dv[4], sv[4], gv[4];
    load4<OT>(dy + i, dv);
    load4<F32>(s + i, sv);
    load4<F32>(gamma + 4 * g, gv);
    for (int j = 0; j < 4; ++j) {
      gg[k][j] = dv[j] * gv[j];
      xc[k][j] = sv[j] - m;
      sg += gg[k][j];
      sgx += gg[k][j] * xc[k][j] * r;
    }
  }
  const float mg = warp_sum(sg) / cols;
  const float mgx = warp_sum(sgx) / cols;
  for (int k = 0; k < MR_FE_GROUPS; ++k) {
    const int g = lane + 32 * k;
    if (g >= groups) continue;
    const long long i = base + 4 * g;
    float ds[4], d[4];
    unsigned char mv[4];
    if (mask) load_mask4(mask + i, mv);
    for (int j = 0; j < 4; ++j) {
      ds[j] = r * (gg[k][j] - mg - xc[k][j] * r * mgx);
      d[j] = mask ? (mv[j] ? ds[j] * scale : 0.f) : ds[j];
    }
    if (dres) store4<RT>(dres + i, ds);
    store4<HT>(dh + i, d);
  }
}

// The column sums' second stage: the [chunks, cols] partials of mr_fe_colsum summed per
// column into d gamma, d beta and, when given, the dense bias's gradient (the column sum of d h
// in h's dtype, rounded to it as ATen's sum of a 16-bit d h would be, then widened to the fp32
// bias). A block takes 32 columns (lane = column); its warps split the chunks (warp w: chunks
// w, w + warps, ...; four at a time, so each thread has several loads in flight), and warp 0
// adds the warps' sums in warp order: the same order every run (deterministic).
MR_KERNEL void mr_fe_colsum_final(const float* __restrict__ part_gamma,
                                  const float* __restrict__ part_beta,
                                  const float* __restrict__ part_bias, int chunks, int cols,
                                  float* __restrict__ dgamma, float* __restrict__ dbeta,
                                  float* __restrict__ dbias) {
  __shared__ float red[3][32][33];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int c = blockIdx.x * 32 + lane;
  float g[4] = {0.f, 0.f, 0.f, 0.f}, b[4] = {0.f, 0.f, 0.f, 0.f}, hb[4] = {0.f, 0.f, 0.f, 0.f};
  if (c < cols) {
    int k = warp;
    for (; k + 3 * warps < chunks; k += 4 * warps) {
      for (int u = 0; u < 4; ++u) {
        const long long i = (long long)(k + u * warps) * cols + c;
        g[u] += part_gamma[i];
        b[u] += part_beta[i];
        if (part_bias) hb[u] += part_bias[i];
      }
    }
    for (; k < chunks; k += warps) {
      const long long i = (long long)k * cols + c;
      g[0] += part_gamma[i];
      b[0] += part_beta[i];
      if (part_bias) hb[0] += part_bias[i];
    }
  }
  red[0][warp][lane] = (g[0] + g[1]) + (g[2] + g[3]);
  red[1][warp][lane] = (b[0] + b[1]) + (b[2] + b[3]);
  red[2][warp][lane] = (hb[0] + hb[1]) + (hb[2] + hb[3]);
  __syncthreads();
  if (warp == 0 && c < cols) {
    float sg = 0.f, sb = 0.f, sh = 0.f;
    for (int w = 0; w < warps; ++w) {
      sg += red[0][w][lane];
      sb += red[1][w][lane];
      sh += red[2][w][lane];
    }
    dgamma[c] = sg;
    dbeta[c] = sb;
    if (part_bias) dbias[c] = HT::load(HT::store(sh));
  }
}
