// Linear layer y[t][o] = Σ_i x[t][i] · W[o][i] on weights in their stored ggml format,
// and the embedding row gather.
//
// matmul: threads take contiguous ranges of output rows, `row_tile(n_in)` rows at a time.
// For many tokens a worker decodes the tile once into its scratch ([tile][n_in] f32,
// sized so the tile stays in L2), then dots every token's activation row with every row
// of the tile; the weight tile is the cache block, reused by all tokens, and each token
// row (n_in floats) is reused from L1 across the tile. The whole matrix is never
// expanded. For a few tokens (decode) the tile's rows are decoded in registers instead
// (block_dot.h), where writing and reading the decoded tile cost more than the products.
// F32 weights are read in place. Each y element is dot_f32 over the decoded row (both
// paths give its bits), so results do not depend on the thread count, the tiling, the
// path, or the number of tokens in the batch (a token gives the same output in prefill
// and in decode).
#include <algorithm>
#include <cstdint>
#include <string>

#include "backends/cpu/block_dot.h"
#include "backends/cpu/cpu_ops.h"
#include "core/error.h"
#include "quant/quant.h"

namespace hf2q::cpu {
namespace {

// Rows per decoded tile: about 128 KiB of f32, at least 4 rows, at most 64.
int64_t row_tile(int64_t n_in) {
    return std::clamp<int64_t>((32 * 1024) / n_in, 4, 64);
}

// Up to this many tokens a call decodes rows in registers (block_dot.h): one pass over
// each row. At 8 tokens (two passes) the tiles were as fast or faster: Q4_K 2.12 against
// 2.35 ms, Q8_0 1.94 against 2.09 (hf2q_bench_ops BM_Matmul, 2048 x 2048, one thread;
// docs/performance.md "CPU backend").
constexpr int64_t kBlockDotMaxTokens = kBlockDotTokens;

void check_weight(const ops::WeightView& w, const char* op) {
    if (!quant::is_supported(w.type))
        fail(op, ": weight type ", ggml_type_name(w.type), " is not supported by the CPU backend");
    HF2Q_ASSERT(w.data != nullptr && w.n_in > 0 && w.n_out > 0);
    const auto rb = ggml_row_size(w.type, static_cast<uint64_t>(w.n_in));
    if (!rb || *rb != w.row_bytes)
        fail(op, ": weight ", ggml_type_name(w.type), " [", w.n_out, " x ", w.n_in,
             "] has row_bytes ", w.row_bytes, ", expected ",
             rb ? std::to_string(*rb) : std::string("a multiple of the block size"));
}

const uint8_t* row_ptr(const ops::WeightView& w, int64_t r) {
    return static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(r) * w.row_bytes;
}

// Rows [r0, r1) of W as f32 [r1 − r0][n_in]: in place for aligned F32, else decoded
// into `scratch` (by block_dot.h's decoders where `fast`: has_block_decode).
const float* decode_rows(const ops::WeightView& w, bool in_place, bool fast, int64_t r0, int64_t r1,
                         float* scratch) {
    if (in_place) return reinterpret_cast<const float*>(row_ptr(w, r0));
    if (fast) {
        block_decode(w.type, row_ptr(w, r0), w.row_bytes, r1 - r0, w.n_in, scratch);
        return scratch;
    }
    for (int64_t r = r0; r < r1; ++r)
        quant::dequantize_row(w.type, row_ptr(w, r), scratch + (r - r0) * w.n_in, w.n_in);
    return scratch;
}

// y[t][r] = rows[r] · x[t] for a decoded tile of n_rows rows and every token; y points
// at the tile's first output column.
HF2Q_CPU_CLONES void dot_tile(const float* rows, int64_t n_rows, int64_t n_in, const float* x,
                              int64_t xs, int64_t n_tok, float* y, int64_t ys) {
    for (int64_t t = 0; t < n_tok; ++t) {
        const float* xt = x + t * xs;
        float* yt = y + t * ys;
        for (int64_t r = 0; r < n_rows; ++r) yt[r] = dot_f32(rows + r * n_in, xt, n_in);
    }
}

}  // namespace

void matmul(Context& c, const ops::MatmulParams& p) {
    if (p.n_tokens == 0) return;
    const ops::WeightView& w = p.w;
    check_weight(w, "matmul");
    const int64_t n_in = w.n_in;
    const int64_t xs = p.x_stride ? p.x_stride : n_in;
    const int64_t ys = p.y_stride ? p.y_stride : w.n_out;
    HF2Q_ASSERT(p.n_tokens > 0 && p.x != nullptr && p.y != nullptr);
    HF2Q_ASSERT(xs >= n_in && ys >= w.n_out);

    const bool in_place =
        w.type == GgmlType::F32 && reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0;
    const bool in_registers =
        !in_place && p.n_tokens <= kBlockDotMaxTokens && has_block_dot(w.type, n_in);
    const bool fast_tiles = !in_place && !in_registers && has_block_decode(w.type, n_in);
    const int64_t tile = row_tile(n_in);
    if (!in_place && !in_registers) c.scratch.reserve(tile * n_in);
    c.pool.parallel_for(w.n_out, tile, [&](int64_t o0, int64_t o1, int th) {
        for (int64_t r0 = o0; r0 < o1; r0 += tile) {
            const int64_t r1 = std::min(o1, r0 + tile);
            if (in_registers) {
                block_dot(w.type, BlockDotArgs{row_ptr(w, r0), w.row_bytes, r1 - r0, n_in, p.x, xs,
                                               p.n_tokens, p.y + r0, ys});
                continue;
            }
            const float* rows = decode_rows(w, in_place, fast_tiles, r0, r1, c.scratch.get(th));
            dot_tile(rows, r1 - r0, n_in, p.x, xs, p.n_tokens, p.y + r0, ys);
        }
    });
}

void get_rows(Context& c, const ops::GetRowsParams& p) {
    if (p.n_tokens == 0) return;
    const ops::WeightView& w = p.w;
    check_weight(w, "get_rows");
    HF2Q_ASSERT(p.n_tokens > 0 && p.ids != nullptr && p.out != nullptr);
    // Ids come from requests: validate here, before any worker runs.
    for (int64_t t = 0; t < p.n_tokens; ++t)
        if (p.ids[t] < 0 || p.ids[t] >= w.n_out)
            fail("get_rows: token ", t, " has id ", p.ids[t], ", outside [0, ", w.n_out, ")");
    const int64_t grain = std::max<int64_t>(1, 16384 / w.n_in);
    c.pool.parallel_for(p.n_tokens, grain, [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t) {
            float* out = p.out + t * w.n_in;
            quant::dequantize_row(w.type, row_ptr(w, p.ids[t]), out, w.n_in);
            for (int64_t i = 0; i < w.n_in; ++i) out[i] *= p.scale;
        }
    });
}

}  // namespace hf2q::cpu
