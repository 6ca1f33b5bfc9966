// argmax_rows (ops/sampling.h) on the CPU reference: every row kind of
// argmax_rows_util.h over odd and aligned lengths and row strides, against the
// contract and against runtime::argmax (the greedy sampler the op stands in for);
// 1 and 3 threads give the same ids; bad parameters are errors.
#include "runtime/sampling.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "argmax_rows_util.h"
#include "topk_rows_util.h"
#include "core/error.h"
#include "ops_test_util.h"

namespace hf2q::ops_test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int32_t kUntouched = 0x5eed;

// runtime::argmax's answer as an argmax_rows code: its errors become the codes.
int32_t sampler_argmax(const float* x, int64_t n) {
    try {
        return runtime::argmax(x, n);
    } catch (const Error& e) {
        const std::string m = e.what();
        if (m.find("NaN") != std::string::npos) return ops::kArgmaxNaN;
        if (m.find("+inf") != std::string::npos) return ops::kArgmaxPosInf;
        if (m.find("all banned") != std::string::npos) return ops::kArgmaxAllNegInf;
        throw;
    }
}

// `rows` rows, kind r % count, at `stride` floats (0: n); the gaps between rows hold
// NaN and +inf, which a read past a row's n values would pick up.
std::vector<float> make_rows(int64_t rows, int64_t n, int64_t stride, uint64_t seed) {
    const int64_t s = stride ? stride : n;
    std::vector<float> x(static_cast<size_t>(rows * s), std::numeric_limits<float>::quiet_NaN());
    for (int64_t r = 0; r < rows; ++r) {
        float* row = x.data() + r * s;
        if (s > n) row[n] = kInf;
        fill_row(row, n, static_cast<RowKind>(r % static_cast<int64_t>(RowKind::count)),
                 seed + uint64_t(r));
    }
    return x;
}

// Runs the op on the 1- and 3-thread backends (the same ids expected) into an output
// one longer than `rows`, whose last entry must stay untouched.
std::vector<int32_t> run_argmax(const std::vector<float>& x, int64_t rows, int64_t n,
                                int64_t stride) {
    std::vector<int32_t> got[2];
    ops::Backend* bes[2] = {backends().one.get(), backends().three.get()};
    for (int i = 0; i < 2; ++i) {
        got[i].assign(static_cast<size_t>(rows + 1), kUntouched);
        ops::ArgmaxRowsParams p;
        p.x = x.data();
        p.stride = stride;
        p.out = got[i].data();
        p.rows = rows;
        p.n = n;
        bes[i]->argmax_rows(p);
        EXPECT_EQ(got[i].back(), kUntouched) << "wrote past the last row";
        got[i].pop_back();
    }
    EXPECT_EQ(got[0], got[1]) << "1-thread and 3-thread results differ";
    return got[0];
}

void check_grid(int64_t n, int64_t stride, int64_t rows, uint64_t seed) {
    const auto x = make_rows(rows, n, stride, seed);
    const auto got = run_argmax(x, rows, n, stride);
    const int64_t s = stride ? stride : n;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x.data() + r * s;
        const auto kind = r % static_cast<int64_t>(RowKind::count);
        ASSERT_EQ(got[size_t(r)], expected_argmax(row, n))
            << "n=" << n << " stride=" << stride << " row " << r << " kind " << kind;
        ASSERT_EQ(got[size_t(r)], sampler_argmax(row, n))
            << "n=" << n << " row " << r << " kind " << kind;
    }
}

}  // namespace

TEST(ArgmaxRows, EveryRowKindMatchesContractAndSampler) {
    const int64_t kinds = static_cast<int64_t>(RowKind::count);
    for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 31, 33, 1000, 4097}) {
        for (int64_t stride : {int64_t{0}, n, n + 1, n + 3})
            check_grid(n, stride, 2 * kinds, uint64_t(n * 131 + stride));
    }
}

TEST(ArgmaxRows, FullVocabularyRows) {
    check_grid(262144, 0, static_cast<int64_t>(RowKind::count), 7);
    check_grid(262147, 262151, 3, 8);
}

// The answers are known without any reference: lowest index of the maximum.
TEST(ArgmaxRows, HandWrittenRows) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<std::vector<float>> rows = {
        {3, 1, 3, 2},      {-kInf, -2, -kInf, -2}, {-kInf, -kInf, -kInf, -kInf},
        {1, kInf, 2, nan}, {kInf, 0, 0, 0},        {-0.0f, 0.0f, -1, -1},
        {-5, -4, -3, -3},
    };
    const std::vector<int32_t> want = {
        0, 1, ops::kArgmaxAllNegInf, ops::kArgmaxNaN, ops::kArgmaxPosInf, 0, 2};
    std::vector<float> x;
    for (const auto& r : rows) x.insert(x.end(), r.begin(), r.end());
    EXPECT_EQ(run_argmax(x, int64_t(rows.size()), 4, 0), want);
    // n = 1: the single value, whatever it is (other than the error cases).
    const std::vector<float> single = {-3.0f, 0.0f, -kInf, 7.0f};
    EXPECT_EQ(run_argmax(single, 4, 1, 1), (std::vector<int32_t>{0, 0, ops::kArgmaxAllNegInf, 0}));
}

