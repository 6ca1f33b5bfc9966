// MoE routing and the row-movement ops (gather, scatter-add, KV store, block copy).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops_test_util.h"
#include "quant/quant.h"

namespace hf2q::ops_test {
namespace {

struct Route {
    std::vector<int32_t> ids;
    std::vector<float> weights;
};

Route run_route(const std::vector<float>& logits, const float* expert_scale, int64_t n_tok,
                int64_t n_exp, int64_t k) {
    Route r[2];
    ops::Backend* bes[2] = {backends().one.get(), backends().three.get()};
    for (int i = 0; i < 2; ++i) {
        r[i].ids.assign(size_t(n_tok * k), -5);
        r[i].weights.assign(size_t(n_tok * k), -5.0f);
        ops::MoeRouteParams p;
        p.logits = logits.data();
        p.expert_scale = expert_scale;
        p.ids = r[i].ids.data();
        p.weights = r[i].weights.data();
        p.n_tokens = n_tok;
        p.n_experts = n_exp;
        p.k = k;
        bes[i]->moe_route(p);
    }
    EXPECT_EQ(r[0].ids, r[1].ids);
    EXPECT_TRUE(bitwise_equal(r[0].weights, r[1].weights));
    return r[0];
}

// Reference: double softmax, stable sort by (prob desc, index asc), renormalise, scale.
void check_route(const std::vector<float>& logits, const float* es, int64_t n_tok, int64_t n_exp,
                 int64_t k, const Route& got) {
    for (int64_t t = 0; t < n_tok; ++t) {
        const float* x = logits.data() + t * n_exp;
        const double mx = *std::max_element(x, x + n_exp);
        std::vector<double> pr(static_cast<size_t>(n_exp));
        double sum = 0.0;
        for (int64_t e = 0; e < n_exp; ++e) sum += (pr[size_t(e)] = std::exp(x[e] - mx));
        for (auto& v : pr) v /= sum;
        std::vector<int32_t> order(static_cast<size_t>(n_exp));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(),
                         [&](int32_t a, int32_t b) { return pr[size_t(a)] > pr[size_t(b)]; });
        double top = 0.0;
        for (int64_t i = 0; i < k; ++i) top += pr[size_t(order[size_t(i)])];
        for (int64_t i = 0; i < k; ++i) {
            const int32_t id = order[size_t(i)];
            ASSERT_EQ(got.ids[size_t(t * k + i)], id) << "token " << t << " rank " << i;
            const double w = pr[size_t(id)] / top * (es ? es[id] : 1.0);
            EXPECT_NEAR(got.weights[size_t(t * k + i)], w, 1e-6 * std::abs(w) + 1e-12);
        }
    }
}

TEST(MoeRoute, Top8Of128WithAndWithoutScale) {
    for (int64_t n_tok : {1, 5, 40}) {
        const auto logits = randn(size_t(n_tok * 128), uint32_t(n_tok), 3.0f);
        const auto es = randn(128, 77);
        check_route(logits, nullptr, n_tok, 128, 8, run_route(logits, nullptr, n_tok, 128, 8));
        check_route(logits, es.data(), n_tok, 128, 8, run_route(logits, es.data(), n_tok, 128, 8));
    }
}

TEST(MoeRoute, TiesPickLowerIndexAndKEqualsExperts) {
    // Integer logits with many exact ties.
    std::vector<float> logits = {1, 3, 3, 0, 3, 1, 2, 2};
    Route r = run_route(logits, nullptr, 1, 8, 4);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2, 4, 6}));
    check_route(logits, nullptr, 1, 8, 4, r);
    r = run_route(logits, nullptr, 1, 8, 8);
    EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2, 4, 6, 7, 0, 5, 3}));
    double s = 0.0;
    for (float w : r.weights) s += w;
    EXPECT_NEAR(s, 1.0, 1e-6);
}

TEST(MoeRoute, ZeroTokensIsNoop) {
    ops::MoeRouteParams p;
    p.n_experts = 8;
    p.k = 2;
    backends().three->moe_route(p);  // nullptr buffers, nothing touched
}

