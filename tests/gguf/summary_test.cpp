// gguf/summary.h: statistics shown by `hf2q info`.
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "gguf/summary.h"
#include "gguf_test_util.h"

using namespace hf2q;
using namespace hf2q::gguf;

TEST(GgufSummary, FtypeNames) {
    EXPECT_EQ(llama_ftype_name(0), "ALL_F32");
    EXPECT_EQ(llama_ftype_name(1), "MOSTLY_F16");
    EXPECT_EQ(llama_ftype_name(7), "MOSTLY_Q8_0");
    EXPECT_EQ(llama_ftype_name(15), "MOSTLY_Q4_K_M");
    EXPECT_EQ(llama_ftype_name(32), "MOSTLY_BF16");
    EXPECT_EQ(llama_ftype_name(38), "MOSTLY_MXFP4_MOE");
    EXPECT_EQ(llama_ftype_name(40), "MOSTLY_Q1_0");
    EXPECT_EQ(llama_ftype_name(4), "unknown");
    EXPECT_EQ(llama_ftype_name(34), "unknown");
    EXPECT_EQ(llama_ftype_name(41), "unknown");
    EXPECT_EQ(llama_ftype_name(1024 + 18), "MOSTLY_Q6_K (guessed)");
}

TEST(GgufSummary, HumanUnits) {
    EXPECT_EQ(human_count(25'800'000'000ull), "25.8 B");
    EXPECT_EQ(human_count(1'500'000), "1.5 M");
    EXPECT_EQ(human_count(999), "999");
    EXPECT_EQ(human_count(0), "0");
    EXPECT_EQ(human_count(4'000'000'000'000ull), "4.0 T");
    EXPECT_EQ(human_bytes(100), "100 B");
    EXPECT_EQ(human_bytes(1536), "1.50 KiB");
    EXPECT_EQ(human_bytes(3ull << 30), "3.00 GiB");
}

TEST(GgufSummary, TotalsPerType) {
    hf2q::gguf::testing::TempDir dir;
    Writer w;
    w.add_tensor("a", GgmlType::Q8_0, {64, 4});  // 256 elements, 272 bytes
    w.add_tensor("b", GgmlType::F32, {10});      // 10 elements, 40 bytes
    w.add_tensor("c", GgmlType::Q8_0, {32});     // 32 elements, 34 bytes
    w.begin(dir.file("s.gguf"));
    std::vector<uint8_t> zeros(272);
    w.write_tensor_data(zeros.data(), 272);
    w.write_tensor_data(zeros.data(), 40);
    w.write_tensor_data(zeros.data(), 34);
    w.finish();
    auto f = File::open(dir.file("s.gguf"));
    const Summary s = summarize(*f);
    EXPECT_EQ(s.n_tensors, 3u);
    EXPECT_EQ(s.n_elements, 298u);
    EXPECT_EQ(s.n_bytes, 346u);
    ASSERT_EQ(s.by_type.size(), 2u);
    EXPECT_EQ(s.by_type[0].type, GgmlType::F32);
    EXPECT_EQ(s.by_type[1].type, GgmlType::Q8_0);
    EXPECT_EQ(s.by_type[1].n_tensors, 2u);
    EXPECT_EQ(s.by_type[1].n_elements, 288u);
    EXPECT_EQ(s.by_type[1].n_bytes, 306u);
    EXPECT_DOUBLE_EQ(s.bits_per_weight(), 8.0 * 346 / 298);
}
