// llama_ftype names and llama-quantize's per-tensor type choice. The rule text lives
// in spec quant-formats.md §10; comments below give the rule numbers used there.
// GCC 12 reports a false -Wmaybe-uninitialized inside <regex> (the std::function in an
// NFA state) when optimizing with sanitizers; the pragma must precede every include.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "convert/ftype.h"

#include <algorithm>
#include <cctype>
#include <regex>

#include "core/error.h"

namespace hf2q::ftype {
namespace {

struct FtInfo {
    FileType ft;
    std::string_view name;
    GgmlType type;
};

constexpr FtInfo kFileTypes[] = {
    {FileType::ALL_F32, "f32", GgmlType::F32},
    {FileType::MOSTLY_F16, "f16", GgmlType::F16},
    {FileType::MOSTLY_Q4_0, "q4_0", GgmlType::Q4_0},
    {FileType::MOSTLY_Q4_1, "q4_1", GgmlType::Q4_1},
    {FileType::MOSTLY_Q8_0, "q8_0", GgmlType::Q8_0},
    {FileType::MOSTLY_Q5_0, "q5_0", GgmlType::Q5_0},
    {FileType::MOSTLY_Q5_1, "q5_1", GgmlType::Q5_1},
    {FileType::MOSTLY_Q2_K, "q2_k", GgmlType::Q2_K},
    {FileType::MOSTLY_Q3_K_S, "q3_k_s", GgmlType::Q3_K},
    {FileType::MOSTLY_Q3_K_M, "q3_k_m", GgmlType::Q3_K},
    {FileType::MOSTLY_Q3_K_L, "q3_k_l", GgmlType::Q3_K},
    {FileType::MOSTLY_Q4_K_S, "q4_k_s", GgmlType::Q4_K},
    {FileType::MOSTLY_Q4_K_M, "q4_k_m", GgmlType::Q4_K},
    {FileType::MOSTLY_Q5_K_S, "q5_k_s", GgmlType::Q5_K},
    {FileType::MOSTLY_Q5_K_M, "q5_k_m", GgmlType::Q5_K},
    {FileType::MOSTLY_Q6_K, "q6_k", GgmlType::Q6_K},
    {FileType::MOSTLY_IQ4_NL, "iq4_nl", GgmlType::IQ4_NL},
    {FileType::MOSTLY_IQ4_XS, "iq4_xs", GgmlType::IQ4_XS},
    {FileType::MOSTLY_BF16, "bf16", GgmlType::BF16},
    {FileType::MOSTLY_MXFP4_MOE, "mxfp4_moe", GgmlType::MXFP4},
};

// Storage types hf2q's quantizers can write (quant/quant.h).
constexpr GgmlType kStorageTypes[] = {
    GgmlType::F32,  GgmlType::F16,    GgmlType::BF16,   GgmlType::Q4_0,
    GgmlType::Q4_1, GgmlType::Q5_0,   GgmlType::Q5_1,   GgmlType::Q8_0,
    GgmlType::Q2_K, GgmlType::Q3_K,   GgmlType::Q4_K,   GgmlType::Q5_K,
    GgmlType::Q6_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4,
};

const FtInfo& info(FileType t) {
    for (const auto& i : kFileTypes)
        if (i.ft == t) return i;
    fail("internal error: unknown file type id ", static_cast<uint32_t>(t));
}

std::string lower(std::string_view s) {
    std::string r(s);
    for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return r;
}

bool contains(std::string_view s, std::string_view sub) {
    return s.find(sub) != std::string_view::npos;
}

bool ends_with(std::string_view s, std::string_view suf) {
    return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
}

// sscanf(name, "blk.%d.", &layer): the prefix "blk." followed by a decimal integer.
std::optional<int64_t> parse_blk_layer(std::string_view name) {
    if (name.substr(0, 4) != "blk.") return std::nullopt;
    size_t i = 4;
    bool neg = false;
    if (i < name.size() && (name[i] == '-' || name[i] == '+')) neg = name[i++] == '-';
    int64_t v = 0;
    size_t start = i;
    while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) && i - start < 10)
        v = v * 10 + (name[i++] - '0');
    if (i == start) return std::nullopt;
    return neg ? -v : v;
}

