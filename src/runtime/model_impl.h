// Internal state behind hf2q::Model: the mapped GGUF file, the validated config and
// the weight table (views into the mapping).
#pragma once

#include <memory>

#include "gguf/gguf.h"
#include "hf2q/engine.h"
#include "models/gemma4/config.h"
#include "models/gemma4/weights.h"

namespace hf2q::runtime {

class ModelImpl {
public:
    ModelImpl(const std::string& path, const ModelLoadOptions& opts);

    const gguf::File& file() const { return *file_; }
    const gemma4::Config& config() const { return config_; }
    const gemma4::Weights& weights() const { return weights_; }
    const ModelInfo& info() const { return info_; }
    const ModelLoadOptions& options() const { return opts_; }

private:
    void count_active_work();

    ModelLoadOptions opts_;
    std::unique_ptr<gguf::File> file_;
    gemma4::Config config_;
    gemma4::Weights weights_;
    ModelInfo info_;
};

}  // namespace hf2q::runtime
