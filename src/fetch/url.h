// Where a URL's `user:password@` ends, for the two places that must find it the same way: the
// redaction of every URL printed (RedactUrl) and the split of --url into base and query
// (ParseShardSource).
#ifndef PILEPREP_SRC_FETCH_URL_H_
#define PILEPREP_SRC_FETCH_URL_H_

#include <algorithm>
#include <cstddef>
#include <string>
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

// A string printed where it was refused as a URL or as a local directory (OpenHttpSource's
// "not an http:// or https:// URL", the shard job's "--url X: no such directory"), which may be a
// URL mistyped without "://" ("https:/alice:pw@host/x", "alice:pw@host/pile"): the password of a
// user:password@ before the first '/', after a scheme and its slashes if any ("alice:" is no
// scheme: no '/' follows it), becomes "...". The rest is kept, so that a directory name that only
// looks so ("run-10:00@node1") is still recognisable; one with no ':' before its '@' is unchanged.
inline std::string MaskNonUrlPassword(std::string_view s) {
  std::string out(s);
  size_t start = 0;
  const size_t colon = out.find(':');
  constexpr std::string_view kSchemeChars =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-";
  if (colon != std::string::npos && colon > 0 && kSchemeChars.find(out[0]) < 52 &&
      out.find_first_not_of(kSchemeChars) == colon && colon + 1 < out.size() &&
      out[colon + 1] == '/') {
    start = std::min(out.find_first_not_of('/', colon + 1), out.size());
  }
  const size_t slash = out.find('/', start);
  const size_t at = out.rfind('@', slash);  // the last '@' before the first '/' (npos: anywhere)
  if (at == std::string::npos || at < start) return out;
  const size_t pw = out.find(':', start);
  if (pw != std::string::npos && pw < at) out.replace(pw + 1, at - pw - 1, "...");
  return out;
}

}  // namespace pileprep::internal

#endif  // PILEPREP_SRC_FETCH_URL_H_
