// SPDX-License-Identifier: MIT
#include "server/connection.h"

#include <poll.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "core/platform.h"
#include "decision/dialects.h"
#include "server/request_gate.h"
#include "server/route_key.h"

namespace clef::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

/// Bytes read from the socket per body read: the per-connection body buffer, allocated only
/// while bytes are there to read (a stalled upload holds none) and freed after the body.
constexpr std::size_t kBodyChunk = 64 * 1024;
/// Requests per connection; the last answer carries Connection: close.
constexpr int kKeepAliveMax = 100;
/// Lingering close (RFC 9112 §9.6): after the last answer of a connection the server half-closes
/// and reads (and drops) what the client still sends, for at most this long / this many bytes, so
/// that unread pipelined bytes do not make the kernel reset the connection and destroy answers the
/// client has not read yet.
constexpr double kLingerSeconds = 2;
constexpr std::size_t kLingerBytes = std::size_t{1} << 20;
constexpr std::size_t kDrainChunk = 4096;
/// Idle seconds between requests on a keep-alive connection.
constexpr double kKeepAliveSeconds = 5;
/// Seconds an answer (or an interim 100 answer) may take to be written.
constexpr double kWriteSeconds = 30;
/// Interval of the disconnect / queue-deadline check of a queued decision.
constexpr auto kPollInterval = std::chrono::milliseconds(50);
/// Bodies at least this large are followed by release_free_heap() (glibc: malloc_trim(0)) once
/// freed (see docs/PERFORMANCE.md).
constexpr std::size_t kTrimAfterBytes = 1 << 20;
/// The interim answer (RFC 9110 §15.2.1).
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

void trim_heap(std::size_t freed_bytes) {
  if (freed_bytes >= kTrimAfterBytes) release_free_heap();
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count() + 1;
}

std::string unreadable_body_message() {
  return "the request body could not be read (malformed chunked encoding, bad compression or a timeout)";
}

}  // namespace

/// One connection: reads requests one after the other (pipelined bytes wait in the buffer and are
/// answered in order), answers each, and ends at the first framing error, deadline, refusal of an
/// unread body, keep-alive limit or shutdown. Every handler runs on the connection's strand.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ConnectionContext& ctx, tcp::socket socket);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void launch();
  void shutdown_async();
  void shed_async();

 private:
  enum class Phase : unsigned char { kIdle, kHeader, kBody, kWork, kWrite, kLinger, kClosed };

  void set_phase(Phase p);
  void on_shutdown();
  void read_request();
  void read_header();
  void on_header(beast::error_code ec);
  void handle_header();
  void read_body();
  void wait_body_bytes();
  void read_body_some();
  void on_body(beast::error_code ec);
  void body_done();
  void answer_without_body();
  void decide();
  void submit();
  void poll_job();
  void on_job_done();
  bool peer_gone();
  void refuse(const HttpError& error, const std::string& message, bool close, Dialect dialect = Dialect::kSystemOne);
  void release_body();
  void send(Reply reply, bool close, std::int64_t tokens = 0);
  void on_write(beast::error_code ec);
  void arm(double seconds);
  void disarm();
  void close();
  void linger_close();
  void drain();
  void reset_request();

  ConnectionContext& ctx_;
  tcp::socket socket_;
  asio::steady_timer deadline_;
  asio::steady_timer poll_timer_;
  std::uint64_t timer_gen_ = 0;
  bool timed_out_ = false;
  Phase phase_ = Phase::kHeader;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::buffer_body>> parser_;
  std::unique_ptr<char[]> chunk_;
  int served_ = 0;
  std::string local_address_;
  std::optional<Connections::Handle> registered_;

  // The request being handled.
  Clock::time_point t0_;
  GateVerdict verdict_;
  bool keep_alive_ = false;
  bool http11_ = true;
  std::unique_ptr<char[]> drain_;  ///< kDrainChunk bytes while lingering, else null
  std::size_t lingered_ = 0;       ///< bytes dropped while lingering
  bool keep_body_ = false;         ///< a decision body (decoded and kept) vs one read only to drop it
  bool chunk_too_large_ = false;   ///< a chunk size above --max-body was announced
  std::uint64_t raw_seen_ = 0;     ///< body bytes received (before decoding)
  /// The parser's chunk-header callback (Beast keeps a reference to it).
  std::function<void(std::uint64_t, std::string_view, beast::error_code&)> chunk_header_;
  BodyGrant grant_;  ///< body_'s share of the server's body budget
  std::unique_ptr<BodyDecoder> decoder_;
  std::string body_;
  std::string route_key_;                    ///< X-Clef-Route-Key of the body (computed with its validation)
  std::optional<PreparedRequest> prepared_;  ///< the body parsed, its images decoded (validators pool)
  std::size_t body_size_ = 0;                ///< decoded size of the last body (for malloc_trim)
  std::shared_ptr<Job> job_;
  Clock::time_point job_deadline_;
  bool probed_ = false;
  std::atomic<bool> gone_{false};  ///< read by the scheduler thread (still_wanted)
  std::string out_;                ///< the answer being written
  bool close_after_write_ = false;
};

