// kiln::version(): the library's own version, compiled in from the generated header.

#include "kiln/version.h"

namespace kiln {

std::string_view version() noexcept { return KILN_VERSION_STRING; }

} // namespace kiln
