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

// ---- FP8 (E4M3) output for an FP8 matmul that reads this kernel's output ----------------------
// methods.fp8 with fused epilogues: a kernel whose output feeds an FP8 linear also writes that
// output cast to E4M3 (q = e4m3(saturate(v * scale)), v the output as stored, i.e. after its own
// rounding to OT, and `scale` the linear's input scale, read from the device) and the output's
// amax (max |v|), so the linear skips its own pass over the tensor (src/fused/fp8.rs).
// The cast is the one ATen's (t * scale).clamp(-448, 448).to(Float8_e4m3fn) makes: round to
// nearest even, subnormals kept (steps of 2^-9 below 2^-6), +-448 for anything larger (also
// infinities), NaN to E4M3's NaN (0x7f) with its sign; written with integer operations only, so
// the GPU and the emulator give the same bits whatever the float rounding mode.
//
// mr_fp8<M, B, SAT, CODE>: x cast to the FP8 format with M mantissa bits and exponent bias B,
// where |x| >= SAT (fp32 bits: the format's largest finite value) saturates to CODE (its bits),
// as ATen's cast after the clamp to that value: round to nearest even, subnormals kept (steps of
// 2^(1 - B - M) below 2^(1 - B)), NaN to 0x7f with its sign.
template <unsigned M, unsigned B, unsigned SAT, unsigned CODE>
__device__ __forceinline__ unsigned char mr_fp8(float x) {
  const unsigned u = __float_as_uint(x);
  const unsigned char sign = (unsigned char)((u >> 24) & 0x80u);
  const unsigned a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7f;          // NaN
  if (a >= SAT) return sign | (unsigned char)CODE;  // saturated to the largest finite value
  const unsigned e = a >> 23;                       // the biased fp32 exponent
  const unsigned drop = 23u - M;                    // fp32 mantissa bits the format drops
  if (e >= 128u - B) {                              // >= 2^(1 - B): normal in the format
    const unsigned r = a + ((1u << (drop - 1u)) - 1u) + ((a >> drop) & 1u);  // to even
    return sign | (unsigned char)((r >> drop) - ((127u - B) << M));
  }
  // below 2^(1 - B): a multiple of the smallest subnormal 2^(1 - B - M) (0 .. 2^M; 2^M is the
  // smallest normal)
  const unsigned sig = e == 0 ? (a & 0x7fffffu) : ((a & 0x7fffffu) | 0x800000u);
  const unsigned shift = (151u - B - M) - (e == 0 ? 1u : e);  // value / step = sig / 2^shift
  if (shift >= 25u) return sign;  // sig < 2^24 <= half of 2^shift: rounds to (signed) 0
  unsigned q = sig >> shift;
  const unsigned rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | (unsigned char)q;
}

// E4M3 (activations, weights): largest finite 448 (0x43e00000 in fp32, code 0x7e)
__device__ __forceinline__ unsigned char mr_e4m3(float x) {
  return mr_fp8<3u, 7u, 0x43e00000u, 0x7eu>(x);
}

// E5M2 (the output gradients): largest finite 57344 (0x47600000, code 0x7b), steps of 2^-16
// below 2^-14; ATen's (t * scale).clamp(-57344, 57344).to(Float8_e5m2), bit for bit.
__device__ __forceinline__ unsigned char mr_e5m2(float x) {
  return mr_fp8<2u, 15u, 0x47600000u, 0x7bu>(x);
}

// max(m, v) where a NaN wins (as ATen's max of a tensor with a NaN is NaN)
__device__ __forceinline__ float mr_nanmax(float m, float v) { return (v != v || v > m) ? v : m; }

