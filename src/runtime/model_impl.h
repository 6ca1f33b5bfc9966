// Internal state behind hf2q::Model: the mapped GGUF file, the validated config and
// the weight table (views into the mapping).
#pragma once

#include <memory>
#include <mutex>

#include "gguf/gguf.h"
#include "hf2q/engine.h"
#include "models/gemma4/config.h"
#include "models/gemma4/weights.h"
#include "ops/attention.h"
#include "ops/backend.h"

namespace hf2q::runtime {

// The ops layer's element type of a KV cache of type t.
inline ops::KvType kv_element_type(KvCacheType t) {
    return t == KvCacheType::f32    ? ops::KvType::f32
           : t == KvCacheType::e4m3 ? ops::KvType::e4m3
           : t == KvCacheType::int8 ? ops::KvType::i8
                                    : ops::KvType::f16;
}

class ModelImpl {
public:
    ModelImpl(const std::string& path, const ModelLoadOptions& opts);

    const gguf::File& file() const { return *file_; }
    const gemma4::Config& config() const { return config_; }
    const gemma4::Weights& weights() const { return weights_; }
    const ModelInfo& info() const { return info_; }
    const ModelLoadOptions& options() const { return opts_; }

    // The weights where a backend of this kind computes: the host table itself for
    // the CPU, otherwise one device copy uploaded by the first context that asks and
    // shared by all later ones (thread-safe). Contexts must not outlive the model.
    const gemma4::Weights& weights_on(BackendKind kind) const;

    // hf2q::decode_step_bytes.
    double decode_step_bytes(int64_t batch, int64_t context, KvCacheType kv) const;

private:
    void count_active_work();

    ModelLoadOptions opts_;
    std::unique_ptr<gguf::File> file_;
    gemma4::Config config_;
    gemma4::Weights weights_;
    ModelInfo info_;
    // Bytes of every 2-D projection but the LM head, and of all experts' tensors.
    uint64_t dense_bytes_ = 0, expert_bytes_ = 0;
    // Device copy: a backend that only holds the weight allocations, and the table.
    mutable std::mutex device_mutex_;
    mutable std::unique_ptr<ops::Backend> device_store_;
    mutable gemma4::Weights device_weights_;
};

}  // namespace hf2q::runtime