// moe_route_group with a router input (ops/moe.h) is the router matmul into the
// logits, then moe_route, then moe_group: the same bits on both backends, over token
// counts from none to a prefill batch, strided and odd-width inputs, F32 and Q8_0
// router weights, with and without expert scales. Every output starts as a sentinel.
TEST(MoeRouteGroup, RouterInputIsMatmulThenRouteThenGroup) {
    struct Out {
        std::vector<float> logits, weights;
        std::vector<int32_t> ids, offsets, rows, slot_of;
    };
    int case_seed = 0;
    for (const GgmlType type : {GgmlType::F32, GgmlType::Q8_0})
        for (const int64_t n_in : {7, 64})
            for (const int64_t T : {0, 1, 5, 40})
                for (const int64_t E : {8, 128})
                    for (const int64_t K : {1, 2, 8})
                        for (const bool scaled : {false, true}) {
                            if (type == GgmlType::Q8_0 && n_in % 32 != 0) continue;
                            const int64_t xs = n_in + 3;  // a strided input
                            const auto wf = randn(size_t(E * n_in), uint32_t(100 + case_seed), 0.5f);
                            const auto x = randn(size_t(std::max<int64_t>(T, 1) * xs), uint32_t(200 + case_seed));
                            const auto es = randn(size_t(E), uint32_t(300 + case_seed));
                            ++case_seed;
                            const uint64_t row_bytes = *ggml_row_size(type, uint64_t(n_in));
                            std::vector<uint8_t> wq(row_bytes * size_t(E));
                            quant::quantize(type, wf.data(), wq.data(), E, n_in, nullptr);
                            const ops::WeightView w{type, n_in, E, row_bytes, wq.data()};
                            const std::string what = std::string(ggml_type_name(type)) + " n_in=" +
                                                     std::to_string(n_in) + " T=" + std::to_string(T) +
                                                     " E=" + std::to_string(E) + " K=" + std::to_string(K) +
                                                     (scaled ? " scaled" : "");
                            auto run = [&](ops::Backend& be, bool fused) {
                                const size_t n = size_t(T * K);
                                Out o{std::vector<float>(size_t(T * E), -7.0f), std::vector<float>(n, -7.0f),
                                      std::vector<int32_t>(n, -7), std::vector<int32_t>(size_t(E + 1), -7),
                                      std::vector<int32_t>(n, -7), std::vector<int32_t>(n, -7)};
                                ops::MoeRouteParams r;
                                r.logits = o.logits.data();
                                r.expert_scale = scaled ? es.data() : nullptr;
                                r.ids = o.ids.data();
                                r.weights = o.weights.data();
                                r.n_tokens = T;
                                r.n_experts = E;
                                r.k = K;
                                const ops::MoeGroupParams g{o.ids.data(), T, K, E, o.offsets.data(),
                                                            o.rows.data(), o.slot_of.data()};
                                if (fused) {
                                    r.router_x = x.data();
                                    r.router_x_stride = xs;
                                    r.router_w = w;
                                    be.moe_route_group(r, g);
                                } else {
                                    ops::MatmulParams m;
                                    m.w = w;
                                    m.x = x.data();
                                    m.x_stride = xs;
                                    m.y = o.logits.data();
                                    m.n_tokens = T;
                                    be.matmul(m);
                                    be.moe_route(r);
                                    be.moe_group(g);
                                }
                                return o;
                            };
                            const Out ref = run(*backends().one, false);
                            for (ops::Backend* be : {backends().one.get(), backends().three.get()}) {
                                const Out got = run(*be, true);
                                EXPECT_TRUE(bitwise_equal(got.logits, ref.logits)) << what;
                                EXPECT_TRUE(bitwise_equal(got.weights, ref.weights)) << what;
                                EXPECT_EQ(got.ids, ref.ids) << what;
                                EXPECT_EQ(got.offsets, ref.offsets) << what;
                                EXPECT_EQ(got.rows, ref.rows) << what;
                                EXPECT_EQ(got.slot_of, ref.slot_of) << what;
                            }
                            // The routing is a real one: every pair grouped.
                            ASSERT_EQ(ref.offsets[size_t(E)], T * K) << what;
                        }
}

