#include "core/ggml_type.h"

#include <array>
#include <cctype>

#include "core/error.h"

namespace hf2q {
namespace {

struct Entry {
    uint32_t id;
    GgmlTypeTraits traits;
};

constexpr std::array<Entry, 34> kTypes = {{
    {0, {"f32", 1, 4}},        {1, {"f16", 1, 2}},        {2, {"q4_0", 32, 18}},
    {3, {"q4_1", 32, 20}},     {6, {"q5_0", 32, 22}},     {7, {"q5_1", 32, 24}},
    {8, {"q8_0", 32, 34}},     {9, {"q8_1", 32, 36}},     {10, {"q2_K", 256, 84}},
    {11, {"q3_K", 256, 110}},  {12, {"q4_K", 256, 144}},  {13, {"q5_K", 256, 176}},
    {14, {"q6_K", 256, 210}},  {15, {"q8_K", 256, 292}},  {16, {"iq2_xxs", 256, 66}},
    {17, {"iq2_xs", 256, 74}}, {18, {"iq3_xxs", 256, 98}}, {19, {"iq1_s", 256, 50}},
    {20, {"iq4_nl", 32, 18}},  {21, {"iq3_s", 256, 110}}, {22, {"iq2_s", 256, 82}},
    {23, {"iq4_xs", 256, 136}}, {24, {"i8", 1, 1}},       {25, {"i16", 1, 2}},
    {26, {"i32", 1, 4}},       {27, {"i64", 1, 8}},       {28, {"f64", 1, 8}},
    {29, {"iq1_m", 256, 56}},  {30, {"bf16", 1, 2}},      {34, {"tq1_0", 256, 54}},
    {35, {"tq2_0", 256, 66}},  {39, {"mxfp4", 32, 17}},   {40, {"nvfp4", 64, 36}},
    {41, {"q1_0", 128, 18}},
}};

bool iequal(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
            return false;
    return true;
}

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id) {
    for (const auto& e : kTypes)
        if (e.id == id) return e.traits;
    return std::nullopt;
}

const GgmlTypeTraits& ggml_traits(GgmlType t) {
    for (const auto& e : kTypes)
        if (e.id == static_cast<uint32_t>(t)) return e.traits;
    fail("internal error: unknown ggml type id ", static_cast<uint32_t>(t));
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
    for (const auto& e : kTypes)
        if (iequal(e.traits.name, name)) return static_cast<GgmlType>(e.id);
    return std::nullopt;
}

std::optional<uint64_t> ggml_row_size(GgmlType t, uint64_t n) {
    const auto& tr = ggml_traits(t);
    if (n % tr.block_size != 0) return std::nullopt;
    return n / tr.block_size * tr.type_size;
}

}  // namespace hf2q
