// CUDA attention (tensor-core tiles, split-KV decode, generic fallback; see
// src/backends/cuda/attention*.cu) against the CPU reference over a grid of head
// sizes, GQA ratios, windows, lengths, block sizes, batch shapes and key bounds
// (ops::AttentionParams::max_keys, which sizes the decode split), plus a perf mode
// (DISABLED_Perf, run with --gtest_also_run_disabled_tests).
//
// Pool slots a query must never read (below every query's window, past the cached
// length, unused blocks) hold NaN, so a kernel that lets a masked key leak into the
// result (even as 0·NaN) fails. Tolerances: relative L2 error ≤ 2e-3 where the
// tensor-core path (F16 operands) may run; ≤ 1e-4 where only the f32 paths can run
// (no run of ≥ 16 consecutive positions of one sequence in the batch).
//
// PreparedOutput checks the optional prepared output (out_prep, ops/prepared.h),
// Bf16Output the optional BF16 rows (out_bf16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/ggml_type.h"
#include "models/gemma4/forward.h"
#include "quant/quant.h"
#include "runtime/backend_factory.h"

// The perf mode and the workspace-size tests call the launcher directly (own stream,
// own workspace, CUDA events); they exist only where the CUDA headers do.
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>

#include "backends/cuda/gemv.h"
#include "backends/cuda/kernels.h"
#define HF2Q_ATTENTION_TEST_DIRECT 1
#endif

using namespace hf2q;

namespace {

constexpr double kTensorCoreTol = 2e-3;  // F16 operands, f32 accumulation
constexpr double kF32Tol = 1e-4;         // f32 paths (split / generic kernels)
const float kNaN = std::numeric_limits<float>::quiet_NaN();

int32_t window_lo(int64_t p, int32_t window) {
    return static_cast<int32_t>(window > 0 ? std::max<int64_t>(0, p - window + 1) : 0);
}

struct Seq {
    int64_t ctx;      // cached positions 0 .. ctx−1
    int64_t queries;  // query tokens at positions ctx−queries .. ctx−1
};

struct Case {
    int64_t head_dim = 256, n_kv_heads = 2, gqa = 1, block_size = 16;
    int32_t window = 0;
    std::vector<Seq> seqs;
    bool interleave = false;  // tokens round-robin over the sequences instead of back to back
    bool release = false;     // table entries of blocks below every query's window become −1
    float qk_sd = 0.0f;       // 0: chosen so that scores have a standard deviation of ~3
    int64_t max_keys = 0;     // key bound passed to both backends (0: unknown)
    bool q_spread = false;    // q rows scaled by 10^-3, 1 or 10^3 in turn, one value of each ×32
    std::string label() const {
        char b[192];
        std::snprintf(b, sizeof b,
                      "D=%lld gqa=%lld kv=%lld bs=%lld w=%d seqs=%zu%s%s max_keys=%lld",
                      (long long)head_dim, (long long)gqa, (long long)n_kv_heads,
                      (long long)block_size, window, seqs.size(), interleave ? " interleaved" : "",
                      release ? " released" : "", (long long)max_keys);
        return b;
    }
    // Exact bound of the batch's positions: its longest sequence.
    int64_t exact_max_keys() const {
        int64_t m = 0;
        for (const Seq& q : seqs) m = std::max(m, q.ctx);
        return m;
    }
};

// Fast zero-mean values with standard deviation sd (uniform on ±√3·sd): the perf
// cases fill ~10^8 floats.
struct Fill {
    uint64_t state;
    float operator()(float sd) {
        state += 0x9e3779b97f4a7c15ull;  // splitmix64
        uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
        return (2.0f * u - 1.0f) * 1.7320508f * sd;
    }
};

// Host-side pools, tables and batch of one case.
struct KvSetup {
    int64_t n_blocks = 0, kv_row = 0, n_heads = 0;
    std::vector<float> k_pool, v_pool, q;
    std::vector<std::vector<int32_t>> tables;
    std::vector<int32_t> pos, table_len;
    std::vector<size_t> token_seq;
    bool has_long_run = false;  // some run of ≥ 16 consecutive query positions of one sequence
};

KvSetup build(const Case& c, std::mt19937& rng) {
    KvSetup s;
    const int64_t bs = c.block_size, D = c.head_dim;
    s.n_heads = c.n_kv_heads * c.gqa;
    s.kv_row = c.n_kv_heads * D;
    int64_t used = 0;
    for (const Seq& q : c.seqs) used += (q.ctx + bs - 1) / bs;
    s.n_blocks = used + 3;  // a few blocks no sequence owns
    std::vector<int32_t> ids(static_cast<size_t>(s.n_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);

    const float sd = c.qk_sd > 0 ? c.qk_sd : std::pow(9.0f / static_cast<float>(D), 0.25f);
    Fill fill{rng()};
    const size_t pool = static_cast<size_t>(s.n_blocks * bs * s.kv_row);
    s.k_pool.assign(pool, kNaN);
    s.v_pool.assign(pool, kNaN);
    size_t next = 0;
    for (const Seq& q : c.seqs) {
        const int64_t nb = (q.ctx + bs - 1) / bs;
        // Lowest key any of this sequence's queries can see.
        const int64_t lo = window_lo(q.ctx - q.queries, c.window);
        std::vector<int32_t> table(static_cast<size_t>(nb));
        for (int64_t b = 0; b < nb; ++b) table[static_cast<size_t>(b)] = ids[next++];
        for (int64_t j = lo; j < q.ctx; ++j) {
            const int64_t block = table[static_cast<size_t>(j / bs)];
            for (int64_t i = 0; i < s.kv_row; ++i) {
                const auto at = static_cast<size_t>(ops::kv_value_index(block, j % bs, i, bs, s.kv_row, D));
                s.k_pool[at] = fill(sd);
                s.v_pool[at] = fill(1.0f);
            }
        }
        if (c.release)
            for (int64_t b = 0; (b + 1) * bs <= lo; ++b) table[static_cast<size_t>(b)] = -1;
        s.tables.push_back(std::move(table));
    }
    // Tokens: back to back, or round-robin over the sequences.
    std::vector<int64_t> emitted(c.seqs.size(), 0);
    for (bool more = true; more;) {
        more = false;
        for (size_t i = 0; i < c.seqs.size(); ++i) {
            const Seq& q = c.seqs[i];
            const int64_t take = c.interleave ? std::min<int64_t>(1, q.queries - emitted[i])
                                              : q.queries - emitted[i];
            for (int64_t k = 0; k < take; ++k) {
                s.pos.push_back(static_cast<int32_t>(q.ctx - q.queries + emitted[i]++));
                s.token_seq.push_back(i);
                s.table_len.push_back(static_cast<int32_t>(s.tables[i].size()));
            }
            more = more || emitted[i] < q.queries;
        }
    }
    for (size_t t = 0, run = 0; t < s.pos.size(); ++t) {
        const bool cont =
            t > 0 && s.token_seq[t] == s.token_seq[t - 1] && s.pos[t] == s.pos[t - 1] + 1;
        run = cont ? run + 1 : 1;
        s.has_long_run = s.has_long_run || run >= 16;
    }
    s.q.resize(s.pos.size() * static_cast<size_t>(s.n_heads * D));
    for (auto& x : s.q) x = fill(sd);
    if (c.q_spread) {
        const float scales[3] = {1e-3f, 1.0f, 1e3f};
        for (size_t r = 0; r < s.q.size() / static_cast<size_t>(D); ++r) {
            float* row = s.q.data() + r * static_cast<size_t>(D);
            for (int64_t i = 0; i < D; ++i) row[i] *= scales[r % 3];
            row[(r * 37) % static_cast<size_t>(D)] *= 32.0f;
        }
    }
    return s;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i])) return INFINITY;
        const double d = static_cast<double>(got[i]) - ref[i];
        num += d * d;
        den += static_cast<double>(ref[i]) * ref[i];
    }
    return std::sqrt(num / (den > 0 ? den : 1));
}