// upload_async (ops/backend.h) as the host backends run it: each row's first `width`
// bytes at the pitch, nothing between the rows, and one row with the pitch unused.
TEST(Backend, UploadAsyncCopiesRowsAtPitch) {
    ops::Backend& be = *backends().one;
    constexpr size_t kRows = 3, kPitch = 16, kWidth = 10;
    auto* src = static_cast<uint8_t*>(be.alloc_host(kRows * kPitch));
    for (size_t i = 0; i < kRows * kPitch; ++i) src[i] = static_cast<uint8_t>(i + 1);
    auto* dst = static_cast<uint8_t*>(be.alloc(kRows * kPitch));  // zeroed
    be.upload_async(dst, src, kWidth, kRows, kPitch);
    be.wait_uploads();
    for (size_t r = 0; r < kRows; ++r)
        for (size_t c = 0; c < kPitch; ++c)
            EXPECT_EQ(dst[r * kPitch + c], c < kWidth ? src[r * kPitch + c] : 0) << "row " << r << " byte " << c;
    src[0] = 200;
    be.upload_async(dst, src, 1, 1, 0);
    EXPECT_EQ(dst[0], 200);
    EXPECT_EQ(dst[1], 2);
    be.free_host(src);
}

// A router weight that does not map to one logit per expert, and moe_route given a
// router input, fail with a message instead of computing something else.
TEST(MoeRouteGroup, RouterShapeMismatchFails) {
    const int64_t T = 2, E = 8, K = 2, n_in = 16;
    const auto wf = randn(size_t((E + 1) * n_in), 5);
    const auto x = randn(size_t(T * n_in), 6);
    std::vector<float> logits(size_t(T * (E + 1)));
    std::vector<int32_t> ids(size_t(T * K)), offsets(size_t(E + 1)), rows(ids.size()), slot_of(ids.size());
    std::vector<float> weights(ids.size());
    ops::MoeRouteParams r;
    r.logits = logits.data();
    r.ids = ids.data();
    r.weights = weights.data();
    r.n_tokens = T;
    r.n_experts = E;
    r.k = K;
    r.router_x = x.data();
    const ops::MoeGroupParams g{ids.data(), T, K, E, offsets.data(), rows.data(), slot_of.data()};
    ops::Backend& be = *backends().one;
    r.router_w = {GgmlType::F32, n_in, E + 1, uint64_t(n_in) * sizeof(float), wf.data()};  // E + 1 rows
    EXPECT_THROW(be.moe_route_group(r, g), Error);
    r.router_w.n_out = E;
    r.router_x_stride = n_in - 1;  // rows overlap
    EXPECT_THROW(be.moe_route_group(r, g), Error);
    r.router_x_stride = 0;
    r.router_w = {};  // an input without a weight
    EXPECT_THROW(be.moe_route_group(r, g), Error);
    r.router_w = {GgmlType::F32, n_in, E, uint64_t(n_in) * sizeof(float), wf.data()};
    EXPECT_THROW(be.moe_route(r), Error);
    EXPECT_NO_THROW(be.moe_route_group(r, g));
}

