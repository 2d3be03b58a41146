#include "kernels/cuda/library.h"

#include <dlfcn.h>

#include "qkv/error.h"

namespace qkv::kernels::cuda {

void* open_library(const std::string& soname, const char* op) {
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef QKV_CUDA_LIBRARY_DIR
  if (!lib) lib = dlopen((std::string(QKV_CUDA_LIBRARY_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
  check(lib != nullptr, op, " (cuda): cannot load ", soname, ": ", dlerror());
  return lib;
}

void* library_symbol(void* library, const std::string& soname, const char* name, const char* op) {
  void* f = dlsym(library, name);
  check(f != nullptr, op, " (cuda): ", soname, " has no ", name);
  return f;
}

}  // namespace qkv::kernels::cuda
