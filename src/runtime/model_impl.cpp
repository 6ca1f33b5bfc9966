#include "runtime/model_impl.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/backend_factory.h"

namespace hf2q::runtime {

ModelImpl::ModelImpl(const std::string& path, const ModelLoadOptions& opts) : opts_(opts) {
    file_ = gguf::File::open(path);
    config_ = gemma4::config_from_gguf(*file_);
    weights_ = gemma4::load_weights(*file_, config_);
    info_.architecture = "gemma4";
    info_.name = config_.name;
    info_.n_vocab = config_.n_vocab;
    info_.n_embd = config_.n_embd;
    info_.n_layer = config_.n_layer;
    info_.n_ctx_train = config_.n_ctx_train;
    info_.n_params = weights_.n_params;
    info_.n_bytes = weights_.n_bytes;
    count_active_work();
}

// Per-token matmul work, from the weight table: every 2-D projection once, and
// k / n_expert of each stacked expert tensor.
const gemma4::Weights& ModelImpl::weights_on(BackendKind kind) const {
    if (kind == BackendKind::cpu) return weights_;
    std::lock_guard<std::mutex> lock(device_mutex_);
    if (!device_store_) {
        auto store = make_weight_store(kind);
        device_weights_ = gemma4::place_weights(weights_, *store, {opts_.decode_layouts, opts_.batch_copy, opts_.expert_layouts});
        device_store_ = std::move(store);
    }
    return device_weights_;
}

void ModelImpl::count_active_work() {
    auto add = [&](const ops::WeightView& v, double frac = 1.0) {
        if (v.empty()) return;
        info_.n_active_params += static_cast<int64_t>(static_cast<double>(v.n_in * v.n_out) * frac);
        info_.n_active_bytes += static_cast<uint64_t>(static_cast<double>(v.row_bytes * v.n_out) * frac);
    };
    auto add_dense = [&](const ops::WeightView& v) {
        add(v);
        if (!v.empty()) dense_bytes_ += v.row_bytes * static_cast<uint64_t>(v.n_out);
    };
    auto add_exp = [&](const gemma4::ExpertWeights& e) {
        if (e.empty()) return;
        // k experts of n_expert are used per token
        add(e.first, static_cast<double>(config_.n_expert_used));
        expert_bytes_ += e.expert_bytes * static_cast<uint64_t>(e.n_expert);
    };
    const auto& w = weights_;
    add_dense(w.per_layer_model_proj);
    for (const auto& l : w.layers) {
        for (const auto* v : {&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output, &l.ffn_gate, &l.ffn_up, &l.ffn_down,
                              &l.ffn_gate_inp, &l.inp_gate, &l.proj})
            add_dense(*v);
        for (const auto* e : {&l.gate_up_exps, &l.gate_exps, &l.up_exps, &l.down_exps}) add_exp(*e);
    }
    const auto& lm = w.output.empty() ? w.token_embd : w.output;
    info_.n_head_params = lm.n_in * lm.n_out;
    info_.n_head_bytes = lm.row_bytes * static_cast<uint64_t>(lm.n_out);
}

double ModelImpl::decode_step_bytes(int64_t batch, int64_t context, KvCacheType kv) const {
    if (batch <= 0) return 0.0;
    const gemma4::Config& c = config_;
    const double b = static_cast<double>(batch);
    double bytes = static_cast<double>(dense_bytes_) + static_cast<double>(info_.n_head_bytes);
    if (c.n_expert > 0) {  // expected share of experts some token routes to
        const double miss = 1.0 - static_cast<double>(c.n_expert_used) / static_cast<double>(c.n_expert);
        bytes += static_cast<double>(expert_bytes_) * (1.0 - std::pow(miss, b));
    }
    for (const ops::WeightView* e : {&weights_.token_embd, &weights_.per_layer_token_embd})
        if (!e->empty()) bytes += b * static_cast<double>(e->row_bytes);
    const ops::KvType t = kv_element_type(kv);
    const int64_t positions = std::max<int64_t>(context, 0) + 1;
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const int64_t keys = c.window(il) > 0 ? std::min(positions, c.window(il)) : positions;
        bytes += b * static_cast<double>(keys) * 2.0 * static_cast<double>(c.kv_heads(il)) *
                 static_cast<double>(ops::kv_row_bytes(t, c.head_dim(il)));
    }
    return bytes;
}

}  // namespace hf2q::runtime

namespace hf2q {

std::unique_ptr<Model> Model::load(const std::string& path, const ModelLoadOptions& opts) {
    std::unique_ptr<Model> m(new Model());
    m->impl_ = std::make_unique<runtime::ModelImpl>(path, opts);
    return m;
}

Model::~Model() = default;

const ModelInfo& Model::info() const { return impl_->info(); }

double decode_step_bytes(const Model& model, int64_t batch, int64_t context, KvCacheType kv) {
    return model.impl().decode_step_bytes(batch, context, kv);
}

}  // namespace hf2q
