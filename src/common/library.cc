// The shared library libswitchml (cmake/install.cmake) is the layers' static
// libraries linked whole; this file gives it a translation unit of its own
// and a symbol that says which version it is.
#include "switchml/version.h"

namespace switchml {
extern "C" const char* switchml_version() { return kVersion; }
}  // namespace switchml
