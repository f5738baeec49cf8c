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

void* symbol(void* handle, const char* name) noexcept {
  void* p = dlsym(handle, name);
  return p != nullptr ? p : dlsym(RTLD_DEFAULT, name);
}

}  // namespace

void throw_out_of_memory(const std::string& message) {
  if (const Binding* b = g_binding.load(std::memory_order_acquire)) throw_bound(*b, message);
  throw BadAlloc(message);
}

}  // namespace sova::torch_adapter

using namespace sova::torch_adapter;

int sova_torch_bind_torch(const char* library) {
  if (library == nullptr) {
    set_last_error("sova_torch_bind_torch: library is NULL");
    return cudaErrorInvalidValue;
  }
  // Already loaded by PyTorch: RTLD_NOLOAD finds it without loading a copy.
  void* handle = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr) {
    set_last_error(std::string("sova_torch_bind_torch: not loaded: ") + library);
    return cudaErrorNotSupported;
  }
  static Binding binding;  // written once, before it is published
  if (g_binding.load() != nullptr) return cudaSuccess;
  Binding b;
  void* ctor = symbol(handle,
      "_ZN3c105ErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
  if (ctor == nullptr)
    ctor = symbol(handle,
        "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
  b.ctor = reinterpret_cast<ErrorCtor>(ctor);
  b.oom_type = static_cast<std::type_info*>(symbol(handle, "_ZTIN3c1016OutOfMemoryErrorE"));
  b.oom_vtable = static_cast<void**>(symbol(handle, "_ZTVN3c1016OutOfMemoryErrorE"));
  if (b.ctor == nullptr || b.oom_type == nullptr || b.oom_vtable == nullptr) {
    set_last_error("sova_torch_bind_torch: c10::OutOfMemoryError's symbols not found "
                   "(out of memory will raise RuntimeError)");
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
    set_last_error("sova_torch_bind_torch: the c10::OutOfMemoryError probe failed "
                   "(out of memory will raise RuntimeError)");
    return cudaErrorNotSupported;
  }
  binding = b;
  g_binding.store(&binding, std::memory_order_release);
  return cudaSuccess;
}
