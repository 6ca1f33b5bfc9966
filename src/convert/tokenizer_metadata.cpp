#include "convert/tokenizer_metadata.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/utf8.h"

namespace hf2q::convert {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;
using LogFn = std::function<void(const std::string&)>;

// Special-token kinds in the order llama.cpp's SpecialVocab visits them, with the
// GGUF key of each id ("seperator" is llama.cpp's spelling).
struct SpecialKind {
    const char* name;
    const char* id_key;
    const char* add_key;  // nullptr: llama.cpp has no add_<kind>_token key
};
constexpr std::array<SpecialKind, 7> kSpecialKinds = {{
    {"bos", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token"},
    {"eos", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_eos_token"},
    {"unk", "tokenizer.ggml.unknown_token_id", nullptr},
    {"sep", "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.add_sep_token"},
    {"pad", "tokenizer.ggml.padding_token_id", nullptr},
    {"cls", "tokenizer.ggml.cls_token_id", nullptr},
    {"mask", "tokenizer.ggml.mask_token_id", nullptr},
}};

// Chat-syntax tokens the Gemma 4 converter forces to USER_DEFINED so llama.cpp always
// matches them in text and always prints them (output parsers look for them).
constexpr std::array<std::string_view, 7> kVisibleTokens = {
    "<|channel>",       "<channel|>",       "<|tool_call>", "<tool_call|>",
    "<|tool_response>", "<tool_response|>", "<|\"|>"};

// Any tokenizer.json this large is not a tokenizer; the limit keeps a bad path from
// reading a multi-GB file into memory.
constexpr uintmax_t kMaxJsonBytes = 1ull << 30;
// GGUF (and llama.cpp) cap arrays at 2^30 elements; token ids are int32 in llama.cpp.
constexpr uint64_t kMaxTokens = 1ull << 30;

void note(const LogFn& log, const std::string& msg) {
    if (log) log(msg);
}

std::string read_file_bytes(const fs::path& path) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    if (ec) fail(path.string(), ": cannot read: ", ec.message());
    if (size > kMaxJsonBytes) fail(path.string(), ": file is too large (", size, " bytes)");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(path.string(), ": cannot open");
    std::string s(static_cast<size_t>(size), '\0');
    if (!in.read(s.data(), static_cast<std::streamsize>(s.size())))
        fail(path.string(), ": read error");
    return s;
}

json read_json_object(const fs::path& path) {
    const std::string text = read_file_bytes(path);
    json j;
    try {
        // The parser rejects ill-formed UTF-8 and lone surrogate escapes in strings.
        j = json::parse(text);
    } catch (const json::exception& e) {
        fail(path.string(), ": not valid JSON: ", e.what());
    }
    if (!j.is_object()) fail(path.string(), ": top level must be a JSON object");
    return j;
}

// Non-null member or nullptr.
const json* member(const json& obj, const char* key) {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

uint32_t token_id(const json& v, const std::string& where) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() >= kMaxTokens)
        fail(where, " must be a token id (integer 0..", kMaxTokens - 1, "), got ", v.dump());
    return static_cast<uint32_t>(v.get<uint64_t>());
}

// An entry of added_tokens: the fields the converter needs.
struct AddedToken {
    uint32_t id;
    std::string content;
    bool special;
};

// Gemma 4 tokens are plain UTF-8 text: GGUF strings and llama.cpp's token map need them
// non-empty (llama.cpp renames empty ones) and unique.
void check_token_text(const std::string& text, const std::string& where) {
    if (text.empty()) fail(where, ": token text is empty");
    if (!gguf::valid_utf8(text)) fail(where, ": token text is not valid UTF-8");
}

// tokenizer.json as a streaming (SAX) parse: the 262k-entry vocabulary and the 500k
// merges go straight into vectors instead of a JSON tree (several times faster, and the
// file is ~30 MB). Other small parts the converter needs are kept as JSON values.
struct RawTokenizerJson {
    bool has_model = false;
    json model_fields = json::object();  // model.* except vocab and merges
    bool has_vocab = false;
    std::vector<std::pair<std::string, uint64_t>> vocab;  // file order
    bool has_merges = false;
    bool merge_pairs = false;                                     // form of merges[0]
    std::vector<std::string> merge_strings;                       // "left right" form
    std::vector<std::pair<std::string, std::string>> merge_list;  // ["left", "right"] form
    json added_tokens;                                            // null when absent
    json post_processor;                                          // null when absent
};

class TokenizerJsonSax : public nlohmann::json_sax<json> {
  public:
    TokenizerJsonSax(const std::string& file, RawTokenizerJson& out) : file_(file), out_(out) {}

