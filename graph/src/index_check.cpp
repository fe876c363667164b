#include "graph/index_check.h"

#include <deque>
#include <map>
#include <mutex>
#include <tuple>

#include "kiln/error.h"

namespace kiln::graph {

namespace {

struct Registry {
  std::mutex mu;
  std::deque<IndexSite> sites; // by id
  std::map<std::tuple<std::string, std::string, int64_t, std::string, uint32_t, uint32_t, std::string>, int64_t> ids;
};

Registry& registry() {
  static auto* r = new Registry; // never destroyed: kernels may report at exit
  return *r;
}

} // namespace

int64_t index_site(const IndexSite& site) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto key = std::make_tuple(site.op, site.what, site.bound, std::string(site.where.file_name()), site.where.line(),
                             site.where.column(), site.range);
  auto [it, fresh] = r.ids.try_emplace(std::move(key), static_cast<int64_t>(r.sites.size()));
  if (fresh) r.sites.push_back(site);
  return it->second;
}

IndexSite index_site_of(int64_t id) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  KILN_ASSERT(id >= 0 && id < static_cast<int64_t>(r.sites.size()), "unknown index site");
  return r.sites[static_cast<size_t>(id)];
}

void throw_index_error(const int64_t* err) {
  if (err[0] == 0) return;
  const IndexSite s = index_site_of(err[0] - 1);
  const std::string range = s.range.empty() ? std::to_string(s.bound) + " classes" : s.range;
  throw Error(s.op, s.what + " " + std::to_string(err[1]) + " is out of range for " + range +
                        ": valid values are [0, " + std::to_string(s.bound) +
                        ") (checked in the kernel; no result was returned)",
              s.where);
}

} // namespace kiln::graph
