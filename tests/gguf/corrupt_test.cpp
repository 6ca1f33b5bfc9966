// Corrupt-file corpus for gguf::File::parse, generated from a small valid file built
// byte by byte: every defect must throw hf2q::Error naming the field, never crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf_test_util.h"

using namespace hf2q;
using namespace hf2q::gguf;
using namespace hf2q::gguf::testing;
using ::testing::HasSubstr;

namespace {

struct BaseOpts {
    std::string t0_name = "t0";
    // general.alignment record: value type and raw value (written with that type's width).
    std::optional<std::pair<uint32_t, uint64_t>> alignment_kv;
    uint32_t layout_alignment = 32;
};

// 5 metadata keys (string, u32, i32 array, string array, f32), 3 tensors:
//   t0 F32 ne=[8,2] 64 bytes at 0, t1 Q8_0 ne=[32] 34 bytes at 64, t2 F16 ne=[16] 32 bytes at 128.
// The last tensor is a multiple of 32 bytes, so the file has no trailing padding and
// every truncation cuts into required bytes.
Builder make_base(const BaseOpts& o = {}) {
    Builder b;
    b.put<uint8_t>('G').put<uint8_t>('G').put<uint8_t>('U').put<uint8_t>('F');
    b.mark("version").u32(3);
    b.mark("tensor_count").u64(3);
    b.mark("kv_count").u64(o.alignment_kv ? 6 : 5);
    b.mark("key0").str("general.architecture").mark("key0.type").u32(8).mark("str").str("gemma4");
    b.mark("key1").str("gemma4.block_count").mark("key1.type").u32(4).u32(35);
    b.mark("key2").str("arr.i32").u32(9).mark("arr.elem_type").u32(5).mark("arr.count").u64(3);
    b.put<int32_t>(1).put<int32_t>(-2).put<int32_t>(3);
    b.mark("key3").str("arr.str").u32(9).u32(8).mark("sarr.count").u64(2);
    b.mark("sarr.0").str("ab").mark("sarr.1").str("c");
    b.mark("key4").str("f").u32(6).put<float>(0.5f);
    if (o.alignment_kv) {
        b.mark("align").str("general.alignment").mark("align.type").u32(o.alignment_kv->first);
        b.mark("align.value");
        switch (o.alignment_kv->first) {
            case 0: b.put<uint8_t>(static_cast<uint8_t>(o.alignment_kv->second)); break;
            case 4: case 5: b.u32(static_cast<uint32_t>(o.alignment_kv->second)); break;
            default: b.u64(o.alignment_kv->second);
        }
    }
    const uint64_t a = o.layout_alignment;
    b.mark("t0.name").str(o.t0_name).mark("t0.n_dims").u32(2).mark("t0.ne0").u64(8).mark("t0.ne1").u64(2);
    b.mark("t0.type").u32(0).mark("t0.offset").u64(0);
    b.mark("t1.name").str("t1").mark("t1.n_dims").u32(1).mark("t1.ne0").u64(32);
    b.mark("t1.type").u32(8).mark("t1.offset").u64(64);
    b.mark("t2.name").str("t2").mark("t2.n_dims").u32(1).mark("t2.ne0").u64(16);
    b.mark("t2.type").u32(1).mark("t2.offset").u64(64 + (34 + a - 1) / a * a);
    b.pad(a).mark("data");
    for (int i = 0; i < 64; ++i) b.put<uint8_t>(static_cast<uint8_t>(i));
    b.zeros((34 + a - 1) / a * a).zeros(32);
    return b;
}

// The returned File's tensor data pointers dangle (the copy is freed); metadata is owned.
std::unique_ptr<File> parse(const std::vector<uint8_t>& bytes, const ReadLimits& lim = {}) {
    // An exact-size heap copy, so ASan catches any read past the end.
    std::vector<uint8_t> copy(bytes);
    return File::parse(copy.data(), copy.size(), "x.gguf", lim);
}

std::string parse_error(const std::vector<uint8_t>& bytes, const ReadLimits& lim = {}) {
    try {
        parse(bytes, lim);
    } catch (const Error& e) {
        return e.what();
    }
    return "(parsed without error)";
}

}  // namespace

TEST(GgufCorrupt, BaseFileIsValid) {
    Builder b = make_base();
    auto f = File::parse(b.bytes.data(), b.bytes.size(), "x.gguf");
    ASSERT_EQ(f->tensors().size(), 3u);
    EXPECT_EQ(f->data_offset(), b.at("data"));
    EXPECT_EQ(f->tensors()[2].offset, 128u);
    EXPECT_EQ(f->tensors()[0].data[5], 5);
    EXPECT_EQ(f->metadata().size(), 5u);
    EXPECT_EQ(f->at("arr.str").as_string_array("s")[1], "c");
}

TEST(GgufCorrupt, TruncationAtEveryOffsetThrows) {
    const auto full = make_base().bytes;
    for (size_t n = 0; n < full.size(); ++n) {
        std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<ptrdiff_t>(n));
        EXPECT_THROW(parse(cut), Error) << "truncated to " << n << " bytes";
    }
}