    bool null() override { return scalar(json()); }
    bool boolean(bool v) override { return scalar(json(v)); }
    bool number_integer(number_integer_t v) override { return scalar(json(v)); }
    bool number_unsigned(number_unsigned_t v) override {
        if (!stack_.empty() && stack_.back().kind == Kind::Vocab) {
            out_.vocab.emplace_back(std::move(stack_.back().key), v);
            return true;
        }
        return scalar(json(v));
    }
    bool number_float(number_float_t v, const string_t&) override { return scalar(json(v)); }
    bool string(string_t& v) override {
        if (!stack_.empty() && stack_.back().kind == Kind::Merges) {
            if (out_.merge_pairs)
                fail(where_merge(), " must be a pair [\"left\", \"right\"] like model.merges[0]");
            out_.merge_strings.push_back(std::move(v));
            return true;
        }
        if (!stack_.empty() && stack_.back().kind == Kind::Pair) {
            Frame& f = stack_.back();
            if (f.n == 0) pair_.first = std::move(v);
            if (f.n == 1) pair_.second = std::move(v);
            ++f.n;
            return true;
        }
        return scalar(json(std::move(v)));
    }
    bool binary(binary_t&) override { return scalar(json()); }
    bool key(string_t& k) override {
        stack_.back().key = std::move(k);
        return true;
    }
    bool start_object(std::size_t) override { return open(true); }
    bool start_array(std::size_t) override { return open(false); }
    bool end_object() override { return close(); }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t, const std::string&,
                     const nlohmann::detail::exception& e) override {
        fail(file_, ": not valid JSON: ", e.what());
    }

  private:
    enum class Kind { Root, Model, Vocab, Merges, Pair, Capture, Skip };
    struct Frame {
        Kind kind = Kind::Skip;
        json* node = nullptr;  // Capture: the container being filled
        std::string key;       // objects: key of the value being read
        size_t n = 0;          // Pair: strings seen
    };

    std::string where_merge() const {
        return str_cat(file_, ": model.merges[", out_.merge_strings.size() + out_.merge_list.size(),
                       "]");
    }

    // Where a value whose parent is the top frame goes: a JSON slot to fill, or nullptr
    // to drop it. Also rejects values of the wrong kind for the special paths.
    json* slot(bool container, bool is_object, bool is_null) {
        if (stack_.empty()) {
            if (!is_object) fail(file_, ": top level must be a JSON object");
            return nullptr;
        }
        Frame& f = stack_.back();
        switch (f.kind) {
            case Kind::Root:
                if (f.key == "added_tokens") return &out_.added_tokens;
                if (f.key == "post_processor") return &out_.post_processor;
                return nullptr;
            case Kind::Model:
                if (f.key == "vocab") {
                    if (!is_null && !(container && is_object))
                        fail(file_, ": model.vocab must be an object {token: id}");
                    return nullptr;
                }
                if (f.key == "merges") {
                    if (!is_null && !(container && !is_object))
                        fail(file_, ": model.merges must be an array");
                    return nullptr;
                }
                return &out_.model_fields[f.key];
            case Kind::Vocab:
                fail(file_, ": model.vocab[\"", f.key, "\"] must be a token id (integer 0..",
                     kMaxTokens - 1, ")");
            case Kind::Merges:
                if (container && !is_object) return nullptr;  // a pair, handled by open()
                fail(where_merge(),
                     " must be a string \"left right\" or a pair [\"left\", \"right\"]");
            case Kind::Pair:
                fail(where_merge(), " must be a pair of strings [\"left\", \"right\"]");
            case Kind::Capture:
                if (f.node->is_object()) return &(*f.node)[f.key];
                f.node->push_back(json());
                return &f.node->back();
            case Kind::Skip:
                return nullptr;
        }
        return nullptr;
    }

    void push(Kind kind, json* node = nullptr) {
        Frame f;
        f.kind = kind;
        f.node = node;
        stack_.push_back(std::move(f));
    }

    bool scalar(json v) {
        if (json* s = slot(false, false, v.is_null())) *s = std::move(v);
        return true;
    }