// Rounds to the nearest F16 / BF16 value (normal and subnormal ranges).
float round_f16(float x) {
    if (x == 0 || !std::isfinite(x)) return x;
    if (std::fabs(x) < std::ldexp(1.0f, -14))
        return std::ldexp(std::nearbyint(std::ldexp(x, 24)), -24);
    int e = 0;
    const float m = std::frexp(x, &e);
    return std::ldexp(std::nearbyint(std::ldexp(m, 11)), e - 11);
}
float round_bf16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&x, &u, 4);
    return x;
}

class CudaAttention : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
        gpu = runtime::make_backend(BackendKind::cuda, 0);
        cpu =
            cpu::make_backend(static_cast<int>(std::max(2u, std::thread::hardware_concurrency())));
    }

    template <class T>
    T* dev(const std::vector<T>& v) {
        T* d = gpu->alloc_array<T>(std::max<size_t>(v.size(), 1));
        if (!v.empty()) gpu->upload(d, v.data(), v.size() * sizeof(T));
        return d;
    }

    // An n_out × n Q4_K weight of N(0, 0.05) values on the device: the output projection
    // that the prepared and BF16 output tests run on attention's output.
    ops::WeightView random_projection(int64_t n_out, int64_t n, std::mt19937& wrng) {
        std::normal_distribution<float> g(0.0f, 0.05f);
        std::vector<float> wf(static_cast<size_t>(n_out * n));
        for (float& x : wf) x = g(wrng);
        const uint64_t row_bytes = *ggml_row_size(GgmlType::Q4_K, static_cast<uint64_t>(n));
        std::vector<uint8_t> wq(row_bytes * n_out);
        quant::quantize(GgmlType::Q4_K, wf.data(), wq.data(), n_out, n, nullptr);
        return {GgmlType::Q4_K, n, n_out, row_bytes, dev(wq)};
    }

    // Device copies of a setup, and the parameter structs of both backends.
    struct Bound {
        ops::AttentionParams host, device;
        std::vector<const int32_t*> host_tabs;
        float* dout = nullptr;
        std::vector<uint16_t> k16, v16;  // the host pools as f16 (kv == f16)
        std::vector<uint8_t> k8, v8;     // the host pools as E4M3 codes (kv == e4m3)
        std::vector<int8_t> ki, vi;      // the host pools as i8 codes (kv == i8)
        std::vector<float> ks, vs;       // and their row scales
    };
    Bound bind(const Case& c, const KvSetup& s, std::vector<float>& ref_out) {
        Bound b;
        std::vector<int32_t*> dtables;
        for (const auto& t : s.tables) dtables.push_back(dev(t));
        std::vector<const int32_t*> dtabs;
        for (size_t seq : s.token_seq) {
            b.host_tabs.push_back(s.tables[seq].data());
            dtabs.push_back(dtables[seq]);
        }
        const int64_t T = static_cast<int64_t>(s.pos.size());
        ref_out.assign(s.q.size(), 0.0f);
        b.host = ops::AttentionParams{s.q.data(),
                                      ref_out.data(),
                                      T,
                                      s.n_heads,
                                      c.n_kv_heads,
                                      c.head_dim,
                                      s.k_pool.data(),
                                      s.v_pool.data(),
                                      c.block_size,
                                      s.pos.data(),
                                      b.host_tabs.data(),
                                      s.table_len.data(),
                                      c.window,
                                      1.0f,
                                      s.n_blocks};
        b.dout = gpu->alloc_array<float>(std::max<size_t>(s.q.size(), 1));
        b.device = ops::AttentionParams{dev(s.q),      b.dout,        T,
                                        s.n_heads,     c.n_kv_heads,  c.head_dim,
                                        dev(s.k_pool), dev(s.v_pool), c.block_size,
                                        dev(s.pos),    dev(dtabs),    dev(s.table_len),
                                        c.window,      1.0f,          s.n_blocks};
        b.host.max_keys = b.device.max_keys = c.max_keys;
        // f16 and e4m3: both backends read the same rounded pools (out of range: inf or
        // ±448; NaN stays NaN).
        auto use_rounded = [&](auto& kq, auto& vq, auto round) {
            for (float x : s.k_pool) kq.push_back(round(x));
            for (float x : s.v_pool) vq.push_back(round(x));
            b.host.k_pool = kq.data();
            b.host.v_pool = vq.data();
            b.device.k_pool = dev(kq);
            b.device.v_pool = dev(vq);
            b.host.kv_type = b.device.kv_type = kv;
        };
        if (kv == ops::KvType::f16) use_rounded(b.k16, b.v16, quant::fp32_to_fp16);
        if (kv == ops::KvType::e4m3) use_rounded(b.k8, b.v8, quant::fp32_to_e4m3);
        if (kv == ops::KvType::i8) {  // codes and a scale per (slot, KV head) row
            const size_t hd = static_cast<size_t>(c.head_dim);
            auto code = [&](const std::vector<float>& x, std::vector<int8_t>& q, std::vector<float>& sc) {
                q.resize(x.size());
                sc.resize(x.size() / hd);
                quant::quantize_rows_i8(x.data(), q.data(), sc.data(), static_cast<int64_t>(sc.size()), c.head_dim);
            };
            code(s.k_pool, b.ki, b.ks);
            code(s.v_pool, b.vi, b.vs);
            b.host.k_pool = b.ki.data();
            b.host.v_pool = b.vi.data();
            b.host.k_scale = b.ks.data();
            b.host.v_scale = b.vs.data();
            b.device.k_pool = dev(b.ki);
            b.device.v_pool = dev(b.vi);
            b.device.k_scale = dev(b.ks);
            b.device.v_scale = dev(b.vs);
            b.host.kv_type = b.device.kv_type = kv;
        }
        return b;
    }

    std::vector<float> download(const float* d, size_t n) {
        std::vector<float> v(n);
        if (n) gpu->download(v.data(), d, n * sizeof(float));
        return v;
    }

    // Runs one case on both backends; returns the relative L2 error and checks it
    // against the tolerance of the paths that may run.
    double check(const Case& c, double tol_override = 0) {
        const KvSetup s = build(c, rng);
        std::vector<float> ref;
        Bound b = bind(c, s, ref);
        cpu->attention(b.host);
        gpu->attention(b.device);
        const double err = rel_err(download(b.dout, s.q.size()), ref);
        const bool fast_dim =
            c.head_dim == 64 || c.head_dim == 128 || c.head_dim == 256 || c.head_dim == 512;
        const bool tensor_cores = (s.has_long_run || split_mma(c)) && fast_dim;
        const double tol = tol_override > 0 ? tol_override
                           : tensor_cores   ? kTensorCoreTol
                                            : kF32Tol;
        EXPECT_LE(err, tol) << c.label() << " tokens=" << s.pos.size();
        double& worst = tensor_cores ? worst_tc[static_cast<int>(c.head_dim)]
                                     : worst_f32[static_cast<int>(c.head_dim)];
        worst = std::max(worst, err);
        return err;
    }

    // One decode case (split kernel only) with the GPU run under each key bound in turn
    // (ops::AttentionParams::max_keys; the CPU reference ignores it), every result
    // against the one reference.
    void check_bounds(Case c, std::initializer_list<int64_t> bounds) {
        const KvSetup s = build(c, rng);
        ASSERT_FALSE(s.has_long_run) << "decode cases only";
        std::vector<float> ref;
        Bound b = bind(c, s, ref);
        cpu->attention(b.host);
        for (int64_t bound : bounds) {
            c.max_keys = b.device.max_keys = bound;
            gpu->fill_zero(b.dout, s.q.size() * sizeof(float));  // nothing of the last bound
            gpu->attention(b.device);
            const double err = rel_err(download(b.dout, s.q.size()), ref);
            EXPECT_LE(err, split_mma(c) ? kTensorCoreTol : kF32Tol) << c.label() << " tokens=" << s.pos.size();
            double& worst = (split_mma(c) ? worst_tc : worst_f32)[static_cast<int>(c.head_dim)];
            worst = std::max(worst, err);
        }
    }

    // Whether the split kernel computes this case's scores on tensor cores (F16
    // operands: attention_split.cu's split_mma_ok, in the default precision).
    bool split_mma(const Case& c) const {
        return kv != ops::KvType::f32 && (c.head_dim == 256 || c.head_dim == 512);
    }

    void TearDown() override {
        for (auto& [d, e] : worst_tc)
            std::printf("  max rel err, tensor-core batches, D=%d: %.3g\n", d, e);
        for (auto& [d, e] : worst_f32)
            std::printf("  max rel err, f32-path batches,    D=%d: %.3g\n", d, e);
    }

    std::unique_ptr<ops::Backend> gpu, cpu;
    std::mt19937 rng{20240917};
    std::map<int, double> worst_tc, worst_f32;
    ops::KvType kv = ops::KvType::f32;  // element type of the pools bind() hands out
};

