#pragma once
// Everything a C++ user of qkv includes: the three models, their configs and checkpoints, tokenizers, sampling,
// quantized weights, LoRA, pretrained GPT-2 folders and the streaming loaders, devices and threads.
#include "qkv/checkpoint_loader.h"
#include "qkv/classifier.h"
#include "qkv/config.h"
#include "qkv/cpu.h"
#include "qkv/device.h"
#include "qkv/error.h"
#include "qkv/import.h"
#include "qkv/language_model.h"
#include "qkv/lora.h"
#include "qkv/lora_files.h"
#include "qkv/memory.h"
#include "qkv/optimizer.h"
#include "qkv/pretrained_loader.h"
#include "qkv/quantize.h"
#include "qkv/safetensors.h"
#include "qkv/sampling.h"
#include "qkv/seq2seq.h"
#include "qkv/step_loss.h"
#include "qkv/tensor.h"
#include "qkv/thread_pool.h"
#include "qkv/tokenizer.h"
#include "qkv/workspace.h"

namespace qkv {
// The library version ("major.minor.patch"); the JS package checks its .wasm against it. Defined in the library, so
// that a program built against these headers alone (no QKV_VERSION of its own) has it.
const char* version();
}  // namespace qkv
