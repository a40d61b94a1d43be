// SPDX-License-Identifier: MIT
// clef._core: the Python extension of the `clef` package (docs/PYTHON.md). A thin layer over the
// engine: the model options are parsed by the CLI's own flag table (apps/clef/engine_flags.h), the
// model is resolved as `clef -m` resolves it, and every answer comes from Engine::decide or the
// --jsonl line function, so the package answers what the CLI answers, byte for byte. The engine
// runs with the GIL released; each Model's mutex serialises that model's engine calls (an Engine
// is one sequence at a time), two Models run at once, and parsing a request and decoding its
// images (Engine::prepare) run concurrently with both. Loading takes a process-wide mutex
// (load_mutex()).
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/platform.h"
#include "core/version.h"
#include "decide_jsonl.h"
#include "decision/request_error.h"
#include "engine_flags.h"
#include "hub/cache.h"
#include "hub/pull.h"
#include "inspect_report.h"
#include "ops/parallel.h"
#include "runtime/engine.h"
#include "runtime/inspect.h"

namespace nb = nanobind;

namespace {

using clef::Decision;
using clef::Engine;

/// Raises the clef._errors exception class `cls_name` built as cls(message, **fields).
void raise_clef_error(const char* cls_name, const std::string& message, nb::dict fields) {
  nb::object cls = nb::module_::import_("clef._errors").attr(cls_name);
  nb::object exc = cls(message, **fields);
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

/// clef::Error (and CLI11's parse errors) as the package's exceptions (python/clef/_errors.py),
/// carrying the CLI's exit code, and for a refused request its wire code, JSON path and offset.
void translate_errors(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const clef::RequestError& e) {
    nb::dict f;
    f["code"] = e.code_name();
    f["path"] = e.path().str();
    f["detail"] = e.message();
    f["offset"] = e.offset() ? nb::cast(*e.offset()) : nb::none();
    raise_clef_error("RequestError", e.what(), f);
  } catch (const clef::Error& e) {
    const char* cls = "InternalError";
    switch (e.kind()) {
      case clef::ErrorKind::kInvalidArgument: cls = "InvalidArgument"; break;
      case clef::ErrorKind::kModelLoad: cls = "ModelError"; break;
      case clef::ErrorKind::kUnsupported: cls = "Unsupported"; break;
      case clef::ErrorKind::kIo: cls = "IoError"; break;
      case clef::ErrorKind::kInternal: break;
    }
    raise_clef_error(cls, e.what(), nb::dict());
  } catch (const CLI::Error& e) {
    std::string what = e.what();
    for (char& c : what) c = c == '\n' ? ' ' : c;
    raise_clef_error("InvalidArgument", what, nb::dict());
  }
}

/// The engine options a Python call names, as `clef decide` flags (`--precision bf16`, ...): parsed
/// by the CLI's own table so that names, checks and defaults are the CLI's.
struct ModelFlags {
  clef::cli::EngineFlags engine;
  std::int64_t state_cache_mb = clef::EngineOptions::kDefaultStateCacheMb;
  CLI::Option* model = nullptr;
};

void parse_model_flags(ModelFlags& f, std::vector<std::string> args) {
  CLI::App app("clef.Model");
  f.model = clef::cli::add_engine_flags(app, f.engine);
  app.add_option("--state-cache-mb", f.state_cache_mb)
      ->check(clef::cli::in_range(std::int64_t{0}, std::int64_t{1} << 30));
  app.allow_extras(false);
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  app.parse(args);
}

/// The lock a Model's loading takes: building an engine sets process-wide GEMM options (whether
/// fp32 mode keeps resident fp32 weight copies, ops/gemm.h) that the weights read as they are
/// made. Engine calls do not take it: two engines run at once, each kernel's work buffers being
/// per calling thread and the GEMM library's scratchpad per call (ops/cpu/gemm_onednn.cc).
std::mutex& load_mutex() {
  static std::mutex m;
  return m;
}

/// A loaded model: the engine, one call at a time under mu_.
class PyModel {
 public:
  /// `args` are `clef decide` engine flags (see ModelFlags); `--model` absent = the embedded default.
  explicit PyModel(std::vector<std::string> args) {
    ModelFlags f;
    parse_model_flags(f, std::move(args));
    nb::gil_scoped_release unlocked;
    bool is_default = false;
    path_ = clef::cli::resolve_model_arg(f.engine.model_dir, f.model->count() > 0, f.engine.revision, f.engine.pull,
                                         &is_default);
    clef::EngineOptions eo = clef::cli::engine_options(f.engine);
    eo.state_cache_mb = f.state_cache_mb;
    eo.accept_any_model = true;  // the folder chooses the model, as in `clef decide`
    // Decisions from several Python threads, and decide_many's lines in flight, share prefill steps
    // (docs/ARCHITECTURE.md "Continuous batching"); the answers are those of one at a time.
    eo.batching = true;
    const std::lock_guard<std::mutex> lock(load_mutex());
    engine_ = clef::cli::with_default_hint(path_, is_default, [&] { return std::make_unique<Engine>(path_, eo); });
    threads_ = clef::ops::num_threads();  // what the engine set on this thread (0 = all usable CPUs)
    chunk_ = f.engine.chunk;
    context_ = f.engine.max_tokens;
  }