    bool open(bool is_object) {
        const bool root = stack_.empty();
        const Kind parent = root ? Kind::Skip : stack_.back().kind;
        const std::string pkey = root ? std::string() : stack_.back().key;
        json* s = slot(true, is_object, false);
        if (root) {
            push(Kind::Root);
        } else if (parent == Kind::Root && pkey == "model") {
            if (!is_object) fail(file_, ": model must be an object");
            out_.has_model = true;
            push(Kind::Model);
        } else if (parent == Kind::Model && pkey == "vocab") {
            out_.has_vocab = true;
            push(Kind::Vocab);
        } else if (parent == Kind::Model && pkey == "merges") {
            out_.has_merges = true;
            push(Kind::Merges);
        } else if (parent == Kind::Merges) {
            if (out_.merge_strings.size() + out_.merge_list.size() == 0) out_.merge_pairs = true;
            if (!out_.merge_pairs)
                fail(where_merge(), " must be a string \"left right\" like model.merges[0]");
            push(Kind::Pair);
        } else if (s) {
            *s = is_object ? json::object() : json::array();
            push(Kind::Capture, s);
        } else {
            push(Kind::Skip);
        }
        return true;
    }

    bool close() {
        if (stack_.back().kind == Kind::Pair) {
            if (stack_.back().n != 2)
                fail(where_merge(), " must be a pair of strings [\"left\", \"right\"]");
            out_.merge_list.push_back(std::move(pair_));
        }
        stack_.pop_back();
        return true;
    }

    const std::string& file_;
    RawTokenizerJson& out_;
    std::vector<Frame> stack_;
    std::pair<std::string, std::string> pair_;
};

RawTokenizerJson parse_tokenizer_json(const fs::path& path) {
    const std::string text = read_file_bytes(path);
    const std::string file = path.string();
    RawTokenizerJson raw;
    TokenizerJsonSax sax(file, raw);
    // The lexer rejects ill-formed UTF-8 and lone surrogate escapes in strings.
    json::sax_parse(text, &sax);
    return raw;
}

// model.vocab {text: id} -> tokens[id]; ids must be exactly 0..N-1.
std::vector<std::string> read_base_vocab(RawTokenizerJson& raw, const std::string& file) {
    if (!raw.has_vocab) fail(file, ": model.vocab must be an object {token: id}");
    if (raw.vocab.empty()) fail(file, ": model.vocab is empty");
    if (raw.vocab.size() > kMaxTokens) fail(file, ": model.vocab has too many tokens");
    std::vector<std::string> tokens(raw.vocab.size());
    std::vector<bool> seen(raw.vocab.size(), false);
    for (auto& [text, id] : raw.vocab) {
        auto where = [&, &text = text] { return str_cat(file, ": model.vocab[\"", text, "\"]"); };
        if (id >= tokens.size())
            fail(where(), " = ", id, ": ids must be dense 0..", tokens.size() - 1);
        if (seen[id]) fail(where(), " = ", id, ": id is used by \"", tokens[id], "\" too");
        if (text.empty() || !gguf::valid_utf8(text)) check_token_text(text, where());
        seen[id] = true;
        tokens[id] = std::move(text);
    }
    raw.vocab.clear();
    return tokens;
}

std::vector<AddedToken> read_added_tokens(const json& added_json, const std::string& file) {
    std::vector<AddedToken> out;
    if (added_json.is_null()) return out;
    const json* added = &added_json;
    if (!added->is_array()) fail(file, ": added_tokens must be an array");
    for (size_t i = 0; i < added->size(); ++i) {
        const json& e = (*added)[i];
        const std::string where = str_cat(file, ": added_tokens[", i, "]");
        if (!e.is_object()) fail(where, " must be an object");
        const json* id = member(e, "id");
        const json* content = member(e, "content");
        const json* special = member(e, "special");
        if (!id) fail(where, ": missing id");
        if (!content || !content->is_string()) fail(where, ": content must be a string");
        if (special && !special->is_boolean()) fail(where, ": special must be true or false");
        AddedToken t{token_id(*id, where + ".id"), content->get<std::string>(),
                     special && special->get<bool>()};
        check_token_text(t.content, where);
        out.push_back(std::move(t));
    }
    return out;
}

