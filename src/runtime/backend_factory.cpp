#include "runtime/backend_factory.h"

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#ifdef HF2Q_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace hf2q::runtime {

bool cuda_available() {
#ifdef HF2Q_HAVE_CUDA
    return cuda::device_count() > 0;
#else
    return false;
#endif
}

std::unique_ptr<ops::Backend> make_backend(BackendKind kind, int n_threads, bool f32_matmul, bool concurrent_branches) {
    switch (kind) {
        case BackendKind::cpu:
            return cpu::make_backend(n_threads);
        case BackendKind::cuda:
#ifdef HF2Q_HAVE_CUDA
        {
            cuda::CudaOptions o;
            o.precision = f32_matmul ? cuda::MatmulPrecision::f32 : cuda::MatmulPrecision::bf16;
            o.concurrent_side = concurrent_branches;
            return cuda::make_backend(o);
        }
#else
            (void)f32_matmul;
            (void)concurrent_branches;
            fail("this hf2q was built without CUDA (configure with -DHF2Q_CUDA=ON on a machine with nvcc)");
#endif
    }
    fail("unknown backend kind");
}

std::unique_ptr<ops::Backend> make_weight_store(BackendKind kind) {
#ifdef HF2Q_HAVE_CUDA
    if (kind == BackendKind::cuda) {
        cuda::CudaOptions o;
        o.workspaces = false;
        o.concurrent_side = false;
        return cuda::make_backend(o);
    }
#endif
    return make_backend(kind, 1);
}

}  // namespace hf2q::runtime
