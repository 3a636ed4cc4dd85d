// Port choice: the device port a rank's verbs transport uses, from MKC_IB_HCA or the first active
// one, and why none would do when none does.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "runtime/net/verbs.h"
#include "runtime/net/verbs_calls.h"

namespace mkc::rt::net {
namespace {

const char* port_state_name(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN:
      return "down";
    case IBV_PORT_INIT:
      return "init";
    case IBV_PORT_ARMED:
      return "armed";
    case IBV_PORT_ACTIVE:
      return "active";
    case IBV_PORT_ACTIVE_DEFER:
      return "active (deferred)";
    default:
      return "unknown";
  }
}

}  // namespace

VerbsPort choose_port(const VerbsApi& api, const std::string& hca) {
  errno = 0;
  int n = 0;
  ibv_device** list = api.get_device_list(&n);
  if (list == nullptr) {
    throw EnvironmentError(fmt::format(
        "verbs: no RDMA device: ibv_get_device_list failed: {} (no RDMA driver in this kernel?)",
        errno_text(errno ? errno : ENODEV)));
  }
  struct FreeList {
    const VerbsApi& api;
    ibv_device** list;
    ~FreeList() { api.free_device_list(list); }
  } free_list{api, list};
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) names.push_back(api.get_device_name(list[i]));
  if (n == 0) {
    throw EnvironmentError(
        "verbs: no RDMA device: libibverbs found none (no NIC here, or its kernel driver or "
        "rdma-core provider is not installed)");
  }
  // The devices to look at, in order, with the port each is restricted to (0: any).
  std::vector<std::pair<int, int>> wanted;
  if (hca.empty()) {
    for (int i = 0; i < n; ++i) wanted.push_back({i, 0});
  } else {
    size_t start = 0;
    while (start <= hca.size()) {
      size_t comma = hca.find(',', start);
      if (comma == std::string::npos) comma = hca.size();
      std::string item = hca.substr(start, comma - start);
      start = comma + 1;
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      if (item.empty()) continue;
      int port = 0;
      if (const auto colon = item.find(':'); colon != std::string::npos) {
        char* end = nullptr;
        const long p = std::strtol(item.c_str() + colon + 1, &end, 10);
        if (end == item.c_str() + colon + 1 || *end != '\0' || p < 1 || p > 255) {
          throw UserError(
              fmt::format("MKC_IB_HCA={}: `{}` is not a device or device:port", hca, item));
        }
        port = static_cast<int>(p);
        item.resize(colon);
      }
      const auto it = std::find(names.begin(), names.end(), item);
      if (it == names.end()) {
        std::string found;
        for (const std::string& s : names) found += (found.empty() ? "" : ", ") + s;
        throw EnvironmentError(fmt::format(
            "verbs: MKC_IB_HCA={} names `{}`, which is not an RDMA device here; found: {}", hca,
            item, found));
      }
      wanted.push_back({static_cast<int>(it - names.begin()), port});
    }
    if (wanted.empty()) throw UserError(fmt::format("MKC_IB_HCA=`{}` names no device", hca));
  }
  std::string seen;
  for (const auto& [index, only_port] : wanted) {
    const std::string& dev = names[static_cast<size_t>(index)];
    errno = 0;
    ibv_context* ctx = api.open_device(list[index]);
    if (ctx == nullptr) {
      seen += fmt::format("{}{}: cannot open ({})", seen.empty() ? "" : "; ", dev,
                          errno_text(errno ? errno : EIO));
      continue;
    }
    struct Close {
      const VerbsApi& api;
      ibv_context* ctx;
      ~Close() { api.close_device(ctx); }
    } close{api, ctx};
    ibv_device_attr attr{};
    if (const int rc = api.query_device(ctx, &attr); rc != 0) {
      seen += fmt::format("{}{}: ibv_query_device failed ({})", seen.empty() ? "" : "; ", dev,
                          errno_text(rc > 0 ? rc : errno));
      continue;
    }
    for (int p = 1; p <= attr.phys_port_cnt; ++p) {
      if (only_port != 0 && p != only_port) continue;
      ibv_port_attr pa{};
      if (const int rc = api.query_port(ctx, static_cast<uint8_t>(p), &pa); rc != 0) {
        seen += fmt::format("{}{} port {}: ibv_query_port failed ({})", seen.empty() ? "" : "; ",
                            dev, p, errno_text(rc > 0 ? rc : errno));
        continue;
      }
      if (pa.state == IBV_PORT_ACTIVE) return VerbsPort{dev, p, pa};
      seen += fmt::format("{}{} port {}: {}", seen.empty() ? "" : "; ", dev, p,
                          port_state_name(pa.state));
    }
    if (only_port > attr.phys_port_cnt) {
      seen += fmt::format("{}{} has no port {} ({} port(s))", seen.empty() ? "" : "; ", dev,
                          only_port, attr.phys_port_cnt);
    }
  }
  throw EnvironmentError(fmt::format("verbs: no active RDMA port{}: {}",
                                     hca.empty() ? "" : " among MKC_IB_HCA=" + hca, seen));
}

ibv_context* open_named_device(const VerbsApi& api, const std::string& name,
                               const std::string& where) {
  int n = 0;
  errno = 0;
  ibv_device** list = api.get_device_list(&n);
  if (list == nullptr) {
    verbs::throw_call("ibv_get_device_list", errno ? errno : EIO, -1, where, __FILE__, __LINE__);
  }
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n && ctx == nullptr; ++i) {
    if (name != api.get_device_name(list[i])) continue;
    errno = 0;
    ctx = api.open_device(list[i]);
    if (ctx == nullptr) {
      const int e = errno ? errno : EIO;
      api.free_device_list(list);
      verbs::throw_call("ibv_open_device", e, -1, where, __FILE__, __LINE__);
    }
  }
  api.free_device_list(list);
  if (ctx == nullptr) {
    throw TransportError(-1, fmt::format("verbs: device {} went away{}", name, where));
  }
  return ctx;
}

bool is_efa_device(const VerbsApi& api, ibv_context* ctx, efadv_device_attr* attr) {
  if (api.efa_query_device == nullptr) return false;
  *attr = efadv_device_attr{};
  return api.efa_query_device(ctx, attr, sizeof(*attr)) == 0;
}

}  // namespace mkc::rt::net