// Appends added tokens beyond the base vocabulary (ids must continue it densely) and
// checks that the others repeat their base token exactly.
void merge_added_tokens(std::vector<std::string>& tokens, const std::vector<AddedToken>& added,
                        const std::string& file) {
    const size_t base_n = tokens.size();
    std::vector<const AddedToken*> extra;
    for (size_t i = 0; i < added.size(); ++i) {
        const AddedToken& a = added[i];
        if (a.id < base_n) {
            if (tokens[a.id] != a.content)
                fail(file, ": added_tokens[", i, "] (id ", a.id, ", \"", a.content,
                     "\") does not match model.vocab token \"", tokens[a.id], "\" of that id");
            continue;
        }
        extra.push_back(&a);
    }
    if (extra.empty()) return;
    const uint64_t total = base_n + extra.size();
    if (total > kMaxTokens) fail(file, ": too many tokens");
    tokens.resize(total);
    std::vector<bool> seen(extra.size(), false);
    for (const AddedToken* a : extra) {
        if (a->id >= total)
            fail(file, ": added token \"", a->content, "\" has id ", a->id,
                 "; ids beyond model.vocab ", "must be dense ", base_n, "..", total - 1);
        if (seen[a->id - base_n])
            fail(file, ": added token id ", a->id, " is listed twice (\"", tokens[a->id], "\", \"",
                 a->content, "\")");
        seen[a->id - base_n] = true;
        tokens[a->id] = a->content;
    }
}

// text -> id over the whole vocabulary; duplicates are an error.
std::unordered_map<std::string_view, uint32_t> index_tokens(const std::vector<std::string>& tokens,
                                                            const std::string& file) {
    std::unordered_map<std::string_view, uint32_t> m;
    m.reserve(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
        auto [it, fresh] = m.emplace(tokens[i], static_cast<uint32_t>(i));
        if (!fresh)
            fail(file, ": token \"", tokens[i], "\" appears twice (ids ", it->second, " and ", i,
                 ")");
    }
    return m;
}

// A literal space inside a merge part is written as U+0120 (llama.cpp's convention for
// the pair form, so "left right" stays splittable at its one ASCII space).
std::string encode_merge_part(const std::string& s) {
    std::string r;
    r.reserve(s.size());
    for (char c : s) {
        if (c == ' ')
            r += "\xC4\xA0";
        else
            r += c;
    }
    return r;
}

// Checks one merge: both parts non-empty, and both and their concatenation are tokens,
// as HF tokenizers itself requires.
void check_merge(std::string_view left, std::string_view right, size_t i,
                 const std::unordered_map<std::string_view, uint32_t>& index, std::string& joined,
                 const std::string& file) {
    if (left.empty() || right.empty()) fail(file, ": model.merges[", i, "] has an empty part");
    joined.assign(left);
    joined += right;
    for (std::string_view part : {left, right, std::string_view(joined)})
        if (!index.count(part))
            fail(file, ": model.merges[", i, "] (\"", left, "\" + \"", right, "\"): \"", part,
                 "\" is not a token");
}

// model.merges: ["a b", ...] or [["a", "b"], ...] (one form throughout) -> "a b" strings.
std::vector<std::string> read_merges(RawTokenizerJson& raw,
                                     const std::unordered_map<std::string_view, uint32_t>& index,
                                     const std::string& file) {
    const size_t n = raw.merge_strings.size() + raw.merge_list.size();
    if (!raw.has_merges || n == 0)
        fail(file, ": model.merges must be a non-empty array (Gemma 4's BPE needs merges)");
    std::string joined;
    if (raw.merge_pairs) {
        std::vector<std::string> merges;
        merges.reserve(n);
        for (size_t i = 0; i < raw.merge_list.size(); ++i) {
            const auto& [left, right] = raw.merge_list[i];
            check_merge(left, right, i, index, joined, file);
            merges.push_back(encode_merge_part(left) + " " + encode_merge_part(right));
        }
        return merges;
    }
    for (size_t i = 0; i < raw.merge_strings.size(); ++i) {
        const std::string& s = raw.merge_strings[i];
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
            fail(file, ": model.merges[", i, "] = \"", s,
                 "\" must be two tokens separated by one space");
        check_merge(std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1), i, index,
                    joined, file);
    }
    return std::move(raw.merge_strings);
}

