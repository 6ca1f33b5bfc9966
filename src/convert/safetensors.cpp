#include "convert/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "core/checked.h"
#include "core/error.h"
#include "core/mapped_file.h"

namespace hf2q::convert {
namespace {

using json = nlohmann::json;

// Parses a non-negative JSON integer; `what` names the field in errors.
uint64_t json_u64(const json& v, const std::string& file, const std::string& tensor,
                  const char* what) {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0))
        fail(file, ": tensor '", tensor, "': ", what, " must be a non-negative integer, got ",
             v.dump());
    return v.get<uint64_t>();
}

bool dtype_from_name(std::string_view s, StDtype* out) {
    if (s == "F32")
        *out = StDtype::F32;
    else if (s == "F16")
        *out = StDtype::F16;
    else if (s == "BF16")
        *out = StDtype::BF16;
    else
        return false;
    return true;
}

// The JSON header, with duplicate top-level keys detected (nlohmann would silently keep
// one of them).
json parse_header_json(const uint8_t* p, size_t n, const std::string& file) {
    if (n == 0 || p[0] != '{') fail(file, ": safetensors header is not a JSON object");
    std::unordered_set<std::string> seen;
    std::string duplicate;
    json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (ev == json::parse_event_t::key && depth == 1 && duplicate.empty()) {
            const auto& k = parsed.get_ref<const std::string&>();
            if (!seen.insert(k).second) duplicate = k;
        }
        return true;
    };
    json h;
    try {
        h = json::parse(p, p + n, cb);
    } catch (const json::exception& e) {
        fail(file, ": safetensors header is not valid JSON: ", e.what());
    }
    if (!duplicate.empty())
        fail(file, ": tensor name '", duplicate, "' appears twice in the header");
    if (!h.is_object()) fail(file, ": safetensors header is not a JSON object");
    return h;
}

StTensor parse_entry(const std::string& name, const json& v, uint64_t data_len,
                     const std::string& file) {
    if (name.empty()) fail(file, ": a tensor has an empty name");
    if (!v.is_object()) fail(file, ": tensor '", name, "': entry is not a JSON object");
    auto dt = v.find("dtype"), sh = v.find("shape"), off = v.find("data_offsets");
    if (dt == v.end() || sh == v.end() || off == v.end())
        fail(file, ": tensor '", name, "': entry needs dtype, shape and data_offsets");
    if (!dt->is_string()) fail(file, ": tensor '", name, "': dtype is not a string");
    StTensor t;
    t.name = name;
    const auto& dts = dt->get_ref<const std::string&>();
    if (!dtype_from_name(dts, &t.dtype))
        fail(file, ": tensor '", name, "' has dtype ", dts,
             ", which the converter does not read (supported: F32, F16, BF16)");
    if (!sh->is_array()) fail(file, ": tensor '", name, "': shape is not an array");
    if (sh->size() > 8)
        fail(file, ": tensor '", name, "': shape has ", sh->size(), " dimensions (at most 8)");
    uint64_t numel = 1;
    for (const auto& d : *sh) {
        uint64_t x = json_u64(d, file, name, "shape entry");
        if (x > (uint64_t{1} << 62))
            fail(file, ": tensor '", name, "': dimension ", x, " is too large");
        auto m = checked_mul(numel, x);
        if (!m) fail(file, ": tensor '", name, "': element count overflows");
        numel = *m;
        t.shape.push_back(static_cast<int64_t>(x));
    }
    if (!off->is_array() || off->size() != 2)
        fail(file, ": tensor '", name, "': data_offsets must be [begin, end]");
    t.begin = json_u64((*off)[0], file, name, "data_offsets[0]");
    t.end = json_u64((*off)[1], file, name, "data_offsets[1]");
    if (t.begin > t.end)
        fail(file, ": tensor '", name, "': data_offsets begin ", t.begin, " > end ", t.end);
    if (t.end > data_len)
        fail(file, ": tensor '", name, "': data_offsets end ", t.end, " is past the data section (",
             data_len, " bytes)");
    auto bytes = checked_mul(numel, st_dtype_size(t.dtype));
    if (!bytes || *bytes != t.end - t.begin)
        fail(file, ": tensor '", name, "': ", t.end - t.begin, " data bytes do not match shape x ",
             dts, " (", numel, " elements)");
    return t;
}

void check_overlaps(std::vector<StTensor>& ts, const std::string& file) {
    std::vector<const StTensor*> by_off;
    for (const auto& t : ts)
        if (t.end > t.begin) by_off.push_back(&t);
    std::sort(by_off.begin(), by_off.end(),
              [](const StTensor* a, const StTensor* b) { return a->begin < b->begin; });
    for (size_t i = 1; i < by_off.size(); ++i)
        if (by_off[i]->begin < by_off[i - 1]->end)
            fail(file, ": tensors '", by_off[i - 1]->name, "' and '", by_off[i]->name,
                 "' have overlapping data ranges");
}

}  // namespace

