// ModelLoadOptions::batch_copy: when the automatic policy makes the BF16 copies, and
// what a context reports about the copies it reads.
#include <gtest/gtest.h>

#include <cstdint>

#include "model/fixture.h"
#include "models/gemma4/weights.h"
#include "runtime/backend_factory.h"

namespace hf2q::test {
namespace {

constexpr uint64_t kGB = uint64_t{1} << 30;

// At most a quarter of the memory free after the weights, and never on a backend
// without device memory (free 0) or for nothing.
TEST(WeightCopies, AutomaticTakesAtMostAQuarterOfFreeMemory) {
    EXPECT_TRUE(gemma4::auto_batch_copy(5 * kGB, 120 * kGB));    // the 26B-A4B on an H200
    EXPECT_TRUE(gemma4::auto_batch_copy(5 * kGB, 60 * kGB));     // ... on an H100
    EXPECT_FALSE(gemma4::auto_batch_copy(60 * kGB, 120 * kGB));  // the 31B
    EXPECT_TRUE(gemma4::auto_batch_copy(30 * kGB, 120 * kGB));   // exactly a quarter
    EXPECT_FALSE(gemma4::auto_batch_copy(30 * kGB + 1, 120 * kGB));
    EXPECT_FALSE(gemma4::auto_batch_copy(1, 0));  // host backends report no free device memory
    EXPECT_FALSE(gemma4::auto_batch_copy(0, 120 * kGB));
    EXPECT_FALSE(gemma4::auto_batch_copy(UINT64_MAX, UINT64_MAX));
}

// The CPU reads the file's blocks: no copies whatever the options ask.
TEST(WeightCopies, CpuContextsReportNone) {
    const Fixture* fx = fixture("moe");
    ContextOptions co = small_context(1);
    co.backend = BackendKind::cpu;
    EXPECT_EQ(Context::create(*fx->model, co)->weight_copy_bytes(), 0u);
}

// A CUDA context with the default options (the head copy; the automatic batch copies,
// which a tiny model always gets): the copies take device memory and the context says
// how much.
TEST(WeightCopies, CudaContextsReportTheirCopies) {
    if (!runtime::cuda_available()) GTEST_SKIP() << "no CUDA device";
    const Fixture* fx = fixture("moe");
    ContextOptions co = small_context(1);
    co.backend = BackendKind::cuda;
    EXPECT_GT(Context::create(*fx->model, co)->weight_copy_bytes(), 0u);
}

}  // namespace
}  // namespace hf2q::test
