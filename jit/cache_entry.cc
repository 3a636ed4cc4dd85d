#include "jit/cache_entry.h"

#include <fmt/format.h>

#include <sstream>

#include "support/hash.h"

namespace mkc::jit {
namespace {

// What the checksum covers besides the payload: the key, the kernel and every figure.
std::string entry_meta(const std::string& key, const std::string& kernel, size_t nc, size_t np,
                       size_t nl, const JitOutput& r) {
  return fmt::format("{} {} {}\n{} {} {} {} {} {} {}", kEntryMagic, key, kernel, nc, np, nl,
                     r.registers, r.spill_bytes, r.stack_bytes, r.smem_bytes);
}

// Whether `cubin` defines `kernel`: its name is a string of the ELF string table.
bool has_symbol(const std::string& cubin, const std::string& kernel) {
  return cubin.find(std::string(1, '\0') + kernel + std::string(1, '\0')) != std::string::npos;
}

}  // namespace

std::string encode_entry(const std::string& key, const std::string& kernel, const JitOutput& out) {
  const std::string payload = out.cubin + out.ptx + out.log;
  const std::string meta =
      entry_meta(key, kernel, out.cubin.size(), out.ptx.size(), out.log.size(), out);
  return fmt::format("{} {:x}\n", meta, fnv1a(meta + "\n" + payload)) + payload;
}

bool decode_entry(const std::string& data, const std::string& key, const std::string& kernel,
                  JitOutput* out) {
  std::istringstream in(data);
  std::string magic, k, name;
  size_t nc = 0, np = 0, nl = 0;
  JitOutput figures;
  uint64_t sum = 0;
  if (!(in >> magic >> k >> name >> nc >> np >> nl >> figures.registers >> figures.spill_bytes >>
        figures.stack_bytes >> figures.smem_bytes >> std::hex >> sum) ||
      magic != kEntryMagic || k != key || name != kernel)
    return false;
  in.get();
  const std::streamoff pos = in.tellg();
  if (pos < 0) return false;
  const size_t header = static_cast<size_t>(pos);
  if (header > data.size() || nc > data.size() || np > data.size() || nl > data.size() ||
      data.size() - header != nc + np + nl)
    return false;
  const std::string payload = data.substr(header);
  if (fnv1a(entry_meta(key, kernel, nc, np, nl, figures) + "\n" + payload) != sum) return false;
  const std::string cubin = payload.substr(0, nc);
  if (!has_symbol(cubin, kernel)) return false;
  out->cubin = cubin;
  out->ptx = payload.substr(nc, np);
  out->log = payload.substr(nc + np, nl);
  out->registers = figures.registers;
  out->spill_bytes = figures.spill_bytes;
  out->stack_bytes = figures.stack_bytes;
  out->smem_bytes = figures.smem_bytes;
  return true;
}

}  // namespace mkc::jit
