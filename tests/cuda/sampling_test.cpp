// CUDA argmax_rows and topk_rows (src/backends/cuda/sampling.cu) against the CPU
// reference and the
// documented contract (ops/sampling.h) over a grid of row lengths (1 to 262,147, odd
// and multiples of 4), row strides (packed, odd, 16-byte aligned) and start offsets
// (rows starting off a 16-byte boundary exercise the kernel's scalar head), with every
// row kind of tests/ops/argmax_rows_util.h; more rows than one grid holds; rows = 0;
// bad parameters. Gaps between rows hold NaN and +inf, so a read past a row's n values
// changes the answer; the output has a sentinel after the last row. A perf mode
// (DISABLED_Perf, --gtest_also_run_disabled_tests) times the decode shapes.
// SKIPPED without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "ops/argmax_rows_util.h"
#include "ops/topk_rows_util.h"
#include "runtime/backend_factory.h"

using namespace hf2q;
using hf2q::ops_test::RowKind;

namespace {

constexpr int32_t kUntouched = 0x5eed;
constexpr int64_t kKinds = static_cast<int64_t>(RowKind::count);

// `rows` rows at `stride` floats starting `offset` floats into the buffer; row r is of
// kind r % count. Everything outside the rows is NaN, the float after each row +inf.
struct Rows {
    int64_t rows, n, stride, offset;
    std::vector<float> buf;
    const float* row(int64_t r) const { return buf.data() + offset + r * stride; }
};

Rows make_rows(int64_t rows, int64_t n, int64_t stride, int64_t offset, uint64_t seed) {
    Rows x{rows, n, stride, offset, {}};
    x.buf.assign(static_cast<size_t>(offset + rows * stride + 1),
                 std::numeric_limits<float>::quiet_NaN());
    for (int64_t r = 0; r < rows; ++r) {
        float* row = x.buf.data() + offset + r * stride;
        row[n] = std::numeric_limits<float>::infinity();
        ops_test::fill_row(row, n, static_cast<RowKind>(r % kKinds),
                           seed + static_cast<uint64_t>(r));
    }
    return x;
}

class CudaSampling : public ::testing::Test {
  protected:
    void SetUp() override {
        if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
        gpu = runtime::make_backend(BackendKind::cuda, 0);
        cpu = cpu::make_backend(2);
    }

    ops::ArgmaxRowsParams params(const float* x, int32_t* out, const Rows& r) const {
        ops::ArgmaxRowsParams p;
        p.x = x + r.offset;
        p.stride = r.stride;
        p.out = out;
        p.rows = r.rows;
        p.n = r.n;
        return p;
    }

    // The CPU reference's ids for `x`; checks them against the contract first.
    std::vector<int32_t> reference(const Rows& x) const {
        std::vector<int32_t> ref(static_cast<size_t>(x.rows));
        cpu->argmax_rows(params(x.buf.data(), ref.data(), x));
        for (int64_t r = 0; r < x.rows; ++r)
            EXPECT_EQ(ref[size_t(r)], ops_test::expected_argmax(x.row(r), x.n))
                << "CPU reference, row " << r;
        return ref;
    }

    // The device's ids for `x` (output with a sentinel after the last row).
    std::vector<int32_t> on_device(const Rows& x) {
        float* dx = gpu->alloc_array<float>(x.buf.size());
        gpu->upload(dx, x.buf.data(), x.buf.size() * sizeof(float));
        std::vector<int32_t> got(static_cast<size_t>(x.rows + 1), kUntouched);
        int32_t* dout = gpu->alloc_array<int32_t>(got.size());
        gpu->upload(dout, got.data(), got.size() * sizeof(int32_t));
        gpu->argmax_rows(params(dx, dout, x));
        gpu->download(got.data(), dout, got.size() * sizeof(int32_t));
        EXPECT_EQ(got.back(), kUntouched) << "wrote past the last row";
        got.pop_back();
        return got;
    }

