// qkv::version (qkv/qkv.h): the version the library was built as (CMake's project version).
#include "qkv/qkv.h"

namespace qkv {

const char* version() { return QKV_VERSION; }

}  // namespace qkv