TEST(GgufCorrupt, MissingFinalPaddingIsTolerated) {
    // llama.cpp's loader only needs each tensor's bytes inside the file.
    Builder b = make_base();
    b.bytes.resize(b.bytes.size() - 32);   // drop t2 entirely...
    EXPECT_THROW(parse(b.bytes), Error);
    b.patch<uint64_t>("t2.ne0", 4);        // ...t2 shrunk to 8 bytes: fits without its padding
    b.bytes.resize(b.bytes.size() + 8);
    EXPECT_NO_THROW(parse(b.bytes));
}

TEST(GgufCorrupt, EveryByteMutationFailsCleanly) {
    const auto base = make_base().bytes;
    for (size_t i = 0; i < base.size(); ++i) {
        for (uint8_t v : {uint8_t{0x00}, uint8_t{0xFF}, uint8_t{0x80}, static_cast<uint8_t>(base[i] + 1)}) {
            auto m = base;
            m[i] = v;
            try {
                parse(m);
            } catch (const Error&) {
            }
        }
    }
}

TEST(GgufCorrupt, MagicAndVersion) {
    Builder b = make_base();
    b.bytes[0] = 'g';
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("not a GGUF file"));
    for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
        Builder c = make_base();
        c.patch<uint32_t>("version", v);
        EXPECT_THAT(parse_error(c.bytes), HasSubstr("at byte 4")) << v;
    }
    Builder c = make_base();
    c.patch<uint32_t>("version", 0x03000000u);
    EXPECT_THAT(parse_error(c.bytes), HasSubstr("big-endian"));
    c.patch<uint32_t>("version", 2);
    EXPECT_EQ(parse(c.bytes)->version(), 2u);
}

TEST(GgufCorrupt, HugeCountsFailFast) {
    const uint64_t huge = 1ull << 62;
    for (const char* field : {"tensor_count", "kv_count", "arr.count", "sarr.count", "str", "sarr.0",
                              "key0", "t0.name"}) {
        Builder b = make_base();
        b.patch<uint64_t>(field, huge);
        const std::string msg = parse_error(b.bytes);
        EXPECT_THAT(msg, HasSubstr("bad GGUF file 'x.gguf'")) << field;
        EXPECT_THAT(msg, HasSubstr("at byte " + std::to_string(b.at(field)))) << field << ": " << msg;
    }
    // Counts just above what the remaining bytes can hold, but below the limits.
    Builder b = make_base();
    b.patch<uint64_t>("arr.count", 1000);
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("array count 1000"));
}

TEST(GgufCorrupt, Limits) {
    ReadLimits lim;
    lim.max_string_bytes = 5;  // "gemma4" is 6
    EXPECT_THAT(parse_error(make_base().bytes, lim), HasSubstr("above the limit of 5"));
    lim = {};
    lim.max_array_elems = 2;
    EXPECT_THAT(parse_error(make_base().bytes, lim), HasSubstr("key 2 ('arr.i32')"));
    lim = {};
    lim.max_kv_count = 4;
    EXPECT_THAT(parse_error(make_base().bytes, lim), HasSubstr("kv_count 5"));
    lim = {};
    lim.max_tensor_count = 2;
    EXPECT_THAT(parse_error(make_base().bytes, lim), HasSubstr("tensor_count 3"));
}

TEST(GgufCorrupt, ValueTypes) {
    Builder b = make_base();
    b.patch<uint32_t>("key1.type", 13);
    EXPECT_THAT(parse_error(b.bytes),
                HasSubstr("key 1 ('gemma4.block_count'): unknown value type 13 at byte " +
                          std::to_string(b.at("key1.type"))));
    b = make_base();
    b.patch<uint32_t>("arr.elem_type", 9);
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("nested arrays"));
    b = make_base();
    b.patch<uint32_t>("arr.elem_type", 77);
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("unknown array element type 77"));
    // u32 value stored where a string was: the stream is then misaligned and must still fail cleanly.
    b = make_base();
    b.patch<uint32_t>("key0.type", 4);
    EXPECT_THROW(parse(b.bytes), Error);
}

TEST(GgufCorrupt, DuplicateKeysAndNames) {
    Builder b = make_base();
    // "arr.str" -> "arr.i32" (same length) duplicates key 2.
    std::memcpy(b.bytes.data() + b.at("key3") + 8, "arr.i32", 7);
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("key 3 ('arr.i32'): duplicate key at byte " +
                                                std::to_string(b.at("key3"))));
    b = make_base();
    b.bytes[b.at("t1.name") + 9] = '0';  // "t1" -> "t0"
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("tensor 1 ('t0'): duplicate tensor name"));
}

TEST(GgufCorrupt, InvalidUtf8) {
    Builder b = make_base();
    b.bytes[b.at("key1") + 8] = 0xFF;
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("key 1: key at byte " + std::to_string(b.at("key1")) +
                                                " is not valid UTF-8"));
    b = make_base();
    b.bytes[b.at("t2.name") + 8] = 0xC0;
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("tensor 2: name at byte"));
    b = make_base();
    b.bytes[b.at("str") + 8] = 0xED;  // lone lead byte / surrogate
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("key 0 ('general.architecture'): string value"));
    b = make_base();
    b.bytes[b.at("sarr.1") + 8] = 0x80;
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("key 3 ('arr.str'): element 1: string value"));
}

