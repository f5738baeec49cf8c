// SOVA_TLS_INITIAL_EXEC: the TLS model of sova's hot thread_local variables.
//
// Initial-exec makes each access one load off the thread pointer (no
// __tls_get_addr call on the fast path), but marks the library STATIC_TLS:
// glibc then places its whole TLS block (cudart_static's 4 KiB, 4 KiB-aligned
// one included) in the small static surplus when the library is dlopen()ed,
// which fails ("cannot allocate memory in static TLS block"). The Python
// package's build (-Dpython=true, loaded by ctypes) defines SOVA_DYNAMIC_TLS
// and uses the default model instead.
#pragma once

#if defined(SOVA_DYNAMIC_TLS)
#define SOVA_TLS_INITIAL_EXEC
#else
#define SOVA_TLS_INITIAL_EXEC [[gnu::tls_model("initial-exec")]]
#endif
