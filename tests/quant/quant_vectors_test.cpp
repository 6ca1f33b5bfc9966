// Reference vectors from ggml (testdata/quant, see its README): every quantized byte and every
// dequantized bit must match, with and without the importance matrix.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/ggml_type.h"
#include "quant/quant.h"

namespace hf2q::quant {
namespace {

const std::string kDir = std::string(HF2Q_TESTDATA_DIR) + "/quant/";

std::vector<uint8_t> read_file(const std::string& name) {
    std::ifstream f(kDir + name, std::ios::binary);
    if (!f) return {};
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<float> read_f32(const std::string& name) {
    const auto bytes = read_file(name);
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
}

struct Vectors {
    nlohmann::json manifest;
    int64_t rows = 0;
    int64_t n = 0;
    std::vector<float> input;
    std::vector<float> imatrix;
};

const Vectors& vectors() {
    static const Vectors v = [] {
        Vectors r;
        const auto text = read_file("manifest.json");
        r.manifest = nlohmann::json::parse(text.begin(), text.end());
        r.rows = r.manifest.at("rows").get<int64_t>();
        r.n = r.manifest.at("n_per_row").get<int64_t>();
        r.input = read_f32(r.manifest.at("input").get<std::string>());
        r.imatrix = read_f32(r.manifest.at("imatrix").get<std::string>());
        return r;
    }();
    return v;
}

const nlohmann::json* manifest_entry(const std::string& name) {
    for (const auto& t : vectors().manifest.at("types"))
        if (t.at("name").get<std::string>() == name) return &t;
    return nullptr;
}

// Empty string when equal; else where the first byte differs.
std::string first_mismatch(const std::string& label, const std::vector<uint8_t>& want,
                           const std::vector<uint8_t>& got, size_t row_bytes, size_t block_bytes) {
    if (want.size() != got.size())
        return label + ": size " + std::to_string(got.size()) + " != expected " +
               std::to_string(want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        if (want[i] == got[i]) continue;
        const size_t off = i % row_bytes;
        return label + ": first mismatch at row " + std::to_string(i / row_bytes) +
               ", byte offset " + std::to_string(off) + " (block " +
               std::to_string(off / block_bytes) + ", byte " + std::to_string(off % block_bytes) +
               "): got " + std::to_string(got[i]) + ", expected " + std::to_string(want[i]);
    }
    return {};
}

class QuantVectors : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        const auto& v = vectors();
        ASSERT_EQ(v.input.size(), static_cast<size_t>(v.rows * v.n))
            << "missing " << kDir << "input.f32";
        ASSERT_EQ(v.imatrix.size(), static_cast<size_t>(v.n));
        entry_ = manifest_entry(GetParam());
        ASSERT_NE(entry_, nullptr) << GetParam() << " not in manifest.json";
        const auto t = ggml_type_from_name(GetParam());
        ASSERT_TRUE(t.has_value());
        type_ = *t;
        ASSERT_EQ(static_cast<uint32_t>(type_), entry_->at("ggml_type").get<uint32_t>());
        ASSERT_EQ(ggml_traits(type_).block_size, entry_->at("block_size").get<uint32_t>());
        ASSERT_EQ(ggml_traits(type_).type_size, entry_->at("type_size").get<uint32_t>());
        row_bytes_ = entry_->at("row_bytes").get<size_t>();
        ASSERT_EQ(row_bytes_, *ggml_row_size(type_, static_cast<uint64_t>(v.n)));
    }

    std::vector<uint8_t> quantize_input(const float* imatrix) const {
        const auto& v = vectors();
        std::vector<uint8_t> out(row_bytes_ * static_cast<size_t>(v.rows));
        const size_t written = quantize(type_, v.input.data(), out.data(), v.rows, v.n, imatrix);
        EXPECT_EQ(written, out.size());
        return out;
    }