TEST(ArgmaxRows, ZeroRowsIsNoop) {
    ops::ArgmaxRowsParams p;  // null buffers, n 0: nothing is checked or touched
    backends().three->argmax_rows(p);
    p.n = 262144;
    backends().one->argmax_rows(p);
}

TEST(ArgmaxRows, BadParamsAreErrors) {
    std::vector<float> x(64, 1.0f);
    std::vector<int32_t> out(8);
    auto good = [&] {
        ops::ArgmaxRowsParams p;
        p.x = x.data();
        p.out = out.data();
        p.rows = 2;
        p.n = 16;
        return p;
    };
    auto expect_error = [&](ops::ArgmaxRowsParams p, const char* what) {
        EXPECT_THROW(backends().three->argmax_rows(p), Error) << what;
    };
    EXPECT_NO_THROW(backends().three->argmax_rows(good()));
    auto p = good();
    p.rows = -1;
    expect_error(p, "negative rows");
    p = good();
    p.n = 0;
    expect_error(p, "n = 0");
    p.n = int64_t{1} << 31;
    expect_error(p, "n = 2^31");
    p = good();
    p.stride = 15;
    expect_error(p, "stride < n");
    p.stride = -16;
    expect_error(p, "negative stride");
    p = good();
    p.stride = std::numeric_limits<int64_t>::max() / 2;
    p.rows = 4;
    expect_error(p, "rows × stride overflows");
    p = good();
    p.x = nullptr;
    expect_error(p, "null input");
    p = good();
    p.out = nullptr;
    expect_error(p, "null output");
    p = good();
    p.x = reinterpret_cast<const float*>(reinterpret_cast<const char*>(x.data()) + 2);
    expect_error(p, "misaligned input");
}

}  // namespace hf2q::ops_test

// ---- topk_rows ----------------------------------------------------------------------

namespace hf2q::ops_test {
namespace {

// Runs topk_rows on the 1- and 3-thread backends (the same results expected).
struct TopkOut {
    std::vector<int32_t> ids, status;
    std::vector<float> values;
};
TopkOut run_topk(const std::vector<float>& x, int64_t rows, int64_t n, int64_t stride, int32_t k) {
    TopkOut got[2];
    ops::Backend* bes[2] = {backends().one.get(), backends().three.get()};
    for (int i = 0; i < 2; ++i) {
        got[i].ids.assign(static_cast<size_t>(rows * k + 1), kUntouched);
        got[i].values.assign(static_cast<size_t>(rows * k + 1), 7.0f);
        got[i].status.assign(static_cast<size_t>(rows + 1), kUntouched);
        ops::TopkRowsParams p;
        p.x = x.data();
        p.stride = stride;
        p.rows = rows;
        p.n = n;
        p.k = k;
        p.ids = got[i].ids.data();
        p.values = got[i].values.data();
        p.status = got[i].status.data();
        bes[i]->topk_rows(p);
        EXPECT_EQ(got[i].ids.back(), kUntouched) << "wrote past the last row";
        EXPECT_EQ(got[i].values.back(), 7.0f) << "wrote past the last row";
        EXPECT_EQ(got[i].status.back(), kUntouched) << "wrote past the last row";
    }
    EXPECT_EQ(got[0].ids, got[1].ids) << "1-thread and 3-thread results differ";
    EXPECT_EQ(got[0].status, got[1].status);
    return got[0];
}

// The sampler's own top-k stage on the same row, its errors as codes.
TopkRow sampler_topk(const float* x, int64_t n, int32_t k) {
    TopkRow r;
    runtime::Candidates c;
    try {
        runtime::init_candidates_top_k(x, n, k, c);
    } catch (const Error& e) {
        const std::string m = e.what();
        r.status = m.find("NaN") != std::string::npos    ? ops::kArgmaxNaN
                   : m.find("+inf") != std::string::npos ? ops::kArgmaxPosInf
                                                         : ops::kArgmaxAllNegInf;
        return r;
    }
    r.status = static_cast<int32_t>(c.data.size());
    for (int32_t t = 0; t < k; ++t) {
        const bool ok = static_cast<size_t>(t) < c.data.size();
        r.ids.push_back(ok ? c.data[static_cast<size_t>(t)].id : -1);
        r.values.push_back(ok ? c.data[static_cast<size_t>(t)].logit : -kInf);
    }
    return r;
}

void check_topk_grid(int64_t n, int64_t stride, int64_t rows, int32_t k, uint64_t seed) {
    const auto x = make_rows(rows, n, stride, seed);
    const TopkOut got = run_topk(x, rows, n, stride, k);
    const int64_t s = stride ? stride : n;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x.data() + r * s;
        const int32_t* ids = got.ids.data() + r * k;
        const float* values = got.values.data() + r * k;
        const int32_t st = got.status[size_t(r)];
        const std::string where = "n=" + std::to_string(n) + " stride=" + std::to_string(stride) +
                                  " k=" + std::to_string(k) + " row " + std::to_string(r) + " kind " +
                                  std::to_string(r % static_cast<int64_t>(RowKind::count));
        ASSERT_TRUE(same_topk(expected_topk(row, n, k), ids, values, st, k)) << where;
        const TopkRow sampler = sampler_topk(row, n, k);
        // Both fail on the same rows (the sampler names the first bad value it meets,
        // the op a NaN before +inf) and agree on the rest.
        ASSERT_EQ(st < 0, sampler.status < 0) << where;
        if (st > 0) {
            ASSERT_EQ(st, sampler.status) << where;
            ASSERT_EQ(std::vector<int32_t>(ids, ids + k), sampler.ids) << where;
        }
    }
}

}  // namespace

