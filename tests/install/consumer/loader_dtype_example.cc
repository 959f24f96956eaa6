// Links pileprep::loader alone and calls the dtype helpers its headers declare: they must not need
// pileprep::core (an undefined reference at link time when they were defined there).
#include <cstdio>
#include <string>

#include "pileprep/indexed_dataset_view.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto view = pileprep::IndexedDatasetView::Open(argv[1]);
  if (!view.ok()) {
    std::fprintf(stderr, "%s\n", std::string(view.status().message()).c_str());
    return 1;
  }
  const pileprep::TokenDType dtype = (*view)->dtype();
  std::printf("%s, %zu bytes per token\n", pileprep::DTypeName(dtype), pileprep::DTypeSize(dtype));
  return 0;
}
