// CudaBackend: owns the device, a stream, a cuBLAS handle, every allocation, and the
// matmul scratch. Ops enqueue on the stream; download() synchronises.
#include <cstring>
#include <vector>

#include "backends/cuda/common.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels.h"
#include "core/progress.h"

namespace hf2q::cuda {
namespace {

// Weight rows expanded per SGEMM call: 64 Mi floats (256 MiB).
constexpr size_t kScratchFloats = size_t{64} << 20;

class CudaBackend final : public ops::Backend {
public:
    explicit CudaBackend(const CudaOptions& o) {
        int n = device_count();
        if (n == 0) fail("no CUDA device is available (check the driver and CUDA_VISIBLE_DEVICES)");
        if (o.device < 0 || o.device >= n) fail("CUDA device ", o.device, " does not exist (", n, " found)");
        HF2Q_CUDA_CHECK(cudaSetDevice(o.device));
        HF2Q_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        if (cublasCreate(&cublas_) != CUBLAS_STATUS_SUCCESS) fail("cannot create a cuBLAS handle");
        scratch_.buf = static_cast<float*>(alloc(kScratchFloats * sizeof(float)));
        scratch_.floats = kScratchFloats;
    }
    ~CudaBackend() override {
        cudaStreamSynchronize(stream_);
        for (void* p : allocs_) cudaFree(p);
        cublasDestroy(cublas_);
        cudaStreamDestroy(stream_);
    }

    const char* name() const override { return "cuda"; }
    bool host_memory() const override { return false; }

    void* alloc(size_t bytes) override {
        void* p = nullptr;
        cudaError_t e = cudaMalloc(&p, bytes > 0 ? bytes : 1);
        if (e != cudaSuccess) {
            size_t free_b = 0, total_b = 0;
            cudaGetLastError();
            cudaMemGetInfo(&free_b, &total_b);
            fail("out of GPU memory: allocating ", format_bytes(bytes), " with ", format_bytes(free_b), " free of ",
                 format_bytes(total_b), " (", format_bytes(bytes > free_b ? bytes - free_b : 0),
                 " missing); use a smaller quant type, context or batch");
        }
        HF2Q_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
        allocs_.push_back(p);
        return p;
    }
    void upload(void* dst, const void* src, size_t bytes) override {
        if (bytes == 0) return;
        HF2Q_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
        // The source is pageable host memory the caller may reuse right away.
        HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    void download(void* dst, const void* src, size_t bytes) override {
        if (bytes == 0) return;
        HF2Q_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
        HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    void fill_zero(void* dst, size_t bytes) override { HF2Q_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_)); }
    void synchronize() override { HF2Q_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

    void rms_norm(const ops::RmsNormParams& p) override { launch_rms_norm(p, stream_); }
    void rope(const ops::RopeParams& p) override { launch_rope(p, stream_); }
    void matmul(const ops::MatmulParams& p) override { launch_matmul(p, scratch_, cublas_, stream_); }
    void get_rows(const ops::GetRowsParams& p) override { launch_get_rows(p, stream_); }
    void geglu(const ops::GegluParams& p) override { launch_geglu(p, stream_); }
    void attention(const ops::AttentionParams& p) override { launch_attention(p, stream_); }
    void moe_route(const ops::MoeRouteParams& p) override { launch_moe_route(p, stream_); }
    void gather_rows(const ops::GatherRowsParams& p) override { launch_gather_rows(p, stream_); }
    void scatter_add(const ops::ScatterAddParams& p) override { launch_scatter_add(p, stream_); }
    void kv_store(const ops::KvStoreParams& p) override { launch_kv_store(p, stream_); }
    void copy_blocks(const ops::CopyBlocksParams& p) override { launch_copy_blocks(p, stream_); }
    void add(const float* a, const float* b, float* y, int64_t n) override { launch_add(a, b, y, n, stream_); }
    void scale(float* x, float s, int64_t n) override { launch_scale(x, s, n, stream_); }
    void mul(const float* a, const float* b, float* y, int64_t n) override { launch_mul(a, b, y, n, stream_); }
    void softcap(float* x, float cap, int64_t n) override { launch_softcap(x, cap, n, stream_); }

private:
    cudaStream_t stream_ = nullptr;
    cublasHandle_t cublas_ = nullptr;
    MatmulScratch scratch_;
    std::vector<void*> allocs_;
};

}  // namespace

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

std::unique_ptr<ops::Backend> make_backend(const CudaOptions& opts) { return std::make_unique<CudaBackend>(opts); }

}  // namespace hf2q::cuda
