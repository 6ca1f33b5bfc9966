// hf2q quantize (GGUF -> GGUF): output equals the synthesizer's direct output, refusal
// rules, and importance-matrix handling.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "convert/ftype.h"
#include "convert/quantize_file.h"
#include "convert/synth.h"
#include "synth/synth_test_util.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

namespace hf2q::quantize {
namespace {

namespace fs = std::filesystem;
using synth_test::read_all;
using synth_test::TempDir;
using ftype::FileType;

void synth(const fs::path& out, FileType ft, uint64_t seed = 3) {
    synth::SynthOptions o;
    o.preset = "tiny";
    o.ftype = ft;
    o.seed = seed;
    o.output_path = out.string();
    o.threads = 2;
    o.progress = false;
    synth::synth_model(o);
}

QuantizeOptions qopts(const fs::path& in, const fs::path& out, FileType ft) {
    QuantizeOptions o;
    o.input_path = in.string();
    o.output_path = out.string();
    o.plan.ftype = ft;
    o.threads = 2;
    o.progress = false;
    return o;
}

// Quantizing the F32 synthetic model gives byte for byte the file the synthesizer
// writes for that ftype directly: same metadata order, tensor order and bytes.
TEST(QuantizeFile, F32InputMatchesDirectSynth) {
    TempDir d("quantize");
    synth(d.path() / "f32.gguf", FileType::ALL_F32);
    synth(d.path() / "direct.gguf", FileType::MOSTLY_Q4_0);
    auto r = quantize_gguf(qopts(d.path() / "f32.gguf", d.path() / "q.gguf", FileType::MOSTLY_Q4_0));
    EXPECT_GT(r.n_requantized, 0u);
    EXPECT_LT(r.out_bytes, r.in_bytes);
    const std::string q = read_all(d.path() / "q.gguf"), direct = read_all(d.path() / "direct.gguf");
    ASSERT_EQ(q.size(), direct.size());
    EXPECT_TRUE(q == direct);
    auto f = gguf::File::open((d.path() / "q.gguf").string());
    EXPECT_EQ(f->metadata().back().key, "general.file_type");
    EXPECT_EQ(f->get_u32("general.file_type"), 2u);
    EXPECT_EQ(f->find_tensor("token_embd.weight")->type, GgmlType::Q6_K);
    EXPECT_EQ(f->find_tensor("blk.0.attn_v.weight")->type, GgmlType::Q8_0);  // 8 experts
    EXPECT_EQ(f->find_tensor("blk.0.ffn_up.weight")->type, GgmlType::Q4_0);
}

TEST(QuantizeFile, Refusals) {
    TempDir d("quantize");
    synth(d.path() / "f32.gguf", FileType::ALL_F32);
    // Never the input, however it is spelled.
    EXPECT_THROW(
        quantize_gguf(qopts(d.path() / "f32.gguf", d.path() / "f32.gguf", FileType::MOSTLY_Q8_0)),
        Error);
    EXPECT_THROW(
        quantize_gguf(qopts(d.path() / "f32.gguf", d.path() / "." / "f32.gguf", FileType::MOSTLY_Q8_0)),
        Error);
    auto o = qopts(d.path() / "f32.gguf", d.path() / "q.gguf", FileType::MOSTLY_Q4_0);
    quantize_gguf(o);
    EXPECT_THROW(quantize_gguf(o), Error);  // exists, no overwrite

    // Quantized input needs --allow-requantize.
    auto rq = qopts(d.path() / "q.gguf", d.path() / "q8.gguf", FileType::MOSTLY_Q8_0);
    EXPECT_THROW(quantize_gguf(rq), Error);
    EXPECT_FALSE(fs::exists(d.path() / "q8.gguf"));
    rq.allow_requantize = true;
    quantize_gguf(rq);
    auto f = gguf::File::open((d.path() / "q8.gguf").string());
    EXPECT_EQ(f->find_tensor("blk.0.ffn_up.weight")->type, GgmlType::Q8_0);
    EXPECT_EQ(f->find_tensor("blk.0.attn_norm.weight")->type, GgmlType::F32);
    EXPECT_EQ(f->get_u32("general.file_type"), 7u);

    // Overrides reach the planner.
    auto ov = qopts(d.path() / "f32.gguf", d.path() / "ov.gguf", FileType::MOSTLY_Q4_0);
    ov.plan.tensor_types = {ftype::parse_type_override("ffn_up=q5_1")};
    ov.plan.output_tensor_type = GgmlType::Q8_0;
    quantize_gguf(ov);
    auto g = gguf::File::open((d.path() / "ov.gguf").string());
    EXPECT_EQ(g->find_tensor("blk.2.ffn_up.weight")->type, GgmlType::Q5_1);
    EXPECT_EQ(g->find_tensor("token_embd.weight")->type, GgmlType::Q8_0);
}

void write_imatrix(const fs::path& p,
                   const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes,
                   const std::vector<std::vector<float>>& sums,
                   const std::vector<std::vector<float>>& counts) {
    gguf::Writer w;
    w.set("general.type", gguf::Value::string("imatrix"));
    w.set("imatrix.datasets", gguf::Value::string_array({"calib.txt"}));
    w.set("imatrix.chunk_count", gguf::Value::u32(12));
    for (const auto& [name, ne] : shapes) {
        w.add_tensor(name + ".in_sum2", GgmlType::F32, ne);
        w.add_tensor(name + ".counts", GgmlType::F32, {1, ne[1]});
    }
    w.begin(p.string());
    for (size_t i = 0; i < shapes.size(); ++i) {
        w.write_tensor_data(sums[i].data(), sums[i].size() * 4);
        w.write_tensor_data(counts[i].data(), counts[i].size() * 4);
    }
    w.finish();
}

// Expected bytes of rows [r0, r0 + n) of an F32 tensor quantized with weights w.
std::vector<uint8_t> expect_rows(const gguf::TensorInfo& t, GgmlType type, int64_t r0, int64_t n,
                                 const float* w) {
    std::vector<float> x(static_cast<size_t>(n * t.ne[0]));
    std::memcpy(x.data(), t.data + r0 * t.ne[0] * 4, x.size() * 4);
    std::vector<uint8_t> out(static_cast<size_t>(n) * *ggml_row_size(type, t.ne[0]));
    quant::quantize(type, x.data(), out.data(), n, t.ne[0], w);
    return out;
}

TEST(QuantizeFile, Imatrix) {
    TempDir d("quantize");
    synth(d.path() / "f32.gguf", FileType::ALL_F32);
    auto in = gguf::File::open((d.path() / "f32.gguf").string());
    const auto* q = in->find_tensor("blk.0.attn_q.weight");            // [256, 1024]
    const auto* e = in->find_tensor("blk.1.ffn_gate_up_exps.weight");  // [256, 256, 8]
    ASSERT_TRUE(q && e);
    std::vector<float> qs(256), es(256 * 8), qc = {4.0f}, ec(8);
    for (int i = 0; i < 256; ++i) qs[i] = 4.0f * (1.0f + float(i % 7));
    for (int j = 0; j < 8; ++j) {
        ec[j] = j == 3 ? 0.0f : 2.0f;  // expert 3 never routed: all-ones weights
        for (int i = 0; i < 256; ++i) es[j * 256 + i] = float((i * (j + 1)) % 11 + 1);
    }
    write_imatrix(d.path() / "im.gguf",
                  {{"blk.0.attn_q.weight", {256, 1}}, {"blk.1.ffn_gate_up_exps.weight", {256, 8}}},
                  {qs, es}, {qc, ec});

    auto o = qopts(d.path() / "f32.gguf", d.path() / "q.gguf", FileType::MOSTLY_Q4_0);
    o.imatrix_path = (d.path() / "im.gguf").string();
    quantize_gguf(o);
    auto f = gguf::File::open(o.output_path);
    EXPECT_EQ(f->get_string("quantize.imatrix.file"), o.imatrix_path);
    EXPECT_EQ(f->get_string("quantize.imatrix.dataset"), "calib.txt");
    EXPECT_EQ(f->get_u32("quantize.imatrix.entries_count"), 2u);
    EXPECT_EQ(f->get_u32("quantize.imatrix.chunks_count"), 12u);
    EXPECT_EQ(f->metadata().back().key, "quantize.imatrix.chunks_count");

    std::vector<float> wq(256);
    for (int i = 0; i < 256; ++i) wq[i] = qs[i] / 4.0f;
    const auto* oq = f->find_tensor("blk.0.attn_q.weight");
    ASSERT_EQ(oq->type, GgmlType::Q4_0);
    auto want = expect_rows(*q, GgmlType::Q4_0, 0, 1024, wq.data());
    EXPECT_EQ(0, std::memcmp(oq->data, want.data(), want.size()));
    auto plain = expect_rows(*q, GgmlType::Q4_0, 0, 1024, nullptr);
    EXPECT_NE(0, std::memcmp(oq->data, plain.data(), plain.size()));

    const auto* oe = f->find_tensor("blk.1.ffn_gate_up_exps.weight");
    const uint64_t slice = 256 * *ggml_row_size(oe->type, 256);
    for (int j = 0; j < 8; ++j) {
        std::vector<float> wj(256);
        for (int i = 0; i < 256; ++i) wj[i] = ec[j] == 0.0f ? 1.0f : es[j * 256 + i] / ec[j];
        auto wantj = expect_rows(*e, oe->type, j * 256, 256, wj.data());
        EXPECT_EQ(0, std::memcmp(oe->data + j * slice, wantj.data(), slice)) << "expert " << j;
    }

    // A size mismatch is an error.
    write_imatrix(d.path() / "bad.gguf", {{"blk.0.attn_q.weight", {128, 1}}},
                  {std::vector<float>(128, 1.0f)}, {qc});
    auto b = qopts(d.path() / "f32.gguf", d.path() / "b.gguf", FileType::MOSTLY_Q4_0);
    b.imatrix_path = (d.path() / "bad.gguf").string();
    EXPECT_THROW(quantize_gguf(b), Error);
    EXPECT_THROW(load_imatrix((d.path() / "f32.gguf").string()), Error);  // not an imatrix
}

}  // namespace
}  // namespace hf2q::quantize
