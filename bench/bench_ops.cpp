// CPU backend micro-benchmarks: matmul over weight types and token counts, paged
// attention for prefill and decode shapes. Arguments are in each benchmark's name;
// the thread count is the last argument.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/ggml_type.h"
#include "quant/quant.h"

namespace {

using namespace hf2q;

std::vector<float> random_floats(size_t n, uint32_t seed, float sigma) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

// Args: weight type id, n_out, n_in, tokens, threads.
void BM_Matmul(benchmark::State& state) {
    const auto type = static_cast<GgmlType>(state.range(0));
    const int64_t n_out = state.range(1), n_in = state.range(2), n_tok = state.range(3);
    auto be = cpu::make_backend(static_cast<int>(state.range(4)));
    const auto w = random_floats(size_t(n_out * n_in), 1, 0.05f);
    const uint64_t rb = *ggml_row_size(type, uint64_t(n_in));
    std::vector<uint8_t> bytes(size_t(rb * uint64_t(n_out)));
    quant::quantize(type, w.data(), bytes.data(), n_out, n_in, nullptr);
    const auto x = random_floats(size_t(n_tok * n_in), 2, 1.0f);
    std::vector<float> y(size_t(n_tok * n_out));
    ops::MatmulParams p;
    p.w = ops::WeightView{type, n_in, n_out, rb, bytes.data()};
    p.x = x.data();
    p.y = y.data();
    p.n_tokens = n_tok;
    for (auto _ : state) {
        be->matmul(p);
        benchmark::DoNotOptimize(y.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(n_out * n_in * n_tok),
                                                   benchmark::Counter::kIsIterationInvariantRate,
                                                   benchmark::Counter::kIs1000);
    state.SetLabel(std::string(ggml_type_name(type)));
}

// Args: head_dim, query tokens, context length, window, threads. 8 query heads over 2
// KV heads, block size 16, one sequence whose last `tokens` positions are queried.
void BM_Attention(benchmark::State& state) {
    const int64_t d = state.range(0), n_tok = state.range(1), ctx = state.range(2);
    const int32_t window = static_cast<int32_t>(state.range(3));
    auto be = cpu::make_backend(static_cast<int>(state.range(4)));
    const int64_t n_heads = 8, n_kv = 2, bs = 16, n_blocks = (ctx + bs - 1) / bs;
    const auto k = random_floats(size_t(n_blocks * bs * n_kv * d), 3, 1.0f);
    const auto v = random_floats(k.size(), 4, 1.0f);
    const auto q = random_floats(size_t(n_tok * n_heads * d), 5, 0.1f);
    std::vector<float> out(q.size());
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    std::vector<int32_t> pos(static_cast<size_t>(n_tok)), len(static_cast<size_t>(n_tok));
    for (int64_t b = 0; b < n_blocks; ++b) table[size_t(b)] = int32_t(b);
    std::vector<const int32_t*> tables(size_t(n_tok), table.data());
    for (int64_t t = 0; t < n_tok; ++t) {
        pos[size_t(t)] = int32_t(ctx - n_tok + t);
        len[size_t(t)] = int32_t(n_blocks);
    }
    ops::AttentionParams p;
    p.q = q.data();
    p.out = out.data();
    p.n_tokens = n_tok;
    p.n_heads = n_heads;
    p.n_kv_heads = n_kv;
    p.head_dim = d;
    p.k_pool = k.data();
    p.v_pool = v.data();
    p.block_size = bs;
    p.pos = pos.data();
    p.tables = tables.data();
    p.table_len = len.data();
    p.window = window;
    p.n_blocks = n_blocks;
    for (auto _ : state) {
        be->attention(p);
        benchmark::DoNotOptimize(out.data());
    }
}

constexpr int64_t kQ4K = int64_t(GgmlType::Q4_K), kQ8 = int64_t(GgmlType::Q8_0),
                  kBF16 = int64_t(GgmlType::BF16), kF32 = int64_t(GgmlType::F32),
                  kF16 = int64_t(GgmlType::F16), kQ6K = int64_t(GgmlType::Q6_K),
                  kQ5K = int64_t(GgmlType::Q5_K), kQ40 = int64_t(GgmlType::Q4_0),
                  kQ50 = int64_t(GgmlType::Q5_0);

// Token counts 1-8 are decode and small batches (the weight rows decoded in registers
// once per token group, matmul.cpp); 17 and 128 take the decoded tiles.
BENCHMARK(BM_Matmul)
    ->ArgsProduct({{kF32, kBF16, kQ8, kQ4K}, {2048}, {2048}, {1, 17, 128}, {1}})
    ->ArgsProduct({{kF16, kBF16, kQ8, kQ40, kQ50, kQ4K, kQ5K, kQ6K}, {2048}, {2048}, {1, 2, 4, 8}, {1}})
    ->ArgsProduct({{kQ4K}, {8192}, {2048}, {1}, {1, 4, 16}})
    ->ArgsProduct({{kQ4K}, {2048}, {2048}, {512}, {1, 4, 16}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Attention)
    ->ArgsProduct({{256, 512}, {1}, {4096}, {0}, {1}})
    ->ArgsProduct({{256}, {512}, {512}, {0}, {1, 4, 16}})
    ->ArgsProduct({{256}, {512}, {2048}, {512}, {1, 4, 16}})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
