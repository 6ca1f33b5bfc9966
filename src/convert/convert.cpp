#include "convert/convert.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "convert/gemma4_convert.h"
#include "convert/hf_config.h"
#include "convert/safetensors.h"
#include "convert/tokenizer_metadata.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

namespace hf2q::convert {
namespace {

namespace fs = std::filesystem;

// The file types the converter writes itself (ftype.h keeps the names and types).
bool direct_type(FileType t) {
    return !ftype::is_quantized(ftype::default_type(t));
}

bool ends_with(std::string_view s, std::string_view suf) {
    return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

// Bytes per element of the storage types the converter produces today.
size_t elem_size(GgmlType t) {
    switch (t) {
        case GgmlType::F32:
            return 4;
        case GgmlType::F16:
        case GgmlType::BF16:
            return 2;
        default:
            fail("internal error: the converter cannot write ", ggml_type_name(t), " yet");
    }
}

// Widens element i of a buffer of type S to f32 (unaligned-safe).
template <StDtype S>
float load_f32(const uint8_t* p, int64_t i) {
    if constexpr (S == StDtype::F32) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        return f;
    } else {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        if constexpr (S == StDtype::F16)
            return quant::fp16_to_fp32(h);
        else
            return quant::bf16_to_fp32(h);
    }
}

template <StDtype S, GgmlType D>
void convert_span(const uint8_t* in, uint8_t* out, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
        const float f = load_f32<S>(in, i);
        if constexpr (D == GgmlType::F32) {
            std::memcpy(out + 4 * i, &f, 4);
        } else {
            const uint16_t h = D == GgmlType::F16 ? quant::fp32_to_fp16(f) : quant::fp32_to_bf16(f);
            std::memcpy(out + 2 * i, &h, 2);
        }
    }
}

using SpanFn = void (*)(const uint8_t*, uint8_t*, int64_t, int64_t);

template <StDtype S>
SpanFn span_fn_for(GgmlType d) {
    switch (d) {
        case GgmlType::F32:
            return convert_span<S, GgmlType::F32>;
        case GgmlType::F16:
            return convert_span<S, GgmlType::F16>;
        case GgmlType::BF16:
            return convert_span<S, GgmlType::BF16>;
        default:
            fail("internal error: the converter cannot write ", ggml_type_name(d), " yet");
    }
}

// The element loop for one (source dtype, output type) pair, chosen once per tensor.
SpanFn span_fn(StDtype s, GgmlType d) {
    switch (s) {
        case StDtype::F32:
            return span_fn_for<StDtype::F32>(d);
        case StDtype::F16:
            return span_fn_for<StDtype::F16>(d);
        case StDtype::BF16:
            return span_fn_for<StDtype::BF16>(d);
    }
    fail("internal error: bad source dtype");
}

bool same_storage(StDtype s, GgmlType t) {
    return (s == StDtype::F32 && t == GgmlType::F32) || (s == StDtype::F16 && t == GgmlType::F16) ||
           (s == StDtype::BF16 && t == GgmlType::BF16);
}

// Streams one checkpoint tensor into the writer as type `dst`: identical storage is
// copied from the mapping; otherwise elements are widened to f32 and rounded to `dst`
// (ggml's rounding) in fixed-size chunks spread over the pool.
void write_tensor(const StTensor& src, GgmlType dst, ThreadPool& pool, gguf::Writer& w,
                  Progress& prog, std::vector<uint8_t>& buf) {
    constexpr uint64_t kCopySlice = 64ull << 20;
    if (same_storage(src.dtype, dst)) {
        for (uint64_t off = 0; off < src.nbytes(); off += kCopySlice) {
            uint64_t n = std::min(kCopySlice, src.nbytes() - off);
            w.write_tensor_data(src.data + off, n);
            prog.add(n);
        }
        return;
    }
    constexpr uint64_t kChunk = 4u << 20;  // elements per chunk
    const size_t in_sz = st_dtype_size(src.dtype), out_sz = elem_size(dst);
    const uint64_t n = src.n_elements();
    const SpanFn fn = span_fn(src.dtype, dst);
    buf.resize(std::min(n, kChunk) * out_sz);
    for (uint64_t c0 = 0; c0 < n; c0 += kChunk) {
        const uint64_t cn = std::min(kChunk, n - c0);
        const uint8_t* in = src.data + c0 * in_sz;
        uint8_t* out = buf.data();
        pool.parallel_for(static_cast<int64_t>(cn), 1 << 14,
                          [&](int64_t b, int64_t e, int) { fn(in, out, b, e); });
        w.write_tensor_data(out, cn * out_sz);
        prog.add(cn * out_sz);
    }
}

void check_output_path(const ConvertOptions& o, const Checkpoint& ck) {
    if (o.output_path.empty()) fail("no output path given");
    fs::path out(o.output_path);
    std::error_code ec;
    if (!fs::exists(out, ec)) return;
    if (fs::is_directory(out, ec)) fail("output ", o.output_path, " is a directory");
    std::vector<std::string> inputs = {
        (fs::path(o.input_dir) / "config.json").string(),
        (fs::path(o.input_dir) / "model.safetensors.index.json").string()};
    for (const auto& s : ck.shards()) inputs.push_back(s->path());
    for (const auto& in : inputs)
        if (fs::exists(in, ec) && fs::equivalent(in, out, ec))
            fail("output ", o.output_path, " is an input file of the conversion (", in,
                 "); refusing to overwrite it");
    if (!o.overwrite) fail("output ", o.output_path, " already exists (use --force to replace it)");
}

std::string default_model_name(const std::string& dir) {
    fs::path p = fs::absolute(fs::path(dir)).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    return p.filename().string();
}

void add_general_metadata(gguf::Writer& w, const ConvertOptions& o) {
    using gguf::Value;
    w.set("general.architecture", Value::string("gemma4"));
    w.set("general.type", Value::string("model"));
    w.set("general.name",
          Value::string(o.model_name.empty() ? default_model_name(o.input_dir) : o.model_name));
    w.set("general.file_type", Value::u32(static_cast<uint32_t>(o.out_type)));
}

uint64_t tensor_bytes(GgmlType t, const std::vector<int64_t>& ne) {
    auto row = ggml_row_size(t, static_cast<uint64_t>(ne[0]));
    if (!row)
        fail("internal error: row of ", ne[0], " elements does not fit type ", ggml_type_name(t));
    uint64_t n = *row;
    for (size_t i = 1; i < ne.size(); ++i) n *= static_cast<uint64_t>(ne[i]);
    return n;
}

}  // namespace