std::string_view st_dtype_name(StDtype t) {
    switch (t) {
        case StDtype::F32:
            return "F32";
        case StDtype::F16:
            return "F16";
        case StDtype::BF16:
            return "BF16";
    }
    return "?";
}

size_t st_dtype_size(StDtype t) {
    switch (t) {
        case StDtype::F32:
            return 4;
        case StDtype::F16:
            return 2;
        case StDtype::BF16:
            return 2;
    }
    return 0;
}

uint64_t StTensor::n_elements() const {
    uint64_t n = 1;
    for (auto d : shape) n *= static_cast<uint64_t>(d);
    return n;
}

std::vector<StTensor> parse_safetensors(const uint8_t* data, size_t size, const std::string& name) {
    if (size < 8)
        fail(name, ": file is ", size, " bytes, too small for a safetensors header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
    if (n > kMaxSafetensorsHeader)
        fail(name, ": safetensors header length ", n, " exceeds the ", kMaxSafetensorsHeader,
             "-byte limit");
    if (n > size - 8)
        fail(name, ": safetensors header length ", n, " is past the end of the file (", size,
             " bytes)");
    json h = parse_header_json(data + 8, n, name);
    const uint64_t data_len = size - 8 - n;
    const uint8_t* base = data + 8 + n;
    std::vector<StTensor> out;
    for (auto it = h.begin(); it != h.end(); ++it) {
        if (it.key() == "__metadata__") continue;
        out.push_back(parse_entry(it.key(), it.value(), data_len, name));
        out.back().data = base + out.back().begin;
    }
    check_overlaps(out, name);
    std::sort(out.begin(), out.end(),
              [](const StTensor& a, const StTensor& b) { return a.name < b.name; });
    return out;
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), map_(std::make_unique<MappedFile>(path)) {
    tensors_ = parse_safetensors(map_->data(), map_->size(), path);
}

SafetensorsFile::~SafetensorsFile() = default;

const StTensor* SafetensorsFile::find(std::string_view name) const {
    auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                               [](const StTensor& t, std::string_view n) { return t.name < n; });
    return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

namespace {

namespace fs = std::filesystem;

// weight_map of model.safetensors.index.json: tensor name -> shard file name.
std::map<std::string, std::string> read_index(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    if (!f) fail(p.string(), ": cannot open");
    json j;
    try {
        j = json::parse(f);
    } catch (const json::exception& e) {
        fail(p.string(), ": not valid JSON: ", e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        fail(p.string(), ": missing the weight_map object");
    std::map<std::string, std::string> m;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string())
            fail(p.string(), ": weight_map entry '", it.key(), "' is not a string");
        const auto& shard = it.value().get_ref<const std::string&>();
        if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
            fail(p.string(), ": weight_map entry '", it.key(), "' names an invalid shard '", shard,
                 "'");
        m[it.key()] = shard;
    }
    if (m.empty()) fail(p.string(), ": weight_map is empty");
    return m;
}

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
    fs::path d(dir);
    std::unique_ptr<Checkpoint> ck(new Checkpoint());
    fs::path index = d / "model.safetensors.index.json";
    std::map<std::string, std::string> wmap;
    std::vector<std::string> files;
    if (fs::exists(index)) {
        wmap = read_index(index);
        for (const auto& [t, s] : wmap) files.push_back(s);
    } else {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(d, ec))
            if (e.path().extension() == ".safetensors" && e.is_regular_file())
                files.push_back(e.path().filename().string());
        if (ec) fail(dir, ": cannot list the directory: ", ec.message());
        if (files.empty()) fail(dir, ": no model.safetensors.index.json and no *.safetensors file");
    }
    std::sort(files.begin(), files.end());
    files.erase(std::unique(files.begin(), files.end()), files.end());
    std::unordered_map<std::string, std::string> owner;  // tensor -> shard
    for (size_t i = 0; i < files.size(); ++i) {
        ck->shards_.push_back(std::make_unique<SafetensorsFile>((d / files[i]).string()));
        for (const auto& t : ck->shards_.back()->tensors()) {
            auto [it, fresh] = owner.emplace(t.name, files[i]);
            if (!fresh)
                fail(dir, ": tensor '", t.name, "' is in both ", it->second, " and ", files[i]);
            if (!wmap.empty()) {
                auto w = wmap.find(t.name);
                if (w == wmap.end())
                    fail(files[i], ": tensor '", t.name, "' is not listed in the index weight_map");
                if (w->second != files[i])
                    fail(files[i], ": tensor '", t.name, "' is listed in the index under ",
                         w->second);
            }
            ck->entries_.push_back({&t, i});
        }
    }
    for (const auto& [t, s] : wmap)
        if (!owner.count(t))
            fail(index.string(), ": tensor '", t, "' is listed for ", s,
                 " but that shard does not hold it");
    return ck;
}

}  // namespace hf2q::convert
