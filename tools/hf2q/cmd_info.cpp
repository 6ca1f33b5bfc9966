// hf2q info: print a GGUF file's header, metadata, tensor table and totals, as text or
// as one JSON object (--json). Long arrays and strings are abbreviated in text output;
// --max-elems sets how many array elements are shown (0 = all).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "args.h"
#include "command.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/summary.h"

namespace hf2q::cli {
namespace {

using gguf::Value;
using gguf::ValueType;

struct InfoOptions {
    std::string path;
    bool json = false;
    bool no_tensors = false;
    int64_t max_elems = 8;
};

constexpr size_t kMaxStringChars = 160;

std::string type_label(const Value& v) {
    if (!v.is_array()) return std::string(gguf::value_type_name(v.type()));
    return str_cat("ARRAY[", gguf::value_type_name(v.elem_type()), "]");
}

std::string shape_string(const gguf::TensorInfo& t) {
    std::string s = "[";
    for (uint32_t j = 0; j < t.n_dims; ++j) s += str_cat(j ? ", " : "", t.ne[j]);
    return s + "]";
}

// Cuts a display string to about kMaxStringChars without splitting a UTF-8 sequence.
std::string abbreviate(std::string s) {
    if (s.size() <= kMaxStringChars) return s;
    size_t cut = kMaxStringChars;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
    const size_t total = s.size();
    s.resize(cut);
    return str_cat(s, "... (", total, " chars)");
}

std::string display_value(const std::string& key, const Value& v, size_t max_elems) {
    std::string s = abbreviate(v.to_display_string(max_elems));
    if (key == "general.file_type" && v.type() == ValueType::UINT32)
        s += str_cat(" (", gguf::llama_ftype_name(v.as_u32(key)), ")");
    return s;
}

void print_text(const gguf::File& f, const InfoOptions& o) {
    const size_t max_elems = o.max_elems > 0 ? static_cast<size_t>(o.max_elems) : SIZE_MAX;
    std::printf("file:        %s\n", f.name().c_str());
    std::printf("version:     %u\n", f.version());
    std::printf("alignment:   %u\n", f.alignment());
    std::printf("file size:   %" PRIu64 " bytes (%s)\n", f.file_size(), gguf::human_bytes(f.file_size()).c_str());
    std::printf("data offset: %" PRIu64 "\n", f.data_offset());
    std::printf("\nmetadata: %zu keys\n", f.metadata().size());
    size_t key_w = 0;
    for (const auto& kv : f.metadata()) key_w = std::max(key_w, kv.key.size());
    for (const auto& kv : f.metadata())
        std::printf("  %-*s  %-14s %s\n", static_cast<int>(key_w), kv.key.c_str(), type_label(kv.value).c_str(),
                    display_value(kv.key, kv.value, max_elems).c_str());

    if (!o.no_tensors) {
        std::printf("\ntensors: %zu\n", f.tensors().size());
        if (!f.tensors().empty())
            std::printf("  %5s  %-48s %-8s %-24s %14s\n", "#", "name", "type", "shape (ggml order)", "bytes");
        for (size_t i = 0; i < f.tensors().size(); ++i) {
            const auto& t = f.tensors()[i];
            std::printf("  %5zu  %-48s %-8s %-24s %14" PRIu64 "\n", i, t.name.c_str(),
                        std::string(ggml_type_name(t.type)).c_str(), shape_string(t).c_str(), t.nbytes);
        }
    }

    const gguf::Summary s = gguf::summarize(f);
    std::printf("\ntotals:\n");
    std::printf("  tensors:         %" PRIu64 "\n", s.n_tensors);
    std::printf("  parameters:      %s (%" PRIu64 ")\n", gguf::human_count(s.n_elements).c_str(), s.n_elements);
    std::printf("  tensor bytes:    %" PRIu64 " (%s)\n", s.n_bytes, gguf::human_bytes(s.n_bytes).c_str());
    std::printf("  bits per weight: %.3f\n", s.bits_per_weight());
    for (const auto& t : s.by_type) {
        const double bpw = t.n_elements ? 8.0 * double(t.n_bytes) / double(t.n_elements) : 0.0;
        std::printf("  %-8s %6" PRIu64 " tensors %12s params %12s  %.3f bpw\n",
                    std::string(ggml_type_name(t.type)).c_str(), t.n_tensors, gguf::human_count(t.n_elements).c_str(),
                    gguf::human_bytes(t.n_bytes).c_str(), bpw);
    }
}

nlohmann::json scalar_json(const Value::Scalar& s) {
    if (auto* u = std::get_if<uint64_t>(&s)) return *u;
    if (auto* i = std::get_if<int64_t>(&s)) return *i;
    if (auto* d = std::get_if<double>(&s)) return *d;  // NaN/Inf become null
    if (auto* b = std::get_if<bool>(&s)) return *b;
    return std::get<std::string>(s);
}

nlohmann::json value_json(const std::string& key, const Value& v, size_t max_elems) {
    nlohmann::json j;
    j["key"] = key;
    j["type"] = std::string(gguf::value_type_name(v.type()));
    if (!v.is_array()) {
        j["value"] = scalar_json(v.scalar());
        if (key == "general.file_type" && v.type() == ValueType::UINT32)
            j["file_type_name"] = gguf::llama_ftype_name(v.as_u32(key));
        return j;
    }
    j["elem_type"] = std::string(gguf::value_type_name(v.elem_type()));
    j["count"] = v.array_size();
    const size_t n = std::min(v.array_size(), max_elems);
    nlohmann::json arr = nlohmann::json::array();
    for (size_t i = 0; i < n; ++i)
        arr.push_back(v.elem_type() == ValueType::STRING ? nlohmann::json(v.strings()[i]) : scalar_json(v.elems()[i]));
    j["values"] = std::move(arr);
    j["truncated"] = n < v.array_size();
    return j;
}

void print_json(const gguf::File& f, const InfoOptions& o) {
    const size_t max_elems = o.max_elems > 0 ? static_cast<size_t>(o.max_elems) : SIZE_MAX;
    nlohmann::json j;
    j["file"] = f.name();
    j["version"] = f.version();
    j["alignment"] = f.alignment();
    j["file_size"] = f.file_size();
    j["data_offset"] = f.data_offset();
    nlohmann::json md = nlohmann::json::array();
    for (const auto& kv : f.metadata()) md.push_back(value_json(kv.key, kv.value, max_elems));
    j["metadata"] = std::move(md);
    if (!o.no_tensors) {
        nlohmann::json ts = nlohmann::json::array();
        for (const auto& t : f.tensors())
            ts.push_back({{"name", t.name},
                          {"type", std::string(ggml_type_name(t.type))},
                          {"shape", std::vector<int64_t>(t.ne, t.ne + t.n_dims)},
                          {"offset", t.offset},
                          {"bytes", t.nbytes}});
        j["tensors"] = std::move(ts);
    }
    const gguf::Summary s = gguf::summarize(f);
    nlohmann::json by_type = nlohmann::json::array();
    for (const auto& t : s.by_type)
        by_type.push_back({{"type", std::string(ggml_type_name(t.type))},
                           {"tensors", t.n_tensors},
                           {"parameters", t.n_elements},
                           {"bytes", t.n_bytes}});
    j["totals"] = {{"tensors", s.n_tensors},
                   {"parameters", s.n_elements},
                   {"parameters_human", gguf::human_count(s.n_elements)},
                   {"bytes", s.n_bytes},
                   {"bits_per_weight", s.bits_per_weight()},
                   {"by_type", std::move(by_type)}};
    std::printf("%s\n", j.dump(2).c_str());
}

int run_info(const std::vector<std::string>& args) {
    InfoOptions o;
    ArgParser p("info", "FILE.gguf [--json] [--no-tensors]",
                "Show a GGUF file's header, metadata (with types), tensors and totals.");
    p.positional("FILE", "GGUF file to inspect", &o.path);
    p.flag("--json", "print one JSON object instead of text", &o.json);
    p.flag("--no-tensors", "leave out the tensor table", &o.no_tensors);
    p.option("--max-elems", "N", "array elements shown per key (0 = all)", &o.max_elems);
    if (!p.parse(args)) return 0;
    if (o.max_elems < 0) fail("--max-elems must be >= 0");
    auto f = gguf::File::open(o.path);
    if (o.json)
        print_json(*f, o);
    else
        print_text(*f, o);
    return 0;
}

}  // namespace

HF2Q_COMMAND(info, "show a GGUF file's metadata and tensors", run_info);

}  // namespace hf2q::cli