// ---------------------------------------------------------------------------------------------
// Connections

Connections::Handle Connections::add(const std::shared_ptr<Connection>& c) {
  std::lock_guard<std::mutex> lock(mutex_);
  slots_.emplace_back();
  slots_.back().connection = c;
  return std::prev(slots_.end());
}

void Connections::remove(Handle h) {
  std::lock_guard<std::mutex> lock(mutex_);
  slots_.erase(h);
}

std::vector<std::shared_ptr<Connection>> Connections::live() {
  std::vector<std::shared_ptr<Connection>> out;
  std::lock_guard<std::mutex> lock(mutex_);
  out.reserve(slots_.size());
  for (const Slot& s : slots_) {
    if (auto c = s.connection.lock()) out.push_back(std::move(c));
  }
  return out;
}

bool Connections::shed_oldest_waiting() {
  std::shared_ptr<Connection> victim;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Slot* oldest = nullptr;
    std::int64_t since = std::numeric_limits<std::int64_t>::max();
    for (Slot& s : slots_) {
      const std::int64_t t = s.waiting_since.load();
      if (t > 0 && t < since && !s.shed.load()) {
        since = t;
        oldest = &s;
      }
    }
    if (oldest == nullptr) return false;
    oldest->shed.store(true);
    victim = oldest->connection.lock();
  }
  // Dropped after the lock: a last reference runs ~Connection, which takes the lock.
  if (!victim) return false;
  victim->shed_async();
  return true;
}

// ---------------------------------------------------------------------------------------------
// Connection

Connection::Connection(ConnectionContext& ctx, tcp::socket socket)
    : ctx_(ctx),
      socket_(std::move(socket)),
      deadline_(socket_.get_executor()),
      poll_timer_(socket_.get_executor()),
      buffer_(kHeaderLimit + kBodyChunk),
      grant_(&ctx.body_budget) {
  beast::error_code ec;
  const auto local = socket_.local_endpoint(ec);
  if (!ec) local_address_ = local.address().to_string();
  socket_.set_option(tcp::no_delay(true), ec);
  chunk_header_ = [this](std::uint64_t size, std::string_view, beast::error_code& e) {
    if (keep_body_ && size > ctx_.options.max_body_bytes) {
      chunk_too_large_ = true;
      e = http::error::body_limit;
    }
  };
}

Connection::~Connection() {
  const std::size_t held = std::max(body_size_, grant_.bytes());
  std::string().swap(body_);
  grant_.release();
  trim_heap(held);
  if (registered_) ctx_.registry.remove(*registered_);
  ctx_.ended();
}

void Connection::launch() {
  registered_ = ctx_.registry.add(shared_from_this());
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->read_request(); });
}

