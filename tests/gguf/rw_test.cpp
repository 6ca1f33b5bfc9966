// gguf::Writer -> gguf::File round trips, the spec's worked byte example, writer
// failure paths, typed getters, and the real Gemma 4 vocabulary file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf_test_util.h"

using namespace hf2q;
using namespace hf2q::gguf;
using namespace hf2q::gguf::testing;
using ::testing::HasSubstr;

namespace {

std::vector<uint8_t> pattern_bytes(size_t n, uint32_t seed) {
    std::vector<uint8_t> v(n);
    uint32_t x = seed * 2654435761u + 1;
    for (auto& b : v) {
        x = x * 1664525u + 1013904223u;
        b = static_cast<uint8_t>(x >> 24);
    }
    return v;
}

// Every value type as a scalar and as an array, plus an empty array.
void set_all_types(Writer& w) {
    w.set("general.architecture", Value::string("gemma4"));
    w.set("t.u8", Value::u8(255));
    w.set("t.i8", Value::i8(-128));
    w.set("t.u16", Value::u16(65535));
    w.set("t.i16", Value::i16(-32768));
    w.set("t.u32", Value::u32(0xDEADBEEF));
    w.set("t.i32", Value::i32(INT32_MIN));
    w.set("t.f32", Value::f32(-1.5e-7f));
    w.set("t.bool", Value::boolean(true));
    w.set("t.string", Value::string("h\xC3\xA9llo \xE2\x96\x81 \xF0\x9F\x98\x80"));
    w.set("t.empty_string", Value::string(""));
    w.set("t.u64", Value::u64(UINT64_MAX));
    w.set("t.i64", Value::i64(INT64_MIN));
    w.set("t.f64", Value::f64(std::numeric_limits<double>::denorm_min()));
    w.set("a.u8", Value::array(ValueType::UINT8, {uint64_t{0}, uint64_t{255}}));
    w.set("a.i8", Value::array(ValueType::INT8, {int64_t{-1}, int64_t{127}}));
    w.set("a.u16", Value::array(ValueType::UINT16, {uint64_t{1}, uint64_t{65535}}));
    w.set("a.i16", Value::array(ValueType::INT16, {int64_t{-2}}));
    w.set("a.u32", Value::u32_array({1, 2, 0xFFFFFFFF}));
    w.set("a.i32", Value::i32_array({-1, 0, 1}));
    w.set("a.f32", Value::f32_array({0.25f, -0.f, INFINITY}));
    w.set("a.bool", Value::bool_array({true, false, true}));
    w.set("a.string", Value::string_array({"<pad>", "", "\xE2\x96\x81the"}));
    w.set("a.u64", Value::array(ValueType::UINT64, {uint64_t{1} << 40}));
    w.set("a.i64", Value::array(ValueType::INT64, {int64_t{-5}, INT64_MAX}));
    w.set("a.f64", Value::array(ValueType::FLOAT64, {1.0 / 3.0}));
    w.set("a.empty", Value::array(ValueType::INT32, {}));
}

struct TensorSpec {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t nbytes;
};

const std::vector<TensorSpec> kTensors = {
    {"token_embd.weight", GgmlType::F16, {64, 3}, 64 * 3 * 2},
    {"blk.0.attn_q.weight", GgmlType::Q8_0, {64, 5}, 2 * 34 * 5},
    {"blk.0.ffn_down_exps.weight", GgmlType::Q4_K, {256, 2, 3}, 144 * 6},
    {"output_norm.weight", GgmlType::F32, {7}, 28},
    {"four.d", GgmlType::BF16, {2, 3, 1, 2}, 24},
};

void write_file(const std::string& path, uint32_t alignment = 0) {
    Writer w;
    set_all_types(w);
    if (alignment) w.set("general.alignment", Value::u32(alignment));
    for (const auto& t : kTensors) w.add_tensor(t.name, t.type, t.ne);
    w.begin(path);
    uint32_t seed = 0;
    for (const auto& t : kTensors) {
        auto data = pattern_bytes(t.nbytes, seed++);
        // In two pieces, as a streaming converter would.
        w.write_tensor_data(data.data(), data.size() / 2);
        w.write_tensor_data(data.data() + data.size() / 2, data.size() - data.size() / 2);
    }
    w.finish();
}

// Writes `f` again through the Writer (same keys, same order, same tensors).
void rewrite(const File& f, const std::string& path) {
    Writer w;
    for (const auto& kv : f.metadata()) w.set(kv.key, kv.value);
    for (const auto& t : f.tensors())
        w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims));
    w.begin(path);
    for (const auto& t : f.tensors()) w.write_tensor_data(t.data, t.nbytes);
    w.finish();
}

}  // namespace

