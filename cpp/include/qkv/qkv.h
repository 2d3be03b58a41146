#pragma once
// Everything a C++ user of qkv includes.
#include "qkv/cpu.h"
#include "qkv/device.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/step_loss.h"
#include "qkv/tensor.h"
#include "qkv/thread_pool.h"
#include "qkv/workspace.h"

namespace qkv {
// The library version ("major.minor.patch"); the JS package checks its .wasm against it.
inline const char* version() { return QKV_VERSION; }
}  // namespace qkv