TEST(GgufCorrupt, Alignment) {
    EXPECT_EQ(parse(make_base({.alignment_kv = std::pair{4u, 32ull}}).bytes)->alignment(), 32u);
    auto f = parse(make_base({.alignment_kv = std::pair{4u, 64ull}, .layout_alignment = 64}).bytes);
    EXPECT_EQ(f->alignment(), 64u);
    EXPECT_EQ(f->data_offset() % 64, 0u);
    EXPECT_THAT(parse_error(make_base({.alignment_kv = std::pair{5u, 32ull}}).bytes),
                HasSubstr("key 5 ('general.alignment'): type INT32"));
    EXPECT_THAT(parse_error(make_base({.alignment_kv = std::pair{10u, 32ull}}).bytes),
                HasSubstr("must be UINT32"));
    EXPECT_THAT(parse_error(make_base({.alignment_kv = std::pair{0u, 32ull}}).bytes),
                HasSubstr("must be UINT32"));
    for (uint64_t a : {0ull, 3ull, 48ull}) {
        EXPECT_THAT(parse_error(make_base({.alignment_kv = std::pair{4u, a}}).bytes),
                    HasSubstr("not a non-zero power of two"))
            << a;
    }
    // Laid out for 32 but claiming 16: t2's offset 128 is not the dense 112.
    EXPECT_THAT(parse_error(make_base({.alignment_kv = std::pair{4u, 16ull}}).bytes),
                HasSubstr("expected dense offset 112"));
}

TEST(GgufCorrupt, TensorNames) {
    EXPECT_NO_THROW(parse(make_base({.t0_name = std::string(63, 'n'), .alignment_kv = std::nullopt}).bytes));
    EXPECT_THAT(parse_error(make_base({.t0_name = std::string(64, 'n'), .alignment_kv = std::nullopt}).bytes),
                HasSubstr("is 64 bytes long; the limit is 63"));
}

TEST(GgufCorrupt, Dimensions) {
    for (uint32_t nd : {0u, 5u, 0xFFFFFFFFu}) {
        Builder b = make_base();
        b.patch<uint32_t>("t0.n_dims", nd);
        EXPECT_THAT(parse_error(b.bytes), HasSubstr("tensor 0 ('t0'): n_dims " + std::to_string(nd)));
    }
    Builder b = make_base();
    b.patch<int64_t>("t0.ne1", -1);
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("ne[1] = -1 at byte " + std::to_string(b.at("t0.ne1"))));
    b = make_base();
    b.patch<int64_t>("t0.ne0", 0);
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("ne[0] = 0"));
    b = make_base();
    b.patch<int64_t>("t0.ne0", 1ll << 40);
    b.patch<int64_t>("t0.ne1", 1ll << 40);
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("element count overflow"));
    // Element count fits but the byte size does not: 2^61 F32 elements.
    b = make_base();
    b.patch<int64_t>("t0.ne0", 1ll << 31);
    b.patch<int64_t>("t0.ne1", 1ll << 30);
    b.patch<uint32_t>("t0.type", 28);  // F64
    EXPECT_THROW(parse(b.bytes), Error);
    b = make_base();
    b.patch<int64_t>("t1.ne0", 33);
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("not a multiple of the block size 32 of type q8_0"));
}

TEST(GgufCorrupt, GgmlTypes) {
    for (uint32_t id : {4u, 5u, 31u, 33u, 36u, 38u}) {
        Builder b = make_base();
        b.patch<uint32_t>("t1.type", id);
        EXPECT_THAT(parse_error(b.bytes), HasSubstr("removed ggml type id " + std::to_string(id)));
    }
    for (uint32_t id : {42u, 1000u, 0xFFFFFFFFu}) {
        Builder b = make_base();
        b.patch<uint32_t>("t1.type", id);
        EXPECT_THAT(parse_error(b.bytes), HasSubstr("unknown ggml type id " + std::to_string(id)));
    }
}

TEST(GgufCorrupt, Offsets) {
    Builder b = make_base();
    b.patch<uint64_t>("t1.offset", 48);  // misaligned
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("not a multiple of the alignment 32"));
    b = make_base();
    b.patch<uint64_t>("t1.offset", 0);  // overlaps t0
    EXPECT_THAT(parse_error(b.bytes),
                HasSubstr("tensor 1 ('t1'): offset 0 at byte " + std::to_string(b.at("t1.offset")) +
                          " does not match the expected dense offset 64"));
    b = make_base();
    b.patch<uint64_t>("t2.offset", 1ull << 40);  // far out of range
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("expected dense offset 128"));
    b = make_base();
    b.patch<uint64_t>("t2.offset", 0xFFFFFFFFFFFFFFE0ull);
    EXPECT_THROW(parse(b.bytes), Error);
    b = make_base();
    b.patch<uint64_t>("t2.ne0", 1 << 20);  // data runs past the end of the file
    EXPECT_THAT(parse_error(b.bytes), HasSubstr("extends past the end of the file"));
}
