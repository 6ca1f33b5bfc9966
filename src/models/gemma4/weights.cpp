#include "models/gemma4/weights.h"

#include <cmath>
#include <set>
#include <string>

#include "core/checked.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

namespace hf2q::gemma4 {
namespace {

std::string shape_str(const gguf::TensorInfo& t) {
    std::string s = "[";
    for (uint32_t i = 0; i < t.n_dims; ++i) s += (i ? ", " : "") + std::to_string(t.ne[i]);
    return s + "]";
}

class Loader {
public:
    Loader(const gguf::File& f, Weights& w) : f_(f), w_(w) {}

    const gguf::TensorInfo* find(const std::string& name, bool required) {
        const auto* t = f_.find_tensor(name);
        if (!t && required) fail("model is missing tensor '", name, "'");
        if (t) used_.insert(name);
        return t;
    }

    ops::WeightView matrix(const std::string& name, int64_t n_in, int64_t n_out, bool required) {
        const auto* t = find(name, required);
        if (!t) return {};
        if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1)
            fail("tensor '", name, "' has shape ", shape_str(*t), ", expected [", n_in, ", ", n_out, "]");
        return view(*t);
    }

    ExpertWeights experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_exp) {
        const auto* t = find(name, false);
        if (!t) return {};
        if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_exp || t->ne[3] != 1)
            fail("tensor '", name, "' has shape ", shape_str(*t), ", expected [", n_in, ", ", n_out, ", ",
                 n_exp, "]");
        ExpertWeights e;
        e.first = view(*t);
        e.expert_bytes = e.first.row_bytes * static_cast<uint64_t>(n_out);
        e.n_expert = n_exp;
        return e;
    }

    // 1-D tensor of n elements decoded to f32 (norm weights, scales).
    const float* vector(const std::string& name, int64_t n, bool required) {
        const auto* t = find(name, required);
        if (!t) return nullptr;
        if (t->n_elements() != n || t->ne[0] != n)
            fail("tensor '", name, "' has shape ", shape_str(*t), ", expected [", n, "]");
        check_type(*t);
        auto buf = std::make_unique<float[]>(static_cast<size_t>(n));
        quant::dequantize_row(t->type, t->data, buf.get(), n);
        for (int64_t i = 0; i < n; ++i)
            if (!std::isfinite(buf[static_cast<size_t>(i)])) fail("tensor '", name, "' holds a non-finite value");
        count(*t);
        w_.owned.push_back({std::move(buf), n});
        return w_.owned.back().data.get();
    }

    // Names present in the file but not used: KV projections of KV-shared layers
    // are accepted (released E2B/E4B files carry them); anything else is an error,
    // as in llama.cpp, because it usually means a naming mistake.
    void check_unused(const Config& c) {
        for (const auto& t : f_.tensors()) {
            if (used_.count(t.name)) continue;
            bool shared_kv = false;
            for (int64_t il = 0; il < c.n_layer && !shared_kv; ++il) {
                if (c.has_kv(il)) continue;
                std::string p = "blk." + std::to_string(il) + ".";
                shared_kv = t.name == p + "attn_k.weight" || t.name == p + "attn_v.weight" ||
                            t.name == p + "attn_k_norm.weight";
            }
            if (!shared_kv) fail("unexpected tensor '", t.name, "' in a gemma4 model");
        }
    }

private:
    void check_type(const gguf::TensorInfo& t) {
        if (!quant::is_supported(t.type))
            fail("tensor '", t.name, "' has type ", ggml_type_name(t.type), ", which hf2q cannot compute with");
    }
    void count(const gguf::TensorInfo& t) {
        w_.n_bytes += t.nbytes;
        w_.n_params += t.n_elements();
    }
    ops::WeightView view(const gguf::TensorInfo& t) {
        check_type(t);
        count(t);
        ops::WeightView v;
        v.type = t.type;
        v.n_in = t.ne[0];
        v.n_out = t.ne[1];
        v.row_bytes = t.row_bytes();
        v.data = t.data;
        return v;
    }

    const gguf::File& f_;
    Weights& w_;
    std::set<std::string> used_;
};