    const nlohmann::json* entry_ = nullptr;
    GgmlType type_ = GgmlType::F32;
    size_t row_bytes_ = 0;
};

TEST_P(QuantVectors, QuantizeMatchesReference) {
    const auto want = read_file(entry_->at("q").get<std::string>());
    ASSERT_FALSE(want.empty());
    const auto got = quantize_input(nullptr);
    const std::string msg =
        first_mismatch(GetParam(), want, got, row_bytes_, ggml_traits(type_).type_size);
    EXPECT_TRUE(msg.empty()) << msg;
}

TEST_P(QuantVectors, QuantizeWithImatrixMatchesReference) {
    if (!entry_->contains("q_imatrix")) {
        // Float types take no importance weights: the output must not depend on them.
        EXPECT_EQ(quantize_input(vectors().imatrix.data()), quantize_input(nullptr));
        return;
    }
    const auto want = read_file(entry_->at("q_imatrix").get<std::string>());
    ASSERT_FALSE(want.empty());
    const auto got = quantize_input(vectors().imatrix.data());
    const std::string msg = first_mismatch(GetParam() + " (imatrix)", want, got, row_bytes_,
                                           ggml_traits(type_).type_size);
    EXPECT_TRUE(msg.empty()) << msg;
}

TEST_P(QuantVectors, DequantizeMatchesReferenceBitForBit) {
    const auto& v = vectors();
    const auto q = read_file(entry_->at("q").get<std::string>());
    const auto want = read_file(entry_->at("deq").get<std::string>());
    ASSERT_EQ(q.size(), row_bytes_ * static_cast<size_t>(v.rows));
    ASSERT_EQ(want.size(), static_cast<size_t>(v.rows * v.n) * 4);
    // Decode from an odd address: blocks carry no alignment guarantee.
    std::vector<uint8_t> shifted(q.size() + 1);
    std::memcpy(shifted.data() + 1, q.data(), q.size());
    std::vector<float> got(static_cast<size_t>(v.n));
    for (int64_t r = 0; r < v.rows; ++r) {
        dequantize_row(type_, shifted.data() + 1 + static_cast<size_t>(r) * row_bytes_, got.data(),
                       v.n);
        for (int64_t i = 0; i < v.n; ++i) {
            uint32_t g = 0;
            uint32_t w = 0;
            std::memcpy(&g, &got[static_cast<size_t>(i)], 4);
            std::memcpy(&w, want.data() + (static_cast<size_t>(r * v.n + i)) * 4, 4);
            ASSERT_EQ(g, w) << GetParam() << ": row " << r << " element " << i << " got "
                            << got[static_cast<size_t>(i)] << " (bits " << std::hex << g
                            << "), expected bits " << w;
        }
    }
}

TEST_P(QuantVectors, VecDotAgreesWithDequantizeThenDot) {
    const auto& v = vectors();
    const auto q = read_file(entry_->at("q").get<std::string>());
    ASSERT_EQ(q.size(), row_bytes_ * static_cast<size_t>(v.rows));
    std::mt19937 rng(1234);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(v.n));
    std::vector<float> deq(static_cast<size_t>(v.n));
    for (int64_t r = 0; r < v.rows; ++r) {
        for (auto& e : x) e = gauss(rng);
        const uint8_t* row = q.data() + static_cast<size_t>(r) * row_bytes_;
        dequantize_row(type_, row, deq.data(), v.n);
        double ref = 0.0;
        double mag = 0.0;
        for (size_t i = 0; i < x.size(); ++i) {
            ref += static_cast<double>(deq[i]) * x[i];
            mag += std::fabs(static_cast<double>(deq[i]) * x[i]);
        }
        const float got = vec_dot_f32(type_, row, x.data(), v.n);
        EXPECT_LE(std::fabs(got - ref), 1e-5 * mag + 1e-30)
            << GetParam() << " row " << r << ": vec_dot " << got << " vs " << ref;
        if (r == 3) {
            EXPECT_EQ(got, 0.0f) << "row 3 of input.f32 is all zeros";
        }
    }
}

const std::vector<std::string> kTypes = {"f16",  "bf16", "q4_0",   "q4_1",   "q5_0",
                                         "q5_1", "q8_0", "q2_K",   "q3_K",   "q4_K",
                                         "q5_K", "q6_K", "iq4_nl", "iq4_xs", "mxfp4"};

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantVectors, ::testing::ValuesIn(kTypes),
                         [](const auto& p) { return p.param; });

// The parameter list above must cover exactly the manifest's types.
TEST(QuantVectorsManifest, ListsTheTestedTypes) {
    std::vector<std::string> names;
    for (const auto& t : vectors().manifest.at("types"))
        names.push_back(t.at("name").get<std::string>());
    EXPECT_EQ(names, kTypes);
    for (const auto& n : names) {
        const auto t = ggml_type_from_name(n);
        ASSERT_TRUE(t.has_value()) << n;
        EXPECT_TRUE(is_supported(*t)) << n;
    }
}

}  // namespace
}  // namespace hf2q::quant