// A special-token entry of tokenizer_config.json: "text" or {"content": "text", ...}.
std::optional<std::string> special_text(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object()) {
        const json* c = member(v, "content");
        if (c && c->is_string()) return c->get<std::string>();
    }
    return std::nullopt;
}

// Texts named by a tokenizer_config.json list or {name: token} object
// (additional_special_tokens, extra_special_tokens).
std::vector<std::string> special_list(const json& v, const std::string& where) {
    std::vector<std::string> out;
    if (!v.is_array() && !v.is_object()) fail(where, " must be a list or an object of tokens");
    for (const auto& [k, e] : v.items()) {
        auto text = special_text(e);
        if (!text) fail(where, "[", k, "] must be a token string or {\"content\": ...}");
        out.push_back(std::move(*text));
    }
    return out;
}

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// State shared while reading the optional files.
struct Reader {
    std::vector<AddedToken> added;
    std::unordered_map<std::string_view, uint32_t> index;
    std::vector<bool> hf_special;  // per token: in HF all_special_ids
    const LogFn& log;
};

// HF all_special_ids: every tokenizer_config.json key "<name>_token" naming a token (bos,
// eos, ..., and model-specific ones such as Gemma 4's sot_token, boi_token) plus the
// additional_special_tokens / extra_special_tokens lists.
void mark_hf_specials(const json& cfg, const std::string& file, Reader& r) {
    std::vector<std::pair<std::string, std::string>> named;  // (key, text)
    for (const auto& [key, v] : cfg.items()) {
        if (key == "additional_special_tokens" || key == "extra_special_tokens") {
            if (v.is_null()) continue;
            for (auto& t : special_list(v, str_cat(file, ": ", key))) named.emplace_back(key, t);
        } else if (ends_with(key, "_token")) {
            if (auto t = special_text(v)) named.emplace_back(key, *t);
        }
    }
    for (const auto& [key, text] : named) {
        auto it = r.index.find(text);
        if (it == r.index.end()) {
            note(r.log,
                 str_cat(file, ": ", key, " \"", text, "\" is not in the vocabulary; ignored"));
            continue;
        }
        r.hf_special[it->second] = true;
    }
}

// Sets add_<kind>_token, keeping the position of an earlier setting (as llama.cpp's dict).
void set_add(HfTokenizer& t, const char* kind, bool on) {
    for (auto& [name, value] : t.add_special)
        if (name == kind) {
            value = on;
            return;
        }
    t.add_special.emplace_back(kind, on);
}

std::optional<std::string> template_special(const json& e) {
    if (!e.is_object()) return std::nullopt;
    const json* st = member(e, "SpecialToken");
    const json* id = st && st->is_object() ? member(*st, "id") : nullptr;
    if (!id || !id->is_string()) return std::nullopt;
    return id->get<std::string>();
}

// llama.cpp's reading of a TemplateProcessing post-processor (alone or in a Sequence):
// a special token before the sequence sets add_bos_token (true if it is the BOS text),
// one after it sets add_eos_token when it is the EOS text. `bos`/`eos`: the texts
// tokenizer_config.json names, nullopt without that file (then any token counts).
void read_post_processor(const json* pp, const std::optional<std::string>& bos,
                         const std::optional<std::string>& eos, bool have_config, HfTokenizer& t,
                         const LogFn& log) {
    if (!pp || !pp->is_object()) return;
    std::vector<const json*> procs;
    const json* list = member(*pp, "processors");
    if (list && list->is_array())
        for (const json& p : *list) procs.push_back(&p);
    else
        procs.push_back(pp);
    for (const json* p : procs) {
        const json* type = p->is_object() ? member(*p, "type") : nullptr;
        if (!type || *type != "TemplateProcessing") continue;
        const json* single = member(*p, "single");
        if (!single || !single->is_array() || single->size() < 2) continue;
        if (auto first = template_special(single->front()))
            set_add(t, "bos", !have_config || (bos && *first == *bos));
        if (auto last = template_special(single->back())) {
            if (!have_config || (eos && *last == *eos))
                set_add(t, "eos", true);
            else
                note(log, str_cat("tokenizer.json: post_processor appends \"", *last,
                                  "\", which is not eos_token; ignored"));
        }
    }
}