void Connection::shutdown_async() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] { self->on_shutdown(); });
}

void Connection::shed_async() {
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    // Still waiting for a request (its slot was chosen from another thread): close it silently.
    if (self->phase_ == Phase::kIdle || self->phase_ == Phase::kHeader) {
      self->ctx_.metrics.count_overload("shed");
      self->close();
    } else if (self->registered_) {
      (*self->registered_)->shed.store(false);
    }
  });
}

void Connection::set_phase(Phase p) {
  phase_ = p;
  if (registered_) {
    const bool waiting = p == Phase::kIdle || p == Phase::kHeader;
    (*registered_)->waiting_since.store(waiting ? now_ns() : 0);
  }
}

void Connection::arm(double seconds) {
  const std::uint64_t gen = ++timer_gen_;
  timed_out_ = false;
  deadline_.expires_after(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
  deadline_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (ec || gen != self->timer_gen_ || self->phase_ == Phase::kClosed) return;
    self->timed_out_ = true;
    beast::error_code ignored;
    self->socket_.cancel(ignored);
  });
}

void Connection::disarm() {
  ++timer_gen_;
  deadline_.cancel();
}

void Connection::close() {
  if (phase_ == Phase::kClosed) return;
  set_phase(Phase::kClosed);
  gone_.store(true);
  disarm();
  poll_timer_.cancel();
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  chunk_.reset();
}

void Connection::on_shutdown() {
  // A connection still sending a body is ended too: its request was not started (nothing is lost;
  // a balancer or client retries it), and a slow uploader must not hold the shutdown for up to
  // --body-timeout. Requests already validated, queued or running are answered.
  if (phase_ == Phase::kIdle || phase_ == Phase::kHeader || phase_ == Phase::kBody) close();
}

void Connection::linger_close() {
  if (phase_ == Phase::kClosed) return;
  set_phase(Phase::kLinger);
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (ec) {
    close();
    return;
  }
  drain_ = std::make_unique<char[]>(kDrainChunk);
  arm(kLingerSeconds);
  drain();
}

void Connection::drain() {
  socket_.async_read_some(asio::buffer(drain_.get(), kDrainChunk),
                          [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                            if (self->phase_ == Phase::kClosed) return;
                            self->lingered_ += n;
                            if (ec || self->timed_out_ || self->lingered_ > kLingerBytes) {
                              self->close();
                              return;
                            }
                            self->drain();
                          });
}

void Connection::reset_request() {
  verdict_ = GateVerdict{};
  keep_body_ = false;
  chunk_too_large_ = false;
  raw_seen_ = 0;
  decoder_.reset();
  std::string().swap(body_);
  grant_.release();
  job_.reset();
  route_key_.clear();
  probed_ = false;
  close_after_write_ = false;
}

void Connection::read_request() {
  reset_request();
  parser_.emplace();
  parser_->header_limit(kHeaderLimit);
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // counted here, after decoding
  // A chunk announced larger than --max-body is refused at once, not after its bytes arrive.
  parser_->on_chunk_header(chunk_header_);
  if (ctx_.stopping.load() && served_ > 0 && buffer_.size() == 0) {
    close();
    return;
  }
  if (served_ == 0 || buffer_.size() > 0) {
    read_header();
    return;
  }
  // Between requests: wait for the first byte of the next one (keep-alive idle timeout).
  set_phase(Phase::kIdle);
  buffer_.shrink_to_fit();
  arm(kKeepAliveSeconds);
  socket_.async_read_some(buffer_.prepare(1024), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
    if (self->phase_ == Phase::kClosed) return;
    if (ec) {
      self->close();
      return;
    }
    self->buffer_.commit(n);
    self->read_header();
  });
}

