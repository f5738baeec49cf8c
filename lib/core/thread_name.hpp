// name_this_thread: the name a debugger, top -H and /proc/<pid>/task show
// for a thread sova starts, so that a user sees whose threads they are.
#pragma once

#include <pthread.h>

namespace sova::detail {

/// At most 15 characters (the kernel's limit); a longer or refused name
/// leaves the thread's name as it was.
inline void name_this_thread(const char* name) noexcept { (void)pthread_setname_np(pthread_self(), name); }

}  // namespace sova::detail