// bos/eos/... ids: the first added_tokens entry whose content is the configured text
// (llama.cpp's SpecialVocab looks there only), and the add_<kind>_token flags.
void read_special_ids(const json& cfg, const std::string& file, const Reader& r, HfTokenizer& t) {
    for (const SpecialKind& k : kSpecialKinds) {
        const std::string add_name = str_cat("add_", k.name, "_token");
        if (const json* add = member(cfg, add_name.c_str())) {
            if (!add->is_boolean()) fail(file, ": ", add_name, " must be true or false");
            if (k.add_key)
                set_add(t, k.name, add->get<bool>());
            else
                note(r.log, str_cat(file, ": ", add_name, " has no GGUF key; ignored"));
        }
        const std::string key = str_cat(k.name, "_token");
        const json* v = member(cfg, key.c_str());
        if (!v) continue;
        auto text = special_text(*v);
        if (!text) fail(file, ": ", key, " must be a token string or {\"content\": ...}");
        for (const AddedToken& a : r.added) {
            if (a.content != *text) continue;
            t.special_ids.emplace_back(k.name, a.id);
            break;
        }
    }
}

// config.json <kind>_token_id (top level, else text_config) fills kinds still unset.
void read_config_ids(const fs::path& path, const Reader& r, HfTokenizer& t) {
    const json cfg = read_json_object(path);
    const std::string file = path.string();
    const json* text_cfg = member(cfg, "text_config");
    for (const SpecialKind& k : kSpecialKinds) {
        const std::string key = str_cat(k.name, "_token_id");
        const json* v = member(cfg, key.c_str());
        if (!v && text_cfg && text_cfg->is_object()) v = member(*text_cfg, key.c_str());
        if (!v || !v->is_number_integer()) continue;  // lists (several EOS ids) are skipped
        bool have = false;
        for (const auto& [name, id] : t.special_ids) have = have || name == k.name;
        if (have) continue;
        if (!v->is_number_unsigned()) fail(file, ": ", key, " = ", v->dump(), " is negative");
        if (v->get<uint64_t>() >= t.tokens.size()) {
            note(r.log,
                 str_cat(file, ": ", key, " = ", v->dump(), " is not below the vocabulary size ",
                         t.tokens.size(), "; ignored"));
            continue;
        }
        t.special_ids.emplace_back(k.name, static_cast<uint32_t>(v->get<uint64_t>()));
    }
}

void read_tokenizer_config(const fs::path& path, const json* post_processor, Reader& r,
                           HfTokenizer& t) {
    const json cfg = read_json_object(path);
    const std::string file = path.string();
    mark_hf_specials(cfg, file, r);
    auto named = [&](const char* key) {
        const json* v = member(cfg, key);
        return v ? special_text(*v) : std::nullopt;
    };
    read_post_processor(post_processor, named("bos_token"), named("eos_token"), true, t, r.log);
    read_special_ids(cfg, file, r, t);
    if (const json* ct = member(cfg, "chat_template")) {
        if (!ct->is_string())
            fail(file,
                 ": chat_template must be a string (lists of named templates are not supported)");
        t.chat_template = ct->get<std::string>();
    }
}

bool is_byte_token(std::string_view s) {
    auto hex = [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    };
    return s.size() == 6 && s.substr(0, 3) == "<0x" && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

// llama.cpp's LlamaHfVocab types plus the Gemma 4 override (spec §2.3).
std::vector<TokenType> assign_types(const std::vector<std::string>& tokens, size_t base_n,
                                    const Reader& r) {
    std::vector<bool> added_special(tokens.size(), false);
    for (const AddedToken& a : r.added) added_special[a.id] = added_special[a.id] || a.special;
    std::vector<TokenType> types(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
        TokenType ty;
        if (i < base_n)
            ty = is_byte_token(tokens[i]) ? TokenType::BYTE
                 : r.hf_special[i]        ? TokenType::CONTROL
                                          : TokenType::NORMAL;
        else
            ty = r.hf_special[i] || added_special[i] ? TokenType::CONTROL : TokenType::USER_DEFINED;
        for (std::string_view v : kVisibleTokens)
            if (tokens[i] == v) ty = TokenType::USER_DEFINED;
        types[i] = ty;
    }
    return types;
}

}  // namespace

