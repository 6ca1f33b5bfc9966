#include "runtime/model_impl.h"

#include "core/error.h"

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

}  // namespace hf2q