// moe_matmul's GEGLU epilogue (ops/moe.h) is the plain product into the scratch,
// then the GEGLU op: the same bits (gathered rows, an empty expert, a padded y),
// and y is gelu_tanh of the gate rows [0, F) times the up rows [F, 2F).
TEST(MoeMatmul, GegluEpilogueIsProductThenGeglu) {
    const int64_t E = 3, F = 5, H = 7, T = 4, ys = F + 2;
    const std::vector<int32_t> off = {0, 3, 3, 6};  // expert 1 has no rows
    const std::vector<int32_t> rows = {2, 0, 2, 1, 3, 0};
    const int64_t n = 6;
    const auto w = randn(size_t(E * 2 * F * H), 3, 0.3f);
    const auto x = randn(size_t(T * H), 4);
    ops::MoeMatmulParams m;
    m.w = {GgmlType::F32, H, 2 * F, uint64_t(H) * sizeof(float), w.data()};
    m.expert_bytes = uint64_t(2 * F * H) * sizeof(float);
    m.n_experts = E;
    m.offsets = off.data();
    m.host_offsets = off.data();
    m.x_rows = rows.data();
    m.x_n_rows = T;
    m.x = x.data();
    m.n_rows = n;
    std::vector<float> prod(size_t(n * 2 * F));
    m.y = prod.data();
    backends().one->moe_matmul(m);
    std::vector<float> ref(size_t(n * ys), 9.0f);
    ops::GegluParams g;
    g.gate = prod.data();
    g.up = prod.data() + F;
    g.out = ref.data();
    g.rows = n;
    g.n = F;
    g.gate_stride = g.up_stride = 2 * F;
    g.out_stride = ys;
    backends().one->geglu(g);

    const auto got = run_both(std::vector<float>(size_t(n * ys), 9.0f), [&](ops::Backend& be, float* y) {
        std::vector<float> scratch(size_t(n * 2 * F));
        ops::MoeMatmulParams q = m;
        q.geglu = true;
        q.geglu_scratch = scratch.data();
        q.y = y;
        q.y_stride = ys;
        be.moe_matmul(q);
    });
    EXPECT_TRUE(bitwise_equal(got, ref));

    // The meaning, in double: expert e of row r, gate row j, up row F + j.
    for (int64_t e = 0; e < E; ++e)
        for (int64_t r = off[size_t(e)]; r < off[size_t(e + 1)]; ++r)
            for (int64_t j = 0; j < ys; ++j) {
                const float v = got[size_t(r * ys + j)];
                if (j >= F) {
                    EXPECT_EQ(v, 9.0f) << "padding";
                    continue;
                }
                double gate = 0, up = 0;
                for (int64_t i = 0; i < H; ++i) {
                    const double xi = x[size_t(rows[size_t(r)] * H + i)];
                    gate += xi * w[size_t(((e * 2 * F) + j) * H + i)];
                    up += xi * w[size_t(((e * 2 * F) + F + j) * H + i)];
                }
                const double gl = 0.5 * gate * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (gate + 0.044715 * gate * gate * gate)));
                EXPECT_NEAR(v, gl * up, 1e-5 * (1.0 + std::abs(gl * up))) << "row " << r << " output " << j;
            }
}

TEST(Gather, GatherRowsAndScatterAddInOrder) {
    const int64_t n = 300, n_src = 6;
    const auto src = randn(size_t(n_src * n), 1);
    const std::vector<int32_t> rows = {5, 0, 5, 2, 3};
    auto g =
        run_both(std::vector<float>(rows.size() * size_t(n)), [&](ops::Backend& be, float* dst) {
            ops::GatherRowsParams p;
            p.src = src.data();
            p.dst = dst;
            p.rows = rows.data();
            p.n_rows = int64_t(rows.size());
            p.n = n;
            be.gather_rows(p);
        });
    for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t j = 0; j < n; ++j)
            ASSERT_EQ(g[i * size_t(n) + size_t(j)], src[size_t(rows[i] * n + j)]);

    // Scatter back with repeated destination rows: the result must equal adding in
    // increasing i in f32, bit for bit.
    const std::vector<float> w = {0.5f, -1.25f, 3.0f, 0.125f, 2.0f};
    const auto base = randn(size_t(n_src * n), 2);
    auto got = run_both(base, [&](ops::Backend& be, float* dst) {
        ops::ScatterAddParams p;
        p.src = g.data();
        p.dst = dst;
        p.rows = rows.data();
        p.weights = w.data();
        p.n_rows = int64_t(rows.size());
        p.n = n;
        be.scatter_add(p);
    });
    std::vector<float> ref = base;
    for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t j = 0; j < n; ++j)
            ref[size_t(rows[i] * n + j)] += w[i] * g[i * size_t(n) + size_t(j)];
    EXPECT_TRUE(bitwise_equal(got, ref));
}

