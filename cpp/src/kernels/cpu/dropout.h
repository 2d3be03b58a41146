#pragma once
// The dropout keep decision (ops/dropout_hash.h: one definition for every device) under the kernels' names.
#include "ops/dropout_hash.h"

namespace qkv::kernels {

using ops::dropout_hash;
using ops::dropout_threshold;

}  // namespace qkv::kernels