void Connection::read_header() {
  set_phase(Phase::kHeader);
  t0_ = Clock::now();
  arm(ctx_.options.header_timeout_seconds);
  http::async_read_header(socket_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
}

void Connection::on_header(beast::error_code ec) {
  if (phase_ == Phase::kClosed) return;
  disarm();
  if (!ec) {
    handle_header();
    return;
  }
  if (timed_out_) {
    if (buffer_.size() == 0) {
      close();  // nothing sent: no answer owed
      return;
    }
    refuse(http_error::kTimeout,
           "the request line and headers did not arrive within " + seconds_text(ctx_.options.header_timeout_seconds) +
               " s (--header-timeout)",
           true);
    return;
  }
  // The client left (or shutdown closed an idle connection); a close in the middle of the
  // headers (partial_message) is a departure too, not a malformed request: no answer, no 400.
  if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == asio::error::eof ||
      ec == asio::error::connection_reset || ec == asio::error::operation_aborted || ec == asio::error::broken_pipe) {
    close();
    return;
  }
  const ParseFailure failure = ec == http::error::header_limit || ec == http::error::buffer_overflow
                                   ? ParseFailure::kHeaderTooLarge
                               : ec == http::error::bad_content_length ? ParseFailure::kBadContentLength
                                                                       : ParseFailure::kOther;
  const std::string_view raw(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  const GateVerdict v = gate_parse_error(failure, ec.message(), raw, ctx_.options.max_body_bytes);
  refuse(*v.error, v.message, v.close);
}

void Connection::handle_header() {
  auto& req = parser_->get();
  RequestHead head;
  head.method = std::string_view(req.method_string().data(), req.method_string().size());
  head.version = req.version();
  head.target = std::string_view(req.target().data(), req.target().size());
  for (const auto& f : req) {
    head.fields.emplace_back(std::string_view(f.name_string().data(), f.name_string().size()),
                             std::string_view(f.value().data(), f.value().size()));
  }
  head.chunked = parser_->chunked();
  head.has_content_length = parser_->content_length() != boost::none;
  GateConfig config;
  config.hosts = &ctx_.hosts;
  config.local_address = local_address_;
  config.api_key = ctx_.options.api_key;
  config.max_body_bytes = ctx_.options.max_body_bytes;
  verdict_ = gate_request(head, config);
  http11_ = req.version() == 11;
  keep_alive_ = req.keep_alive() && served_ + 1 < kKeepAliveMax && !ctx_.stopping.load();

  switch (verdict_.action) {
    case GateAction::kRefuse: refuse(*verdict_.error, verdict_.message, verdict_.close, verdict_.dialect); return;
    case GateAction::kDropBody:
      keep_body_ = false;
      read_body();
      return;
    case GateAction::kAnswerThenClose:
      answer_without_body();
      close_after_write_ = true;
      return;
    case GateAction::kReadDecisionBody: break;
  }
  try {
    decoder_ = std::make_unique<BodyDecoder>(verdict_.encoding, ctx_.options.max_body_bytes, &grant_);
  } catch (const std::bad_alloc&) {
    refuse(http_error::kOverloaded, "out of memory for the request body; retry later", true, verdict_.route.dialect);
    return;
  }
  keep_body_ = true;
  read_body();
}

void Connection::read_body() {
  set_phase(Phase::kBody);
  if (parser_->is_done()) {
    body_done();
    return;
  }
  arm(ctx_.options.body_timeout_seconds);
  const auto expect = parser_->get()[http::field::expect];
  if (http11_ && beast::iequals(expect, "100-continue")) {
    // The client waits for this before it sends the body (curl does for large ones). Written
    // asynchronously under the body deadline: a client that reads nothing (a full send buffer)
    // stalls only its own connection, never an I/O thread.
    asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (self->phase_ == Phase::kClosed) return;
                        if (ec) {
                          self->close();
                          return;
                        }
                        self->wait_body_bytes();
                      });
    return;
  }
  wait_body_bytes();
}