void load_layer(Loader& ld, const Config& c, int64_t il, LayerWeights& l) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const int64_t H = c.n_embd, hd = c.head_dim(il), nq = c.n_head * hd, nkv = c.kv_heads(il) * hd;
    const int64_t F = c.n_ff[static_cast<size_t>(il)];
    l.attn_norm = ld.vector(p + "attn_norm.weight", H, true);
    l.attn_q = ld.matrix(p + "attn_q.weight", H, nq, true);
    l.attn_q_norm = ld.vector(p + "attn_q_norm.weight", hd, true);
    if (c.has_kv(il)) {
        l.attn_k = ld.matrix(p + "attn_k.weight", H, nkv, true);
        l.attn_v = ld.matrix(p + "attn_v.weight", H, nkv, false);
        l.attn_k_norm = ld.vector(p + "attn_k_norm.weight", hd, true);
    }
    l.attn_output = ld.matrix(p + "attn_output.weight", nq, H, true);
    l.post_attention_norm = ld.vector(p + "post_attention_norm.weight", H, true);
    l.ffn_norm = ld.vector(p + "ffn_norm.weight", H, true);
    l.ffn_gate = ld.matrix(p + "ffn_gate.weight", H, F, true);
    l.ffn_up = ld.matrix(p + "ffn_up.weight", H, F, true);
    l.ffn_down = ld.matrix(p + "ffn_down.weight", F, H, true);
    l.post_ffw_norm = ld.vector(p + "post_ffw_norm.weight", H, true);
    if (const float* s = ld.vector(p + "layer_output_scale.weight", 1, false)) l.output_scale = s[0];

    if (c.is_moe()) {
        const int64_t E = c.n_expert, Fe = c.n_ff_exp;
        l.ffn_gate_inp = ld.matrix(p + "ffn_gate_inp.weight", H, E, true);
        l.ffn_gate_inp_scale = ld.vector(p + "ffn_gate_inp.scale", H, true);
        l.pre_ffw_norm_2 = ld.vector(p + "pre_ffw_norm_2.weight", H, true);
        l.post_ffw_norm_1 = ld.vector(p + "post_ffw_norm_1.weight", H, true);
        l.post_ffw_norm_2 = ld.vector(p + "post_ffw_norm_2.weight", H, true);
        l.gate_up_exps = ld.experts(p + "ffn_gate_up_exps.weight", H, 2 * Fe, E);
        if (l.gate_up_exps.empty()) {
            l.gate_exps = ld.experts(p + "ffn_gate_exps.weight", H, Fe, E);
            l.up_exps = ld.experts(p + "ffn_up_exps.weight", H, Fe, E);
            if (l.gate_exps.empty() || l.up_exps.empty())
                fail("model is missing tensor '", p, "ffn_gate_up_exps.weight' (or ffn_gate_exps/ffn_up_exps)");
        }
        l.down_exps = ld.experts(p + "ffn_down_exps.weight", Fe, H, E);
        if (l.down_exps.empty()) fail("model is missing tensor '", p, "ffn_down_exps.weight'");
        l.down_exps_scale = ld.vector(p + "ffn_down_exps.scale", E, false);
    }
    if (c.has_ple()) {
        l.inp_gate = ld.matrix(p + "inp_gate.weight", H, c.n_embd_per_layer, true);
        l.proj = ld.matrix(p + "proj.weight", c.n_embd_per_layer, H, true);
        l.post_norm = ld.vector(p + "post_norm.weight", H, true);
    }
}

// inv_freq[i] = 1 / base^(2i/d), evaluated in f32 as transformers does, divided by
// llama.cpp's per-pair frequency factor (1e30 marks a non-rotating pair).
std::vector<float> inv_freq(float base, int64_t d, const float* factors) {
    std::vector<float> out(static_cast<size_t>(d / 2));
    for (int64_t i = 0; i < d / 2; ++i) {
        float e = static_cast<float>(2 * i) / static_cast<float>(d);
        float f = 1.0f / std::pow(base, e);
        if (factors) f = f / factors[i];
        out[static_cast<size_t>(i)] = f;
    }
    return out;
}

// Calls fn on every matrix view (with its byte size) and every 1-D vector pointer.
template <class FnView, class FnVec>
void visit(Weights& w, FnView&& view, FnVec&& vec) {
    auto mat = [&](ops::WeightView& v, int64_t n_mats = 1) {
        if (!v.empty()) view(v, v.row_bytes * static_cast<uint64_t>(v.n_out * n_mats));
    };
    auto exps = [&](ExpertWeights& e) {
        if (!e.empty()) view(e.first, e.expert_bytes * static_cast<uint64_t>(e.n_expert));
    };
    mat(w.token_embd);
    mat(w.output);
    mat(w.per_layer_token_embd);
    mat(w.per_layer_model_proj);
    vec(w.output_norm);
    vec(w.per_layer_proj_norm);
    for (auto& l : w.layers) {
        for (auto* v : {&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output, &l.ffn_gate, &l.ffn_up, &l.ffn_down,
                        &l.ffn_gate_inp, &l.inp_gate, &l.proj})
            mat(*v);
        for (auto* e : {&l.gate_up_exps, &l.gate_exps, &l.up_exps, &l.down_exps}) exps(*e);
        for (auto** p : {&l.attn_norm, &l.attn_q_norm, &l.attn_k_norm, &l.post_attention_norm, &l.ffn_norm,
                         &l.post_ffw_norm, &l.ffn_gate_inp_scale, &l.pre_ffw_norm_2, &l.post_ffw_norm_1,
                         &l.post_ffw_norm_2, &l.down_exps_scale, &l.post_norm})
            vec(*p);
    }
}

