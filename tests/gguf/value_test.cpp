// gguf::Value: exact-type accessors, array conversions, display strings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "gguf/gguf.h"

using namespace hf2q;
using namespace hf2q::gguf;
using ::testing::HasSubstr;

namespace {

std::string error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST(GgufValue, ScalarsKeepExactType) {
    EXPECT_EQ(Value::u32(7).type(), ValueType::UINT32);
    EXPECT_EQ(Value::u32(0xFFFFFFFFu).as_u32("k"), 0xFFFFFFFFu);
    EXPECT_EQ(Value::i32(-5).as_i32("k"), -5);
    EXPECT_EQ(Value::u64(1ull << 63).as_u64("k"), 1ull << 63);
    EXPECT_EQ(Value::f32(1e-6f).as_f32("k"), 1e-6f);
    EXPECT_TRUE(Value::boolean(true).as_bool("k"));
    EXPECT_EQ(Value::string("gemma4").as_string("k"), "gemma4");
    EXPECT_EQ(Value::i8(-128).type(), ValueType::INT8);
    EXPECT_EQ(std::get<int64_t>(Value::i16(-300).scalar()), -300);
    EXPECT_EQ(std::get<uint64_t>(Value::u16(65535).scalar()), 65535u);
    EXPECT_EQ(std::get<double>(Value::f64(0.1).scalar()), 0.1);
    EXPECT_FALSE(Value::u8(1).is_array());
}

TEST(GgufValue, WrongTypeNamesKeyAndBothTypes) {
    const Value v = Value::i32(35);
    const std::string msg = error_of([&] { v.as_u32("gemma4.block_count"); });
    EXPECT_THAT(msg, HasSubstr("gemma4.block_count"));
    EXPECT_THAT(msg, HasSubstr("INT32"));
    EXPECT_THAT(msg, HasSubstr("UINT32"));
    EXPECT_THROW(Value::u32(1).as_u64("k"), Error);
    EXPECT_THROW(Value::f64(1).as_f32("k"), Error);
    EXPECT_THROW(Value::u8(1).as_bool("k"), Error);
    EXPECT_THROW(Value::string("x").as_string_array("k"), Error);
    EXPECT_THROW(Value::u32_array({1}).as_u32("k"), Error);
    EXPECT_THAT(error_of([] { Value::i32_array({1}).as_f32_array("arr"); }),
                HasSubstr("ARRAY[INT32]"));
}

TEST(GgufValue, IntArraysAcceptIntegerAndBoolElements) {
    EXPECT_EQ(Value::i32_array({-1, 2}).as_int_array("k"), (std::vector<int64_t>{-1, 2}));
    EXPECT_EQ(Value::u32_array({4000000000u}).as_int_array("k"),
              (std::vector<int64_t>{4000000000}));
    EXPECT_EQ(Value::bool_array({true, false}).as_int_array("k"), (std::vector<int64_t>{1, 0}));
    Value big = Value::array(ValueType::UINT64, {uint64_t{1} << 63});
    EXPECT_THAT(error_of([&] { big.as_int_array("k"); }), HasSubstr("does not fit"));
    EXPECT_THROW(Value::f32_array({1.f}).as_int_array("k"), Error);
    EXPECT_THROW(Value::i32(3).as_int_array("k"), Error);
    EXPECT_EQ(Value::bool_array({true, false, true}).as_bool_array("k"),
              (std::vector<bool>{true, false, true}));
    EXPECT_THROW(Value::i32_array({1}).as_bool_array("k"), Error);
    EXPECT_EQ(Value::f32_array({0.5f, -2.f}).as_f32_array("k"), (std::vector<float>{0.5f, -2.f}));
}

TEST(GgufValue, StringArraysAreContiguous) {
    Value v = Value::string_array({"a", "bc", ""});
    EXPECT_TRUE(v.is_array());
    EXPECT_EQ(v.elem_type(), ValueType::STRING);
    EXPECT_EQ(v.array_size(), 3u);
    EXPECT_EQ(v.as_string_array("k")[1], "bc");
    EXPECT_TRUE(v.elems().empty());
    // The generic constructor gives the same representation.
    EXPECT_EQ(Value::array(ValueType::STRING, {std::string("a"), std::string("bc"), std::string()}), v);
}

TEST(GgufValue, ArrayConstructorChecksElements) {
    EXPECT_THROW(Value::array(ValueType::ARRAY, {}), Error);
    EXPECT_THROW(Value::array(static_cast<ValueType>(13), {}), Error);
    EXPECT_THROW(Value::array(ValueType::UINT8, {uint64_t{256}}), Error);
    EXPECT_THROW(Value::array(ValueType::INT8, {int64_t{-129}}), Error);
    EXPECT_THROW(Value::array(ValueType::UINT32, {int64_t{1}}), Error);
    EXPECT_THROW(Value::array(ValueType::FLOAT32, {0.1}), Error);  // not exactly a float
    EXPECT_THROW(Value::array(ValueType::STRING, {true}), Error);
    EXPECT_NO_THROW(Value::array(ValueType::FLOAT32, {0.5, std::nan("")}));
    EXPECT_EQ(Value::array(ValueType::INT16, {int64_t{-32768}, int64_t{32767}}).array_size(), 2u);
}

TEST(GgufValue, EqualityIsExact) {
    EXPECT_EQ(Value::u32(1), Value::u32(1));
    EXPECT_FALSE(Value::u32(1) == Value::i32(1));
    EXPECT_FALSE(Value::u32(1) == Value::u32(2));
    EXPECT_FALSE(Value::f32(0.f) == Value::f32(-0.f));
    EXPECT_FALSE(Value::i32_array({1, 2}) == Value::u32_array({1, 2}));
    EXPECT_FALSE(Value::i32_array({1, 2}) == Value::i32_array({1, 2, 3}));
}

TEST(GgufValue, DisplayStrings) {
    EXPECT_EQ(Value::u32(35).to_display_string(), "35");
    EXPECT_EQ(Value::i8(-3).to_display_string(), "-3");
    EXPECT_EQ(Value::f32(1e-6f).to_display_string(), "1e-06");
    EXPECT_EQ(Value::f32(30.f).to_display_string(), "30");
    EXPECT_EQ(Value::f64(0.1).to_display_string(), "0.1");
    EXPECT_EQ(Value::boolean(false).to_display_string(), "false");
    EXPECT_EQ(Value::string("a\"b\n\x01").to_display_string(), "\"a\\\"b\\n\\x01\"");
    EXPECT_EQ(Value::i32_array({1, 2, 3}).to_display_string(), "[1, 2, 3]");
    EXPECT_EQ(Value::i32_array({1, 2, 3, 4, 5}).to_display_string(2), "[1, 2, ... (3 more)]");
    EXPECT_EQ(Value::string_array({"x", "y", "z"}).to_display_string(1), "[\"x\", ... (2 more)]");
    EXPECT_EQ(Value::bool_array({}).to_display_string(), "[]");
    EXPECT_EQ(Value::f32_array({0.5f}).to_display_string(0), "[... (1 more)]");
}

TEST(GgufValue, TypeNames) {
    EXPECT_EQ(value_type_name(ValueType::FLOAT64), "FLOAT64");
    EXPECT_EQ(value_type_name(ValueType::ARRAY), "ARRAY");
    EXPECT_EQ(value_type_name(static_cast<ValueType>(99)), "UNKNOWN");
}
