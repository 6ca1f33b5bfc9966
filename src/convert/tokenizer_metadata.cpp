#include "convert/tokenizer_metadata.h"

#include <filesystem>

namespace hf2q::convert {

bool add_tokenizer_metadata(gguf::Writer& /*w*/, const std::string& hf_dir,
                            const std::function<void(const std::string&)>& log) {
    if (!std::filesystem::exists(std::filesystem::path(hf_dir) / "tokenizer.json")) return false;
    if (log)
        log("tokenizer.json found but tokenizer conversion is not implemented yet; "
            "the GGUF has no tokenizer.* metadata");
    return false;
}

}  // namespace hf2q::convert
