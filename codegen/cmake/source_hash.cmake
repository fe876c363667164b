# Writes OUT: a header defining KILN_CODEGEN_HASH, a hash of the code generator's
# sources. It is part of the disk-cache key, so a change to the emitter never
# loads object code that an older emitter produced.
string(REPLACE "|" ";" SOURCES "${SOURCES}") # passed '|'-separated through the shell
set(all "")
foreach(f ${SOURCES})
  file(SHA256 "${f}" h)
  string(APPEND all "${h}")
endforeach()
string(SHA256 digest "${all}")
string(SUBSTRING "${digest}" 0 16 digest)
set(content "#pragma once\n#define KILN_CODEGEN_HASH \"${digest}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT "${old}" STREQUAL "${content}")
  file(WRITE "${OUT}" "${content}")
endif()
