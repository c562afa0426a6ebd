// npu-deploy's decode-attention micro-kernels (ours, not mlir-air's), for AIE2P with Peano.
//
// The program (kernels/families/decode_attention.py) follows mlir-air's
// programming_examples/attention_decode (attn_decode_npu2.py, e972f29): one column per KV
// head holds the group's queries and a score row per query in L1, K rows stream in one at a
// time (scores), the row's softmax runs once, V rows stream in (values) into an FP32
// accumulator. Upstream's own kernels (attn_decode_npu2.cc: attn_1_group, attn_2_group)
// static_assert GROUP_SIZE == 4 and DIM_N == 64 and accumulate in bf16 (upstream now runs
// that part inline with an FP32 accumulator, Xilinx/mlir-air#1600); these take any group
// and head_dim, keep scores and the accumulator in FP32, and mask the score row's padding.
//
// One object serves every cache length up to SEQ_LEN: the step's length arrives at run
// time in L1 (`len`, one int32 the host writes per token; the program streams SEQ_LEN rows
// whatever it is), as upstream's fused decode serves every length from one template built
// at ATTN_MAXL (programming_examples/fused_decode/README.md). Rows at or past the length
// are padding: no score, no value, and the softmax counts only the first `len` scores.
//
// Compile: clang++ -O2 -std=c++20 --target=aie2p-none-unknown-elf -DGROUP_SIZE=G
//   -DDIM_N=HD -DSEQ_LEN=L -DSYM_SUFFIX=_GxHDxL -c decode_attention.cc
//
//   q      [GROUP_SIZE, DIM_N]   bf16   the group's queries
//   row    [DIM_N]               bf16   one K or V row of the cache
//   scores [GROUP_SIZE, SEQ_LEN] f32    a score row per query (SEQ_LEN: the context the
//                                        program is built for, rounded up to its tile)
//   acc    [GROUP_SIZE, DIM_N]   f32    the output accumulator
//   out    [GROUP_SIZE, DIM_N]   bf16
//   len    [1]                   int32  the step's cache length (1..SEQ_LEN)

#include <aie_api/aie.hpp>
#include <stdint.h>

#ifndef GROUP_SIZE
#error "GROUP_SIZE (query heads per KV head) is required"
#endif
#ifndef DIM_N
#error "DIM_N (head_dim) is required"
#endif
#ifndef SEQ_LEN
#error "SEQ_LEN (the score row's length) is required"
#endif
#ifndef SYM_SUFFIX
#define SYM_SUFFIX
#endif
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define SYM(name) CAT(name, SYM_SUFFIX)

static_assert(DIM_N % 16 == 0, "head_dim in 16-lane vectors");

constexpr int VL = 16;     // AIE2P: 16 lanes of FP32 per vector op

// The step's length, held to 1..SEQ_LEN: a score row has no more positions, and a query
// always attends to its own key.
static inline int32_t length_of(const int32_t *len) {
  const int32_t n = len[0];
  return n < 1 ? 1 : (n > SEQ_LEN ? SEQ_LEN : n);
}

extern "C" {

// acc = 0
void SYM(decode_attn_zero)(float *__restrict acc) {
  for (int i = 0; i < GROUP_SIZE * DIM_N; i += VL)
    aie::store_v(acc + i, aie::zeros<float, VL>());
}

// scores[g, pos] = dot(q[g], k_row) / sqrt(DIM_N), accumulated in FP32; nothing for a
// position at or past the length (a padding row)
void SYM(decode_attn_scores)(const bfloat16 *__restrict q,
                             const bfloat16 *__restrict k_row, int32_t pos,
                             float *__restrict scores, const int32_t *__restrict len) {
  if (pos >= length_of(len))
    return;
  const float scale = 1.0f / aie::sqrt((float)DIM_N);
  for (int g = 0; g < GROUP_SIZE; ++g) {
    aie::accum<accfloat, VL> a = aie::zeros<accfloat, VL>();
    for (int d = 0; d < DIM_N; d += VL)
      a = aie::mac(a, aie::load_v<VL>(q + g * DIM_N + d), aie::load_v<VL>(k_row + d));
    scores[g * SEQ_LEN + pos] = aie::reduce_add(a.to_vector<float>()) * scale;
  }
}

// Each row's softmax over its first `len` positions, in FP32, the probabilities rounded to
// bf16 (as the PV product takes them); positions len..SEQ_LEN-1 (the padding) are set to 0.
void SYM(decode_attn_softmax)(float *__restrict scores, const int32_t *__restrict length) {
  const int32_t len = length_of(length);
  for (int g = 0; g < GROUP_SIZE; ++g) {
    float *row = scores + g * SEQ_LEN;
    float m = row[0];
    for (int i = 1; i < len; ++i)
      m = row[i] > m ? row[i] : m;
    float sum = 0.0f;
    for (int i = 0; i < len; ++i) {
      row[i] = aie::exp(row[i] - m);
      sum += row[i];
    }
    const float inv = aie::inv(sum);
    for (int i = 0; i < len; ++i)
      row[i] = (float)(bfloat16)(row[i] * inv);
    for (int i = len; i < SEQ_LEN; ++i)
      row[i] = 0.0f;
  }
}

// acc[g, :] += p[g, pos] * v_row[:], in FP32 (p is bf16-exact: the softmax rounded it);
// nothing for a position at or past the length (its p is 0, its row padding)
void SYM(decode_attn_values)(const float *__restrict p,
                             const bfloat16 *__restrict v_row, int32_t pos,
                             float *__restrict acc, const int32_t *__restrict len) {
  if (pos >= length_of(len))
    return;
  for (int g = 0; g < GROUP_SIZE; ++g) {
    const auto w = aie::broadcast<bfloat16, VL>((bfloat16)p[g * SEQ_LEN + pos]);
    for (int d = 0; d < DIM_N; d += VL) {
      aie::accum<accfloat, VL> a;
      a.from_vector(aie::load_v<VL>(acc + g * DIM_N + d));
      a = aie::mac(a, w, aie::load_v<VL>(v_row + d));
      aie::store_v(acc + g * DIM_N + d, a.template to_vector<float>());
    }
  }
}

// out = bf16(acc)
void SYM(decode_attn_out)(const float *__restrict acc, bfloat16 *__restrict out) {
  for (int i = 0; i < GROUP_SIZE * DIM_N; i += VL) {
    aie::accum<accfloat, VL> a;
    a.from_vector(aie::load_v<VL>(acc + i));
    aie::store_v(out + i, a.template to_vector<bfloat16>());
  }
}

} // extern "C"
