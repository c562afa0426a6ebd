// npu-deploy's GEMV with FP32 output (ours, not mlir-air's), for AIE2P with Peano.
//
// The LM head writing FP32 logits. mlir-air's GEMV micro-kernel
// (programming_examples/matrix_vector_multiplication/bf16/mv.cc, e972f29) sums each row of
// A times B into a 64-lane FP32 accumulator, reduces the lanes and stores the sum as bf16;
// this kernel keeps that loop and reduction and stores the float. Its callers pass the
// same arguments as mv.cc's (m rows of A per call, K, the row offset into the output tile),
// with the output tile of DIM_M_OUTPUT floats. Not measured on an NPU.
//
// Compile: clang++ -O2 -std=c++20 --target=aie2p-none-unknown-elf -DDIM_M_OUTPUT=TM
//   -DSYM_SUFFIX=_mTM -c mv_f32.cc
//
//   a      [m, k]          bf16   m rows of W
//   b      [k]             bf16   x
//   c      [DIM_M_OUTPUT]  f32    the tile's outputs (this call writes m from row_offset)

#include <aie_api/aie.hpp>
#include <stdint.h>

#ifndef DIM_M_OUTPUT
#error "DIM_M_OUTPUT (the output tile's rows) is required"
#endif
#ifndef SYM_SUFFIX
#define SYM_SUFFIX
#endif
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define SYM(name) CAT(name, SYM_SUFFIX)

constexpr int R = 64;      // lanes of the accumulator, as mv.cc's matvec_vectorized<64>
constexpr int VL = 16;     // AIE2P: 16 lanes of FP32 per store

static_assert(DIM_M_OUTPUT % VL == 0, "the output tile in 16-lane vectors");

extern "C" {

// c = 0
void SYM(linalg_fill_f32)(float *__restrict c) {
  for (int i = 0; i < DIM_M_OUTPUT; i += VL)
    aie::store_v(c + i, aie::zeros<float, VL>());
}

// c[row_offset + i] = sum_j a[i, j] * b[j], for i < m: FP32 lanes, one reduction, no cast
void SYM(matvec_vectorized_bf16_f32)(int32_t m, int32_t k, int32_t row_offset,
                                     const bfloat16 *__restrict a,
                                     const bfloat16 *__restrict b, float *__restrict c) {
  ::aie::set_rounding(aie::rounding_mode::conv_even);
  c += row_offset;
  for (int32_t i = 0; i < m; ++i, ++c) {
    aie::accum<accfloat, R> acc = aie::zeros<accfloat, R>();
    for (int32_t j = 0; j < k; j += R, a += R)
      acc = aie::mac(acc, aie::load_v<R>(a), aie::load_v<R>(b + j));
    *c = aie::reduce_add(acc.template to_vector<float>());
  }
}

} // extern "C"