// 0: the MoE router expanded on every batched call (add_batch_copies), for the A/B.
#ifndef HF2Q_ROUTER_BATCH_COPY
#define HF2Q_ROUTER_BATCH_COPY 1
#endif
constexpr bool kRouterBatchCopy = HF2Q_ROUTER_BATCH_COPY != 0;

// The BF16 copies of every dense matrix (PlaceOptions::batch_copy). The MoE router
// (ffn_gate_inp, F32 in llama.cpp's files) is one too: its batched product otherwise
// expands it to BF16 on every call, a launch on the critical path of each MoE layer
// (H200, 64 sequences: 2 µs a layer; measured together with the attention's skipped
// plan, docs/performance.md, session 33), for a copy of 0.7 MB a layer.
void add_batch_copies(Weights& w, ops::WeightView& head, ops::Backend& be, BatchCopy policy) {
    if (policy == BatchCopy::off) return;
    std::vector<ops::WeightView*> dense = {&head, &w.per_layer_model_proj};
    for (auto& l : w.layers)
        for (ops::WeightView* v : {&l.attn_output, &l.ffn_down, &l.inp_gate, &l.proj}) dense.push_back(v);
    // Each layer's q, k and v (those it has), and its dense MLP's gate and up, as
    // groups: the backend may put a group's copies back to back (ops::Backend::
    // batch_layouts) for one product over the group (Forward::attention, dense_mlp).
    std::vector<std::vector<ops::WeightView*>> groups;
    auto add_group = [&](std::initializer_list<ops::WeightView*> list) {
        groups.emplace_back();
        for (ops::WeightView* v : list)
            if (!v->empty()) groups.back().push_back(v);
    };
    for (auto& l : w.layers) {
        add_group({&l.attn_q, &l.attn_k, &l.attn_v});
        add_group({&l.ffn_gate, &l.ffn_up});
    }
    if (kRouterBatchCopy)
        for (auto& l : w.layers) dense.push_back(&l.ffn_gate_inp);
    if (policy == BatchCopy::automatic) {
        uint64_t bytes = 0;  // saturating: a sum past 2^64 fits nowhere anyway
        for (const ops::WeightView* v : dense)
            if (!v->empty()) bytes = checked_add(bytes, be.batch_layout_bytes(*v)).value_or(UINT64_MAX);
        for (const auto& group : groups)
            for (const ops::WeightView* v : group)
                bytes = checked_add(bytes, be.batch_layout_bytes(*v)).value_or(UINT64_MAX);
        if (!auto_batch_copy(bytes, be.free_memory())) return;
    }
    for (ops::WeightView* v : dense)
        if (!v->empty()) v->batch_layout = be.batch_layout(*v);
    for (const auto& group : groups)
        if (!group.empty()) be.batch_layouts(group);
}

// Which Q4_K matrices also get the backend's tile copy (ops::Backend::tile_layout),
// which its dense products of batched decode (17-32 tokens, gemm_tile.cu) read instead
// of the BF16 copy: bit 1 the layers' attention (q, k, v, o), bit 2 the dense MLP (it
// runs beside the experts, on the side stream). 3 (default) both: on an H100, 32
// sequences of the 26B-A4B int8 3,247 -> 3,366 tokens/s (session 61); 0 none, 1 or 2
// one kind, for the A/B.
#ifndef HF2Q_TILE_COPY
#define HF2Q_TILE_COPY 3
#endif

// The tile copies (HF2Q_TILE_COPY) of the layers' dense matrices, where the backend
// makes them. Made with the BF16 copies (the same policy), which batches of other sizes
// still read. Each group below is multiplied in one launch (q, k and v; gate and up),
// which takes the tile GEMM only where every product has a copy, so a group gets
// copies only where each member would (the 26B-A4B's Q6_K v in 13 of its 30 layers:
// 140 MB of q and k copies that nothing would read).
void add_tile_layouts(Weights& w, ops::Backend& be, BatchCopy policy) {
    if (!HF2Q_TILE_COPY || policy == BatchCopy::off) return;
    auto add = [&](std::initializer_list<ops::WeightView*> group) {
        for (const ops::WeightView* v : group)
            if (!v->empty() && be.tile_layout_bytes(*v) == 0) return;
        for (ops::WeightView* v : group)
            if (!v->empty()) v->tile_layout = be.tile_layout(*v);
    };
    for (auto& l : w.layers) {
        if (HF2Q_TILE_COPY & 1) {
            add({&l.attn_q, &l.attn_k, &l.attn_v});
            add({&l.attn_output});
        }
        if (HF2Q_TILE_COPY & 2) {
            add({&l.ffn_gate, &l.ffn_up});
            add({&l.ffn_down});
        }
    }
}

