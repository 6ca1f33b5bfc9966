// Temporary files to delete when the process is stopped by SIGINT or SIGTERM
// (Ctrl-C during convert/quantize would otherwise leave a half-written
// `<output>.tmp-<pid>` behind). Outputs themselves are only ever renamed into place
// when complete, so they need no cleanup.
//
// The table is fixed-size and the handler only calls unlink() and re-raises the
// signal with its default action, so it is async-signal-safe. Registration is
// thread-safe.
#pragma once

#include <string>

namespace hf2q {

// Installs the SIGINT/SIGTERM handlers (the tool's main calls it; idempotent).
void install_interrupt_cleanup();

// Registers `path` for deletion on interrupt; returns a slot to release, or −1 when
// the table is full or the path too long (the file is then only removed by normal
// error handling).
int register_temp_file(const std::string& path);
void release_temp_file(int slot);

}  // namespace hf2q
