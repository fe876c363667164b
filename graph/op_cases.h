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