TEST(Gather, KvStoreAndCopyBlocks) {
    const int64_t row = 12, bs = 4, n_blocks = 5, hd = 4;  // three heads a row
    const std::vector<int32_t> table_a = {3, 1}, table_b = {0};
    const int32_t* tables[] = {table_a.data(), table_b.data(), table_a.data()};
    const std::vector<int32_t> pos = {5, 2, 0};
    const auto k = randn(size_t(3 * row), 3), v = randn(size_t(3 * row), 4);
    std::vector<float> k_pool(size_t(n_blocks * bs * row), 0.0f), v_pool = k_pool;
    ops::KvStoreParams p;
    p.k = k.data();
    p.v = v.data();
    p.k_pool = k_pool.data();
    p.v_pool = v_pool.data();
    p.row = row;
    p.block_size = bs;
    p.pos = pos.data();
    p.tables = tables;
    p.n_tokens = 3;
    p.head_dim = hd;
    backends().three->kv_store(p);
    const int64_t blocks[] = {1, 0, 3}, slots[] = {1, 2, 0};
    for (int t = 0; t < 3; ++t)
        for (int64_t i = 0; i < row; ++i) {
            const auto at = size_t(ops::kv_value_index(blocks[t], slots[t], i, bs, row, hd));
            ASSERT_EQ(k_pool[at], k[size_t(t * row + i)]);
            ASSERT_EQ(v_pool[at], v[size_t(t * row + i)]);
        }
    const std::vector<int32_t> released = {-1, 1};
    tables[2] = released.data();
    EXPECT_THROW(backends().one->kv_store(p), Error);

    const std::vector<int32_t> src = {1, 3}, dst = {4, 2};
    auto copied = run_both(k_pool, [&](ops::Backend& be, float* pool) {
        ops::CopyBlocksParams c;
        c.pool = pool;
        c.block_bytes = bs * row * int64_t{sizeof(float)};
        c.src = src.data();
        c.dst = dst.data();
        c.n = 2;
        be.copy_blocks(c);
    });
    for (size_t i = 0; i < src.size(); ++i)
        for (int64_t j = 0; j < bs * row; ++j)
            ASSERT_EQ(copied[size_t(dst[i] * bs * row + j)], k_pool[size_t(src[i] * bs * row + j)]);
}

// kv_store of two tokens (positions 3 and 0 of the table {2, 0}; blocks of 2 slots,
// rows of 8 values, two heads of 4) by three threads into zeroed pools of element type E
// (KvType t): every stored element must be round(value). Returns the K and V pools.
constexpr int64_t kStoreRow = 8, kStoreBs = 2, kStoreBlocks = 3, kStoreHd = 4;
constexpr int64_t kStoreBlock[] = {0, 2}, kStoreSlot[] = {1, 0};  // of tokens 0 and 1
// Index of value i of token t's row in the pools of store_two_tokens.
size_t stored_at(int t, int64_t i) {
    return size_t(ops::kv_value_index(kStoreBlock[t], kStoreSlot[t], i, kStoreBs, kStoreRow, kStoreHd));
}
template <class E, class Round>
std::pair<std::vector<E>, std::vector<E>> store_two_tokens(ops::KvType t, const std::vector<float>& k,
                                                           const std::vector<float>& v, Round round) {
    const std::vector<int32_t> table = {2, 0};
    const int32_t* tables[] = {table.data(), table.data()};
    const std::vector<int32_t> pos = {3, 0};
    std::vector<E> k_pool(size_t(kStoreBlocks * kStoreBs * kStoreRow), E{0}), v_pool = k_pool;
    ops::KvStoreParams p;
    p.k = k.data();
    p.v = v.data();
    p.k_pool = k_pool.data();
    p.v_pool = v_pool.data();
    p.kv_type = t;
    p.row = kStoreRow;
    p.block_size = kStoreBs;
    p.pos = pos.data();
    p.tables = tables;
    p.n_tokens = 2;
    p.head_dim = kStoreHd;
    backends().three->kv_store(p);
    for (int t2 = 0; t2 < 2; ++t2)
        for (int64_t i = 0; i < kStoreRow; ++i) {
            EXPECT_EQ(k_pool[stored_at(t2, i)], round(k[size_t(t2 * kStoreRow + i)]));
            EXPECT_EQ(v_pool[stored_at(t2, i)], round(v[size_t(t2 * kStoreRow + i)]));
        }
    return {std::move(k_pool), std::move(v_pool)};
}