TEST(GgufRoundTrip, EveryValueTypeAndTensor) {
    TempDir dir;
    const std::string path = dir.file("rt.gguf");
    write_file(path);
    Writer ref;
    set_all_types(ref);

    auto f = File::open(path);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), 32u);
    ASSERT_EQ(f->metadata().size(), ref.metadata().size());
    for (size_t i = 0; i < ref.metadata().size(); ++i) {
        EXPECT_EQ(f->metadata()[i].key, ref.metadata()[i].key);
        EXPECT_TRUE(f->metadata()[i].value == ref.metadata()[i].value) << ref.metadata()[i].key;
    }
    EXPECT_EQ(f->get_string("general.architecture"), "gemma4");
    EXPECT_EQ(f->get_u32("t.u32"), 0xDEADBEEFu);
    EXPECT_EQ(f->get_f32("t.f32"), -1.5e-7f);
    EXPECT_TRUE(f->get_bool("t.bool"));

    ASSERT_EQ(f->tensors().size(), kTensors.size());
    EXPECT_EQ(f->data_offset() % 32, 0u);
    uint64_t expected_offset = 0;
    for (size_t i = 0; i < kTensors.size(); ++i) {
        const TensorInfo& t = f->tensors()[i];
        EXPECT_EQ(t.name, kTensors[i].name);
        EXPECT_EQ(t.type, kTensors[i].type);
        EXPECT_EQ(t.n_dims, kTensors[i].ne.size());
        for (size_t j = 0; j < 4; ++j)
            EXPECT_EQ(t.ne[j], j < kTensors[i].ne.size() ? kTensors[i].ne[j] : 1);
        EXPECT_EQ(t.nbytes, kTensors[i].nbytes);
        EXPECT_EQ(t.offset, expected_offset);
        expected_offset += (t.nbytes + 31) / 32 * 32;
        auto data = pattern_bytes(t.nbytes, static_cast<uint32_t>(i));
        EXPECT_EQ(std::memcmp(t.data, data.data(), t.nbytes), 0) << t.name;
        EXPECT_EQ(f->find_tensor(t.name), &t);
    }
    EXPECT_EQ(f->tensors()[2].n_elements(), 256 * 6);
    EXPECT_EQ(f->tensors()[2].row_bytes(), 144u);
    EXPECT_EQ(f->find_tensor("nope"), nullptr);
    // Trailing padding after the last tensor is written.
    EXPECT_EQ(f->file_size(), f->data_offset() + expected_offset);
    EXPECT_EQ(std::filesystem::file_size(path), f->file_size());
}

TEST(GgufRoundTrip, RewriteIsBitExact) {
    TempDir dir;
    write_file(dir.file("a.gguf"));
    auto f = File::open(dir.file("a.gguf"));
    rewrite(*f, dir.file("b.gguf"));
    const auto a = read_bytes(dir.file("a.gguf"));
    const auto b = read_bytes(dir.file("b.gguf"));
    ASSERT_GT(a.size(), 1000u);
    EXPECT_TRUE(a == b);
    // And the in-memory parser sees the same thing as the mapped one.
    auto g = File::parse(a.data(), a.size(), "mem");
    EXPECT_EQ(g->data_offset(), f->data_offset());
    EXPECT_EQ(g->tensors().back().data, a.data() + g->data_offset() + g->tensors().back().offset);
}