// The grids below run with each KV cache type: f16, e4m3 and i8 pools hold the f32
// values rounded once, and the CPU reference reads the same pools.
class CudaAttentionKv : public CudaAttention, public ::testing::WithParamInterface<ops::KvType> {
  protected:
    void SetUp() override {
        CudaAttention::SetUp();
        kv = GetParam();
    }
};

}  // namespace

INSTANTIATE_TEST_SUITE_P(Cache, CudaAttentionKv,
                         ::testing::Values(ops::KvType::f32, ops::KvType::f16, ops::KvType::e4m3, ops::KvType::i8),
                         [](const ::testing::TestParamInfo<ops::KvType>& i) {
                             return std::string(i.param == ops::KvType::f16    ? "f16"
                                                : i.param == ops::KvType::e4m3 ? "e4m3"
                                                : i.param == ops::KvType::i8   ? "i8"
                                                                               : "f32");
                         });

// One prompt (optionally after a cached prefix: chunked prefill) over the grid of
// head sizes, GQA ratios, windows (none, shorter and longer than the sequence),
// odd lengths and block sizes.
TEST_P(CudaAttentionKv, PrefillGrid) {
    int i = 0;
    for (int64_t D : {64, 256, 512})
        for (int64_t gqa : {1, 2, 8})
            for (int32_t window : {0, 24, 5000})
                for (int64_t len : {1, 7, 63, 65, 200}) {
                    Case c;
                    c.head_dim = D;
                    c.gqa = gqa;
                    c.window = window;
                    c.block_size = int64_t{8} << (i % 3);
                    const int64_t prefix = i % 2 ? 37 : 0;
                    c.seqs = {{prefix + len, len}};
                    c.release = window > 0 && i % 4 == 1;
                    check(c);
                    ++i;
                }
}

// Long prompts: many query tiles, key tiles skipped by the causal mask and the
// window, and (bs 8 / 32) tables with many entries.
TEST_P(CudaAttentionKv, LongPrefill) {
    int i = 0;
    for (int64_t D : {256, 512})
        for (int64_t gqa : {2, 8})
            for (int32_t window : {0, 300}) {
                Case c;
                c.head_dim = D;
                c.gqa = gqa;
                c.window = window;
                c.block_size = int64_t{8} << (i % 3);
                c.seqs = {{1100, 1100}};
                c.release = window > 0;
                check(c);
                ++i;
            }
    Case c;  // 128 head dim (small models' global layers), chunked
    c.head_dim = 128;
    c.gqa = 2;
    c.seqs = {{1100, 700}};
    check(c);
}

// A sliding-window chunk whose table has released (−1) blocks below the window.
TEST_P(CudaAttentionKv, SlidingWindowReleasedBlocks) {
    for (int64_t D : {256, 512})
        for (int64_t bs : {8, 16, 32}) {
            Case c;
            c.head_dim = D;
            c.gqa = D == 512 ? 8 : 2;
            c.window = 64;
            c.block_size = bs;
            c.release = true;
            c.seqs = {{300, 50}, {301, 1}, {170, 3}};
            check(c);
            c.interleave = true;
            check(c);
        }
}

// Decode batches: 64 sequences of different lengths, one token each (interleaved
// order), sliding and full layers of the Gemma 4 shapes.
TEST_P(CudaAttentionKv, ManySequencesDecode) {
    for (int variant = 0; variant < 3; ++variant) {
        Case c;
        c.head_dim = variant == 0 ? 256 : 512;
        c.n_kv_heads = variant == 0 ? 8 : 2;
        c.gqa = variant == 0 ? 2 : 8;
        c.window = variant == 0 ? 1024 : 0;
        c.release = variant == 0;
        c.block_size = variant == 2 ? 32 : 16;
        for (int s = 0; s < 64; ++s) c.seqs.push_back({1 + (s * 97 + variant * 13) % 1500, 1});
        c.interleave = true;
        check(c);
    }
}

// Mixed batches: two prompts back to back (a tile straddles them), plus decode
// tokens; interleaved prefill tokens of two sequences; short speculative runs.
TEST_P(CudaAttentionKv, MixedBatches) {
    for (int64_t D : {128, 256, 512}) {
        Case c;
        c.head_dim = D;
        c.gqa = D == 512 ? 8 : 2;
        c.block_size = 16;
        c.seqs = {{100, 100}, {150, 150}, {40, 1}, {700, 1}, {5, 1}};
        check(c);
        c.window = 32;
        c.release = true;
        check(c);

        Case il = c;  // two prompts, tokens alternating
        il.window = 0;
        il.release = false;
        il.seqs = {{90, 90}, {70, 70}};
        il.interleave = true;
        check(il);

        Case spec = c;  // 8 sequences verifying 5 draft tokens each
        spec.window = 0;
        spec.release = false;
        spec.seqs.clear();
        for (int s = 0; s < 8; ++s) spec.seqs.push_back({50 + 31 * s, 5});
        check(spec);

        Case chunk = c;  // a chunk of a long prompt next to 20 decode tokens
        chunk.window = 0;
        chunk.release = false;
        chunk.seqs = {{540, 40}};
        for (int s = 0; s < 20; ++s) chunk.seqs.push_back({1 + 29 * s, 1});
        check(chunk);
    }
}

// One token: the key range is split across many blocks (flash decoding).
TEST_P(CudaAttentionKv, SingleTokenBatch) {
    for (int64_t D : {64, 256, 512})
        for (int64_t gqa : {1, 8}) {
            Case c;
            c.head_dim = D;
            c.gqa = gqa;
            c.seqs = {{778, 1}};
            check(c);
            c.seqs = {{1, 1}};
            check(c);
        }
}

// Decode at every heads-a-block count of the split kernel (GQA 1, 2, 4, 6, 8: 1, 2, 4,
// 2 and 8 heads a block), whose P·V runs on tensor cores in n = 8 columns (heads past
// the block's zero) where the scores do (attention_split.cu, split_mma_pv): key counts
// below one 16-key tile, at and off the multiples of 16 and of a chunk, and long
// sequences whose key range is split (partials through the combiner).
TEST_P(CudaAttentionKv, DecodeEveryHeadGroup) {
    for (int64_t D : {256, 512})
        for (int64_t gqa : {1, 2, 4, 6, 8}) {
            Case c;
            c.head_dim = D;
            c.gqa = gqa;
            c.seqs = {{1, 1}, {15, 1}, {16, 1}, {17, 1}, {33, 1}, {64, 1}, {65, 1}, {129, 1}, {2100, 1}};
            c.interleave = true;
            check(c);
            c.seqs = {{3001, 1}};
            check(c);
        }
}