// Every row kind (ties, signed zeros, -inf, NaN, +inf, subnormals) at lengths below,
// at and above k, with row strides, for k = 1 .. 256: the full-sort answer and the
// sampler's own top-k stage, whose candidates the op stands in for.
TEST(TopkRows, EveryRowKindMatchesContractAndSampler) {
    const int64_t kinds = static_cast<int64_t>(RowKind::count);
    for (int32_t k : {1, 2, 5, 40, 64, 256}) {
        for (int64_t n : {1, 3, 8, 33, 300, 4097}) {
            for (int64_t stride : {int64_t{0}, n + 3})
                check_topk_grid(n, stride, 2 * kinds, k, uint64_t(n * 131 + stride + k));
        }
    }
}

TEST(TopkRows, FullVocabularyRows) {
    for (int32_t k : {64, 256}) check_topk_grid(262144, 0, static_cast<int64_t>(RowKind::count), k, 9);
}

// The answers are known without any reference.
TEST(TopkRows, HandWrittenRows) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> x = {3, 1, 3, 2, /**/ -kInf, -2, -kInf, -2, /**/ 1, kInf, 2, nan, /**/ -0.0f, 0.0f, -1, 5};
    const TopkOut got = run_topk(x, 4, 4, 0, 3);
    EXPECT_EQ(got.status, (std::vector<int32_t>{3, 2, ops::kArgmaxNaN, 3, kUntouched}));
    EXPECT_EQ(std::vector<int32_t>(got.ids.begin(), got.ids.begin() + 6), (std::vector<int32_t>{0, 2, 3, 1, 3, -1}));
    EXPECT_EQ(got.values[5], -kInf);
    EXPECT_EQ(std::vector<int32_t>(got.ids.begin() + 9, got.ids.begin() + 12), (std::vector<int32_t>{3, 0, 1}));
    EXPECT_TRUE(std::signbit(got.values[10])) << "-0.0 at index 0 ties +0.0 and comes first, as itself";
}

TEST(TopkRows, ZeroRowsAndBadParams) {
    ops::TopkRowsParams none;  // rows 0: nothing is checked or touched
    backends().three->topk_rows(none);
    std::vector<float> x(64, 1.0f), values(64);
    std::vector<int32_t> ids(64), status(4);
    auto good = [&] {
        ops::TopkRowsParams p;
        p.x = x.data();
        p.rows = 2;
        p.n = 16;
        p.k = 4;
        p.ids = ids.data();
        p.values = values.data();
        p.status = status.data();
        return p;
    };
    EXPECT_NO_THROW(backends().three->topk_rows(good()));
    auto bad = [&](auto change, const char* what) {
        ops::TopkRowsParams p = good();
        change(p);
        EXPECT_THROW(backends().three->topk_rows(p), Error) << what;
    };
    bad([](auto& p) { p.k = 0; }, "k 0");
    bad([](auto& p) { p.k = ops::kTopkMax + 1; }, "k past the bound");
    bad([](auto& p) { p.n = 0; }, "n 0");
    bad([](auto& p) { p.rows = -1; }, "negative rows");
    bad([](auto& p) { p.stride = 8; }, "stride below n");
    bad([](auto& p) { p.status = nullptr; }, "null status");
    bad([](auto& p) { p.ids = nullptr; }, "null ids");
}

}  // namespace hf2q::ops_test