std::optional<FileType> file_type_from_name(std::string_view name) {
    const auto ft = ftype::file_type_from_name(name);
    if (ft && direct_type(*ft)) return ft;
    return std::nullopt;
}

std::vector<std::string> supported_file_type_names() {
    std::vector<std::string> r;
    for (const std::string& n : ftype::file_type_names())
        if (file_type_from_name(n)) r.push_back(n);
    return r;
}

GgmlType default_tensor_type(FileType t) {
    if (!direct_type(t))
        fail("internal error: the converter writes f32, f16 or bf16, not ", ftype::file_type_name(t),
             " (quantized types go through quantize_file)");
    return ftype::default_type(t);
}

GgmlType tensor_out_type(std::string_view name, uint32_t n_dims, FileType ft) {
    if (n_dims <= 1 || ends_with(name, "_norm.weight") || !ends_with(name, ".weight") ||
        ends_with(name, "ffn_gate_inp.weight"))
        return GgmlType::F32;
    return default_tensor_type(ft);
}

ConvertResult convert_hf_to_gguf(const ConvertOptions& o) {
    auto t0 = std::chrono::steady_clock::now();
    if (o.input_dir.empty()) fail("no input directory given");
    if (!fs::is_directory(o.input_dir)) fail("input ", o.input_dir, " is not a directory");
    Gemma4HfConfig cfg = load_hf_config(o.input_dir);
    auto ck = Checkpoint::open(o.input_dir);
    check_output_path(o, *ck);
    const uint32_t ple = resolve_ple_width(*ck, cfg);
    std::vector<PlannedTensor> plan = plan_gemma4_tensors(*ck, cfg, ple);

    gguf::Writer w;
    add_general_metadata(w, o);
    add_gemma4_metadata(w, cfg, ple);
    w.set("general.quantization_version", gguf::Value::u32(2));
    add_tokenizer_metadata(w, o.input_dir, o.log);

    ConvertResult res;
    std::vector<GgmlType> types;
    for (const auto& p : plan) {
        GgmlType t = p.src ? tensor_out_type(p.name, static_cast<uint32_t>(p.ne.size()), o.out_type)
                           : GgmlType::F32;
        w.add_tensor(p.name, t, p.ne);
        types.push_back(t);
        res.data_bytes += tensor_bytes(t, p.ne);
    }
    res.n_tensors = plan.size();
    if (o.log)
        o.log(str_cat("writing ", plan.size(), " tensors (", format_bytes(res.data_bytes), ") as ",
                      file_type_name(o.out_type), " to ", o.output_path));

    w.begin(o.output_path);
    ThreadPool pool(o.threads);
    Progress prog("convert", res.data_bytes, "B", o.progress);
    std::vector<uint8_t> buf;
    for (size_t i = 0; i < plan.size(); ++i) {
        const auto& p = plan[i];
        if (p.src) {
            write_tensor(*p.src, types[i], pool, w, prog, buf);
        } else {
            w.write_tensor_data(p.generated.data(), p.generated.size() * sizeof(float));
            prog.add(p.generated.size() * sizeof(float));
        }
    }
    w.finish();
    prog.finish();
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

}  // namespace hf2q::convert
