// Internal state behind hf2q::Context: backend, paged KV cache (block tables plus
// one K and one V pool per cache-owning layer), the forward pass with its
// preallocated activations, and the logits of the last decode.
#pragma once

#include <memory>
#include <vector>

#include "hf2q/engine.h"
#include "kv/block_tables.h"
#include "models/gemma4/forward.h"
#include "ops/backend.h"
#include "runtime/model_impl.h"

namespace hf2q::runtime {

class ContextImpl {
public:
    ContextImpl(const ModelImpl& model, const ContextOptions& opts);

    void decode(const std::vector<BatchToken>& batch);
    const float* logits(int32_t i) const;
    int32_t n_outputs() const { return n_outputs_; }
    int64_t n_vocab() const { return model_.config().n_vocab; }
    const ContextOptions& options() const { return opts_; }
    kv::BlockTables& tables() { return *tables_; }
    const kv::BlockTables& tables() const { return *tables_; }

    // KV positions the cache can hold for one sequence / in total (full layers).
    int64_t kv_capacity_tokens() const;

private:
    void validate(const std::vector<BatchToken>& batch) const;
    void run_ubatch(const std::vector<BatchToken>& batch, size_t begin, size_t end);
    void apply_copies(const std::vector<kv::BlockCopy>& copies);

    const ModelImpl& model_;
    ContextOptions opts_;
    std::unique_ptr<ops::Backend> backend_;
    std::unique_ptr<kv::BlockTables> tables_;
    std::vector<std::vector<float>> k_pools_, v_pools_;  // per layer (empty if shared)
    std::vector<gemma4::LayerKv> layer_kv_;
    std::unique_ptr<gemma4::Forward> forward_;

    // Per-ubatch scratch, sized n_ubatch.
    std::vector<int32_t> tokens_, pos_, out_rows_, table_len_[2];
    std::vector<const int32_t*> table_ptr_[2];
    std::vector<float> ubatch_logits_;
    std::vector<float> logits_;  // [n_outputs][n_vocab]
    int32_t n_outputs_ = 0;
};

}  // namespace hf2q::runtime