bool use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

uint32_t block_size(GgmlType t) {
    return ggml_traits(t).block_size;
}

}  // namespace

std::optional<FileType> file_type_from_id(uint32_t id) {
    for (const auto& i : kFileTypes)
        if (static_cast<uint32_t>(i.ft) == id) return i.ft;
    return std::nullopt;
}

std::optional<FileType> file_type_from_name(std::string_view name) {
    std::string n = lower(name);
    if (!n.empty() && std::all_of(n.begin(), n.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
        })) {
        if (n.size() > 9) return std::nullopt;
        return file_type_from_id(static_cast<uint32_t>(std::stoul(n)));
    }
    if (n == "q3_k") return FileType::MOSTLY_Q3_K_M;
    if (n == "q4_k") return FileType::MOSTLY_Q4_K_M;
    if (n == "q5_k") return FileType::MOSTLY_Q5_K_M;
    for (const auto& i : kFileTypes)
        if (i.name == n) return i.ft;
    return std::nullopt;
}

std::string_view file_type_name(FileType t) {
    return info(t).name;
}

std::vector<std::string> file_type_names() {
    std::vector<const FtInfo*> v;
    for (const auto& i : kFileTypes) v.push_back(&i);
    std::stable_sort(v.begin(), v.end(),
                     [](const FtInfo* a, const FtInfo* b) { return a->ft < b->ft; });
    std::vector<std::string> r;
    for (auto* i : v) r.emplace_back(i->name);
    return r;
}

GgmlType default_type(FileType t) {
    return info(t).type;
}

bool is_quantized(GgmlType t) {
    return t != GgmlType::F32 && t != GgmlType::F16 && t != GgmlType::BF16 && t != GgmlType::F64 &&
           t != GgmlType::I8 && t != GgmlType::I16 && t != GgmlType::I32 && t != GgmlType::I64;
}

Category tensor_category(std::string_view name) {
    if (name == "output.weight") return Category::OUTPUT;
    if (name == "token_embd.weight" || name == "per_layer_token_embd.weight")
        return Category::TOKEN_EMBD;
    if (contains(name, "attn_qkv.weight")) return Category::ATTN_QKV;
    if (contains(name, "attn_kv_b.weight")) return Category::ATTN_KV_B;
    if (contains(name, "attn_v.weight")) return Category::ATTN_V;
    if (contains(name, "attn_k.weight")) return Category::ATTN_K;
    if (contains(name, "attn_q.weight")) return Category::ATTN_Q;
    if (contains(name, "attn_output.weight")) return Category::ATTN_OUTPUT;
    if (contains(name, "ffn_up")) return Category::FFN_UP;
    if (contains(name, "ffn_gate")) return Category::FFN_GATE;
    if (contains(name, "ffn_down")) return Category::FFN_DOWN;
    return Category::OTHER;
}

static bool is_attn_v_like(Category c) {
    return c == Category::ATTN_V || c == Category::ATTN_QKV || c == Category::ATTN_KV_B;
}

TensorDesc make_tensor_desc(std::string name, const std::vector<int64_t>& ne, GgmlType type) {
    if (ne.empty() || ne.size() > 4)
        fail("tensor '", name, "': ", ne.size(), " dimensions (1..4 allowed)");
    TensorDesc d;
    d.name = std::move(name);
    d.type = type;
    d.n_dims = 1;
    for (size_t i = 0; i < ne.size(); ++i) {
        d.ne[i] = ne[i];
        if (ne[i] > 1) d.n_dims = static_cast<uint32_t>(i + 1);
    }
    return d;
}

bool allows_quantization(const TensorDesc& t, bool leave_output_tensor) {
    if (t.n_dims < 2) return false;
    std::string_view n = t.name;
    if (!ends_with(n, "weight")) return false;
    if (leave_output_tensor && n == "output.weight") return false;
    if (n == "position_embd.weight" || n == "token_types.weight") return false;
    static constexpr std::string_view kNever[] = {
        "_norm.weight",
        "ffn_gate_inp.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
    };
    for (auto s : kNever)
        if (contains(n, s)) return false;
    return true;
}