// An f16 cache: each value rounded to nearest even (quant::fp32_to_fp16, ggml's
// rounding), including values that overflow the half range (to inf) and underflow
// it (to subnormals and zero); block copies move the 2-byte values unchanged.
// kPreviousArgmax's op: host ids where from < 0, else the previous step's id, an id
// outside [0, n_vocab) (argmax error codes) replaced by 0.
TEST(Gather, FeedTokensTakesThePreviousIds) {
    const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10};
    const std::vector<int32_t> from = {-1, 2, 0, 1, 3, -1};
    const std::vector<int32_t> ids = {42, -1, 99, 100};  // -1: kArgmaxNaN-like; 100 = n_vocab
    std::vector<int32_t> out(6, -7);
    backends().one->feed_tokens({tokens.data(), from.data(), ids.data(), out.data(), 6, 100});
    EXPECT_EQ(out, (std::vector<int32_t>{5, 99, 42, 0, 0, 10}));
    backends().one->feed_tokens({tokens.data(), from.data(), ids.data(), out.data(), 0, 100});  // nothing
    EXPECT_EQ(out[0], 5);
}

TEST(Gather, KvStoreF16RoundsEachValue) {
    const int64_t row = kStoreRow, bs = kStoreBs;
    std::vector<float> k = randn(size_t(2 * row), 5), v = randn(size_t(2 * row), 6);
    k[1] = 70000.0f;   // above the largest half: inf
    k[2] = 1e-6f;      // a subnormal half
    k[3] = -1e-9f;     // rounds to -0
    v[4] = 65519.0f;   // rounds down to the largest half, 65504
    v[5] = 1.00048828125f;  // 1 + 2^-11, halfway between 1 and the next half: to even (1.0)
    auto [k_pool, v_pool] = store_two_tokens<uint16_t>(ops::KvType::f16, k, v, quant::fp32_to_fp16);
    EXPECT_EQ(k_pool[stored_at(0, 1)], 0x7C00u);
    EXPECT_EQ(k_pool[stored_at(0, 3)], 0x8000u);
    EXPECT_EQ(v_pool[stored_at(0, 4)], 0x7BFFu);
    EXPECT_EQ(v_pool[stored_at(0, 5)], 0x3C00u);

    ops::CopyBlocksParams c;
    c.pool = k_pool.data();
    c.block_bytes = bs * row * 2;
    const std::vector<int32_t> src = {2}, dst = {1};
    c.src = src.data();
    c.dst = dst.data();
    c.n = 1;
    backends().one->copy_blocks(c);
    for (int64_t j = 0; j < bs * row; ++j) ASSERT_EQ(k_pool[size_t(1 * bs * row + j)], k_pool[size_t(2 * bs * row + j)]);
}

// An e4m3 cache: each value rounded to nearest even and saturated to ±448
// (quant::fp32_to_e4m3).
TEST(Gather, KvStoreE4m3RoundsEachValue) {
    const int64_t row = kStoreRow;
    std::vector<float> k = randn(size_t(2 * row), 7), v = randn(size_t(2 * row), 8);
    k[1] = 1000.0f;   // above 448: saturates
    k[2] = 0.0025f;   // a subnormal (steps of 2^-9)
    k[3] = -1e-9f;    // rounds to -0
    v[5] = 1.0625f;   // halfway between 1 and 1.125: to even (1.0)
    auto [k_pool, v_pool] = store_two_tokens<uint8_t>(ops::KvType::e4m3, k, v, quant::fp32_to_e4m3);
    EXPECT_EQ(k_pool[stored_at(0, 1)], 0x7Eu);
    EXPECT_EQ(k_pool[stored_at(0, 2)], 0x01u);
    EXPECT_EQ(k_pool[stored_at(0, 3)], 0x80u);
    EXPECT_EQ(v_pool[stored_at(0, 5)], 0x38u);
}