// max over the warp with mr_nanmax (a NaN wins); every lane gets the result
__device__ __forceinline__ float mr_warp_nanmax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = mr_nanmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// ---- FP8 casts in one pass (methods.fp8's casts outside the fused epilogues) ----------------
// q = the format's cast of saturate(x * *scale) (format 0 E4M3, 1 E5M2), x HT with 4 * n4
// elements (aligned to 4 of them), and the amax of x (max |x|, a NaN wins) as one partial per
// warp into part_amax[global warp index] (gridDim.x * blockDim.x / 32 of them; then
// mr_fe_amax_record). Grid-stride over groups of 4 adjacent elements; every lane of a warp
// takes part in the shuffles, so no thread returns early. One read of x and one write of q: the
// separate path (a cast to fp32, a multiply, a clamp, a cast, then |x| and its max) makes about
// nine passes.
MR_KERNEL void mr_fe_fp8_cast(const HT::T* __restrict__ x, long long n4,
                              const float* __restrict__ scale, int format,
                              unsigned char* __restrict__ q, float* __restrict__ part_amax) {
  const float sc = *scale;
  const long long stride = (long long)gridDim.x * blockDim.x;
  float amax = 0.f;
  for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < n4; g += stride) {
    float v[4];
    load4<HT>(x + 4 * g, v);
    U8x4 o;
    for (int j = 0; j < 4; ++j) {
      amax = mr_nanmax(amax, fabsf(v[j]));
      const float t = v[j] * sc;
      o.v[j] = format == 0 ? mr_e4m3(t) : mr_e5m2(t);
    }
    *reinterpret_cast<U8x4*>(q + 4 * g) = o;
  }
  amax = mr_warp_nanmax(amax);
  if ((threadIdx.x & 31) == 0)
    part_amax[((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5] = amax;
}

// *cell = max(*cell, max(part[0 .. n))), a NaN winning (ATen's maximum and max): the amax
// history's cell of this step, which already holds the step's earlier micro-batches' amax (or
// 0). One block (blockDim.x a multiple of 32, at most 1024).
MR_KERNEL void mr_fe_amax_record(const float* __restrict__ part, int n, float* __restrict__ cell) {
  __shared__ float buf[32];
  float m = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = mr_nanmax(m, part[i]);
  m = mr_warp_nanmax(m);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  if (lane == 0) buf[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = mr_warp_nanmax(lane < nwarps ? buf[lane] : 0.f);
    if (lane == 0) *cell = mr_nanmax(*cell, m);
  }
}

// ---- FP8 casts in both layouts (methods.fp8's backward GEMMs) ------------------------------
// cuBLASLt's FP8 GEMM takes its first operand row-major and its second column-major only, so
// dW = g^T x wants g^T and x^T as row-major matrices and dX = g W wants W^T: ATen would copy each
// cast tensor into its transpose, a second pass over it (Transformer Engine casts and
// transposes in one kernel for this reason). Here a block takes one tile of MR_CT_ROWS x
// MR_CT_COLS elements of the [rows, cols] matrix: it reads the tile once (4 adjacent elements
// per load), casts it as mr_fe_fp8_cast does into q [rows_out, cols] and, through shared memory,
// writes the same bytes transposed into qt [cols, rows_out]; rows rows .. rows_out (the GEMM's
// padding to a multiple of 16) are zero in both. One amax partial per block into
// part_amax[blockIdx.y * gridDim.x + blockIdx.x] (then mr_fe_amax_record).
// With x null, the tile comes from q_in (an FP8 tensor [rows, cols] already cast: the fused
// epilogues' outputs) and only qt is written (q and part_amax are null).
// cols and rows_out are multiples of 4, every pointer aligned to 4 of its elements (the host
// checks). grid: (ceil(rows_out / MR_CT_ROWS), ceil(cols / MR_CT_COLS)); any 1-d block size
// that is a multiple of 32, at most 1024.
#define MR_CT_ROWS 32
#define MR_CT_COLS 64
MR_KERNEL void mr_fe_fp8_cast_transpose(const HT::T* __restrict__ x,
                                        const unsigned char* __restrict__ q_in, int rows,
                                        int cols, int rows_out, const float* __restrict__ scale,
                                        int format, unsigned char* __restrict__ q,
                                        unsigned char* __restrict__ qt,
                                        float* __restrict__ part_amax) {
  __shared__ unsigned char tile[MR_CT_ROWS][MR_CT_COLS + 4];
  __shared__ float warp_amax[32];
  const float sc = x ? *scale : 0.f;
  const int r0 = (int)blockIdx.x * MR_CT_ROWS, c0 = (int)blockIdx.y * MR_CT_COLS;
  float amax = 0.f;
  // the tile's rows: MR_CT_COLS / 4 groups of 4 each
  for (int k = threadIdx.x; k < MR_CT_ROWS * (MR_CT_COLS / 4); k += blockDim.x) {
    const int tr = k / (MR_CT_COLS / 4), tc = (k % (MR_CT_COLS / 4)) * 4;
    const int r = r0 + tr, c = c0 + tc;
    U8x4 o;
    for (int j = 0; j < 4; ++j) o.v[j] = 0;
    if (c < cols && r < rows) {
      const long long at = (long long)r * cols + c;
      if (x) {
        float v[4];
        load4<HT>(x + at, v);
        for (int j = 0; j < 4; ++j) {
          amax = mr_nanmax(amax, fabsf(v[j]));
          const float t = v[j] * sc;
          o.v[j] = format == 0 ? mr_e4m3(t) : mr_e5m2(t);
        }
      } else {
        o = *reinterpret_cast<const U8x4*>(q_in + at);
      }
    }
    if (q && c < cols && r < rows_out) *reinterpret_cast<U8x4*>(q + (long long)r * cols + c) = o;
    for (int j = 0; j < 4; ++j) tile[tr][tc + j] = o.v[j];
  }
  __syncthreads();
  // the tile's columns as rows of qt: MR_CT_ROWS / 4 groups of 4 each
  for (int k = threadIdx.x; k < MR_CT_COLS * (MR_CT_ROWS / 4); k += blockDim.x) {
    const int tc = k / (MR_CT_ROWS / 4), tr = (k % (MR_CT_ROWS / 4)) * 4;
    const int c = c0 + tc, r = r0 + tr;
    if (c < cols && r < rows_out) {
      U8x4 o;
      for (int j = 0; j < 4; ++j) o.v[j] = tile[tr + j][tc];
      *reinterpret_cast<U8x4*>(qt + (long long)c * rows_out + r) = o;
    }
  }
  if (!part_amax) return;
  amax = mr_warp_nanmax(amax);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nwarps = blockDim.x >> 5;
  if (lane == 0) warp_amax[warp] = amax;
  __syncthreads();
  if (warp == 0) {
    amax = mr_warp_nanmax(lane < nwarps ? warp_amax[lane] : 0.f);
    if (lane == 0) part_amax[(long long)blockIdx.y * gridDim.x + blockIdx.x] = amax;
  }
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
// Full unrolling of the loops over a lane's groups, so its per-group arrays stay in registers
// (NVRTC; the emulator's C++ compiler needs nothing).
#ifdef __CUDACC_RTC__
#define MR_UNROLL _Pragma("unroll")
#else
#define MR_UNROLL
#endif

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
                                unsigned long long offset_intragraph, int rows,
                                const float* __restrict__ fp8_scale,
                                unsigned char* __restrict__ fp8_out,
                                float* __restrict__ row_amax) {
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
  // fp8_out given: the output also as E4M3 with *fp8_scale, and the row's amax (see mr_e4m3)
  const float fp8_sc = fp8_out ? *fp8_scale : 0.f;
  float amax = 0.f;
  for (int k = 0; k < MR_FE_GROUPS; ++k) {
    const int g = lane + 32 * k;
    if (g >= groups) continue;
    float gv[4], bev[4], out[4];
    load4<F32>(gamma + 4 * g, gv);
    load4<F32>(beta + 4 * g, bev);
    for (int j = 0; j < 4; ++j) out[j] = (v[k][j] - mean) * rstd * gv[j] + bev[j];
    store4<OT>(y + base + 4 * g, out);
    if (fp8_out) {
      U8x4 q;
      for (int j = 0; j < 4; ++j) {
        const float stored = OT::load(OT::store(out[j]));
        amax = mr_nanmax(amax, fabsf(stored));
        q.v[j] = mr_e4m3(stored * fp8_sc);
      }
      *reinterpret_cast<U8x4*>(fp8_out + base + 4 * g) = q;
    }
  }
  if (fp8_out) {
    for (int o = 16; o > 0; o >>= 1) amax = mr_nanmax(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
    if (fp8_out) row_amax[row] = amax;
  }
}

// mr_fe_backward_v4 also takes the column sums, so d y, s and d h are not read again. A block is
// MR_FE_BWD_WARPS warps (the host launches 32 * MR_FE_BWD_WARPS threads); warp w of block b takes
// rows_per_warp rows in a row, from (b * MR_FE_BWD_WARPS + w) * rows_per_warp, and adds each
// row's d y * xhat (d gamma), d y (d beta) and, part_bias given, d h as rounded to h's dtype (the
// dense bias) into its own slice of shared memory (no other warp touches it, so no atomics and a
// fixed order); at the end the block adds its warps' slices in warp order into row b of the
// [gridDim.x, cols] partials, which mr_fe_colsum_final sums. The sums live in shared memory
// rather than registers so that a thread needs few enough registers for several blocks per SM:
// a warp works on one row at a time, and it is the number of warps per SM that keeps enough
// loads in flight. A row's loads (d y, s, gamma and the mask) are all issued in the first pass.
#define MR_FE_BWD_WARPS 4
#ifdef __CUDACC_RTC__
#define MR_FE_BWD_BOUNDS __launch_bounds__(32 * MR_FE_BWD_WARPS, 4)
#else
#define MR_FE_BWD_BOUNDS
#endif
MR_KERNEL MR_FE_BWD_BOUNDS void mr_fe_backward_v4(
    const OT::T* __restrict__ dy, const float* __restrict__ s, const float* __restrict__ mean,
    const float* __restrict__ rstd, const float* __restrict__ gamma,
    const unsigned char* __restrict__ mask, float scale, int cols, HT::T* __restrict__ dh,
    RT::T* __restrict__ dres, int rows, int rows_per_warp, float* __restrict__ part_gamma,
    float* __restrict__ part_beta, float* __restrict__ part_bias) {
  // [warp][d gamma, d beta, d bias][group of 4 columns]: 48 KB
  __shared__ F32x4 acc[MR_FE_BWD_WARPS][3][32 * MR_FE_GROUPS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int groups = cols >> 2;
  const F32x4 zero = {{0.f, 0.f, 0.f, 0.f}};
  MR_UNROLL
  for (int k = 0; k < MR_FE_GROUPS; ++k) {
    const int g = lane + 32 * k;
    if (g >= groups) continue;
    for (int q = 0; q < 3; ++q) acc[warp][q][g] = zero;
  }
  const long long first = ((long long)blockIdx.x * MR_FE_BWD_WARPS + warp) * rows_per_warp;
  for (int t = 0; t < rows_per_warp; ++t) {
    const long long row = first + t;
    if (row >= rows) break;  // the whole warp
    const long long base = row * cols;
    const float m = mean[row], r = rstd[row];
    float gg[MR_FE_GROUPS][4], xc[MR_FE_GROUPS][4];  // dy * gamma, s - mean
    U8x4 mk[MR_FE_GROUPS];
    float sg = 0.f, sgx = 0.f;
    MR_UNROLL
    for (int k = 0; k < MR_FE_GROUPS; ++k) {
      const int g = lane + 32 * k;
      if (g >= groups) continue;
      const long long i = base + 4 * g;
      float dv[4], sv[4], gv[4];
      load4<OT>(dy + i, dv);
      load4<F32>(s + i, sv);
      load4<F32>(gamma + 4 * g, gv);
      if (mask) mk[k] = *reinterpret_cast<const U8x4*>(mask + i);
      F32x4 ag = acc[warp][0][g], ab = acc[warp][1][g];
      for (int j = 0; j < 4; ++j) {
        gg[k][j] = dv[j] * gv[j];
        xc[k][j] = sv[j] - m;
        sg += gg[k][j];
        sgx += gg[k][j] * xc[k][j] * r;
        ag.v[j] += dv[j] * xc[k][j] * r;
        ab.v[j] += dv[j];
      }
      acc[warp][0][g] = ag;
      acc[warp][1][g] = ab;
    }
    const float mg = warp_sum(sg) / cols;
    const float mgx = warp_sum(sgx) / cols;
    MR_UNROLL
    for (int k = 0; k < MR_FE_GROUPS; ++k) {
      const int g = lane + 32 * k;
      if (g >= groups) continue;
      const long long i = base + 4 * g;
      float ds[4], d[4];
      for (int j = 0; j < 4; ++j) {
        ds[j] = r * (gg[k][j] - mg - xc[k][j] * r * mgx);
        d[j] = mask ? (mk[k].v[j] ? ds[j] * scale : 0.f) : ds[j];
      }
      if (dres) store4<RT>(dres + i, ds);
      store4<HT>(dh + i, d);
      if (part_bias) {
        F32x4 ah = acc[warp][2][g];
        for (int j = 0; j < 4; ++j) ah.v[j] += HT::load(HT::store(d[j]));
        acc[warp][2][g] = ah;
      }
    }
  }
  __syncthreads();
  const long long prow = (long long)blockIdx.x * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float sum[3] = {0.f, 0.f, 0.f};
    for (int w = 0; w < MR_FE_BWD_WARPS; ++w) {
      for (int q = 0; q < 3; ++q) sum[q] += acc[w][q][c >> 2].v[c & 3];
    }
    part_gamma[prow + c] = sum[0];
    part_beta[prow + c] = sum[1];
    if (part_bias) part_bias[prow + c] = sum[2];
  }
}

// The column sums' second stage: the [chunks, cols] partials (of mr_fe_colsum or
// mr_fe_backward_v4) summed per column into d gamma (blockIdx.y 0), d beta (1) and, when given,
// the dense bias's gradient (2: the column sum of d h in h's dtype, rounded to it as ATen's sum
// of a 16-bit d h would be, then widened to the fp32 bias), for blockIdx.y = 0, 1, ... from
// `first` on (mr_fe_bias_gelu_backward's partials: first = 2, part_bias only). A block takes 32
// columns (lane = column) of one of them; its warps split the chunks (warp w: chunks w, w + warps, ...; eight at
// a time, so each thread has several loads in flight), and warp 0 adds the warps' sums in warp
// order: the same order every run (deterministic).
MR_KERNEL void mr_fe_colsum_final(const float* __restrict__ part_gamma,
                                  const float* __restrict__ part_beta,
                                  const float* __restrict__ part_bias, int chunks, int cols,
                                  float* __restrict__ dgamma, float* __restrict__ dbeta,
                                  float* __restrict__ dbias, int first) {
  __shared__ float red[32][33];
  const int which = first + blockIdx.y;
  if (which == 2 && !part_bias) return;  // the whole block
  const float* __restrict__ part = which == 0 ? part_gamma : which == 1 ? part_beta : part_bias;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int c = blockIdx.x * 32 + lane;
  float a[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  if (c < cols) {
    int k = warp;
    for (; k + 7 * warps < chunks; k += 8 * warps) {
      for (int u = 0; u < 8; ++u) a[u] += part[(long long)(k + u * warps) * cols + c];
    }
    for (; k < chunks; k += warps) a[0] += part[(long long)k * cols + c];
  }
  red[warp][lane] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
  __syncthreads();
  if (warp == 0 && c < cols) {
    float sum = 0.f;
    for (int w = 0; w < warps; ++w) sum += red[w][lane];
    if (which == 0) dgamma[c] = sum;
    if (which == 1) dbeta[c] = sum;
    if (which == 2) dbias[c] = HT::load(HT::store(sum));
  }
}

// ---- the intermediate dense's epilogue: bias + GELU -----------------------------------------
// y = GELU(z + bias) = x Phi(x), x = z + bias, the exact (erf) GELU, in fp32 (the fp32 bias added
// in fp32 too), rounded once to h's dtype (HT). z, y and d z are [rows, cols] with cols a multiple
// of 4 and every pointer aligned to its 4-element vector (the host checks).
// Phi(x) = (1 + erf(x / sqrt 2)) / 2 with erf from Abramowitz and Stegun 7.1.26: erf(a) = 1 -
// t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-a^2), t = 1 / (1 + p a), a >= 0, odd in a; at most
// 1.5e-7 off erf (about erff's own error in fp32, far below a 16-bit output's rounding), and a
// third of erff's instructions: the GELU passes over BERT's [tokens, 4096] are otherwise bound
// by arithmetic, not memory. exp(-a^2) with a = |x| / sqrt 2 is exp(-x^2 / 2), the normal
// density's exponential, which the backward needs too.
#ifdef __CUDACC_RTC__
__device__ __forceinline__ float mr_rcp(float x) { return __fdividef(1.f, x); }
__device__ __forceinline__ float mr_exp(float x) { return __expf(x); }
#else  // the CPU emulator
__device__ __forceinline__ float mr_rcp(float x) { return 1.f / x; }
__device__ __forceinline__ float mr_exp(float x) { return expf(x); }
#endif
// Phi(x) and the normal density phi(x)
__device__ __forceinline__ void mr_normal(float x, float& cdf, float& pdf) {
  const float a = fabsf(x) * 0.70710678118654752f;
  const float t = mr_rcp(1.f + 0.3275911f * a);
  const float poly =
      t * (0.254829592f +
           t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float e = mr_exp(-0.5f * x * x);  // exp(-a^2)
  const float half_erfc = 0.5f * poly * e;  // (1 - erf(a)) / 2
  cdf = x >= 0.f ? 1.f - half_erfc : half_erfc;
  pdf = e * 0.39894228040143268f;  // 1 / sqrt(2 pi)
}

// The column kernels' share (bias + GELU, fused QKV's backward): thread = 4 adjacent columns c
// (a block: 4 * blockDim.x of them), over the rows [r0, r1) of chunk blockIdx.y; false for a
// thread past the last column.
__device__ __forceinline__ bool mr_column_chunk(int rows, int cols, int rows_per_chunk, int& c,
                                                int& r0, int& r1) {
  c = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
  r0 = blockIdx.y * rows_per_chunk;
  r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  return c < cols;
}

// Thread = 4 adjacent columns (a block: 4 * blockDim.x columns) over rows_per_chunk rows from
// blockIdx.y * rows_per_chunk, the bias loaded once (no index arithmetic per element).
// fp8_out given (methods.fp8: y feeds the output dense's FP8 linear): y also as E4M3 with
// *fp8_scale (mr_e4m3 of y as stored), and the thread's amax of y into part_amax[blockIdx.y *
// cols / 4 + c / 4] (the host takes their max).
MR_KERNEL void mr_fe_bias_gelu_forward(const HT::T* __restrict__ z, const float* __restrict__ bias,
                                       int rows, int cols, int rows_per_chunk,
                                       HT::T* __restrict__ y, const float* __restrict__ fp8_scale,
                                       unsigned char* __restrict__ fp8_out,
                                       float* __restrict__ part_amax) {
  int c, r0, r1;
  if (!mr_column_chunk(rows, cols, rows_per_chunk, c, r0, r1)) return;
  float bv[4];
  load4<F32>(bias + c, bv);
  const float fp8_sc = fp8_out ? *fp8_scale : 0.f;
  float amax = 0.f;
#ifdef __CUDACC_RTC__
#pragma unroll 4
#endif
  for (int r = r0; r < r1; ++r) {
    const long long i = (long long)r * cols + c;
    float zv[4], out[4];
    load4<HT>(z + i, zv);
    for (int j = 0; j < 4; ++j) {
      const float x = zv[j] + bv[j];
      float cdf, pdf;
      mr_normal(x, cdf, pdf);
      out[j] = x * cdf;
    }
    store4<HT>(y + i, out);
    if (fp8_out) {
      U8x4 q;
      for (int j = 0; j < 4; ++j) {
        const float stored = HT::load(HT::store(out[j]));
        amax = mr_nanmax(amax, fabsf(stored));
        q.v[j] = mr_e4m3(stored * fp8_sc);
      }
      *reinterpret_cast<U8x4*>(fp8_out + i) = q;
    }
  }
  if (fp8_out) part_amax[(long long)blockIdx.y * (cols >> 2) + (c >> 2)] = amax;
}

// d z = d y * GELU'(x) = d y (Phi(x) + x phi(x)), rounded to HT, and the bias's gradient as
// partial column sums of that rounded d z over chunks of rows_per_chunk rows (part_bias [chunks,
// cols]; then mr_fe_colsum_final with first = 2): thread = 4 adjacent columns (a block: 4 *
// blockDim.x columns), blockIdx.y = the chunk; rows in order, four loads in flight.
MR_KERNEL void mr_fe_bias_gelu_backward(const HT::T* __restrict__ dy, const HT::T* __restrict__ z,
                                        const float* __restrict__ bias, int rows, int cols,
                                        int rows_per_chunk, HT::T* __restrict__ dz,
                                        float* __restrict__ part_bias) {
  int c, r0, r1;
  if (!mr_column_chunk(rows, cols, rows_per_chunk, c, r0, r1)) return;
  float bv[4], acc[4] = {0.f, 0.f, 0.f, 0.f};
  load4<F32>(bias + c, bv);
#ifdef __CUDACC_RTC__
#pragma unroll 4
#endif
  for (int r = r0; r < r1; ++r) {
    const long long i = (long long)r * cols + c;
    float dv[4], zv[4], d[4];
    load4<HT>(dy + i, dv);
    load4<HT>(z + i, zv);
    for (int j = 0; j < 4; ++j) {
      const float x = zv[j] + bv[j];
      float cdf, pdf;
      mr_normal(x, cdf, pdf);
      d[j] = dv[j] * (cdf + x * pdf);
    }
    store4<HT>(dz + i, d);
    for (int j = 0; j < 4; ++j) acc[j] += HT::load(HT::store(d[j]));
  }
  store4(part_bias + (long long)blockIdx.y * cols + c, acc);
}

// ---- fused QKV's backward: [d q | d k | d v] and the bias's column sums --------------------
// d qkv [rows, 3 cols] = [d q | d k | d v] (each [rows, cols], contiguous), copied exactly, and
// the partial column sums of d qkv over chunks of rows_per_chunk rows (part [chunks, 3 cols];
// then mr_fe_colsum_final with first = 2: the bias's gradient). Thread = 4 adjacent columns of
// d qkv (cols a multiple of 4, so they come from one of d q, d k, d v), blockIdx.y = the chunk.
MR_KERNEL void mr_fe_qkv_grad(const HT::T* __restrict__ dq, const HT::T* __restrict__ dk,
                              const HT::T* __restrict__ dv, int rows, int cols,
                              int rows_per_chunk, HT::T* __restrict__ dqkv,
                              float* __restrict__ part) {
  const int width = 3 * cols;
  int c, r0, r1;
  if (!mr_column_chunk(rows, width, rows_per_chunk, c, r0, r1)) return;
  const int which = c / cols, cc = c - which * cols;
  const HT::T* __restrict__ src = which == 0 ? dq : which == 1 ? dk : dv;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
#ifdef __CUDACC_RTC__
#pragma unroll 4
#endif
  for (int r = r0; r < r1; ++r) {
    // widened and stored back: exact (every value of HT is a float)
    float v[4];
    load4<HT>(src + (long long)r * cols + cc, v);
    store4<HT>(dqkv + (long long)r * width + c, v);
    for (int j = 0; j < 4; ++j) acc[j] += v[j];
  }
  store4(part + (long long)blockIdx.y * width + c, acc);
}