GgmlType parse_storage_type(std::string_view name, std::string_view what) {
    auto t = ggml_type_from_name(name);
    if (t)
        for (auto s : kStorageTypes)
            if (s == *t) return *t;
    std::string list;
    for (auto s : kStorageTypes)
        list += (list.empty() ? "" : ", ") + std::string(ggml_type_name(s));
    fail(what, ": unsupported tensor type '", name, "' (supported: ", list, ")");
}

TypeOverride parse_type_override(std::string_view spec) {
    // llama-quantize splits at the first '=' and lower-cases the pattern.
    size_t eq = spec.find('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == spec.size())
        fail("--tensor-type '", spec, "': expected REGEX=TYPE");
    TypeOverride o;
    o.pattern = lower(spec.substr(0, eq));
    o.type = parse_storage_type(spec.substr(eq + 1), str_cat("--tensor-type '", spec, "'"));
    try {
        std::regex check(o.pattern);
    } catch (const std::regex_error& e) {
        fail("--tensor-type '", spec, "': bad regular expression: ", e.what());
    }
    return o;
}

std::vector<size_t> quantize_order(const std::vector<std::string>& names) {
    std::vector<size_t> idx(names.size());
    std::vector<int64_t> layer(names.size());
    for (size_t i = 0; i < names.size(); ++i) {
        idx[i] = i;
        layer[i] = parse_blk_layer(names[i]).value_or(-1);
    }
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
        if (layer[a] != layer[b]) return layer[a] < layer[b];
        return names[a] < names[b];  // std::string compares bytes as unsigned char
    });
    return idx;
}

struct TypePlanner::Patterns {
    std::vector<std::regex> re;
};

TypePlanner::TypePlanner(const ModelParams& model, PlanOptions opts,
                         const std::vector<TensorDesc>& all)
    : model_(model), opts_(std::move(opts)) {
    auto pats = std::make_shared<Patterns>();
    for (const auto& o : opts_.tensor_types) pats->re.emplace_back(o.pattern);
    patterns_ = std::move(pats);
    for (const auto& t : all) {
        if (is_attn_v_like(tensor_category(t.name))) ++n_attention_wv_;
        if (t.name == "output.weight") tied_ = false;
    }
}

GgmlType TypePlanner::type_for(const TensorDesc& t) {
    if (!allows_quantization(t, opts_.leave_output_tensor)) return t.type;
    Category cat = tensor_category(t.name);
    if (opts_.token_embedding_type && cat == Category::TOKEN_EMBD)
        return *opts_.token_embedding_type;
    if (opts_.output_tensor_type && cat == Category::OUTPUT) return *opts_.output_tensor_type;

    GgmlType def = default_type(opts_.ftype);
    if (!is_quantized(def)) return def;
    GgmlType type = def;
    // --tensor-type: the first matching pattern decides and the mixture rules (with
    // their counter increments) are skipped for this tensor.
    bool manual = false;
    for (size_t i = 0; i < patterns_->re.size() && !manual; ++i) {
        if (std::regex_search(t.name, patterns_->re[i])) {
            type = opts_.tensor_types[i].type;
            manual = true;
        }
    }
    if (!manual && !opts_.pure) type = rules(def, t, cat);
    return shape_fallback(t, type);
}

int TypePlanner::layer_of(int counter, const TensorDesc& t) const {
    if (std::max<uint32_t>(1, model_.expert_count) <= 1) return counter;
    // MoE: experts of a layer are separate tensors, so the layer comes from the name.
    auto l = parse_blk_layer(t.name);
    if (!l) fail("cannot determine the layer of tensor '", t.name, "'");
    if (*l < 0 || *l >= static_cast<int64_t>(model_.n_layer))
        fail("bad layer ", *l, " for tensor '", t.name, "' (block_count ", model_.n_layer, ")");
    return static_cast<int>(*l);
}