void Connection::wait_body_bytes() {
  if (buffer_.size() > 0) {
    read_body_some();
    return;
  }
  // Nothing buffered: wait for the socket to be readable holding no body buffer (thousands of
  // stalled uploads then cost a few KiB each, and nothing is left behind when they end).
  chunk_.reset();
  socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
    if (self->phase_ == Phase::kClosed) return;
    if (ec) {
      self->on_body(ec);
      return;
    }
    self->read_body_some();
  });
}

void Connection::read_body_some() {
  if (!chunk_) chunk_ = std::make_unique<char[]>(kBodyChunk);
  auto& req = parser_->get();
  req.body().data = chunk_.get();
  req.body().size = kBodyChunk;
  http::async_read_some(socket_, buffer_, *parser_,
                        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_body(ec); });
}

void Connection::on_body(beast::error_code ec) {
  if (phase_ == Phase::kClosed) return;
  auto& req = parser_->get();
  const std::size_t n = chunk_ ? kBodyChunk - req.body().size : 0;
  if (ec == http::error::need_buffer) ec = {};
  const Dialect dialect = keep_body_ ? verdict_.route.dialect : Dialect::kSystemOne;
  if (n > 0) {
    raw_seen_ += n;
    if (keep_body_) {
      const DecodeStatus st = decoder_->feed(std::string_view(chunk_.get(), n), body_);
      if (st == DecodeStatus::kTooLarge || raw_seen_ > ctx_.options.max_body_bytes) {
        disarm();
        body_size_ = std::max(body_size_, body_.size());
        refuse(http_error::kTooLarge,
               "the request body exceeds " + std::to_string(ctx_.options.max_body_bytes) + " bytes (--max-body)", true,
               dialect);
        return;
      }
      if (st == DecodeStatus::kOverBudget) {
        disarm();
        ctx_.metrics.count_overload("body_budget");
        refuse(http_error::kOverloaded, "the server holds too many request bodies at once (--body-budget); retry later",
               true, dialect);
        return;
      }
      if (st == DecodeStatus::kCorrupt) {
        disarm();
        refuse(http_error::kUnreadableBody, unreadable_body_message(), true, dialect);
        return;
      }
    } else if (raw_seen_ > kDiscardLimit) {
      disarm();
      answer_without_body();
      close_after_write_ = true;
      return;
    }
  }
  if (ec) {
    disarm();
    if (chunk_too_large_) {
      refuse(http_error::kTooLarge,
             "the request body exceeds " + std::to_string(ctx_.options.max_body_bytes) + " bytes (--max-body)", true,
             dialect);
      return;
    }
    if (timed_out_) {
      refuse(http_error::kTimeout,
             "the request body did not arrive within " + seconds_text(ctx_.options.body_timeout_seconds) +
                 " s (--body-timeout)",
             true, dialect);
      return;
    }
    if (ec == http::error::partial_message || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted || ec == asio::error::broken_pipe) {
      close();  // the client left mid-body
      return;
    }
    refuse(http_error::kUnreadableBody, unreadable_body_message(), true, dialect);
    return;
  }
  if (!parser_->is_done()) {
    wait_body_bytes();
    return;
  }
  disarm();
  body_done();
}

void Connection::body_done() {
  chunk_.reset();
  if (!keep_body_) {
    answer_without_body();
    return;
  }
  if (decoder_->finish() != DecodeStatus::kOk) {
    refuse(http_error::kUnreadableBody, unreadable_body_message(), true, verdict_.route.dialect);
    return;
  }
  decoder_.reset();
  body_size_ = std::max(body_size_, body_.size());
  decide();
}

void Connection::answer_without_body() {
  send(route_reply(verdict_.route, verdict_.method_label, ctx_.handlers), false);
}

