#include "runtime/imatrix.h"

#include "core/error.h"
#include "gguf/gguf.h"

namespace hf2q::runtime {

MatmulObserver ImatrixCollector::observer() {
    return [this](const std::string& t, int32_t e, const float* x, int64_t rows, int64_t cols) { add(t, e, x, rows, cols); };
}

void ImatrixCollector::add(const std::string& tensor, int32_t expert, const float* x, int64_t rows, int64_t cols) {
    std::lock_guard<std::mutex> lk(mu_);
    Entry& e = entries_[tensor];
    if (e.n_cols == 0) {
        e.n_cols = cols;
        e.n_mats = expert >= 0 ? std::max<int64_t>(1, n_expert_) : 1;
        e.sum2.assign(static_cast<size_t>(e.n_mats * cols), 0.0);
        e.counts.assign(static_cast<size_t>(e.n_mats), 0);
    }
    if (e.n_cols != cols) fail("imatrix: tensor '", tensor, "' seen with ", cols, " columns, before ", e.n_cols);
    const int64_t m = expert >= 0 ? expert : 0;
    if (m >= e.n_mats) fail("imatrix: expert ", expert, " out of range for '", tensor, "'");
    double* s = e.sum2.data() + m * cols;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) {
            const double v = x[r * cols + j];
            s[j] += v * v;
        }
    e.counts[static_cast<size_t>(m)] += rows;
}

void ImatrixCollector::save(const std::string& path, const std::vector<std::string>& datasets,
                            uint32_t chunk_count, uint32_t chunk_size) const {
    gguf::Writer w;
    w.set("general.type", gguf::Value::string("imatrix"));
    w.set("imatrix.datasets", gguf::Value::string_array(datasets));
    w.set("imatrix.chunk_count", gguf::Value::u32(chunk_count));
    w.set("imatrix.chunk_size", gguf::Value::u32(chunk_size));
    for (const auto& [name, e] : entries_) {
        w.add_tensor(name + ".in_sum2", GgmlType::F32, {e.n_cols, e.n_mats});
        w.add_tensor(name + ".counts", GgmlType::F32, {1, e.n_mats});
    }
    w.begin(path);
    for (const auto& [name, e] : entries_) {
        std::vector<float> s(e.sum2.begin(), e.sum2.end());
        w.write_tensor_data(s.data(), s.size() * sizeof(float));
        std::vector<float> c(e.counts.begin(), e.counts.end());
        w.write_tensor_data(c.data(), c.size() * sizeof(float));
    }
    w.finish();
}

}  // namespace hf2q::runtime