HfTokenizer read_hf_tokenizer(const std::string& hf_dir, const LogFn& log) {
    const fs::path dir(hf_dir);
    const fs::path tok_path = dir / "tokenizer.json";
    const std::string file = tok_path.string();
    HfTokenizer t;
    size_t base_n = 0;
    Reader r{{}, {}, {}, log};
    json post_processor;
    {
        RawTokenizerJson raw = parse_tokenizer_json(tok_path);
        if (!raw.has_model) fail(file, ": model must be an object");
        const json* type = member(raw.model_fields, "type");
        if (!type || *type != "BPE")
            fail(file, ": model.type must be \"BPE\" (Gemma 4), got ",
                 type ? type->dump() : "nothing");
        const json* bf = member(raw.model_fields, "byte_fallback");
        if (!bf || *bf != true)
            fail(file, ": model.byte_fallback must be true (Gemma 4 spells unknown bytes <0xHH>)");
        t.tokens = read_base_vocab(raw, file);
        base_n = t.tokens.size();
        r.added = read_added_tokens(raw.added_tokens, file);
        merge_added_tokens(t.tokens, r.added, file);
        r.index = index_tokens(t.tokens, file);
        t.merges = read_merges(raw, r.index, file);
        post_processor = std::move(raw.post_processor);
    }
    r.hf_special.assign(t.tokens.size(), false);
    if (fs::exists(dir / "tokenizer_config.json"))
        read_tokenizer_config(dir / "tokenizer_config.json", &post_processor, r, t);
    else
        read_post_processor(&post_processor, std::nullopt, std::nullopt, false, t, log);
    if (!t.chat_template && fs::exists(dir / "chat_template.jinja")) {
        const fs::path p = dir / "chat_template.jinja";
        t.chat_template = read_file_bytes(p);
        if (!gguf::valid_utf8(*t.chat_template)) fail(p.string(), ": not valid UTF-8");
    }
    if (fs::exists(dir / "config.json")) read_config_ids(dir / "config.json", r, t);
    t.token_types = assign_types(t.tokens, base_n, r);
    return t;
}

void write_tokenizer_metadata(gguf::Writer& w, HfTokenizer t) {
    using gguf::Value;
    HF2Q_ASSERT(t.token_types.size() == t.tokens.size());
    w.set("tokenizer.ggml.model", Value::string("gemma4"));
    const size_t n = t.tokens.size();
    w.set("tokenizer.ggml.tokens", Value::string_array(std::move(t.tokens)));
    // The HF-vocab path has no real scores; llama.cpp's BPE ignores them.
    w.set("tokenizer.ggml.scores", Value::f32_array(std::vector<float>(n, -1000.0f)));
    std::vector<int32_t> types(t.token_types.size());
    for (size_t i = 0; i < types.size(); ++i) types[i] = static_cast<int32_t>(t.token_types[i]);
    w.set("tokenizer.ggml.token_type", Value::i32_array(types));
    w.set("tokenizer.ggml.merges", Value::string_array(std::move(t.merges)));
    for (const auto& [name, id] : t.special_ids)
        for (const SpecialKind& k : kSpecialKinds)
            if (name == k.name) w.set(k.id_key, Value::u32(id));
    for (const auto& [name, on] : t.add_special)
        for (const SpecialKind& k : kSpecialKinds)
            if (name == k.name && k.add_key) w.set(k.add_key, Value::boolean(on));
    if (t.chat_template) w.set("tokenizer.chat_template", Value::string(*t.chat_template));
    w.set("tokenizer.ggml.add_space_prefix", Value::boolean(false));
    // llama.cpp forces BOS for Gemma 4 whatever the HF config says.
    w.set("tokenizer.ggml.add_bos_token", Value::boolean(true));
}

bool add_tokenizer_metadata(gguf::Writer& w, const std::string& hf_dir, const LogFn& log) {
    if (!fs::exists(fs::path(hf_dir) / "tokenizer.json")) {
        note(log, "no tokenizer.json: the GGUF has no tokenizer.* metadata");
        return false;
    }
    HfTokenizer t = read_hf_tokenizer(hf_dir, log);
    size_t n_special = 0;
    for (TokenType ty : t.token_types) n_special += ty == TokenType::CONTROL;
    note(log, str_cat("tokenizer: ", t.tokens.size(), " tokens (", n_special, " control), ",
                      t.merges.size(), " merges, chat template ", t.chat_template ? "yes" : "no"));
    write_tokenizer_metadata(w, std::move(t));
    return true;
}

}  // namespace hf2q::convert
