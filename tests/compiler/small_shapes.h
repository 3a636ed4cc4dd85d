// samples/small_shapes.json read by the compiler's tests: per sample, the -D values at which
// `mkc verify`'s interpreter runs it (the file says more).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace mkc::testing {

// sample name -> parameter -> value; the test fails when the file cannot be read.
inline std::map<std::string, std::map<std::string, int64_t>> small_shapes() {
  std::ifstream in("samples/small_shapes.json");
  REQUIRE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  std::map<std::string, std::map<std::string, int64_t>> out;
  for (const auto& [sample, values] : j.at("shapes").items()) {
    for (const auto& [name, v] : values.items()) out[sample][name] = v.get<int64_t>();
  }
  return out;
}

// Every sample (samples/*.mks, by name) with its small shape, in name order; a sample the file
// gives no shape fails the test.
inline std::map<std::string, std::map<std::string, int64_t>> samples_at_small_shapes() {
  const auto shapes = small_shapes();
  std::map<std::string, std::map<std::string, int64_t>> out;
  for (const auto& entry : std::filesystem::directory_iterator("samples")) {
    if (entry.path().extension() != ".mks") continue;
    const std::string name = entry.path().stem().string();
    const auto s = shapes.find(name);
    REQUIRE_MESSAGE(s != shapes.end(), name << " has no small shape");
    out[name] = s->second;
  }
  return out;
}

}  // namespace mkc::testing