void Connection::decide() {
  set_phase(Phase::kWork);
  if (auto refused = refuse_path_model(verdict_.route, ctx_.handlers)) {
    release_body();
    send(std::move(*refused), false);
    return;
  }
  // Parse + validate, and decode + preprocess the images, off the I/O threads and off the engine
  // thread, before the body takes a queue slot: a refused body or image is answered at once (never
  // behind a running decision), with the bytes the engine would answer. The pool's threads bound
  // how many bodies are prepared at once (docs/COMPATIBILITY.md "limits and guards").
  // This is the body's one parse: the route key is cut from its top-level members, and the job
  // carries the parsed request to the engine thread.
  asio::post(ctx_.validators, [self = shared_from_this()] {
    std::optional<Reply> refused;
    // The contract the body is read in (/v1/decisions: by its shape, docs/PROTOCOL.md §7.1).
    Dialect contract = self->verdict_.route.dialect;
    try {
      std::vector<JsonMemberText> members;
      self->prepared_ =
          self->ctx_.handlers.engine.prepare(self->body_, self->verdict_.route.dialect, &contract, &members);
      self->route_key_ = route_key(self->body_, members);
    } catch (...) {
      // A refused body (the engine's 4xx) or an engine fault (500), in the body's contract.
      refused = failure_reply(std::current_exception(), contract, self->verdict_.route.label, self->ctx_.handlers);
    }
    asio::post(self->socket_.get_executor(), [self, contract, refused = std::move(refused)]() mutable {
      if (self->phase_ == Phase::kClosed) {
        self->prepared_.reset();
        return;
      }
      self->verdict_.route.dialect = contract;  // answers, queue errors and the engine use the body's contract
      if (refused) {
        self->release_body();
        self->send(std::move(*refused), false);
        return;
      }
      // The prepared images' pixel values count against the body budget until the answer.
      if (!self->grant_.resize(self->grant_.bytes() + self->prepared_->image_bytes())) {
        self->prepared_.reset();
        self->ctx_.metrics.count_overload("body_budget");
        self->refuse(http_error::kOverloaded,
                     "the server holds too many decoded images at once (--body-budget); retry later", false,
                     self->verdict_.route.dialect);
        return;
      }
      self->submit();
    });
  });
}

void Connection::submit() {
  std::weak_ptr<Connection> weak = weak_from_this();
  const int fd = socket_.native_handle();
  auto still_wanted = [weak, fd] {
    const auto self = weak.lock();
    if (!self || self->gone_.load()) return false;
    pollfd p{};
    p.fd = fd;
    p.events = POLLIN;
    // A reset (or a full close seen after the probe) reads as POLLERR / POLLHUP.
    return !(poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0);
  };
  // Holds the connection until the job is over (the reference cycle job -> callback -> connection
  // -> job ends when on_job_done or a cancel drops the connection's reference).
  auto on_finished = [s = shared_from_this()] { asio::post(s->socket_.get_executor(), [s] { s->on_job_done(); }); };
  job_ = ctx_.scheduler.submit(std::move(*prepared_), std::move(still_wanted), std::move(on_finished));
  prepared_.reset();
  std::string().swap(body_);
  if (!job_) {
    ctx_.metrics.count_overload("queue_full");
    release_body();
    send(queue_full_reply(verdict_.route.dialect), false);
    return;
  }
  job_deadline_ = job_->enqueued + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(ctx_.options.timeout_seconds));
  poll_job();
}

bool Connection::peer_gone() {
  if (gone_.load()) return true;
  pollfd p{};
  p.fd = socket_.native_handle();
  const short peer_closed = poll_peer_closed_event();  // POLLRDHUP; 0 where the system has none
  p.events = static_cast<short>(POLLIN | peer_closed);
  if (poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
    gone_.store(true);
    return true;
  }
  if (peer_closed != 0 && (p.revents & peer_closed) != 0 && !probed_ && http11_) {
    // The client stopped sending: a half-close (it still reads) or a full close. An interim
    // 100 answer (which HTTP/1.1 clients skip) tells them apart: a closed socket answers it
    // with a reset, seen at the next check. Non-blocking: when it does not fit, it is not sent.
    probed_ = true;
    if (send_nonblocking(p.fd, kContinue.data(), kContinue.size()) < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      gone_.store(true);
      return true;
    }
  }
  return false;
}

