// CpuBackend: owns the thread pool and per-thread scratch and forwards each op to its
// family's file. Not safe for concurrent calls from several threads (ops share the
// pool and the scratch); one backend serves one forward pass at a time.
#include "backends/cpu/cpu_backend.h"

#include "backends/cpu/cpu_ops.h"
#include "core/thread_pool.h"

namespace hf2q::cpu {
namespace {

class CpuBackend final : public ops::Backend {
  public:
    explicit CpuBackend(int n_threads) : pool_(n_threads), scratch_(pool_.size()) {}

    const char* name() const override { return "cpu"; }

    void rms_norm(const ops::RmsNormParams& p) override { cpu::rms_norm(ctx_, p); }
    void rope(const ops::RopeParams& p) override { cpu::rope(ctx_, p); }
    void matmul(const ops::MatmulParams& p) override { cpu::matmul(ctx_, p); }
    void get_rows(const ops::GetRowsParams& p) override { cpu::get_rows(ctx_, p); }
    void geglu(const ops::GegluParams& p) override { cpu::geglu(ctx_, p); }
    void attention(const ops::AttentionParams& p) override { cpu::attention(ctx_, p); }
    void moe_route(const ops::MoeRouteParams& p) override { cpu::moe_route(ctx_, p); }
    void moe_group(const ops::MoeGroupParams& p) override { cpu::moe_group(ctx_, p); }
    void moe_matmul(const ops::MoeMatmulParams& p) override { cpu::moe_matmul(ctx_, p); }
    void moe_combine(const ops::MoeCombineParams& p) override { cpu::moe_combine(ctx_, p); }
    void gather_rows(const ops::GatherRowsParams& p) override { cpu::gather_rows(ctx_, p); }
    void scatter_add(const ops::ScatterAddParams& p) override { cpu::scatter_add(ctx_, p); }
    void kv_store(const ops::KvStoreParams& p) override { cpu::kv_store(ctx_, p); }
    void copy_blocks(const ops::CopyBlocksParams& p) override { cpu::copy_blocks(ctx_, p); }
    void feed_tokens(const ops::FeedTokensParams& p) override { cpu::feed_tokens(ctx_, p); }
    void argmax_rows(const ops::ArgmaxRowsParams& p) override { cpu::argmax_rows(ctx_, p); }
    void topk_rows(const ops::TopkRowsParams& p) override { cpu::topk_rows(ctx_, p); }

    void add(const float* a, const float* b, float* y, int64_t n) override {
        cpu::add(ctx_, a, b, y, n);
    }
    void scale(float* x, float s, int64_t n) override { cpu::scale(ctx_, x, s, n); }
    void mul(const float* a, const float* b, float* y, int64_t n) override {
        cpu::mul(ctx_, a, b, y, n);
    }
    void softcap(float* x, float cap, int64_t n) override { cpu::softcap(ctx_, x, cap, n); }

  private:
    ThreadPool pool_;
    Scratch scratch_;
    std::vector<float> rows_;
    Context ctx_{pool_, scratch_, rows_};
};

}  // namespace

std::unique_ptr<ops::Backend> make_backend(int n_threads) {
    return std::make_unique<CpuBackend>(n_threads);
}

}  // namespace hf2q::cpu
