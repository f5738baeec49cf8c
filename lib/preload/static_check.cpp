// libsova_preload.so — the check at load: says once, on stderr, when the
// program cannot be routed because it carries the CUDA runtime inside it.
//
// Why it cannot: a program linked with the static runtime (nvcc's default,
// -cudart static) calls its own copy of cudaMallocAsync, bound at link time;
// the dynamic linker never looks the name up, so no preloaded definition can
// take its place. Such a program runs unchanged, on the driver's pool.
//
// How it is told (reading the executable's ELF file, /proc/self/exe):
//   - it lists libcudart.so.<N> as needed: dynamic, routed (if N is the major
//     this library was built for, SOVA_CUDART_SONAME; another major's
//     symbols carry another version, which this library does not define:
//     said too);
//   - else it carries CUDA kernels (a .nv_fatbin or .nvFatBinSegment
//     section: kernels register through the runtime, so that runtime is
//     inside) or defines a runtime function in its symbol table
//     (cudaMallocAsync, cudaLaunchKernel, __cudaRegisterFatBinary): static.
// Not seen: a stripped program with the static runtime and no kernels, and
// shared libraries that carry the static runtime (the runtime's fatbin
// registration inside them works the same way; only the executable is read).
// SOVA_PRELOAD_QUIET=1 silences the message.
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#ifndef SOVA_CUDART_SONAME
#error "SOVA_CUDART_SONAME (libcudart.so.<major>) is set by lib/preload/meson.build"
#endif

namespace sova::preload {
namespace {

struct ExeFacts {
  std::string needed_cudart;  ///< the libcudart.so.* it lists as needed, or ""
  bool fatbin = false;
  bool defines_runtime = false;
};

bool starts_with(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }

/// Reads what the check needs from a 64-bit ELF image of `size` bytes.
/// Every offset is bounds-checked: a file that is not what it claims gives
/// false (nothing said).
bool inspect(const unsigned char* image, std::size_t size, ExeFacts& facts) {
  if (size < sizeof(Elf64_Ehdr) || std::memcmp(image, ELFMAG, SELFMAG) != 0 || image[EI_CLASS] != ELFCLASS64)
    return false;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(image);
  if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) ||
      eh->e_shoff + std::size_t{eh->e_shnum} * sizeof(Elf64_Shdr) > size || eh->e_shstrndx >= eh->e_shnum)
    return false;
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(image + eh->e_shoff);
  auto in_file = [&](const Elf64_Shdr& s) { return s.sh_type != SHT_NOBITS && s.sh_offset + s.sh_size <= size; };
  // A NUL-terminated string at `offset` of string table section `index`, or "".
  auto string_at = [&](std::size_t index, std::size_t offset) -> const char* {
    if (index >= eh->e_shnum || !in_file(sh[index]) || offset >= sh[index].sh_size) return "";
    const char* s = reinterpret_cast<const char*>(image + sh[index].sh_offset + offset);
    return std::memchr(s, '\0', sh[index].sh_size - offset) != nullptr ? s : "";
  };
  for (std::size_t i = 0; i < eh->e_shnum; ++i) {
    const Elf64_Shdr& s = sh[i];
    const char* name = string_at(eh->e_shstrndx, s.sh_name);
    if (std::strcmp(name, ".nv_fatbin") == 0 || std::strcmp(name, ".nvFatBinSegment") == 0) facts.fatbin = true;
    if (!in_file(s)) continue;
    if (s.sh_type == SHT_DYNAMIC) {
      const auto* dyn = reinterpret_cast<const Elf64_Dyn*>(image + s.sh_offset);
      for (std::size_t k = 0; k < s.sh_size / sizeof(Elf64_Dyn) && dyn[k].d_tag != DT_NULL; ++k) {
        if (dyn[k].d_tag != DT_NEEDED) continue;
        const char* lib = string_at(s.sh_link, dyn[k].d_un.d_val);
        if (starts_with(lib, "libcudart.so")) facts.needed_cudart = lib;
      }
    }
    if (s.sh_type == SHT_SYMTAB && s.sh_entsize == sizeof(Elf64_Sym)) {
      const auto* sym = reinterpret_cast<const Elf64_Sym*>(image + s.sh_offset);
      for (std::size_t k = 0; k < s.sh_size / sizeof(Elf64_Sym); ++k) {
        if (sym[k].st_shndx == SHN_UNDEF) continue;
        const char* n = string_at(s.sh_link, sym[k].st_name);
        if (std::strcmp(n, "cudaMallocAsync") == 0 || std::strcmp(n, "cudaLaunchKernel") == 0 ||
            std::strcmp(n, "__cudaRegisterFatBinary") == 0) {
          facts.defines_runtime = true;
          break;
        }
      }
    }
  }
  return true;
}

bool inspect_file(const char* path, ExeFacts& facts) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool ok = false;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    void* map = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (map != MAP_FAILED) {
      ok = inspect(static_cast<const unsigned char*>(map), static_cast<std::size_t>(st.st_size), facts);
      ::munmap(map, static_cast<std::size_t>(st.st_size));
    }
  }
  ::close(fd);
  return ok;
}

std::string exe_name() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "this program";
  return std::string(buf, static_cast<std::size_t>(n));
}

[[gnu::constructor]] void check_at_load() {
  const char* quiet = std::getenv("SOVA_PRELOAD_QUIET");
  if (quiet != nullptr && std::strcmp(quiet, "1") == 0) return;
  ExeFacts facts;
  if (!inspect_file("/proc/self/exe", facts)) return;
  if (!facts.needed_cudart.empty()) {
    if (facts.needed_cudart != SOVA_CUDART_SONAME) {
      std::fprintf(stderr,
                   "sova preload: %s uses %s, but this libsova_preload.so routes %s's calls: its "
                   "cudaMallocAsync/cudaMemPool* calls are not routed to sova. Use a sova built "
                   "against the same CUDA major version.\n",
                   exe_name().c_str(), facts.needed_cudart.c_str(), SOVA_CUDART_SONAME);
    }
    return;
  }
  if (facts.fatbin || facts.defines_runtime) {
    std::fprintf(stderr,
                 "sova preload: %s carries the CUDA runtime linked in statically (nvcc's default, "
                 "-cudart static): its cudaMallocAsync/cudaFreeAsync/cudaMemPool* calls cannot be "
                 "routed to sova and use the driver's pool. Build it with `nvcc -cudart shared` "
                 "(or link libcudart.so) to route them. (SOVA_PRELOAD_QUIET=1 silences this.)\n",
                 exe_name().c_str());
  }
}

}  // namespace
}  // namespace sova::preload
