// safetensors parser: valid files and every class of corrupt header.
#include "convert/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "convert/tiny_model.h"
#include "core/error.h"

using namespace hf2q;
using namespace hf2q::convert;
using namespace hf2q::test;

namespace {

// Builds an image from a raw header string and `data_len` data bytes.
std::vector<uint8_t> raw_image(const std::string& header, size_t data_len,
                               uint64_t len_override = 0) {
    // Sized once and filled with memcpy: GCC 12's -O3 warns (falsely) about
    // vector::insert of a few bytes at the end.
    std::vector<uint8_t> out(8 + header.size() + data_len, 0);
    uint64_t n = len_override ? len_override : header.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
    if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
    return out;
}

// Expects parse_safetensors to throw an Error whose message contains every needle.
void expect_reject(const std::vector<uint8_t>& img, std::initializer_list<std::string> needles) {
    try {
        parse_safetensors(img.data(), img.size(), "bad.safetensors");
        ADD_FAILURE() << "accepted a corrupt file";
    } catch (const Error& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("bad.safetensors"), std::string::npos) << m;
        for (const auto& n : needles)
            EXPECT_NE(m.find(n), std::string::npos) << "missing '" << n << "' in: " << m;
    }
}

}  // namespace

TEST(Safetensors, ParsesValidFileSortedByName) {
    auto a = make_entry("b.weight", "BF16", {3, 4}, 1);
    auto b = make_entry("a.weight", "F32", {5}, 2);
    auto c = make_entry("c.scalar", "F16", {}, 3);
    auto img = safetensors_image({a, b, c});
    auto ts = parse_safetensors(img.data(), img.size(), "ok");
    ASSERT_EQ(ts.size(), 3u);
    EXPECT_EQ(ts[0].name, "a.weight");
    EXPECT_EQ(ts[0].dtype, StDtype::F32);
    EXPECT_EQ(ts[0].shape, (std::vector<int64_t>{5}));
    EXPECT_EQ(ts[0].nbytes(), 20u);
    EXPECT_EQ(0, std::memcmp(ts[0].data, b.bytes.data(), 20));
    EXPECT_EQ(ts[1].name, "b.weight");
    EXPECT_EQ(ts[1].dtype, StDtype::BF16);
    EXPECT_EQ(ts[1].n_elements(), 12u);
    EXPECT_EQ(0, std::memcmp(ts[1].data, a.bytes.data(), 24));
    EXPECT_EQ(ts[2].shape.size(), 0u);
    EXPECT_EQ(ts[2].n_elements(), 1u);
}

TEST(Safetensors, RejectsTruncatedHeaderLength) {
    std::vector<uint8_t> img = {1, 0, 0};
    expect_reject(img, {"too small"});
}

TEST(Safetensors, RejectsHugeHeaderLength) {
    expect_reject(raw_image("{}", 0, (200ull << 20)), {"limit"});
    expect_reject(raw_image("{}", 0, ~0ull), {"limit"});
}

TEST(Safetensors, RejectsHeaderPastEnd) {
    expect_reject(raw_image("{}", 0, 1000), {"past the end"});
}

TEST(Safetensors, RejectsBadJson) {
    expect_reject(raw_image("{\"a\": {\"dtype\": \"F32\",", 0), {"not valid JSON"});
    expect_reject(raw_image("[1, 2]", 0), {"not a JSON object"});
    expect_reject(raw_image("", 0), {"not a JSON object"});
}

TEST(Safetensors, RejectsOffsetsPastEnd) {
    expect_reject(raw_image(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8),
                  {"'w'", "past the data section"});
}

TEST(Safetensors, RejectsBeginAfterEnd) {
    expect_reject(raw_image(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8),
                  {"'w'", "begin 8 > end 4"});
}

TEST(Safetensors, RejectsOverlappingRanges) {
    expect_reject(raw_image(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                            16),
                  {"'x'", "'y'", "overlapping"});
}