// An i8 cache: rows of 8 values as two heads of 4, each head's codes and scale as
// quant::quantize_row_i8 gives them (a zero head: scale 0, zero codes); block copies
// of the codes and of the scales move them unchanged.
TEST(Gather, KvStoreI8StoresCodesAndAScalePerHead) {
    constexpr int64_t hd = kStoreHd, heads = kStoreRow / hd;
    std::vector<float> k = randn(size_t(2 * kStoreRow), 9), v = randn(size_t(2 * kStoreRow), 10);
    for (int64_t i = 0; i < hd; ++i) v[size_t(kStoreRow + hd + i)] = 0.0f;  // token 1, head 1
    const std::vector<int32_t> table = {2, 0};
    const int32_t* tables[] = {table.data(), table.data()};
    const std::vector<int32_t> pos = {3, 0};
    const size_t rows = size_t(kStoreBlocks * kStoreBs * heads);
    std::vector<int8_t> k_pool(rows * hd, 0), v_pool = k_pool;
    std::vector<float> k_scale(rows, -1.0f), v_scale = k_scale;
    ops::KvStoreParams p;
    p.k = k.data();
    p.v = v.data();
    p.k_pool = k_pool.data();
    p.v_pool = v_pool.data();
    p.kv_type = ops::KvType::i8;
    p.row = kStoreRow;
    p.block_size = kStoreBs;
    p.pos = pos.data();
    p.tables = tables;
    p.n_tokens = 2;
    p.head_dim = hd;
    p.k_scale = k_scale.data();
    p.v_scale = v_scale.data();
    backends().three->kv_store(p);
    for (int t = 0; t < 2; ++t)
        for (int64_t h = 0; h < heads; ++h) {
            const size_t r = size_t(ops::kv_scale_index(kStoreBlock[t], kStoreSlot[t], h, kStoreBs, heads));
            for (int kv = 0; kv < 2; ++kv) {
                const std::vector<float>& x = kv ? v : k;
                int8_t want[hd];
                const float d = quant::quantize_row_i8(x.data() + (t * kStoreRow + h * hd), want, hd);
                EXPECT_EQ((kv ? v_scale : k_scale)[r], d) << t << " " << h;
                for (int64_t i = 0; i < hd; ++i)
                    EXPECT_EQ((kv ? v_pool : k_pool)[stored_at(t, h * hd + i)], want[i]);
            }
        }
    EXPECT_EQ(v_scale[size_t(ops::kv_scale_index(kStoreBlock[1], kStoreSlot[1], 1, kStoreBs, heads))], 0.0f);
    EXPECT_EQ(k_scale[0], -1.0f);  // an untouched row

    ops::CopyBlocksParams c;
    const std::vector<int32_t> src = {2}, dst = {1};
    c.src = src.data();
    c.dst = dst.data();
    c.n = 1;
    c.pool = k_scale.data();
    c.block_bytes = kStoreBs * heads * 4;
    backends().one->copy_blocks(c);
    for (int64_t j = 0; j < kStoreBs * heads; ++j)
        ASSERT_EQ(k_scale[size_t(1 * kStoreBs * heads + j)], k_scale[size_t(2 * kStoreBs * heads + j)]);
}

TEST(ZeroSized, CallsWithNothingToDoTouchNothing) {
    // Every pointer is null: any access would crash under the sanitizers.
    for (ops::Backend* be : {backends().one.get(), backends().three.get()}) {
        ops::GegluParams g;
        g.n = 4;
        be->geglu(g);
        ops::GetRowsParams r;
        be->get_rows(r);
        ops::GatherRowsParams gr;
        gr.n = 4;
        be->gather_rows(gr);
        ops::ScatterAddParams sa;
        sa.n = 4;
        be->scatter_add(sa);
        ops::KvStoreParams kv;
        kv.row = 4;
        kv.block_size = 16;
        be->kv_store(kv);
        ops::CopyBlocksParams cb;
        cb.block_bytes = 256;
        be->copy_blocks(cb);
        be->add(nullptr, nullptr, nullptr, 0);
        be->softcap(nullptr, 30.0f, 0);
    }
}

}  // namespace
}  // namespace hf2q::ops_test