    void check(int64_t rows, int64_t n, int64_t stride, int64_t offset, uint64_t seed) {
        const Rows x = make_rows(rows, n, stride, offset, seed);
        const auto ref = reference(x);
        const auto got = on_device(x);
        int bad = 0;
        for (int64_t r = 0; r < rows && bad < 5; ++r)
            if (got[size_t(r)] != ref[size_t(r)]) {
                ++bad;
                ADD_FAILURE() << "n=" << n << " stride=" << stride << " offset=" << offset
                              << " row " << r << " (kind " << r % kKinds << "): device "
                              << got[size_t(r)] << ", reference " << ref[size_t(r)];
            }
    }

    std::unique_ptr<ops::Backend> gpu, cpu;
};

}  // namespace

TEST_F(CudaSampling, ArgmaxRowsGrid) {
    for (int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 31, 32, 33, 127, 1000, 4095, 4097, 16385, 65536}) {
        const int64_t aligned = (n + 3) / 4 * 4 + 4;
        for (int64_t stride : {n, n + 1, n + 3, aligned})
            for (int64_t offset : {0, 1, 3})
                check(2 * kKinds, n, stride, offset, uint64_t(n * 7 + stride + offset));
    }
}

// Gemma 4's vocabulary: 64 rows (a batched decode step) of 262,144 and an odd length.
TEST_F(CudaSampling, ArgmaxRowsFullVocabulary) {
    for (int64_t n : {262144, 262147})
        for (int64_t stride : {n, n + 1})
            for (int64_t offset : {0, 2})
                check(64, n, stride, offset, uint64_t(n + stride + offset));
    check(1, 262144, 262144, 0, 99);
}

// A few long rows take the split kernel (several blocks a row, the last to finish
// reducing them, on per-row counters it must leave zeroed): every row kind, misaligned
// starts, rows longer than the split kernel's 256 blocks of 4,096 values, and the same
// rows again and again (stale counters would skip or garble a reduction).
TEST_F(CudaSampling, ArgmaxRowsSplitAcrossBlocks) {
    for (int64_t rows : {int64_t{1}, int64_t{2}, kKinds, int64_t{32}})
        for (int64_t n : {4097, 8192, 262144, 262147})
            for (int64_t offset : {0, 1}) check(rows, n, n + offset, offset, uint64_t(rows * n + offset));
    // 256 blocks of more than 4,096 values: 13 rows fit the 4,096 partials (26 would
    // take the one-block kernel).
    check(kKinds, (int64_t{1} << 20) + 4096 + 5, (int64_t{1} << 20) + 4096 + 7, 3, 11);
    const Rows x = make_rows(kKinds, 262144, 262145, 1, 12);
    const auto ref = reference(x);
    for (int rep = 0; rep < 5; ++rep) EXPECT_EQ(on_device(x), ref) << "repeat " << rep;
}

// More rows than the kernel's grid: blocks stride over rows.
TEST_F(CudaSampling, ArgmaxRowsManyRows) {
    check(70001, 33, 33, 0, 5);
    check(66000, 4, 5, 1, 6);
}

TEST_F(CudaSampling, ArgmaxRowsZeroRowsAndBadParams) {
    ops::ArgmaxRowsParams p;  // rows 0, null buffers: nothing is launched
    gpu->argmax_rows(p);
    gpu->synchronize();
    float* dx = gpu->alloc_array<float>(64);
    int32_t* dout = gpu->alloc_array<int32_t>(4);
    p.x = dx;
    p.out = dout;
    p.rows = 2;
    p.n = 16;
    EXPECT_NO_THROW(gpu->argmax_rows(p));
    p.stride = 8;
    EXPECT_THROW(gpu->argmax_rows(p), Error);
    p.stride = 0;
    p.n = 0;
    EXPECT_THROW(gpu->argmax_rows(p), Error);
    p.n = 16;
    p.x = reinterpret_cast<const float*>(reinterpret_cast<const char*>(dx) + 2);
    EXPECT_THROW(gpu->argmax_rows(p), Error);
    gpu->synchronize();
}