// The backend's copies of the experts for batched decode (ops::Backend::expert_layout).
// After the batch copies, which gain more where memory allows only one kind.
void add_expert_layouts(Weights& w, ops::Backend& be) {
    for (auto& l : w.layers)
        for (ExpertWeights* e : {&l.gate_up_exps, &l.gate_exps, &l.up_exps, &l.down_exps})
            if (!e->empty()) e->first.expert_layout = be.expert_layout(e->first, e->expert_bytes, e->n_expert);
}

}  // namespace

Weights place_weights(const Weights& host, ops::Backend& be, const PlaceOptions& opts) {
    Weights w;
    w.token_embd = host.token_embd;
    w.output = host.output;
    w.output_norm = host.output_norm;
    w.per_layer_token_embd = host.per_layer_token_embd;
    w.per_layer_model_proj = host.per_layer_model_proj;
    w.per_layer_proj_norm = host.per_layer_proj_norm;
    w.layers = host.layers;
    w.inv_freq_full = host.inv_freq_full;
    w.inv_freq_swa = host.inv_freq_swa;
    w.n_bytes = host.n_bytes;
    w.n_params = host.n_params;
    if (be.host_memory()) return w;  // views into the mapping and host vectors work as is
    std::vector<std::pair<const float*, float*>> moved;
    for (const auto& o : host.owned) {
        float* d = be.alloc_array<float>(static_cast<size_t>(o.n));
        be.upload(d, o.data.get(), static_cast<size_t>(o.n) * sizeof(float));
        moved.push_back({o.data.get(), d});
    }
    visit(
        w,
        [&](ops::WeightView& v, uint64_t bytes) {
            void* d = be.alloc(bytes);
            be.upload(d, v.data, bytes);
            v.data = d;
        },
        [&](const float*& p) {
            if (!p) return;
            for (auto& [from, to] : moved)
                if (from == p) {
                    p = to;
                    return;
                }
            HF2Q_ASSERT(false);
        });
    // Tied heads: the embedding's view carries the copies; its row gathers read `data`.
    ops::WeightView& head = w.output.empty() ? w.token_embd : w.output;
    const uint64_t allocated = be.allocated_bytes();
    if (opts.decode_layouts) head.decode_layout = be.decode_layout(head);
    add_batch_copies(w, head, be, opts.batch_copy);
    add_tile_layouts(w, be, opts.batch_copy);
    if (opts.expert_layouts) add_expert_layouts(w, be);
    w.copy_bytes = be.allocated_bytes() - allocated;
    return w;
}

bool auto_batch_copy(uint64_t copy_bytes, uint64_t free_bytes) {
    return copy_bytes > 0 && copy_bytes <= free_bytes / 4;
}

Weights load_weights(const gguf::File& f, const Config& c) {
    Weights w;
    Loader ld(f, w);
    const int64_t H = c.n_embd;
    w.token_embd = ld.matrix("token_embd.weight", H, c.n_vocab, true);
    w.output = ld.matrix("output.weight", H, c.n_vocab, false);
    w.output_norm = ld.vector("output_norm.weight", H, true);
    if (c.has_ple()) {
        const int64_t LP = c.n_layer * c.n_embd_per_layer;
        w.per_layer_token_embd = ld.matrix("per_layer_token_embd.weight", LP, c.n_vocab, true);
        w.per_layer_model_proj = ld.matrix("per_layer_model_proj.weight", H, LP, true);
        w.per_layer_proj_norm = ld.vector("per_layer_proj_norm.weight", c.n_embd_per_layer, true);
    }
    int64_t hd_full = 0, hd_swa = 0;
    for (int64_t il = 0; il < c.n_layer; ++il) (c.is_sliding(il) ? hd_swa : hd_full) = c.head_dim(il);
    // Without rope_freqs every pair of the full layers rotates (plain RoPE).
    const float* rope_freqs = hd_full ? ld.vector("rope_freqs.weight", hd_full / 2, false) : nullptr;
    if (hd_full) w.inv_freq_full = inv_freq(c.rope_base_full, hd_full, rope_freqs);
    if (hd_swa) w.inv_freq_swa = inv_freq(c.rope_base_swa, hd_swa, nullptr);

    w.layers.resize(static_cast<size_t>(c.n_layer));
    for (int64_t il = 0; il < c.n_layer; ++il) load_layer(ld, c, il, w.layers[static_cast<size_t>(il)]);
    ld.check_unused(c);
    return w;
}

}  // namespace hf2q::gemma4
