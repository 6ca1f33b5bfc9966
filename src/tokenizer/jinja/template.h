// Sandboxed Jinja2 engine for chat templates.
//
// Renders templates as Hugging Face transformers' apply_chat_template does: Python
// jinja2's ImmutableSandboxedEnvironment with trim_blocks=True, lstrip_blocks=True, the
// loop-controls extension (break/continue), and the globals raise_exception(msg) and
// strftime_now(fmt); `tojson` keeps non-ASCII text (ensure_ascii=False) and uses
// Python's json.dumps separators and escaping. See docs/templates.md for the supported
// language subset.
//
// Sandbox: a template sees only the context variables and the built-ins; nothing can
// be mutated except namespace() attributes; loops, calls, output size and wall time are
// bounded by RenderLimits. Every error (syntax, runtime, limit) is an hf2q::Error whose
// message starts with "<name>:<line>:<col>: ".
//
//   auto t = jinja::Template::parse(source, "chat_template");
//   std::string prompt = t.render(context);   // context: {"messages": [...], ...}
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hf2q::jinja {

struct Node;

struct RenderLimits {
    uint64_t max_iterations = 1'000'000;      // loop iterations + macro calls, and list sizes
    uint64_t max_output_bytes = 16ull << 20;  // the output and every string built on the way
    int max_call_depth = 100;                 // nested macro / caller() calls
    double max_seconds = 2.0;                 // wall time of one render
};

class Template {
  public:
    // Tokenizes and parses; throws hf2q::Error "name:line:col: message" on syntax
    // errors, unknown tags, filters or tests.
    static Template parse(const std::string& source, std::string name = "template");

    Template(Template&&) noexcept;
    Template& operator=(Template&&) noexcept;
    ~Template();

    // `context` must be a JSON object; its members become template variables.
    // ordered_json keeps the object key order of the input (Python dict order), which
    // matters for `items`, `tojson` and loops over mappings; nlohmann::json sorts keys.
    std::string render(const nlohmann::ordered_json& context,
                       const RenderLimits& limits = {}) const;
    std::string render(const nlohmann::json& context, const RenderLimits& limits = {}) const;

    const std::string& name() const { return name_; }

  private:
    Template() = default;
    std::string name_;
    std::vector<std::unique_ptr<Node>> body_;
};

}  // namespace hf2q::jinja
