#include "tokenizer/escapes.h"

#include <cstdlib>

namespace hf2q::tokenizer {

std::string process_escapes(std::string_view in) {
    std::string out;
    out.reserve(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
        if (in[i] != '\\' || i + 1 >= in.size()) {
            out += in[i];
            continue;
        }
        const char c = in[++i];
        switch (c) {
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case '\'':
                out += '\'';
                break;
            case '"':
                out += '"';
                break;
            case '\\':
                out += '\\';
                break;
            case 'x':
                // Two characters parsed with strtol, accepted only if both are consumed
                // (llama.cpp's exact rule, including its leniency for " 5" or "+5").
                if (i + 2 < in.size()) {
                    const char x[3] = {in[i + 1], in[i + 2], 0};
                    char* end = nullptr;
                    const long v = std::strtol(x, &end, 16);
                    if (end == x + 2) {
                        out += static_cast<char>(v);
                        i += 2;
                        break;
                    }
                }
                out += '\\';
                out += c;
                break;
            default:
                out += '\\';
                out += c;
                break;
        }
    }
    return out;
}

}  // namespace hf2q::tokenizer
