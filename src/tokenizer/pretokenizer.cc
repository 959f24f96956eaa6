#include "tokenizer/pretokenizer.h"

namespace pileprep::internal {

std::vector<std::string_view> PretokenizeToVector(std::string_view text) {
  std::vector<std::string_view> out;
  Pretokenize(text, [&](std::string_view piece) { out.push_back(piece); });
  return out;
}

}  // namespace pileprep::internal
