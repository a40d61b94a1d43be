// SPDX-License-Identifier: MIT
#include "core/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <vector>

#include "core/error.h"

namespace clef {
namespace {

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const noexcept { EVP_MD_CTX_free(c); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

struct FileCloser {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

MdCtx new_sha256() {
  MdCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    throw InternalError("OpenSSL: cannot initialise SHA-256");
  }
  return ctx;
}

std::string finish_hex(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, md, &len) != 1) throw InternalError("OpenSSL: SHA-256 final failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 15]);
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::span<const std::byte> data) {
  MdCtx ctx = new_sha256();
  if (EVP_DigestUpdate(ctx.get(), data.data(), data.size()) != 1) {
    throw InternalError("OpenSSL: SHA-256 update failed");
  }
  return finish_hex(ctx.get());
}

std::string sha256_file_hex(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
  if (!f) throw IoError(path + ": cannot open: " + errno_message(errno));
  MdCtx ctx = new_sha256();
  std::vector<unsigned char> buf(std::size_t{4} << 20);
  for (;;) {
    const std::size_t n = std::fread(buf.data(), 1, buf.size(), f.get());
    if (n > 0 && EVP_DigestUpdate(ctx.get(), buf.data(), n) != 1) {
      throw InternalError("OpenSSL: SHA-256 update failed");
    }
    if (n < buf.size()) {
      if (std::ferror(f.get())) throw IoError(path + ": read error");
      break;
    }
  }
  return finish_hex(ctx.get());
}

}  // namespace clef