TEST(GgufRoundTrip, CustomAlignment) {
    TempDir dir;
    write_file(dir.file("a64.gguf"), 64);
    auto f = File::open(dir.file("a64.gguf"));
    EXPECT_EQ(f->alignment(), 64u);
    EXPECT_EQ(f->data_offset() % 64, 0u);
    for (const auto& t : f->tensors()) EXPECT_EQ(t.offset % 64, 0u);
    EXPECT_EQ(f->file_size() % 64, 0u);
    EXPECT_EQ(f->tensors()[1].offset, 384u);  // 384 bytes of F16, already a multiple of 64
    EXPECT_EQ(f->tensors()[2].offset, 384u + 384u);  // 340 bytes of Q8_0 padded to 384
}

TEST(GgufRoundTrip, NoTensors) {
    TempDir dir;
    Writer w;
    w.set("general.architecture", Value::string("gemma4"));
    w.begin(dir.file("empty.gguf"));
    w.finish();
    auto bytes = read_bytes(dir.file("empty.gguf"));
    EXPECT_EQ(bytes.size() % 32, 0u);  // padded after the infos, like llama.cpp's writer
    auto f = File::parse(bytes.data(), bytes.size());
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->get_string("general.architecture"), "gemma4");
}

// gguf-gemma4.md §1.7, reproduced byte for byte.
TEST(GgufWriter, SpecWorkedExample) {
    Builder b;
    b.put<uint8_t>('G').put<uint8_t>('G').put<uint8_t>('U').put<uint8_t>('F');
    b.u32(3).u64(1).u64(2);
    b.str("gemma4.block_count").u32(4).u32(35);
    b.str("gemma4.attention.sliding_window_pattern").u32(9).u32(7).u64(2).put<uint8_t>(1).put<uint8_t>(0);
    b.str("blk.0.attn_q.weight").u32(2).u64(1536).u64(2048).u32(1).u64(0);
    // Fixed hex of the spec for the block_count record and the tensor info's tail.
    const std::vector<uint8_t> kv_head = {0x12, 0, 0, 0, 0, 0, 0, 0};
    EXPECT_TRUE(std::equal(kv_head.begin(), kv_head.end(), b.bytes.begin() + 24));
    b.pad(32);
    const size_t header = b.bytes.size();
    const auto data = pattern_bytes(1536 * 2048 * 2, 7);
    ASSERT_EQ(data.size(), 6291456u);

    TempDir dir;
    Writer w;
    w.set("gemma4.block_count", Value::u32(35));
    w.set("gemma4.attention.sliding_window_pattern", Value::bool_array({true, false}));
    w.add_tensor("blk.0.attn_q.weight", GgmlType::F16, {1536, 2048});
    w.begin(dir.file("ex.gguf"));
    w.write_tensor_data(data.data(), data.size());
    w.finish();
    const auto got = read_bytes(dir.file("ex.gguf"));
    ASSERT_EQ(got.size(), header + data.size());
    EXPECT_TRUE(std::equal(b.bytes.begin(), b.bytes.end(), got.begin()));
    EXPECT_TRUE(std::equal(data.begin(), data.end(), got.begin() + static_cast<ptrdiff_t>(header)));
}

TEST(GgufWriter, SetReplacesInPlaceAndRemove) {
    Writer w;
    w.set("a", Value::u32(1));
    w.set("b", Value::u32(2));
    w.set("a", Value::string("x"));
    ASSERT_EQ(w.metadata().size(), 2u);
    EXPECT_EQ(w.metadata()[0].key, "a");
    EXPECT_EQ(w.metadata()[0].value.as_string("a"), "x");
    w.remove("a");
    ASSERT_EQ(w.metadata().size(), 1u);
    EXPECT_EQ(w.metadata()[0].key, "b");
    w.remove("missing");
    EXPECT_EQ(w.metadata().size(), 1u);
}

TEST(GgufWriter, RejectsBadAlignmentAndStrings) {
    Writer w;
    EXPECT_THROW(w.set("general.alignment", Value::i32(32)), Error);
    EXPECT_THROW(w.set("general.alignment", Value::u64(32)), Error);
    EXPECT_THROW(w.set("general.alignment", Value::u32(0)), Error);
    EXPECT_THROW(w.set("general.alignment", Value::u32(48)), Error);
    EXPECT_NO_THROW(w.set("general.alignment", Value::u32(16)));
    EXPECT_THROW(w.set("bad\xFF", Value::u32(1)), Error);
    EXPECT_THROW(w.set("k", Value::string("\xC0\x80")), Error);
    EXPECT_THROW(w.set("k", Value::string_array({"ok", "\xED\xA0\x80"})), Error);
}

