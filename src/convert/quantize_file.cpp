// GGUF -> GGUF quantization driver (llama-quantize's behaviour, spec quant-formats.md
// §9-§10 and gguf-gemma4.md §1.7).
#include "convert/quantize_file.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

namespace hf2q::quantize {
namespace {

namespace fs = std::filesystem;
using gguf::Value;

bool ends_with(std::string_view s, std::string_view suf) {
    return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

bool same_file(const std::string& a, const std::string& b) {
    std::error_code ec;
    if (fs::exists(b, ec) && fs::equivalent(a, b, ec)) return true;
    return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

ftype::ModelParams model_params(const gguf::File& f) {
    const std::string arch = f.get_string("general.architecture");
    ftype::ModelParams m;
    m.n_layer = f.get_u32(arch + ".block_count");
    m.expert_count = f.get_u32_or(arch + ".expert_count", 0);
    m.n_gqa = 0;
    if (m.n_layer > 0 && f.has(arch + ".attention.head_count")) {
        auto heads = f.get_per_layer(arch + ".attention.head_count", m.n_layer);
        auto kv = f.has(arch + ".attention.head_count_kv")
                      ? f.get_per_layer(arch + ".attention.head_count_kv", m.n_layer)
                      : heads;
        if (kv[0] > 0 && heads[0] >= 0) m.n_gqa = static_cast<uint32_t>(heads[0] / kv[0]);
    }
    return m;
}

std::vector<float> read_f32(const gguf::TensorInfo& t) {
    if (t.type != GgmlType::F32)
        fail("imatrix tensor '", t.name, "' has type ", ggml_type_name(t.type), ", expected f32");
    std::vector<float> v(static_cast<size_t>(t.n_elements()));
    std::memcpy(v.data(), t.data, v.size() * sizeof(float));
    return v;
}

// Copies the input's metadata in order, then appends the keys llama-quantize sets
// (setting an existing key there deletes it and appends it again).
void write_metadata(gguf::Writer& w, const gguf::File& in, const QuantizeOptions& o,
                    const Imatrix* im) {
    for (const auto& kv : in.metadata()) {
        const std::string& k = kv.key;
        if (k == "general.quantization_version" || k == "general.file_type" ||
            k.rfind("split.", 0) == 0)
            continue;
        w.set(k, kv.value);
    }
    auto append = [&w](const char* k, Value v) {
        w.remove(k);
        w.set(k, std::move(v));
    };
    append("general.quantization_version", Value::u32(2));
    append("general.file_type", Value::u32(static_cast<uint32_t>(o.plan.ftype)));
    if (im) {
        append("quantize.imatrix.file", Value::string(o.imatrix_path));
        if (!im->datasets.empty())
            append("quantize.imatrix.dataset", Value::string(im->datasets[0]));
        append("quantize.imatrix.entries_count",
               Value::u32(static_cast<uint32_t>(im->entries.size())));
        append("quantize.imatrix.chunks_count", Value::u32(im->chunk_count));
    }
}

// The importance weights for one tensor, or nullptr (llama-quantize's rules, §9).
const float* imatrix_for(const Imatrix* im, const gguf::TensorInfo& t) {
    if (!im) return nullptr;
    auto it = im->entries.find(t.name);
    if (it == im->entries.end()) return nullptr;
    if (it->second.size() == static_cast<size_t>(t.ne[0] * t.ne[2])) return it->second.data();
    if (t.name == "token_embd.weight" || t.name == "per_layer_token_embd.weight") return nullptr;
    fail("imatrix has ", it->second.size(), " values for tensor '", t.name, "', expected ",
         t.ne[0] * t.ne[2]);
}

// Dequantizes rows [r0, r0 + nr) of `t` and quantizes them to `type`, one expert
// slice at a time so each slice gets its own importance weights.
void convert_rows(const gguf::TensorInfo& t, GgmlType type, const float* imat, int64_t r0,
                  int64_t nr, uint8_t* out, std::vector<float>& buf) {
    const int64_t n = t.ne[0], rows_per_expert = t.ne[1];
    const uint64_t in_row = t.row_bytes(), out_row = *ggml_row_size(type, static_cast<uint64_t>(n));
    buf.resize(static_cast<size_t>(nr * n));
    for (int64_t i = 0; i < nr; ++i)
        quant::dequantize_row(t.type, t.data + static_cast<uint64_t>(r0 + i) * in_row,
                              buf.data() + i * n, n);
    for (int64_t i = 0; i < nr;) {
        const int64_t expert = (r0 + i) / rows_per_expert;
        const int64_t end = std::min(nr, (expert + 1) * rows_per_expert - r0);
        const float* w = imat ? imat + (expert % t.ne[2]) * n : nullptr;
        quant::quantize(type, buf.data() + i * n, out + static_cast<uint64_t>(i) * out_row, end - i,
                        n, w);
        i = end;
    }
}

void write_tensor(gguf::Writer& w, ThreadPool& pool, const gguf::TensorInfo& t, GgmlType type,
                  const float* imat, Progress& prog) {
    if (type == t.type) {  // same type: bytes copied unchanged
        constexpr uint64_t kPiece = 64ull << 20;
        for (uint64_t off = 0; off < t.nbytes; off += kPiece) {
            const uint64_t n = std::min(kPiece, t.nbytes - off);
            w.write_tensor_data(t.data + off, n);
            prog.add(n);
        }
        return;
    }
    const int64_t n = t.ne[0], nrows = t.ne[1] * t.ne[2] * t.ne[3];
    const uint64_t out_row = *ggml_row_size(type, static_cast<uint64_t>(n));
    const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 23) / n);  // 32 MiB of f32
    std::vector<uint8_t> out;
    std::vector<std::vector<float>> scratch(static_cast<size_t>(pool.size()));
    for (int64_t r0 = 0; r0 < nrows; r0 += chunk) {
        const int64_t nr = std::min(chunk, nrows - r0);
        out.resize(static_cast<size_t>(nr) * out_row);
        pool.parallel_for(nr, std::max<int64_t>(1, nr / (4 * pool.size())),
                          [&](int64_t b, int64_t e, int ti) {
                              convert_rows(t, type, imat, r0 + b, e - b,
                                           out.data() + static_cast<uint64_t>(b) * out_row,
                                           scratch[static_cast<size_t>(ti)]);
                          });
        w.write_tensor_data(out.data(), out.size());
        prog.add(out.size());
    }
}

}  // namespace

Imatrix load_imatrix(const std::string& path) {
    auto f = gguf::File::open(path);
    Imatrix im;
    for (const auto& t : f->tensors()) {
        if (!ends_with(t.name, ".in_sum2")) continue;
        const std::string base = t.name.substr(0, t.name.size() - 8);
        const auto* c = f->find_tensor(base + ".counts");
        if (!c) fail("imatrix '", path, "': tensor '", t.name, "' has no '", base, ".counts'");
        const int64_t n = t.ne[0], n_mat = t.ne[1];
        if (t.ne[2] != 1 || t.ne[3] != 1 || c->ne[0] != 1 || c->ne[1] != n_mat || c->ne[2] != 1 ||
            c->ne[3] != 1)
            fail("imatrix '", path, "': shapes of '", t.name, "' and its counts do not match");
        const auto sums = read_f32(t), counts = read_f32(*c);
        std::vector<float> e(static_cast<size_t>(n * n_mat));
        for (int64_t j = 0; j < n_mat; ++j) {
            const float cnt = counts[static_cast<size_t>(j)];
            for (int64_t i = 0; i < n; ++i) {
                const size_t k = static_cast<size_t>(j * n + i);
                e[k] = cnt == 0.0f ? 1.0f : sums[k] / cnt;
                if (!std::isfinite(e[k]))
                    fail("imatrix '", path, "': non-finite value for '", base, "' matrix ", j,
                         " column ", i);
            }
        }
        im.entries.emplace(base, std::move(e));
    }
    if (im.entries.empty())
        fail("imatrix '", path,
             "': no '<tensor>.in_sum2' entries (only the GGUF imatrix format is supported)");
    if (const auto* d = f->find("imatrix.datasets");
        d && d->is_array() && d->elem_type() == gguf::ValueType::STRING)
        im.datasets = d->strings();
    im.chunk_count = f->get_u32_or("imatrix.chunk_count", 0);
    return im;
}

QuantizeResult quantize_gguf(const QuantizeOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    if (o.output_path.empty()) fail("quantize: no output path");
    if (same_file(o.input_path, o.output_path))
        fail("quantize: the output '", o.output_path, "' is the input file");
    if (!o.overwrite && fs::exists(o.output_path))
        fail("'", o.output_path, "' exists (use --force to replace it)");
    auto in = gguf::File::open(o.input_path);
    std::unique_ptr<Imatrix> im;
    if (!o.imatrix_path.empty()) im = std::make_unique<Imatrix>(load_imatrix(o.imatrix_path));

    gguf::Writer w;
    write_metadata(w, *in, o, im.get());

    std::vector<std::string> names;
    for (const auto& t : in->tensors()) names.push_back(t.name);
    const auto order = ftype::quantize_order(names);
    std::vector<ftype::TensorDesc> descs;
    for (size_t i : order) {
        const auto& t = in->tensors()[i];
        descs.push_back(
            ftype::make_tensor_desc(t.name, std::vector<int64_t>(t.ne, t.ne + 4), t.type));
    }
    ftype::PlanOptions plan = o.plan;
    plan.has_imatrix = im != nullptr;
    ftype::TypePlanner planner(model_params(*in), plan, descs);

    QuantizeResult r;
    std::vector<GgmlType> types;
    std::vector<const float*> imats;
    uint64_t total = 0;
    for (size_t k = 0; k < order.size(); ++k) {
        const auto& t = in->tensors()[order[k]];
        const GgmlType type = planner.type_for(descs[k]);
        if (type != t.type) {
            if (ftype::is_quantized(t.type) && !o.allow_requantize)
                fail("tensor '", t.name, "' is already quantized (", ggml_type_name(t.type),
                     "); requantizing needs --allow-requantize");
            if (!quant::is_supported(t.type))
                fail("tensor '", t.name, "': cannot convert from type ", ggml_type_name(t.type));
            ++r.n_requantized;
        }
        imats.push_back(type != t.type && ftype::is_quantized(type) ? imatrix_for(im.get(), t)
                                                                    : nullptr);
        types.push_back(type);
        w.add_tensor(t.name, type, std::vector<int64_t>(t.ne, t.ne + descs[k].n_dims));
        total += static_cast<uint64_t>(t.ne[1] * t.ne[2] * t.ne[3]) *
                 *ggml_row_size(type, static_cast<uint64_t>(t.ne[0]));
        r.in_bytes += t.nbytes;
    }

    w.begin(o.output_path);
    ThreadPool pool(o.threads);
    Progress prog("quantize", total, "B", o.progress);
    for (size_t k = 0; k < order.size(); ++k)
        write_tensor(w, pool, in->tensors()[order[k]], types[k], imats[k], prog);
    w.finish();
    prog.finish();
    r.n_tensors = order.size();
    r.out_bytes = total;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace hf2q::quantize