  /// One request body, UTF-8 bytes (SystemOne or OpenAI's Decisions contract, by its shape).
  /// Thread-safe: decisions from several threads run at once, batched.
  Decision decide(nb::bytes request) {
    const std::string body(request.c_str(), request.size());
    nb::gil_scoped_release unlocked;
    clef::ops::set_num_threads(threads_);  // image preprocessing runs on the pool too
    clef::PreparedRequest prepared = engine_->prepare(body, clef::Dialect::kDecisions);
    return engine_->decide(std::move(prepared));
  }

  /// One line of a request stream, answered as `clef decide --jsonl` answers line `line_no`.
  std::pair<std::string, std::optional<Decision>> decide_line(nb::bytes request, std::int64_t line_no) {
    const std::string line(request.c_str(), request.size());
    nb::gil_scoped_release unlocked;
    const bool too_long = line.size() > clef::cli::kMaxRequestLineBytes;
    std::optional<Decision> d;
    clef::ops::set_num_threads(threads_);
    std::string text = clef::cli::answer_request_line(*engine_, line, line_no, too_long, &d);
    return {std::move(text), std::move(d)};
  }

  /// Token ids of UTF-8 `text`; invalid UTF-8 (a lone surrogate passed through) is an InvalidArgument.
  std::vector<std::int32_t> tokenize(nb::bytes utf8) const {
    const std::string text(utf8.c_str(), utf8.size());
    nb::gil_scoped_release unlocked;
    return engine_->tokenizer().encode(text);  // const and thread-safe
  }

