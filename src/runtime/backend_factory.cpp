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

std::unique_ptr<ops::Backend> make_backend(BackendKind kind, int n_threads) {
    switch (kind) {
        case BackendKind::cpu:
            return cpu::make_backend(n_threads);
        case BackendKind::cuda:
#ifdef HF2Q_HAVE_CUDA
            return cuda::make_backend(cuda::CudaOptions{});
#else
            fail("this hf2q was built without CUDA (configure with -DHF2Q_CUDA=ON on a machine with nvcc)");
#endif
    }
    fail("unknown backend kind");
}

}  // namespace hf2q::runtime