// topk_rows on the device: rows of every kind (ties, signed zeros, -inf, NaN, +inf,
// subnormals) at lengths within one block of 8,192 values (one launch), across two and
// three blocks, and Gemma 4's vocabulary (64 rows: a batched decode step), with strides
// and offsets, k from 1 to 256 (one, two or three levels); every entry and status
// against the contract (full sort) and the CPU reference. The outputs hold sentinels
// past the last row.
namespace {
void check_topk(ops::Backend& gpu, ops::Backend& cpu, int64_t rows, int64_t n, int64_t stride, int64_t offset,
                int32_t k, uint64_t seed) {
    const Rows x = make_rows(rows, n, stride, offset, seed);
    const size_t entries = static_cast<size_t>(rows * k);
    std::vector<int32_t> ids(entries + 1, kUntouched), status(static_cast<size_t>(rows) + 1, kUntouched);
    std::vector<float> values(entries + 1, 7.0f);
    float* dx = gpu.alloc_array<float>(x.buf.size());
    gpu.upload(dx, x.buf.data(), x.buf.size() * sizeof(float));
    int32_t* d_ids = gpu.alloc_array<int32_t>(ids.size());
    float* d_values = gpu.alloc_array<float>(values.size());
    int32_t* d_status = gpu.alloc_array<int32_t>(status.size());
    gpu.upload(d_ids, ids.data(), ids.size() * sizeof(int32_t));
    gpu.upload(d_values, values.data(), values.size() * sizeof(float));
    gpu.upload(d_status, status.data(), status.size() * sizeof(int32_t));
    const size_t scratch = gpu.topk_rows_scratch_bytes(rows, n);
    ops::TopkRowsParams p;
    p.x = dx + offset;
    p.stride = stride;
    p.rows = rows;
    p.n = n;
    p.k = k;
    p.ids = d_ids;
    p.values = d_values;
    p.status = d_status;
    p.scratch = scratch ? gpu.alloc(scratch) : nullptr;
    gpu.topk_rows(p);
    gpu.download(ids.data(), d_ids, ids.size() * sizeof(int32_t));
    gpu.download(values.data(), d_values, values.size() * sizeof(float));
    gpu.download(status.data(), d_status, status.size() * sizeof(int32_t));
    EXPECT_EQ(ids.back(), kUntouched) << "wrote past the last row";
    EXPECT_EQ(values.back(), 7.0f) << "wrote past the last row";
    EXPECT_EQ(status.back(), kUntouched) << "wrote past the last row";
    // The CPU reference on the same rows.
    std::vector<int32_t> ref_ids(entries), ref_status(static_cast<size_t>(rows));
    std::vector<float> ref_values(entries);
    ops::TopkRowsParams q = p;
    q.x = x.buf.data() + offset;
    q.ids = ref_ids.data();
    q.values = ref_values.data();
    q.status = ref_status.data();
    q.scratch = nullptr;
    cpu.topk_rows(q);
    int bad = 0;
    for (int64_t r = 0; r < rows && bad < 5; ++r) {
        const ops_test::TopkRow want = ops_test::expected_topk(x.row(r), n, k);
        const size_t o = static_cast<size_t>(r * k);
        const bool dev = ops_test::same_topk(want, ids.data() + o, values.data() + o, status[size_t(r)], k);
        const bool ref = ops_test::same_topk(want, ref_ids.data() + o, ref_values.data() + o, ref_status[size_t(r)], k);
        if (!dev || !ref) {
            ++bad;
            ADD_FAILURE() << "n=" << n << " stride=" << stride << " offset=" << offset << " k=" << k << " row " << r
                          << " (kind " << r % kKinds << "): device status " << status[size_t(r)] << " first id "
                          << ids[o] << ", CPU status " << ref_status[size_t(r)] << ", expected status " << want.status
                          << " first id " << want.ids[0] << (ref ? "" : " (the CPU reference is wrong too)");
        }
    }
    gpu.synchronize();
}
}  // namespace