GgmlType TypePlanner::rules(GgmlType def, const TensorDesc& t, Category cat) {
    const FileType ft = opts_.ftype;
    // Rule 1: the output head, and with tied embeddings the embeddings as well.
    if (cat == Category::OUTPUT || (tied_ && cat == Category::TOKEN_EMBD)) {
        if (opts_.output_tensor_type) return *opts_.output_tensor_type;
        if (ft == FileType::MOSTLY_MXFP4_MOE) return GgmlType::Q8_0;
        if (t.ne[0] % block_size(def) != 0) return GgmlType::Q8_0;
        return def != GgmlType::Q8_0 ? GgmlType::Q6_K : def;
    }
    // Rule 2: stacked experts MXFP4, everything else Q8_0.
    if (ft == FileType::MOSTLY_MXFP4_MOE) return t.ne[2] > 1 ? GgmlType::MXFP4 : GgmlType::Q8_0;
    // Rule 3 (untied embeddings): only very-low-bit ftypes hf2q does not offer change it.
    if (cat == Category::TOKEN_EMBD) return def;
    if (is_attn_v_like(cat)) return attn_v_rule(def);
    switch (cat) {
        case Category::ATTN_K:
            return model_.expert_count == 8 ? GgmlType::Q8_0 : def;
        case Category::FFN_DOWN:
            return ffn_down_rule(def, t);
        case Category::ATTN_OUTPUT:
            return attn_output_rule(def);
        case Category::FFN_GATE:
            // Only IQ3_XS changes gate/up; the layer lookup (and its error) still runs.
            layer_of(i_ffn_gate_, t);
            ++i_ffn_gate_;
            return def;
        case Category::FFN_UP:
            layer_of(i_ffn_up_, t);
            ++i_ffn_up_;
            return def;
        case Category::OUTPUT:
        case Category::TOKEN_EMBD:
        case Category::ATTN_QKV:
        case Category::ATTN_KV_B:
        case Category::ATTN_V:
        case Category::ATTN_Q:
        case Category::OTHER:
            return def;
    }
    return def;
}

// Rule 5; i = index of this tensor among attn_v-like tensors, n = their count.
GgmlType TypePlanner::attn_v_rule(GgmlType def) {
    const FileType ft = opts_.ftype;
    const int i = i_attention_wv_, n = n_attention_wv_;
    GgmlType type = def;
    if (ft == FileType::MOSTLY_Q2_K) {
        type = model_.n_gqa >= 4 ? GgmlType::Q4_K : GgmlType::Q3_K;
    } else if (ft == FileType::MOSTLY_Q3_K_M) {
        type = i < 2 ? GgmlType::Q5_K : GgmlType::Q4_K;
    } else if (ft == FileType::MOSTLY_Q3_K_L) {
        type = GgmlType::Q5_K;
    } else if ((ft == FileType::MOSTLY_IQ4_NL || ft == FileType::MOSTLY_IQ4_XS) &&
               model_.n_gqa >= 4) {
        type = GgmlType::Q5_K;
    } else if ((ft == FileType::MOSTLY_Q4_K_M || ft == FileType::MOSTLY_Q5_K_M) &&
               use_more_bits(i, n)) {
        type = GgmlType::Q6_K;
    } else if (ft == FileType::MOSTLY_Q4_K_S && i < 4) {
        type = GgmlType::Q5_K;
    }
    // (The LLaMA-70B bump never applies to gemma4.)
    if (model_.expert_count == 8) type = GgmlType::Q8_0;
    ++i_attention_wv_;
    return type;
}

