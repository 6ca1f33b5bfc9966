// Internal to the CPU backend: the per-family op entry points behind CpuBackend, the
// per-thread scratch they share, and the f32 dot product every reduction uses.
//
// Determinism: every output element is computed by one thread with a fixed order of
// operations that depends only on the op's shapes, never on how parallel_for splits
// the work, so any thread count gives bitwise identical results.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "ops/backend.h"

namespace hf2q::cpu {

// One f32 buffer per pool thread. Ops size it in the calling thread (reserve) before
// their parallel region; workers then only index their own buffer, so nothing is
// allocated inside a parallel region and buffers only grow.
class Scratch {
  public:
    explicit Scratch(int n_threads) : bufs_(static_cast<size_t>(n_threads)) {}
    void reserve(int64_t n_floats) {
        for (auto& b : bufs_)
            if (b.size() < static_cast<size_t>(n_floats)) b.resize(static_cast<size_t>(n_floats));
    }
    float* get(int thread) { return bufs_[static_cast<size_t>(thread)].data(); }

  private:
    std::vector<std::vector<float>> bufs_;
};

struct Context {
    ThreadPool& pool;
    Scratch& scratch;
    std::vector<float>& rows;  // gathered MoE rows (moe_matmul); only grows
};

void rms_norm(Context& c, const ops::RmsNormParams& p);
void rope(Context& c, const ops::RopeParams& p);
void matmul(Context& c, const ops::MatmulParams& p);
void get_rows(Context& c, const ops::GetRowsParams& p);
void geglu(Context& c, const ops::GegluParams& p);
void attention(Context& c, const ops::AttentionParams& p);
void moe_route(Context& c, const ops::MoeRouteParams& p);
void moe_group(Context& c, const ops::MoeGroupParams& p);
void moe_matmul(Context& c, const ops::MoeMatmulParams& p);
void moe_combine(Context& c, const ops::MoeCombineParams& p);
void gather_rows(Context& c, const ops::GatherRowsParams& p);
void scatter_add(Context& c, const ops::ScatterAddParams& p);
void kv_store(Context& c, const ops::KvStoreParams& p);
void copy_blocks(Context& c, const ops::CopyBlocksParams& p);
void feed_tokens(Context& c, const ops::FeedTokensParams& p);
void argmax_rows(Context& c, const ops::ArgmaxRowsParams& p);
void topk_rows(Context& c, const ops::TopkRowsParams& p);
void add(Context& c, const float* a, const float* b, float* y, int64_t n);
void scale(Context& c, float* x, float s, int64_t n);
void mul(Context& c, const float* a, const float* b, float* y, int64_t n);
void softcap(Context& c, float* x, float cap, int64_t n);

// Hot loops are compiled twice on x86-64, for AVX2 and for the baseline, and the loader
// picks one per machine. Both clones do the same IEEE operations in the same order
// (contraction is off project-wide, so no FMA), so they give the same bits.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HF2Q_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HF2Q_CPU_CLONES
#endif

// Eight f32 lanes; GCC/Clang lower this to whatever SIMD width the target has, with
// the same IEEE results lane by lane. Kept out of function signatures (their ABI
// depends on -mavx).
using F8 = float __attribute__((vector_size(32)));

// f16 → f32, exact (the KV cache's f16 pools): the normal, inf and NaN exponents
// rebiased, zero and subnormals as an exact integer scaling; branch-free, so the
// loops below vectorise. The same bits as quant::fp16_to_fp32.
inline float half_to_f32(uint16_t h) {
    const uint32_t em = h & 0x7FFFu, sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t norm = (em << 13) + 0x38000000u + (em >= 0x7C00u ? 0x38000000u : 0u);
    const float sub = static_cast<float>(em) * 0x1p-24f;
    uint32_t sub_bits;
    std::memcpy(&sub_bits, &sub, 4);
    const uint32_t r = (em < 0x400u ? sub_bits : norm) | sign;
    float f;
    std::memcpy(&f, &r, 4);
    return f;
}

using U8 = uint32_t __attribute__((vector_size(32)));

// s in every lane, bit for bit (F8{} + s would turn −0 into +0).
inline void splat(float s, F8& v) { v = F8{s, s, s, s, s, s, s, s}; }

// Eight f16 values as F8 (half_to_f32 lane by lane, on vectors). An out parameter:
// F8 stays out of return types (see F8).
inline void half8_to_f8(const U8& h, F8& f) {
    const U8 em = h & 0x7FFFu, sign = (h & 0x8000u) << 16;
    // Vector compares give all-ones or zero lanes; a vector cast keeps the bits.
    const U8 is_special = (U8)(em >= 0x7C00u) & 0x38000000u;
    const U8 norm = (em << 13) + 0x38000000u + is_special;
    const F8 sub = __builtin_convertvector(em, F8) * 0x1p-24f;
    U8 sub_bits;
    std::memcpy(&sub_bits, &sub, sizeof sub_bits);
    const U8 m = (U8)(em < 0x400u);
    const U8 r = (sub_bits & m) | (norm & ~m) | sign;
    std::memcpy(&f, &r, sizeof f);
}
inline void half8_to_f8(const uint16_t* p, F8& f) {
    U8 h;
    for (int k = 0; k < 8; ++k) h[k] = p[k];
    half8_to_f8(h, f);
}

// FP8 E4M3 bits of the KV cache's e4m3 pools (a type of its own, so the overloads
// below tell them from bytes of anything else).
enum class E4m3 : uint8_t {};

// The 256 E4M3 codes as f32 (quant::e4m3_to_fp32): decoding is a lookup.
struct E4m3Table {
    float v[256];
    E4m3Table();
};
inline const E4m3Table& e4m3_table() {
    static const E4m3Table t;
    return t;
}

// The operand B of dot_f32 / axpy_f32: f32 values, or f16 bits (uint16_t) or E4M3
// codes (the KV cache's f16 and e4m3 pools) converted exactly, so those pools
// compute bit for bit as an f32 pool holding the rounded values.
inline void load_f8(const float* p, F8& v) { std::memcpy(&v, p, sizeof v); }
inline void load_f8(const uint16_t* p, F8& v) { half8_to_f8(p, v); }
inline void load_f8(const E4m3* p, F8& v) {
    const float* t = e4m3_table().v;
    float f[8];
    for (int i = 0; i < 8; ++i) f[i] = t[static_cast<uint8_t>(p[i])];
    std::memcpy(&v, f, sizeof v);
}
// int8 codes of the KV cache's i8 pools, exactly (their row scale is applied by the
// caller: attention scales the score and the softmax weight).
inline void load_f8(const int8_t* p, F8& v) {
    float f[8];
    for (int i = 0; i < 8; ++i) f[i] = static_cast<float>(p[i]);
    std::memcpy(&v, f, sizeof v);
}
inline float value_f32(float x) { return x; }
inline float value_f32(int8_t c) { return static_cast<float>(c); }
inline float value_f32(uint16_t h) { return half_to_f32(h); }
inline float value_f32(E4m3 c) { return e4m3_table().v[static_cast<uint8_t>(c)]; }

// The sum of dot_f32's four 8-lane accumulators in its fixed order (block_dot.h ends
// with the same sum, so a row decoded in registers gives dot_f32's bits).
inline float sum_lanes(const F8 (&acc)[4]) {
    const F8 v = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

// Σ a[i]·b[i] in f32: four independent 8-lane accumulators over 32-element steps (for
// instruction-level parallelism), combined as (acc0+acc1)+(acc2+acc3), the eight lanes
// summed in a fixed tree, then the tail added in order. The order depends only on n.
template <class B>
inline float dot_f32(const float* a, const B* b, int64_t n) {
    F8 acc[4] = {};
    F8 va, vb;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int u = 0; u < 4; ++u) {
            std::memcpy(&va, a + i + 8 * u, sizeof va);
            load_f8(b + i + 8 * u, vb);
            acc[u] += va * vb;
        }
    }
    for (; i + 8 <= n; i += 8) {
        std::memcpy(&va, a + i, sizeof va);
        load_f8(b + i, vb);
        acc[0] += va * vb;
    }
    float s = sum_lanes(acc);
    for (; i < n; ++i) s += a[i] * value_f32(b[i]);
    return s;
}

// y[i] += a · x[i], element by element (8 lanes at a time; the result per element does
// not depend on the lane width).
template <class B>
inline void axpy_f32(float* y, float a, const B* x, int64_t n) {
    F8 vy, vx, va;
    splat(a, va);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        std::memcpy(&vy, y + i, sizeof vy);
        load_f8(x + i, vx);
        vy += va * vx;
        std::memcpy(y + i, &vy, sizeof vy);
    }
    for (; i < n; ++i) y[i] += a * value_f32(x[i]);
}

}  // namespace hf2q::cpu