TEST_F(CudaSampling, TopkRowsGrid) {
    for (int32_t k : {1, 2, 7, 64, 255, 256})
        for (int64_t n : {1, 3, 31, 256, 2049, 8191, 8192, 8193, 16385, 24577})
            for (int64_t offset : {0, 1})
                check_topk(*gpu, *cpu, 2 * kKinds, n, n + 3 * offset, offset, k, uint64_t(n * 5 + k + offset));
}

TEST_F(CudaSampling, TopkRowsFullVocabulary) {
    for (int32_t k : {1, 40, 64, 256}) check_topk(*gpu, *cpu, 64, 262144, 262144, 0, k, uint64_t(k));
    check_topk(*gpu, *cpu, 3, 262147, 262151, 1, 64, 3);
    check_topk(*gpu, *cpu, 2, 1 << 20, 1 << 20, 0, 256, 4);  // 128 blocks, then 4, then 1: three levels
    check_topk(*gpu, *cpu, 2, 1 << 20, 1 << 20, 0, 1, 5);    // 128 blocks, then 1
}

TEST_F(CudaSampling, TopkRowsZeroRowsAndBadParams) {
    ops::TopkRowsParams none;
    gpu->topk_rows(none);  // rows 0: nothing checked or launched
    ops::TopkRowsParams p;
    p.rows = 1;
    p.n = 16;
    p.k = 0;
    EXPECT_THROW(gpu->topk_rows(p), Error);
    gpu->synchronize();
}

// Decode shapes, device time per call over back-to-back launches.
TEST_F(CudaSampling, DISABLED_Perf) {
    for (int64_t rows : {1, 8, 64}) {
        const int64_t n = 262144;
        const Rows x = make_rows(rows, n, n, 0, 1);
        float* dx = gpu->alloc_array<float>(x.buf.size());
        gpu->upload(dx, x.buf.data(), x.buf.size() * sizeof(float));
        int32_t* dout = gpu->alloc_array<int32_t>(static_cast<size_t>(rows));
        ops::ArgmaxRowsParams p;
        p.x = dx;
        p.out = dout;
        p.rows = rows;
        p.n = n;
        for (int i = 0; i < 10; ++i) gpu->argmax_rows(p);
        gpu->synchronize();
        const int iters = 200;
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) gpu->argmax_rows(p);
        gpu->synchronize();
        const double us =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count() /
            iters;
        const double gbs = static_cast<double>(rows * n) * sizeof(float) / (us * 1e3);
        std::printf("[ perf ] argmax_rows %lld x %lld: %.1f us (%.0f GB/s)\n",
                    static_cast<long long>(rows), static_cast<long long>(n), us, gbs);
        for (int32_t k : {40, 64, 256}) {
            std::vector<int32_t> ids(static_cast<size_t>(rows * k)), status(static_cast<size_t>(rows));
            ops::TopkRowsParams t;
            t.x = dx;
            t.rows = rows;
            t.n = n;
            t.k = k;
            t.ids = gpu->alloc_array<int32_t>(ids.size());
            t.values = gpu->alloc_array<float>(ids.size());
            t.status = gpu->alloc_array<int32_t>(status.size());
            t.scratch = gpu->alloc(gpu->topk_rows_scratch_bytes(rows, n));
            for (int i = 0; i < 10; ++i) gpu->topk_rows(t);
            gpu->synchronize();
            const auto t1 = std::chrono::steady_clock::now();
            for (int i = 0; i < iters; ++i) gpu->topk_rows(t);
            gpu->synchronize();
            const double tus =
                std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count() / iters;
            std::printf("[ perf ] topk_rows %lld x %lld, k %d: %.1f us\n", static_cast<long long>(rows),
                        static_cast<long long>(n), k, tus);
        }
    }
}