  /// [T, hidden_size] float32 hidden states, handed to NumPy without a copy.
  nb::ndarray<nb::numpy, float, nb::ndim<2>> hidden(std::vector<std::int32_t> ids) {
    auto rows = std::make_unique<std::vector<float>>();
    {
      nb::gil_scoped_release unlocked;
      *rows = engine_->hidden_states(ids);  // on the engine's compute thread
    }
    const std::size_t shape[2] = {ids.size(), static_cast<std::size_t>(engine_->hidden_size())};
    float* data = rows->data();
    nb::capsule owner(rows.release(), [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
    return nb::ndarray<nb::numpy, float, nb::ndim<2>>(data, 2, shape, owner);
  }

  /// `clef inspect --json`'s report of the loaded folder, as JSON text.
  std::string info_json() const {
    clef::ops::set_num_threads(threads_);  // the report names the pool's size on this thread
    const clef::ModelSummary s = clef::summarize(engine_->release());
    return clef::cli::inspect_json(engine_->release(), s, chunk_, context_).dump();
  }

  /// Unloading gives the freed heap back to the system (glibc keeps it otherwise: a 0.8b model's
  /// buffers stayed as ~400 MB of resident memory after the Model was collected).
  ~PyModel() {
    engine_.reset();
    clef::release_free_heap();  // glibc: malloc_trim(0)
  }
  PyModel(const PyModel&) = delete;
  PyModel& operator=(const PyModel&) = delete;

  Engine& engine() noexcept { return *engine_; }
  const std::string& path() const noexcept { return path_; }
  int threads() const noexcept { return threads_; }
  const std::string& name() const noexcept { return engine_->model_name(); }
  bool random_weights() const noexcept { return engine_->random_weights(); }
  std::pair<std::int64_t, std::int64_t> cache_counts() const {
    const clef::StateCacheStats s = engine_->state_cache_stats();
    return {static_cast<std::int64_t>(s.hits), static_cast<std::int64_t>(s.misses)};
  }

 private:
  std::string path_;
  std::unique_ptr<Engine> engine_;  ///< a batching engine: its calls are thread-safe
  /// The engine pool's size. OpenMP keeps it per calling thread, so every call sets it on its own
  /// thread: a decision from any Python thread runs on this many threads, whatever other Models of
  /// the process use.
  int threads_ = 1;
  std::int64_t chunk_ = 512, context_ = 16384;
};

/// decide_many's lines in flight (apps/clef/decide_jsonl.h LinePipeline): `parallel` decided at once
/// within a quarter of the usable memory, answers taken back in order.
class PyPipeline {
 public:
  PyPipeline(PyModel& model, std::size_t parallel)
      : threads_(model.threads()),
        pipe_(model.engine(), parallel, static_cast<std::size_t>(clef::usable_memory_bytes() / 4)) {}
  /// Starts line `line_no` (parse and tokenize here; waits for room). GIL released.
  void push(nb::bytes request, std::int64_t line_no) {
    std::string line(request.c_str(), request.size());
    nb::gil_scoped_release unlocked;
    clef::ops::set_num_threads(threads_);  // image preprocessing runs on the pool too
    const bool too_long = line.size() > clef::cli::kMaxRequestLineBytes;
    pipe_.push(std::move(line), line_no, too_long);
  }
  /// The oldest line's (text, Decision or None), waiting for it. GIL released while waiting.
  std::pair<std::string, std::optional<Decision>> pop() {
    nb::gil_scoped_release unlocked;
    clef::cli::LineAnswer a = pipe_.pop();
    return {std::move(a.text), std::move(a.decision)};
  }
  std::size_t pending() const { return pipe_.pending(); }
  bool front_ready() const { return pipe_.front_ready(); }
  /// Waits for the lines in flight (GIL released): closing decide_many's iterator ends here.
  void close() {
    nb::gil_scoped_release unlocked;
    while (pipe_.pending() > 0) {
      try {
        (void)pipe_.pop();
      } catch (...) {
        // an engine fault of a line nobody will read: the stream is being closed
      }
    }
  }

 private:
  int threads_;
  clef::cli::LinePipeline pipe_;
};

/// `clef pull NAME`: fetches a hub model into the shared cache; returns its local path.
std::string pull(const std::string& name, const std::string& revision) {
  const auto parsed = clef::hub::parse_model_name(name);
  if (!parsed)
    throw clef::InvalidArgument("not a hub model name (ORG/REPO, ORG/REPO:QUANT or ORG/REPO/FILE.gguf): " + name);
  clef::hub::PullOptions po;
  po.revision = revision;
  nb::gil_scoped_release unlocked;
  return clef::hub::pull_model(*parsed, po).model.path;
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "clef.cpp's engine (use the clef package, docs/PYTHON.md)";
  nb::register_exception_translator(translate_errors);
  // Objects still alive when the interpreter exits (a daemon thread inside decide_many) are not leaks of
  // the binding; nanobind's report of them would only alarm users.
  nb::set_leak_warnings(false);
  m.attr("__version__") = clef::kVersion;

  nb::class_<Decision>(m, "Decision", "One decision: the answer body and how it was computed.")
      .def("__repr__",
           [](const Decision& d) {
             return "Decision(input_tokens=" + std::to_string(d.input_tokens) + ", state_cache='" +
                    clef::state_cache_use_name(d.state_cache) + "', reused_tokens=" + std::to_string(d.reused_tokens) +
                    ", body=<" + std::to_string(d.body.size()) + " bytes>)";
           })
      .def_ro("body", &Decision::body, "The answer as compact JSON text (what `clef decide` prints).")
      .def_ro("input_tokens", &Decision::input_tokens)
      .def_ro("state_tokens_dropped", &Decision::state_tokens_dropped,
              "State tokens cut off to fit the token budget (overflow='truncate'; else 0).")
      .def_ro("reused_tokens", &Decision::reused_tokens, "Prefix + state tokens restored from the state cache.")
      .def_ro("state_key", &Decision::state_key, "SHA-256 (hex) of the model and the prefix + state tokens.")
      .def_prop_ro(
          "state_cache", [](const Decision& d) { return std::string(clef::state_cache_use_name(d.state_cache)); },
          "'hit', 'miss' or 'off'.")
      .def_prop_ro(
          "seconds",
          [](const Decision& d) {
            nb::dict t;
            t["tokenize"] = d.timings.tokenize;
            t["vision"] = d.timings.vision;
            t["prefill"] = d.timings.prefill;
            t["state_restore"] = d.timings.state_restore;
            t["head"] = d.timings.head;
            t["total"] = d.timings.total;
            return t;
          },
          "Wall-clock seconds per stage.");

  nb::class_<PyModel>(m, "Engine")
      .def(nb::init<std::vector<std::string>>(), nb::arg("args"))
      .def("decide", &PyModel::decide, nb::arg("body"))
      .def("decide_line", &PyModel::decide_line, nb::arg("line"), nb::arg("line_no"))
      .def("tokenize", &PyModel::tokenize, nb::arg("utf8"))
      .def("hidden", &PyModel::hidden, nb::arg("ids"))
      .def("info_json", &PyModel::info_json)
      .def("cache_counts", &PyModel::cache_counts)
      .def_prop_ro("path", &PyModel::path)
      .def_prop_ro("threads", &PyModel::threads)
      .def_prop_ro("name", &PyModel::name)
      .def_prop_ro("random_weights", &PyModel::random_weights);

  nb::class_<PyPipeline>(m, "Pipeline")
      .def(nb::init<PyModel&, std::size_t>(), nb::arg("engine"), nb::arg("parallel"), nb::keep_alive<1, 2>())
      .def("push", &PyPipeline::push, nb::arg("line"), nb::arg("line_no"))
      .def("pop", &PyPipeline::pop)
      .def("pending", &PyPipeline::pending)
      .def("front_ready", &PyPipeline::front_ready)
      .def("close", &PyPipeline::close);

  m.def("pull", &pull, nb::arg("name"), nb::arg("revision") = "");
}