// Rule 8; the layer is the running counter (dense) or parsed from the name (MoE).
GgmlType TypePlanner::ffn_down_rule(GgmlType def, const TensorDesc& t) {
    const FileType ft = opts_.ftype;
    const int i = layer_of(i_ffn_down_, t);
    const int n = static_cast<int>(model_.n_layer);
    const bool imat = opts_.has_imatrix;
    GgmlType type = def;
    if (ft == FileType::MOSTLY_Q2_K) {
        type = GgmlType::Q3_K;
    } else if (ft == FileType::MOSTLY_Q3_K_M) {
        type = i < n / 16 ? GgmlType::Q5_K : GgmlType::Q4_K;
    } else if (ft == FileType::MOSTLY_Q3_K_L) {
        type = GgmlType::Q5_K;
    } else if (ft == FileType::MOSTLY_Q4_K_M) {
        if (use_more_bits(i, n)) type = GgmlType::Q6_K;
    } else if (i < n / 8 && (ft == FileType::MOSTLY_IQ4_NL || ft == FileType::MOSTLY_IQ4_XS) &&
               !imat) {
        type = GgmlType::Q5_K;
    } else if (ft == FileType::MOSTLY_Q5_K_M && use_more_bits(i, n)) {
        type = GgmlType::Q6_K;
    } else if (ft == FileType::MOSTLY_Q4_K_S && i < n / 8) {
        type = GgmlType::Q5_K;
    } else if ((ft == FileType::MOSTLY_Q4_0 || ft == FileType::MOSTLY_Q5_0) && imat && i < n / 8) {
        type = ft == FileType::MOSTLY_Q4_0 ? GgmlType::Q4_1 : GgmlType::Q5_1;
    }
    ++i_ffn_down_;
    return type;
}

// Rule 9 (non-Falcon).
GgmlType TypePlanner::attn_output_rule(GgmlType def) const {
    const FileType ft = opts_.ftype;
    if (model_.expert_count == 8) {
        switch (ft) {
            case FileType::MOSTLY_Q2_K:
            case FileType::MOSTLY_Q3_K_S:
            case FileType::MOSTLY_Q3_K_M:
            case FileType::MOSTLY_IQ4_NL:
            case FileType::MOSTLY_Q4_K_S:
            case FileType::MOSTLY_Q4_K_M:
            case FileType::MOSTLY_IQ4_XS:
                return GgmlType::Q5_K;
            default:
                return def;
        }
    }
    if (ft == FileType::MOSTLY_Q2_K) return GgmlType::Q3_K;
    if (ft == FileType::MOSTLY_Q3_K_M) return GgmlType::Q4_K;
    if (ft == FileType::MOSTLY_Q3_K_L) return GgmlType::Q5_K;
    return def;
}

// A row length that is not a multiple of the chosen type's block size: the nearest
// 32-element type, or F16 if even that does not fit.
GgmlType TypePlanner::shape_fallback(const TensorDesc& t, GgmlType type) {
    if (t.ne[0] % block_size(type) == 0) return type;
    ++n_fallback_;
    GgmlType r;
    switch (type) {
        case GgmlType::IQ1_S:
        case GgmlType::IQ1_M:
        case GgmlType::IQ2_XXS:
        case GgmlType::IQ2_XS:
        case GgmlType::IQ2_S:
        case GgmlType::IQ3_XXS:
        case GgmlType::IQ3_S:
        case GgmlType::IQ4_XS:
            r = GgmlType::IQ4_NL;
            break;
        case GgmlType::Q2_K:
        case GgmlType::Q3_K:
        case GgmlType::TQ1_0:
        case GgmlType::TQ2_0:
            r = GgmlType::Q4_0;
            break;
        case GgmlType::Q4_K:
            r = GgmlType::Q5_0;
            break;
        case GgmlType::Q5_K:
            r = GgmlType::Q5_1;
            break;
        case GgmlType::Q6_K:
            r = GgmlType::Q8_0;
            break;
        default:
            fail("tensor '", t.name, "': row length ", t.ne[0], " is not a multiple of the ",
                 ggml_type_name(type), " block size and no fallback type is defined");
    }
    if (t.ne[0] % block_size(r) != 0) r = GgmlType::F16;
    return r;
}

std::vector<GgmlType> plan_types(const ModelParams& model, const PlanOptions& opts,
                                 const std::vector<TensorDesc>& ordered) {
    TypePlanner p(model, opts, ordered);
    std::vector<GgmlType> r;
    r.reserve(ordered.size());
    for (const auto& t : ordered) r.push_back(p.type_for(t));
    return r;
}

}  // namespace hf2q::ftype
