// Links pileprep::core from the installed package.
#include <cstdio>

#include "pileprep/indexed_dataset.h"

int main() {
  std::printf("GPT-2 tokens are stored as %s\n",
              pileprep::DTypeName(pileprep::DTypeForVocabSize(50257)));
  return 0;
}