// Query rows of very different scales, each with one large value: the tensor-core score
// phases round q to F16 (down to its subnormals at 10^-3, within 3 times its largest value at
// 10^3 × 32), and an integer score phase would take each head's share as fixed point with one
// scale (session 43's, docs/performance.md), which an outlier coarsens for the rest of the share.
TEST_P(CudaAttentionKv, DecodeQueryScales) {
    for (int64_t D : {256, 512})
        for (int64_t gqa : {1, 2, 8}) {
            Case c;
            c.head_dim = D;
            c.gqa = gqa;
            c.q_spread = true;
            c.seqs = {{1, 1}, {17, 1}, {100, 1}, {1030, 1}, {2100, 1}};
            c.interleave = true;
            check(c);
        }
}

// Decode over ≥ 4096 keys: many splits per (token, head) and the combiner.
TEST_P(CudaAttentionKv, LongContextDecode) {
    Case c;
    c.head_dim = 512;
    c.gqa = 8;
    c.seqs = {{5000, 1}};
    check(c);
    c.seqs = {{4096, 1}, {4097, 1}, {6000, 1}};
    c.gqa = 1;
    check(c);
    Case w;  // sliding layer: only the last 1024 keys, the rest released
    w.head_dim = 256;
    w.n_kv_heads = 8;
    w.gqa = 2;
    w.window = 1024;
    w.release = true;
    w.seqs = {{4500, 1}, {4096, 2}};
    check(w);
}

