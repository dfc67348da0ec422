// The public headers from C++: they compile, and the calls link, which they
// only do with C linkage (a C++ caller would otherwise look for mangled names).
#include <tessera/tessera.h>

#include <cstdio>
#include <cstring>

int main() {
  int32_t order[5];
  tsr_dataset_epoch_order(order, 5, 1, 0);
  for (int i = 0; i < 5; i++)
    if (order[i] != i) return 1;
  const char *words = tsr_strerror(TSR_ENOMEM);
  std::printf("tsr_strerror(TSR_ENOMEM) = %s\n", words);
  return words && std::strlen(words) > 0 ? 0 : 1;
}
