#pragma once
/// \file text.h
/// The graph's text form. It prints and parses back to the same (hash-consed) nodes:
///
///     %0 = input f32[2,3] i0=1
///     %1 = const f32[] f0=1.5
///     %2 = expand f32[2,3] (%1)
///     %3 = add f32[2,3] (%0, %2)
///     return %3

#include <string>
#include <string_view>
#include <vector>

#include "graph/node.h"

namespace kiln::graph {

/// Prints every node reachable from `roots`, inputs first, then a `return` line.
std::string print_graph(const std::vector<NodeRef>& roots);
/// Parses the text form; throws kiln::Error (op "parse") naming the line on malformed input.
/// Input leaves with a live id come back as that node, with its data.
std::vector<NodeRef> parse_graph(std::string_view text);

} // namespace kiln::graph