TEST(Safetensors, RejectsByteCountMismatch) {
    expect_reject(raw_image(R"({"w": {"dtype": "F16", "shape": [3], "data_offsets": [0, 8]}})", 8),
                  {"'w'", "do not match"});
    // dtype/shape combination whose element count overflows 64 bits
    expect_reject(
        raw_image(
            R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 8], "data_offsets": [0, 8]}})",
            8),
        {"'w'"});
}

TEST(Safetensors, RejectsDuplicateNames) {
    expect_reject(raw_image(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                            8),
                  {"'w'", "twice"});
}

TEST(Safetensors, RejectsUnsupportedDtypeNamingTensor) {
    expect_reject(
        raw_image(R"({"ids": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})", 8),
        {"'ids'", "I32", "F32, F16, BF16"});
    expect_reject(raw_image(R"({"d": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8),
                  {"'d'", "F64"});
}

TEST(Safetensors, RejectsMalformedEntries) {
    expect_reject(raw_image(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
                  {"'w'", "non-negative"});
    expect_reject(
        raw_image(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4),
        {"'w'"});
    expect_reject(raw_image(R"({"w": {"dtype": "F32", "shape": [1]}})", 4),
                  {"'w'", "data_offsets"});
    expect_reject(raw_image(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4),
                  {"'w'"});
    expect_reject(raw_image(R"({"w": 5})", 4), {"'w'"});
    expect_reject(raw_image(R"({"w": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}})", 4),
                  {"'w'"});
}

TEST(Safetensors, SkipsMetadataAndAcceptsEmptyTensors) {
    auto img = raw_image(R"({"__metadata__": {"format": "pt"},
                             "e": {"dtype": "BF16", "shape": [0, 3], "data_offsets": [0, 0]},
                             "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                         4);
    auto ts = parse_safetensors(img.data(), img.size(), "ok");
    ASSERT_EQ(ts.size(), 2u);
    EXPECT_EQ(ts[0].name, "e");
    EXPECT_EQ(ts[0].nbytes(), 0u);
}

TEST(Safetensors, CheckpointIndexMismatchesAreErrors) {
    TempDir d;
    auto a = make_entry("model.a", "F32", {2}, 1), b = make_entry("model.b", "F32", {2}, 2);
    write_file(d.path() / "model-00001-of-00002.safetensors", safetensors_image({a}));
    write_file(d.path() / "model-00002-of-00002.safetensors", safetensors_image({b}));
    // b listed under the wrong shard
    write_text(d.path() / "model.safetensors.index.json",
               R"({"weight_map": {"model.a": "model-00001-of-00002.safetensors",
                                  "model.b": "model-00001-of-00002.safetensors"}})");
    EXPECT_THROW(Checkpoint::open(d.path().string()), Error);
    write_text(d.path() / "model.safetensors.index.json",
               R"({"weight_map": {"model.a": "model-00001-of-00002.safetensors",
                                  "model.b": "model-00002-of-00002.safetensors",
                                  "model.c": "model-00002-of-00002.safetensors"}})");
    try {
        Checkpoint::open(d.path().string());
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("model.c"), std::string::npos) << e.what();
    }
    write_text(d.path() / "model.safetensors.index.json",
               R"({"weight_map": {"model.a": "model-00001-of-00002.safetensors",
                                  "model.b": "model-00002-of-00002.safetensors"}})");
    auto ck = Checkpoint::open(d.path().string());
    ASSERT_EQ(ck->tensors().size(), 2u);
    EXPECT_EQ(ck->tensors()[0].tensor->name, "model.a");
    EXPECT_EQ(ck->tensors()[1].shard, 1u);
}

TEST(Safetensors, CheckpointWithoutIndexRejectsDuplicatesAcrossFiles) {
    TempDir d;
    auto a = make_entry("model.a", "F32", {2}, 1);
    write_file(d.path() / "x.safetensors", safetensors_image({a}));
    write_file(d.path() / "y.safetensors", safetensors_image({a}));
    EXPECT_THROW(Checkpoint::open(d.path().string()), Error);
    TempDir empty;
    EXPECT_THROW(Checkpoint::open(empty.path().string()), Error);
}
