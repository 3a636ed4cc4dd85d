// The text of failed verbs calls and completions: throw_call() and describe_wc_status().
#include "runtime/net/verbs_calls.h"

#include <fmt/format.h>

#include "runtime/net/verbs.h"

namespace mkc::rt::net {
namespace verbs {

[[noreturn]] void throw_call(const char* call, int err, int peer, const std::string& where,
                             const char* file, int line) {
  throw TransportError(peer, fmt::format("verbs: {}{} failed: {} at {}:{}", call, where,
                                         errno_text(err), file, line));
}

}  // namespace verbs

namespace {

const char* wc_status_name(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return "IBV_WC_SUCCESS";
    case IBV_WC_LOC_LEN_ERR:
      return "IBV_WC_LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR:
      return "IBV_WC_LOC_QP_OP_ERR";
    case IBV_WC_LOC_PROT_ERR:
      return "IBV_WC_LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR:
      return "IBV_WC_WR_FLUSH_ERR";
    case IBV_WC_REM_INV_REQ_ERR:
      return "IBV_WC_REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR:
      return "IBV_WC_REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR:
      return "IBV_WC_REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR:
      return "IBV_WC_RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "IBV_WC_RNR_RETRY_EXC_ERR";
    default:
      return "IBV_WC_?";
  }
}

const char* wc_status_hint(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
      return ": the peer's queue pair does not answer (its process exited, or the path to it is "
             "down)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return ": the peer had no receive posted (its proxy stopped)";
    case IBV_WC_REM_ACCESS_ERR:
      return ": the peer refused the write (its memory registration and this rank's view of it "
             "disagree)";
    case IBV_WC_WR_FLUSH_ERR:
      return ": the queue pair failed on an earlier request";
    case IBV_WC_LOC_PROT_ERR:
      return ": a local buffer is outside its memory registration";
    default:
      return "";
  }
}

}  // namespace

std::string describe_wc_status(const VerbsApi& api, ibv_wc_status status) {
  const char* text = api.wc_status_str != nullptr ? api.wc_status_str(status) : nullptr;
  return fmt::format("{} ({}, status {}){}", text != nullptr ? text : "no description",
                     wc_status_name(status), static_cast<int>(status), wc_status_hint(status));
}

}  // namespace mkc::rt::net
