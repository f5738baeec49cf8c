// sova_torch — c10::OutOfMemoryError at run time (torch_errors.hpp).
#include "torch_errors.hpp"

#include "sova_torch.h"
#include "state.hpp"

#include <cxxabi.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <typeinfo>
#include <vector>

namespace sova::torch_adapter {
namespace {

/// c10::SourceLocation, as PyTorch declares it (function, file, line).
struct SourceLocation {
  const char* function;
  const char* file;
  std::uint32_t line;
};

/// c10::Error::Error(SourceLocation, std::string): `this` first.
using ErrorCtor = void (*)(void* self, SourceLocation where, std::string message);

struct Binding {
  ErrorCtor ctor = nullptr;
  std::type_info* oom_type = nullptr;
  void** oom_vtable = nullptr;  // the vtable symbol; the object's vptr is 2 words in
};
std::atomic<Binding*> g_binding{nullptr};

/// Far more than sizeof(c10::Error) in any PyTorch (about 150 bytes).
constexpr std::size_t kExceptionBytes = 1024;

/// __cxa_throw's destructor: the object's own virtual destructor (slot 0 of
/// an Itanium vtable is the complete-object destructor).
void destroy_thrown(void* object) {
  using Dtor = void (*)(void*);
  void** vptr = *static_cast<void***>(object);
  reinterpret_cast<Dtor>(vptr[0])(object);
}

class BadAlloc : public std::bad_alloc {
 public:
  explicit BadAlloc(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

[[noreturn]] void throw_bound(const Binding& b, const std::string& message) {
  void* object = __cxxabiv1::__cxa_allocate_exception(kExceptionBytes);
  std::memset(object, 0, kExceptionBytes);
  try {
    b.ctor(object, SourceLocation{"sova_torch_malloc", "lib/adapters/torch/allocator.cpp", 0}, message);
  } catch (...) {
    __cxxabiv1::__cxa_free_exception(object);
    throw;
  }
  *static_cast<void***>(object) = b.oom_vtable + 2;  // OutOfMemoryError's vptr
  __cxxabiv1::__cxa_throw(object, b.oom_type, destroy_thrown);
}

}  // namespace

void throw_out_of_memory(const std::string& message) {
  if (const Binding* b = g_binding.load(std::memory_order_acquire)) throw_bound(*b, message);
  throw BadAlloc(message);
}

}  // namespace sova::torch_adapter

using namespace sova::torch_adapter;

int sova_torch_bind_torch(const char* libraries) {
  if (libraries == nullptr) {
    set_last_error("sova_torch_bind_torch: libraries is NULL");
    return cudaErrorInvalidValue;
  }
  static Binding binding;  // written once, before it is published
  if (g_binding.load() != nullptr) return cudaSuccess;
  // The classes' vtable and type_info are emitted where they are used (no key
  // function), so look in each library PyTorch has loaded, in the order given.
  // RTLD_NOLOAD: only libraries already loaded; no copy is loaded.
  std::vector<void*> handles;
  std::string list(libraries);
  for (std::size_t start = 0; start <= list.size();) {
    std::size_t end = list.find(':', start);
    if (end == std::string::npos) end = list.size();
    const std::string path = list.substr(start, end - start);
    if (!path.empty())
      if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD)) handles.push_back(h);
    start = end + 1;
  }
  auto find = [&](const char* name) -> void* {
    for (void* h : handles)
      if (void* p = dlsym(h, name)) return p;
    return dlsym(RTLD_DEFAULT, name);
  };
  Binding b;
  void* ctor = find("_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
  if (ctor == nullptr)
    ctor = find("_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
  b.ctor = reinterpret_cast<ErrorCtor>(ctor);
  b.oom_type = static_cast<std::type_info*>(find("_ZTIN3c1016OutOfMemoryErrorE"));
  b.oom_vtable = static_cast<void**>(find("_ZTVN3c1016OutOfMemoryErrorE"));
  if (b.ctor == nullptr || b.oom_type == nullptr || b.oom_vtable == nullptr) {
    set_last_error(std::string("c10::OutOfMemoryError not found in the ") + std::to_string(handles.size()) +
                   " loaded libraries given (constructor " + (b.ctor ? "found" : "missing") + ", type_info " +
                   (b.oom_type ? "found" : "missing") + ", vtable " + (b.oom_vtable ? "found" : "missing") + ")");
    return cudaErrorNotSupported;
  }
  // Prove it: the thrown object must be a std::exception carrying the message.
  const std::string probe = "sova: probe of c10::OutOfMemoryError";
  bool ok = false;
  try {
    throw_bound(b, probe);
  } catch (const std::exception& e) {
    ok = std::strstr(e.what(), probe.c_str()) != nullptr;
  } catch (...) {
  }
  if (!ok) {
    set_last_error("the c10::OutOfMemoryError probe did not catch as std::exception with its message");
    return cudaErrorNotSupported;
  }
  binding = b;
  g_binding.store(&binding, std::memory_order_release);
  return cudaSuccess;
}
