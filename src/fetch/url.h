// Where a URL's `user:password@` ends, for the two places that must find it the same way: the
// redaction of every URL printed (RedactUrl) and the split of --url into base and query
// (ParseShardSource).
#ifndef PILEPREP_SRC_FETCH_URL_H_
#define PILEPREP_SRC_FETCH_URL_H_

#include <cstddef>
#include <string_view>

namespace pileprep::internal {

// The index just past the '@' that ends the user info of the authority starting at `host_start`
// (just past "://"), or `host_start` when there is none. RFC 3986 (and libcurl) end the authority
// at the first '/', '?' or '#'. A password holding one of them unencoded ("http://alice:p?w@host/",
// "https://bob:pa/ss@host/") ends it early, at "alice:p", whose port is no number: no client can
// fetch that URL, so there the user info is taken to end at the last '@' before the first '/'
// after the first '@' that follows, and the password is never printed as a host or a path. A URL
// whose authority is a valid host[:port] keeps the RFC reading ("https://host?x=a@b" has host
// "host" and query "x=a@b"; "https://host/a@b" has the path "/a@b").
inline size_t UserinfoEnd(std::string_view url, size_t host_start) {
  if (host_start > url.size()) return url.size();
  const size_t rfc_end = url.find_first_of("/?#", host_start);
  const std::string_view authority =
      url.substr(host_start,
                 rfc_end == std::string_view::npos ? std::string_view::npos : rfc_end - host_start);
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) {
    return host_start + at + 1;
  }
  if (rfc_end == std::string_view::npos) return host_start;
  // A port, if any, after the host (an IPv6 literal's colons are inside its brackets).
  const size_t host_end = !authority.empty() && authority[0] == '[' ? authority.find(']') : 0;
  const size_t colon =
      host_end == std::string_view::npos ? std::string_view::npos : authority.find(':', host_end);
  bool port_ok = colon == std::string_view::npos;
  if (!port_ok) {
    const std::string_view port = authority.substr(colon + 1);
    port_ok = !port.empty() && port.find_first_not_of("0123456789") == std::string_view::npos;
  }
  if (port_ok) return host_start;
  const size_t first_at = url.find('@', rfc_end);
  if (first_at == std::string_view::npos) return host_start;
  const size_t path = url.find('/', first_at);
  return url.rfind('@', path == std::string_view::npos ? url.size() : path) + 1;
}

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_FETCH_URL_H_
