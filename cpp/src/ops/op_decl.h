#pragma once
// Helpers that turn ops/op_list.def's argument lists into C++: QKV_PARAMS(QKV_ARGS_gemm) is gemm's parameter
// list ("bool trans_a, bool trans_b, int M, ..."), QKV_NAMES(QKV_ARGS_gemm) its names ("trans_a, trans_b, M,
// ..."), QKV_LEADING_NAMES the names each after a comma (to follow other arguments). An argument's kind fixes
// its C++ type (op_list.def's table); worker words (wu32, wf32) are no C++ argument and expand to nothing.
// Why macros: the list must reach the compiler of every build (native, CUDA, wasm) with no generation step,
// and a virtual method's parameter list can come from nowhere else.
#include <cstddef>
#include <cstdint>
#include <span>

#define QKV_TYPE_span Span
#define QKV_TYPE_cspan CSpan
#define QKV_TYPE_scratch Span
#define QKV_TYPE_ints std::span<int32_t>
#define QKV_TYPE_ptr float*
#define QKV_TYPE_cptr const float*
#define QKV_TYPE_bytes const uint8_t*
#define QKV_TYPE_ids const Ids&
#define QKV_TYPE_count int
#define QKV_TYPE_size size_t
#define QKV_TYPE_int int
#define QKV_TYPE_f32 float
#define QKV_TYPE_stepf float
#define QKV_TYPE_flag bool
#define QKV_TYPE_act Act
#define QKV_TYPE_seed uint64_t
#define QKV_TYPE_shape const AttentionShape&
#define QKV_TYPE_ranges std::span<const AdamRange>
#define QKV_TYPE_hyper const AdamHyper&

// Each C++ argument, as ", type name" / ", name"; worker words as nothing.
#define QKV_PARAM_(kind, name) QKV_PARAM_##kind(name)
#define QKV_NAME_(kind, name) QKV_NAME_##kind(name)
#define QKV_PARAM_span(n) , QKV_TYPE_span n
#define QKV_PARAM_cspan(n) , QKV_TYPE_cspan n
#define QKV_PARAM_scratch(n) , QKV_TYPE_scratch n
#define QKV_PARAM_ints(n) , QKV_TYPE_ints n
#define QKV_PARAM_ptr(n) , QKV_TYPE_ptr n
#define QKV_PARAM_cptr(n) , QKV_TYPE_cptr n
#define QKV_PARAM_bytes(n) , QKV_TYPE_bytes n
#define QKV_PARAM_ids(n) , QKV_TYPE_ids n
#define QKV_PARAM_count(n) , QKV_TYPE_count n
#define QKV_PARAM_size(n) , QKV_TYPE_size n
#define QKV_PARAM_int(n) , QKV_TYPE_int n
#define QKV_PARAM_f32(n) , QKV_TYPE_f32 n
#define QKV_PARAM_stepf(n) , QKV_TYPE_stepf n
#define QKV_PARAM_flag(n) , QKV_TYPE_flag n
#define QKV_PARAM_act(n) , QKV_TYPE_act n
#define QKV_PARAM_seed(n) , QKV_TYPE_seed n
#define QKV_PARAM_shape(n) , QKV_TYPE_shape n
#define QKV_PARAM_ranges(n) , QKV_TYPE_ranges n
#define QKV_PARAM_hyper(n) , QKV_TYPE_hyper n
#define QKV_PARAM_wu32(n)
#define QKV_PARAM_wf32(n)
#define QKV_NAME_span(n) , n
#define QKV_NAME_cspan(n) , n
#define QKV_NAME_scratch(n) , n
#define QKV_NAME_ints(n) , n
#define QKV_NAME_ptr(n) , n
#define QKV_NAME_cptr(n) , n
#define QKV_NAME_bytes(n) , n
#define QKV_NAME_ids(n) , n
#define QKV_NAME_count(n) , n
#define QKV_NAME_size(n) , n
#define QKV_NAME_int(n) , n
#define QKV_NAME_f32(n) , n
#define QKV_NAME_stepf(n) , n
#define QKV_NAME_flag(n) , n
#define QKV_NAME_act(n) , n
#define QKV_NAME_seed(n) , n
#define QKV_NAME_shape(n) , n
#define QKV_NAME_ranges(n) , n
#define QKV_NAME_hyper(n) , n
#define QKV_NAME_wu32(n)
#define QKV_NAME_wf32(n)

// The list without its leading comma (the first token `_` is dropped with it).
#define QKV_DROP_FIRST_(first, ...) __VA_ARGS__
#define QKV_DROP_FIRST(...) QKV_DROP_FIRST_(__VA_ARGS__)
#define QKV_PARAMS(args) QKV_DROP_FIRST(_ args(QKV_PARAM_))
#define QKV_NAMES(args) QKV_DROP_FIRST(_ args(QKV_NAME_))
#define QKV_LEADING_NAMES(args) args(QKV_NAME_)