void Connection::poll_job() {
  if (!job_ || phase_ == Phase::kClosed) return;
  const JobState st = ctx_.scheduler.state(job_);
  if (st == JobState::kQueued) {
    const bool expired = Clock::now() >= job_deadline_;
    const bool gone = !expired && peer_gone();
    if ((expired || gone) && ctx_.scheduler.cancel(job_)) {
      job_.reset();
      release_body();
      if (gone) {
        // Logged and counted as 499 (the client closed the request), not as an overload 503.
        ctx_.log.request(verdict_.method_label, verdict_.route.label, 499, t0_, 0);
        close();
        return;
      }
      ctx_.metrics.count_overload("queue_timeout");
      send(queue_timeout_reply(verdict_.route.dialect), false);
      return;
    }
  }
  if (st == JobState::kDone || st == JobState::kCancelled) return;  // on_job_done follows
  // A running job whose client left stops at the engine's next prefill chunk (Job::stop); it then
  // ends kCancelled and on_job_done logs the 499.
  if (st == JobState::kRunning && !job_->stop.load() && peer_gone()) ctx_.scheduler.cancel(job_);
  poll_timer_.expires_after(kPollInterval);
  poll_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->poll_job();
  });
}

void Connection::on_job_done() {
  if (phase_ == Phase::kClosed) job_.reset();
  if (!job_) return;
  poll_timer_.cancel();
  const std::shared_ptr<Job> job = std::move(job_);
  job_.reset();
  release_body();
  if (job->state == JobState::kCancelled) {
    // Dropped by the scheduler (the client was gone when its turn came) or stopped while running
    // (the client left meanwhile).
    ctx_.log.request(verdict_.method_label, verdict_.route.label, 499, t0_, 0);
    close();
    return;
  }
  if (job->decision) {
    const Decision& d = *job->decision;
    ctx_.metrics.observe_decision(d.timings, d.input_tokens, job->queue_seconds, d.reused_tokens);
  }
  std::int64_t tokens = 0;
  Reply r = decision_reply(*job, verdict_.route.dialect, verdict_.route.label, route_key_, ctx_.handlers, tokens);
  send(std::move(r), false, tokens);
}

void Connection::release_body() {
  // The body (and its share of the body budget) is released before the answer goes out (a 413
  // may have buffered up to --max-body).
  const std::size_t held = std::max(body_.capacity(), grant_.bytes());
  std::string().swap(body_);
  decoder_.reset();
  chunk_.reset();
  grant_.release();
  trim_heap(std::max(held, body_size_));
  body_size_ = 0;
}

void Connection::refuse(const HttpError& error, const std::string& message, bool close_after, Dialect dialect) {
  release_body();
  send(error_reply(error, dialect, message), close_after);
}

void Connection::send(Reply reply, bool close_after, std::int64_t tokens) {
  close_after = close_after || close_after_write_ || !keep_alive_ || ctx_.stopping.load();
  ctx_.log.request(verdict_.method_label, verdict_.route.label, reply.status, t0_, tokens);
  out_ = serialize(reply, close_after, http11_, verdict_.head);
  close_after_write_ = close_after;
  set_phase(Phase::kWrite);
  arm(kWriteSeconds);
  asio::async_write(socket_, asio::buffer(out_),
                    [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_write(ec); });
}

void Connection::on_write(beast::error_code ec) {
  if (phase_ == Phase::kClosed) return;
  disarm();
  std::string().swap(out_);
  ++served_;
  if (ec) {
    close();
    return;
  }
  if (close_after_write_) {
    linger_close();
    return;
  }
  read_request();
}

void start_connection(ConnectionContext& ctx, tcp::socket socket) {
  std::make_shared<Connection>(ctx, std::move(socket))->launch();
}

void shutdown_connection(const std::shared_ptr<Connection>& c) { c->shutdown_async(); }

}  // namespace clef::server