TEST(GgufWriter, RejectsBadTensors) {
    Writer w;
    w.add_tensor("a", GgmlType::F32, {4});
    EXPECT_THAT([&] { w.add_tensor("a", GgmlType::F32, {4}); }, ::testing::Throws<Error>());
    EXPECT_THROW(w.add_tensor(std::string(64, 'x'), GgmlType::F32, {4}), Error);
    EXPECT_NO_THROW(w.add_tensor(std::string(63, 'x'), GgmlType::F32, {4}));
    EXPECT_THROW(w.add_tensor("q", GgmlType::Q8_0, {33}), Error);
    EXPECT_THROW(w.add_tensor("d0", GgmlType::F32, {}), Error);
    EXPECT_THROW(w.add_tensor("d5", GgmlType::F32, {1, 1, 1, 1, 1}), Error);
    EXPECT_THROW(w.add_tensor("z", GgmlType::F32, {4, 0}), Error);
    EXPECT_THROW(w.add_tensor("neg", GgmlType::F32, {-4}), Error);
    EXPECT_THROW(w.add_tensor("big", GgmlType::F32, {1ll << 40, 1ll << 40}), Error);
    EXPECT_THROW(w.add_tensor("utf\xFF", GgmlType::F32, {1}), Error);
    // A rejected declaration leaves no trace: the name is free again.
    EXPECT_NO_THROW(w.add_tensor("q", GgmlType::Q8_0, {64}));
    EXPECT_EQ(w.tensor_count(), 3u);
}

TEST(GgufWriter, DestroyBeforeFinishLeavesNothing) {
    TempDir dir;
    {
        Writer w;
        w.add_tensor("a", GgmlType::F32, {4});
        w.begin(dir.file("x.gguf"));
        EXPECT_EQ(dir.n_entries(), 1u);  // the temp file
        const float v[2] = {1, 2};
        w.write_tensor_data(v, sizeof v);
    }
    EXPECT_EQ(dir.n_entries(), 0u);
    EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf")));
}

TEST(GgufWriter, ExistingDestinationUntouchedOnFailure) {
    TempDir dir;
    {
        std::ofstream(dir.file("x.gguf")) << "old";
    }
    {
        Writer w;
        w.add_tensor("a", GgmlType::F32, {4});
        w.begin(dir.file("x.gguf"));
        EXPECT_THROW(w.finish(), Error);  // tensor data missing
    }
    EXPECT_EQ(dir.n_entries(), 1u);
    EXPECT_EQ(read_bytes(dir.file("x.gguf")).size(), 3u);
}

TEST(GgufWriter, ChecksByteCounts) {
    TempDir dir;
    Writer w;
    w.add_tensor("a", GgmlType::F32, {4});
    w.add_tensor("b", GgmlType::F16, {2});
    const uint8_t buf[32] = {};
    EXPECT_THROW(w.write_tensor_data(buf, 4), Error);  // before begin()
    EXPECT_THROW(w.finish(), Error);
    w.begin(dir.file("x.gguf"));
    EXPECT_THROW(w.set("late", Value::u32(1)), Error);
    EXPECT_THROW(w.add_tensor("late", GgmlType::F32, {1}), Error);
    EXPECT_THROW(w.begin(dir.file("y.gguf")), Error);
    w.write_tensor_data(buf, 12);
    EXPECT_THAT([&] { w.write_tensor_data(buf, 8); },
                ::testing::ThrowsMessage<Error>(HasSubstr("exceed its declared size of 16")));
    w.write_tensor_data(buf, 4);  // completes 'a'
    EXPECT_THROW(w.finish(), Error);  // 'b' missing
    w.write_tensor_data(buf, 4);
    EXPECT_THROW(w.write_tensor_data(buf, 1), Error);  // all complete
    w.finish();
    auto f = File::open(dir.file("x.gguf"));
    EXPECT_EQ(f->tensors()[1].offset, 32u);
    EXPECT_EQ(dir.n_entries(), 1u);
}

TEST(GgufWriter, UnwritableDestination) {
    Writer w;
    EXPECT_THROW(w.begin("/nonexistent-dir-hf2q/x.gguf"), Error);
}

