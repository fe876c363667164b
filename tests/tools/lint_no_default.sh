#!/bin/sh
# lint_no_default.sh ROOT: fails (exit 1, listing them) on every `default:` label in the C++ sources
# of kiln's libraries under ROOT (graph, autograd, codegen, runtime, frontend). A switch there lists
# every value of its enum (op kinds above all: a new op must be a -Werror=switch error wherever it
# is not handled; graph/op_cases.h generates the case labels of whole families), so `default:` only
# hides the places a new value is forgotten. A `default:` that is truly needed carries the marker
# comment `// default-ok: <why>` on its line. Comments are skipped; block comments are not parsed.
root=${1:?usage: lint_no_default.sh ROOT}
cd "$root" || exit 2
found=$(for dir in graph autograd codegen runtime frontend; do
  [ -d "$dir" ] && grep -rnE --include='*.cpp' --include='*.h' --include='*.def' 'default[[:space:]]*:' "$dir"
done | grep -vE '//[[:space:]]*default-ok:[[:space:]]*[^[:space:]]' |
  awk '{ code = $0; sub(/^[^:]*:[0-9]+:/, "", code); sub(/\/\/.*/, "", code);
         if (code ~ /(^|[^[:alnum:]_])default[[:space:]]*:/) print }')
if [ -n "$found" ]; then
  echo "lint_no_default: a default: label in a switch (list the cases; see graph/op_cases.h):"
  echo "$found"
  exit 1
fi
echo "lint_no_default: no default: labels"
