#pragma once
/// \file op_cases.h
/// Case labels generated from ops.def by category, so that a switch over OpKind handles a
/// whole family in one place and a new op of that family needs no line there, while the
/// switch still lists every op (no `default:`): a new op of another family makes it
/// incomplete, which the compiler names (-Wswitch). Inside a switch:
///
///   #define KILN_OP(e, name, arity, cat, types) KILN_IF_ELEMENTWISE_##cat(case graph::OpKind::e:)
///   #include "graph/ops.def"
///   #undef KILN_OP
///     return elementwise_rule(...);

// KILN_IF_ELEMENTWISE_<category>(x): x for Unary, Binary and Ternary ops, else nothing.
#define KILN_IF_ELEMENTWISE_Leaf(x)
#define KILN_IF_ELEMENTWISE_Unary(x) x
#define KILN_IF_ELEMENTWISE_Binary(x) x
#define KILN_IF_ELEMENTWISE_Ternary(x) x
#define KILN_IF_ELEMENTWISE_Reduce(x)
#define KILN_IF_ELEMENTWISE_Movement(x)
#define KILN_IF_ELEMENTWISE_Scan(x)
#define KILN_IF_ELEMENTWISE_Contraction(x)
#define KILN_IF_ELEMENTWISE_Attention(x)
#define KILN_IF_ELEMENTWISE_Custom(x)

// KILN_IF_NOT_ELEMENTWISE_<category>(x): the complement.
#define KILN_IF_NOT_ELEMENTWISE_Leaf(x) x
#define KILN_IF_NOT_ELEMENTWISE_Unary(x)
#define KILN_IF_NOT_ELEMENTWISE_Binary(x)
#define KILN_IF_NOT_ELEMENTWISE_Ternary(x)
#define KILN_IF_NOT_ELEMENTWISE_Reduce(x) x
#define KILN_IF_NOT_ELEMENTWISE_Movement(x) x
#define KILN_IF_NOT_ELEMENTWISE_Scan(x) x
#define KILN_IF_NOT_ELEMENTWISE_Contraction(x) x
#define KILN_IF_NOT_ELEMENTWISE_Attention(x) x
#define KILN_IF_NOT_ELEMENTWISE_Custom(x) x

// KILN_IF_NOT_REDUCE_<category>(x): x for every op but reductions.
#define KILN_IF_NOT_REDUCE_Leaf(x) x
#define KILN_IF_NOT_REDUCE_Unary(x) x
#define KILN_IF_NOT_REDUCE_Binary(x) x
#define KILN_IF_NOT_REDUCE_Ternary(x) x
#define KILN_IF_NOT_REDUCE_Reduce(x)
#define KILN_IF_NOT_REDUCE_Movement(x) x
#define KILN_IF_NOT_REDUCE_Scan(x) x
#define KILN_IF_NOT_REDUCE_Contraction(x) x
#define KILN_IF_NOT_REDUCE_Attention(x) x
#define KILN_IF_NOT_REDUCE_Custom(x) x

// KILN_IF_CATEGORY(cat, C, x...): x when the row's category `cat` is C, else nothing, and
// KILN_IF_NOT_CATEGORY(cat, C, x...), the complement: one selector for every category, e.g.
//   #define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_CATEGORY(cat, Unary, case graph::OpKind::e:)
// for "every op but the unary ones". Likewise KILN_IF_TYPES(types, T, x...) and
// KILN_IF_NOT_TYPES(types, T, x...) by the row's dtype rule (Float, Bool, Any), which nest inside
// the former: KILN_IF_CATEGORY(cat, Unary, KILN_IF_TYPES(types, Float, ...)) for the float-only
// unary ops. x may hold commas (an enumerator list: `e,`).
#define KILN_IF_CATEGORY(cat, C, ...) KILN_PP_IF_SAME(cat, C, __VA_ARGS__)
#define KILN_IF_NOT_CATEGORY(cat, C, ...) KILN_PP_IF_NOT_SAME(cat, C, __VA_ARGS__)
#define KILN_IF_TYPES(types, T, ...) KILN_PP_IF_SAME(types, T, __VA_ARGS__)
#define KILN_IF_NOT_TYPES(types, T, ...) KILN_PP_IF_NOT_SAME(types, T, __VA_ARGS__)
// The names these compare: the categories and the dtype rules of ops.def.
#define KILN_PP_SAME_Leaf_Leaf KILN_PP_PROBE
#define KILN_PP_SAME_Unary_Unary KILN_PP_PROBE
#define KILN_PP_SAME_Binary_Binary KILN_PP_PROBE
#define KILN_PP_SAME_Ternary_Ternary KILN_PP_PROBE
#define KILN_PP_SAME_Reduce_Reduce KILN_PP_PROBE
#define KILN_PP_SAME_Movement_Movement KILN_PP_PROBE
#define KILN_PP_SAME_Scan_Scan KILN_PP_PROBE
#define KILN_PP_SAME_Contraction_Contraction KILN_PP_PROBE
#define KILN_PP_SAME_Attention_Attention KILN_PP_PROBE
#define KILN_PP_SAME_Custom_Custom KILN_PP_PROBE
#define KILN_PP_SAME_Any_Any KILN_PP_PROBE
#define KILN_PP_SAME_Float_Float KILN_PP_PROBE
#define KILN_PP_SAME_Bool_Bool KILN_PP_PROBE

// Preprocessor helpers of the selectors. KILN_PP_IS_PROBE(t) is 1 where the token t is a macro
// defined as KILN_PP_PROBE (which expands to two arguments and so shifts the 1 into second
// place), else 0: how a selector asks "is this row in that list?" with one #define per member.
// KILN_PP_KEEP_1 / KILN_PP_DROP_0 keep their arguments, KILN_PP_KEEP_0 / KILN_PP_DROP_1 drop them.
#define KILN_PP_IF_SAME(a, b, ...) KILN_PP_CAT(KILN_PP_KEEP_, KILN_PP_IS_PROBE(KILN_PP_SAME_##a##_##b))(__VA_ARGS__)
#define KILN_PP_IF_NOT_SAME(a, b, ...) KILN_PP_CAT(KILN_PP_DROP_, KILN_PP_IS_PROBE(KILN_PP_SAME_##a##_##b))(__VA_ARGS__)
#define KILN_PP_PROBE ~, 1
#define KILN_PP_SECOND(a, b, ...) b
#define KILN_PP_IS_PROBE(...) KILN_PP_SECOND(__VA_ARGS__, 0, ~)
#define KILN_PP_CAT(a, b) KILN_PP_CAT2(a, b)
#define KILN_PP_CAT2(a, b) a##b
#define KILN_PP_KEEP_0(...)
#define KILN_PP_KEEP_1(...) __VA_ARGS__
#define KILN_PP_DROP_0(...) __VA_ARGS__
#define KILN_PP_DROP_1(...)
