// Attention over packed variable-length sequences, for BERT's methods.unpad on a GPU
// (src/fused/varlen_attention.rs): FlashAttention-2's varlen kernel through ATen's
// _flash_attention_forward, which tch does not expose. The sequences' tokens lie one after
// another ([T, heads, head_dim]); cu_seqlens ([B + 1] int32, on the device) holds where each
// starts. Attention stays inside a sequence, so no padding is scattered in and no mask is read.
// The op is differentiable: autograd records FlashAttentionBackward0 for it. CUDA with fp16 /
// bf16 only (the Rust side sends nothing else).
//
// No C++ exception crosses the C boundary: errors come back through `err` (error.hpp).
#include <ATen/ATen.h>

#include "error.hpp"

extern "C" {

// *out = attention of q over k, v ([T, heads, head_dim] each, the last dim contiguous) within
// the sequences cu_seqlens delimits; max_len bounds every sequence's length; dropout_p on the
// attention probabilities (0 when not training). Scale 1/sqrt(head_dim), not causal.
int mr_varlen_flash_attention(const at::Tensor* q, const at::Tensor* k, const at::Tensor* v,
                              const at::Tensor* cu_seqlens, int64_t max_len, double dropout_p,
                              at::Tensor** out, char** err) {
  return mr::catching(err, "varlen attention", [&] {
    TORCH_CHECK(q && k && v && cu_seqlens && q->defined() && k->defined() && v->defined() &&
                    cu_seqlens->defined(),
                "an undefined input");
    TORCH_CHECK(q->is_cuda(), "FlashAttention's varlen kernel runs on CUDA tensors, got ",
                q->device());
    TORCH_CHECK(q->dim() == 3 && k->sizes() == q->sizes() && v->sizes() == q->sizes(),
                "q, k and v must be [tokens, heads, head_dim] alike, got ", q->sizes(), ", ",
                k->sizes(), ", ", v->sizes());
    TORCH_CHECK(q->scalar_type() == at::kBFloat16 || q->scalar_type() == at::kHalf,
                "FlashAttention takes bf16 or fp16, got ", q->scalar_type());
    TORCH_CHECK(cu_seqlens->scalar_type() == at::kInt && cu_seqlens->dim() == 1 &&
                    cu_seqlens->device() == q->device(),
                "cu_seqlens must be 1-d int32 on ", q->device());
    TORCH_CHECK(max_len > 0, "max_len must be > 0, got ", max_len);
    auto r = at::_flash_attention_forward(*q, *k, *v, *cu_seqlens, *cu_seqlens, max_len, max_len,
                                          dropout_p, /*is_causal=*/false,
                                          /*return_debug_mask=*/false);
    *out = new at::Tensor(std::get<0>(r));
  });
}

}  // extern "C"
