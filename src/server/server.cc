// SPDX-License-Identifier: MIT
#include "server/server.h"

#include "ops/isa.h"

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <boost/asio.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/paths.h"
#include "core/platform.h"
#include "server/body_decoder.h"
#include "server/connection.h"
#include "server/handlers.h"
#include "server/http_rules.h"
#include "server/metrics.h"
#include "server/reply.h"
#include "server/scheduler.h"

namespace clef::server {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

/// Connections admitted beyond --max-connections while the ones shed for them are closing.
constexpr std::size_t kShedSlack = 64;
/// After a burst of at least this many connections ends (the open count halves), the heap's free
/// pages are returned to the system (release_free_heap: glibc malloc_trim), so memory returns to its idle level.
constexpr std::size_t kTrimAfterBurst = 256;
/// Large bodies go straight to mmap and back to the system when freed (see docs/PERFORMANCE.md).
constexpr int kMmapThreshold = 1 << 20;

/// The listener: an acceptor and a few I/O threads (Boost.Asio), one Connection per socket, one
/// Scheduler for decisions (see server.h and docs/ARCHITECTURE.md "The HTTP server").
class HttpServer {
 public:
  HttpServer(Engine& engine, const ServeOptions& options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  int run();

 private:
  void accept();
  void refuse(tcp::socket& socket);
  void begin_shutdown();
  /// Called when a connection ended: the last one after shutdown lets the I/O threads return.
  void connection_ended();

  const ServeOptions& options_;
  Engine& engine_;
  Scheduler scheduler_;
  Metrics metrics_;
  AccessLog log_;
  HostPolicy hosts_;
  BodyBudget body_budget_;
  HandlerContext handlers_;
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;  ///< on the acceptor's strand
  /// Parses + validates decision bodies and decodes + preprocesses their images, off the I/O
  /// threads and the engine thread; two threads, so one slow image does not hold every body back,
  /// and at most two bodies' images are being decoded at once.
  asio::thread_pool validators_{2};
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> open_{0};
  std::atomic<std::size_t> peak_open_{0};    ///< most open connections since the last trim
  std::atomic<bool> burst_draining_{false};  ///< a burst's connections are still ending (trim down to zero)
  Connections connections_;
  ConnectionContext context_;
  /// Keeps the I/O threads running until shutdown has begun and the last connection ended.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_;
};

HostPolicy host_policy(const ServeOptions& options) {
  HostPolicy hosts;
  hosts.names.push_back(options.host);
  for (const std::string& h : options.allow_hosts) {
    if (h == "*") {
      hosts.any = true;
    } else {
      hosts.names.push_back(h);
    }
  }
  return hosts;
}

ServedModel served_model(const Engine& engine, const ServeOptions& options) {
  ServedModel served;
  served.name = engine.model_name();
  served.aliases = options.aliases;
  return served;
}

HttpServer::HttpServer(Engine& engine, const ServeOptions& options)
    : options_(options),
      engine_(engine),
      scheduler_(engine, SchedulerOptions{options.queue, options.max_running, options.batch_memory_bytes}),
      log_(metrics_, options.quiet),
      hosts_(host_policy(options)),
      body_budget_(std::max(options.body_budget_bytes, options.max_body_bytes)),
      handlers_{engine, scheduler_, metrics_, options, served_model(engine, options), log_},
      acceptor_(asio::make_strand(ioc_)),
      accept_retry_(acceptor_.get_executor()),
      context_{options,
               hosts_,
               handlers_,
               scheduler_,
               metrics_,
               log_,
               body_budget_,
               validators_,
               stopping_,
               connections_,
               [this] { connection_ended(); }} {
  if (StepBatcher* b = engine.batcher()) b->set_step_observer([this](const StepStats& s) { metrics_.observe_step(s); });
}

HttpServer::~HttpServer() {
  if (StepBatcher* b = engine_.batcher()) b->set_step_observer({});
}

void HttpServer::refuse(tcp::socket& socket) {
  // Beyond --max-connections: a short 503 written straight into the new socket's empty send
  // buffer (it never blocks), then the connection ends. No state is kept for it.
  metrics_.count_overload("connections");
  metrics_.count_request("unmatched", 503);
  static const std::string kRefusal =
      serialize(error_reply(http_error::kOverloaded, Dialect::kSystemOne,
                            "too many open connections (--max-connections); retry later"),
                true, true, false);
  boost::system::error_code ec;
  socket.non_blocking(true, ec);
  socket.send(asio::buffer(kRefusal), 0, ec);
  socket.shutdown(tcp::socket::shutdown_send, ec);
  socket.close(ec);
}

void HttpServer::accept() {
  acceptor_.async_accept(asio::make_strand(ioc_), [this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      const std::size_t open = open_.load();
      // At the limit, the connection that has waited longest for its request (idle, or still
      // sending its headers) is closed to make room; only when none waits is the new one refused.
      if (stopping_.load()) {
        boost::system::error_code ignored;
        socket.close(ignored);
      } else if (open >= options_.max_connections &&
                 (open >= options_.max_connections + kShedSlack || !connections_.shed_oldest_waiting())) {
        refuse(socket);
      } else {
        const std::size_t now = open_.fetch_add(1) + 1;
        std::size_t peak = peak_open_.load();
        while (now > peak && !peak_open_.compare_exchange_weak(peak, now)) {
        }
        start_connection(context_, std::move(socket));
      }
    } else if (ec == asio::error::no_descriptors) {
      // Out of file descriptors: try again a little later instead of spinning on accept (the
      // I/O threads keep serving meanwhile).
      accept_retry_.expires_after(std::chrono::milliseconds(10));
      accept_retry_.async_wait([this](boost::system::error_code e) {
        if (!e && acceptor_.is_open()) accept();
      });
      return;
    }
    accept();
  });
}

void HttpServer::connection_ended() {
  const std::size_t open = open_.fetch_sub(1) - 1;
  if (open == 0 && stopping_.load()) {
    asio::post(acceptor_.get_executor(), [this] { guard_.reset(); });
  }
  // A burst of connections ended: what their buffers left on the heap goes back to the system,
  // each time the open count halves and once more when the last of them ends (so the memory of the
  // burst's last connections is returned too: at most ~log2(peak) + 1 trims per burst).
  std::size_t peak = peak_open_.load();
  const bool burst = peak >= kTrimAfterBurst || burst_draining_.load();
  if (burst && peak > 0 && (open <= peak / 2 || open == 0) && peak_open_.compare_exchange_strong(peak, open)) {
    burst_draining_.store(open != 0);
    release_free_heap();
  }
}

void HttpServer::begin_shutdown() {
  stopping_.store(true);
  scheduler_.close();
  boost::system::error_code ec;
  acceptor_.close(ec);
  accept_retry_.cancel();
  // The references are taken under the registry's lock but used (and dropped) after it: dropping
  // the last one runs ~Connection, which takes the lock to deregister.
  std::vector<std::shared_ptr<Connection>> live = connections_.live();
  for (const auto& c : live) shutdown_connection(c);
  live.clear();
  if (open_.load() == 0) guard_.reset();
}

int HttpServer::run() {
  // Large bodies go straight to mmap and back to the system when freed (no dynamic threshold
  // growth that would keep a freed 64 MiB body on the heap).
  (void)set_heap_mmap_threshold(kMmapThreshold);
  // Connections need descriptors: use the hard limit.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }

  boost::system::error_code ec;
  asio::ip::address addr = asio::ip::make_address(options_.host, ec);
  if (ec) {
    tcp::resolver resolver(ioc_);
    const auto results = resolver.resolve(options_.host, "", ec);
    if (ec || results.empty()) throw IoError("cannot bind " + options_.host + ": unknown host");
    addr = results.begin()->endpoint().address();
  }
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  acceptor_.open(addr.is_v6() ? tcp::v6() : tcp::v4(), ec);
  if (ec) throw IoError("cannot bind " + where + " (" + ec.message() + ")");
  // SO_REUSEADDR only (restart without TIME_WAIT trouble); never SO_REUSEPORT, which would let a
  // second server share the port and silently take half the connections.
  acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  acceptor_.bind(tcp::endpoint(addr, static_cast<unsigned short>(options_.port)), ec);
  if (ec) {
    throw IoError("cannot bind " + where + " (address in use, not local, or a privileged port)");
  }
  acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw IoError("cannot listen on " + where + " (" + ec.message() + ")");
  const tcp::endpoint bound = acceptor_.local_endpoint();
  const std::string bound_host =
      bound.address().is_v6() ? "[" + bound.address().to_string() + "]" : bound.address().to_string();
  const bool auth = !options_.api_key.empty();
  if (!auth && !bound.address().is_loopback()) {
    // Not refused (a private network or a proxy in front may be the point), but never silent.
    std::fprintf(stderr,
                 "clef serve: warning: %s is not a loopback address and no API key is set: anyone who can reach "
                 "it can use this server (set --api-key or CLEF_API_KEY)\n",
                 bound.address().to_string().c_str());
  }
  std::string scheduling = "one decision at a time";
  if (const StepBatcher* b = engine_.batcher()) {
    const std::int64_t step = b->options().max_step_tokens;
    scheduling = "batching up to " + std::to_string(options_.max_running) + " decisions in steps of " +
                 std::to_string(step) + (step == 1 ? " token" : " tokens");
    if (options_.batch_memory_bytes > 0) {
      scheduling += " within " + std::to_string(options_.batch_memory_bytes >> 20) + " MiB";
    }
  }
  std::fprintf(stderr, "clef serve: listening on http://%s:%d (auth %s, model %s, queue %zu, %s, kernels %s)\n",
               bound_host.c_str(), static_cast<int>(bound.port()),
               auth ? "on: Bearer API key required except /health and /ready" : "off: no API key",
               printable(engine_.model_name()).c_str(), options_.queue, scheduling.c_str(),
               ops::isa_name(ops::active_isa()));
  std::fflush(stderr);

  // The signal thread: the first SIGINT/SIGTERM stops accepting (in-flight and queued requests
  // finish, their answers carry Connection: close); a second one exits at once with status 130. A
  // repeat within kSameStop of the first is the same stop: GNU timeout, for one, signals the process
  // and then its process group, so the server gets two SIGTERMs microseconds apart.
  static constexpr auto kSameStop = std::chrono::milliseconds(250);
  std::atomic<bool> done{false};
  std::thread signals([this, &done] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGUSR1);  // sent by run() itself to end this thread
    int stops = 0;
    std::chrono::steady_clock::time_point first;
    for (;;) {
      int sig = 0;
      if (sigwait(&set, &sig) != 0) continue;
      if (sig == SIGUSR1 && done.load()) return;
      if (sig == SIGUSR1) continue;
      if (++stops == 1) {
        first = std::chrono::steady_clock::now();
        std::fprintf(stderr, "clef serve: shutting down (finishing requests in flight; signal again to quit now)\n");
        asio::post(acceptor_.get_executor(), [this] { begin_shutdown(); });
      } else if (std::chrono::steady_clock::now() - first >= kSameStop) {
        std::_Exit(130);
      }
    }
  });

  guard_.emplace(ioc_.get_executor());
  accept();
  std::vector<std::thread> io;
  const std::size_t n = std::max<std::size_t>(1, options_.io_threads);
  for (std::size_t i = 1; i < n; ++i) io.emplace_back([this] { ioc_.run(); });
  ioc_.run();
  for (auto& t : io) t.join();
  validators_.join();
  done.store(true);
  pthread_kill(signals.native_handle(), SIGUSR1);
  signals.join();
  std::fprintf(stderr, "clef serve: stopped\n");
  return 0;
}

}  // namespace

void block_shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A peer that closes early must not kill the process when the answer is written.
  signal(SIGPIPE, SIG_IGN);
}

int serve(Engine& engine, const ServeOptions& options) {
  HttpServer server(engine, options);
  return server.run();
}

}  // namespace clef::server
