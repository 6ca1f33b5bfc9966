// Backslash-escape processing as llama.cpp's llama-tokenize applies to its input by
// default (common's string_process_escapes): \n \r \t \' \" \\ and \xHH are replaced,
// any other backslash pair is kept as it is. The reference token ids in
// testdata/tokenizer/gemma4-tokenizer-cases.jsonl were produced this way, and
// `hf2q tokenize` does the same unless given --no-escape.
#pragma once

#include <string>
#include <string_view>

namespace hf2q::tokenizer {

std::string process_escapes(std::string_view in);

}  // namespace hf2q::tokenizer