TEST(GgufFile, TypedGettersAndPerLayer) {
    TempDir dir;
    Writer w;
    w.set("n", Value::u32(3));
    w.set("wrong", Value::i32(3));
    w.set("arr", Value::i32_array({1, 2, 3}));
    w.set("flags", Value::bool_array({true, false, true}));
    w.set("f", Value::f32(0.5f));
    w.set("s", Value::string("x"));
    w.begin(dir.file("k.gguf"));
    w.finish();
    auto f = File::open(dir.file("k.gguf"));
    EXPECT_EQ(f->get_per_layer("n", 4), (std::vector<int64_t>{3, 3, 3, 3}));
    EXPECT_EQ(f->get_per_layer("arr", 3), (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(f->get_per_layer("flags", 3), (std::vector<int64_t>{1, 0, 1}));
    EXPECT_THAT([&] { f->get_per_layer("arr", 4); },
                ::testing::ThrowsMessage<Error>(HasSubstr("expected one per layer (4)")));
    EXPECT_THAT([&] { f->get_per_layer("wrong", 4); },
                ::testing::ThrowsMessage<Error>(HasSubstr("'wrong'")));
    EXPECT_THROW(f->get_per_layer("f", 1), Error);
    EXPECT_THAT([&] { f->get_u32("missing"); }, ::testing::ThrowsMessage<Error>(HasSubstr("missing key")));
    EXPECT_THAT([&] { f->get_u32("wrong"); },
                ::testing::ThrowsMessage<Error>(HasSubstr("has type INT32, expected UINT32")));
    EXPECT_EQ(f->get_u32_or("missing", 7), 7u);
    EXPECT_THROW(f->get_u32_or("wrong", 7), Error);
    EXPECT_EQ(f->get_f32_or("f", 1.f), 0.5f);
    EXPECT_EQ(f->get_f32_or("nf", 1.f), 1.f);
    EXPECT_THROW(f->get_f32_or("n", 1.f), Error);
    EXPECT_EQ(f->get_bool_or("nb", true), true);
    EXPECT_THROW(f->get_bool_or("n", true), Error);
    EXPECT_EQ(f->get_string_or("s", "d"), "x");
    EXPECT_EQ(f->get_string_or("ns", "d"), "d");
    EXPECT_TRUE(f->has("s"));
    EXPECT_FALSE(f->has("ns"));
}

TEST(GgufFile, OpenMissingFile) {
    EXPECT_THROW(File::open("/nonexistent-hf2q.gguf"), Error);
}

TEST(GgufFile, RealGemma4Vocabulary) {
    const std::string path = std::string(HF2Q_TESTDATA_DIR) + "/tokenizer/ggml-vocab-gemma-4.gguf";
    const auto t0 = std::chrono::steady_clock::now();
    auto f = File::open(path);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("parsed %s (%llu bytes) in %.1f ms\n", path.c_str(),
                static_cast<unsigned long long>(f->file_size()), ms);
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->metadata().size(), 42u);
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->get_string("general.architecture"), "gemma4");
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gemma4");
    EXPECT_EQ(f->get_u32("gemma4.block_count"), 30u);
    EXPECT_EQ(f->get_u32("tokenizer.ggml.bos_token_id"), 2u);
    EXPECT_EQ(f->get_f32("gemma4.rope.freq_base"), 1e6f);
    EXPECT_TRUE(f->get_bool("tokenizer.ggml.add_bos_token"));
    const auto& tokens = f->at("tokenizer.ggml.tokens").as_string_array("tokens");
    ASSERT_EQ(tokens.size(), 262144u);
    EXPECT_EQ(tokens[0], "<pad>");
    EXPECT_EQ(tokens[2], "<bos>");
    EXPECT_EQ(f->at("tokenizer.ggml.merges").array_size(), 514906u);
    EXPECT_EQ(f->at("tokenizer.ggml.scores").as_f32_array("scores")[5], -1000.f);
    EXPECT_EQ(f->get_per_layer("gemma4.attention.head_count_kv", 30).size(), 30u);
    EXPECT_EQ(f->at("gemma4.attention.sliding_window_pattern").as_bool_array("p").size(), 30u);
}
