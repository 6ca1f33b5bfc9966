// block_dot's and block_decode's entry points (block_dot.h): the format switch inside one function
// compiled for AVX2 and for the baseline, so the decoders and products are inlined into each clone.
#include "backends/cpu/block_dot.h"

#include "core/error.h"

namespace hf2q::cpu {

bool has_block_decode(GgmlType t, int64_t n_in) {
    bool tiles = false;
    return has_block_dot(t, n_in) &&
           block_dot_detail::visit(t, [&]<class Fmt>() { tiles = Fmt::kTiles; }) && tiles;
}

bool has_block_dot(GgmlType t, int64_t n_in) {
    return n_in > 0 && n_in % 32 == 0 && block_dot_detail::visit(t, []<class Fmt>() {}) &&
           n_in % ggml_traits(t).block_size == 0;
}

HF2Q_CPU_CLONES void block_dot(GgmlType t, const BlockDotArgs& a) {
    const bool known = block_dot_detail::visit(
        t, [&]<class Fmt>() __attribute__((always_inline)) { block_dot_detail::rows<Fmt>(a); });
    HF2Q_ASSERT(known);
}

HF2Q_CPU_CLONES void block_decode(GgmlType t, const uint8_t* w, uint64_t row_bytes, int64_t n_rows,
                                  int64_t n_in, float* out) {
    const bool known = block_dot_detail::visit(
        t, [&]<class Fmt>() __attribute__((always_inline)) {
            for (int64_t r = 0; r < n_rows; ++r)
                block_dot_detail::decode_row<Fmt>(w + static_cast<uint64_t>(r) * row_bytes, n_in,
                                                  out + r * n_in);
        });
    HF2Q_ASSERT(known);
}

}  // namespace hf2q::cpu
