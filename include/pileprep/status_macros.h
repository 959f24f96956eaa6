// Small Status helpers. Debian 12's Abseil (20220623) ships neither absl/log nor
// RETURN_IF_ERROR / ASSIGN_OR_RETURN, so pileprep keeps its own.
#ifndef PILEPREP_STATUS_MACROS_H_
#define PILEPREP_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PILEPREP_CONCAT_INNER_(a, b) a##b
#define PILEPREP_CONCAT_(a, b) PILEPREP_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` yields a non-OK absl::Status.
#define PILEPREP_RETURN_IF_ERROR(expr)                 \
  do {                                                 \
    ::absl::Status pileprep_status_ = (expr);          \
    if (!pileprep_status_.ok()) return pileprep_status_; \
  } while (0)

// `PILEPREP_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps an absl::StatusOr or returns its error.
#define PILEPREP_ASSIGN_OR_RETURN(lhs, expr) \
  PILEPREP_ASSIGN_OR_RETURN_IMPL_(PILEPREP_CONCAT_(pileprep_statusor_, __LINE__), lhs, expr)
#define PILEPREP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  if (!tmp.ok()) return std::move(tmp).status();        \
  lhs = std::move(tmp).value()

#endif  // PILEPREP_STATUS_MACROS_H_