namespace {

// A decode layer of Gemma 4's shapes at head size D: 256 with 8 KV heads of 2 query
// heads, 512 with 2 KV heads of 8; sliding ones see 1024 keys (blocks below released).
Case decode_layer(int64_t D, bool sliding, std::vector<Seq> seqs) {
    Case c;
    c.head_dim = D;
    c.n_kv_heads = D == 256 ? 8 : 2;
    c.gqa = D == 256 ? 2 : 8;
    c.window = sliding ? 1024 : 0;
    c.release = sliding;
    c.seqs = std::move(seqs);
    c.interleave = true;
    return c;
}

// c under its exact key bound (ops::AttentionParams::max_keys): short contexts then take
// one split, so the split kernel writes the output itself.
Case exact_bound(Case c) {
    c.max_keys = c.exact_max_keys();
    return c;
}

// Head size 96 with 8 query heads of 4 KV heads (768 values a row): the generic kernel.
Case generic_head96(std::vector<Seq> seqs) {
    Case c;
    c.head_dim = 96;
    c.n_kv_heads = 4;
    c.gqa = 2;
    c.seqs = std::move(seqs);
    return c;
}

// Index of the first element whose bits differ (a and b of one size), or −1.
template <class T>
int64_t first_bit_diff(const std::vector<T>& a, const std::vector<T>& b) {
    for (size_t i = 0; i < a.size(); ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<int64_t>(i);
    return a.size() == b.size() ? -1 : static_cast<int64_t>(std::min(a.size(), b.size()));
}

}  // namespace

// Decode with a key bound (ops::AttentionParams::max_keys), which only sizes the
// key-range split: exact, rounded up to the bucket the forward pass records graphs
// with, wrong (too small: 1 and about half the longest sequence, which leave fewer
// splits than the keys need) and huge all give the reference result to the tolerance
// of the unbounded run. One token (a handful of keys, at a bucket edge, past the
// window), sequences of different lengths (the short ones' splits mostly empty), and one
// of 16,384 keys, whose bound of 1 leaves splits of thousands of keys (what a kernel that
// carries a bias in its accumulators, as the i8 P·V fold does, must survive).
TEST_P(CudaAttentionKv, DecodeWithKeyBound) {
    const std::vector<std::vector<Seq>> batches = {
        {{1, 1}},   {{20, 1}},   {{256, 1}},
        {{257, 1}}, {{3000, 1}}, {{5, 1}, {300, 1}, {1500, 1}, {40, 1}, {2048, 1}, {17, 1}},
        {{16384, 1}},
    };
    for (int64_t D : {256, 512})
        for (bool sliding : {true, false})
            for (const auto& seqs : batches) {
                const Case c = decode_layer(D, sliding, seqs);
                const int64_t exact = c.exact_max_keys();
                check_bounds(c, {0, exact, gemma4::Forward::key_bucket(exact), 1, exact / 2 + 1,
                                 int64_t{1} << 31});
            }
}

// Decode with the host's promise that every key before pos[t] was stored by an
// earlier batch (ops::AttentionParams::earlier_keys_stored): the split kernel then
// fetches a block's first chunk before its wait on the previous kernel, the key at
// pos after it. The same values reach the same arithmetic, so the output must be the
// promise-free run's bit for bit: positions at chunk edges (the key at pos first,
// last or alone in its chunk), key bounds that give one split and many, and a batch
// of sequences whose splits are partly empty; and 64 sequences of 1 to 1,500 keys, which
// the 8-bit pools at head size 256 run on the keys-by-warp kernel (it has no early fetch:
// the promise must change nothing there either).
// (That the key at pos really is read after the wait is what the model's decode tests
// check: their steps store it in the kernel just before.)
TEST_P(CudaAttentionKv, DecodeWithEarlierKeysStored) {
    std::vector<std::vector<Seq>> batches = {
        {{1, 1}},   {{2, 1}},    {{32, 1}},   {{33, 1}}, {{64, 1}},
        {{65, 1}},  {{778, 1}},  {{3000, 1}}, {{5, 1}, {300, 1}, {1500, 1}, {40, 1}, {2048, 1}, {17, 1}, {33, 1}},
    };
    batches.emplace_back();
    for (int s = 0; s < 64; ++s) batches.back().push_back({1 + (s * 97) % 1500, 1});
    for (int64_t D : {256, 512})
        for (bool sliding : {true, false})
            for (const auto& seqs : batches) {
                const Case c = decode_layer(D, sliding, seqs);
                const KvSetup s = build(c, rng);
                std::vector<float> ref;
                Bound b = bind(c, s, ref);
                cpu->attention(b.host);
                const int64_t exact = c.exact_max_keys();
                for (int64_t bound : {int64_t{0}, gemma4::Forward::key_bucket(exact)}) {
                    b.device.max_keys = bound;
                    std::vector<float> out[2];
                    for (int promise = 0; promise < 2; ++promise) {
                        b.device.earlier_keys_stored = promise == 1;
                        gpu->fill_zero(b.dout, s.q.size() * sizeof(float));
                        gpu->attention(b.device);
                        out[promise] = download(b.dout, s.q.size());
                    }
                    EXPECT_EQ(first_bit_diff(out[1], out[0]), -1) << c.label() << " bound=" << bound;
                    EXPECT_LE(rel_err(out[1], ref), split_mma(c) ? kTensorCoreTol : kF32Tol) << c.label();
                }
            }
}

// Head sizes without a fast kernel run the generic f32 kernel.
TEST_P(CudaAttentionKv, OtherHeadSizesUseGenericKernel) {
    for (int64_t D : {8, 32, 96, 160})
        for (int32_t window : {0, 5}) {
            Case c;
            c.head_dim = D;
            c.gqa = 2;
            c.window = window;
            c.block_size = 8;
            c.seqs = {{40, 40}, {17, 1}};
            check(c, 1e-5);
        }
}

// The prepared output (ops::AttentionParams::out_prep, ops/prepared.h) in the batches
// the contract allows (≤ prepared_tokens() = 16 tokens): out is bit for bit what it is
// without it, and a matmul given the prepared rows returns bit for bit what it returns
// quantizing out itself, and reads them (zeroed, they give zeros); where the launcher
// is reachable, the bytes also equal the CUDA backend's own quantization of out. The
// buffer starts as a byte pattern, so rows left unwritten fail. Cases: one split
// (short contexts under an exact key bound: the split kernel writes the output),
// several KV chunks split (the combiner), 15 and 16 decode tokens (at 16 the tile
// plan runs: a separate quantize pass), a 16-token prompt (tile kernels), head sizes
// 64 and 128 (few groups per block) and the generic kernel.
TEST_P(CudaAttentionKv, PreparedOutput) {
    ASSERT_EQ(gpu->prepared_tokens(), 16);
    std::vector<Case> cases;
    for (int64_t D : {256, 512})
        for (bool sliding : {false, true}) {
            cases.push_back(exact_bound(decode_layer(D, sliding, {{20, 1}})));
            cases.push_back(decode_layer(D, sliding, {{3000, 1}}));
            cases.push_back(exact_bound(decode_layer(D, sliding, {{9, 1}, {16, 1}, {5, 1}})));
            cases.push_back(decode_layer(D, sliding, {{5, 1}, {700, 1}, {1500, 1}}));
            std::vector<Seq> many;
            for (int s = 0; s < 16; ++s) many.push_back({1 + (s * 97) % 1500, 1});
            cases.push_back(decode_layer(D, sliding, many));
            many.pop_back();
            cases.push_back(decode_layer(D, sliding, many));
            cases.push_back(decode_layer(D, sliding, {{100, 16}}));
        }
    for (int64_t D : {64, 128}) {
        Case c;
        c.head_dim = D;
        c.n_kv_heads = 2;
        c.gqa = 2;
        c.seqs = {{20, 1}, {12, 1}};
        cases.push_back(exact_bound(c));
        c.seqs = {{3000, 1}};
        cases.push_back(c);
    }
    cases.push_back(generic_head96({{40, 1}, {17, 1}}));

    std::mt19937 wrng(7);
    constexpr int64_t kOut = 64;  // rows of the matmul weight
    for (const Case& c : cases) {
        const KvSetup s = build(c, rng);
        const int64_t T = static_cast<int64_t>(s.pos.size()), n = s.n_heads * c.head_dim;
        const std::string what = c.label() + " tokens=" + std::to_string(T);
        ASSERT_LE(T, gpu->prepared_tokens()) << what;
        std::vector<float> ref;
        Bound b = bind(c, s, ref);
        cpu->attention(b.host);
        gpu->attention(b.device);
        const std::vector<float> plain = download(b.dout, s.q.size());
        const bool fast_dim = c.head_dim != 96;
        const double tol = (s.has_long_run || split_mma(c)) && fast_dim ? kTensorCoreTol : kF32Tol;
        EXPECT_LE(rel_err(plain, ref), tol) << what;

        const size_t prep_bytes = gpu->prepared_bytes(T, n);
        ASSERT_GT(prep_bytes, 0u) << what;
        const std::vector<uint8_t> pattern(prep_bytes, 0xa5);
        void* prep = gpu->alloc(prep_bytes);
        gpu->upload(prep, pattern.data(), prep_bytes);
        ops::AttentionParams p = b.device;
        p.out = dev(std::vector<float>(s.q.size(), kNaN));
        p.out_prep = prep;
        gpu->attention(p);
        const std::vector<float> with_prep = download(p.out, s.q.size());
        EXPECT_EQ(first_bit_diff(with_prep, plain), -1) << what << ": out changed by out_prep";

        // The matmul on out: quantizing it itself, then reading the prepared rows.
        const ops::WeightView w = random_projection(kOut, n, wrng);
        const size_t ny = static_cast<size_t>(T * kOut);
        ops::MatmulParams m{w, p.out, gpu->alloc_array<float>(ny), T};
        gpu->matmul(m);
        const std::vector<float> y_self = download(m.y, ny);
        m.x_prep = prep;
        gpu->matmul(m);
        const std::vector<float> y_prep = download(m.y, ny);
        EXPECT_EQ(first_bit_diff(y_prep, y_self), -1) << what << ": matmul on the prepared rows";

#ifdef HF2Q_ATTENTION_TEST_DIRECT
        // Byte for byte against the backend's own quantization of out (the buffer's
        // bytes outside the prepared form keep the pattern in both).
        void* own = gpu->alloc(prep_bytes);
        gpu->upload(own, pattern.data(), prep_bytes);
        gpu->synchronize();  // the launcher runs on the legacy stream here
        cuda::launch_quantize_q8(p.out, n, T, n, own, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<uint8_t> got(prep_bytes), want(prep_bytes);
        gpu->download(got.data(), prep, prep_bytes);
        gpu->download(want.data(), own, prep_bytes);
        EXPECT_EQ(first_bit_diff(got, want), -1) << what << ": prepared bytes";
#endif

        gpu->fill_zero(prep, prep_bytes);  // the matmul really reads them
        gpu->matmul(m);
        EXPECT_EQ(download(m.y, ny), std::vector<float>(ny, 0.0f)) << what;
    }
}

// The optional BF16 rows of the output (out_bf16, ops/prepared.h), in batches past the
// GEMV (17+ tokens): the split kernel (one split and several, with the combiner) writes
// them from the values it holds; a tile plan (a run of one sequence's tokens), the generic
// kernel (head size 96) and a buffer not 8-byte aligned take a pass over out instead.
// Each way the rows are out's values rounded to nearest even, out itself does not change,
// and the output projection given them returns what it returns converting out itself;
// zeroed rows give zeros where 16-byte aligned, so it really reads them.
TEST_P(CudaAttentionKv, Bf16Output) {
    ASSERT_TRUE(gpu->reads_bf16_rows(17));
    std::vector<Case> cases;
    for (int64_t D : {256, 512}) {
        std::vector<Seq> short_seqs, long_seqs;
        for (int i = 0; i < 20; ++i) {
            short_seqs.push_back({1 + (i * 7) % 30, 1});
            long_seqs.push_back({300 + (i * 97) % 1500, 1});
        }
        cases.push_back(exact_bound(decode_layer(D, true, short_seqs)));
        cases.push_back(decode_layer(D, false, long_seqs));
        cases.push_back(decode_layer(D, true, {{100, 20}}));
    }
    std::vector<Seq> generic;
    for (int i = 0; i < 18; ++i) generic.push_back({5 + i, 1});
    cases.push_back(generic_head96(generic));

    std::mt19937 wrng(11);
    constexpr int64_t kOut = 64;  // rows of the matmul weight
    for (const Case& c : cases)
        for (int64_t shift : {0, 2}) {  // 2: BF16 rows 4 bytes past an 8-byte boundary
            const KvSetup s = build(c, rng);
            const int64_t T = static_cast<int64_t>(s.pos.size()), n = s.n_heads * c.head_dim;
            const std::string what =
                c.label() + " tokens=" + std::to_string(T) + " shift=" + std::to_string(shift);
            ASSERT_GE(T, 17) << what;
            std::vector<float> ref;
            Bound b = bind(c, s, ref);
            gpu->attention(b.device);
            const std::vector<float> plain = download(b.dout, s.q.size());

            const size_t nb = static_cast<size_t>(T * n);
            uint16_t* rows = gpu->alloc_array<uint16_t>(nb + shift) + shift;
            gpu->upload(rows, std::vector<uint16_t>(nb, 0x7fc1).data(), nb * 2);  // a NaN pattern
            ops::AttentionParams p = b.device;
            p.out = dev(std::vector<float>(s.q.size(), kNaN));
            p.out_bf16 = rows;
            gpu->attention(p);
            const std::vector<float> with_rows = download(p.out, s.q.size());
            EXPECT_EQ(first_bit_diff(with_rows, plain), -1) << what << ": out changed by out_bf16";
            std::vector<uint16_t> want(nb);
            for (size_t i = 0; i < nb; ++i) want[i] = quant::fp32_to_bf16(with_rows[i]);
            std::vector<uint16_t> got(nb);
            gpu->download(got.data(), rows, nb * 2);
            EXPECT_EQ(first_bit_diff(got, want), -1) << what << ": BF16 rows";

            // The output projection, converting out itself, then reading the rows.
            const ops::WeightView w = random_projection(kOut, n, wrng);
            const size_t ny = static_cast<size_t>(T * kOut);
            ops::MatmulParams m{w, p.out, gpu->alloc_array<float>(ny), T};
            gpu->matmul(m);
            const std::vector<float> y_self = download(m.y, ny);
            m.x_bf16 = rows;
            gpu->matmul(m);
            EXPECT_EQ(first_bit_diff(download(m.y, ny), y_self), -1) << what << ": matmul on the BF16 rows";
            // Rows below 16-byte alignment (shift 2) the matmul ignores (cuBLAS would
            // round them differently); aligned ones it reads.
            gpu->fill_zero(rows, nb * 2);
            gpu->matmul(m);
            if (shift == 0)
                EXPECT_EQ(download(m.y, ny), std::vector<float>(ny, 0.0f)) << what << ": the rows not read";
            else
                EXPECT_EQ(first_bit_diff(download(m.y, ny), y_self), -1) << what << ": misaligned rows read";
        }
}

// n_tokens = 0 is a no-op (null pointers allowed, output untouched).
TEST_F(CudaAttention, EmptyBatch) {
    std::vector<float> sentinel(64, 7.0f);
    float* dout = dev(sentinel);
    ops::AttentionParams p;
    p.out = dout;
    p.n_tokens = 0;
    p.n_heads = 16;
    p.n_kv_heads = 2;
    p.head_dim = 512;
    p.block_size = 16;
    gpu->attention(p);
    EXPECT_EQ(download(dout, sentinel.size()), sentinel);
}

// F16 vs BF16 operand rounding at Gemma 4's head sizes, measured on the CPU
// reference (inputs rounded, f32 math): why the tile kernel uses F16. Also the error
// of the GPU at unit-RMS q and k (QK-normed activations, scores with sd √D).
TEST_F(CudaAttention, PrecisionF16VersusBf16) {
    for (int64_t D : {256, 512})
        for (float qk_sd : {0.0f, 1.0f}) {
            Case c;
            c.head_dim = D;
            c.gqa = D == 512 ? 8 : 2;
            c.qk_sd = qk_sd;
            c.seqs = {{300, 300}};
            const KvSetup s = build(c, rng);
            std::vector<float> ref;
            Bound b = bind(c, s, ref);
            cpu->attention(b.host);
            double err[2];
            for (int k = 0; k < 2; ++k) {
                KvSetup r = s;
                for (auto* v : {&r.q, &r.k_pool, &r.v_pool})
                    for (float& x : *v) x = k == 0 ? round_f16(x) : round_bf16(x);
                std::vector<float> out(ref.size());
                ops::AttentionParams p = b.host;
                p.q = r.q.data();
                p.k_pool = r.k_pool.data();
                p.v_pool = r.v_pool.data();
                p.out = out.data();
                cpu->attention(p);
                err[k] = rel_err(out, ref);
            }
            gpu->attention(b.device);
            const double gpu_err = rel_err(download(b.dout, s.q.size()), ref);
            std::printf(
                "  D=%lld q/k sd=%s: operands rounded to F16 %.3g, to BF16 %.3g; CUDA kernel "
                "%.3g\n",
                (long long)D, qk_sd > 0 ? "1 (unit RMS)" : "score sd 3", err[0], err[1], gpu_err);
            EXPECT_LT(err[0], err[1] / 4) << "F16 should be ~8x more precise than BF16";
            EXPECT_LE(gpu_err, qk_sd > 0 ? 2e-2 : kTensorCoreTol);
        }
}

#ifdef HF2Q_ATTENTION_TEST_DIRECT

// The launcher with a workspace too small for the tile plan or for splits (all
// work then runs on the split kernel, unsplit) and with none at all.
TEST_P(CudaAttentionKv, SmallWorkspace) {
    Case c;
    c.head_dim = 512;
    c.gqa = 8;
    c.seqs = {{300, 120}, {2000, 1}};
    const KvSetup s = build(c, rng);
    std::vector<float> ref;
    Bound b = bind(c, s, ref);
    cpu->attention(b.host);
    const size_t plan_only = 4096;  // fits the plan of 2 tiles + 121 flags, no partials
    float* buf = gpu->alloc_array<float>(plan_only);
    for (size_t floats : {size_t{0}, size_t{100}, plan_only}) {
        gpu->fill_zero(b.dout, s.q.size() * sizeof(float));
        gpu->synchronize();  // the launcher runs on the legacy stream here
        cuda::AttentionWorkspace ws{floats ? buf : nullptr, floats};
        cuda::launch_attention(b.device, ws, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const double err = rel_err(download(b.dout, s.q.size()), ref);
        EXPECT_LE(err, floats == plan_only || split_mma(c) ? kTensorCoreTol : kF32Tol)
            << "workspace floats " << floats;
    }
}

namespace {

// What launch_attention records for one call: its kernels, and the largest grid.z
// among them, which is the number of key-range splits (the split kernel's grid is
// tokens × head groups × splits; every other kernel's grid.z is 1).
struct Recorded {
    size_t kernels = 0;
    unsigned n_split = 1;
};

Recorded record_attention(const ops::AttentionParams& p, const cuda::AttentionWorkspace& ws,
                          cudaStream_t st) {
    Recorded r;
    cudaGraph_t g = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cuda::launch_attention(p, ws, st);
    EXPECT_EQ(cudaStreamEndCapture(st, &g), cudaSuccess);
    size_t n = 0;
    EXPECT_EQ(cudaGraphGetNodes(g, nullptr, &n), cudaSuccess);
    std::vector<cudaGraphNode_t> nodes(n);
    EXPECT_EQ(cudaGraphGetNodes(g, nodes.data(), &n), cudaSuccess);
    for (cudaGraphNode_t node : nodes) {
        cudaGraphNodeType type;
        EXPECT_EQ(cudaGraphNodeGetType(node, &type), cudaSuccess);
        if (type != cudaGraphNodeTypeKernel) continue;
        cudaKernelNodeParams kp{};
        EXPECT_EQ(cudaGraphKernelNodeGetParams(node, &kp), cudaSuccess);
        ++r.kernels;
        r.n_split = std::max(r.n_split, kp.gridDim.z);
    }
    cudaGraphDestroy(g);
    return r;
}

}  // namespace

// The key bound caps the split: at most one split per 2 chunks (kMinChunksPerSplit in
// attention.cu) of 4096 / D keys of the longest visible range (the window on sliding
// layers), never more than without a bound; past one wave of the split kernel's blocks,
// the count of attention_wave_splits up to the useful splits (one per 2 chunks, at most
// kMaxSplits = 128; the workspace here holds more); one split launches no combiner.
// Each bound's result (an eager launch, before the capture that counts) is checked too.
TEST_F(CudaAttention, KeyBoundCapsSplits) {
    cudaStream_t st;
    ASSERT_EQ(cudaStreamCreate(&st), cudaSuccess);
    const size_t floats = size_t{16} << 20;
    const cuda::AttentionWorkspace ws{gpu->alloc_array<float>(floats), floats};
    for (int64_t D : {256, 512})
        for (bool sliding : {true, false})
            for (int64_t ctx : {20, 100, 3000}) {
                const Case c = decode_layer(D, sliding, {{ctx, 1}});
                const KvSetup s = build(c, rng);
                std::vector<float> ref;
                Bound b = bind(c, s, ref);
                cpu->attention(b.host);
                unsigned unbounded = 0;
                for (int64_t bound :
                     {int64_t{0}, ctx, gemma4::Forward::key_bucket(ctx), int64_t{1}}) {
                    ops::AttentionParams p = b.device;
                    p.max_keys = bound;
                    gpu->fill_zero(b.dout, s.q.size() * sizeof(float));
                    gpu->synchronize();
                    cuda::launch_attention(p, ws, st);
                    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
                    EXPECT_LE(rel_err(download(b.dout, s.q.size()), ref), kF32Tol)
                        << c.label() << " bound " << bound;
                    const Recorded r = record_attention(p, ws, st);
                    if (bound == 0) {
                        unbounded = r.n_split;
                        EXPECT_GT(unbounded, 1u) << c.label() << ": one token should split";
                        continue;
                    }
                    const int64_t keys = sliding ? std::min<int64_t>(bound, c.window) : bound;
                    const int64_t ck = 4096 / D, chunks = (keys + ck - 1) / ck;
                    const auto cap = static_cast<int>(std::min<int64_t>(unbounded, std::max<int64_t>(1, chunks / 2)));
                    // Past one wave of blocks, the count with the fewest waves × chunks up to
                    // the useful splits.
                    const int64_t blocks = p.n_tokens * p.n_kv_heads;  // GQA 2: one KV head a block
                    const int64_t slots = cuda::attention_split_slots(p, true, false);
                    const int useful = static_cast<int>(std::min<int64_t>(128, std::max<int64_t>(1, chunks / 2)));
                    const int most = blocks * cap > slots ? std::max(cap, useful) : cap;
                    const auto want = static_cast<unsigned>(
                        cap > 1 ? cuda::attention_wave_splits(blocks, slots, chunks, most) : cap);
                    EXPECT_LE(want, static_cast<unsigned>(most));
                    EXPECT_EQ(r.n_split, want) << c.label() << " bound " << bound;
                    EXPECT_EQ(r.kernels, want > 1 ? 2u : 1u) << c.label() << " bound " << bound;
                }
            }
    cudaStreamDestroy(st);
}

// attention_split_plan (attention.cu): the keys-by-warp split kernel (8-bit pools at head
// size 256 on tensor cores) serves a batch whose splits span 4 chunks of 64 keys or more (i8)
// or 8 (E4M3): decode tokens of the 26B-A4B's sliding layers (1,024 keys: 16 chunks), with
// the forward pass's key bound and without; not one token (its range split until a split
// spans 2 chunks), short contexts, f32 and f16 pools, head size 512, or the f32 path. The
// launch runs the plan's splits (a captured launch: nothing executes).
TEST_F(CudaAttention, SplitPlanPicksWarpKernel) {
    cudaStream_t st;
    ASSERT_EQ(cudaStreamCreate(&st), cudaSuccess);
    const size_t floats = size_t{16} << 20;
    const cuda::AttentionWorkspace ws{gpu->alloc_array<float>(floats), floats};
    auto layer = [](int64_t D, ops::KvType pool, int64_t n_tokens, int64_t max_keys) {
        ops::AttentionParams p;
        p.head_dim = D;
        p.n_heads = 16;
        p.n_kv_heads = D == 256 ? 8 : 2;
        p.window = D == 256 ? 1024 : 0;
        p.block_size = 16;
        p.n_tokens = n_tokens;
        p.max_keys = max_keys;
        p.earlier_keys_stored = true;
        p.kv_type = pool;
        return p;
    };
    const auto i8 = ops::KvType::i8;
    // Tokens, key bound, then the keys-by-warp splits and whether i8 and E4M3 take them. The
    // splits (132 SMs, 2 warp-kernel blocks an SM): with a bound, attention_wave_splits over 16
    // chunks; without, ~4 blocks an SM (8 tokens: 9 splits of 2 chunks).
    struct Want {
        int64_t n_tokens, bound;
        int splits;
        bool i8_warps, e4m3_warps;
    };
    for (const Want w : {Want{8, 2048, 4, true, false}, Want{8, 0, 9, false, false}, Want{32, 2048, 1, true, true},
                         Want{32, 0, 3, true, false}, Want{64, 2048, 1, true, true}, Want{64, 0, 2, true, true}})
        for (ops::KvType pool : {i8, ops::KvType::e4m3}) {
            const ops::AttentionParams p = layer(256, pool, w.n_tokens, w.bound);
            const cuda::AttentionSplitPlan plan = cuda::attention_split_plan(p, ws, 0);
            const std::string what = std::string(pool == i8 ? "i8, " : "e4m3, ") + std::to_string(w.n_tokens) +
                                     " tokens, bound " + std::to_string(w.bound);
            const bool warps = pool == i8 ? w.i8_warps : w.e4m3_warps;
            EXPECT_EQ(plan.warps, warps) << what;
            if (warps) {
                EXPECT_EQ(plan.n_split, w.splits) << what;
            }
            EXPECT_EQ(record_attention(p, ws, st).n_split, static_cast<unsigned>(plan.n_split)) << what;
        }
    const ops::AttentionParams one = layer(256, i8, 1, 2048);
    const cuda::AttentionSplitPlan plan1 = cuda::attention_split_plan(one, ws, 0);
    EXPECT_FALSE(plan1.warps);
    EXPECT_EQ(plan1.n_split, 8);  // 16 chunks, 2 a split
    EXPECT_EQ(record_attention(one, ws, st).n_split, 8u);
    EXPECT_FALSE(cuda::attention_split_plan(layer(256, i8, 64, 128), ws, 0).warps);  // 2 chunks
    for (ops::KvType pool : {ops::KvType::f32, ops::KvType::f16})
        EXPECT_FALSE(cuda::attention_split_plan(layer(256, pool, 64, 2048), ws, 0).warps);
    EXPECT_FALSE(cuda::attention_split_plan(layer(512, i8, 64, 2048), ws, 0).warps);
    cuda::AttentionWorkspace f32_only = ws;
    f32_only.f32_only = true;
    EXPECT_FALSE(cuda::attention_split_plan(layer(256, i8, 64, 2048), f32_only, 0).warps);
    cudaStreamDestroy(st);
}

// The split count past one wave (attention.cu): the fewest waves × (chunks a split
// + 1), the fewest splits on a tie; within one wave the cap itself.
TEST(AttentionWaveSplits, FewestWavesTimesChunks) {
    // 26B-A4B full layers at 64 sequences: 128 blocks, 264 at once, 65 chunks, cap 5.
    // Costs 1: 1 × 66, 2: 1 × 34, 3: 2 × 23, 4: 2 × 18, 5: 3 × 14.
    EXPECT_EQ(cuda::attention_wave_splits(128, 264, 65, 5), 2);
    // Sliding layers: 512 blocks, 396 at once, 32 chunks, cap 2. 1: 2 × 33, 2: 3 × 17.
    EXPECT_EQ(cuda::attention_wave_splits(512, 396, 32, 2), 2);
    // One wave: the cap, whatever the chunks.
    EXPECT_EQ(cuda::attention_wave_splits(8, 396, 64, 16), 16);
    EXPECT_EQ(cuda::attention_wave_splits(128, 264, 65, 2), 2);
    // Fewer splits win where more only add waves: 1: 1 × 5, 2: 2 × 3, 3: 3 × 3, 4: 4 × 2.
    EXPECT_EQ(cuda::attention_wave_splits(100, 100, 4, 4), 1);
    // A tie goes to the fewest: 1: 1 × 2, 2: 1 × 2, 3: 2 × 2.
    EXPECT_EQ(cuda::attention_wave_splits(100, 200, 1, 3), 1);
    // More splits win where they shorten every block by more than they add waves:
    // 1: 2 × 101 = 202, 2: 3 × 51 = 153, 3: 5 × 35 = 175, 4: 6 × 26 = 156, 8: 12 × 14 = 168.
    EXPECT_EQ(cuda::attention_wave_splits(150, 100, 100, 8), 2);
    EXPECT_EQ(cuda::attention_wave_splits(300, 100, 0, 3), 1);  // no keys: the fewest waves
}

namespace {

struct PerfCase {
    const char* name;
    int64_t D, n_heads, n_kv, tokens_per_seq, n_seq, ctx;
    int32_t window;
};

}  // namespace

// Achieved TFLOP/s (4·D per visible (query head, key) pair) and KV bytes per second,
// timed with CUDA events over back-to-back launches on one stream. A sample of rows
// is checked against the CPU reference.
TEST_P(CudaAttentionKv, DISABLED_Perf) {
    const PerfCase cases[] = {
        {"prefill 4096, D=256, 16/8 heads, window 1024", 256, 16, 8, 4096, 1, 4096, 1024},
        {"prefill 4096, D=512, 16/2 heads, causal", 512, 16, 2, 4096, 1, 4096, 0},
        {"decode 64 seqs x 1 @1024, D=256, 16/8, w 1024", 256, 16, 8, 1, 64, 1024, 1024},
        {"decode 64 seqs x 1 @1024, D=512, 16/2", 512, 16, 2, 1, 64, 1024, 0},
        {"decode 1 seq @32768, D=512, 16/2", 512, 16, 2, 1, 1, 32768, 0},
        {"decode 1 seq @32768, D=256, 16/8, w 1024", 256, 16, 8, 1, 1, 32768, 1024},
        {"decode 1 seq @300, D=512, 16/2", 512, 16, 2, 1, 1, 300, 0},
        {"decode 1 seq @300, D=256, 16/8, w 1024", 256, 16, 8, 1, 1, 300, 1024},
        {"decode 1 seq @1000, D=512, 16/2", 512, 16, 2, 1, 1, 1000, 0},
        {"decode 1 seq @3000, D=512, 16/2", 512, 16, 2, 1, 1, 3000, 0},
    };
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    cuda::AttentionWorkspace ws{gpu->alloc_array<float>(size_t{16} << 20), size_t{16} << 20};
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (const PerfCase& pc : cases) {
        Case c;
        c.head_dim = pc.D;
        c.n_kv_heads = pc.n_kv;
        c.gqa = pc.n_heads / pc.n_kv;
        c.window = pc.window;
        c.release = pc.window > 0;
        for (int64_t i = 0; i < pc.n_seq; ++i) c.seqs.push_back({pc.ctx, pc.tokens_per_seq});
        c.interleave = true;
        const KvSetup s = build(c, rng);
        std::vector<float> ref;
        Bound b = bind(c, s, ref);
        double flops = 0, kv_bytes = 0;
        for (int32_t p : s.pos) {
            const double keys = p - window_lo(p, pc.window) + 1;
            flops += 4.0 * pc.D * pc.n_heads * keys;
            kv_bytes += 2.0 * static_cast<double>(ops::kv_type_bytes(kv)) * pc.D * pc.n_kv * keys;
        }
        const int iters = pc.tokens_per_seq > 1 ? 10 : 50;
        gpu->synchronize();
        auto time_it = [&](const ops::AttentionParams& p, int n,
                           const cuda::AttentionWorkspace& w) {
            cuda::launch_attention(p, w, stream);
            cudaEventRecord(e0, stream);
            for (int i = 0; i < n; ++i) cuda::launch_attention(p, w, stream);
            cudaEventRecord(e1, stream);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            return ms / n;
        };
        const float ms = time_it(b.device, iters, ws);
        ASSERT_EQ(cudaGetLastError(), cudaSuccess);
        // Reference on a sample of rows (first, middle and last 16 tokens).
        std::vector<float> got = download(b.dout, s.q.size());
        const int64_t T = static_cast<int64_t>(s.pos.size()), D = pc.D, H = pc.n_heads;
        std::vector<int64_t> rows;
        for (int64_t t = 0; t < T; ++t)
            if (t < 16 || (t >= T / 2 && t < T / 2 + 16) || t >= T - 16) rows.push_back(t);
        std::vector<float> sq, sref(rows.size() * H * D), sgot;
        std::vector<int32_t> spos, slen;
        std::vector<const int32_t*> stabs;
        for (int64_t t : rows) {
            sq.insert(sq.end(), s.q.begin() + t * H * D, s.q.begin() + (t + 1) * H * D);
            sgot.insert(sgot.end(), got.begin() + t * H * D, got.begin() + (t + 1) * H * D);
            spos.push_back(s.pos[t]);
            slen.push_back(s.table_len[t]);
            stabs.push_back(b.host_tabs[t]);
        }
        ops::AttentionParams hp = b.host;
        hp.q = sq.data();
        hp.out = sref.data();
        hp.n_tokens = static_cast<int64_t>(rows.size());
        hp.pos = spos.data();
        hp.table_len = slen.data();
        hp.tables = stabs.data();
        cpu->attention(hp);
        const double err = rel_err(sgot, sref);
        std::printf("  %-48s %9.1f us  %7.1f TFLOP/s  %7.0f GB/s KV  (rel err %.2g)\n", pc.name,
                    ms * 1e3, flops / (ms * 1e-3) / 1e12, kv_bytes / (ms * 1e-3) / 1e9, err);
        EXPECT_LE(err, kTensorCoreTol) << pc.name;
        // The generic f32 kernel on the same work (an unaligned q forces it), once.
        if (pc.tokens_per_seq == 1 || pc.window > 0) {
            float* q_off = gpu->alloc_array<float>(s.q.size() + 1) + 1;
            gpu->synchronize();
            ops::AttentionParams slow = b.device;
            slow.q = q_off;
            const float ms_slow = time_it(slow, pc.tokens_per_seq > 1 ? 1 : 5, ws);
            std::printf("  %-48s %9.1f us  %7.1f TFLOP/s  (generic f32 kernel)\n", "",
                        ms_slow * 1e3, flops / (ms_slow * 1e-3) / 1e12);
        }
        if (pc.tokens_per_seq == 1) {  // with the key bound decode graphs record with
            ops::AttentionParams bounded = b.device;
            bounded.max_keys = gemma4::Forward::key_bucket(c.exact_max_keys());
            const float ms_bound = time_it(bounded, iters, ws);
            std::printf("  %-48s %9.1f us  %7.0f GB/s KV  (key bound %lld)\n", "", ms_bound * 1e3,
                        kv_bytes / (ms_bound * 1e-3) / 1e9, (long long)bounded.max_keys);
        }
        if (pc.tokens_per_seq == 1) {  // without a workspace: no key-range splits
            const float ms_one = time_it(b.device, iters, cuda::AttentionWorkspace{});
            std::printf("  %-48s %9.1f us  %7.0f GB/s KV  (split kernel, no key-range split)\n", "",
                        ms_one * 1e3, kv_bytes / (ms_one * 1e-3) / 1e9);
        }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(stream);
}

#endif  // HF2Q_ATTENTION_TEST_DIRECT
