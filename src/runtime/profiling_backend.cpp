#include "runtime/profiling_backend.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "core/error.h"

namespace hf2q::runtime {
namespace {

enum : uint8_t { kNoVariant = 0, kSmall = 1, kBatched = 2, kSliding = 3, kFull = 4 };

}  // namespace

ProfilingBackend::ProfilingBackend(std::unique_ptr<ops::Backend> inner) : inner_(std::move(inner)) {
    HF2Q_ASSERT(inner_ != nullptr);
}

template <class F>
void ProfilingBackend::timed(const Key& k, F&& run) {
    if (!enabled_) {
        run();
        return;
    }
    // Drain earlier work first so the op is charged only its own time.
    inner_->synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    run();
    inner_->synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    Stat& s = stats_[k];
    ++s.calls;
    s.seconds += std::chrono::duration<double>(t1 - t0).count();
}

std::string ProfilingBackend::key_name(const Key& k) {
    auto with_type = [&](std::string s) { return s + " " + std::string(ggml_type_name(k.type)); };
    switch (k.op) {
        case Op::upload:
            return "upload";
        case Op::download:
            return "download";
        case Op::fill_zero:
            return "fill_zero";
        case Op::rms_norm:
            return "rms_norm";
        case Op::residual_norms:
            return "residual_norms";
        case Op::attention_inputs:
            return "attention_inputs";
        case Op::rope:
            return "rope";
        case Op::matmul:
            return with_type(k.variant == kSmall
                                 ? "matmul (≤" + std::to_string(kSmallMatmulTokens) + " tokens)"
                                 : std::string("matmul (batched)"));
        case Op::get_rows:
            return with_type("get_rows");
        case Op::geglu:
            return "geglu";
        case Op::attention:
            return k.variant == kSliding ? "attention (sliding)" : "attention (full)";
        case Op::moe_route:
            return "moe_route";
        case Op::moe_group:
            return "moe_group";
        case Op::moe_route_group:
            return "moe_route_group";
        case Op::moe_matmul:
            return with_type("moe_matmul");
        case Op::moe_combine:
            return "moe_combine";
        case Op::gather_rows:
            return "gather_rows";
        case Op::scatter_add:
            return "scatter_add";
        case Op::kv_store:
            return "kv_store";
        case Op::copy_blocks:
            return "copy_blocks";
        case Op::feed_tokens:
            return "feed_tokens";
        case Op::argmax_rows:
            return "argmax_rows";
        case Op::topk_rows:
            return "topk_rows";
        case Op::add:
            return "add";
        case Op::scale:
            return "scale";
        case Op::mul:
            return "mul";
        case Op::softcap:
            return "softcap";
    }
    return "unknown";
}

OpProfile ProfilingBackend::profile() const {
    OpProfile p;
    for (const auto& [k, s] : stats_) p.entries.push_back({key_name(k), s.calls, s.seconds});
    std::stable_sort(p.entries.begin(), p.entries.end(),
                     [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
    return p;
}

std::unique_ptr<ops::Graph> ProfilingBackend::capture(const std::function<void()>& body) {
    if (enabled_) return nullptr;
    return inner_->capture(body);
}

void ProfilingBackend::upload(void* dst, const void* src, size_t bytes) {
    timed({Op::upload}, [&] { inner_->upload(dst, src, bytes); });
}
// Timed as an upload: the timing synchronizes, so the copy is done when it returns.
void ProfilingBackend::upload_async(void* dst, const void* src, size_t width, size_t rows, size_t pitch) {
    timed({Op::upload}, [&] { inner_->upload_async(dst, src, width, rows, pitch); });
}
void ProfilingBackend::download(void* dst, const void* src, size_t bytes) {
    timed({Op::download}, [&] { inner_->download(dst, src, bytes); });
}
void ProfilingBackend::fill_zero(void* dst, size_t bytes) {
    timed({Op::fill_zero}, [&] { inner_->fill_zero(dst, bytes); });
}

void ProfilingBackend::rms_norm(const ops::RmsNormParams& p) {
    timed({Op::rms_norm}, [&] { inner_->rms_norm(p); });
}
void ProfilingBackend::residual_norms(const ops::ResidualNormsParams& p) {
    timed({Op::residual_norms}, [&] { inner_->residual_norms(p); });
}
void ProfilingBackend::attention_inputs(const ops::AttentionInputsParams& p) {
    timed({Op::attention_inputs}, [&] { inner_->attention_inputs(p); });
}
void ProfilingBackend::rope(const ops::RopeParams& p) {
    timed({Op::rope}, [&] { inner_->rope(p); });
}
void ProfilingBackend::matmul(const ops::MatmulParams& p) {
    const uint8_t cls = p.n_tokens <= kSmallMatmulTokens ? kSmall : kBatched;
    timed({Op::matmul, cls, p.w.type}, [&] { inner_->matmul(p); });
}
// Timed as one matmul of the first weight's type: the backend may run the weights in
// one launch.
void ProfilingBackend::matmul_multi(const ops::MultiMatmulParams& p) {
    const uint8_t cls = p.n_tokens <= kSmallMatmulTokens ? kSmall : kBatched;
    timed({Op::matmul, cls, p.n > 0 ? p.w[0].type : GgmlType::F32}, [&] { inner_->matmul_multi(p); });
}
void ProfilingBackend::get_rows(const ops::GetRowsParams& p) {
    timed({Op::get_rows, kNoVariant, p.w.type}, [&] { inner_->get_rows(p); });
}
void ProfilingBackend::geglu(const ops::GegluParams& p) {
    timed({Op::geglu}, [&] { inner_->geglu(p); });
}
void ProfilingBackend::attention(const ops::AttentionParams& p) {
    timed({Op::attention, p.window != 0 ? kSliding : kFull}, [&] { inner_->attention(p); });
}
void ProfilingBackend::moe_route(const ops::MoeRouteParams& p) {
    timed({Op::moe_route}, [&] { inner_->moe_route(p); });
}
void ProfilingBackend::moe_group(const ops::MoeGroupParams& p) {
    timed({Op::moe_group}, [&] { inner_->moe_group(p); });
}
void ProfilingBackend::moe_route_group(const ops::MoeRouteParams& r, const ops::MoeGroupParams& g) {
    timed({Op::moe_route_group}, [&] { inner_->moe_route_group(r, g); });
}
void ProfilingBackend::moe_matmul(const ops::MoeMatmulParams& p) {
    timed({Op::moe_matmul, kNoVariant, p.w.type}, [&] { inner_->moe_matmul(p); });
}
void ProfilingBackend::moe_combine(const ops::MoeCombineParams& p) {
    timed({Op::moe_combine}, [&] { inner_->moe_combine(p); });
}

void ProfilingBackend::gather_rows(const ops::GatherRowsParams& p) {
    timed({Op::gather_rows}, [&] { inner_->gather_rows(p); });
}
void ProfilingBackend::scatter_add(const ops::ScatterAddParams& p) {
    timed({Op::scatter_add}, [&] { inner_->scatter_add(p); });
}
void ProfilingBackend::kv_store(const ops::KvStoreParams& p) {
    timed({Op::kv_store}, [&] { inner_->kv_store(p); });
}
void ProfilingBackend::copy_blocks(const ops::CopyBlocksParams& p) {
    timed({Op::copy_blocks}, [&] { inner_->copy_blocks(p); });
}
void ProfilingBackend::feed_tokens(const ops::FeedTokensParams& p) {
    timed({Op::feed_tokens}, [&] { inner_->feed_tokens(p); });
}
void ProfilingBackend::argmax_rows(const ops::ArgmaxRowsParams& p) {
    timed({Op::argmax_rows}, [&] { inner_->argmax_rows(p); });
}

void ProfilingBackend::topk_rows(const ops::TopkRowsParams& p) {
    timed({Op::topk_rows}, [&] { inner_->topk_rows(p); });
}

void ProfilingBackend::add(const float* a, const float* b, float* y, int64_t n) {
    timed({Op::add}, [&] { inner_->add(a, b, y, n); });
}
void ProfilingBackend::scale(float* x, float s, int64_t n) {
    timed({Op::scale}, [&] { inner_->scale(x, s, n); });
}
void ProfilingBackend::mul(const float* a, const float* b, float* y, int64_t n) {
    timed({Op::mul}, [&] { inner_->mul(a, b, y, n); });
}
void ProfilingBackend::softcap(float* x, float cap, int64_t n) {
    timed({Op::softcap}, [&] { inner_->softcap(x, cap, n); });
}

}  // namespace hf2q::runtime
