// Hook for tokenizer.* metadata of a converted model.
#pragma once

#include <functional>
#include <string>

namespace hf2q::gguf {
class Writer;
}

namespace hf2q::convert {

// Adds the tokenizer.* keys (spec gguf-gemma4.md §2.3) read from the HF directory's
// tokenizer.json / tokenizer_config.json. Called by the converter after the model keys
// and general.quantization_version. Returns true if any key was added. A model without
// tokenizer.json converts without tokenizer metadata.
bool add_tokenizer_metadata(gguf::Writer& w, const std::string& hf_dir,
                            const std::function<void(const std::string&)>& log);

}  // namespace hf2q::convert
